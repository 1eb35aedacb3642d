/* SPDX-License-Identifier: MIT */
/* One preview (see expose.h). It is netpolicy's listener: an accept thread
 * and a thread per connection, up to DM_PREVIEW_MAX_CONNS. A thread per
 * connection because a connection is mostly idle (a browser keeps a few
 * open, one of them a WebSocket for hot reload) and each thread only waits
 * on its two sockets and the stop fd: the relay stays a plain loop, and the
 * listener already joins and stops them. The first request head of each
 * connection is read (capped) and checked: the one-time code sets the
 * cookie and redirects, the cookie lets the connection through, anything
 * else is 401. From then on the bytes pass both ways unchanged, an HTTP
 * keep-alive or an Upgrade: websocket alike.
 *
 * The sandbox side: TCP sockets made in the sandbox's network namespace by a
 * short-lived child (netpolicy/netns.h), kept in a small stock, connected
 * to 127.0.0.1:port there. So the relay reaches an app bound to the
 * sandbox's loopback at every egress mode (none has no other device), on
 * rootless Podman too, and nothing of the host is reachable from it.
 * Where the namespace is not on this host (OpenSandbox), the server's
 * endpoint of the port instead (expose-endpoint.c): a TCP connection to it
 * per connection, the first request head rewritten for it. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netpolicy/http-head.h"
#include "netpolicy/listener.h"
#include "netpolicy/netns.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/pidfd.h"
#include "src/mcp/http-guard.h"
#include "src/mcp/http-token.h"
#include "src/tools/expose.h"

#define STOCK 8
#define HEAD_WAIT_MS 30000
#define CONNECT_WAIT_MS 10000
#define CODE_PARAM "demesne_code="

struct dm_preview {
        struct dm_listener *l;
        char what[64]; /* "sandbox sbx-…: port N", for logs */
        int pid, pidfd;
        struct dm_preview_upstream *up; /* the server's endpoint; NULL: the sandbox's namespace */
        uint16_t port;
        char cookie_name[40]; /* demesne_preview_<host port>: cookies are per host, not per port */
        char secret[65];
        pthread_mutex_t lock;               /* code, stock */
        char code[DM_PREVIEW_CODE_LEN + 1]; /* "" once used */
        int stock[STOCK];
        size_t n_stock;
};

bool dm_preview_alive(const struct dm_preview *p)
{
        /* An endpoint's preview lives until the sandbox's destroy closes it. */
        return p->up || dm_pidfd_alive(p->pidfd) == 0;
}

static int send_all(const struct dm_listener *l, int fd, const char *b, size_t n)
{
        return dm_listener_send_all(l, fd, b, n, CONNECT_WAIT_MS);
}

/* A short answer that ends the connection. extra: header lines, each
 * ending in CRLF, or "". */
static void answer(const struct dm_preview *p, int fd, const char *status, const char *extra, const char *body)
{
        char buf[1024];
        int n = snprintf(buf, sizeof(buf),
                         "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %zu\r\n"
                         "Cache-Control: no-store\r\nConnection: close\r\n%s\r\n%s",
                         status, strlen(body), extra, body);

        if (n > 0 && (size_t)n < sizeof(buf))
                (void)send_all(p->l, fd, buf, (size_t)n);
        explicit_bzero(buf, sizeof(buf));
}

/* Reads until the blank line that ends the first head: its length with the
 * blank line, 0 when the client went or stopped, -E2BIG past the cap. What
 * came after it is in buf too (*ret_len is all that was read). */
static ssize_t read_head(const struct dm_preview *p, int fd, char *buf, size_t cap, size_t *ret_len)
{
        size_t len = 0;

        for (;;) {
                char *end;
                ssize_t n;
                int r;

                buf[len] = '\0';
                if ((end = strstr(buf, "\r\n\r\n")) || (end = strstr(buf, "\n\n"))) {
                        *ret_len = len;
                        return end - buf + (end[0] == '\r' ? 4 : 2);
                }
                if (len == cap)
                        return -E2BIG;
                r = dm_listener_wait(p->l, fd, POLLIN, HEAD_WAIT_MS);
                if (r <= 0)
                        return 0;
                n = recv(fd, buf + len, cap - len, 0);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        continue;
                /* A NUL in the head hides its end from strstr: the cap ends it. */
                if (n <= 0)
                        return 0;
                len += (size_t)n;
        }
}

