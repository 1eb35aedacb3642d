/* SPDX-License-Identifier: MIT */
/* Hostile clients against `demesne serve --http`: foreign Host and Origin
 * (DNS rebinding), missing and wrong bearer tokens, oversized bodies, a
 * slowloris trickle, 500 idle connections, session floods and idle expiry.
 * Each is refused, and a legitimate call made meanwhile still succeeds.
 * Also the start-up refusals (a wildcard address without --allowed-host,
 * a readable token file). Every socket is on 127.0.0.0/8. */
#include "config.h"

#include <json-c/json.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "tests/integration/common.h"
#include "tests/integration/http-client.h"
#include "tests/tap.h"

#define CT "Content-Type: application/json\r\n"
#define ACCEPT_BOTH "Accept: application/json, text/event-stream\r\n"
#define INIT_BODY                                                                                                 \
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"," \
        "\"capabilities\":{},\"clientInfo\":{\"name\":\"test-http-hostile\",\"version\":\"1\"}}}"
#define CALL_BODY                                                                                            \
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","   \
        "\"arguments\":{\"command\":\"echo legit\"},\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":" \
        "\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}"
#define CALL_HDRS \
        CT ACCEPT_BOTH "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: sandbox_script\r\n"

/* The server's --request-timeout. The flood below tells a refused
 * connection from one let in by its closing before this: a loaded machine
 * must accept and refuse 500 connections within it, so it is 5 s, and
 * slack_ms()'s multiple of that under a sanitizer. */
#define REQUEST_TIMEOUT_S ((int)(slack_ms(5000) / 1000))
#define PER_IP 32
/* --max-connections below; one address holds half of them. */
#define MAX_CONNS 128
#define SHARE (MAX_CONNS / 2)

static const char *extra_auth = "";

/* A legitimate 2026-07-28 sandbox_script call from 127.0.0.1, started on
 * its own thread so it runs while an attack is under way. */
struct legit {
        pthread_t th;
        bool ok;
        int64_t ms;
};

static void *legit_main(void *arg)
{
        struct legit *l = arg;
        static struct hc c;
        struct hresp r;
        char hdrs[512];
        json_object *m;
        int64_t t0 = dm_now_ms();

        snprintf(hdrs, sizeof(hdrs), CALL_HDRS "%s", extra_auth);
        if (hc_connect(&c, NULL) == 0 && hc_request(&c, "POST", hdrs, CALL_BODY) == 0 &&
            hc_read_head(&c, &r, 90000) == 0) {
                while ((m = hc_next_event(&c, &r, 90000))) {
                        if (jget(m, "result", NULL, NULL)) {
                                const char *out =
                                        json_object_get_string(jget(m, "result", "structuredContent", "stdout"));
                                l->ok = out && strcmp(out, "legit\n") == 0;
                                json_object_put(m);
                                break;
                        }
                        json_object_put(m);
                }
                hresp_release(&r);
        }
        hc_close(&c);
        l->ms = dm_now_ms() - t0;
        return NULL;
}

static void legit_start(struct legit *l)
{
        l->ok = false;
        pthread_create(&l->th, NULL, legit_main, l);
}

static bool legit_join(struct legit *l)
{
        pthread_join(l->th, NULL);
        diag("the legitimate call took %lld ms", (long long)l->ms);
        return l->ok;
}

/* Whether the server closed the socket (EOF or reset) within timeout_ms. */
static bool closed_within(int fd, int timeout_ms)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        char buf[256];

        for (int64_t deadline = dm_now_ms() + timeout_ms; dm_now_ms() < deadline;) {
                if (poll(&p, 1, (int)(deadline - dm_now_ms())) <= 0)
                        return false;
                ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
                if (n <= 0 && !(n < 0 && errno == EAGAIN))
                        return true;
        }
        return false;
}

static int status_of(const char *method, const char *headers, const char *body)
{
        struct hresp r;
        int st = http_call(method, headers, body, &r) == 0 ? r.status : -1;

        hresp_release(&r);
        return st;
}

/* initialize with these headers; the session it makes, if any, is ended
 * again so later tests start with none. */
static int init_status(const char *headers)
{
        struct hresp r;
        char sid[64], del[128];
        int st = http_call("POST", headers, INIT_BODY, &r) == 0 ? r.status : -1;

        if (hresp_header(&r, "Mcp-Session-Id", sid, sizeof(sid))) {
                struct hresp d;
                snprintf(del, sizeof(del), "Mcp-Session-Id: %s\r\n", sid);
                http_call("DELETE", del, NULL, &d);
                hresp_release(&d);
        }
        hresp_release(&r);
        return st;
}

