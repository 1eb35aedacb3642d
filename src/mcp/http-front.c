/* SPDX-License-Identifier: MIT */
/* The remote listener: see http-front.h. One thread accepts; each
 * connection has a thread of its own that does the TLS handshake, reads the
 * first request head (bounded in size and time), and either answers 401 or
 * hands a socketpair's end to the endpoint the token names and relays. The
 * head is only looked at, never changed: the endpoint sees the request as
 * the client sent it and checks it whole (Host, token, size). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/mcp/http-front.h"
#include "src/mcp/http-guard.h"
#include "src/mcp/http.h"

#define HEAD_MAX 16384
#define RELAY_BUF 16384

struct route {
        char *token;
        size_t len;
        struct dm_mcphttp *h; /* an endpoint; or, when NULL, a server at to */
        struct sockaddr_in to;
        struct route *next;
};

struct conn {
        struct dm_mcphttp_front *f;
        int fd;
        struct sockaddr_storage peer;
        socklen_t peer_len;
        gnutls_session_t tls; /* NULL: plain */
        struct conn *next, **pprev;
};

struct dm_mcphttp_front {
        struct dm_mcphttp_front_options o;
        int listen_fd, stop_fd;
        pthread_t acceptor;
        char url[128], host[96], hostport[112];
        char *ca;                               /* tls_ca's text */
        gnutls_certificate_credentials_t creds; /* NULL: plain */
        gnutls_priority_t prio;

        pthread_mutex_t lock; /* guards what follows */
        pthread_cond_t gone;
        struct route *routes;
        struct conn *conns;
        unsigned n_conns;
        bool stopping;
};

static int64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for fd to be readable until deadline (ms, CLOCK_MONOTONIC): 1, 0
 * when the time ran out, -1 on error or hang-up only. */
static int wait_in(int fd, int64_t deadline)
{
        for (;;) {
                int64_t left = deadline - now_ms();
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int r;

                if (left <= 0)
                        return 0;
                r = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
                if (r > 0)
                        return 1;
                if (r < 0 && errno != EINTR)
                        return -1;
        }
}

static ssize_t conn_read(struct conn *c, char *buf, size_t n)
{
        ssize_t r;

        if (!c->tls) {
                do
                        r = read(c->fd, buf, n);
                while (r < 0 && errno == EINTR);
                return r;
        }
        do
                r = gnutls_record_recv(c->tls, buf, n);
        while (r == GNUTLS_E_INTERRUPTED || r == GNUTLS_E_AGAIN);
        return r < 0 ? -1 : r;
}

static int conn_write(struct conn *c, const char *buf, size_t n)
{
        while (n) {
                ssize_t r;

                if (c->tls) {
                        r = gnutls_record_send(c->tls, buf, n);
                        if (r == GNUTLS_E_INTERRUPTED || r == GNUTLS_E_AGAIN)
                                continue;
                } else {
                        r = write(c->fd, buf, n);
                        if (r < 0 && errno == EINTR)
                                continue;
                }
                if (r <= 0)
                        return -1;
                buf += r;
                n -= (size_t)r;
        }
        return 0;
}

/* Reads until the head's blank line; its length with what followed it in
 * *ret_len, -1 when it did not come whole in time or in HEAD_MAX. */
static ssize_t read_head(struct conn *c, char *buf, size_t *ret_len, int64_t deadline)
{
        size_t n = 0;

        for (;;) {
                char *end;
                ssize_t r;

                if ((!c->tls || !gnutls_record_check_pending(c->tls)) && wait_in(c->fd, deadline) <= 0)
                        return -1;
                r = conn_read(c, buf + n, HEAD_MAX - 1 - n);
                if (r <= 0)
                        return -1;
                n += (size_t)r;
                buf[n] = '\0';
                end = strstr(buf, "\r\n\r\n");
                if (end) {
                        *ret_len = n;
                        return end + 4 - buf;
                }
                if (n >= HEAD_MAX - 1)
                        return -1;
        }
}

/* The value of the head's header name (with its colon), past a prefix
 * (e.g. "Bearer ", case aside): its start and length, NULL when the head
 * has no such line or its value lacks the prefix. */
