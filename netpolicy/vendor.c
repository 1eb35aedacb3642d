/* SPDX-License-Identifier: MIT */
/* The vendor proxy's server: a listener (listener.h: an accept thread and a
 * thread per client connection), each connection with its own curl easy
 * handle (kept across the connection's keep-alive requests so the upstream
 * TLS session is reused).
 * The response goes to the client as curl hands it over: head when curl has
 * the headers, then each body piece as one HTTP chunk, so server-sent events
 * arrive when the vendor sends them. Every client wait is a poll() that also
 * watches the stop eventfd; client sockets and curl's sockets are shut down
 * on stop (curl's are tracked with the listener) so curl returns at once. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "netpolicy/listener.h"
#include "netpolicy/proxy-internal.h"
#include "netpolicy/vendor-internal.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

#define HEAD_MAX (64 * 1024)
#define IN_MAX (HEAD_MAX + 16 * 1024)
#define RESPONSE_HEAD_MAX (64 * 1024)
#define FIRST_HEAD_TIMEOUT_MS (30 * 1000)
#define IDLE_TIMEOUT_MS (120 * 1000)
#define SEND_TIMEOUT_MS (300 * 1000)
#define CONNECT_TIMEOUT_MS (10 * 1000)

/* One client connection, on its thread's stack (lc is NULL for a refusal
 * before the thread). */
struct conn {
        struct dm_vendor_proxy *p;
        struct dm_listener_conn *lc;
        int fd;
};

struct dm_vendor_proxy {
        enum dm_vendor provider;
        char *upstream, *token, *usage_path, *live_path, *cap_name;
        struct dm_vendor_cred cred;
        struct dm_vendor_prices prices;
        unsigned max_conns;
        size_t max_body;
        int log_fd;
        struct dm_listener *listener;
        pthread_mutex_t lock; /* usage, log writes, cap_hit, gate */
        struct dm_vendor_usage usage;
        double max_usd;
        bool cap_hit;
        struct dm_vendor_gate gate; /* requests in flight under the cap */
        pthread_cond_t gate_cond;   /* a request let through the gate ended */
        bool vendor_network;        /* egress open: no request filter */
        void (*on_cap)(void *userdata);
        void *cap_userdata;
        struct dm_egress_tally *tally; /* borrowed, or NULL */
};

/* One request and its answer. */
struct exchange {
        struct conn *c;
        CURL *curl;
        struct dm_vendor_request req;
        char method[24], path[200], reason[256];
        int status;
        bool forwarded, keep_alive, chunked, no_body, head_sent, client_failed;
        bool vendor_shape;    /* a refusal in the vendor's own error shape (the filter's) */
        const char *stripped; /* what the filter took out, for the log; NULL: not filtered */
        struct dm_buf head;   /* the response head being collected */
        int up_status;
        struct dm_vendor_meter meter;
        bool metering;
        unsigned long long up, down; /* up: the request body sent upstream */
        int64_t start_ms;
};

/* --- the decision log ------------------------------------------------------ */

/* The request counted for the run's journal: the upstream's host and port
 * (what the host reached on the agent's behalf), "vendor:<provider>". */
static void tally(struct exchange *x)
{
        struct dm_vendor_proxy *p = x->c->p;
        const char *h = strstr(p->upstream, "://");
        bool tls = strncmp(p->upstream, "https:", 6) == 0;
        char host[256], rule[64];
        size_t n;
        unsigned long port;

        if (!p->tally)
                return;
        h = h ? h + 3 : p->upstream;
        n = strcspn(h, ":/");
        port = h[n] == ':' ? strtoul(h + n + 1, NULL, 10) : (tls ? 443 : 80);
        snprintf(host, sizeof(host), "%.*s", (int)(n < sizeof(host) ? n : sizeof(host) - 1), h);
        snprintf(rule, sizeof(rule), "%s:%s", x->forwarded ? "vendor" : "refused:vendor", dm_vendor_name(p->provider));
        dm_egress_tally_add(p->tally, host, port <= 65535 ? (uint16_t)port : 0, x->forwarded, rule, x->up, x->down);
}