static void host_and_origin(void)
{
        struct hresp r;
        char hdrs[256], v[128];

        is_int(status_of("POST", "Host: evil.example\r\n" CT ACCEPT_BOTH, INIT_BODY), 403,
               "Host: evil.example (DNS rebinding): 403");
        is_int(status_of("POST", "Host: evil.example:80\r\n" CT ACCEPT_BOTH, INIT_BODY), 403, "... with a port too");
        snprintf(hdrs, sizeof(hdrs), "Host: localhost:%d\r\n" CT ACCEPT_BOTH, hc_port);
        is_int(init_status(hdrs), 200, "Host: localhost:PORT: accepted");
        snprintf(hdrs, sizeof(hdrs), "Host: [::1]:%d\r\n" CT ACCEPT_BOTH, hc_port);
        is_int(init_status(hdrs), 200, "Host: [::1]:PORT: accepted");
        is_int(status_of("POST", "Origin: http://evil.example\r\n" CT ACCEPT_BOTH, INIT_BODY), 403,
               "Origin: http://evil.example: 403");
        is_int(status_of("POST", "Origin: null\r\n" CT ACCEPT_BOTH, INIT_BODY), 403, "Origin: null: 403");
        http_call("POST", "Origin: http://localhost:3000\r\n" CT ACCEPT_BOTH, INIT_BODY, &r);
        ok(r.status == 200 && hresp_header(&r, "Access-Control-Allow-Origin", v, sizeof(v)) &&
                   strcmp(v, "http://localhost:3000") == 0,
           "Origin: http://localhost:3000: accepted, with CORS headers");
        if (hresp_header(&r, "Mcp-Session-Id", v, sizeof(v))) {
                char del[200];
                snprintf(del, sizeof(del), "Mcp-Session-Id: %s\r\n", v);
                is_int(status_of("DELETE", del, NULL), 200, "DELETE ends that session");
        }
        hresp_release(&r);
        is_int(status_of("GET", "Host: evil.example\r\nAccept: text/event-stream\r\n", NULL), 403,
               "GET with a foreign Host: 403");
        is_int(status_of("DELETE", "Host: evil.example\r\n", NULL), 403, "DELETE with a foreign Host: 403");
}

static void sizes_and_methods(void)
{
        static struct hc c;
        struct hresp r;
        char *big = malloc(70000);
        int64_t t0;

        memset(big, ' ', 69999);
        big[0] = '{';
        big[69998] = '}';
        big[69999] = '\0';
        t0 = dm_now_ms();
        http_call("POST", CT ACCEPT_BOTH, big, &r);
        ok(r.status == 413 && strstr(r.body, "DEMESNE_MAX_MESSAGE"),
           "a body over DEMESNE_MAX_MESSAGE (64k): 413 naming the limit");
        ok(dm_now_ms() - t0 < slack_ms(30000), "answered, the connection not left hanging (%lld ms)",
           (long long)(dm_now_ms() - t0));
        hresp_release(&r);

        /* Chunked: no length up front, so the server can only hang up. */
        hc_connect(&c, NULL);
        {
                char head[512];
                int n = snprintf(head, sizeof(head),
                                 "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" CT ACCEPT_BOTH
                                 "%sTransfer-Encoding: chunked\r\n\r\n",
                                 hc_port, hc_auth);
                hc_send(&c, head, (size_t)n);
                for (int i = 0; i < 20; i++) {
                        char sz[16];
                        n = snprintf(sz, sizeof(sz), "%x\r\n", 8192);
                        if (hc_send(&c, sz, (size_t)n) < 0 || hc_send(&c, big, 8192) < 0 || hc_send(&c, "\r\n", 2) < 0)
                                break;
                }
        }
        ok(hc_read_head(&c, &r, 10000) < 0, "a chunked body over the limit: the connection is closed, no answer");
        hresp_release(&r);
        hc_close(&c);
        free(big);

        is_int(status_of("PUT", CT, "{}"), 405, "PUT: 405");
        {
                char req[128];
                int n = snprintf(req, sizeof(req), "GET /other HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", hc_port);
                hc_connect(&c, NULL);
                hc_send(&c, req, (size_t)n);
                ok(hc_read_head(&c, &r, 10000) == 0 && r.status == 404, "another path: 404");
                hresp_release(&r);
                hc_close(&c);
        }
}

