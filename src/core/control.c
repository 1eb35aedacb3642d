/* SPDX-License-Identifier: MIT */
/* A serve process's control socket (src/core/control.h): the activity
 * view's cancel and destroy, acted on by the server that owns the job or
 * the sandbox, through the same functions as sandbox_cancel and
 * sandbox_destroy (its admission slots, records and cascade). */
#include "config.h"
#include "src/core/control.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "src/core/context.h"
#include "src/core/jobs.h"
#include "src/core/sandbox.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"

#define CANCEL_WAIT_MS 10000 /* as sandbox_cancel waits */
#define PEER_TIMEOUT_S 5     /* a peer must send its line within this */

struct dm_control {
        struct dm_context *ctx;
        int dir_fd;
        int listen_fd;
        int stop_pipe[2];
        char name[32];
        pthread_t thread;
};

static json_object *answer_error(int code, const char *msg)
{
        json_object *o = json_object_new_object();

        json_object_object_add(o, "error", json_object_new_string(msg));
        json_object_object_add(o, "code", json_object_new_int(code));
        return o;
}

void dm_control_act(struct dm_context *ctx, const char *op, const char *id, json_object **ret)
{
        struct dm_error err = { 0 };
        enum dm_job_status status;
        json_object *o;

        if (!op || !id || !*id || strlen(id) > 128) {
                *ret = answer_error(400, "a request is {\"op\": \"cancel\" or \"destroy\", \"id\": ID}");
                return;
        }
        if (strcmp(op, "cancel") == 0) {
                if (dm_jobs_cancel(ctx->jobs, id, CANCEL_WAIT_MS, &status) < 0) {
                        *ret = answer_error(404, "no such job in this server");
                        return;
                }
                log_info("control: job '%s' cancelled by the operator", id);
                o = json_object_new_object();
                json_object_object_add(o, "ok", json_object_new_boolean(1));
                json_object_object_add(o, "status", json_object_new_string(dm_job_status_name(status)));
        } else if (strcmp(op, "destroy") == 0) {
                int r = dm_sandbox_destroy(ctx, id, &err);
                if (r < 0) {
                        *ret = answer_error(r == -ENOENT ? 404 : 500, err.msg);
                        return;
                }
                log_info("control: sandbox '%s' destroyed by the operator", id);
                o = json_object_new_object();
                json_object_object_add(o, "ok", json_object_new_boolean(1));
                json_object_object_add(o, "status", json_object_new_string("destroyed"));
        } else {
                *ret = answer_error(400, "op is \"cancel\" or \"destroy\"");
                return;
        }
        *ret = o;
}

/* ---- the server side ------------------------------------------------------------------ */

static void send_answer(int fd, json_object *o)
{
        const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN);

        (void)dm_write_all(fd, text, strlen(text));
        (void)dm_write_all(fd, "\n", 1);
        json_object_put(o);
}

/* One line in, at most DM_CONTROL_LINE_MAX bytes; false when none came. */
static bool read_line(int fd, char *buf, size_t max)
{
        size_t len = 0;

        while (len + 1 < max) {
                ssize_t n = read(fd, buf + len, max - 1 - len);
                if (n <= 0)
                        return false;
                len += (size_t)n;
                buf[len] = '\0';
                if (memchr(buf, '\n', len))
                        return true;
        }
        return false;
}