static const char *header_of(const char *head, size_t head_len, const char *name, const char *prefix, size_t *ret_len)
{
        const char *p = strstr(head, "\r\n");
        size_t nlen = strlen(name), plen = strlen(prefix);

        while (p && (size_t)(p - head) + 2 < head_len) {
                const char *line = p + 2, *eol = strstr(line, "\r\n");

                if (!eol || eol == line)
                        return NULL;
                if (strncasecmp(line, name, nlen) == 0) {
                        const char *v = line + nlen;

                        while (*v == ' ' || *v == '\t')
                                v++;
                        if (strncasecmp(v, prefix, plen) != 0)
                                return NULL;
                        v += plen;
                        while (*v == ' ')
                                v++;
                        *ret_len = strcspn(v, " \t\r");
                        return v;
                }
                p = eol;
        }
        return NULL;
}

/* 401 for no token or an unknown one; 503 when its endpoint could not
 * take the connection (full, stopping). */
static void refuse(struct conn *c, bool known)
{
        const char *body = known ? "{\"error\":\"the endpoint is busy: try again\"}\n"
                                 : "{\"error\":\"unauthorized: no valid token (Authorization: Bearer or "
                                   "x-api-key)\"}\n";
        char head[256];
        int n = snprintf(head, sizeof(head),
                         "HTTP/1.1 %s\r\n%sContent-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n",
                         known ? "503 Service Unavailable" : "401 Unauthorized",
                         known ? "Retry-After: 1\r\n" : "WWW-Authenticate: Bearer\r\n", strlen(body));

        if (conn_write(c, head, (size_t)n) == 0)
                conn_write(c, body, strlen(body));
}

/* A connection to the server at to (the vendor proxy, on this host's
 * loopback): its fd, -1 when it does not answer. */
static int connect_to(const struct sockaddr_in *to)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd >= 0 && connect(fd, (const struct sockaddr *)to, sizeof(*to)) < 0) {
                close(fd);
                fd = -1;
        }
        return fd;
}

/* Hands one end of a socketpair to the endpoint token names (under the
 * lock, so that it is not removed meanwhile), or connects to the server
 * it names: the fd to relay to, -1 when the token is unknown, -2 when its
 * endpoint or server refused. */
static int route_to(struct dm_mcphttp_front *f, struct conn *c, const char *token, size_t len)
{
        struct dm_mcphttp *to = NULL;
        struct sockaddr_in addr = { 0 };
        bool found = false;
        int sp[2] = { -1, -1 };

        pthread_mutex_lock(&f->lock);
        /* Every route is compared: how long it takes says nothing of which. */
        for (struct route *r = f->routes; r; r = r->next)
                if (dm_mcphttp_secret_equal(token, len, r->token, r->len)) {
                        found = true;
                        to = r->h;
                        addr = r->to;
                }
        if (to && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0 &&
            dm_mcphttp_adopt(to, sp[0], (struct sockaddr *)&c->peer, c->peer_len) < 0) {
                close(sp[1]);
                sp[1] = -1;
        }
        pthread_mutex_unlock(&f->lock);
        if (found && !to)
                sp[1] = connect_to(&addr);
        return found && sp[1] < 0 ? -2 : sp[1];
}

/* Bytes both ways until the endpoint is done or a side fails. */
static void relay(struct conn *c, int ep)
{
        _cleanup_free_ char *buf = malloc(RELAY_BUF);
        bool in_open = true;

        /* Until the endpoint closes: it answers what came before the
         * client's end, then closes its side. */
        while (buf) {
                /* A side that is done is left out: its hang-up would wake
                 * poll again and again. */
                struct pollfd p[2] = { { .fd = in_open ? c->fd : -1, .events = POLLIN },
                                       { .fd = ep, .events = POLLIN } };
                ssize_t n;

                if (!(in_open && c->tls && gnutls_record_check_pending(c->tls)) && poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return;
                }
                if (in_open && ((c->tls && gnutls_record_check_pending(c->tls)) || p[0].revents)) {
                        n = conn_read(c, buf, RELAY_BUF);
                        if (n <= 0) {
                                in_open = false;
                                shutdown(ep, SHUT_WR);
                        } else if (dm_write_all(ep, buf, (size_t)n) < 0)
                                return;
                }
                if (p[1].revents) {
                        do
                                n = read(ep, buf, RELAY_BUF);
                        while (n < 0 && errno == EINTR);
                        if (n <= 0)
                                return; /* the endpoint closed: so does the client's connection */
                        if (conn_write(c, buf, (size_t)n) < 0)
                                return;
                }
        }
}

static void conn_free(struct conn *c)
{
        struct dm_mcphttp_front *f = c->f;

        pthread_mutex_lock(&f->lock);
        *c->pprev = c->next;
        if (c->next)
                c->next->pprev = c->pprev;
        f->n_conns--;
        pthread_cond_broadcast(&f->gone);
        pthread_mutex_unlock(&f->lock);
        if (c->tls)
                gnutls_deinit(c->tls);
        close(c->fd);
        free(c);
}

