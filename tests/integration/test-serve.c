/* SPDX-License-Identifier: MIT */
/* `demesne serve` as a client sees it over stdio: both eras, bad input of
 * every kind, cancellation, progress, and a clean exit on SIGTERM/EOF with
 * no container left. The npm clients (tests/e2e) cover the happy paths. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/basic/timeutil.h"
#include "tests/integration/common.h"
#include "tests/integration/stdio-client.h"
#include "tests/tap.h"
#include "tests/integration/engine-env.h"

int main(void)
{
        struct child *c = calloc(1, sizeof(*c));
        struct dm_backend *b;
        struct dm_error err = { 0 };
        json_object *m, *v;
        const char *env_small[] = { "DEMESNE_MAX_MESSAGE=8192", NULL };
        int64_t t0;

        test_env_setup("serve");
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        if (dm_backend_open(&ec, &b, &err) < 0) {
                printf("Bail out! %s\n", err.msg);
                return 1;
        }
        if (spawn(c, env_small) < 0) {
                printf("Bail out! cannot start $DEMESNE serve\n");
                return 1;
        }

        /* Bad input of every kind; the server keeps serving after each. */
        send_line(c, "{this is not json");
        m = recv_msg(c, 5000);
        is_int(error_code(m), -32700, "malformed JSON: -32700");
        ok(m && json_object_object_get_ex(m, "id", &v) && v == NULL, "with id null");
        json_object_put(m);
        send_line(c, "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]");
        m = recv_msg(c, 5000);
        is_int(error_code(m), -32600, "batch: -32600");
        json_object_put(m);
        char *huge = malloc(20001);
        memset(huge, 'x', 20000);
        huge[20000] = '\0';
        memcpy(huge, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"ping\",\"params\":{\"pad\":\"", 56);
        send_line(c, huge);
        free(huge);
        m = recv_msg(c, 5000);
        is_int(error_code(m), -32600, "message over DEMESNE_MAX_MESSAGE: -32600");
        ok(m && strstr(json_object_to_json_string(m), "message too large") != NULL, "error says too large");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"no/such/method\"}");
        m = recv_response(c, 6, 5000, NULL);
        is_int(error_code(m), -32601, "unknown method: -32601");
        json_object_put(m);

        /* Legacy era. */
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-"
                     "06-18\","
                     "\"capabilities\":{},\"clientInfo\":{\"name\":\"test\",\"version\":\"1\"}}}");
        m = recv_response(c, 10, 5000, NULL);
        is_str(json_object_get_string(path(m, "result", "protocolVersion", NULL)), "2025-06-18",
               "initialize echoes a supported version");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2024-"
                     "01-01\","
                     "\"capabilities\":{},\"clientInfo\":{\"name\":\"test\",\"version\":\"1\"}}}");
        m = recv_response(c, 11, 5000, NULL);
        is_str(json_object_get_string(path(m, "result", "protocolVersion", NULL)), "2025-11-25",
               "initialize with an unknown version offers the latest");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"ping\"}");
        m = recv_response(c, 12, 5000, NULL);
        ok(m && path(m, "result", NULL, NULL) && !path(m, "result", "resultType", NULL), "legacy ping answers {}");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":13,\"method\":\"tools/list\"}");
        m = recv_response(c, 13, 5000, NULL);
        v = path(m, "result", "tools", NULL);
        ok(v && json_object_array_length(v) >= 1, "tools/list lists tools");
        ok(v && strcmp(json_object_get_string(path(json_object_array_get_idx(v, 0), "name", NULL, NULL)),
                       "sandbox_script") == 0,
           "sandbox_script listed");
        ok(v && json_object_get_boolean(
                        path(json_object_array_get_idx(v, 0), "inputSchema", "additionalProperties", NULL)) == 0,
           "inputSchema has additionalProperties false");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":14,\"method\":\"tools/list\",\"params\":{\"cursor\":\"garbage\"}}");
        m = recv_response(c, 14, 5000, NULL);
        is_int(error_code(m), -32602, "bad cursor: -32602");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":15,\"method\":\"tools/"
                     "call\",\"params\":{\"name\":\"nope\",\"arguments\":{}}}");
        m = recv_response(c, 15, 5000, NULL);
        is_int(error_code(m), -32602, "unknown tool: JSON-RPC error -32602");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":16,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"true\",\"timeout_seconds\":\"x\"}}}");
        m = recv_response(c, 16, 5000, NULL);
        ok(m && json_object_get_boolean(path(m, "result", "isError", NULL)), "bad argument type: isError result");
        ok(m && strstr(json_object_to_json_string(m), "timeout_seconds") != NULL, "message names the argument");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":17,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"true\",\"allow\":[\"example.com\"]}}}");
        m = recv_response(c, 17, 5000, NULL);
        ok(m && json_object_get_boolean(path(m, "result", "isError", NULL)) &&
                   strstr(json_object_to_json_string(m), "DEMESNE_ALLOW_CALLER_EGRESS"),
           "allow entries without the server's consent: clear refusal");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":18,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"true\",\"files\":[\"relative.txt\"]}}}");
        m = recv_response(c, 18, 5000, NULL);
        ok(m && json_object_get_boolean(path(m, "result", "isError", NULL)) &&
                   strstr(json_object_to_json_string(m), "not absolute"),
           "relative input path: clear refusal");
        json_object_put(m);

        /* Logging and progress. */
        send_line(c,
                  "{\"jsonrpc\":\"2.0\",\"id\":19,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"bogus\"}}");
        m = recv_response(c, 19, 5000, NULL);
        is_int(error_code(m), -32602, "bad log level: -32602");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":20,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"info\"}}");
        m = recv_response(c, 20, 5000, NULL);
        ok(m && path(m, "result", NULL, NULL), "logging/setLevel info accepted");
        json_object_put(m);
        json_object *notes = json_object_new_array();
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":21,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"echo a; sleep 2.5; echo b; exit "
                     "3\"},\"_meta\":{\"progressToken\":\"p1\"}}}");
        m = recv_response(c, 21, 60000, notes);
        is_int(json_object_get_int(path(m, "result", "structuredContent", "exit_code")), 3,
               "call with progress: exit 3");
        is_str(json_object_get_string(path(m, "result", "structuredContent", "stdout")), "a\nb\n", "stdout a b");
        int progress = 0, worded = 0;
        double last = 0;
        bool monotonic = true;
        for (size_t i = 0; i < json_object_array_length(notes); i++) {
                json_object *n = json_object_array_get_idx(notes, i);
                if (strcmp(json_object_get_string(path(n, "method", NULL, NULL)), "notifications/progress") == 0 &&
                    strcmp(json_object_get_string(path(n, "params", "progressToken", NULL)), "p1") == 0) {
                        double p = json_object_get_double(path(n, "params", "progress", NULL));
                        const char *msg = json_object_get_string(path(n, "params", "message", NULL));
                        long long secs, bytes;
                        char tail[16];

                        monotonic = monotonic && p > last;
                        last = p;
                        progress++;
                        /* "running for N s, B bytes of output", B the bytes so far */
                        worded += msg &&
                                  sscanf(msg, "running for %lld s, %lld bytes of %15s", &secs, &bytes, tail) == 3 &&
                                  strcmp(tail, "output") == 0 && secs >= 0 && bytes >= 0 && bytes <= 4;
                }
        }
        ok(progress >= 1, "progress notifications sent (%d)", progress);
        ok(monotonic, "progress grows");
        is_int(worded, progress, "each says how long it has run and how much output came");
        json_object_put(notes);
        json_object_put(m);

        /* Cancel an in-flight call: no response, container gone. The
         * previous call's container goes first (its removal can lag its
         * answer on a loaded machine), so the one counted next is this
         * call's. */
        t0 = dm_now_ms();
        while (containers_of(b, c->pid) > 0 && dm_now_ms() - t0 < slack_ms(30000))
                usleep(100 * 1000);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":22,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"sleep 60\"}}}");
        /* Polled, not a fixed wait: a loaded machine makes the container late. */
        t0 = dm_now_ms();
        while (containers_of(b, c->pid) < 1 && dm_now_ms() - t0 < slack_ms(30000))
                usleep(100 * 1000);
        is_int(containers_of(b, c->pid), 1, "the call's container exists while it runs");
        send_line(c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
                     "cancelled\",\"params\":{\"requestId\":22,\"reason\":\"test\"}}");
        notes = json_object_new_array();
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":23,\"method\":\"ping\"}");
        m = recv_response(c, 23, 5000, notes);
        ok(m != NULL, "server answers while cancelling");
        json_object_put(m);
        m = recv_response(c, 22, 4000, notes);
        ok(m == NULL, "a cancelled call gets no response");
        json_object_put(m);
        bool logged = false;
        for (size_t i = 0; i < json_object_array_length(notes); i++)
                if (strstr(json_object_to_json_string(json_object_array_get_idx(notes, i)), "cancelled by the client"))
                        logged = true;
        ok(logged, "notifications/message reports the cancel (logging/setLevel info)");
        json_object_put(notes);
        t0 = dm_now_ms();
        while (containers_of(b, c->pid) > 0 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        is_int(containers_of(b, c->pid), 0, "cancelled call's container removed");

        /* Modern era on the same connection: each request self-describing. */
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":30,\"method\":\"server/discover\",\"params\":{" MODERN_META "}}");
        m = recv_response(c, 30, 5000, NULL);
        v = path(m, "result", "supportedVersions", NULL);
        ok(v && strcmp(json_object_get_string(json_object_array_get_idx(v, 0)), "2026-07-28") == 0,
           "server/discover lists 2026-07-28");
        is_str(json_object_get_string(path(m, "result", "resultType", NULL)), "complete", "resultType complete");
        ok(path(m, "result", "_meta", "io.modelcontextprotocol/serverInfo") &&
                   path(m, "result", "capabilities", "tools"),
           "serverInfo (in _meta) and capabilities");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":31,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}");
        m = recv_response(c, 31, 5000, NULL);
        is_str(json_object_get_string(path(m, "result", "resultType", NULL)), "complete",
               "modern tools/list has resultType");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":32,\"method\":\"ping\",\"params\":{" MODERN_META "}}");
        m = recv_response(c, 32, 5000, NULL);
        is_int(error_code(m), -32601, "no ping in 2026-07-28");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":33,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                     "\"io.modelcontextprotocol/protocolVersion\":\"2099-01-01\",\"io.modelcontextprotocol/"
                     "clientCapabilities\":{}}}}");
        m = recv_response(c, 33, 5000, NULL);
        is_int(error_code(m), -32022, "unsupported version: -32022");
        v = path(m, "error", "data", "supported");
        ok(v && json_object_array_length(v) >= 1, "error data lists the supported versions");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":34,\"method\":\"tools/list\",\"params\":{\"_meta\":{"
                     "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}");
        m = recv_response(c, 34, 5000, NULL);
        is_int(error_code(m), -32602, "missing clientCapabilities: -32602");
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":35,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"echo hi; exit 3\"}," MODERN_META "}}");
        m = recv_response(c, 35, 60000, NULL);
        is_int(json_object_get_int(path(m, "result", "structuredContent", "exit_code")), 3,
               "modern tools/call: exit 3");
        is_str(json_object_get_string(path(m, "result", "structuredContent", "stdout")), "hi\n",
               "modern tools/call: hi");
        is_str(json_object_get_string(path(m, "result", "resultType", NULL)), "complete",
               "modern tools/call resultType");
        json_object_put(m);

        /* stdin EOF during a call: the container goes, the server exits
         * without waiting for the command's hour. */
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":40,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"sleep 3600\"}}}");
        usleep(1500 * 1000);
        pid_t pid = c->pid;
        t0 = dm_now_ms();
        int code = finish(c, 120000);
        is_int(code, 0, "stdin EOF: clean exit");
        ok(dm_now_ms() - t0 < slack_ms(120000), "without waiting for the command (%lld ms)",
           (long long)(dm_now_ms() - t0));
        is_int(containers_of(b, pid), 0, "no container left after EOF");

        /* SIGTERM during a call. */
        spawn(c, NULL);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":50,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"sleep 3600\"}," MODERN_META "}}");
        t0 = dm_now_ms();
        while (containers_of(b, c->pid) < 1 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        diag("container appeared after %lld ms", (long long)(dm_now_ms() - t0));
        is_int(containers_of(b, c->pid), 1, "container running before SIGTERM");
        pid = c->pid;
        t0 = dm_now_ms();
        kill(pid, SIGTERM);
        int status;
        while (waitpid(pid, &status, WNOHANG) == 0 && dm_now_ms() - t0 < slack_ms(120000))
                usleep(20000);
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "SIGTERM: clean exit");
        ok(dm_now_ms() - t0 < slack_ms(120000), "without waiting for the command (%lld ms)",
           (long long)(dm_now_ms() - t0));
        is_int(containers_of(b, pid), 0, "no container left after SIGTERM");
        close(c->in);
        close(c->out);

        /* kill -9 mid-run: the container outlives its server; the next
         * server removes it once it talks to the engine, and the killed
         * run's output directory stays. */
        spawn(c, NULL);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":60,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"echo before-kill; sleep 60\"}}}");
        char logs[PATH_MAX + 64];
        snprintf(logs, sizeof(logs), "grep -rlx before-kill '%s/out' >/dev/null 2>&1", test_root);
        t0 = dm_now_ms();
        while (system(logs) != 0 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        pid = c->pid;
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        close(c->in);
        close(c->out);
        is_int(containers_of(b, pid), 1, "after kill -9 the run's container is still there");
        spawn(c, NULL);
        t0 = dm_now_ms();
        while (containers_of(b, pid) > 0 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        is_int(containers_of(b, pid), 0, "a new server removes the dead server's container at start, before any call");
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":61,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"true\"}}}");
        m = recv_response(c, 61, 60000, NULL);
        ok(m && json_object_get_int(path(m, "result", "structuredContent", "exit_code")) == 0, "and then runs calls");
        json_object_put(m);
        is_int(system(logs), 0, "the killed run's stdout.log is intact");
        is_int(finish(c, 15000), 0, "the new server exits cleanly");

        dm_backend_free(b);
        free(c);
        dm_remove_tree(test_root);
        return done_testing();
}
