/* SPDX-License-Identifier: MIT */
/* See listener.h. The accept thread polls the listening socket, the stop
 * eventfd and the reap eventfd; a connection thread writes the reap eventfd
 * when it ends, and the accept thread joins it. On stop, the accept thread
 * joins every connection (each sees the stop eventfd) and returns. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netpolicy/listener.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"

struct dm_listener_conn {
        struct dm_listener *l;
        pthread_t thread;
        int fd;                               /* under l->lock once the thread runs */
        int tracked[DM_LISTENER_MAX_TRACKED]; /* under l->lock */
        bool done;                            /* under l->lock */
        struct dm_listener_conn *next;
};

struct dm_listener {
        struct dm_listener_conf conf;
        char *what;
        struct sockaddr_in addr;
        int listen_fd, stop_fd, reap_fd;
        bool started;
        atomic_bool stopping;
        pthread_t accept_thread;
        pthread_mutex_t lock; /* conns, active, each conn's fd, tracked, done */
        struct dm_listener_conn *conns;
        unsigned active;
};

int dm_listener_wait(const struct dm_listener *l, int fd, short events, int timeout_ms)
{
        struct pollfd p[2] = { { .fd = fd, .events = events }, { .fd = l->stop_fd, .events = POLLIN } };
        int r;

        do
                r = poll(p, 2, timeout_ms < 0 ? 0 : timeout_ms);
        while (r < 0 && errno == EINTR);
        if (r < 0)
                return -errno;
        if (p[1].revents)
                return -ECANCELED;
        return r > 0;
}

int dm_listener_stop_fd(const struct dm_listener *l)
{
        return l->stop_fd;
}

bool dm_listener_stopping(const struct dm_listener *l)
{
        return atomic_load(&l->stopping);
}

int dm_listener_send_all(const struct dm_listener *l, int fd, const void *data, size_t n, int timeout_ms)
{
        const char *b = data;

        while (n > 0) {
                ssize_t w = send(fd, b, n, MSG_NOSIGNAL);

                if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
                        int r = dm_listener_wait(l, fd, POLLOUT, timeout_ms);
                        if (r <= 0)
                                return r < 0 ? r : -ETIMEDOUT;
                        continue;
                }
                if (w < 0)
                        return -errno;
                b += w;
                n -= (size_t)w;
        }
        return 0;
}

void dm_listener_address(const struct dm_listener *l, struct sockaddr_in *ret)
{
        *ret = l->addr;
}

unsigned dm_listener_connections(struct dm_listener *l)
{
        unsigned n;

        pthread_mutex_lock(&l->lock);
        n = l->active;
        pthread_mutex_unlock(&l->lock);
        return n;
}

int dm_listener_track(struct dm_listener_conn *c, int fd)
{
        struct dm_listener *l = c->l;
        bool tracked = false;

        pthread_mutex_lock(&l->lock);
        for (int i = 0; i < DM_LISTENER_MAX_TRACKED && !tracked; i++)
                if (c->tracked[i] < 0) {
                        c->tracked[i] = fd;
                        tracked = true;
                }
        if (tracked && l->stopping)
                shutdown(fd, SHUT_RDWR);
        pthread_mutex_unlock(&l->lock);
        return tracked ? 0 : -EMFILE;
}

void dm_listener_untrack(struct dm_listener_conn *c, int fd)
{
        struct dm_listener *l = c->l;

        pthread_mutex_lock(&l->lock);
        for (int i = 0; i < DM_LISTENER_MAX_TRACKED; i++)
                if (c->tracked[i] == fd)
                        c->tracked[i] = -1;
        pthread_mutex_unlock(&l->lock);
}

/* --- the threads ----------------------------------------------------------- */

static void *conn_main(void *arg)
{
        struct dm_listener_conn *c = arg;
        struct dm_listener *l = c->l;
        uint64_t one = 1;
        int fd;

        l->conf.serve(l->conf.owner, c, c->fd);
        /* Taken under the lock: stop must not shut down a reused fd number. */
        pthread_mutex_lock(&l->lock);
        fd = c->fd;
        c->fd = -1;
        c->done = true;
        l->active--;
        pthread_mutex_unlock(&l->lock);
        close(fd);
        /* The accept thread joins finished connections when woken. */
        if (write(l->reap_fd, &one, sizeof(one)) < 0)
                log_warning("%s: cannot wake the accept thread: %s", l->what, strerror(errno));
        return NULL;
}

/* Joins finished connections, or all of them (which the stop eventfd has
 * woken) when all is set. */
static void reap(struct dm_listener *l, bool all)
{
        struct dm_listener_conn *list = NULL, **pp;

        pthread_mutex_lock(&l->lock);
        for (pp = &l->conns; *pp;) {
                struct dm_listener_conn *c = *pp;
                if (all || c->done) {
                        *pp = c->next;
                        c->next = list;
                        list = c;
                } else {
                        pp = &c->next;
                }
        }
        pthread_mutex_unlock(&l->lock);
        while (list) {
                struct dm_listener_conn *c = list;
                list = c->next;
                pthread_join(c->thread, NULL);
                free(c);
        }
}

static void refuse(struct dm_listener *l, int fd, enum dm_listener_refusal why)
{
        l->conf.refuse(l->conf.owner, fd, why);
        close(fd);
}