static void decision_log(struct exchange *x, const struct dm_vendor_sample *s)
{
        struct dm_vendor_proxy *p = x->c->p;
        char line[1024], ts[32];
        struct timespec now;
        struct tm tm;
        int n;

        tally(x);
        if (p->log_fd < 0)
                return;
        clock_gettime(CLOCK_REALTIME, &now);
        gmtime_r(&now.tv_sec, &tm);
        strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
        n = snprintf(line, sizeof(line),
                     "%s.%03ldZ %s %s %d %s model=%s in=%llu out=%llu cache_read=%llu cache_write=%llu down=%llu "
                     "ms=%lld reason=\"%s\"\n",
                     ts, now.tv_nsec / 1000000, x->method, x->path, x->status, x->forwarded ? "forwarded" : "refused",
                     s && s->model[0] ? s->model : "-", s ? (unsigned long long)s->tokens.input : 0ULL,
                     s ? (unsigned long long)s->tokens.output : 0ULL,
                     s ? (unsigned long long)s->tokens.cache_read : 0ULL,
                     s ? (unsigned long long)s->tokens.cache_write : 0ULL, x->down,
                     (long long)(dm_now_ms() - x->start_ms), x->reason);
        if (n < 0)
                return;
        if ((size_t)n >= sizeof(line)) {
                n = sizeof(line) - 1;
                line[n - 1] = '\n';
        }
        pthread_mutex_lock(&p->lock);
        if (write(p->log_fd, line, (size_t)n) < 0)
                log_warning("vendor proxy: cannot write the request log: %s", strerror(errno));
        pthread_mutex_unlock(&p->lock);
}

/* Printable ASCII only: the reason goes into a log line. */
static void set_reason(struct exchange *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_reason(struct exchange *x, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(x->reason, sizeof(x->reason), fmt, ap);
        va_end(ap);
        for (char *c = x->reason; *c; c++)
                if (*c < 0x20 || *c > 0x7e || *c == '"')
                        *c = '?';
}

/* --- the client socket ----------------------------------------------------- */

static int send_iov(struct dm_vendor_proxy *p, int fd, struct iovec *iov, int n)
{
        while (n > 0) {
                struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)n };
                ssize_t w = sendmsg(fd, &m, MSG_NOSIGNAL);

                if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
                        int r = dm_listener_wait(p->listener, fd, POLLOUT, SEND_TIMEOUT_MS);
                        if (r <= 0)
                                return r < 0 ? r : -ETIMEDOUT;
                        continue;
                }
                if (w < 0)
                        return -errno;
                while (n > 0 && (size_t)w >= iov->iov_len) {
                        w -= (ssize_t)iov->iov_len;
                        iov++, n--;
                }
                if (n > 0) {
                        iov->iov_base = (char *)iov->iov_base + w;
                        iov->iov_len -= (size_t)w;
                }
        }
        return 0;
}

static int send_all(struct dm_vendor_proxy *p, int fd, const void *data, size_t n)
{
        struct iovec v = { .iov_base = (void *)data, .iov_len = n };

        return n ? send_iov(p, fd, &v, 1) : 0;
}

/* Receives more into in (capped). 1 with bytes, 0 at EOF, -ETIMEDOUT,
 * -ECANCELED, -E2BIG when in is full, -errno. */
static int recv_more(struct dm_vendor_proxy *p, int fd, struct dm_buf *in, int timeout_ms)
{
        int64_t deadline = dm_now_ms() + timeout_ms;

        for (;;) {
                char chunk[16384];
                size_t room = in->max - in->len;
                ssize_t n;
                int r;

                if (room == 0)
                        return -E2BIG;
                n = recv(fd, chunk, room < sizeof(chunk) ? room : sizeof(chunk), 0);
                if (n > 0)
                        return dm_buf_append(in, chunk, (size_t)n) < 0 ? -ENOMEM : 1;
                if (n == 0)
                        return 0;
                if (errno != EAGAIN && errno != EINTR)
                        return -errno;
                r = dm_listener_wait(p->listener, fd, POLLIN, (int)(deadline - dm_now_ms()));
                if (r <= 0)
                        return r < 0 ? r : -ETIMEDOUT;
        }
}

static void consume(struct dm_buf *in, size_t n)
{
        memmove(in->data, in->data + n, in->len - n);
        in->len -= n;
        in->data[in->len] = '\0';
}

/* Answers with a JSON error and Connection: close, then lets the client read
 * it before the socket closes (closing with unread input would reset the
 * connection and lose the answer). */