/* Whether a Cookie header value carries this preview's cookie. */
static bool cookie_ok(const struct dm_preview *p, const char *value)
{
        size_t nl = strlen(p->cookie_name);

        while (*value) {
                size_t k;

                while (*value == ' ' || *value == '\t' || *value == ';')
                        value++;
                k = strcspn(value, ";");
                if (k > nl && strncmp(value, p->cookie_name, nl) == 0 && value[nl] == '=' &&
                    dm_mcphttp_secret_equal(value + nl + 1, k - nl - 1, p->secret, strlen(p->secret)))
                        return true;
                value += k;
        }
        return false;
}

/* Takes demesne_code=... out of target (in place), into given (""
 * when there is none; cut at its size, which then fails the check); target
 * keeps its path and its other parameters. Whether it had one. */
static bool take_code(char *target, char *given, size_t size)
{
        char *q = strchr(target, '?'), *s, *out;
        bool found = false;

        given[0] = '\0';
        if (!q)
                return false;
        s = q + 1;
        out = q;
        while (*s) {
                size_t k = strcspn(s, "&");
                char *next = s + k + (s[k] == '&');

                if (!found && strncmp(s, CODE_PARAM, strlen(CODE_PARAM)) == 0) {
                        size_t v = k - strlen(CODE_PARAM);

                        found = true;
                        snprintf(given, size, "%.*s", (int)(v < size ? v : size - 1), s + strlen(CODE_PARAM));
                        if (v >= size)
                                given[0] = '\0';
                } else {
                        char sep = out == q ? '?' : '&';

                        *out++ = sep;
                        memmove(out, s, k);
                        out += k;
                }
                s = next;
        }
        *out = '\0';
        return found;
}

enum verdict { V_RELAY, V_ANSWERED };

/* The first head's check: the code (once), then the cookie. */
static enum verdict check_head(struct dm_preview *p, int fd, char *head)
{
        char *s = head, *line, *method, *target, *version, code[DM_PREVIEW_CODE_LEN + 1];
        char location[520], extra[800];
        char given[DM_PREVIEW_CODE_LEN + 1];
        const char *name, *value;
        bool cookie = false, hit = false;

        line = dm_httphead_next_line(&s);
        if (!line || dm_httphead_request_line(line, &method, &target, &version) < 0 ||
            !dm_httphead_target_chars_ok(target) || target[0] != '/') {
                answer(p, fd, "400 Bad Request", "", "demesne preview: a bad request line\n");
                return V_ANSWERED;
        }
        while ((line = dm_httphead_next_line(&s)))
                if (dm_httphead_field(line, 64, &name, &value) == DM_HTTPHEAD_FIELD_OK &&
                    strcasecmp(name, "Cookie") == 0 && cookie_ok(p, value))
                        cookie = true;
        if (take_code(target, given, sizeof(given))) {
                pthread_mutex_lock(&p->lock);
                snprintf(code, sizeof(code), "%s", p->code);
                hit = code[0] && given[0] && dm_mcphttp_secret_equal(given, strlen(given), code, strlen(code));
                if (hit)
                        explicit_bzero(p->code, sizeof(p->code));
                pthread_mutex_unlock(&p->lock);
                explicit_bzero(code, sizeof(code));
                if (!hit) {
                        answer(p, fd, "401 Unauthorized", "",
                               "demesne preview: this code is wrong or was used already; call sandbox_expose again "
                               "for a new one\n");
                        return V_ANSWERED;
                }
                /* "//host" (and "/\\host", which browsers read the same) would
                 * leave for another site; a target too long for the answer
                 * would burn the code with no cookie. */
                snprintf(location, sizeof(location), "%s",
                         target[1] == '/' || target[1] == '\\' || strlen(target) > 512 ? "/" : target);
                snprintf(extra, sizeof(extra),
                         "Location: %s\r\nSet-Cookie: %s=%s; HttpOnly; SameSite=Strict; Path=/\r\n", location,
                         p->cookie_name, p->secret);
                answer(p, fd, "303 See Other", extra, "demesne preview: signed in\n");
                explicit_bzero(extra, sizeof(extra));
                log_info("%s: a browser signed in with the code", p->what);
                return V_ANSWERED;
        }
        if (!cookie) {
                answer(p, fd, "401 Unauthorized", "",
                       "demesne preview: open the URL sandbox_expose returned (its code works once)\n");
                return V_ANSWERED;
        }
        return V_RELAY;
}

/* A socket in the sandbox's namespace, connected to its 127.0.0.1:port;
 * or one connected to the server's endpoint. */
