/* SPDX-License-Identifier: MIT */
/* The server's end of demesne-shim: the socket it owns and listens on, and
 * one connection per command (see src/shim/shim.c for why). Every byte from
 * the socket is treated as coming from the sandbox, which it may: frames are
 * capped by type before anything is allocated, and a connection that did
 * not come from the container's PID 1 is dropped. */
#include "config.h"
#include "src/core/shimhost.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/paths.h"
#include "src/basic/timeutil.h"

#define CONNECT_TIMEOUT_MS 10000 /* default wait for a connection from the shim */
#define HELLO_TIMEOUT_MS 2000    /* a connection that says nothing is dropped */
#define IDLE_MAX (DM_SHIM_SPARE_CONNS + 2)
#define INLINE_STDIN_MAX (64 * 1024)
#define KILL_GRACE_MS 2000 /* dm_shim_exec: the shim's own timeout goes first */
#define HELLO_LEN (DM_SHIM_HDR_LEN + 12)

const char *const dm_shim_container_argv[] = { DM_SHIM_BIN_PATH, NULL };

struct dm_shimhost {
        pthread_mutex_t lock; /* guards idle, n_idle, active */
        int listen_fd;
        int dir_fd; /* holds the flock */
        char *dir;
        char *bin;
        atomic_int peer_pid;
        int idle[IDLE_MAX];
        size_t n_idle;
        unsigned active;
};

struct dm_shim_exec {
        struct dm_shimhost *h;
        int fd;
        struct dm_shim_reader rd;
        uint8_t *frame; /* the frame being sent */
        size_t frame_len, frame_off;
        bool frame_owned; /* frame is malloc'd (EXEC), else points into ctl/chunk */
        uint8_t ctl[16];
        uint8_t *chunk; /* header + one STDIN payload, allocated when streaming */
        const uint8_t *stdin_p;
        size_t stdin_left;
        bool stdin_stream, stdin_eof_sent, write_closed;
        bool started, exited;
        int kill_sig; /* to send when the current frame is through */
        bool kill_requested, deadline_hit;
        struct dm_shim_result res;
        size_t rpos, rlen; /* bytes of rbuf not yet handed on */
        uint8_t rbuf[DM_SHIM_DATA_MAX];
};

const char *dm_shim_binary_find(const char *configured)
{
        const char *candidates[] = { DM_PKGLIBEXECDIR "/demesne-shim", DM_BUILDDIR "/src/shim/demesne-shim" };

        if (configured && *configured)
                return configured;
        for (size_t i = 0; i < DM_ARRAY_SIZE(candidates); i++)
                if (access(candidates[i], X_OK) == 0)
                        return candidates[i];
        return NULL;
}

/* --- the socket and its directory ------------------------------------------ */