static void slowloris(void)
{
        static struct hc c;
        struct legit l;
        const char *req = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Pad: ";
        int64_t t0 = dm_now_ms();
        bool closed = false;

        hc_connect(&c, NULL);
        legit_start(&l);
        /* One byte every 300 ms: each byte would restart an idle timeout. */
        for (size_t i = 0; dm_now_ms() - t0 < REQUEST_TIMEOUT_S * 1000 + slack_ms(20000); i++) {
                char ch = req[i % strlen(req)];
                if (send(c.fd, &ch, 1, MSG_NOSIGNAL) < 0 || closed_within(c.fd, 300)) {
                        closed = true;
                        break;
                }
        }
        ok(closed, "a trickle of header bytes is cut off (after %lld ms; --request-timeout %d)",
           (long long)(dm_now_ms() - t0), REQUEST_TIMEOUT_S);
        hc_close(&c);
        ok(legit_join(&l), "a legitimate call made during the trickle succeeds");
}

static void idle_flood(void)
{
        enum { N = 500 };
        static struct hc conns[N];
        int connected = 0, refused = 0, left = 0;
        struct legit l;
        int64_t t0 = dm_now_ms(), refused_by;

        /* From 127.0.0.2: another client address than the legitimate one. */
        for (int i = 0; i < N; i++)
                if (hc_connect(&conns[i], "127.0.0.2") == 0)
                        connected++;
        diag("%d of %d idle connections from 127.0.0.2 connected", connected, N);
        legit_start(&l);
        /* The ones let in are closed no sooner than the request timeout after
         * they connected, so whatever is closed before then was refused. A
         * loaded machine may take a while to accept 500 connections: look
         * until all expected refusals are seen or that time is near. */
        refused_by = t0 + REQUEST_TIMEOUT_S * 1000 - 500;
        while (refused < N - SHARE - 2 && dm_now_ms() < refused_by) {
                usleep(100 * 1000);
                for (int i = 0; i < N; i++)
                        if (conns[i].fd >= 0 && closed_within(conns[i].fd, 1)) {
                                refused++;
                                hc_close(&conns[i]);
                        }
        }
        ok(refused >= N - SHARE - 2, "%d of %d idle connections closed at once (half of --max-connections %d, %lld ms)",
           refused, N, MAX_CONNS, (long long)(dm_now_ms() - t0));
        ok(legit_join(&l), "a legitimate call from 127.0.0.1 succeeds meanwhile");
        t0 = dm_now_ms();
        for (int i = 0; i < N; i++)
                if (conns[i].fd >= 0) {
                        int wait = (int)(REQUEST_TIMEOUT_S * 1000 + slack_ms(10000) - (dm_now_ms() - t0));
                        if (!closed_within(conns[i].fd, wait > 0 ? wait : 1))
                                left++;
                        hc_close(&conns[i]);
                }
        is_int(left, 0, "the idle ones that were let in are closed after the request timeout");
}

static void sessions(struct server *s)
{
        char sids[4][64];
        struct hresp r;
        char v[128], hdrs[256];
        int made = 0;

        for (int i = 0; i < 4; i++) {
                http_call("POST", CT ACCEPT_BOTH, INIT_BODY, &r);
                if (r.status == 200 && hresp_header(&r, "Mcp-Session-Id", sids[made], sizeof(sids[made])))
                        made++;
                hresp_release(&r);
        }
        is_int(made, 4, "4 sessions (--max-sessions 4)");
        http_call("POST", CT ACCEPT_BOTH, INIT_BODY, &r);
        ok(r.status == 503 && hresp_header(&r, "Retry-After", v, sizeof(v)), "a fifth: 503 with Retry-After (%d)",
           r.status);
        hresp_release(&r);
        /* --session-idle-timeout 4: until the server logs that every one
         * of them ended (the bound is one of liveness). All of them: the
         * cases after this one make sessions of their own, and a session
         * the janitor has not reached yet would take their place (CI, the
         * dockerd step: "a session and a long call in it (session '')"). */
        for (int i = 0; i < made; i++) {
                char ended[64];
                int64_t t0 = dm_now_ms();

                snprintf(ended, sizeof(ended), "session %.8s... ended", sids[i]);
                while (!log_has(s, ended) && dm_now_ms() - t0 < slack_ms(60000))
                        usleep(100 * 1000);
        }
        /* Refusals are logged a few per 10 s, then counted. */
        ok(log_has(s, "sessions already") || log_has(s, "more requests in the last"), "the refusal is logged");
        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "Mcp-Session-Id: %s\r\n", sids[0]);
        is_int(status_of("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}"), 404,
               "an idle session expires: 404");
        ok(log_has(s, "without requests"), "the expiry is logged");
        is_int(status_of("POST", CT ACCEPT_BOTH, INIT_BODY), 200, "and there is room for new sessions");
}