static void serve_one(struct dm_control *c, int fd)
{
        char line[DM_CONTROL_LINE_MAX + 1];
        struct ucred cred;
        socklen_t len = sizeof(cred);
        json_object *req, *op, *id, *answer = NULL;

        /* Only this uid: the socket's mode says so too, the peer's
         * credentials say it again (a directory mode can be widened). */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != geteuid()) {
                log_warning("control: a peer of uid %d refused", len == sizeof(cred) ? (int)cred.uid : -1);
                send_answer(fd, answer_error(403, "this server answers only its own user"));
                return;
        }
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ .tv_sec = PEER_TIMEOUT_S }, sizeof(struct timeval));
        if (!read_line(fd, line, sizeof(line))) {
                send_answer(fd, answer_error(400, "one JSON line of at most 1024 bytes"));
                return;
        }
        req = json_tokener_parse(line);
        if (!req || !json_object_is_type(req, json_type_object) || !json_object_object_get_ex(req, "op", &op) ||
            !json_object_object_get_ex(req, "id", &id) || !json_object_is_type(op, json_type_string) ||
            !json_object_is_type(id, json_type_string))
                answer = answer_error(400, "a request is {\"op\": \"cancel\" or \"destroy\", \"id\": ID}");
        else
                dm_control_act(c->ctx, json_object_get_string(op), json_object_get_string(id), &answer);
        json_object_put(req);
        send_answer(fd, answer);
}

static void *control_thread(void *arg)
{
        struct dm_control *c = arg;

        for (;;) {
                struct pollfd p[2] = { { .fd = c->listen_fd, .events = POLLIN },
                                       { .fd = c->stop_pipe[0], .events = POLLIN } };
                int fd;

                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (p[1].revents)
                        break;
                fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                serve_one(c, fd);
                close(fd);
        }
        return NULL;
}

/* Sockets of servers that are gone (a killed one leaves its own). */
static void remove_stale(int dir_fd)
{
        _cleanup_close_ int fd = dup(dir_fd);
        DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
        struct dirent *e;

        if (!d)
                return;
        fd = -1;
        while ((e = readdir(d))) {
                char *end;
                long pid = strtol(e->d_name, &end, 10);

                if (pid <= 0 || strcmp(end, ".sock") != 0)
                        continue;
                if (pid == getpid() || (kill((pid_t)pid, 0) < 0 && errno == ESRCH))
                        unlinkat(dirfd(d), e->d_name, 0);
        }
        closedir(d);
}

/* A path for dir_fd/name that fits sun_path whatever the state dir's
 * length: through /proc/self/fd. */
static void sock_addr(int dir_fd, const char *name, struct sockaddr_un *sa)
{
        memset(sa, 0, sizeof(*sa));
        sa->sun_family = AF_UNIX;
        snprintf(sa->sun_path, sizeof(sa->sun_path), "/proc/self/fd/%d/%s", dir_fd, name);
}

/* <state dir>/control, made (make) if missing: the state directory must be
 * this user's and not writable by others (else another user could swap the
 * socket under the view), the control directory this user's, mode 0700. */
static int open_dir(const char *state_dir, bool make, struct dm_error *err)
{
        _cleanup_close_ int state = dm_io_open_dir(state_dir);
        struct stat st;
        int fd;

        if (state < 0)
                return dm_error_set(err, state, "open '%s': %s", state_dir, strerror(-state));
        if (make && (fstat(state, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022)))
                return dm_error_set(err, -EPERM,
                                    "the state directory '%s' must be this user's and not be writable by others",
                                    state_dir);
        if (make && mkdirat(state, DM_CONTROL_DIR, 0700) < 0 && errno != EEXIST)
                return dm_error_set(err, -errno, "mkdir '%s/" DM_CONTROL_DIR "': %s", state_dir, strerror(errno));
        fd = openat(state, DM_CONTROL_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return dm_error_set(err, -errno, "open '%s/" DM_CONTROL_DIR "': %s", state_dir, strerror(errno));
        if (fstat(fd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 077)) {
                close(fd);
                return dm_error_set(err, -EPERM, "'%s/" DM_CONTROL_DIR "' must be this user's own, mode 0700",
                                    state_dir);
        }
        return fd;
}

static int control_listen(struct dm_control *c, struct dm_error *err)
{
        struct sockaddr_un sa;
        mode_t old;
        int r;

        c->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->listen_fd < 0)
                return dm_error_set(err, -errno, "control socket: %s", strerror(errno));
        sock_addr(c->dir_fd, c->name, &sa);
        old = umask(0177); /* born 0600: no window at a wider mode */
        r = bind(c->listen_fd, (struct sockaddr *)&sa, sizeof(sa));
        umask(old);
        if (r < 0 || fchmodat(c->dir_fd, c->name, 0600, 0) < 0 || listen(c->listen_fd, 16) < 0)
                return dm_error_set(err, -errno, "control socket '%s': %s", c->name, strerror(errno));
        return 0;
}