static int open_private_dir(const char *dir, int *ret_fd, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;
        struct stat st;
        int r;

        r = dm_mkdir_p(dir, 0700, err);
        if (r < 0)
                return r;
        /* O_NOFOLLOW: the last level must be the directory itself. */
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return dm_error_set(err, -errno, "cannot open '%s': %s", dir, strerror(errno));
        if (fstat(fd, &st) < 0)
                return dm_error_set(err, -errno, "cannot read '%s': %s", dir, strerror(errno));
        /* 0750 with the group of a sandbox's root: dm_shimhost_lend gave it
         * to a container in a user namespace. */
        if (st.st_uid != geteuid() || (st.st_mode & 0027) || ((st.st_mode & 0050) && st.st_gid == getegid()))
                return dm_error_set(err, -EPERM,
                                    "'%s' must be a directory of this user that only it can open (mode 0700, or "
                                    "0750 for a sandbox's group)",
                                    dir);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* The socket's owner and mode follow its directory: 0600 for this user,
 * or 0660 with the group of the sandbox's root (dm_shimhost_lend), so a
 * later server adopting the sandbox needs nothing but the directory. */
static int socket_perms(int dir_fd)
{
        struct stat st;

        if (fstat(dir_fd, &st) < 0)
                return -errno;
        if (!(st.st_mode & 0050))
                return fchmodat(dir_fd, DM_SHIM_SOCK_NAME, 0600, 0) < 0 ? -errno : 0;
        if (fchownat(dir_fd, DM_SHIM_SOCK_NAME, (uid_t)-1, st.st_gid, AT_SYMLINK_NOFOLLOW) < 0 ||
            fchmodat(dir_fd, DM_SHIM_SOCK_NAME, 0660, 0) < 0)
                return -errno;
        return 0;
}

static int bind_socket(int dir_fd, const char *dir, int *ret_fd, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        struct stat st;

        /* A socket a dead server left: replace it. Anything else there is
         * not ours to remove. */
        if (fstatat(dir_fd, DM_SHIM_SOCK_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                if (!S_ISSOCK(st.st_mode))
                        return dm_error_set(err, -EEXIST, "'%s/%s' exists and is not a socket", dir, DM_SHIM_SOCK_NAME);
                if (unlinkat(dir_fd, DM_SHIM_SOCK_NAME, 0) < 0 && errno != ENOENT)
                        return dm_error_set(err, -errno, "cannot remove the old socket in '%s': %s", dir,
                                            strerror(errno));
        }
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return dm_error_set(err, -errno, "socket: %s", strerror(errno));
        /* Through the directory's fd: immune to a renamed parent, and to
         * sun_path's 108 bytes however deep the state directory is. */
        snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d/%s", dir_fd, DM_SHIM_SOCK_NAME);
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
                return dm_error_set(err, -errno, "cannot bind '%s/%s': %s", dir, DM_SHIM_SOCK_NAME, strerror(errno));
        if (socket_perms(dir_fd) < 0 || listen(fd, 128) < 0) {
                int e = errno;
                unlinkat(dir_fd, DM_SHIM_SOCK_NAME, 0);
                return dm_error_set(err, -e, "cannot listen on '%s/%s': %s", dir, DM_SHIM_SOCK_NAME, strerror(e));
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int dm_shim_binary_missing(const char *bin, struct dm_error *err)
{
        if (bin)
                return dm_error_set(err, -ENOENT,
                                    "demesne-shim not found at '%s' (DEMESNE_SHIM_PATH): no command runs without "
                                    "its seccomp filter; fix the path, or set DEMESNE_SHIM=off to run commands "
                                    "under the engine's default seccomp profile only",
                                    bin);
        return dm_error_set(err, -ENOENT,
                            "demesne-shim not found (looked at '%s' and '%s'): no command runs without its "
                            "seccomp filter; reinstall demesne, set DEMESNE_SHIM_PATH, or set DEMESNE_SHIM=off to "
                            "run commands under the engine's default seccomp profile only",
                            DM_PKGLIBEXECDIR "/demesne-shim", DM_BUILDDIR "/src/shim/demesne-shim");
}

int dm_shimhost_new(const char *dir, const char *bin, struct dm_shimhost **ret, struct dm_error *err)
{
        struct dm_shimhost *h;
        char resolved[PATH_MAX];
        int r;

        if (!bin || !realpath(bin, resolved) || access(resolved, X_OK) < 0)
                return dm_shim_binary_missing(bin, err);
        h = calloc(1, sizeof(*h));
        if (!h)
                return dm_error_set(err, -ENOMEM, "out of memory");
        h->listen_fd = h->dir_fd = -1;
        pthread_mutex_init(&h->lock, NULL);
        h->dir = strdup(dir);
        h->bin = strdup(resolved);
        if (!h->dir || !h->bin) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto fail;
        }
        r = open_private_dir(dir, &h->dir_fd, err);
        if (r < 0)
                goto fail;
        /* One server per sandbox: a second would steal the first's socket. */
        if (flock(h->dir_fd, LOCK_EX | LOCK_NB) < 0) {
                r = dm_error_set(err, errno == EWOULDBLOCK ? -EBUSY : -errno,
                                 "another demesne server serves the sandbox behind '%s'", dir);
                goto fail;
        }
        r = bind_socket(h->dir_fd, dir, &h->listen_fd, err);
        if (r < 0)
                goto fail;
        *ret = h;
        return 0;
fail:
        dm_shimhost_free(h);
        return r;
}

void dm_shimhost_mounts(const struct dm_shimhost *h, struct dm_mount ret[2])
{
        ret[0] = (struct dm_mount){ .host = h->bin, .target = DM_SHIM_BIN_PATH, .readonly = true };
        ret[1] = (struct dm_mount){ .host = h->dir, .target = DM_SHIM_SOCK_DIR, .readonly = true };
}

int dm_shimhost_lend(struct dm_shimhost *h, unsigned gid, struct dm_error *err)
{
        if (fchown(h->dir_fd, (uid_t)-1, (gid_t)gid) < 0 || fchmod(h->dir_fd, 0750) < 0 || socket_perms(h->dir_fd) < 0)
                return dm_error_set(err, -errno, "cannot open '%s' to the sandbox's root (host gid %u): %s", h->dir,
                                    gid, strerror(errno));
        return 0;
}

const char *dm_shimhost_dir(const struct dm_shimhost *h)
{
        return h->dir;
}

void dm_shimhost_set_peer_pid(struct dm_shimhost *h, int pid)
{
        atomic_store(&h->peer_pid, pid);
}

void dm_shimhost_free(struct dm_shimhost *h)
{
        if (!h)
                return;
        if (h->listen_fd >= 0) {
                close(h->listen_fd);
                unlinkat(h->dir_fd, DM_SHIM_SOCK_NAME, 0);
        }
        for (size_t i = 0; i < h->n_idle; i++)
                close(h->idle[i]);
        if (h->dir_fd >= 0)
                close(h->dir_fd);
        pthread_mutex_destroy(&h->lock);
        free(h->dir);
        free(h->bin);
        free(h);
}

int dm_shimhost_remove_dir(const char *dir, struct dm_error *err)
{
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;

        if (fd < 0)
                return errno == ENOENT ? 0 : dm_error_set(err, -errno, "cannot open '%s': %s", dir, strerror(errno));
        if (fstatat(fd, DM_SHIM_SOCK_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode))
                unlinkat(fd, DM_SHIM_SOCK_NAME, 0);
        if (rmdir(dir) < 0 && errno != ENOENT)
                return dm_error_set(err, -errno, "cannot remove '%s': %s", dir, strerror(errno));
        return 0;
}

/* --- connections -------------------------------------------------------------- */

/* poll() for events on fd until deadline: 1 ready, 0 timed out,
 * -ECANCELED when cancel_fd (-1 = none) is readable, else -errno. */
static int poll_one(int fd, short events, int cancel_fd, int64_t deadline)
{
        for (;;) {
                int64_t left = deadline - dm_now_ms();
                struct pollfd p[2] = { { .fd = fd, .events = events }, { .fd = cancel_fd, .events = POLLIN } };
                int r;

                if (left <= 0)
                        return 0;
                r = poll(p, cancel_fd >= 0 ? 2 : 1, left > 1000 ? 1000 : (int)left);
                if (r > 0 && cancel_fd >= 0 && p[1].revents)
                        return -ECANCELED;
                if (r > 0)
                        return 1;
                if (r < 0 && errno != EINTR)
                        return -errno;
        }
}

/* Checks a new connection: its peer, then exactly one HELLO frame (read to
 * the byte, so nothing of what follows is consumed). */
static int greet(struct dm_shimhost *h, int fd, int64_t deadline, struct dm_error *err)
{
        uint8_t buf[HELLO_LEN];
        struct dm_shim_reader rd;
        struct dm_shim_frame f;
        struct dm_shim_hello hello;
        struct ucred cred;
        socklen_t len = sizeof(cred);
        int expect = atomic_load(&h->peer_pid);
        size_t got = 0, used;
        int r;

        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return -errno;
        if (expect > 0 && cred.pid != expect) {
                log_debug("shim socket '%s': dropping a connection from pid %d (the shim is %d)", h->dir, (int)cred.pid,
                          expect);
                return -EPERM;
        }
        if (deadline > dm_now_ms() + HELLO_TIMEOUT_MS)
                deadline = dm_now_ms() + HELLO_TIMEOUT_MS;
        while (got < sizeof(buf)) {
                ssize_t n;

                r = poll_one(fd, POLLIN, -1, deadline);
                if (r <= 0)
                        return r == 0 ? -ETIMEDOUT : r;
                n = recv(fd, buf + got, sizeof(buf) - got, 0);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n <= 0)
                        return -ECONNRESET;
                got += (size_t)n;
        }
        if (buf[0] != DM_SHIM_PROTO_VERSION)
                return dm_error_set(err, -EPROTO,
                                    "the shim in the sandbox speaks protocol version %u, this server %u: "
                                    "recreate the sandbox",
                                    buf[0], DM_SHIM_PROTO_VERSION);
        dm_shim_reader_init(&rd, DM_SHIM_TO_HOST);
        r = dm_shim_reader_feed(&rd, buf, sizeof(buf), &used, &f);
        if (r == 1)
                r = f.type == DM_SHIM_HELLO ? dm_shim_decode_hello(&f, &hello) : -EBADMSG;
        dm_shim_reader_release(&rd);
        return r < 0 ? r : 0;
}

/* An idle connection carries nothing after HELLO until we send EXEC: one
 * that is readable was closed (or is misbehaving) and is of no use. */
static bool idle_alive(int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
        return poll(&p, 1, 0) == 0;
}

static int acquire(struct dm_shimhost *h, int cancel_fd, int64_t deadline, bool *ret_pooled, int *ret_fd,
                   struct dm_error *err)
{
        for (;;) {
                int fd = -1;

                pthread_mutex_lock(&h->lock);
                if (h->n_idle)
                        fd = h->idle[--h->n_idle];
                pthread_mutex_unlock(&h->lock);
                if (fd < 0)
                        break;
                if (idle_alive(fd)) {
                        *ret_pooled = true;
                        *ret_fd = fd;
                        return 0;
                }
                close(fd);
        }
        for (;;) {
                struct dm_error gerr = { 0 };
                int fd, r;

                r = poll_one(h->listen_fd, POLLIN, cancel_fd, deadline);
                if (r == -ECANCELED)
                        return dm_error_set(err, r, "cancelled");
                if (r < 0)
                        return dm_error_set(err, r, "poll: %s", strerror(-r));
                if (r == 0)
                        return dm_error_set(err, -ETIMEDOUT,
                                            "the shim in the sandbox did not connect in time (is the container "
                                            "running?)");
                /* Several threads may wake for one connection: the
                 * non-blocking accept gives it to one of them. */
                fd = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                        if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                                continue;
                        return dm_error_set(err, -errno, "accept on '%s': %s", h->dir, strerror(errno));
                }
                r = greet(h, fd, deadline, &gerr);
                if (r == -EPROTO && gerr.code) {
                        close(fd);
                        *err = gerr;
                        return r;
                }
                if (r < 0) {
                        close(fd);
                        continue;
                }
                *ret_pooled = false;
                *ret_fd = fd;
                return 0;
        }
}

static void release_idle(struct dm_shimhost *h, int fd)
{
        pthread_mutex_lock(&h->lock);
        if (h->n_idle < IDLE_MAX) {
                h->idle[h->n_idle++] = fd;
                fd = -1;
        }
        pthread_mutex_unlock(&h->lock);
        if (fd >= 0)
                close(fd);
}

bool dm_shimhost_ready(struct dm_shimhost *h)
{
        bool ready = false;

        pthread_mutex_lock(&h->lock);
        for (size_t i = 0; i < h->n_idle && !ready; i++)
                ready = idle_alive(h->idle[i]);
        pthread_mutex_unlock(&h->lock);
        /* The spares the shim keeps connected wait in the listen backlog
         * (each command's connection is closed after it): take one, with
         * the greeting it sent on connecting, into the pool. A few tries:
         * the backlog may hold connections of a shim that has gone. */
        for (int i = 0; !ready && i < 4; i++) {
                struct pollfd p = { .fd = h->listen_fd, .events = POLLIN };
                struct dm_error gerr = { 0 };
                int fd;

                if (poll(&p, 1, 0) != 1)
                        break;
                fd = accept4(h->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0)
                        break;
                if (greet(h, fd, dm_now_ms() + 200, &gerr) < 0 || !idle_alive(fd)) {
                        close(fd);
                        continue;
                }
                release_idle(h, fd);
                ready = true;
        }
        return ready;
}

int dm_shimhost_wait_ready(struct dm_shimhost *h, int64_t deadline_ms, struct dm_error *err)
{
        bool pooled;
        int fd, r;

        r = acquire(h, -1, deadline_ms, &pooled, &fd, err);
        if (r < 0)
                return r;
        release_idle(h, fd);
        return 0;
}

/* --- one command ---------------------------------------------------------------- */

static void set_frame(struct dm_shim_exec *e, uint8_t *p, size_t len, bool owned)
{
        if (e->frame_owned)
                free(e->frame);
        e->frame = p;
        e->frame_len = len;
        e->frame_off = 0;
        e->frame_owned = owned;
}

/* Picks the next frame to send when none is in flight: a kill first, then
 * stdin (only once the command started), then its EOF. */
static int next_frame(struct dm_shim_exec *e)
{
        size_t n;

        if (e->frame_off < e->frame_len || e->write_closed)
                return 0;
        if (e->kill_sig) {
                set_frame(e, e->ctl, dm_shim_encode_u32(e->ctl, DM_SHIM_KILL, (uint32_t)e->kill_sig), false);
                e->kill_sig = 0;
                return 0;
        }
        if (!e->started || !e->stdin_stream || e->stdin_eof_sent)
                return 0;
        if (!e->stdin_left) {
                dm_shim_put_header(e->ctl, DM_SHIM_STDIN_EOF, 0);
                set_frame(e, e->ctl, DM_SHIM_HDR_LEN, false);
                e->stdin_eof_sent = true;
                return 0;
        }
        if (!e->chunk && !(e->chunk = malloc(DM_SHIM_HDR_LEN + DM_SHIM_DATA_MAX)))
                return -ENOMEM;
        n = e->stdin_left < DM_SHIM_DATA_MAX ? e->stdin_left : DM_SHIM_DATA_MAX;
        dm_shim_put_header(e->chunk, DM_SHIM_STDIN, (uint32_t)n);
        memcpy(e->chunk + DM_SHIM_HDR_LEN, e->stdin_p, n);
        e->stdin_p += n;
        e->stdin_left -= n;
        set_frame(e, e->chunk, DM_SHIM_HDR_LEN + n, false);
        return 0;
}

static void close_write(struct dm_shim_exec *e)
{
        e->write_closed = true;
        e->frame_off = e->frame_len;
        shutdown(e->fd, SHUT_WR);
}

static int on_frame(struct dm_shim_exec *e, const struct dm_shim_frame *f, const struct dm_stream_sink *sink,
                    struct dm_error *err)
{
        struct dm_shim_exit x;
        char msg[DM_SHIM_MSG_MAX + 1];
        uint32_t v;

        switch (f->type) {
        case DM_SHIM_STARTED:
                if (e->started || dm_shim_decode_u32(f, &v) < 0)
                        break;
                e->started = true;
                e->res.pid = (int)v;
                return 0;
        case DM_SHIM_ERROR:
                if (e->started || dm_shim_decode_error(f, &v, msg) < 0)
                        break;
                return dm_error_set(err, -(int)v, "%s", msg);
        case DM_SHIM_STDOUT:
        case DM_SHIM_STDERR:
                if (!e->started)
                        break;
                if (f->len == 0 || !sink || !sink->on_data)
                        return 0;
                return sink->on_data(sink->userdata, f->type == DM_SHIM_STDOUT ? 1 : 2, (const char *)f->data, f->len);
        case DM_SHIM_EXIT:
                if (!e->started || dm_shim_decode_exit(f, &x) < 0)
                        break;
                e->exited = true;
                e->res.timed_out = e->res.timed_out || (x.flags & DM_SHIM_X_TIMED_OUT);
                e->res.killed = e->res.killed || (x.flags & DM_SHIM_X_KILLED);
                e->res.signal = x.how == DM_SHIM_SIGNALED ? x.value : 0;
                e->res.exit_code = x.how == DM_SHIM_SIGNALED ? 128 + x.value : x.value;
                return 0;
        }
        return dm_error_set(err, -EPROTO, "the shim sent an unexpected or malformed frame (type %u)", f->type);
}

/* Hands buffered frames on until the awaited state: 1 when reached (the
 * command started, or exited), 0 when the buffer is used up. Bytes after
 * STARTED stay buffered for the pump, so output of a command that ends at
 * once reaches the sink rather than the start call. */
static int consume(struct dm_shim_exec *e, const struct dm_stream_sink *sink, bool until_started, struct dm_error *err)
{
        while (e->rpos < e->rlen) {
                struct dm_shim_frame f;
                size_t used;
                int r = dm_shim_reader_feed(&e->rd, e->rbuf + e->rpos, e->rlen - e->rpos, &used, &f);

                e->rpos += used;
                if (r < 0)
                        return dm_error_set(err, -EPROTO, "malformed frame from the shim: %s", strerror(-r));
                if (r == 1 && (r = on_frame(e, &f, sink, err)) < 0)
                        return r;
                /* Nothing may follow the exit status. */
                if (e->exited)
                        return e->rpos == e->rlen ? 1 : dm_error_set(err, -EPROTO, "the shim sent data after the exit");
                if (until_started && e->started)
                        return 1;
        }
        return 0;
}

/* One round: buffered frames first, else one poll that sends what is due
 * and reads what came. 1 when the awaited state is reached, 0 to go on. */
static int step(struct dm_shim_exec *e, const struct dm_stream_sink *sink, bool until_started, int cancel_fd,
                int64_t deadline, struct dm_error *err)
{
        struct pollfd p[2] = { { .fd = e->fd, .events = POLLIN }, { .fd = cancel_fd, .events = POLLIN } };
        int timeout = -1, r;
        ssize_t n;

        if (e->rpos < e->rlen)
                return consume(e, sink, until_started, err);
        r = next_frame(e);
        if (r < 0)
                return dm_error_set(err, r, "out of memory");
        if (e->frame_off < e->frame_len)
                p[0].events |= POLLOUT;
        if (deadline > 0) {
                int64_t left = deadline - dm_now_ms();

                if (left <= 0)
                        return dm_error_set(err, -ETIMEDOUT, "deadline passed");
                timeout = left > 60000 ? 60000 : (int)left;
        }
        r = poll(p, cancel_fd >= 0 ? 2 : 1, timeout);
        if (r < 0)
                return errno == EINTR ? 0 : dm_error_set(err, -EIO, "poll: %s", strerror(errno));
        if (cancel_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
                return dm_error_set(err, -ECANCELED, "cancelled");
        if (p[0].revents & POLLOUT) {
                n = send(e->fd, e->frame + e->frame_off, e->frame_len - e->frame_off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n > 0)
                        e->frame_off += (size_t)n;
                else if (n < 0 && errno != EAGAIN && errno != EINTR)
                        /* The shim stopped reading us (it may still have
                         * sent the exit status): read on. */
                        close_write(e);
        }
        if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
                return 0;
        n = recv(e->fd, e->rbuf, sizeof(e->rbuf), MSG_DONTWAIT);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR
                               ? 0
                               : dm_error_set(err, -ECONNRESET, "connection to the shim failed: %s", strerror(errno));
        if (n == 0)
                return dm_error_set(err, -ECONNRESET, "%s",
                                    dm_shim_reader_partial(&e->rd)
                                            ? "the shim closed the connection inside a frame"
                                            : "the shim closed the connection before the command's exit status "
                                              "(did the container stop?)");
        e->rpos = 0;
        e->rlen = (size_t)n;
        return consume(e, sink, until_started, err);
}

static void exec_close(struct dm_shim_exec *e)
{
        set_frame(e, NULL, 0, false);
        if (e->fd >= 0)
                close(e->fd);
        e->fd = -1;
        dm_shim_reader_release(&e->rd);
}

int dm_shim_exec_start(struct dm_shimhost *h, const struct dm_shim_request *req, int cancel_fd, int64_t deadline_ms,
                       struct dm_shim_exec **ret, struct dm_error *err)
{
        struct dm_shim_exec_msg m = {
                .cwd = req->cwd ? req->cwd : "",
                .argv = req->argv,
                .env = req->env,
        };
        struct dm_shim_exec *e;
        uint8_t *frame;
        size_t frame_len;
        int r;

        if (req->n_rlimits > DM_SHIM_MAX_RLIMITS || req->timeout_ms < 0)
                return dm_error_set(err, -EINVAL, "bad request: rlimits or timeout out of range");
        m.timeout_ms = req->timeout_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)req->timeout_ms;
        if (req->n_rlimits)
                memcpy(m.rlimits, req->rlimits, req->n_rlimits * sizeof(*req->rlimits));
        m.n_rlimits = req->n_rlimits;
        m.flags = (req->clear_env ? DM_SHIM_F_CLEARENV : 0) | (req->keep_group ? DM_SHIM_F_KEEP_GROUP : 0);
        if (req->stdin_data) {
                m.flags |= DM_SHIM_F_STDIN;
                if (req->stdin_len <= INLINE_STDIN_MAX) {
                        m.stdin_data = req->stdin_data;
                        m.stdin_len = req->stdin_len;
                } else {
                        m.flags |= DM_SHIM_F_STDIN_MORE;
                }
        }
        r = dm_shim_exec_encode(&m, &frame, &frame_len);
        if (r == -E2BIG)
                return dm_error_set(err, r,
                                    "command too large for the shim: at most %d arguments, %d "
                                    "environment entries, %d bytes each and %d bytes in all",
                                    DM_SHIM_MAX_ARGS, DM_SHIM_MAX_ENV, DM_SHIM_MAX_STR, DM_SHIM_EXEC_MAX);
        if (r < 0)
                return dm_error_set(err, r,
                                    r == -ENOMEM ? "out of memory"
                                                 : "bad command: empty argv[0], an environment entry without "
                                                   "'NAME=', or a relative working directory");

        if (deadline_ms <= 0)
                deadline_ms = dm_now_ms() + CONNECT_TIMEOUT_MS;
        pthread_mutex_lock(&h->lock);
        if (h->active >= DM_SHIM_MAX_EXECS) {
                pthread_mutex_unlock(&h->lock);
                free(frame);
                return dm_error_set(err, -EBUSY, "too many commands running at once in this sandbox (%d)",
                                    DM_SHIM_MAX_EXECS);
        }
        h->active++;
        pthread_mutex_unlock(&h->lock);

        e = calloc(1, sizeof(*e));
        if (!e) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto fail;
        }
        e->h = h;
        e->fd = -1;
        for (;;) {
                bool pooled = false;

                r = acquire(h, cancel_fd, deadline_ms, &pooled, &e->fd, err);
                if (r < 0)
                        goto fail;
                dm_shim_reader_init(&e->rd, DM_SHIM_TO_HOST);
                set_frame(e, frame, frame_len, false);
                e->stdin_stream = m.flags & DM_SHIM_F_STDIN_MORE;
                e->stdin_p = req->stdin_data;
                e->stdin_left = e->stdin_stream ? req->stdin_len : 0;
                e->write_closed = e->started = false;
                e->rpos = e->rlen = 0;
                while ((r = step(e, NULL, true, cancel_fd, deadline_ms, err)) == 0)
                        ;
                if (r >= 0)
                        break;
                /* A spare the shim dropped after we checked it (it was
                 * restarting, or stopping): the request never arrived, so
                 * another connection may carry it. */
                if (r == -ECONNRESET && pooled) {
                        exec_close(e);
                        dm_error_clear(err);
                        continue;
                }
                goto fail;
        }
        free(frame);
        e->frame = NULL;
        e->frame_len = e->frame_off = 0;
        *ret = e;
        return 0;
fail:
        free(frame);
        if (e) {
                e->frame = NULL;
                dm_shim_exec_free(e); /* and the count */
                return r;
        }
        pthread_mutex_lock(&h->lock);
        h->active--;
        pthread_mutex_unlock(&h->lock);
        return r;
}