/* Two requests of one session with the same id, the first still running:
 * the second is refused (its answer would go to either stream), the first
 * gets its own answer, and the id is free again once it has. */
static void duplicate_ids(void)
{
        struct hc *a = calloc(1, sizeof(*a));
        struct hresp r = { 0 }, ra = { 0 };
        json_object *m = NULL, *res = NULL;
        char sid[64] = "", hdrs[256], body[512];

        http_call("POST", CT ACCEPT_BOTH, INIT_BODY, &r);
        hresp_header(&r, "Mcp-Session-Id", sid, sizeof(sid));
        hresp_release(&r);
        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "Mcp-Session-Id: %s\r\n", sid);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &r);
        hresp_release(&r);
        snprintf(body, sizeof(body),
                 "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                 "\"arguments\":{\"command\":\"" TEST_HOLD(60) "; echo first\",\"egress\":\"none\"}}}");
        if (!a || !sid[0] || hc_connect(a, NULL) < 0 || hc_request(a, "POST", hdrs, body) < 0 ||
            hc_read_head(a, &ra, 60000) < 0) {
                ok(0, "a session and a long call in it (session '%s')", sid);
                goto out;
        }
        is_int(ra.status, 200, "id 7: a long call streams");
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}", &r);
        m = hresp_json(&r);
        ok(r.status == 400 && rpc_code(m) == -32600 && strstr(jstr(m, "error", "message", NULL), "in flight") &&
                   json_object_is_type(jget(m, "id", NULL, NULL), json_type_null),
           "a second request with id 7 meanwhile: 400, -32600, no id of the first's (%d: %s)", r.status,
           r.body ? r.body : "");
        json_object_put(m);
        hresp_release(&r);
        test_release();
        for (json_object *e; !res && (e = hc_next_event(a, &ra, slack_ms(60000)));)
                if (jget(e, "result", NULL, NULL) || jget(e, "error", NULL, NULL))
                        res = e;
                else
                        json_object_put(e);
        ok(res && json_object_get_int(jget(res, "id", NULL, NULL)) == 7 &&
                   strstr(json_object_to_json_string(res), "first"),
           "the first gets its own answer (%.200s)", res ? json_object_to_json_string(res) : "none");
        json_object_put(res);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\"}", &r);
        m = hresp_json(&r);
        ok(r.status == 200 && jget(m, "result", "tools", NULL), "id 7 once answered is free again (%d)", r.status);
        json_object_put(m);
        hresp_release(&r);
        snprintf(hdrs, sizeof(hdrs), "Mcp-Session-Id: %s\r\n", sid);
        http_call("DELETE", hdrs, NULL, &r);
        hresp_release(&r);
out:
        hresp_release(&ra);
        if (a && a->fd > 0)
                hc_close(a);
        free(a);
}

