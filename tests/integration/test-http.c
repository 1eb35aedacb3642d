/* SPDX-License-Identifier: MIT */
/* `demesne serve --http` as a client sees it on the wire: both eras, the
 * legacy session lifecycle, SSE progress, cancellation by closing a stream
 * (the container goes), stream limits, and a clean exit on SIGTERM with
 * calls running; several tokens, each a principal that cannot reach
 * another's sessions. The npm clients and the conformance suite (tests/e2e)
 * cover the same from the clients' side; test-http-hostile the attacks. */
#include "config.h"

#include <json-c/json.h>
#include <sys/stat.h>

#include "tests/integration/common.h"
#include "tests/integration/http-client.h"
#include "src/basic/cleanup.h"
#include "tests/tap.h"
#include "tests/integration/engine-env.h"

#define CT "Content-Type: application/json\r\n"
#define ACCEPT_BOTH "Accept: application/json, text/event-stream\r\n"
#define MODERN_META                                                              \
        "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
        "\"io.modelcontextprotocol/clientCapabilities\":{}"
#define INIT_BODY                                                                                                 \
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"," \
        "\"capabilities\":{},\"clientInfo\":{\"name\":\"test-http\",\"version\":\"1\"}}}"

static char sid_hdr[128];

static int initialize(char *ret_sid)
{
        struct hresp r;
        char v[64] = "";
        int ok_ = http_call("POST", CT ACCEPT_BOTH, INIT_BODY, &r) == 0 && r.status == 200 &&
                  hresp_header(&r, "Mcp-Session-Id", v, sizeof(v));

        snprintf(ret_sid, 64, "%s", v);
        hresp_release(&r);
        return ok_ ? 0 : -1;
}

/* Starts a call on its own connection and reads the response head. */
static int start_call(struct hc *c, struct hresp *r, const char *headers, const char *body)
{
        if (hc_connect(c, NULL) < 0 || hc_request(c, body ? "POST" : "GET", headers, body) < 0)
                return -1;
        return hc_read_head(c, r, 60000);
}