int dm_shim_exec_pump(struct dm_shim_exec *e, const struct dm_stream_sink *sink, int cancel_fd, int64_t deadline_ms,
                      struct dm_error *err)
{
        int r;

        while (!e->exited)
                if ((r = step(e, sink, false, cancel_fd, deadline_ms, err)) < 0)
                        return r;
        return 0;
}

int dm_shim_exec_kill(struct dm_shim_exec *e, int signo)
{
        if (signo < 1 || signo > 64)
                return -EINVAL;
        e->res.killed = true;
        if (e->exited || e->write_closed)
                return 0;
        /* Frames cannot interleave: a half-sent stdin frame, or stdin the
         * shim has stopped reading, would hold the kill up for as long as
         * the command does not read. Closing our side is a SIGKILL the shim
         * always sees. */
        if ((e->frame_off > 0 && e->frame_off < e->frame_len) ||
            (signo == SIGKILL && e->stdin_stream && !e->stdin_eof_sent)) {
                close_write(e);
                return 0;
        }
        e->kill_sig = signo;
        return 0;
}

int dm_shim_exec_result(const struct dm_shim_exec *e, struct dm_shim_result *ret)
{
        if (!e->exited)
                return -EAGAIN;
        *ret = e->res;
        return 0;
}

int dm_shim_exec_pid(const struct dm_shim_exec *e)
{
        return e->res.pid;
}