static void tokens(const char *dir)
{
        struct server t = { 0 };
        char path[PATH_MAX], log[PATH_MAX], auth[128];
        const char *token = "s3cret-token-for-the-test-0123456789";
        const char *args[] = { "--token-file", path, NULL };
        struct server saved = { .port = hc_port };
        int code = 0, bad_logged = 0, r;
        FILE *f;

        snprintf(path, sizeof(path), "%s/token", dir);
        f = fopen(path, "w");
        fprintf(f, "%s\n", token);
        fclose(f);
        chmod(path, 0644);
        snprintf(log, sizeof(log), "%s/token-readable.log", dir);
        r = server_start(&t, log, args, &code);
        ok(r < 0 && code == 1, "a token file others can read: refused at start (exit %d)", code);
        ok(log_has(&t, "chmod 600"), "... saying chmod 600");
        chmod(path, 0600);
        snprintf(log, sizeof(log), "%s/token.log", dir);
        if (server_start(&t, log, args, NULL) < 0) {
                ok(0, "the token server starts");
                return;
        }
        ok(t.token_file[0] == '\0', "a token given with --token-file: no token file is made");
        snprintf(saved.auth, sizeof(saved.auth), "%s", hc_auth);
        hc_use(&t);
        {
                struct hresp resp;
                char v[128];
                http_call("POST", CT ACCEPT_BOTH, INIT_BODY, &resp);
                ok(resp.status == 401 && hresp_header(&resp, "WWW-Authenticate", v, sizeof(v)) &&
                           strncmp(v, "Bearer", 6) == 0,
                   "no token: 401 with WWW-Authenticate: Bearer");
                hresp_release(&resp);
        }
        is_int(status_of("POST", "Authorization: Bearer s3cret-token-for-the-test-012345678X\r\n" CT ACCEPT_BOTH,
                         INIT_BODY),
               401, "a wrong token of the same length: 401");
        is_int(status_of("POST", "Authorization: Bearer s3cret\r\n" CT ACCEPT_BOTH, INIT_BODY), 401,
               "a prefix of the token: 401");
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", token);
        extra_auth = auth;
        {
                struct legit l;
                char hdrs[512];
                legit_start(&l);
                for (int i = 0; i < 200; i++)
                        if (status_of("POST", "Authorization: Bearer guess\r\n" CT ACCEPT_BOTH, INIT_BODY) == 401)
                                bad_logged++;
                is_int(bad_logged, 200, "200 guesses: all 401");
                ok(legit_join(&l), "a call with the right token succeeds meanwhile");
                snprintf(hdrs, sizeof(hdrs), "authorization: bearer %s\r\n" CT ACCEPT_BOTH, token);
                is_int(status_of("POST", hdrs, INIT_BODY), 200, "the scheme is case-insensitive");
        }
        {
                char cmd[PATH_MAX + 64];
                snprintf(cmd, sizeof(cmd), "test $(grep -c 'refused:' '%s') -le 8", log);
                ok(system(cmd) == 0, "refusals are logged a few at a time, not one line each");
        }
        is_int(server_stop(&t, 15000, NULL), 0, "the token server exits cleanly");
        extra_auth = "";
        hc_use(&saved);
}

static void startup_refusals(const char *dir)
{
        struct server t = { 0 };
        char log[PATH_MAX];
        int code = 0, r;
        const char *wild[] = { "--http", "0.0.0.0:0", "--token-file", "/nonexistent", NULL };
        const char *bogus[] = { "--http", "nonsense:port", NULL };

        /* Refused before anything binds: no traffic leaves loopback. */
        snprintf(log, sizeof(log), "%s/wild.log", dir);
        r = server_start(&t, log, wild, &code);
        ok(r < 0 && code == 1, "--http 0.0.0.0:0 without --allowed-host: exit 1 (%d)", code);
        ok(log_has(&t, "--allowed-host NAME"), "... saying which host names to allow");
        snprintf(log, sizeof(log), "%s/bogus.log", dir);
        code = 0;
        r = server_start(&t, log, bogus, &code);
        ok(r < 0 && code == 2, "--http nonsense:port: usage error, exit 2 (%d)", code);
}

int main(void)
{
        struct server s = { 0 };
        char log[PATH_MAX];
        char per_ip[16], timeout[16];
        const char *args[] = { "--request-timeout",
                               timeout,
                               "--max-connections-per-ip",
                               per_ip,
                               "--max-connections",
                               "128", /* MAX_CONNS */
                               "--max-sessions",
                               "4",
                               "--session-idle-timeout",
                               "4",
                               NULL };
        struct rlimit rl;

        test_env_setup("http-hostile");
        snprintf(per_ip, sizeof(per_ip), "%d", PER_IP);
        snprintf(timeout, sizeof(timeout), "%d", REQUEST_TIMEOUT_S);
        /* 500 sockets here, and as many on the server's side. */
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2048 && rl.rlim_max >= 2048) {
                rl.rlim_cur = 2048;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        setenv("DEMESNE_MAX_MESSAGE", "64k", 1);
        snprintf(log, sizeof(log), "%s/server.log", test_root);
        if (server_start(&s, log, args, NULL) < 0) {
                printf("Bail out! demesne serve --http did not start (log: %s)\n", log);
                return 1;
        }
        hc_use(&s);
        diag("server pid %d on port %d", (int)s.pid, s.port);

        host_and_origin();
        sizes_and_methods();
        slowloris();
        idle_flood();
        sessions(&s);
        duplicate_ids();
        tokens(test_root);
        startup_refusals(test_root);

        is_int(server_stop(&s, 15000, NULL), 0, "the server exits cleanly after all that");
        if (tap_failed)
                diag("logs kept in %s", test_root);
        else
                dm_remove_tree(test_root);
        return done_testing();
}
