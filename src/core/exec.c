/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/exec.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/pidfd.h"
#include "src/basic/timeutil.h"

#define PROGRESS_INTERVAL_MS 1000

/* ---- the sink --------------------------------------------------------------- */

int dm_exec_sink_init(struct dm_exec_sink *s, size_t cap)
{
        memset(s, 0, sizeof(*s));
        s->log_fd[0] = s->log_fd[1] = s->log_fd[2] = -1;
        if (dm_headtail_init(&s->ht[1], cap) < 0 || dm_headtail_init(&s->ht[2], cap) < 0) {
                dm_exec_sink_release(s);
                return -ENOMEM;
        }
        return 0;
}

void dm_exec_sink_release(struct dm_exec_sink *s)
{
        dm_headtail_release(&s->ht[1]);
        dm_headtail_release(&s->ht[2]);
}

uint64_t dm_exec_sink_total(const struct dm_exec_sink *s, int stream)
{
        return s->ht[stream == 2 ? 2 : 1].total;
}

char *dm_exec_sink_text(struct dm_exec_sink *s, int stream, size_t *ret_len, bool *ret_truncated)
{
        return dm_headtail_finish(&s->ht[stream == 2 ? 2 : 1], ret_len, ret_truncated);
}

static int on_data(void *userdata, int stream, const char *data, size_t len)
{
        struct dm_exec_sink *s = userdata;

        if (stream != 2)
                stream = 1;
        dm_headtail_feed(&s->ht[stream], data, len);
        if (s->log_fd[stream] >= 0 && !s->log_failed[stream] && dm_write_all(s->log_fd[stream], data, len) < 0) {
                /* Keep running: the result still carries the capped copy. */
                s->log_failed[stream] = true;
                log_warning("writing %s.log failed: %s; the file is incomplete", stream == 1 ? "stdout" : "stderr",
                            strerror(errno));
        }
        return s->on_output ? s->on_output(s->userdata, stream, data, len) : 0;
}

struct tick {
        struct dm_exec_sink *sink;
        int64_t t0;
};

static void progress(struct tick *t)
{
        t->sink->on_progress(t->sink->userdata, dm_now_ms() - t->t0, t->sink->ht[1].total + t->sink->ht[2].total);
}

static void on_tick(void *userdata)
{
        progress(userdata);
}

/* ---- through the shim ------------------------------------------------------- */

static int exec_shim(const struct dm_exec_target *t, const struct dm_exec_request *req, struct dm_exec_sink *sink,
                     struct tick *tick, struct dm_exec_result *res, struct dm_error *err)
{
        struct dm_stream_sink ss = { .on_data = on_data, .userdata = sink };
        struct dm_shim_request sreq = {
                .argv = req->argv,
                .env = req->env,
                .cwd = req->cwd ? req->cwd : "/out",
                .stdin_data = req->stdin_data,
                .stdin_len = req->stdin_len,
                .on_tick = sink->on_progress ? on_tick : NULL,
                .tick_userdata = tick,
        };
        struct dm_shim_result sres;
        int r;

        r = dm_shim_exec(t->shim, &sreq, &ss, req->stop_fd, tick->t0 + req->timeout_s * 1000, &sres, err);
        if (r == -ECANCELED) {
                /* The shim killed the group; what it printed until then is in the sink. */
                dm_error_clear(err);
                res->cancelled = true;
                res->exit_code = 128 + SIGKILL;
                return 0;
        }
        if (r < 0)
                return r;
        res->exit_code = sres.exit_code;
        res->timed_out = sres.timed_out;
        return 0;
}

/* ---- through the engine ----------------------------------------------------- */

/* One SIGKILL to a process group can miss children forked while it is
 * delivered (a fork bomb refills the group faster than that), so repeat
 * until the group is empty: a killed process forks no more. Through the
 * pidfd, never the bare number: by now the leader may be gone and its pid
 * reused by an unrelated process of the host. */
static void kill_group(int pidfd, int pgid)
{
        int64_t deadline = dm_now_ms() + 5000;

        while (dm_pidfd_kill_group(pidfd, pgid, SIGKILL) == 0 && dm_now_ms() < deadline)
                usleep(10 * 1000);
}