static void *conn_thread(void *arg)
{
        struct conn *c = arg;
        struct dm_mcphttp_front *f = c->f;
        int64_t deadline = now_ms() + (int64_t)f->o.head_timeout_s * 1000;
        _cleanup_free_ char *head = malloc(HEAD_MAX);
        size_t len = 0, tlen = 0;
        const char *token;
        ssize_t head_len = -1;
        int ep = -1, r;

        if (head && f->creds) {
                gnutls_handshake_set_timeout(c->tls, f->o.head_timeout_s * 1000);
                do
                        r = gnutls_handshake(c->tls);
                while (r < 0 && !gnutls_error_is_fatal(r));
                if (r < 0) {
                        log_debug("remote listener: TLS handshake failed: %s", gnutls_strerror(r));
                        conn_free(c);
                        return NULL;
                }
        }
        if (head)
                head_len = read_head(c, head, &len, deadline);
        if (head_len > 0) {
                /* MCP clients and Codex send Authorization: Bearer, Claude
                 * Code its key in x-api-key: either names the route. */
                token = header_of(head, (size_t)head_len, "Authorization:", "Bearer ", &tlen);
                ep = token ? route_to(f, c, token, tlen) : -1;
                if (ep == -1 && (token = header_of(head, (size_t)head_len, "x-api-key:", "", &tlen)) && tlen)
                        ep = route_to(f, c, token, tlen);
                if (ep < 0)
                        refuse(c, ep == -2);
        }
        if (ep >= 0 && dm_write_all(ep, head, len) == 0)
                relay(c, ep);
        if (ep >= 0)
                close(ep);
        if (c->tls)
                gnutls_bye(c->tls, GNUTLS_SHUT_WR);
        conn_free(c);
        return NULL;
}

/* A connection accepted: its thread, or closed at once when there are
 * max_connections already. */
static void take(struct dm_mcphttp_front *f, int fd, const struct sockaddr_storage *peer, socklen_t len)
{
        struct conn *c = calloc(1, sizeof(*c));
        pthread_attr_t attr;
        pthread_t th;
        bool ok = false;

        if (c && f->creds &&
            (gnutls_init(&c->tls, GNUTLS_SERVER) < 0 ||
             gnutls_credentials_set(c->tls, GNUTLS_CRD_CERTIFICATE, f->creds) < 0 ||
             gnutls_priority_set(c->tls, f->prio) < 0)) {
                if (c->tls)
                        gnutls_deinit(c->tls);
                free(c);
                c = NULL;
        }
        if (c && c->tls)
                gnutls_transport_set_int(c->tls, fd);
        pthread_mutex_lock(&f->lock);
        if (c && !f->stopping && f->n_conns < f->o.max_connections) {
                c->f = f;
                c->fd = fd;
                c->peer = *peer;
                c->peer_len = len;
                c->next = f->conns;
                if (c->next)
                        c->next->pprev = &c->next;
                c->pprev = &f->conns;
                f->conns = c;
                f->n_conns++;
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                pthread_attr_setstacksize(&attr, 256 << 10);
                ok = pthread_create(&th, &attr, conn_thread, c) == 0;
                pthread_attr_destroy(&attr);
                if (!ok) {
                        f->conns = c->next;
                        if (c->next)
                                c->next->pprev = &f->conns;
                        f->n_conns--;
                }
        }
        pthread_mutex_unlock(&f->lock);
        if (!ok) {
                if (c && c->tls)
                        gnutls_deinit(c->tls);
                free(c);
                close(fd);
        }
}

static void *accept_thread(void *arg)
{
        struct dm_mcphttp_front *f = arg;

        for (;;) {
                struct pollfd p[2] = { { .fd = f->listen_fd, .events = POLLIN },
                                       { .fd = f->stop_fd, .events = POLLIN } };
                struct sockaddr_storage peer;
                socklen_t len = sizeof(peer);
                int fd;

                if (poll(p, 2, -1) < 0 && errno != EINTR)
                        break;
                if (p[1].revents)
                        break;
                if (!p[0].revents)
                        continue;
                fd = accept4(f->listen_fd, (struct sockaddr *)&peer, &len, SOCK_CLOEXEC);
                if (fd >= 0)
                        take(f, fd, &peer, len);
        }
        return NULL;
}

