/* SPDX-License-Identifier: MIT */
#ifndef DM_SHIMHOST_H
#define DM_SHIMHOST_H

/* The host side of demesne-shim (src/shim/protocol.h): one listening unix
 * socket per container, in a directory the server owns, and commands run
 * through it with their output streamed into the same struct dm_stream_sink
 * the engine's streams use, so a caller can take either path.
 *
 * How a caller sets a container up:
 *   dm_shimhost_new(dir)                 dir = <state dir>/shim/<sandbox id>
 *   create the container with dm_shimhost_mounts() added to its mounts,
 *     argv = dm_shim_container_argv, init = false (the shim is PID 1)
 *   start it, inspect it, dm_shimhost_set_peer_pid(State.Pid)
 *   dm_shimhost_wait_ready()
 *   dm_shim_exec() ... (from any number of threads)
 *   dm_shimhost_free(); after the container is destroyed, dm_shimhost_remove_dir()
 *
 * A later server adopts a running container by calling dm_shimhost_new on
 * the same directory: the shim reconnects to the new socket by itself
 * (within about a second).
 *
 * Threading: everything on one struct dm_shimhost may be called from many
 * threads at once (DM_SHIM_MAX_EXECS commands per container); one struct
 * dm_shim_exec belongs to one thread at a time. dm_shimhost_free only after
 * every exec is freed.
 * Errors: 0 or a negative errno with the sentence in *err. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "src/shim/protocol.h"
#include "src/basic/error.h"

/* How long a command's output is still read after it was killed (a
 * timeout, a cancel), by every exec path: the shim's and the engine's. */
#define DM_DRAIN_AFTER_KILL_MS 5000
/* How long a started or adopted container's shim has to connect: a fresh
 * one may wait for a cold image's first start on a busy machine. */
#define DM_SHIM_READY_MS 30000

/* The shim binary: configured (the setting DEMESNE_SHIM_PATH, returned as
 * is even when missing, so the error names it), else the installed
 * <pkglibexecdir>/demesne-shim, else the one in the build tree this server
 * was built in. NULL when none exists. */
const char *dm_shim_binary_find(const char *configured);

/* Sets *err to "demesne-shim not found" naming bin (NULL: the places
 * searched) and the operator's ways out; returns -ENOENT. */
int dm_shim_binary_missing(const char *bin, struct dm_error *err);

/* The container's command: { DM_SHIM_BIN_PATH, NULL }. */
extern const char *const dm_shim_container_argv[];

struct dm_shimhost;

/* bin: the shim binary (dm_shim_binary_find), bind-mounted into the
 * container. Makes dir (0700, parents too) or takes over one a previous server made
 * (it must be a directory of this user that nobody else can write), and
 * listens on dir/shim.sock (0600, close-on-exec). -EBUSY while another live
 * server (or another dm_shimhost) holds the directory; -ENOENT when no shim
 * binary was found. */
int dm_shimhost_new(const char *dir, const char *bin, struct dm_shimhost **ret, struct dm_error *err);

/* The two read-only mounts the container needs: the shim binary at
 * DM_SHIM_BIN_PATH and the socket's directory at DM_SHIM_SOCK_DIR. The
 * strings belong to h. */
void dm_shimhost_mounts(const struct dm_shimhost *h, struct dm_mount ret[2]);
const char *dm_shimhost_dir(const struct dm_shimhost *h);

/* For a container whose root is not this user (a user namespace): the
 * directory becomes 0750 with group gid, the socket 0660 with that group,
 * so the sandbox's root can connect and nothing else on the host can; a
 * socket a later server binds there gets the same. Before start. */
int dm_shimhost_lend(struct dm_shimhost *h, unsigned gid, struct dm_error *err);

/* From now on accept only connections made by this process (the
 * container's PID 1 as the engine reports it, State.Pid): a command inside
 * the container can reach the socket too, and must not pass for the shim.
 * 0 accepts any peer (the default; for engines whose pids the server
 * cannot see). */
void dm_shimhost_set_peer_pid(struct dm_shimhost *h, int pid);

/* Waits until the shim has connected and said hello: -ETIMEDOUT when
 * deadline_ms (monotonic) passes first, -EPROTO when it speaks another
 * protocol version. */
int dm_shimhost_wait_ready(struct dm_shimhost *h, int64_t deadline_ms, struct dm_error *err);

