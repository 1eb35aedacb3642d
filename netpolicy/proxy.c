/* SPDX-License-Identifier: MIT */
/* The egress proxy's server: a listener (listener.h: accept thread, thread
 * per connection) per sandbox. A thread per connection keeps each
 * connection's state on its own stack and its blocking steps (DNS, connect)
 * out of everyone else's way; the per-sandbox cap bounds the thread count.
 * Every socket is non-blocking and every wait is a poll() that also watches
 * the listener's stop eventfd, so removal wakes everything at once. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "netpolicy/listener.h"
#include "netpolicy/proxy-internal.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

#define MAX_ADDRS 16
#define RESPONSE_HEAD_MAX (64 * 1024)
#define RELAY_CHUNK 16384

struct dm_proxy {
        struct dm_proxy_limits limits;
        char *hosts_file;
        pthread_mutex_t lock;
        struct dm_proxy_sandbox *sandboxes;
};

/* One client connection, on its thread's stack. */
struct conn {
        struct dm_proxy_sandbox *sb;
        int fd;
};

struct dm_proxy_sandbox {
        struct dm_proxy *proxy;
        char *id;
        struct in_addr source;
        struct dm_proxy_policy policy;
        int log_fd;
        bool transparent;
        struct dm_egress_tally *tally;
        struct dm_listener *listener;
        pthread_mutex_t lock; /* log writes */
        struct dm_proxy_sandbox *next;
};

void dm_proxy_limits_default(struct dm_proxy_limits *l)
{
        *l = (struct dm_proxy_limits){
                .max_header_bytes = 16 * 1024,
                .max_conns = 64,
                .connect_timeout_ms = 10 * 1000,
                .header_timeout_ms = 30 * 1000,
                .idle_timeout_ms = 300 * 1000,
        };
}

/* --- the egress log -------------------------------------------------------- */

/* One record of a connection, filled as it goes and logged once. */
struct session {
        struct conn *c;
        char method[40];
        char target[300];
        int status;
        bool allowed; /* the policy said yes (the upstream may still fail) */
        struct dm_proxy_verdict v;
        unsigned long long up, down;
        int64_t start_ms;
};

/* The decision counted for the run's journal: host and port from the
 * target ("host:port", or "-" before a request was read). */
static void tally(struct dm_proxy_sandbox *sb, const struct session *s)
{
        char host[sizeof(s->target)];
        const char *colon = strrchr(s->target, ':');
        unsigned long port = colon ? strtoul(colon + 1, NULL, 10) : 0;

        snprintf(host, sizeof(host), "%.*s", colon ? (int)(colon - s->target) : (int)strlen(s->target), s->target);
        dm_egress_tally_add(sb->tally, host, port <= 65535 ? (uint16_t)port : 0, s->allowed,
                            dm_proxy_verdict_rule(&s->v, s->allowed), s->up, s->down);
}

static void egress_log(struct dm_proxy_sandbox *sb, const struct session *s)
{
        char line[1024], ts[32];
        struct timespec now;
        struct tm tm;
        int n;

        tally(sb, s);
        if (sb->log_fd < 0)
                return;
        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
        n = snprintf(line, sizeof(line), "%s.%03ldZ %s %s %s %d up=%llu down=%llu ms=%lld reason=\"%s\"\n", ts,
                     now.tv_nsec / 1000000, s->method, s->target, s->allowed ? "allowed" : "denied", s->status, s->up,
                     s->down, (long long)(dm_now_ms() - s->start_ms), s->v.reason);
        if (n < 0)
                return;
        if ((size_t)n >= sizeof(line)) {
                n = sizeof(line) - 1;
                line[n - 1] = '\n';
        }
        /* One write per line under the lock keeps lines whole in O_APPEND. */
        pthread_mutex_lock(&sb->lock);
        if (write(sb->log_fd, line, (size_t)n) < 0)
                log_warning("egress proxy: sandbox '%s': cannot write egress log: %s", sb->id, strerror(errno));
        pthread_mutex_unlock(&sb->lock);
}

/* --- waiting and writing --------------------------------------------------- */

static int send_all(struct dm_proxy_sandbox *sb, int fd, const char *data, size_t n, int timeout_ms)
{
        return dm_listener_send_all(sb->listener, fd, data, n, timeout_ms);
}

