/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the remote listener (src/mcp/http-front.c) end to
 * end: its head reader and its lookup of the route's token in
 * Authorization: Bearer or x-api-key, through a real listener on loopback:
 * its threads, its relay (over TCP to a server of this target), its
 * answers. The client's connection is a socketpair whose other end the
 * listener serves as if it had accepted it (dm_mcphttp_front_take): a TCP
 * connection per input left a TIME_WAIT each, over 100,000 in a two-minute
 * run, near the host's limit while other tests run beside.
 *
 * Input: the bytes a client sends on one connection (cut at 16383, what
 * fits the listener's head buffer, sent in one write, then the client's
 * side is shut). The listener has two relay routes: TOKEN to a server this
 * target listens with, DEAD to a port nothing listens on. Properties,
 * against a model of the head written here from the header's contract:
 * - a head with TOKEN (Bearer first, x-api-key when Bearer names no route)
 *   reaches the server byte for byte, the whole input, and the client gets
 *   back exactly what the server sent (nothing) and then the end;
 * - DEAD gets "503" with Retry-After, no token or an unknown one "401" with
 *   WWW-Authenticate, and the server gets no connection;
 * - no whole head (no blank line, a NUL before it, or too long) gets no
 *   answer at all, only the end of the connection. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/timeutil.h"
#include "src/mcp/http-front.h"
#include "tests/fuzz/fuzz.h"

#define TOKEN "tok-0123456789abcdef0123456789abcdef"
#define DEAD "dead-0123456789abcdef0123456789abcd"
#define HEAD_MAX 16384
#define WAIT_MS 5000 /* under libFuzzer's -timeout=10 */

static struct dm_mcphttp_front *front;
static int server_fd = -1, dead_fd = -1;

static struct sockaddr_in loopback_bound(int fd)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(a);

        FUZZ_CHECK(bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0);
        FUZZ_CHECK(getsockname(fd, (struct sockaddr *)&a, &len) == 0);
        return a;
}

static void setup(void)
{
        struct dm_mcphttp_front_options o = { .listen = "127.0.0.1:0", .head_timeout_s = 5 };
        struct dm_error err = { 0 };
        struct sockaddr_in to;

        server_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        to = loopback_bound(server_fd);
        FUZZ_CHECK(listen(server_fd, 16) == 0);
        FUZZ_CHECK(dm_mcphttp_front_start(&o, &front, &err) == 0);
        FUZZ_CHECK(dm_mcphttp_front_add_relay(front, TOKEN, &to, &err) == 0);
        /* Bound, never listening: a connection to it is refused. */
        dead_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        to = loopback_bound(dead_fd);
        FUZZ_CHECK(dm_mcphttp_front_add_relay(front, DEAD, &to, &err) == 0);
}

/* The value of the first header line named name (case aside) when it starts
 * with prefix (case aside): what follows up to a space, tab or CR, after
 * spaces. lines[0] is the request line. */
static bool model_value(char **lines, size_t n, const char *name, const char *prefix, const char **v, size_t *len)
{
        for (size_t i = 1; i < n; i++) {
                const char *s = lines[i];

                if (strncasecmp(s, name, strlen(name)) != 0)
                        continue;
                s += strlen(name);
                s += strspn(s, " \t");
                if (strncasecmp(s, prefix, strlen(prefix)) != 0)
                        return false;
                s += strlen(prefix);
                s += strspn(s, " ");
                *v = s;
                *len = strcspn(s, " \t\r");
                return true;
        }
        return false;
}

enum outcome { NO_HEAD, ROUTED, DEAD_ROUTE, UNAUTHORIZED };

static enum outcome route_of(const char *v, size_t len)
{
        if (len == strlen(TOKEN) && memcmp(v, TOKEN, len) == 0)
                return ROUTED;
        if (len == strlen(DEAD) && memcmp(v, DEAD, len) == 0)
                return DEAD_ROUTE;
        return UNAUTHORIZED;
}