static void refuse(struct exchange *x, int status, const char *type, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static void refuse(struct exchange *x, int status, const char *type, const char *fmt, ...)
{
        struct dm_vendor_proxy *p = x->c->p;
        char msg[512];
        struct dm_buf out;
        va_list ap;
        int64_t deadline = dm_now_ms() + 2000;
        int r;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        set_reason(x, "%s", msg);
        x->status = status;
        x->keep_alive = false;
        decision_log(x, NULL);
        dm_buf_init(&out, 4096);
        r = x->vendor_shape ? dm_vendor_filter_error_response(&out, p->provider, status, msg)
                            : dm_vendor_error_response(&out, status, type, msg);
        if (r == 0 && send_all(p, x->c->fd, out.data, out.len) == 0) {
                shutdown(x->c->fd, SHUT_WR);
                while (dm_now_ms() < deadline &&
                       dm_listener_wait(p->listener, x->c->fd, POLLIN, (int)(deadline - dm_now_ms())) > 0) {
                        char sink[16384];
                        ssize_t n = recv(x->c->fd, sink, sizeof(sink), 0);
                        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                                break;
                }
        }
        dm_buf_release(&out);
}

/* --- reading the request --------------------------------------------------- */

/* Reads a head into in; *ret_end is its length. 0, 1 when the client is
 * gone or idle (nothing to answer), -1 when refused. */
static int read_head(struct exchange *x, struct dm_buf *in, bool first, size_t *ret_end)
{
        int timeout = first ? FIRST_HEAD_TIMEOUT_MS : IDLE_TIMEOUT_MS;

        for (;;) {
                size_t end = in->len ? dm_proxy_head_end(in->data, in->len) : 0;
                int r;

                if (end) {
                        *ret_end = end;
                        return 0;
                }
                if (in->len >= HEAD_MAX) {
                        refuse(x, 431, "invalid_request_error", "request head larger than %d bytes", HEAD_MAX);
                        return -1;
                }
                r = recv_more(x->c->p, x->c->fd, in, timeout);
                if (r == -ETIMEDOUT && in->len) {
                        refuse(x, 408, "invalid_request_error", "no complete request head within %d ms", timeout);
                        return -1;
                }
                if (r <= 0)
                        return 1;
        }
}

/* The body, from what in already holds and then the socket; what follows
 * it stays in in. 0, or -1 when refused or the client went away. */
static int read_body(struct exchange *x, struct dm_buf *in, struct dm_buf *body)
{
        struct dm_vendor_proxy *p = x->c->p;
        const char *te = dm_vendor_request_header(&x->req, "transfer-encoding");
        const char *cl = dm_vendor_request_header(&x->req, "content-length");
        unsigned long long len = 0;
        char *end;
        int r;

        if (te && strcasecmp(te, "chunked") != 0) {
                refuse(x, 501, "invalid_request_error", "transfer-encoding '%.40s' is not supported", te);
                return -1;
        }
        if (te) {
                for (;;) {
                        char *nl;
                        unsigned long long size;

                        while (!(nl = memchr(in->data ? in->data : "", '\n', in->len))) {
                                if (in->len > 1024 || (r = recv_more(p, x->c->fd, in, IDLE_TIMEOUT_MS)) <= 0)
                                        goto broken;
                        }
                        errno = 0;
                        size = strtoull(in->data, &end, 16);
                        if (end == in->data || errno || (*end != ';' && *end != '\r' && *end != '\n'))
                                goto broken;
                        consume(in, (size_t)(nl - in->data) + 1);
                        if (size == 0)
                                break;
                        if (size > p->max_body || body->len + size > p->max_body)
                                goto too_big;
                        while (size > 0) {
                                size_t k;
                                if (in->len == 0 && (r = recv_more(p, x->c->fd, in, IDLE_TIMEOUT_MS)) <= 0)
                                        goto broken;
                                k = in->len < size ? in->len : (size_t)size;
                                if (dm_buf_append(body, in->data, k) < 0)
                                        goto too_big;
                                consume(in, k);
                                size -= k;
                        }
                        while (in->len < 2)
                                if ((r = recv_more(p, x->c->fd, in, IDLE_TIMEOUT_MS)) <= 0)
                                        goto broken;
                        consume(in, in->data[0] == '\r' ? 2 : 1);
                }
                /* Trailer fields, up to the blank line; dropped. */
                for (;;) {
                        char *nl;
                        while (!(nl = memchr(in->data ? in->data : "", '\n', in->len)))
                                if (in->len > 8192 || (r = recv_more(p, x->c->fd, in, IDLE_TIMEOUT_MS)) <= 0)
                                        goto broken;
                        bool blank = nl == in->data || (nl == in->data + 1 && in->data[0] == '\r');
                        consume(in, (size_t)(nl - in->data) + 1);
                        if (blank)
                                return 0;
                }
        }
        if (cl) {
                errno = 0;
                len = strtoull(cl, &end, 10);
                if (!*cl || *end || errno || cl[0] == '-') {
                        refuse(x, 400, "invalid_request_error", "malformed content-length");
                        return -1;
                }
        } else if (strcmp(x->req.method, "POST") == 0) {
                refuse(x, 411, "invalid_request_error", "a POST needs content-length or chunked encoding");
                return -1;
        }
        if (len > p->max_body)
                goto too_big;
        while (body->len < len) {
                size_t k;
                if (in->len == 0 && (r = recv_more(p, x->c->fd, in, IDLE_TIMEOUT_MS)) <= 0)
                        goto broken;
                k = in->len < len - body->len ? in->len : (size_t)(len - body->len);
                if (dm_buf_append(body, in->data, k) < 0)
                        goto too_big;
                consume(in, k);
        }
        return 0;
too_big:
        refuse(x, 413, "request_too_large", "request body larger than %zu bytes", p->max_body);
        return -1;
broken:
        set_reason(x, "client sent a broken or incomplete body");
        x->keep_alive = false;
        x->status = 400;
        decision_log(x, NULL);
        return -1;
}

/* --- curl ------------------------------------------------------------------ */

static curl_socket_t open_socket(void *userp, curlsocktype purpose, struct curl_sockaddr *a)
{
        struct conn *c = userp;
        int fd;

        (void)purpose;
        fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        if (fd < 0)
                return CURL_SOCKET_BAD;
        if (dm_listener_track(c->lc, fd) < 0) { /* a socket that stop could not reach: refuse it */
                close(fd);
                return CURL_SOCKET_BAD;
        }
        return fd;
}

static int close_socket(void *userp, curl_socket_t fd)
{
        struct conn *c = userp;

        dm_listener_untrack(c->lc, fd);
        return close(fd);
}

static int progress(void *userp, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
        struct exchange *x = userp;

        (void)dt, (void)dn, (void)ut, (void)un;
        return dm_listener_stopping(x->c->p->listener) ? 1 : 0;
}

static int send_head(struct exchange *x)
{
        char line[128];
        struct iovec v[3];
        int n;

        x->no_body = x->up_status == 204 || x->up_status == 304;
        x->chunked = !x->req.http10 && !x->no_body;
        if (x->req.http10)
                x->keep_alive = false;
        n = snprintf(line, sizeof(line), "HTTP/1.1 %d %s\r\n", x->up_status, dm_vendor_status_text(x->up_status));
        v[0] = (struct iovec){ line, (size_t)n };
        v[1] = (struct iovec){ x->head.data ? x->head.data : "", x->head.len };
        v[2].iov_base =
                (void *)(x->chunked ? (x->keep_alive ? "Transfer-Encoding: chunked\r\n\r\n"
                                                     : "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
                                    : "Connection: close\r\n\r\n");
        if (!x->chunked)
                x->keep_alive = x->no_body && x->keep_alive;
        if (x->no_body && x->keep_alive)
                v[2].iov_base = (void *)"Content-Length: 0\r\n\r\n";
        v[2].iov_len = strlen(v[2].iov_base);
        x->head_sent = true;
        x->status = x->up_status;
        if (send_iov(x->c->p, x->c->fd, v, 3) < 0) {
                x->client_failed = true;
                return -1;
        }
        return 0;
}

static size_t on_header(char *buf, size_t size, size_t nmemb, void *userp)
{
        struct exchange *x = userp;
        size_t len = size * nmemb, l = len, name_len;
        const char *colon;

        while (l && (buf[l - 1] == '\n' || buf[l - 1] == '\r'))
                l--;
        if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
                long code = 0;
                curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
                x->up_status = code ? (int)code : 502;
                dm_buf_reset(&x->head);
                return len;
        }
        if (l == 0) {
                if (x->up_status >= 100 && x->up_status < 200)
                        return len; /* an interim response: the final one follows */
                return send_head(x) < 0 ? 0 : len;
        }
        if (buf[0] == ' ' || buf[0] == '\t' || !(colon = memchr(buf, ':', l)))
                return len; /* folded or malformed: dropped */
        name_len = (size_t)(colon - buf);
        if (name_len == 12 && strncasecmp(buf, "content-type", 12) == 0 && !x->metering) {
                const char *v = colon + 1;
                while (*v == ' ')
                        v++;
                x->metering = true;
                dm_vendor_meter_init(&x->meter, x->c->p->provider, strncasecmp(v, "text/event-stream", 17) == 0);
        }
        if (!dm_vendor_response_header_keep(buf, name_len))
                return len;
        if (dm_buf_append(&x->head, buf, l) < 0 || dm_buf_append(&x->head, "\r\n", 2) < 0) {
                set_reason(x, "upstream response head larger than %d bytes", RESPONSE_HEAD_MAX);
                return 0;
        }
        return len;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userp)
{
        struct exchange *x = userp;
        size_t len = size * nmemb;
        char prefix[24];
        struct iovec v[3];
        int n;

        if (!x->head_sent && send_head(x) < 0)
                return 0;
        if (x->client_failed)
                return 0;
        if (x->metering)
                dm_vendor_meter_feed(&x->meter, data, len);
        if (x->no_body || len == 0)
                return len;
        if (!x->chunked) {
                if (send_all(x->c->p, x->c->fd, data, len) < 0)
                        goto failed;
        } else {
                n = snprintf(prefix, sizeof(prefix), "%zx\r\n", len);
                v[0] = (struct iovec){ prefix, (size_t)n };
                v[1] = (struct iovec){ data, len };
                v[2] = (struct iovec){ (void *)"\r\n", 2 };
                if (send_iov(x->c->p, x->c->fd, v, 3) < 0)
                        goto failed;
        }
        x->down += len;
        return len;
failed:
        x->client_failed = true;
        return 0;
}

/* Counts a response and lets its request out of the gate (s NULL: it had
 * no usage, or failed). The live copy is what accounting reads; usage.json
 * in /out is the user's. */
static void account(struct exchange *x, const struct dm_vendor_sample *s)
{
        struct dm_vendor_proxy *p = x->c->p;
        struct dm_error err = { 0 }, lerr = { 0 };
        double before;
        int r = 0, lr = 0;
        bool capped = false;

        pthread_mutex_lock(&p->lock);
        before = p->usage.total.cost_usd;
        if (s)
                r = dm_vendor_usage_add(&p->usage, &p->prices, s);
        if (s && r == 0 && p->live_path)
                lr = dm_vendor_usage_write(&p->usage, p->live_path, &lerr);
        if (s && r == 0 && p->usage_path)
                r = dm_vendor_usage_write(&p->usage, p->usage_path, &err);
        dm_vendor_gate_leave(&p->gate, s != NULL, p->usage.total.cost_usd - before);
        if (p->max_usd > 0 && !p->cap_hit && p->usage.total.cost_usd >= p->max_usd)
                capped = p->cap_hit = true;
        pthread_cond_broadcast(&p->gate_cond);
        pthread_mutex_unlock(&p->lock);
        if (lr < 0)
                log_warning("vendor proxy: live usage: %s", lerr.msg);
        if (r < 0)
                log_warning("vendor proxy: usage: %s", err.code ? err.msg : strerror(-r));
        if (capped) {
                log_info("vendor proxy: spending cap of $%.6g reached (%s)", p->max_usd, p->cap_name);
                if (p->on_cap)
                        p->on_cap(p->cap_userdata);
        }
}

/* Waits at the gate (src: vendor-internal.h) until the request may go
 * upstream. true: it went (account() lets it out); false: refused here. */
static bool pass_gate(struct exchange *x)
{
        struct dm_vendor_proxy *p = x->c->p;
        enum dm_vendor_gate_verdict v;
        bool fire = false;
        double spent;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                struct timespec ts;

                v = p->cap_hit ? DM_VENDOR_GATE_CAPPED : dm_vendor_gate_enter(&p->gate, p->usage.total.cost_usd);
                if (v != DM_VENDOR_GATE_WAIT || dm_listener_stopping(p->listener))
                        break;
                /* Woken by a request's end; the stop is looked for often. */
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_nsec += 200 * 1000000L;
                ts.tv_sec += ts.tv_nsec / 1000000000L;
                ts.tv_nsec %= 1000000000L;
                pthread_cond_timedwait(&p->gate_cond, &p->lock, &ts);
        }
        /* Nothing in flight and the next response, as costly as the
         * costliest so far, would pass the cap: it is reached now. */
        if (v == DM_VENDOR_GATE_CAPPED && !p->cap_hit)
                fire = p->cap_hit = true;
        spent = p->usage.total.cost_usd;
        pthread_mutex_unlock(&p->lock);
        if (fire) {
                log_info(
                        "vendor proxy: spending cap of $%.6g reached (%s): $%.4f spent, the next request would pass it",
                        p->max_usd, p->cap_name, spent);
                if (p->on_cap)
                        p->on_cap(p->cap_userdata);
        }
        if (v == DM_VENDOR_GATE_CAPPED)
                refuse(x, 402, "billing_error",
                       "spending cap of $%.6g for this run reached ($%.4f spent; %s): no further model requests are "
                       "forwarded",
                       p->max_usd, spent, p->cap_name);
        else if (v == DM_VENDOR_GATE_WAIT)
                refuse(x, 503, "overloaded_error", "vendor proxy stopping");
        return v == DM_VENDOR_GATE_GO;
}