/* Answers the client with the verdict's status and reason, logs, and lets
 * the client read the answer before the socket closes (a close with unread
 * input would reset the connection and lose the answer). */
static void refuse(struct session *s, int fd)
{
        struct dm_proxy_sandbox *sb = s->c->sb;
        char resp[512];
        int status = dm_proxy_code_status(s->v.code);
        int n = snprintf(resp, sizeof(resp),
                         "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n"
                         "\r\n%s\n",
                         status, dm_proxy_status_text(status), strlen(s->v.reason) + 1, s->v.reason);

        s->status = status;
        egress_log(sb, s);
        if (send_all(sb, fd, resp, (size_t)n, 1000) < 0)
                return;
        shutdown(fd, SHUT_WR);
        for (int i = 0; i < 16 && dm_listener_wait(sb->listener, fd, POLLIN, 500) > 0; i++) {
                char sink[4096];
                if (recv(fd, sink, sizeof(sink), 0) <= 0)
                        break;
        }
}

/* --- the request ----------------------------------------------------------- */

/* Reads the request head into head (capped). 0, or -1 with s->v set, or -2
 * when the client went away before a head: nothing to answer or log. */
static int read_head(struct session *s, struct dm_buf *head, size_t *ret_end)
{
        struct dm_proxy_sandbox *sb = s->c->sb;
        const struct dm_proxy_limits *l = &sb->proxy->limits;
        int64_t deadline = dm_now_ms() + l->header_timeout_ms;

        for (;;) {
                char chunk[4096];
                size_t room = l->max_header_bytes - head->len, end;
                ssize_t n = recv(s->c->fd, chunk, room < sizeof(chunk) ? room : sizeof(chunk), 0);

                if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
                        int r = dm_listener_wait(sb->listener, s->c->fd, POLLIN, (int)(deadline - dm_now_ms()));
                        if (r < 0)
                                return -2;
                        if (r == 0)
                                return head->len ? dm_proxy_verdict_set(&s->v, DM_PROXY_BAD_REQUEST,
                                                                        "no complete request head within %d ms",
                                                                        l->header_timeout_ms)
                                                 : -2;
                        continue;
                }
                if (n <= 0)
                        return -2;
                if (dm_buf_append(head, chunk, (size_t)n) < 0)
                        return dm_proxy_verdict_set(&s->v, DM_PROXY_BAD_REQUEST, "out of memory");
                end = dm_proxy_head_end(head->data, head->len);
                if (end) {
                        *ret_end = end;
                        return 0;
                }
                if (head->len >= l->max_header_bytes)
                        return dm_proxy_verdict_set(&s->v, DM_PROXY_HEADER_TOO_LARGE,
                                                    "request head larger than %zu bytes", l->max_header_bytes);
        }
}

/* The host's IPv4 addresses now (addresses come and go: read per request),
 * malloc'ed; NULL with *ret_n 0 when they cannot be read. */
static struct in_addr *own_addresses(size_t *ret_n)
{
        struct ifaddrs *ifa, *i;
        struct in_addr *ret = NULL;
        size_t n = 0, max = 0;

        *ret_n = 0;
        if (getifaddrs(&ifa) < 0)
                return NULL;
        for (i = ifa; i; i = i->ifa_next)
                max += i->ifa_addr && i->ifa_addr->sa_family == AF_INET;
        ret = calloc(max ? max : 1, sizeof(*ret));
        for (i = ifa; ret && i; i = i->ifa_next)
                if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET)
                        ret[n++] = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        freeifaddrs(ifa);
        *ret_n = n;
        return ret;
}

/* An IP literal a CIDR rule allowed: still never one of the host's. */
static int literal_checked(struct session *s, struct in_addr a)
{
        size_t n_own;
        _cleanup_free_ struct in_addr *own = own_addresses(&n_own);
        char text[INET_ADDRSTRLEN];

        inet_ntop(AF_INET, &a, text, sizeof(text));
        return dm_proxy_check_address(text, a, own, n_own, &s->v);
}

/* The addresses to try for an allowed name: the hosts file first, then DNS,
 * then the rebinding rule. 0 with at least one address, or -1 with s->v. */