static void accept_one(struct dm_listener *l)
{
        struct sockaddr_in peer;
        socklen_t len = sizeof(peer);
        struct dm_listener_conn *c;
        int fd = accept4(l->listen_fd, (struct sockaddr *)&peer, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);

        if (fd < 0) {
                if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS) {
                        log_warning("%s: accept: %s", l->what, strerror(errno));
                        dm_listener_wait(l, -1, 0, 100); /* let connections finish rather than spin */
                }
                return;
        }
        if (l->conf.admit && !l->conf.admit(l->conf.owner, fd, &peer)) {
                close(fd);
                return;
        }
        pthread_mutex_lock(&l->lock);
        if (l->active >= l->conf.max_conns) {
                pthread_mutex_unlock(&l->lock);
                refuse(l, fd, DM_LISTENER_FULL);
                return;
        }
        if ((c = calloc(1, sizeof(*c)))) {
                c->l = l;
                c->fd = fd;
                for (int i = 0; i < DM_LISTENER_MAX_TRACKED; i++)
                        c->tracked[i] = -1;
                if (pthread_create(&c->thread, NULL, conn_main, c) != 0) {
                        free(c);
                        c = NULL;
                }
        }
        if (c) {
                c->next = l->conns;
                l->conns = c;
                l->active++;
        }
        pthread_mutex_unlock(&l->lock);
        if (!c)
                refuse(l, fd, DM_LISTENER_NO_THREAD);
}

static void *accept_main(void *arg)
{
        struct dm_listener *l = arg;

        for (;;) {
                struct pollfd p[3] = {
                        { .fd = l->listen_fd, .events = POLLIN },
                        { .fd = l->stop_fd, .events = POLLIN },
                        { .fd = l->reap_fd, .events = POLLIN },
                };
                if (poll(p, 3, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        log_error("%s: poll: %s", l->what, strerror(errno));
                        break;
                }
                if (p[1].revents)
                        break;
                if (p[2].revents) {
                        uint64_t v;
                        if (read(l->reap_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                                log_warning("%s: read eventfd: %s", l->what, strerror(errno));
                        reap(l, false);
                }
                if (p[0].revents)
                        accept_one(l);
        }
        /* The stop eventfd stays readable: every connection sees it. */
        reap(l, true);
        return NULL;
}

/* --- lifecycle ------------------------------------------------------------- */

static void close_fds(struct dm_listener *l)
{
        int fds[] = { l->listen_fd, l->stop_fd, l->reap_fd };

        for (size_t i = 0; i < DM_ARRAY_SIZE(fds); i++)
                if (fds[i] >= 0)
                        close(fds[i]);
}

/* addr NULL: fd is a listening socket already (taken over). */
static int listener_new(const struct dm_listener_conf *conf, const struct sockaddr_in *addr, int fd,
                        struct dm_listener **ret)
{
        struct dm_listener *l = calloc(1, sizeof(*l));
        socklen_t len = sizeof(struct sockaddr_in);
        int one = 1, r;

        if (!l) {
                if (fd >= 0)
                        close(fd);
                return -ENOMEM;
        }
        l->conf = *conf;
        l->stop_fd = l->reap_fd = -1;
        l->listen_fd = fd;
        if (!(l->what = strdup(conf->what))) {
                close_fds(l);
                free(l);
                return -ENOMEM;
        }
        l->conf.what = l->what;
        l->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        l->reap_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (addr)
                l->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (l->stop_fd < 0 || l->reap_fd < 0 || l->listen_fd < 0 ||
            (addr && (setsockopt(l->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
                      bind(l->listen_fd, (const struct sockaddr *)addr, sizeof(*addr)) < 0 ||
                      listen(l->listen_fd, conf->backlog) < 0)) ||
            (!addr && fcntl(l->listen_fd, F_SETFL, O_NONBLOCK) < 0) ||
            getsockname(l->listen_fd, (struct sockaddr *)&l->addr, &len) < 0) {
                r = -errno;
                close_fds(l);
                free(l->what);
                free(l);
                return r;
        }
        pthread_mutex_init(&l->lock, NULL);
        *ret = l;
        return 0;
}

int dm_listener_new(const struct dm_listener_conf *conf, const struct sockaddr_in *addr, struct dm_listener **ret)
{
        return listener_new(conf, addr, -1, ret);
}

int dm_listener_new_fd(const struct dm_listener_conf *conf, int fd, struct dm_listener **ret)
{
        return listener_new(conf, NULL, fd, ret);
}

int dm_listener_start(struct dm_listener *l)
{
        int r = pthread_create(&l->accept_thread, NULL, accept_main, l);

        if (r != 0)
                return -r;
        l->started = true;
        return 0;
}

void dm_listener_free(struct dm_listener *l)
{
        uint64_t one = 1;

        if (!l)
                return;
        /* Wake everything: waits poll the stop eventfd; tracked sockets (and
         * client sockets, if so configured) are shut down. */
        pthread_mutex_lock(&l->lock);
        l->stopping = true;
        for (struct dm_listener_conn *c = l->conns; c; c = c->next) {
                if (l->conf.shutdown_on_stop && c->fd >= 0)
                        shutdown(c->fd, SHUT_RDWR);
                for (int i = 0; i < DM_LISTENER_MAX_TRACKED; i++)
                        if (c->tracked[i] >= 0)
                                shutdown(c->tracked[i], SHUT_RDWR);
        }
        pthread_mutex_unlock(&l->lock);
        if (l->started) {
                if (write(l->stop_fd, &one, sizeof(one)) < 0)
                        log_error("%s: cannot signal stop: %s", l->what, strerror(errno));
                pthread_join(l->accept_thread, NULL);
        }
        close_fds(l);
        pthread_mutex_destroy(&l->lock);
        free(l->what);
        free(l);
}