struct dm_shim_request {
        const char *const *argv; /* required; argv[0] is looked up in the command's PATH */
        const char *const *env;  /* "K=V" on top of the container's environment; may be NULL */
        const char *cwd;         /* absolute; NULL = the container's WorkingDir */
        const void *stdin_data;  /* NULL: stdin is /dev/null. Else the bytes, then EOF; */
        size_t stdin_len;        /* the buffer must stay valid until the exec is freed */
        int64_t timeout_ms;      /* enforced by the shim (result timed_out); 0 = none */
        const struct dm_shim_rlimit *rlimits;
        size_t n_rlimits;
        bool clear_env;  /* start from an empty environment */
        bool keep_group; /* leave background processes running after the command
                                           exits (default: its process group is killed with it) */
        /* dm_shim_exec only: called about once a second while the command
         * runs (progress notifications); may be NULL. */
        void (*on_tick)(void *userdata);
        void *tick_userdata;
};

struct dm_shim_result {
        int exit_code;  /* 0..255; 128+N when killed by signal N */
        int signal;     /* N, or 0 */
        bool timed_out; /* killed at timeout_ms or at the host's deadline */
        bool killed;    /* killed on request: dm_shim_exec_kill, cancel */
        int pid;        /* the command's pid inside the container */
};

struct dm_shim_exec;

/* Takes a connection from the shim and starts the command: returns once
 * the shim said it started (*ret set) or why it could not: the shim's errno
 * and message, e.g. -ENOENT "cannot change to directory '/x': ...". A
 * program that does not exist is not an error here: it exits 127 with the
 * reason on stderr, as in a shell. -ETIMEDOUT when the shim did not answer
 * by deadline_ms (0 = 10 s from now); -ECANCELED when cancel_fd (-1 = none)
 * became readable first (the command may have started: the shim kills it
 * when the connection closes); -EAGAIN when the container's pids limit
 * left no room to fork; -EBUSY at DM_SHIM_MAX_EXECS running commands. */
int dm_shim_exec_start(struct dm_shimhost *h, const struct dm_shim_request *req, int cancel_fd, int64_t deadline_ms,
                       struct dm_shim_exec **ret, struct dm_error *err);

/* Streams output into sink and stdin out until the command's exit status
 * arrives: 0 then (dm_shim_exec_result is valid). Like dm_stream_pump:
 * -ETIMEDOUT when the monotonic deadline_ms passes (0 = none), -ECANCELED
 * when cancel_fd (-1 = none) is readable, both resumable; the sink's own
 * negative return; -ECONNRESET when the connection ended without an exit
 * status (the container stopped); -EPROTO on a malformed frame. */
int dm_shim_exec_pump(struct dm_shim_exec *e, const struct dm_stream_sink *sink, int cancel_fd, int64_t deadline_ms,
                      struct dm_error *err);

/* Sends signo to the command's whole process group, behind any stdin frame
 * in flight. For a SIGKILL while stdin is still being sent, or any signal
 * while a stdin frame is half sent, the connection's sending side is closed
 * instead, which the shim answers with SIGKILL: a command that does not
 * read its stdin cannot hold a kill up. Keep pumping to get the exit
 * status. 0 or -EINVAL for a bad signal. */
int dm_shim_exec_kill(struct dm_shim_exec *e, int signo);

/* After pump returned 0. -EAGAIN before. */
int dm_shim_exec_result(const struct dm_shim_exec *e, struct dm_shim_result *ret);
int dm_shim_exec_pid(const struct dm_shim_exec *e);

/* Closes the connection: a command still running is killed (process group,
 * SIGKILL) by the shim. NULL is fine. */
void dm_shim_exec_free(struct dm_shim_exec *e);

/* All of the above in one call. The shim is told the time left before
 * deadline_ms as the command's timeout (unless req->timeout_ms is shorter);
 * at the deadline (plus a short grace) the host kills it itself. Returns 0
 * when the command ran, a timeout included (ret->timed_out); -ECANCELED
 * when cancel_fd fired (the group is killed, ret filled, output until then
 * delivered); else an error. */
int dm_shim_exec(struct dm_shimhost *h, const struct dm_shim_request *req, const struct dm_stream_sink *sink,
                 int cancel_fd, int64_t deadline_ms, struct dm_shim_result *ret, struct dm_error *err);

/* Whether the shim holds a spare connection open to this host now: proof
 * that its container runs, at the cost of a poll() (no engine round
 * trip). False tells nothing: the shim may just be reconnecting. */
bool dm_shimhost_ready(struct dm_shimhost *h);

/* Stops listening and removes the socket; the directory stays, so the
 * container's bind mount stays valid for a later server. NULL is fine. */
void dm_shimhost_free(struct dm_shimhost *h);

/* After the container is gone: removes the socket and the directory. A
 * directory that does not exist is not an error. */
int dm_shimhost_remove_dir(const char *dir, struct dm_error *err);

#endif