static int resolve(struct session *s, const char *name, struct in_addr *ret, size_t *ret_n)
{
        struct dm_proxy_sandbox *sb = s->c->sb;
        struct in_addr found[MAX_ADDRS];
        _cleanup_free_ struct in_addr *own = NULL;
        struct dm_proxy_verdict first = { 0 };
        size_t n = 0, n_own, k = 0;
        int r = 0;

        if (sb->proxy->hosts_file) {
                r = dm_proxy_hosts_lookup(sb->proxy->hosts_file, name, found, MAX_ADDRS, &n);
                if (r < 0)
                        return dm_proxy_verdict_set(&s->v, DM_PROXY_RESOLVE_FAILED, "cannot read hosts file '%s': %s",
                                                    sb->proxy->hosts_file, strerror(-r));
        }
        if (r == 0) {
                struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res, *a;
                int g = getaddrinfo(name, NULL, &hints, &res);
                if (g != 0)
                        return dm_proxy_verdict_set(&s->v, DM_PROXY_RESOLVE_FAILED, "cannot resolve '%s': %s", name,
                                                    gai_strerror(g));
                for (a = res; a && n < MAX_ADDRS; a = a->ai_next)
                        found[n++] = ((struct sockaddr_in *)a->ai_addr)->sin_addr;
                freeaddrinfo(res);
        }
        own = own_addresses(&n_own);
        for (size_t i = 0; i < n; i++) {
                struct dm_proxy_verdict v;
                if (dm_proxy_check_address(name, found[i], own, n_own, &v) == 0)
                        ret[k++] = found[i];
                else if (first.code == DM_PROXY_OK)
                        first = v;
        }
        if (k == 0) {
                s->v = first;
                if (s->v.code == DM_PROXY_OK)
                        dm_proxy_verdict_set(&s->v, DM_PROXY_RESOLVE_FAILED, "'%s' has no IPv4 address", name);
                return -1;
        }
        *ret_n = k;
        return 0;
}

/* Connects to the first address that answers within the connect timeout.
 * The fd, or -1 with s->v set (504 when the time ran out, else 502). */
static int connect_upstream(struct session *s, const struct in_addr *addrs, size_t n, uint16_t port)
{
        struct dm_proxy_sandbox *sb = s->c->sb;
        int64_t deadline = dm_now_ms() + sb->proxy->limits.connect_timeout_ms;
        char a[INET_ADDRSTRLEN];
        int last = 0;

        for (size_t i = 0; i < n; i++) {
                struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = addrs[i] };
                _cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                socklen_t len = sizeof(last);
                int r;

                if (fd < 0)
                        return dm_proxy_verdict_set(&s->v, DM_PROXY_CONNECT_FAILED, "socket: %s", strerror(errno));
                inet_ntop(AF_INET, &addrs[i], a, sizeof(a));
                if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
                        return TAKE_FD(fd);
                if (errno != EINPROGRESS) {
                        last = errno;
                        continue;
                }
                r = dm_listener_wait(sb->listener, fd, POLLOUT, (int)(deadline - dm_now_ms()));
                if (r < 0)
                        return dm_proxy_verdict_set(&s->v, DM_PROXY_CONNECT_FAILED, "proxy shutting down");
                if (r == 0)
                        return dm_proxy_verdict_set(&s->v, DM_PROXY_CONNECT_TIMEOUT,
                                                    "connect to %s:%u timed out after %d ms", a, port,
                                                    sb->proxy->limits.connect_timeout_ms);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &last, &len) < 0)
                        last = errno;
                if (last == 0)
                        return TAKE_FD(fd);
        }
        return dm_proxy_verdict_set(&s->v, DM_PROXY_CONNECT_FAILED, "connect to %s:%u: %s", a, port,
                                    strerror(last ? last : EHOSTUNREACH));
}

/* --- relaying -------------------------------------------------------------- */

struct pipe {
        char fixed[RELAY_CHUNK];
        char *data, *heap; /* data points at fixed or heap */
        size_t len, off;
        bool eof, shut;
};

static bool pending(const struct pipe *p)
{
        return p->off < p->len;
}

/* Queues n bytes of data (copied) for sending. 0 or -ENOMEM. */
static int pipe_load(struct pipe *p, const char *data, size_t n)
{
        char *heap = NULL;

        if (n > sizeof(p->fixed) && !(heap = malloc(n)))
                return -ENOMEM;
        free(p->heap);
        p->heap = heap;
        p->data = heap ? heap : p->fixed;
        if (n)
                memcpy(p->data, data, n);
        p->len = n;
        p->off = 0;
        return 0;
}

