/* SPDX-License-Identifier: MIT */
/* The engine's own HTTP/1.1 client (backends/http1.c) against a peer that
 * answers as engines do and as they should not: Content-Length, chunked,
 * no length, 1xx first, kept alive or closed, too large for the sink, too
 * slow, not HTTP at all. The peer is the other end of a socket pair, fed by
 * a thread with the canned answer once it has read the request head. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "backends/curl.h"
#include "backends/http1.h"
#include "src/basic/buf.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"

#define HEAD_BIG (20 * 1024)

struct peer {
        int fd;
        const char *answer; /* NULL: answer nothing */
        bool close_after;
        char request[4096];
        size_t request_len;
};

static void *peer_main(void *arg)
{
        struct peer *p = arg;

        /* The head, and the body its Content-Length announces. */
        for (;;) {
                ssize_t n = recv(p->fd, p->request + p->request_len, sizeof(p->request) - 1 - p->request_len, 0);
                char *end, *cl;

                if (n <= 0)
                        break;
                p->request_len += (size_t)n;
                p->request[p->request_len] = '\0';
                end = strstr(p->request, "\r\n\r\n");
                if (!end)
                        continue;
                cl = strcasestr(p->request, "Content-Length: ");
                if (!cl || p->request_len >= (size_t)(end + 4 - p->request) + strtoul(cl + 16, NULL, 10))
                        break;
        }
        if (p->answer)
                (void)!send(p->fd, p->answer, strlen(p->answer), MSG_NOSIGNAL);
        if (p->close_after)
                shutdown(p->fd, SHUT_WR);
        return NULL;
}

struct result {
        int r;
        long status;
        bool reusable, started;
        struct dm_buf body;
};

static int to_buf(void *userdata, long status, const char *data, size_t len)
{
        return dm_buf_append(userdata, data, len);
}

/* One exchange of req against a peer that answers answer. */
static struct result exchange(struct dm_http1_request *req, const char *answer, bool close_after, size_t cap,
                              struct peer *ret_peer)
{
        struct result res = { 0 };
        struct peer p = { .answer = answer, .close_after = close_after };
        int sv[2];
        pthread_t t;

        dm_buf_init(&res.body, cap);
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
                res.r = -errno;
                return res;
        }
        p.fd = sv[1];
        pthread_create(&t, NULL, peer_main, &p);
        res.r = dm_http1_exchange(sv[0], req, to_buf, &res.body, &res.status, &res.reusable, &res.started);
        shutdown(sv[0], SHUT_RDWR);
        pthread_join(t, NULL);
        close(sv[0]);
        close(sv[1]);
        if (ret_peer)
                *ret_peer = p;
        return res;
}

static bool body_is(struct result *res, const char *want)
{
        return res->body.len == strlen(want) && memcmp(res->body.data, want, res->body.len) == 0;
}

/* A unix-socket engine that answers each connection's first request and
 * then closes it: the client's kept-alive connection is dead by the next
 * request, which must go again on a new one. */
struct closer {
        int listen_fd;
        int conns;
};

static void *closer_main(void *arg)
{
        struct closer *c = arg;

        for (int i = 0; i < 2; i++) {
                char buf[4096], answer[96];
                int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC);

                if (fd < 0)
                        break;
                c->conns++;
                if (recv(fd, buf, sizeof(buf), 0) > 0) {
                        snprintf(answer, sizeof(answer), "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok%d", i + 1);
                        (void)!send(fd, answer, strlen(answer), MSG_NOSIGNAL);
                }
                close(fd);
        }
        return NULL;
}

static void test_stale_connection(void)
{
        char dir[] = "/tmp/dm-http1-XXXXXX", host[128];
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct closer c = { .listen_fd = -1 };
        struct dm_curl *h = NULL;
        struct dm_error err = { 0 };
        struct dm_buf body;
        long status = 0;
        pthread_t t;

        if (!mkdtemp(dir)) {
                ok(0, "a temporary directory");
                return;
        }
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/engine.sock", dir);
        snprintf(host, sizeof(host), "unix://%s", sa.sun_path);
        c.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c.listen_fd < 0 || bind(c.listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            listen(c.listen_fd, 4) < 0 || dm_curl_new(host, 1 << 20, NULL, &h, &err) < 0) {
                ok(0, "a fake engine on %s (%s)", host, err.msg);
                return;
        }
        pthread_create(&t, NULL, closer_main, &c);
        dm_buf_init(&body, 1 << 20);
        ok(dm_curl_request(h, "GET", "/_ping", NULL, 5000, &status, &body, &err) == 0 && status == 200 &&
                   body.len == 3 && memcmp(body.data, "ok1", 3) == 0,
           "a request to a unix-socket engine, directly: %s", err.msg);
        usleep(50 * 1000); /* the engine has closed the kept connection */
        ok(dm_curl_request(h, "GET", "/_ping", NULL, 5000, &status, &body, &err) == 0 && status == 200 &&
                   body.len == 3 && memcmp(body.data, "ok2", 3) == 0,
           "the next one, after the engine closed the kept connection, goes again on a new one: %s", err.msg);
        pthread_join(t, NULL);
        is_int(c.conns, 2, "two connections in all");
        dm_buf_release(&body);
        dm_curl_free(h);
        close(c.listen_fd);
        unlink(sa.sun_path);
        rmdir(dir);
        ok(!dm_curl_api_opened(), "libcurl was never opened");
}