static int connect_in(struct dm_preview *p, int *ret_fd)
{
        struct sockaddr_in lo = { .sin_family = AF_INET,
                                  .sin_port = htons(p->port),
                                  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        const struct sockaddr *a = (const struct sockaddr *)&lo;
        socklen_t al = sizeof(lo);
        int fd = -1, e = 0, r;
        socklen_t el = sizeof(e);

        if (p->up) {
                a = dm_preview_upstream_addr(p->up, &al);
                fd = socket(a->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return -errno;
                goto dial;
        }
        pthread_mutex_lock(&p->lock);
        if (p->n_stock == 0) {
                struct dm_error err = { 0 };

                /* Made for the pinned process only: a pid it left is not followed. */
                r = dm_preview_alive(p) ? dm_netns_sockets(p->pid, STOCK, p->stock, &err) : -ESRCH;
                if (r == 0 && !dm_preview_alive(p)) {
                        for (size_t i = 0; i < STOCK; i++)
                                close(p->stock[i]);
                        r = -ESRCH;
                }
                if (r < 0 && err.msg[0])
                        log_warning("%s: %s", p->what, err.msg);
                p->n_stock = r == 0 ? STOCK : 0;
        }
        if (p->n_stock > 0)
                fd = p->stock[--p->n_stock];
        pthread_mutex_unlock(&p->lock);
        if (fd < 0)
                return -ESRCH;
dial:
        if (connect(fd, a, al) < 0 && errno != EINPROGRESS) {
                r = -errno;
                close(fd);
                return r;
        }
        r = dm_listener_wait(p->l, fd, POLLOUT, CONNECT_WAIT_MS);
        if (r <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e) {
                close(fd);
                return r < 0 ? r : -(e ? e : ETIMEDOUT);
        }
        *ret_fd = fd;
        return 0;
}

/* Bytes both ways until both sides have closed (or the preview stops). */
static void pump(const struct dm_preview *p, int a, int b)
{
        bool open[2] = { true, true }; /* a→b, b→a */
        int fds[2] = { a, b };
        char buf[16384];

        while (open[0] || open[1]) {
                struct pollfd pf[3] = { { .fd = open[0] ? a : -1, .events = POLLIN },
                                        { .fd = open[1] ? b : -1, .events = POLLIN },
                                        { .fd = dm_listener_stop_fd(p->l), .events = POLLIN } };
                int r = poll(pf, 3, -1);

                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0 || pf[2].revents)
                        return;
                for (int i = 0; i < 2; i++) {
                        ssize_t n;

                        if (!open[i] || !pf[i].revents)
                                continue;
                        n = recv(fds[i], buf, sizeof(buf), 0);
                        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                                continue;
                        if (n <= 0) {
                                open[i] = false;
                                shutdown(fds[1 - i], SHUT_WR);
                                if (n < 0)
                                        return;
                                continue;
                        }
                        if (send_all(p->l, fds[1 - i], buf, (size_t)n) < 0)
                                return;
                }
        }
}

/* The first head rewritten for the server's endpoint (expose-endpoint.c);
 * a target it refuses is answered 400 here. */
static int upstream_head(struct dm_preview *p, int fd, const char *buf, size_t hl, char **ret, size_t *ret_len)
{
        _cleanup_free_ char *head = strndup(buf, hl);
        int r = head ? dm_preview_upstream_head(p->up, p->cookie_name, head, ret, ret_len) : -ENOMEM;

        if (r == -EINVAL)
                answer(p, fd, "400 Bad Request", "",
                       "demesne preview: a path with '.', '..' or an encoded '.', '/' or '\\' segment\n");
        return r;
}

static void serve(void *owner, struct dm_listener_conn *c, int fd)
{
        struct dm_preview *p = owner;
        char buf[DM_PREVIEW_HEAD_MAX + 1], *head, *first = NULL;
        size_t len = 0, first_len = 0;
        ssize_t hl = read_head(p, fd, buf, DM_PREVIEW_HEAD_MAX, &len);
        int up = -1, r;

        if (hl == -E2BIG)
                answer(p, fd, "431 Request Header Fields Too Large", "", "demesne preview: request head too large\n");
        if (hl <= 0)
                return;
        head = strndup(buf, (size_t)hl);
        if (!head)
                return;
        r = check_head(p, fd, head);
        free(head);
        if (r != V_RELAY)
                return;
        if (p->up && (r = upstream_head(p, fd, buf, (size_t)hl, &first, &first_len)) < 0)
                return;
        if ((r = connect_in(p, &up)) < 0) {
                char body[200];

                snprintf(body, sizeof(body), "demesne preview: nothing answers on port %u %s (%s)\n", p->port,
                         p->up ? "at the server's endpoint" : "in the sandbox", strerror(-r));
                answer(p, fd, "502 Bad Gateway", "", body);
                free(first);
                return;
        }
        if (dm_listener_track(c, up) == 0) {
                /* The head as it came, or rewritten for the endpoint; then what followed it. */
                if ((first ? send_all(p->l, up, first, first_len) : send_all(p->l, up, buf, (size_t)hl)) == 0 &&
                    send_all(p->l, up, buf + hl, len - (size_t)hl) == 0)
                        pump(p, fd, up);
                dm_listener_untrack(c, up);
        }
        close(up);
        if (first)
                explicit_bzero(first, first_len);
        free(first);
        explicit_bzero(buf, sizeof(buf));
}

static void refuse(void *owner, int fd, enum dm_listener_refusal why)
{
        static const char msg[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

        (void)owner;
        (void)why;
        (void)!send(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

int dm_preview_new_code(struct dm_preview *p, char ret_code[DM_PREVIEW_CODE_LEN + 1])
{
        char code[DM_PREVIEW_CODE_LEN + 1];
        int r = dm_mcphttp_random_id(code);

        if (r < 0)
                return r;
        pthread_mutex_lock(&p->lock);
        memcpy(p->code, code, sizeof(code));
        pthread_mutex_unlock(&p->lock);
        memcpy(ret_code, code, sizeof(code));
        explicit_bzero(code, sizeof(code));
        return 0;
}

void dm_preview_address(const struct dm_preview *p, struct sockaddr_in *ret)
{
        dm_listener_address(p->l, ret);
}

int dm_preview_open(const struct sockaddr_in *bind, int pid, const struct dm_endpoint *ep, uint16_t port,
                    const char *what, struct dm_preview **ret, char ret_code[DM_PREVIEW_CODE_LEN + 1],
                    struct dm_error *err)
{
        struct dm_listener_conf conf = {
                .max_conns = DM_PREVIEW_MAX_CONNS, .backlog = 64, .refuse = refuse, .serve = serve
        };
        struct dm_preview *p = calloc(1, sizeof(*p));
        struct sockaddr_in a;
        int r;

        if (!p)
                return dm_error_set(err, -ENOMEM, "out of memory");
        pthread_mutex_init(&p->lock, NULL);
        p->pidfd = -1;
        p->pid = pid;
        p->port = port;
        snprintf(p->what, sizeof(p->what), "%s", what);
        conf.what = p->what;
        conf.owner = p;
        if (ep) {
                if ((r = dm_preview_upstream_new(ep, &p->up, err)) < 0)
                        goto fail;
        } else if ((r = dm_pidfd_open(pid)) < 0) {
                dm_error_set(err, r, "the sandbox's process %d: %s", pid, strerror(-r));
                goto fail;
        } else
                p->pidfd = r;
        if ((r = dm_mcphttp_token_generate(p->secret)) < 0 || (r = dm_preview_new_code(p, ret_code)) < 0) {
                dm_error_set(err, r, "no randomness for the preview's secrets: %s", strerror(-r));
                goto fail;
        }
        if ((r = dm_listener_new(&conf, bind, &p->l)) < 0) {
                char host[INET_ADDRSTRLEN] = "?";

                inet_ntop(AF_INET, &bind->sin_addr, host, sizeof(host));
                dm_error_set(err, r, "listen on %s (DEMESNE_EXPOSE_ADDR): %s", host, strerror(-r));
                goto fail;
        }
        dm_listener_address(p->l, &a);
        snprintf(p->cookie_name, sizeof(p->cookie_name), "demesne_preview_%u", ntohs(a.sin_port));
        if ((r = dm_listener_start(p->l)) < 0) {
                dm_error_set(err, r, "start the preview's thread: %s", strerror(-r));
                goto fail;
        }
        *ret = p;
        return 0;
fail:
        dm_preview_close(p);
        return r;
}

void dm_preview_close(struct dm_preview *p)
{
        if (!p)
                return;
        dm_listener_free(p->l);
        for (size_t i = 0; i < p->n_stock; i++)
                close(p->stock[i]);
        if (p->pidfd >= 0)
                close(p->pidfd);
        dm_preview_upstream_free(p->up);
        explicit_bzero(p->secret, sizeof(p->secret));
        explicit_bzero(p->code, sizeof(p->code));
        pthread_mutex_destroy(&p->lock);
        free(p);
}
