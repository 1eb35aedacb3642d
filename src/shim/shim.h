/* SPDX-License-Identifier: MIT */
#ifndef DM_SHIM_SHIM_H
#define DM_SHIM_SHIM_H

/* Internals of demesne-shim shared by its files. Nothing here is used by
 * the server. */

#include <linux/filter.h>
#include <stdbool.h>
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
/* The same from fd `from` up. */
void shim_close_from(int from, int keep);

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
/* shim_spawn with two more descriptors for a warm shell (warm.c): tok_r
 * becomes its fd 3, cmd_fd its fd 4, neither close-on-exec. */
int shim_spawn_warm(const struct dm_shim_exec_msg *m, int tok_r, int cmd_fd, struct shim_child *ret, char *msg,
                    size_t msg_len);

/* The warm shell (warm.c): one `bash` started ahead of time, waiting on
 * fd 3 for a command it then runs with its own parser, so a `bash -c CMD`
 * request that fits what it was made for costs no fork and no exec.
 * shim_warm_init once at start (off: --no-warm; it reads DEMESNE_SHIM_WARM and the pids
 * cap; base_env may lose DEMESNE_SHIM_WARM); shim_warm_start from the loop
 * when nothing is pending (a no-op unless one is due); shim_warm_take for
 * every EXEC: 1 with *ret filled when the warm shell took the command (it
 * is then the command's process), 0 for the cold path; shim_warm_adopt
 * after the EXEC's handling: it may keep m (returns NULL) as what the next
 * warm shell is made for; shim_warm_reaped from the reaper: true when pid
 * was the idle warm shell (it is reaped then); shim_warm_done when a
 * command ends; shim_warm_pid: the idle warm shell's pid, 0 if none;
 * shim_warm_stop kills and reaps it. */
void shim_warm_init(char **base_env, unsigned long pids_max, bool off);
void shim_warm_start(void);
int shim_warm_take(const struct dm_shim_exec_msg *m, struct shim_child *ret);
struct dm_shim_exec_msg *shim_warm_adopt(struct dm_shim_exec_msg *m);
bool shim_warm_reaped(pid_t pid);
void shim_warm_done(void);
pid_t shim_warm_pid(void);
void shim_warm_stop(void);

#endif