int main(void)
{
        const char *lines[] = { "Content-Type: application/json", "Expect:", "X-Extra: 1", NULL };
        struct dm_http1_request req = {
                .method = "POST",
                .target = "/v1.41/containers/create?name=x",
                .host = "localhost",
                .lines = lines,
                .body = "{\"Image\":\"x\"}",
                .body_len = 13,
                .in_fd = -1,
        };
        struct peer p;
        struct result res;
        struct dm_curl_header want[2] = { { .name = "Server" }, { .name = "Api-Version" } };

        /* The request as the engine reads it; Content-Length, keep-alive. */
        req.want = want;
        req.n_want = 2;
        res = exchange(&req,
                       "HTTP/1.1 201 Created\r\nServer: Libpod/4.3.1\r\napi-version:  1.41 \r\n"
                       "Content-Length: 9\r\n\r\n{\"Id\":1}\n",
                       false, 1 << 20, &p);
        ok(res.r == 0 && res.status == 201 && body_is(&res, "{\"Id\":1}\n"), "Content-Length: status and body (%d)",
           res.r);
        ok(res.reusable && res.started, "kept alive");
        ok(strcmp(want[0].value, "Libpod/4.3.1") == 0 && strcmp(want[1].value, "1.41") == 0,
           "wanted headers captured, any case, trimmed ('%s', '%s')", want[0].value, want[1].value);
        ok(strncmp(p.request, "POST /v1.41/containers/create?name=x HTTP/1.1\r\nHost: localhost\r\n", 64) == 0,
           "request line and Host first");
        ok(strstr(p.request, "\r\nX-Extra: 1\r\n") && strstr(p.request, "\r\nContent-Length: 13\r\n") &&
                   !strstr(p.request, "Expect") && strstr(p.request, "\r\n\r\n{\"Image\":\"x\"}"),
           "extra headers, Content-Length, no empty Expect, the body after the head");
        dm_buf_release(&res.body);
        req.want = NULL;
        req.n_want = 0;

        /* Chunked, with an extension and trailers. */
        req.method = "GET";
        req.body = NULL;
        req.body_len = 0;
        res = exchange(&req,
                       "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "4;ext=1\r\n[{\"a\r\n3\r\n\":1\r\n2\r\n}]\r\n0\r\nX-Trailer: t\r\n\r\n",
                       false, 1 << 20, &p);
        ok(res.r == 0 && res.status == 200 && body_is(&res, "[{\"a\":1}]") && res.reusable,
           "chunked: joined, trailers read, kept alive (%d)", res.r);
        ok(!strstr(p.request, "Content-Length"), "a GET without a body says no Content-Length");
        dm_buf_release(&res.body);

        /* 100 Continue first; then no length: until the peer closes. */
        res = exchange(&req, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nall of it", true, 1 << 20, NULL);
        ok(res.r == 0 && res.status == 200 && body_is(&res, "all of it") && !res.reusable,
           "1xx skipped; no length: to the end, not kept (%d)", res.r);
        dm_buf_release(&res.body);

        /* Connection: close, 204 without a body, HEAD. */
        res = exchange(&req, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", false, 1 << 20,
                       NULL);
        ok(res.r == 0 && body_is(&res, "ok") && !res.reusable, "Connection: close: not kept");
        dm_buf_release(&res.body);
        req.method = "DELETE";
        res = exchange(&req, "HTTP/1.1 204 No Content\r\n\r\n", false, 1 << 20, NULL);
        ok(res.r == 0 && res.status == 204 && res.body.len == 0 && res.reusable, "204: no body, kept alive");
        dm_buf_release(&res.body);
        req.method = "GET";

        /* Errors. */
        res = exchange(&req, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789", false, 8, NULL);
        ok(res.r == -E2BIG && !res.reusable, "a body past the sink's cap: its error, connection not kept (%d)", res.r);
        dm_buf_release(&res.body);
        res = exchange(&req, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", true, 1 << 20, NULL);
        ok(res.r == -ECONNRESET && res.started, "closed before the body's end: -ECONNRESET (%d)", res.r);
        dm_buf_release(&res.body);
        res = exchange(&req, NULL, true, 1 << 20, NULL);
        ok(res.r == -ECONNRESET && !res.started, "closed with no answer: not started, so it may be sent again (%d)",
           res.r);
        dm_buf_release(&res.body);
        res = exchange(&req, "SSH-2.0-OpenSSH_9.2\r\n", true, 1 << 20, NULL);
        ok(res.r == -EPROTO, "not HTTP: -EPROTO (%d)", res.r);
        dm_buf_release(&res.body);
        res = exchange(&req, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", true, 1 << 20, NULL);
        ok(res.r == -EPROTO, "a bad chunk size: -EPROTO (%d)", res.r);
        dm_buf_release(&res.body);
        {
                char big[HEAD_BIG];

                memset(big, 'a', sizeof(big) - 1);
                big[sizeof(big) - 1] = '\0';
                memcpy(big, "HTTP/1.1 200 OK\r\nX: ", 20);
                res = exchange(&req, big, true, 1 << 20, NULL);
                ok(res.r == -EPROTO, "a header line of 20 KiB: -EPROTO (%d)", res.r);
                dm_buf_release(&res.body);
        }
        req.deadline_ms = dm_now_ms() + 200;
        {
                int64_t t0 = dm_now_ms();

                res = exchange(&req, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01", false, 1 << 20, NULL);
                /* The bound is against a wait for the peer, which never sends. */
                ok(res.r == -ETIMEDOUT && dm_now_ms() - t0 < slack_ms(20000),
                   "a peer that stops mid-body: -ETIMEDOUT at the "
                   "deadline (%d)",
                   res.r);
                dm_buf_release(&res.body);
        }
        test_stale_connection();
        return done_testing();
}