/* Queues a malloc'ed buffer, taking it over. */
static void pipe_take(struct pipe *p, char *heap, size_t n)
{
        free(p->heap);
        p->heap = heap;
        p->data = heap;
        p->len = n;
        p->off = 0;
}

/* Sends what p holds to fd. 0, or -1 when fd failed. */
static int pipe_flush(struct pipe *p, int fd, unsigned long long *count)
{
        ssize_t w = send(fd, p->data + p->off, p->len - p->off, MSG_NOSIGNAL);

        if (w < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : -1;
        p->off += (size_t)w;
        *count += (unsigned long long)w;
        if (!pending(p))
                pipe_load(p, NULL, 0);
        return 0;
}

/* Reads from fd into p. 0, or -1 when fd failed. */
static int pipe_fill(struct pipe *p, int fd)
{
        ssize_t n = recv(fd, p->fixed, sizeof(p->fixed), 0);

        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (n == 0) {
                p->eof = true;
                return 0;
        }
        free(p->heap);
        p->heap = NULL;
        p->data = p->fixed;
        p->len = (size_t)n;
        p->off = 0;
        return 0;
}

/* Plain HTTP: reads the response head from upstream and queues its rewrite
 * for the client. 0 (maybe incomplete), or -1 with s->v set. */
static int fill_response_head(struct session *s, struct pipe *down, int fd, struct dm_buf *head, bool *done)
{
        char chunk[4096];
        struct dm_buf out;
        ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
        size_t end;

        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        if (n <= 0)
                return dm_proxy_verdict_set(&s->v, DM_PROXY_CONNECT_FAILED, "upstream closed before a response");
        if (dm_buf_append(head, chunk, (size_t)n) < 0)
                return dm_proxy_verdict_set(&s->v, DM_PROXY_CONNECT_FAILED, "upstream response head too large");
        end = dm_proxy_head_end(head->data, head->len);
        if (!end)
                return 0;
        dm_buf_init(&out, RESPONSE_HEAD_MAX * 2);
        if (dm_proxy_response_build(head->data, end, &out) < 0 ||
            dm_buf_append(&out, head->data + end, head->len - end) < 0) {
                dm_buf_release(&out);
                return dm_proxy_verdict_set(&s->v, DM_PROXY_CONNECT_FAILED, "upstream sent a malformed response");
        }
        s->status = atoi(head->data + 9);
        n = (ssize_t)out.len;
        pipe_take(down, dm_buf_steal(&out), (size_t)n);
        *done = true;
        return 0;
}

/* Moves bytes both ways until both sides have finished, either fails, the
 * idle timeout passes or the sandbox is removed. Half-closes are passed on.
 * With rewrite, the upstream's response head is rewritten first; a failure
 * there is answered with 502 (-1, s->v set). */
static int relay(struct session *s, int up_fd, struct pipe *up, struct pipe *down, bool rewrite)
{
        struct dm_proxy_sandbox *sb = s->c->sb;
        int cfd = s->c->fd, ret = 0;
        bool head_done = !rewrite;
        struct dm_buf head;

        dm_buf_init(&head, RESPONSE_HEAD_MAX);
        for (;;) {
                struct pollfd p[3] = {
                        { .fd = cfd },
                        { .fd = up_fd },
                        { .fd = dm_listener_stop_fd(sb->listener), .events = POLLIN },
                };
                int r;

                if (up->eof && !pending(up) && !up->shut) {
                        shutdown(up_fd, SHUT_WR);
                        up->shut = true;
                }
                if (down->eof && !pending(down) && !down->shut) {
                        shutdown(cfd, SHUT_WR);
                        down->shut = true;
                }
                if (up->shut && down->shut)
                        break;
                if (!up->eof && !pending(up))
                        p[0].events |= POLLIN;
                if (pending(down))
                        p[0].events |= POLLOUT;
                if (!down->eof && !pending(down))
                        p[1].events |= POLLIN;
                if (pending(up))
                        p[1].events |= POLLOUT;
                /* A hung-up fd we want nothing from would make poll spin. */
                for (int i = 0; i < 2; i++)
                        if (!p[i].events)
                                p[i].fd = -1;
                r = poll(p, 3, sb->proxy->limits.idle_timeout_ms);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0 || p[2].revents)
                        break;
                if ((p[0].revents & (POLLIN | POLLHUP | POLLERR)) && (p[0].events & POLLIN) && pipe_fill(up, cfd) < 0)
                        break;
                if ((p[1].revents & (POLLOUT | POLLHUP | POLLERR)) && (p[1].events & POLLOUT) &&
                    pipe_flush(up, up_fd, &s->up) < 0)
                        break;
                if ((p[1].revents & (POLLIN | POLLHUP | POLLERR)) && (p[1].events & POLLIN)) {
                        if (!head_done) {
                                if (fill_response_head(s, down, up_fd, &head, &head_done) < 0) {
                                        ret = -1;
                                        break;
                                }
                        } else if (pipe_fill(down, up_fd) < 0) {
                                break;
                        }
                }
                if ((p[0].revents & (POLLOUT | POLLHUP | POLLERR)) && (p[0].events & POLLOUT) &&
                    pipe_flush(down, cfd, &s->down) < 0)
                        break;
        }
        dm_buf_release(&head);
        return ret;
}