void dm_mcphttp_front_take(struct dm_mcphttp_front *f, int fd)
{
        struct sockaddr_storage peer = { .ss_family = AF_UNIX };

        take(f, fd, &peer, sizeof(sa_family_t));
}

/* A certificate file's text, at most 64 KiB. */
static int read_pem(const char *path, char **ret)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        size_t n = 0, max = 64 << 10;
        char *buf;
        ssize_t r;

        if (fd < 0)
                return -errno;
        buf = malloc(max + 1);
        if (!buf)
                return -ENOMEM;
        while ((r = read(fd, buf + n, max + 1 - n)) > 0 && (n += (size_t)r) <= max)
                ;
        if (r < 0 || n > max) {
                r = r < 0 ? -errno : -EFBIG;
                free(buf);
                return (int)r;
        }
        buf[n] = '\0';
        *ret = buf;
        return 0;
}

static int tls_setup(struct dm_mcphttp_front *f, struct dm_error *err)
{
        int r;

        if (!f->o.tls_cert && !f->o.tls_key)
                return 0;
        if (!f->o.tls_cert || !f->o.tls_key)
                return dm_error_set(err, -EINVAL,
                                    "the remote listener's TLS needs both a certificate and its key "
                                    "(DEMESNE_REMOTE_TLS_CERT and DEMESNE_REMOTE_TLS_KEY)");
        if (gnutls_certificate_allocate_credentials(&f->creds) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = gnutls_certificate_set_x509_key_file(f->creds, f->o.tls_cert, f->o.tls_key, GNUTLS_X509_FMT_PEM);
        if (r < 0)
                return dm_error_set(err, -EINVAL, "the remote listener's certificate '%s' with key '%s': %s",
                                    f->o.tls_cert, f->o.tls_key, gnutls_strerror(r));
        if (gnutls_priority_init(&f->prio, NULL, NULL) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (f->o.tls_ca && (r = read_pem(f->o.tls_ca, &f->ca)) < 0)
                return dm_error_set(err, r, "the remote listener's CA certificate '%s': %s", f->o.tls_ca,
                                    r == -EFBIG ? "over 64 KiB" : strerror(-r));
        return 0;
}

static void front_free(struct dm_mcphttp_front *f)
{
        struct route *r;

        if (f->listen_fd >= 0)
                close(f->listen_fd);
        if (f->stop_fd >= 0)
                close(f->stop_fd);
        while ((r = f->routes)) {
                f->routes = r->next;
                explicit_bzero(r->token, r->len);
                free(r->token);
                free(r);
        }
        free(f->ca);
        if (f->prio)
                gnutls_priority_deinit(f->prio);
        if (f->creds)
                gnutls_certificate_free_credentials(f->creds);
        pthread_cond_destroy(&f->gone);
        pthread_mutex_destroy(&f->lock);
        free(f);
}

int dm_mcphttp_front_start(const struct dm_mcphttp_front_options *o, struct dm_mcphttp_front **ret,
                           struct dm_error *err)
{
        struct dm_mcphttp_front *f = calloc(1, sizeof(*f));
        struct sockaddr_storage addr;
        socklen_t len;
        unsigned port;
        int r;

        if (!f)
                return dm_error_set(err, -ENOMEM, "out of memory");
        f->o = *o;
        f->o.max_connections = o->max_connections ? o->max_connections : 256;
        f->o.head_timeout_s = o->head_timeout_s ? o->head_timeout_s : 30;
        f->listen_fd = f->stop_fd = -1;
        pthread_mutex_init(&f->lock, NULL);
        pthread_cond_init(&f->gone, NULL);
        r = dm_mcphttp_parse_listen(o->listen, &addr, &len, err);
        if (r >= 0 && dm_mcphttp_addr_is_wildcard((struct sockaddr *)&addr))
                r = dm_error_set(err, -EINVAL,
                                 "DEMESNE_REMOTE_LISTEN '%s' names every address: name the one address of this "
                                 "host the sandboxes reach (the networkPolicy allows exactly it)",
                                 o->listen);
        if (r >= 0 && !dm_mcphttp_addr_is_loopback((struct sockaddr *)&addr) && !o->tls_cert && !o->tls_key)
                r = dm_error_set(err, -EINVAL,
                                 "DEMESNE_REMOTE_LISTEN '%s' is not a loopback address: it needs TLS, "
                                 "DEMESNE_REMOTE_TLS_CERT and DEMESNE_REMOTE_TLS_KEY (PEM files)",
                                 o->listen);
        if (r >= 0)
                r = tls_setup(f, err);
        if (r >= 0)
                r = f->listen_fd = dm_mcphttp_open_listener(&addr, len, o->listen, &port, err);
        if (r >= 0 && (f->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0)
                r = dm_error_set(err, -errno, "eventfd: %s", strerror(errno));
        if (r >= 0) {
                dm_mcphttp_addr_host((struct sockaddr *)&addr, f->host, sizeof(f->host));
                snprintf(f->hostport, sizeof(f->hostport), "%s:%u", f->host, port);
                snprintf(f->url, sizeof(f->url), "%s://%s", f->creds ? "https" : "http", f->hostport);
                f->o.listen = NULL;
                f->o.tls_cert = f->o.tls_key = f->o.tls_ca = NULL;
                r = -pthread_create(&f->acceptor, NULL, accept_thread, f);
                if (r < 0)
                        dm_error_set(err, r, "cannot start a thread: %s", strerror(-r));
        }
        if (r < 0) {
                front_free(f);
                return r;
        }
        log_info("remote listener on %s (%s), for remote sandboxes' nested endpoints and vendor proxies", f->url,
                 f->creds ? "TLS" : "loopback, no TLS");
        *ret = f;
        return 0;
}

void dm_mcphttp_front_stop(struct dm_mcphttp_front *f)
{
        uint64_t one = 1;

        if (!f)
                return;
        if (write(f->stop_fd, &one, sizeof(one)) < 0)
                log_warning("remote listener: eventfd: %s", strerror(errno));
        pthread_join(f->acceptor, NULL);
        pthread_mutex_lock(&f->lock);
        f->stopping = true;
        for (struct conn *c = f->conns; c; c = c->next)
                shutdown(c->fd, SHUT_RDWR);
        while (f->n_conns)
                pthread_cond_wait(&f->gone, &f->lock);
        pthread_mutex_unlock(&f->lock);
        front_free(f);
}

const char *dm_mcphttp_front_url(const struct dm_mcphttp_front *f)
{
        return f->url;
}

const char *dm_mcphttp_front_ca(const struct dm_mcphttp_front *f)
{
        return f->ca;
}

const char *dm_mcphttp_front_host(const struct dm_mcphttp_front *f)
{
        return f->host;
}

const char *dm_mcphttp_front_hostport(const struct dm_mcphttp_front *f)
{
        return f->hostport;
}

static int add_route(struct dm_mcphttp_front *f, const char *token, struct dm_mcphttp *h, const struct sockaddr_in *to,
                     struct dm_error *err)
{
        struct route *r = calloc(1, sizeof(*r));

        if (!r || !(r->token = strdup(token))) {
                free(r);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        r->len = strlen(token);
        r->h = h;
        if (to)
                r->to = *to;
        pthread_mutex_lock(&f->lock);
        r->next = f->routes;
        f->routes = r;
        pthread_mutex_unlock(&f->lock);
        return 0;
}

int dm_mcphttp_front_add(struct dm_mcphttp_front *f, const char *token, struct dm_mcphttp *h, struct dm_error *err)
{
        return add_route(f, token, h, NULL, err);
}

int dm_mcphttp_front_add_relay(struct dm_mcphttp_front *f, const char *token, const struct sockaddr_in *to,
                               struct dm_error *err)
{
        return add_route(f, token, NULL, to, err);
}

/* Unlinks the first route that is h's (h not NULL) or token's, and frees it. */
static void remove_route(struct dm_mcphttp_front *f, struct dm_mcphttp *h, const char *token)
{
        struct route *gone = NULL;
        size_t len = token ? strlen(token) : 0;

        pthread_mutex_lock(&f->lock);
        for (struct route **p = &f->routes; *p; p = &(*p)->next)
                if (h ? (*p)->h == h : !(*p)->h && dm_mcphttp_secret_equal(token, len, (*p)->token, (*p)->len)) {
                        gone = *p;
                        *p = gone->next;
                        break;
                }
        pthread_mutex_unlock(&f->lock);
        if (gone) {
                explicit_bzero(gone->token, gone->len);
                free(gone->token);
                free(gone);
        }
}

void dm_mcphttp_front_remove(struct dm_mcphttp_front *f, struct dm_mcphttp *h)
{
        remove_route(f, h, NULL);
}

void dm_mcphttp_front_remove_relay(struct dm_mcphttp_front *f, const char *token)
{
        if (f && token)
                remove_route(f, NULL, token);
}