static void legacy(struct dm_backend *b, struct server *s)
{
        struct hresp r;
        json_object *m;
        char sid[64], sid2[64], v[128], hdrs[512], body[1024];
        static struct hc g, p, x, y;
        struct hresp gr, pr, xr, yr;

        ok(initialize(sid) == 0, "initialize: 200 with an Mcp-Session-Id");
        ok(strlen(sid) == 32 && strspn(sid, "0123456789abcdef") == 32, "the session id is 32 hex digits ('%s')", sid);
        snprintf(sid_hdr, sizeof(sid_hdr), "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\n", sid);

        http_call("POST", CT ACCEPT_BOTH, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", &r);
        is_int(r.status, 400, "a request without Mcp-Session-Id: 400");
        hresp_release(&r);
        http_call("POST", CT ACCEPT_BOTH "Mcp-Session-Id: 00000000000000000000000000000000\r\n",
                  "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", &r);
        m = hresp_json(&r);
        ok(r.status == 404 && rpc_code(m) == -32001, "an unknown session: 404, -32001 (%d)", r.status);
        json_object_put(m);
        hresp_release(&r);

        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "%s", sid_hdr);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", &r);
        ok(r.status == 202 && r.body_len == 0, "a notification: 202, no body (%d)", r.status);
        hresp_release(&r);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}", &r);
        m = hresp_json(&r);
        ok(r.status == 200 && hresp_header(&r, "Content-Type", v, sizeof(v)) && strcmp(v, "application/json") == 0,
           "tools/list: 200 application/json");
        ok(m && strstr(json_object_to_json_string(m), "\"sandbox_script\""), "tools/list lists sandbox_script");
        json_object_put(m);
        hresp_release(&r);

        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 1999-01-01\r\n", sid);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/list\"}", &r);
        is_int(r.status, 400, "an unsupported MCP-Protocol-Version: 400");
        hresp_release(&r);
        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "%s", sid_hdr);
        http_call("POST", hdrs, "{this is not json", &r);
        m = hresp_json(&r);
        ok(r.status == 400 && rpc_code(m) == -32700 && !jget(m, "id", NULL, NULL),
           "malformed JSON: 400, -32700, no id");
        json_object_put(m);
        hresp_release(&r);
        http_call("POST", hdrs, "[{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\"}]", &r);
        m = hresp_json(&r);
        ok(r.status == 400 && rpc_code(m) == -32600, "a batch: 400, -32600");
        json_object_put(m);
        hresp_release(&r);
        snprintf(hdrs, sizeof(hdrs), "Content-Type: text/plain\r\n" ACCEPT_BOTH "%s", sid_hdr);
        http_call("POST", hdrs, "{}", &r);
        is_int(r.status, 415, "Content-Type text/plain: 415");
        hresp_release(&r);
        snprintf(hdrs, sizeof(hdrs), CT "Accept: text/html\r\n%s", sid_hdr);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"ping\"}", &r);
        is_int(r.status, 406, "Accept: text/html only: 406");
        hresp_release(&r);

        /* The GET stream carries what belongs to no request: log records. */
        snprintf(hdrs, sizeof(hdrs), "Accept: text/event-stream\r\n%s", sid_hdr);
        ok(start_call(&g, &gr, hdrs, NULL) == 0 && gr.status == 200 &&
                   hresp_header(&gr, "Content-Type", v, sizeof(v)) && strcmp(v, "text/event-stream") == 0,
           "GET: 200 text/event-stream");
        http_call("GET", hdrs, NULL, &r);
        is_int(r.status, 409, "a second GET stream for the session: 409");
        hresp_release(&r);
        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "%s", sid_hdr);
        http_call("POST", hdrs,
                  "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"info\"}}", &r);
        is_int(r.status, 200, "logging/setLevel info: 200");
        hresp_release(&r);
        initialize(sid2);
        snprintf(v, sizeof(v), "Mcp-Session-Id: %s\r\n", sid2);
        http_call("DELETE", v, NULL, &r);
        hresp_release(&r);
        m = hc_next_event(&g, &gr, 10000);
        ok(m && strcmp(jstr(m, "method", NULL, NULL), "notifications/message") == 0,
           "a log record (another session ended) arrives on the GET stream");
        json_object_put(m);

        /* Progress on the call's own SSE stream, then the result. */
        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "%s", sid_hdr);
        start_call(&p, &pr, hdrs,
                   "{\"jsonrpc\":\"2.0\",\"id\":8,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                   "\"arguments\":{\"command\":\"echo a; sleep 2.5; echo b; exit "
                   "3\"},\"_meta\":{\"progressToken\":\"t8\"}}}");
        ok(pr.status == 200 && hresp_header(&pr, "Content-Type", v, sizeof(v)) && strcmp(v, "text/event-stream") == 0,
           "tools/call: 200 text/event-stream");
        {
                int progress = 0;
                json_object *res = NULL;
                while ((m = hc_next_event(&p, &pr, 90000))) {
                        if (jget(m, "id", NULL, NULL)) {
                                res = m;
                                break;
                        }
                        if (strcmp(jstr(m, "params", "progressToken", NULL), "t8") == 0)
                                progress++;
                        json_object_put(m);
                }
                ok(progress >= 1, "progress notifications with the request's token on the stream (%d)", progress);
                is_int(json_object_get_int(jget(res, "result", "structuredContent", "exit_code")), 3,
                       "then the result: exit 3");
                is_str(json_object_get_string(jget(res, "result", "structuredContent", "stdout")), "a\nb\n",
                       "stdout a b");
                json_object_put(res);
                ok(hc_read_body(&p, &pr, 5000) == 0, "and the stream ends");
        }
        hc_close(&p);
        hresp_release(&pr);

        snprintf(hdrs, sizeof(hdrs), CT "Accept: application/json\r\n%s", sid_hdr);
        http_call("POST", hdrs,
                  "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                  "\"arguments\":{\"command\":\"echo hi\"}}}",
                  &r);
        m = hresp_json(&r);
        ok(r.status == 200 && hresp_header(&r, "Content-Type", v, sizeof(v)) && strcmp(v, "application/json") == 0 &&
                   strcmp(jstr(m, "result", "structuredContent", "stdout"), "hi\n") == 0,
           "a client that accepts only JSON gets the result as JSON");
        json_object_put(m);
        hresp_release(&r);

        /* The GET stream and two calls fill the session's streams; a third call is refused. */
        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "%s", sid_hdr);
        for (int i = 0; i < 2; i++) {
                snprintf(body, sizeof(body),
                         "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":"
                         "\"sandbox_script\",\"arguments\":{\"command\":\"sleep 60\"}}}",
                         10 + i);
                start_call(i ? &y : &x, i ? &yr : &xr, hdrs, body);
        }
        ok(xr.status == 200 && yr.status == 200, "two long calls stream");
        http_call("POST", hdrs,
                  "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                  "\"arguments\":{\"command\":\"true\"}}}",
                  &r);
        m = hresp_json(&r);
        ok(r.status == 429 && hresp_header(&r, "Retry-After", v, sizeof(v)) && jget(m, "id", NULL, NULL),
           "a third call while the GET stream is open (--max-session-streams 3): 429 with Retry-After and the request "
           "id (%d)",
           r.status);
        json_object_put(m);
        hresp_release(&r);
        is_int(wait_containers(b, s->pid, 2, 60000), 2, "both calls' containers run");
        hc_close(&x);
        hc_close(&y);
        {
                int64_t t0 = dm_now_ms();
                is_int(wait_containers(b, s->pid, 0, 15000), 0,
                       "closing their streams cancels them: containers removed");
                diag("removed %lld ms after the streams closed", (long long)(dm_now_ms() - t0));
        }
        hresp_release(&xr);
        hresp_release(&yr);
        ok(log_has(s, "client closed the stream): cancelled"), "the log says the calls were cancelled");

        http_call("DELETE", sid_hdr, NULL, &r);
        is_int(r.status, 200, "DELETE: 200");
        hresp_release(&r);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"tools/list\"}", &r);
        is_int(r.status, 404, "the deleted session: 404");
        hresp_release(&r);
        http_call("DELETE", sid_hdr, NULL, &r);
        is_int(r.status, 404, "DELETE again: 404");
        hresp_release(&r);
        ok(hc_read_body(&g, &gr, 5000) == 0, "the session's GET stream ended with it");
        hc_close(&g);
        hresp_release(&gr);
}