/* --- one connection -------------------------------------------------------- */

static void pipes_free(struct pipe *up, struct pipe *down)
{
        if (up)
                free(up->heap);
        if (down)
                free(down->heap);
        free(up);
        free(down);
}

static void serve(struct session *s)
{
        struct dm_proxy_sandbox *sb = s->c->sb;
        struct dm_proxy_request req = { 0 };
        struct in_addr addrs[MAX_ADDRS];
        struct pipe *up = NULL, *down = NULL;
        struct dm_buf head, fwd;
        size_t end = 0, n = 1;
        char name[256];
        _cleanup_close_ int up_fd = -1;
        int r;

        dm_buf_init(&head, sb->proxy->limits.max_header_bytes);
        dm_buf_init(&fwd, sb->proxy->limits.max_header_bytes + 1024);
        r = read_head(s, &head, &end);
        if (r == -2)
                goto out;
        if (r < 0 || dm_proxy_request_parse(head.data, end, &req, &s->v) < 0) {
                if (req.method)
                        snprintf(s->method, sizeof(s->method), "%s", req.method);
                refuse(s, s->c->fd);
                goto out;
        }
        snprintf(s->method, sizeof(s->method), "%s", req.method);
        snprintf(s->target, sizeof(s->target), "%.255s:%u", req.host, req.port);
        r = dm_proxy_check_target(&sb->policy, req.host, req.port, req.is_connect, name, &addrs[0], &s->v);
        if (r < 0 || (r == 0 && resolve(s, name, addrs, &n) < 0) || (r == 1 && literal_checked(s, addrs[0]) < 0)) {
                refuse(s, s->c->fd);
                goto out;
        }
        s->allowed = true;
        if ((up_fd = connect_upstream(s, addrs, n, req.port)) < 0) {
                refuse(s, s->c->fd);
                goto out;
        }

        up = calloc(1, sizeof(*up));
        down = calloc(1, sizeof(*down));
        if (!up || !down)
                goto out;
        if (pipe_load(up, head.data + end, head.len - end) < 0 || pipe_load(down, NULL, 0) < 0)
                goto out;
        if (req.is_connect) {
                static const char ok_resp[] = "HTTP/1.1 200 Connection established\r\n\r\n";
                s->status = 200;
                if (send_all(sb, s->c->fd, ok_resp, sizeof(ok_resp) - 1, sb->proxy->limits.idle_timeout_ms) < 0)
                        goto log;
        } else {
                if (dm_proxy_request_build(&req, &fwd) < 0 ||
                    send_all(sb, up_fd, fwd.data, fwd.len, sb->proxy->limits.idle_timeout_ms) < 0)
                        goto log;
                s->up += fwd.len;
        }
        if (relay(s, up_fd, up, down, !req.is_connect) < 0 && s->down == 0) {
                refuse(s, s->c->fd);
                goto out;
        }
log:
        egress_log(sb, s);
out:
        pipes_free(up, down);
        dm_buf_release(&fwd);
        dm_buf_release(&head);
        dm_proxy_request_release(&req);
}

/* A raw TCP connection to an address in the sandbox's namespace: relayed to
 * that address from here when the policy allows it, else reset. */