/* A pidfd for the exec's leader, taken while the engine says that pid is
 * the exec's and running: the pid is asked for, the pidfd opened, and the
 * pid asked for again. If the exec still runs with that pid after the
 * pidfd exists, the pidfd is its process (a pid is not reused while its
 * process exists). -1 when the engine reports no pid or it changed. */
static int exec_pidfd(struct dm_backend *b, const char *exec_id, int *ret_pgid)
{
        struct dm_error e2 = { 0 };
        int pid = 0, again = 0, fd;

        if (!dm_backend_can(b, DM_CAP_EXEC_PID) || b->ops->exec_pid(b, exec_id, &pid, &e2) < 0 || pid <= 1)
                return -1;
        fd = dm_pidfd_open(pid);
        if (fd < 0)
                return -1;
        if (b->ops->exec_pid(b, exec_id, &again, &e2) < 0 || again != pid || dm_pidfd_alive(fd) < 0) {
                close(fd);
                return -1;
        }
        *ret_pgid = pid;
        return fd;
}

/* The output until EOF, the deadline or stop_fd, with progress about once
 * a second on the way. */
static int pump(struct dm_stream *s, struct dm_exec_sink *sink, struct tick *tick, int stop_fd, int64_t deadline,
                struct dm_error *err)
{
        struct dm_stream_sink ss = { .on_data = on_data, .userdata = sink };

        for (;;) {
                int64_t now = dm_now_ms(), slice = deadline;
                int r;

                if (sink->on_progress && now + PROGRESS_INTERVAL_MS < deadline)
                        slice = now + PROGRESS_INTERVAL_MS;
                r = dm_stream_pump(s, &ss, stop_fd, slice, err);
                if (r == -ETIMEDOUT && slice < deadline) {
                        dm_error_clear(err);
                        progress(tick);
                        continue;
                }
                return r;
        }
}

static int exec_engine(const struct dm_exec_target *t, const struct dm_exec_request *req, struct dm_exec_sink *sink,
                       struct tick *tick, struct dm_exec_result *res, struct dm_error *err)
{
        struct dm_backend *b = t->backend;
        struct dm_stream_sink ss = { .on_data = on_data, .userdata = sink };
        struct dm_stream *stream = t->attached, *made = NULL;
        char *exec_id = NULL;
        _cleanup_close_ int pidfd = -1;
        int pgid = 0, r = 0;