static void modern_headers(char *out, size_t n, const char *method, const char *name)
{
        snprintf(out, n, CT ACCEPT_BOTH "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: %s\r\n%s%s%s", method,
                 name ? "Mcp-Name: " : "", name ? name : "", name ? "\r\n" : "");
}

static void modern(struct dm_backend *b, struct server *s)
{
        struct hresp r, cr;
        static struct hc c;
        json_object *m;
        char hdrs[512], v[64];
        const char *list = "{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}}";
        const char *call_bad =
                "{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                "\"arguments\":{}," MODERN_META "}}}";

        modern_headers(hdrs, sizeof(hdrs), "tools/list", NULL);
        http_call("POST", hdrs, list, &r);
        m = hresp_json(&r);
        ok(r.status == 200 && strcmp(jstr(m, "result", "resultType", NULL), "complete") == 0,
           "2026-07-28 tools/list: 200, resultType complete");
        ok(!hresp_header(&r, "Mcp-Session-Id", v, sizeof(v)), "and no session");
        json_object_put(m);
        hresp_release(&r);

        modern_headers(hdrs, sizeof(hdrs), "prompts/list", NULL);
        http_call("POST", hdrs, list, &r);
        m = hresp_json(&r);
        ok(r.status == 400 && rpc_code(m) == -32020, "Mcp-Method disagreeing with the body: 400, -32020");
        json_object_put(m);
        hresp_release(&r);
        modern_headers(hdrs, sizeof(hdrs), "tools/call", "other_tool");
        http_call("POST", hdrs, call_bad, &r);
        m = hresp_json(&r);
        ok(r.status == 400 && rpc_code(m) == -32020, "Mcp-Name disagreeing with params.name: 400, -32020");
        json_object_put(m);
        hresp_release(&r);
        modern_headers(hdrs, sizeof(hdrs), "tools/call", NULL);
        http_call("POST", hdrs, call_bad, &r);
        is_int(r.status, 400, "tools/call without Mcp-Name: 400");
        hresp_release(&r);
        /* base64("sandbox_script"), as clients send values that need it. */
        modern_headers(hdrs, sizeof(hdrs), "tools/call", "=?base64?c2FuZGJveF9zY3JpcHQ=?=");
        http_call("POST", hdrs, call_bad, &r);
        ok(r.status == 200 && strstr(r.body, "\"isError\":true"),
           "Mcp-Name in =?base64?...?= form is decoded (the call answers: missing command)");
        hresp_release(&r);

        modern_headers(hdrs, sizeof(hdrs), "no/such", NULL);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":22,\"method\":\"no/such\",\"params\":{" MODERN_META "}}}",
                  &r);
        m = hresp_json(&r);
        ok(r.status == 404 && rpc_code(m) == -32601 && json_object_get_int(jget(m, "id", NULL, NULL)) == 22,
           "an unknown method: 404, -32601, the request id");
        json_object_put(m);
        hresp_release(&r);
        modern_headers(hdrs, sizeof(hdrs), "ping", NULL);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":23,\"method\":\"ping\",\"params\":{" MODERN_META "}}}",
                  &r);
        is_int(r.status, 404, "ping (not in 2026-07-28): 404");
        hresp_release(&r);
        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "MCP-Protocol-Version: v999\r\nMcp-Method: tools/list\r\n");
        http_call("POST", hdrs,
                  "{\"jsonrpc\":\"2.0\",\"id\":24,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                  "\"io.modelcontextprotocol/protocolVersion\":\"v999\",\"io.modelcontextprotocol/"
                  "clientCapabilities\":{}}}}",
                  &r);
        m = hresp_json(&r);
        ok(r.status == 400 && rpc_code(m) == -32022 && jget(m, "error", "data", "supported"),
           "an unsupported version: 400, -32022 with the supported list");
        json_object_put(m);
        hresp_release(&r);
        modern_headers(hdrs, sizeof(hdrs), "tools/list", NULL);
        http_call("POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":25,\"method\":\"tools/list\",\"params\":{}}", &r);
        m = hresp_json(&r);
        ok(r.status == 400 && rpc_code(m) == -32602, "no _meta under a 2026-07-28 header: 400, -32602");
        json_object_put(m);
        hresp_release(&r);
        http_call("GET", "Accept: text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n", NULL, &r);
        is_int(r.status, 405, "GET in 2026-07-28: 405");
        hresp_release(&r);
        http_call("DELETE", "MCP-Protocol-Version: 2026-07-28\r\n", NULL, &r);
        is_int(r.status, 405, "DELETE in 2026-07-28: 405");
        hresp_release(&r);

        /* Closing the stream is how a 2026-07-28 client cancels. */
        modern_headers(hdrs, sizeof(hdrs), "tools/call", "sandbox_script");
        start_call(&c, &cr, hdrs,
                   "{\"jsonrpc\":\"2.0\",\"id\":26,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                   "\"arguments\":{\"command\":\"echo x; sleep 60\"}," MODERN_META ",\"progressToken\":26}}}");
        m = hc_next_event(&c, &cr, 60000);
        ok(m && json_object_get_int(jget(m, "params", "progressToken", NULL)) == 26,
           "2026-07-28 tools/call streams progress");
        json_object_put(m);
        is_int(wait_containers(b, s->pid, 1, 30000), 1, "its container runs");
        hc_close(&c);
        hresp_release(&cr);
        is_int(wait_containers(b, s->pid, 0, 15000), 0, "closing the stream removed it");
}