static void forward(struct exchange *x, const char *path, struct dm_buf *body)
{
        struct dm_vendor_proxy *p = x->c->p;
        struct curl_slist *headers = NULL;
        struct dm_vendor_sample sample;
        char errbuf[CURL_ERROR_SIZE] = "", *url = NULL;
        bool have_sample = false;
        CURLcode rc;

        if (dm_vendor_upstream_headers(&x->req, p->provider, &p->cred, &headers) < 0 ||
            asprintf(&url, "%s%s", p->upstream, path) < 0) {
                url = NULL;
                refuse(x, 500, "api_error", "out of memory");
                goto out;
        }
        curl_easy_reset(x->curl);
        curl_easy_setopt(x->curl, CURLOPT_URL, url);
        curl_easy_setopt(x->curl, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(x->curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(x->curl, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(x->curl, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(x->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_TIMEOUT_MS);
        /* Models may think for minutes before the first byte: only a
         * connection silent for ten minutes is given up. */
        curl_easy_setopt(x->curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
        curl_easy_setopt(x->curl, CURLOPT_LOW_SPEED_TIME, 600L);
        curl_easy_setopt(x->curl, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(x->curl, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(x->curl, CURLOPT_HEADERDATA, x);
        curl_easy_setopt(x->curl, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(x->curl, CURLOPT_WRITEDATA, x);
        curl_easy_setopt(x->curl, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(x->curl, CURLOPT_XFERINFOFUNCTION, progress);
        curl_easy_setopt(x->curl, CURLOPT_XFERINFODATA, x);
        curl_easy_setopt(x->curl, CURLOPT_OPENSOCKETFUNCTION, open_socket);
        curl_easy_setopt(x->curl, CURLOPT_OPENSOCKETDATA, x->c);
        curl_easy_setopt(x->curl, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
        curl_easy_setopt(x->curl, CURLOPT_CLOSESOCKETDATA, x->c);
        if (strcmp(x->req.method, "POST") == 0) {
                curl_easy_setopt(x->curl, CURLOPT_POST, 1L);
                curl_easy_setopt(x->curl, CURLOPT_POSTFIELDS, body->data ? body->data : "");
                curl_easy_setopt(x->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
                x->up = body->len;
        } else {
                curl_easy_setopt(x->curl, CURLOPT_HTTPGET, 1L);
        }
        x->forwarded = true;
        rc = curl_easy_perform(x->curl);
        if (x->metering)
                have_sample = dm_vendor_meter_finish(&x->meter, &sample) == 1;
        if (rc == CURLE_OK) {
                if (!x->head_sent && send_head(x) < 0)
                        x->keep_alive = false;
                else if (x->chunked && !x->client_failed && send_all(p, x->c->fd, "0\r\n\r\n", 5) < 0)
                        x->keep_alive = false;
                set_reason(x, "%s%s%s", x->client_failed ? "client went away" : "ok",
                           x->stripped && *x->stripped ? "; stripped " : "", x->stripped ? x->stripped : "");
                if (!x->chunked)
                        x->keep_alive = x->keep_alive && x->no_body;
        } else if (dm_listener_stopping(p->listener)) {
                x->keep_alive = false;
                set_reason(x, "vendor proxy stopping");
                if (!x->status)
                        x->status = 503;
        } else if (x->client_failed) {
                x->keep_alive = false;
                set_reason(x, "client went away");
        } else if (x->head_sent) {
                /* Too late for a status: a cut chunked body tells the client. */
                x->keep_alive = false;
                set_reason(x, "upstream failed mid-response: %s", errbuf[0] ? errbuf : curl_easy_strerror(rc));
        } else {
                refuse(x, rc == CURLE_OPERATION_TIMEDOUT ? 504 : 502, "api_error", "upstream %s unreachable: %s",
                       p->upstream, errbuf[0] ? errbuf : curl_easy_strerror(rc));
                goto out;
        }
        account(x, have_sample ? &sample : NULL);
        decision_log(x, have_sample ? &sample : NULL);
        goto done;
out:
        account(x, NULL);
done:
        if (x->metering)
                dm_vendor_meter_release(&x->meter);
        x->metering = false;
        /* The header list and the easy handle's copy of it hold the secret. */
        curl_easy_setopt(x->curl, CURLOPT_HTTPHEADER, NULL);
        dm_vendor_slist_free_wipe(headers);
        free(url);
}

/* --- one connection -------------------------------------------------------- */

/* Serves one request. true when the connection may carry another. */
static bool serve_one(struct conn *c, CURL *curl, struct dm_buf *in, bool first)
{
        struct dm_vendor_proxy *p = c->p;
        struct exchange x = { .c = c, .curl = curl, .method = "-", .path = "-", .start_ms = dm_now_ms() };
        struct dm_vendor_filter filter = { 0 };
        struct dm_buf body;
        const char *path;
        char why[128];
        size_t end = 0;
        int r;

        dm_buf_init(&x.head, RESPONSE_HEAD_MAX);
        dm_buf_init(&body, p->max_body);
        r = read_head(&x, in, first, &end);
        if (r != 0)
                goto out;
        r = dm_vendor_request_parse(in->data, end, &x.req, why, sizeof(why));
        consume(in, end);
        if (r < 0) {
                refuse(&x, 400, "invalid_request_error", "%s", why);
                goto out;
        }
        x.start_ms = dm_now_ms();
        x.keep_alive = dm_vendor_request_keep_alive(&x.req);
        snprintf(x.method, sizeof(x.method), "%s", x.req.method);
        snprintf(x.path, sizeof(x.path), "%.*s", (int)strcspn(x.req.target, "?"), x.req.target);
        switch (dm_vendor_token_check(&x.req, p->token)) {
        case DM_VENDOR_TOKEN_MISSING:
                refuse(&x, 401, "authentication_error",
                       "no token: send this run's token in x-api-key or Authorization: Bearer");
                goto out;
        case DM_VENDOR_TOKEN_WRONG:
                refuse(&x, 403, "permission_error", "wrong token: this is not the token of this run");
                goto out;
        case DM_VENDOR_TOKEN_OK: break;
        }
        if (!(path = dm_vendor_route(p->provider, p->cred.auth, x.req.method, x.req.target))) {
                refuse(&x, 403, "forbidden", "%s %s is not a model endpoint", x.method, x.path);
                goto out;
        }
        if (read_body(&x, in, &body) < 0)
                goto out;
        /* Filtered before the gate: a refused request never holds a place
         * under the spending cap. */
        if (!p->vendor_network) {
                r = dm_vendor_filter_apply(&filter, p->provider, &x.req, &body);
                if (r < 0) {
                        x.vendor_shape = r == -EACCES;
                        refuse(&x, r == -EACCES ? filter.status : 500, "api_error", "%s",
                               r == -EACCES ? filter.why : "out of memory");
                        r = 0;
                        goto out;
                }
                x.stripped = filter.stripped;
        }
        if (!pass_gate(&x))
                goto out;
        forward(&x, path, &body);
out:
        dm_vendor_filter_release(&filter);
        if (body.data)
                explicit_bzero(body.data, body.len);
        dm_buf_release(&body);
        dm_buf_release(&x.head);
        dm_vendor_request_release(&x.req);
        return r == 0 && x.keep_alive && x.status != 0 && !dm_listener_stopping(p->listener);
}

static void serve_conn(void *owner, struct dm_listener_conn *lc, int fd)
{
        struct conn c = { .p = owner, .lc = lc, .fd = fd };
        CURL *curl = curl_easy_init();
        struct dm_buf in;

        dm_buf_init(&in, IN_MAX);
        if (curl) {
                for (bool first = true; serve_one(&c, curl, &in, first); first = false)
                        ;
                curl_easy_cleanup(curl);
        } else {
                log_warning("vendor proxy: cannot make a curl handle");
        }
        dm_buf_release(&in);
}

static void refuse_conn(void *owner, int fd, enum dm_listener_refusal why)
{
        struct conn c = { .p = owner, .fd = fd };
        struct exchange x = { .c = &c, .method = "-", .path = "-", .start_ms = dm_now_ms() };

        refuse(&x, 503, "overloaded_error", "%s",
               why == DM_LISTENER_FULL ? "too many open connections" : "cannot take another connection now");
}

/* --- lifecycle ------------------------------------------------------------- */

static void proxy_free(struct dm_vendor_proxy *p)
{
        dm_listener_free(p->listener); /* first: it joins every thread that uses p */
        if (p->log_fd >= 0)
                close(p->log_fd);
        dm_vendor_cred_release(&p->cred);
        if (p->token) {
                explicit_bzero(p->token, strlen(p->token));
                free(p->token);
        }
        dm_vendor_prices_release(&p->prices);
        dm_vendor_usage_release(&p->usage);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->gate_cond);
        free(p->upstream);
        free(p->usage_path);
        free(p->live_path);
        free(p->cap_name);
        free(p);
}

static const char *default_upstream(enum dm_vendor provider, enum dm_vendor_auth auth)
{
        if (provider == DM_VENDOR_ANTHROPIC)
                return "https://api.anthropic.com";
        return auth == DM_VENDOR_AUTH_CHATGPT ? "https://chatgpt.com/backend-api/codex" : "https://api.openai.com";
}

static int load_prices(struct dm_vendor_proxy *p, const char *path, struct dm_error *err)
{
        const char *use = path ? path : dm_vendor_prices_path(NULL);
        int r = dm_vendor_prices_load(use, &p->prices, err);

        if (r == 0 || (r == -ENOENT && !path)) {
                if (r < 0)
                        log_warning("vendor proxy: no price table at '%s': costs will be 0", use);
                dm_error_clear(err);
                return 0;
        }
        return r;
}

int dm_vendor_start(const struct dm_vendor_conf *conf, struct dm_vendor_proxy **ret, struct dm_error *err)
{
        struct dm_vendor_proxy *p = calloc(1, sizeof(*p));
        const char *up = conf->upstream;
        struct dm_listener_conf lc = {
                .what = "vendor proxy",
                .backlog = 64,
                .shutdown_on_stop = true,
                .owner = p,
                .refuse = refuse_conn,
                .serve = serve_conn,
        };
        char a[INET_ADDRSTRLEN];
        int r;

        if (!p)
                return dm_error_set(err, -ENOMEM, "out of memory");
        p->log_fd = -1;
        pthread_mutex_init(&p->lock, NULL);
        {
                pthread_condattr_t ca;

                pthread_condattr_init(&ca);
                pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
                pthread_cond_init(&p->gate_cond, &ca);
                pthread_condattr_destroy(&ca);
        }
        p->provider = conf->provider;
        p->max_conns = conf->max_conns ? conf->max_conns : 32;
        p->max_body = conf->max_body ? conf->max_body : 32 * 1024 * 1024;
        p->max_usd = conf->max_usd > 0 ? conf->max_usd : 0;
        p->gate.cap = p->max_usd;
        p->gate.largest = conf->estimate_usd > 0 ? conf->estimate_usd : 0;
        p->on_cap = conf->on_cap;
        p->cap_userdata = conf->cap_userdata;
        p->vendor_network = conf->vendor_network;
        p->tally = conf->tally;
        if (!conf->token || strlen(conf->token) < 16)
                r = dm_error_set(err, -EINVAL, "vendor proxy needs a token of at least 16 characters");
        else if (dm_curl_api_ready(err) < 0) /* it reaches the vendor through libcurl */
                r = dm_error_wrap(err, "vendor proxy");
        else if (!conf->cred.secret || conf->cred.auth == DM_VENDOR_AUTH_NONE)
                r = dm_error_set(err, -EINVAL, "vendor proxy needs a credential");
        else if (up && strncmp(up, "https://", 8) != 0 && strncmp(up, "http://", 7) != 0)
                r = dm_error_set(err, -EINVAL, "upstream '%s' is not an http(s) URL", up);
        else
                r = 0;
        if (r < 0)
                goto fail;
        if (!up)
                up = default_upstream(conf->provider, conf->cred.auth);
        if (!(p->upstream = strndup(up, strlen(up) - (up[strlen(up) - 1] == '/'))) ||
            !(p->token = strdup(conf->token)) || (conf->usage_path && !(p->usage_path = strdup(conf->usage_path))) ||
            (conf->live_path && !(p->live_path = strdup(conf->live_path))) ||
            !(p->cap_name = strdup(conf->cap_name ? conf->cap_name : "DEMESNE_AGENT_MAX_USD")) ||
            dm_vendor_cred_copy(&p->cred, &conf->cred) < 0) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto fail;
        }
        if ((r = load_prices(p, conf->prices_path, err)) < 0)
                goto fail;
        /* The log sits in the agent's /out: never follow or block on what
         * the sandbox may have put there. */
        if (conf->log_path) {
                const char *base;
                int dirfd = dm_io_open_parent(conf->log_path, &base);

                p->log_fd = dirfd < 0 ? dirfd : dm_io_open_beneath(dirfd, base, O_WRONLY | O_CREAT | O_APPEND, 0644);
                if (dirfd >= 0)
                        close(dirfd);
                if (p->log_fd < 0) {
                        r = dm_error_set(err, p->log_fd, "cannot open '%s': %s", conf->log_path,
                                         dm_io_strerror(p->log_fd));
                        p->log_fd = -1;
                        goto fail;
                }
        }
        inet_ntop(AF_INET, &conf->bind.sin_addr, a, sizeof(a));
        lc.max_conns = p->max_conns;
        if (conf->listen_fd > 0) {
                int fd = fcntl(conf->listen_fd, F_DUPFD_CLOEXEC, 3);
                r = fd < 0 ? -errno : dm_listener_new_fd(&lc, fd, &p->listener);
        } else {
                r = dm_listener_new(&lc, &conf->bind, &p->listener);
        }
        if (r < 0) {
                dm_error_set(err, r, "vendor proxy: listen on %s:%u: %s", a, ntohs(conf->bind.sin_port), strerror(-r));
                goto fail;
        }
        r = dm_listener_start(p->listener);
        if (r < 0) {
                dm_error_set(err, r, "vendor proxy: start thread: %s", strerror(-r));
                goto fail;
        }
        *ret = p;
        return 0;
fail:
        proxy_free(p);
        return r;
}

void dm_vendor_address(const struct dm_vendor_proxy *p, struct sockaddr_in *ret)
{
        dm_listener_address(p->listener, ret);
}

int dm_vendor_usage(struct dm_vendor_proxy *p, struct dm_vendor_usage *ret)
{
        int r;

        pthread_mutex_lock(&p->lock);
        r = dm_vendor_usage_copy(ret, &p->usage);
        pthread_mutex_unlock(&p->lock);
        return r;
}

bool dm_vendor_cap_reached(struct dm_vendor_proxy *p, double *ret_spent)
{
        bool hit;

        pthread_mutex_lock(&p->lock);
        hit = p->cap_hit;
        if (ret_spent)
                *ret_spent = p->usage.total.cost_usd;
        pthread_mutex_unlock(&p->lock);
        return hit;
}

void dm_vendor_stop(struct dm_vendor_proxy *p)
{
        struct dm_error err = { 0 };

        if (!p)
                return;
        /* Wakes everything (waits on the client poll the stop eventfd; curl
         * sees its sockets shut down and the progress callback says stop)
         * and joins every thread. */
        dm_listener_free(p->listener);
        p->listener = NULL;
        if (p->live_path && dm_vendor_usage_write(&p->usage, p->live_path, &err) < 0)
                log_warning("vendor proxy: live usage: %s", err.msg);
        dm_error_clear(&err);
        if (p->usage_path && dm_vendor_usage_write(&p->usage, p->usage_path, &err) < 0)
                log_warning("vendor proxy: %s", err.msg);
        proxy_free(p);
}
