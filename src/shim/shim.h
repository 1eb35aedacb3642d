/* SPDX-License-Identifier: MIT */
#ifndef DM_SHIM_SHIM_H
#define DM_SHIM_SHIM_H

/* Internals of demesne-shim shared by its files. Nothing here is used by
 * the server. */

#include <linux/filter.h>
#include <stddef.h>
#include <sys/types.h>

#include "src/shim/protocol.h"

/* One line on stderr (the container's log): the shim has no other channel
 * for its own trouble. */
void shim_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Builds the seccomp program (libseccomp, then exported as classic BPF).
 * 0 or a negative errno. */
int shim_filter_build(struct sock_fprog *ret);
/* no_new_privs, then the personality filter and prog, on the calling
 * process: the shim loads them on itself once at start, so every command
 * it forks inherits them (the kernel's JIT makes a load cost about 0.2 ms,
 * more than the rest of a fork); `--exec` loads them before its execve.
 * 0 or -errno. */
int shim_filter_install(const struct sock_fprog *prog);

/* In the command's process, after chdir: 0 when the working directory is
 * fine, -EPERM when it is on procfs, -EXDEV when it lies outside the root
 * (reached through an fd), another -errno when it cannot be examined. */
int shim_check_cwd(void);
/* Closes every fd from 3 up but keep (-1: none): close_range, else one by
 * one up to RLIMIT_NOFILE. */
void shim_close_inherited(int keep);

struct shim_child {
        pid_t pid;          /* leads its own process group */
        int out_fd, err_fd; /* read ends, non-blocking, close-on-exec */
        int in_fd;          /* write end, non-blocking; -1 = stdin is /dev/null */
};

/* The environment a command starts from: the shim's own, copied at start. */
void shim_spawn_set_base_env(char **environ_copy);

/* The nice value commands start at (0: the shim's own). Set where the shim
 * holds the pids limit itself: see pids_check() in shim.c. */
void shim_spawn_set_nice(int nice);

/* Forks and runs one command: own process group, pipes for the streams,
 * rlimits, cwd, then execve with a PATH search, under the filter the shim
 * loaded on itself (shim_filter_install). A missing or
 * unrunnable program is not an error here: the child prints why on its
 * stderr and exits 127 or 126, as a shell does. 0, or a negative errno with
 * a sentence in msg (fork failed, a bad cwd or rlimit). */
int shim_spawn(const struct dm_shim_exec_msg *m, struct shim_child *ret, char *msg, size_t msg_len);

#endif