/* What the listener must do with input (NUL-terminated copy of it). */
static enum outcome model(char *in)
{
        static char *lines[HEAD_MAX / 2];
        char *end = strstr(in, "\r\n\r\n");
        size_t n = 0, len;
        const char *v;
        enum outcome o = UNAUTHORIZED;

        if (!end)
                return NO_HEAD;
        end[2] = '\0'; /* the head's lines, each ending in CRLF */
        for (char *s = in; *s; n++) {
                char *eol = strstr(s, "\r\n");

                *eol = '\0';
                lines[n] = s;
                s = eol + 2;
        }
        if (model_value(lines, n, "Authorization:", "Bearer ", &v, &len))
                o = route_of(v, len);
        if (o == UNAUTHORIZED && model_value(lines, n, "x-api-key:", "", &v, &len) && len)
                o = route_of(v, len);
        return o;
}

/* The relay's socket, closed with a reset once read to its end: the
 * listener's side of it (which shut its writing first) leaves no
 * TIME_WAIT behind, which tens of thousands of inputs would pile up. */
static void close_reset(int fd)
{
        struct linger l = { .l_onoff = 1, .l_linger = 0 };

        FUZZ_CHECK(setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)) == 0);
        close(fd);
}

/* Whether fd is readable within ms. libFuzzer's timer (SIGALRM, each
 * second) interrupts a wait: it goes on for what is left. */
static bool readable(int fd, int ms)
{
        int64_t end = dm_now_ms() + ms;

        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int64_t left = end - dm_now_ms();
                int r = poll(&p, 1, left > 0 ? (int)left : 0);

                if (r >= 0 || errno != EINTR)
                        return r == 1;
        }
}

static size_t read_all(int fd, char *buf, size_t cap)
{
        size_t n = 0;

        for (;;) {
                ssize_t r;

                FUZZ_CHECK(readable(fd, WAIT_MS));
                r = read(fd, buf + n, cap - n);
                if (r < 0 && errno == EINTR)
                        continue;
                FUZZ_CHECK(r >= 0);
                if (r == 0)
                        return n;
                n += (size_t)r;
                FUZZ_CHECK(n < cap);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static char got[2 * HEAD_MAX];
        size_t len = size < HEAD_MAX - 1 ? size : HEAD_MAX - 1, n;
        _cleanup_free_ char *in = fuzz_strndup(data, len);
        enum outcome want;
        int c, sp[2];

        if (!front)
                setup();
        want = model(in);
        /* The client's end of a socketpair, the other end served as if
         * the listener had accepted it. */
        FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
        c = sp[0];
        dm_mcphttp_front_take(front, sp[1]);
        FUZZ_CHECK(send(c, data, len, MSG_NOSIGNAL) == (ssize_t)len);
        FUZZ_CHECK(shutdown(c, SHUT_WR) == 0);
        if (want == ROUTED) {
                int s;

                FUZZ_CHECK(readable(server_fd, WAIT_MS));
                do
                        s = accept4(server_fd, NULL, NULL, SOCK_CLOEXEC);
                while (s < 0 && errno == EINTR);
                FUZZ_CHECK(s >= 0);
                n = read_all(s, got, sizeof(got));
                FUZZ_CHECK(n == len && memcmp(got, data, len) == 0);
                close_reset(s);
        }
        n = read_all(c, got, sizeof(got));
        got[n] = '\0';
        close(c);
        switch (want) {
        case ROUTED:
        case NO_HEAD: FUZZ_CHECK(n == 0); break;
        case DEAD_ROUTE:
                FUZZ_CHECK(strncmp(got, "HTTP/1.1 503 ", 13) == 0 && strstr(got, "\r\nRetry-After: 1\r\n"));
                break;
        case UNAUTHORIZED:
                FUZZ_CHECK(strncmp(got, "HTTP/1.1 401 ", 13) == 0 && strstr(got, "\r\nWWW-Authenticate: Bearer\r\n"));
                break;
        }
        if (want != ROUTED) {
                /* The listener routes before it answers: a connection it
                 * made would be waiting by now. */
                FUZZ_CHECK(!readable(server_fd, 0));
        }
        return 0;
}