static void sigterm(struct dm_backend *b, struct server *s)
{
        static struct hc l, c;
        struct hresp lr, cr;
        char sid[64], hdrs[512];
        int64_t ms = 0;
        int code;

        initialize(sid);
        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "Mcp-Session-Id: %s\r\n", sid);
        start_call(&l, &lr, hdrs,
                   "{\"jsonrpc\":\"2.0\",\"id\":30,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                   "\"arguments\":{\"command\":\"sleep 3600\"}}}");
        modern_headers(hdrs, sizeof(hdrs), "tools/call", "sandbox_script");
        start_call(&c, &cr, hdrs,
                   "{\"jsonrpc\":\"2.0\",\"id\":31,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                   "\"arguments\":{\"command\":\"sleep 3600\"}," MODERN_META "}}}");
        is_int(wait_containers(b, s->pid, 2, 60000), 2, "two calls running (one per era)");
        pid_t pid = s->pid;
        /* Without waiting for the calls' hour; how soon is bench/'s. */
        code = server_stop(s, (int)slack_ms(120000), &ms);
        is_int(code, 0, "SIGTERM: clean exit");
        ok(ms < slack_ms(120000), "without waiting for the calls (%lld ms)", (long long)ms);
        is_int(containers_of(b, pid), 0, "no container left");
        hc_close(&l);
        hc_close(&c);
        hresp_release(&lr);
        hresp_release(&cr);
}

