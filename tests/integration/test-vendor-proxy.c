/* SPDX-License-Identifier: MIT */
/* The vendor proxy over real sockets, all on loopback: an in-test upstream
 * that speaks just enough of the Anthropic and OpenAI APIs (JSON answers,
 * server-sent events with a pause between two events) and records what it
 * was sent, and a raw-socket client. No real vendor API is ever contacted. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <json-c/json.h>

#include "netpolicy/vendor.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"
#include "tests/vendor-loopback.h"

#define REAL_KEY "sk-ant-REAL-host-key"
#define MAX_CONNS 64

/* --- the upstream ---------------------------------------------------------- */

struct upstream {
        int fd;
        uint16_t port;
        atomic_int stop;
        pthread_t thread, conns[MAX_CONNS];
        int n_conns;
        pthread_mutex_t lock;
        char last_head[8192];
        atomic_int requests;
        atomic_llong second_event_ms; /* when the second SSE event was sent */
};

static struct upstream up;

struct up_conn {
        int fd;
};

/* Sleeps ms, or less when the peer goes away. */
static void nap(int fd, int ms)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int64_t end = dm_now_ms() + ms;

        while (dm_now_ms() < end && !up.stop) {
                int r = poll(&p, 1, 50);
                if (r > 0)
                        return;
        }
}

static void put(int fd, const char *s)
{
        if (write(fd, s, strlen(s)) < 0)
                diag("upstream: write: %s", strerror(errno));
}

static const char *header(const char *head, const char *name, char *buf, size_t len)
{
        const char *h = strcasestr(head, name);
        size_t n;

        if (!h)
                return NULL;
        h += strlen(name);
        while (*h == ' ')
                h++;
        n = strcspn(h, "\r\n");
        snprintf(buf, len, "%.*s", (int)(n < len ? n : len - 1), h);
        return buf;
}