/* Closes what c holds, removes its socket (made or not); c is freed. */
static void control_free(struct dm_control *c)
{
        if (c->listen_fd >= 0) {
                close(c->listen_fd);
                unlinkat(c->dir_fd, c->name, 0);
        }
        for (int i = 0; i < 2; i++)
                if (c->stop_pipe[i] >= 0)
                        close(c->stop_pipe[i]);
        if (c->dir_fd >= 0)
                close(c->dir_fd);
        free(c);
}

int dm_control_start(struct dm_context *ctx, const char *state_dir, struct dm_control **ret, struct dm_error *err)
{
        struct dm_control *c = calloc(1, sizeof(*c));
        int r;

        if (!c)
                return dm_error_set(err, -ENOMEM, "out of memory");
        c->ctx = ctx;
        c->listen_fd = c->stop_pipe[0] = c->stop_pipe[1] = -1;
        snprintf(c->name, sizeof(c->name), "%d.sock", (int)getpid());
        r = c->dir_fd = open_dir(state_dir, true, err);
        if (r >= 0) {
                remove_stale(c->dir_fd);
                r = control_listen(c, err);
        }
        if (r >= 0 && pipe2(c->stop_pipe, O_CLOEXEC) < 0)
                r = dm_error_set(err, -errno, "pipe: %s", strerror(errno));
        if (r >= 0 && (r = -pthread_create(&c->thread, NULL, control_thread, c)) < 0)
                dm_error_set(err, r, "cannot start a thread: %s", strerror(-r));
        if (r < 0) {
                control_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

void dm_control_stop(struct dm_control *c)
{
        if (!c)
                return;
        (void)dm_write_all(c->stop_pipe[1], "x", 1);
        pthread_join(c->thread, NULL);
        control_free(c);
}

/* ---- the asking side ------------------------------------------------------------------ */

int dm_control_request(const char *state_dir, pid_t pid, const char *op, const char *id, json_object **ret,
                       struct dm_error *err)
{
        _cleanup_close_ int dir_fd = open_dir(state_dir, false, err), fd = -1;
        char name[32], line[DM_CONTROL_LINE_MAX + 1];
        struct sockaddr_un sa;
        json_object *req, *answer;
        const char *text;

        if (dir_fd < 0)
                return -ENOENT;
        snprintf(name, sizeof(name), "%d.sock", (int)pid);
        sock_addr(dir_fd, name, &sa);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return dm_error_set(err, -errno, "socket: %s", strerror(errno));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return dm_error_set(err, errno == ECONNREFUSED ? -ECONNREFUSED : -ENOENT,
                                    "the server that made it (pid %d) is not running, or has no control socket "
                                    "(demesne run has none)",
                                    (int)pid);
        /* The action itself may wait for a job's end (sandbox_cancel's wait). */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &(struct timeval){ .tv_sec = CANCEL_WAIT_MS / 1000 + 20 },
                   sizeof(struct timeval));
        req = json_object_new_object();
        json_object_object_add(req, "op", json_object_new_string(op));
        json_object_object_add(req, "id", json_object_new_string(id));
        text = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
        if (dm_write_all(fd, text, strlen(text)) < 0 || dm_write_all(fd, "\n", 1) < 0) {
                json_object_put(req);
                return dm_error_set(err, -EIO, "the server (pid %d) did not take the request", (int)pid);
        }
        json_object_put(req);
        answer = read_line(fd, line, sizeof(line)) ? json_tokener_parse(line) : NULL;
        if (!answer || !json_object_is_type(answer, json_type_object)) {
                json_object_put(answer);
                return dm_error_set(err, -EIO, "the server (pid %d) gave no answer", (int)pid);
        }
        *ret = answer;
        return 0;
}