static void serve_transparent(struct session *s)
{
        struct dm_proxy_sandbox *sb = s->c->sb;
        struct sockaddr_in dst;
        socklen_t len = sizeof(dst);
        struct in_addr addr;
        struct pipe *up = NULL, *down = NULL;
        char text[INET_ADDRSTRLEN], name[256];
        _cleanup_close_ int up_fd = -1;
        uint16_t port;
        int r;

        snprintf(s->method, sizeof(s->method), "TCP");
        if (getsockname(s->c->fd, (struct sockaddr *)&dst, &len) < 0 || dst.sin_family != AF_INET) {
                dm_proxy_verdict_set(&s->v, DM_PROXY_CONNECT_FAILED, "cannot tell the original destination");
                goto refuse;
        }
        port = ntohs(dst.sin_port);
        inet_ntop(AF_INET, &dst.sin_addr, text, sizeof(text));
        snprintf(s->target, sizeof(s->target), "%s:%u", text, port);
        r = dm_proxy_check_target(&sb->policy, text, port, true, name, &addr, &s->v);
        if (r != 1 || literal_checked(s, addr) < 0)
                goto refuse;
        s->allowed = true;
        if ((up_fd = connect_upstream(s, &addr, 1, port)) < 0)
                goto refuse;
        up = calloc(1, sizeof(*up));
        down = calloc(1, sizeof(*down));
        if (up && down && pipe_load(up, NULL, 0) >= 0 && pipe_load(down, NULL, 0) >= 0) {
                s->status = 200;
                relay(s, up_fd, up, down, false);
        }
        egress_log(sb, s);
        pipes_free(up, down);
        return;
refuse:
        /* Reset, nothing sent: the sandbox sees a refused connection. */
        s->status = dm_proxy_code_status(s->v.code);
        egress_log(sb, s);
        setsockopt(s->c->fd, SOL_SOCKET, SO_LINGER, &(struct linger){ .l_onoff = 1, .l_linger = 0 },
                   sizeof(struct linger));
}

static void serve_conn(void *owner, struct dm_listener_conn *lc, int fd)
{
        struct conn c = { .sb = owner, .fd = fd };
        struct session s = { .c = &c, .method = "-", .target = "-", .start_ms = dm_now_ms() };

        (void)lc;
        if (c.sb->transparent)
                serve_transparent(&s);
        else
                serve(&s);
}

/* Refusals decided before a connection gets its thread. */
static void refuse_early(struct dm_proxy_sandbox *sb, int fd, enum dm_proxy_code code, const char *reason)
{
        struct conn c = { .sb = sb, .fd = fd };
        struct session s = { .c = &c, .method = "-", .target = "-", .start_ms = dm_now_ms() };

        dm_proxy_verdict_set(&s.v, code, "%s", reason);
        refuse(&s, fd);
}

static bool admit_conn(void *owner, int fd, const struct sockaddr_in *peer)
{
        struct dm_proxy_sandbox *sb = owner;
        char a[INET_ADDRSTRLEN], reason[128];

        if (sb->source.s_addr == htonl(INADDR_ANY) || peer->sin_addr.s_addr == sb->source.s_addr)
                return true;
        snprintf(reason, sizeof(reason), "connection from %s, which is not this sandbox's address",
                 inet_ntop(AF_INET, &peer->sin_addr, a, sizeof(a)));
        refuse_early(sb, fd, DM_PROXY_UNKNOWN_SOURCE, reason);
        return false;
}

static void refuse_conn(void *owner, int fd, enum dm_listener_refusal why)
{
        struct dm_proxy_sandbox *sb = owner;

        if (why == DM_LISTENER_FULL) {
                refuse_early(sb, fd, DM_PROXY_TOO_MANY, "too many open connections for this sandbox");
                return;
        }
        log_warning("egress proxy: sandbox '%s': cannot start a connection thread", sb->id);
        refuse_early(sb, fd, DM_PROXY_TOO_MANY, "the proxy cannot take another connection now");
}

/* --- lifecycle ------------------------------------------------------------- */

int dm_proxy_new(const struct dm_proxy_limits *limits, const char *hosts_file, struct dm_proxy **ret,
                 struct dm_error *err)
{
        struct dm_proxy *p = calloc(1, sizeof(*p));