static void *up_conn_main(void *arg)
{
        int fd = (int)(intptr_t)arg;
        char buf[65536], tmp[64], resp[4096];
        size_t len = 0, body_len = 0;
        char *end;
        ssize_t n;

        while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0) {
                len += (size_t)n;
                buf[len] = '\0';
                if ((end = strstr(buf, "\r\n\r\n"))) {
                        size_t head_len = (size_t)(end + 4 - buf);
                        if (header(buf, "\ncontent-length:", tmp, sizeof(tmp)))
                                body_len = strtoul(tmp, NULL, 10);
                        if (len >= head_len + body_len)
                                break;
                }
        }
        buf[len] = '\0';
        pthread_mutex_lock(&up.lock);
        snprintf(up.last_head, sizeof(up.last_head), "%.*s",
                 (int)(strstr(buf, "\r\n\r\n") ? strstr(buf, "\r\n\r\n") - buf : 0), buf);
        pthread_mutex_unlock(&up.lock);
        up.requests++;

        if (strstr(buf, "\"stream\":true") && strstr(buf, "POST /v1/messages")) {
                int pause = header(buf, "\nx-test-pause-ms:", tmp, sizeof(tmp)) ? atoi(tmp) : 1000;
                put(fd, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                        "Connection: close\r\n\r\n");
                put(fd, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":"
                        "\"claude-test-1\",\"usage\":{\"input_tokens\":10,\"cache_creation_input_tokens\":20,"
                        "\"cache_read_input_tokens\":30,\"output_tokens\":1}}}\n\n");
                nap(fd, pause);
                up.second_event_ms = dm_now_ms();
                put(fd, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{},\"usage\":"
                        "{\"output_tokens\":40}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
        } else if (strstr(buf, "POST /v1/messages")) {
                const char *body = "{\"type\":\"message\",\"model\":\"claude-test-1\",\"content\":[],\"usage\":"
                                   "{\"input_tokens\":100,\"output_tokens\":200,\"cache_read_input_tokens\":0,"
                                   "\"cache_creation_input_tokens\":0}}";
                snprintf(resp, sizeof(resp),
                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\nrequest-id: req_1\r\n\r\n%s",
                         strlen(body), body);
                put(fd, resp);
        } else if (strstr(buf, "POST /v1/responses") || strstr(buf, "POST /backend/responses")) {
                const char *body = "{\"object\":\"response\",\"model\":\"gpt-test\",\"usage\":{\"input_tokens\":"
                                   "1000,\"input_tokens_details\":{\"cached_tokens\":400},\"output_tokens\":5}}";
                snprintf(resp, sizeof(resp),
                         "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(body), body);
                put(fd, resp);
        } else {
                put(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
        close(fd);
        return NULL;
}

static void *up_main(void *arg)
{
        (void)arg;
        while (!up.stop) {
                struct pollfd p = { .fd = up.fd, .events = POLLIN };
                int fd;
                if (poll(&p, 1, 50) <= 0)
                        continue;
                if ((fd = accept4(up.fd, NULL, NULL, SOCK_CLOEXEC)) < 0)
                        continue;
                if (up.n_conns == MAX_CONNS ||
                    pthread_create(&up.conns[up.n_conns], NULL, up_conn_main, (void *)(intptr_t)fd) != 0) {
                        close(fd);
                        continue;
                }
                up.n_conns++;
        }
        for (int i = 0; i < up.n_conns; i++)
                pthread_join(up.conns[i], NULL);
        return NULL;
}

/* --- the client ------------------------------------------------------------ */

static int dial(uint16_t port)
{
        int fd = test_dial(port);

        if (fd < 0) {
                perror("connect");
                exit(1);
        }
        return fd;
}

static size_t read_until(int fd, char *buf, size_t max, const char *stop)
{
        return test_read_until(fd, buf, max, stop, 10000);
}

/* One request on its own connection; the whole response into buf. */
static int request(uint16_t port, const char *method, const char *path, const char *auth, const char *extra,
                   const char *body, char *buf, size_t max)
{
        char req[8192];
        int fd = dial(port), n;

        n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: proxy\r\n%s%s%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
                     method, path, auth ? auth : "", auth ? "\r\n" : "", extra ? extra : "", body ? strlen(body) : 0,
                     body ? body : "");
        if (write(fd, req, (size_t)n) != n)
                diag("client: short write");
        read_until(fd, buf, max, NULL);
        close(fd);
        return atoi(buf + 9);
}

static char token[65];
static char tmpdir[64];

static struct dm_vendor_conf base_conf(enum dm_vendor v, enum dm_vendor_auth auth, const char *secret,
                                       const char *account, const char *upstream, const char *prices)
{
        return (struct dm_vendor_conf){
                .provider = v,
                .bind = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) },
                .upstream = upstream,
                .token = token,
                .cred = { .auth = auth, .secret = (char *)secret, .account_id = (char *)account },
                .prices_path = prices,
        };
}

static struct dm_vendor_proxy *start(enum dm_vendor v, enum dm_vendor_auth auth, const char *secret,
                                     const char *account, const char *upstream, const char *usage, const char *logp,
                                     const char *prices, uint16_t *ret_port)
{
        struct dm_vendor_conf conf = base_conf(v, auth, secret, account, upstream, prices);

        conf.usage_path = usage;
        conf.log_path = logp;
        return test_vendor_start(&conf, ret_port);
}

static atomic_int caps_seen;

static void count_cap(void *userdata)
{
        (void)userdata;
        caps_seen++;
}

/* An Anthropic proxy with a spending cap, on a port of its own. */
static struct dm_vendor_proxy *start_capped(const char *upstream, const char *prices, double max_usd,
                                            const char *cap_name, const char *live, uint16_t *ret_port)
{
        struct dm_vendor_conf conf =
                base_conf(DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, REAL_KEY, NULL, upstream, prices);

        conf.max_usd = max_usd;
        conf.cap_name = cap_name;
        conf.live_path = live;
        conf.on_cap = count_cap;
        return test_vendor_start(&conf, ret_port);
}

/* One client of a flood: its answer's status. */
struct flood_client {
        pthread_t t;
        uint16_t port;
        const char *auth;
        int status;
        char body[2048];
};

static void *flood_main(void *arg)
{
        struct flood_client *c = arg;

        c->status = request(c->port, "POST", "/v1/messages", c->auth, NULL, "{}", c->body, sizeof(c->body));
        return NULL;
}

