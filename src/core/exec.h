/* SPDX-License-Identifier: MIT */
#ifndef DM_EXEC_H
#define DM_EXEC_H

/* The exec core: the one place that runs a command in a container and
 * collects what it prints. A one-off run (src/core/runner.c, agents too)
 * and a persistent sandbox's exec (src/core/sandbox.c) each say where the
 * command goes (a target), what it is (a request) and where its output
 * goes (a sink), and get one result shape back, a cancel included.
 *
 * The command goes through the container's demesne-shim when the target
 * has one: under the seccomp filter, and the shim kills its whole process
 * group at the timeout or on cancel. Without one, through the engine: the
 * container's own process (its attach stream, for a one-off run whose
 * PID 1 is the command) or the engine's exec API, for a container made
 * without the shim. A container whose shim another server holds gets no
 * command by the engine's exec API (-EBUSY): the shim binary could only be
 * named there by a path the sandbox can change.
 * At the timeout or on cancel the engine path kills the container's PID 1
 * (a one-off run: the whole PID namespace goes), else the exec's process
 * group through a pidfd taken while it surely ran, else the backend's
 * exec interrupt. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "src/core/shimhost.h"
#include "src/basic/error.h"
#include "src/basic/headtail.h"

struct dm_exec_target {
        struct dm_backend *backend;
        const char *container;
        /* The container's shim, connected; NULL: the engine path. */
        struct dm_shimhost *shim;
        /* Engine path only. attached: the stream of the container's own
         * process, which is the command (borrowed; no exec is made). */
        struct dm_stream *attached;
        /* The container lives for this one command: a timeout or cancel
         * kills the container itself. */
        bool whole_container;
        /* The container runs demesne-shim (shim is NULL: another server
         * holds it): refused, with no engine exec (see above). */
        bool filter_exec;
};

struct dm_exec_request {
        const char *const *argv;
        const char *const *env; /* "K=V" over the container's; NULL: none */
        const char *cwd;        /* absolute; NULL: /out */
        const char *stdin_data; /* NULL: none (the command reads EOF) */
        size_t stdin_len;
        int64_t timeout_s; /* from when dm_exec starts; > 0 */
        int stop_fd;       /* readable: cancel (the caller's, or a limit's); -1: none */
};

/* Where the output goes: the capped head and tail of each stream (for the
 * result), optionally every byte to a file (a run's stdout.log and
 * stderr.log), optionally to a callback, and progress about once a second. */
struct dm_exec_sink {
        struct dm_headtail ht[3]; /* [1] stdout, [2] stderr */
        int log_fd[3];            /* -1: none */
        bool log_failed[3];
        int (*on_output)(void *userdata, int stream, const char *data, size_t len);
        void (*on_progress)(void *userdata, int64_t elapsed_ms, uint64_t output_bytes);
        void *userdata;
};

struct dm_exec_result {
        int exit_code;  /* 128+N when killed by signal N (137 after a timeout or cancel) */
        bool timed_out; /* the command ran out of timeout_s */
        bool cancelled; /* stop_fd fired: the command was killed, no drain */
};

/* A sink whose streams each keep cap bytes (head and tail), no log files. */
int dm_exec_sink_init(struct dm_exec_sink *s, size_t cap);
void dm_exec_sink_release(struct dm_exec_sink *s);
/* Bytes seen on stream (1 or 2), capped or not. */
uint64_t dm_exec_sink_total(const struct dm_exec_sink *s, int stream);
/* Stream 1 or 2's capped text: a malloc'd copy, which may hold NUL bytes;
 * NULL when out of memory. */
char *dm_exec_sink_text(struct dm_exec_sink *s, int stream, size_t *ret_len, bool *ret_truncated);

/* Runs req in t, feeding sink, until the command exits, times out or is
 * cancelled: 0 then, with *res filled (a cancel is res->cancelled, not an
 * error). Else a negative errno with err set (the shim or engine failed;
 * the command may not have run). */
int dm_exec(const struct dm_exec_target *t, const struct dm_exec_request *req, struct dm_exec_sink *sink,
            struct dm_exec_result *res, struct dm_error *err);

/* Environment layers merged for one command: layers[0] at the bottom,
 * each later layer's entry replacing an earlier one of the same name (the
 * shim and the engine would take the last of two anyway; merged, each name
 * appears once). The strings stay the layers'; the array is malloc'd
 * (NULL-terminated; NULL when out of memory). NULL layers are skipped. */
const char **dm_exec_env(const char *const *const *layers, size_t n);

#endif