        if (!p)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (limits)
                p->limits = *limits;
        else
                dm_proxy_limits_default(&p->limits);
        if (hosts_file && *hosts_file && !(p->hosts_file = strdup(hosts_file))) {
                free(p);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        pthread_mutex_init(&p->lock, NULL);
        *ret = p;
        return 0;
}

/* Stops the listener first: it joins every thread that uses sb. */
static void sandbox_free(struct dm_proxy_sandbox *sb)
{
        dm_listener_free(sb->listener);
        if (sb->log_fd >= 0)
                close(sb->log_fd);
        dm_proxy_policy_release(&sb->policy);
        pthread_mutex_destroy(&sb->lock);
        free(sb->id);
        free(sb);
}

int dm_proxy_add(struct dm_proxy *p, const struct dm_proxy_sandbox_conf *conf, struct dm_proxy_sandbox **ret,
                 struct dm_error *err)
{
        struct dm_proxy_sandbox *sb = calloc(1, sizeof(*sb));
        struct dm_listener_conf lc = {
                .max_conns = p->limits.max_conns,
                .backlog = 128,
                .owner = sb,
                .admit = admit_conn,
                .refuse = refuse_conn,
                .serve = serve_conn,
        };
        char a[INET_ADDRSTRLEN], *what = NULL;
        int r;

        if (!sb)
                return dm_error_set(err, -ENOMEM, "out of memory");
        sb->log_fd = -1;
        pthread_mutex_init(&sb->lock, NULL);
        sb->proxy = p;
        sb->source = conf->source;
        sb->transparent = conf->transparent;
        sb->tally = conf->tally;
        inet_ntop(AF_INET, &conf->listen.sin_addr, a, sizeof(a));
        if (!(sb->id = strdup(conf->id ? conf->id : "-")) || dm_proxy_policy_copy(&sb->policy, conf->policy) < 0) {
                sandbox_free(sb);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        if (conf->log_fd >= 0 && (sb->log_fd = fcntl(conf->log_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
                r = -errno;
                sandbox_free(sb);
                return dm_error_set(err, r, "egress proxy for '%s': dup log fd: %s", conf->id, strerror(-r));
        }
        if (asprintf(&what, "egress proxy: sandbox '%s'", sb->id) < 0) {
                sandbox_free(sb);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        lc.what = what;
        if (conf->listen_fd > 0) {
                int fd = fcntl(conf->listen_fd, F_DUPFD_CLOEXEC, 3);
                r = fd < 0 ? -errno : dm_listener_new_fd(&lc, fd, &sb->listener);
        } else {
                r = dm_listener_new(&lc, &conf->listen, &sb->listener);
        }
        free(what);
        if (r < 0) {
                sandbox_free(sb);
                return dm_error_set(err, r, "egress proxy for '%s': listen on %s:%u: %s", conf->id, a,
                                    ntohs(conf->listen.sin_port), strerror(-r));
        }
        r = dm_listener_start(sb->listener);
        if (r < 0) {
                sandbox_free(sb);
                return dm_error_set(err, r, "egress proxy for '%s': start thread: %s", conf->id, strerror(-r));
        }
        pthread_mutex_lock(&p->lock);
        sb->next = p->sandboxes;
        p->sandboxes = sb;
        pthread_mutex_unlock(&p->lock);
        *ret = sb;
        return 0;
}

void dm_proxy_sandbox_address(const struct dm_proxy_sandbox *s, struct sockaddr_in *ret)
{
        dm_listener_address(s->listener, ret);
}

unsigned dm_proxy_sandbox_connections(struct dm_proxy_sandbox *s)
{
        return dm_listener_connections(s->listener);
}

void dm_proxy_remove(struct dm_proxy *p, struct dm_proxy_sandbox *s)
{
        struct dm_proxy_sandbox **pp;

        if (!s)
                return;
        pthread_mutex_lock(&p->lock);
        for (pp = &p->sandboxes; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        break;
                }
        pthread_mutex_unlock(&p->lock);
        sandbox_free(s); /* stops the listener and joins its threads */
}

void dm_proxy_free(struct dm_proxy *p)
{
        if (!p)
                return;
        while (p->sandboxes)
                dm_proxy_remove(p, p->sandboxes);
        pthread_mutex_destroy(&p->lock);
        free(p->hosts_file);
        free(p);
}