static double num(json_object *o, const char *a, const char *b, const char *c)
{
        json_object *v = o;

        if (a && !json_object_object_get_ex(v, a, &v))
                return -1;
        if (b && !json_object_object_get_ex(v, b, &v))
                return -1;
        if (c && !json_object_object_get_ex(v, c, &v))
                return -1;
        return json_object_get_double(v);
}

int main(void)
{
        char buf[65536], auth[128], upstream[64], usage[128], logp[128], prices[128], head[8192];
        struct dm_vendor_proxy *p;
        uint16_t port;
        int status, before;
        FILE *f;

        snprintf(tmpdir, sizeof(tmpdir), "/tmp/dm-vendor-proxy-XXXXXX");
        if (!mkdtemp(tmpdir) || dm_vendor_token_new(token) < 0)
                return 1;
        pthread_mutex_init(&up.lock, NULL);
        up.fd = test_listen_loopback(&up.port);
        pthread_create(&up.thread, NULL, up_main, NULL);
        snprintf(upstream, sizeof(upstream), "http://127.0.0.1:%u", up.port);
        snprintf(usage, sizeof(usage), "%s/usage.json", tmpdir);
        snprintf(logp, sizeof(logp), "%s/vendor.log", tmpdir);
        snprintf(prices, sizeof(prices), "%s/prices.json", tmpdir);
        f = fopen(prices, "w");
        fputs("{\"note\":\"test\",\"models\":{\"claude-test\":{\"input\":1,\"output\":2,\"cache_read\":0.5,"
              "\"cache_write\":4},\"gpt-test\":{\"input\":10,\"output\":100,\"cache_read\":1}}}",
              f);
        fclose(f);

        p = start(DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, REAL_KEY, NULL, upstream, usage, logp, prices, &port);
        snprintf(auth, sizeof(auth), "x-api-key: %s", token);

        /* Credential injection. */
        status = request(port, "POST", "/v1/messages?beta=true", auth, "anthropic-version: 2023-06-01\r\n",
                         "{\"model\":\"claude-test-1\",\"max_tokens\":5}", buf, sizeof(buf));
        is_int(status, 200, "token in x-api-key: forwarded");
        pthread_mutex_lock(&up.lock);
        snprintf(head, sizeof(head), "%s", up.last_head);
        pthread_mutex_unlock(&up.lock);
        ok(strstr(head, "POST /v1/messages?beta=true HTTP/1.1") != NULL, "upstream got the path with its query");
        ok(strstr(head, "x-api-key: " REAL_KEY) != NULL, "upstream got the real key");
        ok(strstr(head, token) == NULL, "upstream never saw the token");
        ok(strstr(head, "anthropic-version: 2023-06-01") != NULL, "client headers pass");
        ok(strstr(buf, "Transfer-Encoding: chunked") && strstr(buf, "claude-test-1"), "response streamed back chunked");
        ok(strstr(buf, "request-id: req_1") != NULL, "upstream response headers pass");

        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        status = request(port, "POST", "/v1/messages", auth, NULL, "{}", buf, sizeof(buf));
        pthread_mutex_lock(&up.lock);
        snprintf(head, sizeof(head), "%s", up.last_head);
        pthread_mutex_unlock(&up.lock);
        is_int(status, 200, "token as Authorization: Bearer: forwarded");
        ok(strstr(head, token) == NULL && strcasestr(head, "authorization") == NULL,
           "the client's Authorization is not forwarded");

        /* Refusals: none reaches the upstream. */
        before = up.requests;
        status = request(port, "POST", "/v1/messages", "x-api-key: not-the-token", NULL, "{}", buf, sizeof(buf));
        is_int(status, 403, "wrong token: 403");
        ok(strstr(buf, "wrong token") != NULL, "with a clear message");
        status = request(port, "POST", "/v1/messages", NULL, NULL, "{}", buf, sizeof(buf));
        is_int(status, 401, "no token: 401");
        ok(strstr(buf, "\"type\":\"authentication_error\"") != NULL, "as a JSON error");
        snprintf(auth, sizeof(auth), "x-api-key: %s", token);
        status = request(port, "GET", "/v1/files", auth, NULL, NULL, buf, sizeof(buf));
        is_int(status, 403, "GET /v1/files: 403");
        ok(strstr(buf, "{\"error\":{\"type\":\"forbidden\",\"message\":\"demesne vendor proxy: GET /v1/files is "
                       "not a model endpoint\"}}") != NULL,
           "with the forbidden JSON body");
        status = request(port, "POST", "/v1/complete", auth, NULL, "{}", buf, sizeof(buf));
        is_int(status, 403, "POST /v1/complete: 403");
        status = request(port, "POST", "/api/oauth/token", auth, NULL, "{}", buf, sizeof(buf));
        is_int(status, 403, "POST /api/oauth/token: 403");
        {
                int fd = dial(port);
                char req[512];
                int n = snprintf(req, sizeof(req),
                                 "POST /v1/messages HTTP/1.1\r\n%s\r\nContent-Length: 40000000\r\n\r\n{\"x\":", auth);
                if (write(fd, req, (size_t)n) != n)
                        diag("short write");
                read_until(fd, buf, sizeof(buf), NULL);
                close(fd);
                is_int(atoi(buf + 9), 413, "a 40 MB body: 413");
        }
        is_int(up.requests, before, "no refused request reached the upstream");

        /* Keep-alive: two requests on one connection. */
        {
                int fd = dial(port), n;
                char req[512];
                n = snprintf(req, sizeof(req), "POST /v1/messages HTTP/1.1\r\n%s\r\nContent-Length: 2\r\n\r\n{}", auth);
                ok(write(fd, req, (size_t)n) == n, "keep-alive: first request sent");
                read_until(fd, buf, sizeof(buf), "0\r\n\r\n");
                ok(atoi(buf + 9) == 200 && strstr(buf, "0\r\n\r\n"), "first answered in full");
                ok(write(fd, req, (size_t)n) == n, "second request on the same connection");
                read_until(fd, buf, sizeof(buf), "0\r\n\r\n");
                ok(atoi(buf + 9) == 200 && strstr(buf, "0\r\n\r\n"), "second answered");
                close(fd);
        }

        /* Server-sent events arrive as they are sent. */
        {
                int fd = dial(port), n;
                char req[512];
                int64_t first_ms;
                n = snprintf(req, sizeof(req),
                             "POST /v1/messages HTTP/1.1\r\n%s\r\nx-test-pause-ms: 1000\r\nConnection: close\r\n"
                             "Content-Length: 15\r\n\r\n{\"stream\":true}",
                             auth);
                up.second_event_ms = 0;
                if (write(fd, req, (size_t)n) != n)
                        diag("short write");
                read_until(fd, buf, sizeof(buf), "message_start\"");
                first_ms = dm_now_ms();
                ok(strstr(buf, "text/event-stream") && strstr(buf, "message_start"), "first event received");
                ok(up.second_event_ms == 0, "before the upstream sent the second");
                read_until(fd, buf, sizeof(buf), NULL);
                ok(up.second_event_ms >= first_ms + 500, "the second came %lld ms later",
                   (long long)(up.second_event_ms - first_ms));
                ok(strstr(buf, "message_stop") != NULL, "the stream completes");
                close(fd);
        }

        /* usage.json: 4 JSON messages (100 in, 200 out) and one stream
         * (10 in, 40 out, 30 cache read, 20 cache write). */
        {
                json_object *u = json_object_from_file(usage);
                double cost = (4 * (100 * 1.0 + 200 * 2.0) + (10 * 1.0 + 40 * 2.0 + 30 * 0.5 + 20 * 4.0)) / 1e6;
                ok(u != NULL, "usage.json written after the responses");
                is_int(num(u, "input_tokens", NULL, NULL), 410, "input_tokens");
                is_int(num(u, "output_tokens", NULL, NULL), 840, "output_tokens");
                is_int(num(u, "cache_read_tokens", NULL, NULL), 30, "cache_read_tokens");
                is_int(num(u, "cache_write_tokens", NULL, NULL), 20, "cache_write_tokens");
                ok(num(u, "cost_usd", NULL, NULL) > cost - 1e-6 && num(u, "cost_usd", NULL, NULL) < cost + 1e-6,
                   "cost_usd from the price table (%f)", num(u, "cost_usd", NULL, NULL));
                is_int(num(u, "per_model", "claude-test-1", "requests"), 5, "per_model requests");
                json_object_put(u);
        }

        /* Stop with one connection idle and one mid-stream. */
        {
                int idle = dial(port), streaming = dial(port), n;
                char req[512];
                int64_t t;
                n = snprintf(req, sizeof(req),
                             "POST /v1/messages HTTP/1.1\r\n%s\r\nx-test-pause-ms: 30000\r\nContent-Length: 15\r\n\r\n"
                             "{\"stream\":true}",
                             auth);
                if (write(streaming, req, (size_t)n) != n)
                        diag("short write");
                read_until(streaming, buf, sizeof(buf), "message_start\"");
                t = dm_now_ms();
                dm_vendor_stop(p);
                /* Waiting for the paused stream, it would take 30 s. */
                ok(dm_now_ms() - t < 20000,
                   "stop returns with connections open, before the stream's pause ends (%lld ms)",
                   (long long)(dm_now_ms() - t));
                ok(read_until(idle, buf, sizeof(buf), NULL) == 0, "the idle connection is closed");
                close(idle);
                close(streaming);
                ok(access(usage, F_OK) == 0, "usage.json is there after stop");
        }
        {
                char log[16384] = "";
                f = fopen(logp, "r");
                if (f) {
                        size_t n = fread(log, 1, sizeof(log) - 1, f);
                        log[n] = '\0';
                        fclose(f);
                }
                ok(strstr(log, "POST /v1/messages 200 forwarded model=claude-test-1") != NULL, "log: forwarded");
                ok(strstr(log, "GET /v1/files 403 refused") != NULL, "log: refused");
                ok(strstr(log, token) == NULL && strstr(log, REAL_KEY) == NULL, "log: no secrets");
        }

        /* Upstream down. */
        {
                uint16_t dead;
                int fd = test_listen_loopback(&dead);
                char dead_url[64];
                close(fd);
                snprintf(dead_url, sizeof(dead_url), "http://127.0.0.1:%u", dead);
                p = start(DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_OAUTH, "oat-real", NULL, dead_url, NULL, NULL, prices,
                          &port);
                status = request(port, "POST", "/v1/messages", auth, NULL, "{}", buf, sizeof(buf));
                is_int(status, 502, "upstream down: 502");
                ok(strstr(buf, "unreachable") && strstr(buf, dead_url), "naming the upstream");
                dm_vendor_stop(p);
        }

        /* OpenAI through a ChatGPT login: account header, cached tokens. */
        {
                char base[96];
                json_object *u;
                snprintf(base, sizeof(base), "%s/backend", upstream);
                unlink(usage);
                p = start(DM_VENDOR_OPENAI, DM_VENDOR_AUTH_CHATGPT, "eyJ-real", "acct-9", base, usage, NULL, prices,
                          &port);
                snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
                status = request(port, "POST", "/v1/responses", auth, NULL, "{\"model\":\"gpt-test\"}", buf,
                                 sizeof(buf));
                pthread_mutex_lock(&up.lock);
                snprintf(head, sizeof(head), "%s", up.last_head);
                pthread_mutex_unlock(&up.lock);
                is_int(status, 200, "openai: POST /v1/responses forwarded");
                ok(strstr(head, "POST /backend/responses ") != NULL, "to the ChatGPT backend's /responses");
                ok(strstr(head, "Authorization: Bearer eyJ-real") && strstr(head, "chatgpt-account-id: acct-9"),
                   "with the access token and account id");
                status = request(port, "GET", "/v1/files", auth, NULL, NULL, buf, sizeof(buf));
                is_int(status, 403, "openai: GET /v1/files refused");
                dm_vendor_stop(p);
                u = json_object_from_file(usage);
                is_int(num(u, "input_tokens", NULL, NULL), 600, "openai: uncached input");
                is_int(num(u, "cache_read_tokens", NULL, NULL), 400, "openai: cached input as cache reads");
                ok(num(u, "cost_usd", NULL, NULL) > 0.00689 && num(u, "cost_usd", NULL, NULL) < 0.00691,
                   "openai: cost (600*10 + 400*1 + 5*100)/1e6");
                json_object_put(u);
        }

        /* The spending cap: one JSON message costs $0.0005 at the test
         * prices; a cap of $0.0004 lets it through and nothing after it. */
        {
                double spent = 0;

                snprintf(auth, sizeof(auth), "x-api-key: %s", token);
                p = start_capped(upstream, prices, 0.0004, NULL, NULL, &port);
                ok(!dm_vendor_cap_reached(p, NULL), "cap: not reached before any request");
                status = request(port, "POST", "/v1/messages", auth, NULL, "{}", buf, sizeof(buf));
                is_int(status, 200, "cap: the first request is forwarded");
                ok(dm_vendor_cap_reached(p, &spent) && spent > 0.000499 && spent < 0.000501,
                   "cap: reached after it ($%f spent)", spent);
                is_int(caps_seen, 1, "cap: on_cap called once");
                before = up.requests;
                status = request(port, "POST", "/v1/messages", auth, NULL, "{}", buf, sizeof(buf));
                is_int(status, 402, "cap: the next request is refused with 402");
                ok(strstr(buf, "\"type\":\"billing_error\"") &&
                           strstr(buf, "spending cap of $0.0004 for this run reached") &&
                           strstr(buf, "DEMESNE_AGENT_MAX_USD"),
                   "cap: a billing_error naming the cap and the variable");
                status = request(port, "POST", "/v1/messages", auth, NULL, "{}", buf, sizeof(buf));
                is_int(status, 402, "cap: and every one after it");
                is_int(up.requests, before, "cap: none reached the upstream");
                is_int(caps_seen, 1, "cap: on_cap still called only once");
                dm_vendor_stop(p);
        }

        /* Many times the cap at once: 24 requests of $0.0005 each against a
         * cap of $0.0012, all sent together. Requests in flight count: one
         * goes before any is priced, then one more (0.0005 + 0.0005 stays
         * under the cap), and the rest are refused once nothing in flight
         * can leave room. The live figures go to the second path. */
        {
                char live[160];
                struct flood_client c[24];
                int went = 0, refused = 0, named = 0;
                double spent = 0;
                json_object *u;

                snprintf(live, sizeof(live), "%s/run-x.live", tmpdir);
                p = start_capped(upstream, prices, 0.0012, "DEMESNE_TREE_MAX_USD, what was left of this tree's", live,
                                 &port);
                before = up.requests;
                for (int i = 0; i < 24; i++) {
                        c[i] = (struct flood_client){ .port = port, .auth = auth };
                        pthread_create(&c[i].t, NULL, flood_main, &c[i]);
                }
                for (int i = 0; i < 24; i++) {
                        pthread_join(c[i].t, NULL);
                        went += c[i].status == 200;
                        refused += c[i].status == 402;
                        named += c[i].status == 402 && strstr(c[i].body, "DEMESNE_TREE_MAX_USD") != NULL;
                }
                ok(dm_vendor_cap_reached(p, &spent), "flood: the cap is reached");
                ok(spent <= 0.0012, "flood: the cap holds ($%f spent of $0.0012)", spent);
                is_int(went, 2, "flood: two of 24 requests went upstream, one at a time then one more");
                is_int(up.requests - before, 2, "flood: the upstream saw two");
                is_int(refused, 22, "flood: the other 22 were refused with 402");
                is_int(named, 22, "flood: naming the cap's setting");
                u = json_object_from_file(live);
                ok(u && num(u, "cost_usd", NULL, NULL) > 0.000999 && num(u, "cost_usd", NULL, NULL) < 0.001001 &&
                           num(u, "input_tokens", NULL, NULL) == 200,
                   "flood: the live figures are written where the caller said ($%f)",
                   u ? num(u, "cost_usd", NULL, NULL) : -1);
                json_object_put(u);
                dm_vendor_stop(p);
                unlink(live);
        }

        up.stop = 1;
        pthread_join(up.thread, NULL);
        close(up.fd);
        unlink(usage);
        unlink(logp);
        unlink(prices);
        rmdir(tmpdir);
        return done_testing();
}