/* Whether the server's log holds needle (quotes and all, unlike log_has). */
static bool log_says(const struct server *s, const char *needle)
{
        FILE *f = fopen(s->log, "re");
        char line[4096];
        bool found = false;

        while (f && !found && fgets(line, sizeof(line), f))
                found = strstr(line, needle) != NULL;
        if (f)
                fclose(f);
        return found;
}

/* A token file that refuses to start the server: its log must name what. */
static void refused_file(const char *dir, const char *name, const char *text, const char *says, const char *what)
{
        struct server t = { 0 };
        char path[PATH_MAX], log[PATH_MAX];
        const char *args[] = { "--token-file", path, NULL };
        int code = 0, r;
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s.tokens", dir, name);
        snprintf(log, sizeof(log), "%s/%s.log", dir, name);
        f = fopen(path, "w");
        fputs(text, f);
        fclose(f);
        chmod(path, 0600);
        r = server_start(&t, log, args, &code);
        ok(r < 0 && code == 1, "%s: refused at start (exit %d)", what, code);
        ok(log_says(&t, says), "... the log says '%s'", says);
        if (r == 0)
                server_stop(&t, 15000, NULL);
}

/* One request with the Authorization header auth; the status, and the
 * body in ret_body (malloc'd, "" if none). */
static int call_as(const char *auth, const char *method, const char *sid, const char *accept, const char *body,
                   char **ret_body)
{
        struct hresp r;
        char hdrs[1024];
        int status;

        snprintf(hdrs, sizeof(hdrs), "%s%s%s%s%s%s", auth, body ? CT : "", accept, sid ? "Mcp-Session-Id: " : "",
                 sid ? sid : "", sid ? "\r\nMCP-Protocol-Version: 2025-11-25\r\n" : "");
        http_call(method, hdrs, body, &r);
        status = r.status;
        *ret_body = strdup(r.body ? r.body : "");
        hresp_release(&r);
        return status;
}

/* Answers to the same request naming an unknown session id and naming
 * sid, made with another token: they must not differ at all. */
static void same_as_unknown(const char *auth, const char *method, const char *sid, const char *accept, const char *body,
                            const char *what)
{
        _cleanup_free_ char *unknown = NULL, *foreign = NULL;
        int s_unknown = call_as(auth, method, "00000000000000000000000000000000", accept, body, &unknown);
        int s_foreign = call_as(auth, method, sid, accept, body, &foreign);

        ok(s_foreign == 404 && s_unknown == 404 && strcmp(foreign, unknown) == 0,
           "%s the other token's session: 404, the same answer as an unknown id (%d '%s')", what, s_foreign, foreign);
}