        if (!stream && t->filter_exec)
                /* The filter would come from `demesne-shim --exec`, started by
                 * the engine by a path in the sandbox's own file system,
                 * which the sandbox can rename and plant a program at (on a
                 * storage driver that renames directories: vfs, rootless
                 * Podman's default). /proc/1/exe, the binary PID 1 runs,
                 * is closed: the shim is not dumpable, and reading that link
                 * takes CAP_SYS_PTRACE, which no process of the container
                 * has. So no path is left the sandbox cannot change. */
                return dm_error_set(err, -EBUSY,
                                    "another live demesne server holds this sandbox's demesne-shim, and the "
                                    "engine's exec API could start the shim only by a path the sandbox can "
                                    "change: run the command through that server, or once it has exited");
        if (!stream) {
                struct dm_exec_spec spec = {
                        .argv = req->argv,
                        .env = req->env,
                        .workdir = req->cwd ? req->cwd : "/out",
                        .attach_stdin = dm_backend_can(b, DM_CAP_EXEC_STDIN),
                };

                r = b->ops->exec(b, t->container, &spec, &made, &exec_id, err);
                if (r < 0)
                        return dm_error_wrap(err, "run the command");
                stream = made;
                /* stdin goes in whole, then EOF, so a command reading it finishes. */
                if (req->stdin_len)
                        r = dm_stream_write(stream, req->stdin_data, req->stdin_len, err);
                if (spec.attach_stdin)
                        dm_stream_close_write(stream);
                if (r < 0)
                        goto out;
                /* The leader's pid now, while it surely runs: by the timeout
                 * it may have exited and left its group (a fork bomb, say)
                 * holding the stream open, and the engine no longer reports
                 * a pid then. */
                if (!t->whole_container)
                        pidfd = exec_pidfd(b, exec_id, &pgid);
        }
        r = pump(stream, sink, tick, req->stop_fd, tick->t0 + req->timeout_s * 1000, err);
        if (r == -ETIMEDOUT || r == -ECANCELED) {
                struct dm_error e2 = { 0 };

                res->timed_out = r == -ETIMEDOUT;
                res->cancelled = r == -ECANCELED;
                dm_error_clear(err);
                if (t->whole_container) {
                        /* Killing PID 1 ends the container's whole PID
                         * namespace: every process the command started goes. */
                        if (b->ops->kill(b, t->container, SIGKILL, &e2) < 0)
                                log_debug("kill '%.12s': %s", t->container, e2.msg);
                } else if (pidfd >= 0)
                        /* The exec's process leads its own group: the whole group goes. */
                        kill_group(pidfd, pgid);
                else if (b->ops->exec_interrupt && b->ops->exec_interrupt(b, exec_id, &e2) < 0)
                        log_warning("'%.12s': stopping the command: %s", t->container, e2.msg);
                /* A cancelled call sends no result: nothing to drain or wait
                 * for, and a shutting-down server must not linger on it. */
                if (res->cancelled) {
                        res->exit_code = 128 + SIGKILL;
                        r = 0;
                        goto out;
                }
                if (dm_stream_pump(stream, &ss, -1, dm_now_ms() + DM_DRAIN_AFTER_KILL_MS, &e2) < 0)
                        log_debug("draining '%.12s' after the kill: %s", t->container, e2.msg);
                r = 0;
        }
        if (r < 0) {
                dm_error_wrap(err, "read the command's output");
                goto out;
        }
        r = exec_id ? b->ops->exec_exit_code(b, exec_id, &res->exit_code, err)
                    : b->ops->wait(b, t->container, &res->exit_code, err);
        if (r < 0) {
                dm_error_wrap(err, "wait for the command");
                goto out;
        }
        if (res->timed_out && res->exit_code < 128)
                res->exit_code = 128 + SIGKILL;
out:
        if (made)
                dm_stream_free(made);
        free(exec_id);
        return r;
}

int dm_exec(const struct dm_exec_target *t, const struct dm_exec_request *req, struct dm_exec_sink *sink,
            struct dm_exec_result *res, struct dm_error *err)
{
        /* timeout_seconds limits the command, not the set-up before it. */
        struct tick tick = { .sink = sink, .t0 = dm_now_ms() };

        memset(res, 0, sizeof(*res));
        if (!req->argv || !req->argv[0])
                return dm_error_set(err, -EINVAL, "no command");
        return t->shim ? exec_shim(t, req, sink, &tick, res, err) : exec_engine(t, req, sink, &tick, res, err);
}

/* ---- environment ------------------------------------------------------------ */

static bool same_name(const char *a, const char *b)
{
        size_t n = strcspn(a, "=");

        return strncmp(a, b, n) == 0 && (b[n] == '=' || b[n] == '\0') && (a[n] == '=' || a[n] == '\0');
}

const char **dm_exec_env(const char *const *const *layers, size_t n)
{
        size_t total = 0, k = 0;
        const char **out;

        for (size_t l = 0; l < n; l++)
                for (size_t i = 0; layers[l] && layers[l][i]; i++)
                        total++;
        out = calloc(total + 1, sizeof(*out));
        if (!out)
                return NULL;
        for (size_t l = 0; l < n; l++)
                for (size_t i = 0; layers[l] && layers[l][i]; i++) {
                        const char *e = layers[l][i];
                        size_t j;

                        /* In place of an earlier entry of the same name, so
                         * each name keeps its first position. */
                        for (j = 0; j < k && !same_name(out[j], e); j++)
                                ;
                        if (j < k)
                                out[j] = e;
                        else
                                out[k++] = e;
                }
        return out;
}