void dm_shim_exec_free(struct dm_shim_exec *e)
{
        struct dm_shimhost *h;

        if (!e)
                return;
        h = e->h;
        exec_close(e);
        free(e->chunk);
        free(e);
        pthread_mutex_lock(&h->lock);
        h->active--;
        pthread_mutex_unlock(&h->lock);
}

#define TICK_MS 1000

int dm_shim_exec(struct dm_shimhost *h, const struct dm_shim_request *req, const struct dm_stream_sink *sink,
                 int cancel_fd, int64_t deadline_ms, struct dm_shim_result *ret, struct dm_error *err)
{
        struct dm_shim_request r2 = *req;
        struct dm_shim_exec *e = NULL;
        int64_t start_deadline = 0;
        int r;

        memset(ret, 0, sizeof(*ret));
        if (deadline_ms > 0) {
                int64_t left = deadline_ms - dm_now_ms();

                if (left < 1)
                        left = 1;
                if (!r2.timeout_ms || r2.timeout_ms > left)
                        r2.timeout_ms = left;
                start_deadline = deadline_ms;
        }
        r = dm_shim_exec_start(h, &r2, cancel_fd, start_deadline, &e, err);
        if (r < 0)
                return r;
        for (;;) {
                int64_t hard = deadline_ms > 0 ? deadline_ms + KILL_GRACE_MS : 0;
                int64_t slice = hard;

                if (req->on_tick && (!hard || dm_now_ms() + TICK_MS < hard))
                        slice = dm_now_ms() + TICK_MS;
                r = dm_shim_exec_pump(e, sink, cancel_fd, slice, err);
                if (r == -ETIMEDOUT && slice != hard) {
                        dm_error_clear(err);
                        req->on_tick(req->tick_userdata);
                        continue;
                }
                break;
        }
        if (r == -ETIMEDOUT || r == -ECANCELED) {
                int why = r;

                dm_shim_exec_kill(e, SIGKILL);
                dm_error_clear(err);
                r = dm_shim_exec_pump(e, sink, -1, dm_now_ms() + DM_DRAIN_AFTER_KILL_MS, err);
                if (r < 0) {
                        log_debug("shim: draining after kill: %s", err->msg);
                        dm_error_clear(err);
                        /* Gone without a status: the kill is the status. */
                        e->res.signal = SIGKILL;
                        e->res.exit_code = 128 + SIGKILL;
                        e->exited = true;
                }
                if (why == -ETIMEDOUT) {
                        /* The deadline, not a request, ended it. */
                        e->res.timed_out = true;
                        e->res.killed = false;
                }
                *ret = e->res;
                dm_shim_exec_free(e);
                return why == -ECANCELED ? dm_error_set(err, -ECANCELED, "cancelled") : 0;
        }
        if (r == 0)
                *ret = e->res;
        dm_shim_exec_free(e);
        return r;
}