/* Several tokens in one file, each a principal with its own sessions. */
static void principals(const char *dir)
{
        const char *alice = "alice-0123456789abcdef-secret", *bob = "bob-0123456789abcdef-secret";
        char path[PATH_MAX], log[PATH_MAX], a_auth[128], b_auth[128], sid[64] = "", sid_b[64] = "";
        const char *args[] = { "--token-file", path, NULL };
        const char *list = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}";
        struct server t = { 0 };
        struct hresp r;
        char *body;
        FILE *f;

        refused_file(dir, "dup-name", "# two alices\nalice alice-0123456789abcdef\n\nalice other-0123456789abcdef\n",
                     "line 4: the name 'alice' is on line 2 already", "a duplicate name");
        refused_file(dir, "dup-token", "alice same-0123456789abcdef\nbob same-0123456789abcdef\n",
                     "line 2: the same token as on line 1", "a duplicate token");
        refused_file(dir, "short", "alice alice-0123456789abcdef\nbob short\n", "line 2: the token needs at least 16",
                     "a short token");
        refused_file(dir, "empty", "", "holds no token", "an empty file");

        snprintf(path, sizeof(path), "%s/tokens", dir);
        f = fopen(path, "w");
        fprintf(f, "# who may connect\nalice %s\nbob\t%s\n", alice, bob);
        fclose(f);
        chmod(path, 0600);
        snprintf(log, sizeof(log), "%s/principals.log", dir);
        if (server_start(&t, log, args, NULL) < 0) {
                ok(0, "a server with two tokens starts (log: %s)", log);
                return;
        }
        ok(log_says(&t, "http: 2 bearer tokens, one principal each: 'alice', 'bob'"), "the log names the principals");
        ok(!log_says(&t, "0123456789abcdef-secret"), "... and no token");
        hc_use(&t);
        snprintf(a_auth, sizeof(a_auth), "Authorization: Bearer %s\r\n", alice);
        snprintf(b_auth, sizeof(b_auth), "Authorization: Bearer %s\r\n", bob);

        http_call("POST", "Authorization: Bearer alice-0123456789abcdef-secreT\r\n" CT ACCEPT_BOTH, INIT_BODY, &r);
        is_int(r.status, 401, "a wrong token: 401");
        hresp_release(&r);

        {
                char hdrs[512];
                snprintf(hdrs, sizeof(hdrs), "%s" CT ACCEPT_BOTH, a_auth);
                http_call("POST", hdrs, INIT_BODY, &r);
                ok(r.status == 200 && hresp_header(&r, "Mcp-Session-Id", sid, sizeof(sid)),
                   "alice's token: initialize 200");
                hresp_release(&r);
                snprintf(hdrs, sizeof(hdrs), "%s" CT ACCEPT_BOTH, b_auth);
                http_call("POST", hdrs, INIT_BODY, &r);
                ok(r.status == 200 && hresp_header(&r, "Mcp-Session-Id", sid_b, sizeof(sid_b)),
                   "bob's token: initialize 200");
                hresp_release(&r);
                modern_headers(hdrs, sizeof(hdrs), "tools/list", NULL);
                snprintf(hdrs + strlen(hdrs), sizeof(hdrs) - strlen(hdrs), "%s", b_auth);
                http_call("POST", hdrs,
                          "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}}", &r);
                is_int(r.status, 200, "bob's token: a 2026-07-28 tools/list 200");
                hresp_release(&r);
        }
        is_int(call_as(a_auth, "POST", sid, ACCEPT_BOTH, list, &body), 200, "alice uses her session: 200");
        free(body);
        is_int(call_as(b_auth, "POST", sid_b, ACCEPT_BOTH, list, &body), 200, "bob uses his: 200");
        free(body);

        same_as_unknown(b_auth, "POST", sid, ACCEPT_BOTH, list, "bob's POST to");
        same_as_unknown(b_auth, "GET", sid, "Accept: text/event-stream\r\n", NULL, "bob's GET stream of");
        same_as_unknown(b_auth, "DELETE", sid, "", NULL, "bob's DELETE of");
        same_as_unknown(a_auth, "DELETE", sid_b, "", NULL, "alice's DELETE of");
        is_int(call_as(a_auth, "POST", sid, ACCEPT_BOTH, list, &body), 200, "alice's session lives on");
        free(body);
        is_int(call_as(b_auth, "POST", sid_b, ACCEPT_BOTH, list, &body), 200, "bob's too");
        free(body);
        is_int(call_as(a_auth, "DELETE", sid, "", NULL, &body), 200, "alice ends her own session: 200");
        free(body);

        ok(!log_says(&t, "0123456789abcdef-secret"), "no token in the log at the end either");
        is_int(server_stop(&t, 15000, NULL), 0, "the two-token server exits cleanly");
}

int main(void)
{
        struct dm_backend *b;
        struct dm_error err = { 0 };
        struct server s = { 0 };
        char log[PATH_MAX];
        const char *args[] = { "--max-session-streams", "3", NULL };

        test_env_setup("http");
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        if (dm_backend_open(&ec, &b, &err) < 0) {
                printf("Bail out! %s\n", err.msg);
                return 1;
        }
        snprintf(log, sizeof(log), "%s/server.log", test_root);
        if (server_start(&s, log, args, NULL) < 0) {
                printf("Bail out! demesne serve --http did not start (log: %s)\n", log);
                return 1;
        }
        hc_use(&s);
        diag("server pid %d on port %d", (int)s.pid, s.port);

        legacy(b, &s);
        modern(b, &s);
        sigterm(b, &s);
        principals(test_root);

        dm_backend_free(b);
        if (tap_failed)
                diag("server log kept: %s", log);
        else
                dm_remove_tree(test_root);
        return done_testing();
}
