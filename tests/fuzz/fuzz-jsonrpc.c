/* SPDX-License-Identifier: MIT */
/* libFuzzer target for MCP messages: the JSON-RPC parser (src/mcp/jsonrpc.c)
 * and the server's dispatch (src/mcp/server.c) on a session of its own, as
 * far as it runs without an engine: initialize, ping, logging/setLevel,
 * tools/list with cursors, server/discover, notifications, malformed
 * messages, batches (refused), both protocol eras' _meta, and tools/call
 * with the real tools' names but a stand-in handler (it sends progress and
 * answers at once, so no container is ever made).
 *
 * Input: newline-separated messages, handled in order on one session, as
 * the stdio transport hands lines over. Every message the server sends must
 * be one line of JSON-RPC 2.0; a request or a malformed message gets
 * exactly one answer at once (a tool call's may come later from its
 * thread), a notification or a response none. */
#include "config.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "src/core/context.h"
#include "src/mcp/jsonrpc.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/tools/tools.h"
#include "src/basic/log.h"
#include "tests/fuzz/fuzz.h"

#define MAX_LINES 32

static struct dm_context ctx;
static struct dm_mcp_server *srv;
/* real: the families' registry, whose strings tools[] borrows; served: the
 * same tools with the stand-in handler. Both live as long as the process. */
static struct dm_registry *real, *served;
static struct dm_tool tools[64];
static pthread_t main_thread;
static atomic_int sync_answers;

static json_object *stand_in(struct dm_call *call, json_object *args)
{
        dm_call_progress(call, 1, 2, "halfway");
        dm_call_note(call, "a note");
        dm_call_progress(call, 2, 2, NULL);
        FUZZ_CHECK(!args || json_object_is_type(args, json_type_object));
        return args && json_object_object_length(args) > 2
                       ? dm_tool_result_error("stand-in refuses %d arguments", json_object_object_length(args))
                       : dm_tool_result_ok(json_object_new_object());
}

/* What the client reads back is the same document as the message sent.
 * tools/list's answer is the one exception, by design (src/mcp/server.c,
 * tools_page): its "tools" is a print-only array with no elements of its
 * own, printed as the registry's cached texts (tests/unit/test-registry
 * checks each against the tool's description). There every other member
 * must match, and what is read back must be an array of named tools. */
static bool same_document(json_object *again, json_object *msg)
{
        json_object *res, *res_again, *list, *list_again, *w;

        if (json_object_equal(again, msg))
                return true;
        if (!json_object_object_get_ex(msg, "result", &res) || !json_object_object_get_ex(res, "tools", &list) ||
            !json_object_is_type(list, json_type_array) || json_object_array_length(list) != 0 ||
            !json_object_get_userdata(list))
                return false;
        if (!json_object_object_get_ex(again, "result", &res_again) ||
            !json_object_object_get_ex(res_again, "tools", &list_again) ||
            !json_object_is_type(list_again, json_type_array) ||
            json_object_object_length(again) != json_object_object_length(msg) ||
            json_object_object_length(res_again) != json_object_object_length(res))
                return false;
        for (size_t i = 0; i < json_object_array_length(list_again); i++)
                if (!json_object_object_get_ex(json_object_array_get_idx(list_again, i), "name", &w) ||
                    !json_object_is_type(w, json_type_string))
                        return false;
        json_object_object_foreach(msg, key, val)
        {
                if (strcmp(key, "result") != 0 &&
                    (!json_object_object_get_ex(again, key, &w) || !json_object_equal(val, w)))
                        return false;
        }
        json_object_object_foreach(res, rkey, rval)
        {
                if (strcmp(rkey, "tools") != 0 &&
                    (!json_object_object_get_ex(res_again, rkey, &w) || !json_object_equal(rval, w)))
                        return false;
        }
        return true;
}

static int on_send(void *transport, json_object *msg)
{
        json_object *v;
        size_t len = 0;
        char *line = dm_rpc_serialize(msg, &len);
        bool answer;

        (void)transport;
        FUZZ_CHECK(line && strlen(line) == len && !memchr(line, '\n', len));
        FUZZ_CHECK(json_object_is_type(msg, json_type_object));
        FUZZ_CHECK(json_object_object_get_ex(msg, "jsonrpc", &v) && strcmp(json_object_get_string(v), "2.0") == 0);
        answer = json_object_object_get_ex(msg, "id", &v);
        if (answer) {
                json_object *result, *error;
                bool has_result = json_object_object_get_ex(msg, "result", &result),
                     has_error = json_object_object_get_ex(msg, "error", &error);

                FUZZ_CHECK(has_result != has_error);
                FUZZ_CHECK(!v || json_object_is_type(v, json_type_string) || json_object_is_type(v, json_type_int));
                if (has_error) {
                        FUZZ_CHECK(json_object_object_get_ex(error, "code", &v) &&
                                   json_object_is_type(v, json_type_int));
                        FUZZ_CHECK(json_object_object_get_ex(error, "message", &v) &&
                                   json_object_is_type(v, json_type_string));
                }
                if (pthread_equal(pthread_self(), main_thread))
                        atomic_fetch_add(&sync_answers, 1);
        } else {
                FUZZ_CHECK(json_object_object_get_ex(msg, "method", &v) && json_object_is_type(v, json_type_string));
        }
        /* What the client reads back is the same document. */
        json_object *again = json_tokener_parse(line);
        FUZZ_CHECK(again && same_document(again, msg));
        json_object_put(again);
        free(line);
        return 0;
}

static void setup(void)
{
        size_t n;

        main_thread = pthread_self();
        /* The info lines (a cancelled call) would cost more than the call:
         * warnings and errors still reach stderr and the log hook. */
        dm_log_set_level(DM_LOG_WARNING);
        /* The real tools' names and schemas, with the stand-in handler. */
        real = dm_registry_new();
        served = dm_registry_new();
        FUZZ_CHECK(real && served);
        dm_tools_configure(NULL, real);
        n = dm_registry_count(real);
        FUZZ_CHECK(n > 0 && n <= sizeof(tools) / sizeof(tools[0]));
        for (size_t i = 0; i < n; i++) {
                tools[i] = *dm_registry_at(real, i);
                tools[i].handler = stand_in;
        }
        dm_registry_add(served, tools, n);
        srv = dm_tools_mcp_new(&ctx, served);
        FUZZ_CHECK(srv);
}

/* How many answers the server must send at once for this message. */
static int answers_due(const char *line, size_t len, bool *ret_call)
{
        struct dm_rpc_msg m;
        int due;

        dm_rpc_parse(line, len, &m);
        *ret_call = false;
        switch (m.kind) {
        case DM_RPC_INVALID:
                FUZZ_CHECK(m.error_code < 0 && m.error_message);
                due = 1;
                break;
        case DM_RPC_REQUEST:
                FUZZ_CHECK(m.id && m.method && m.root);
                *ret_call = strcmp(m.method, "tools/call") == 0;
                due = 1;
                break;
        case DM_RPC_NOTIFICATION:
                FUZZ_CHECK(!m.id && m.method);
                due = 0;
                break;
        default:
                FUZZ_CHECK(m.kind == DM_RPC_RESPONSE && m.id);
                due = 0;
                break;
        }
        dm_rpc_msg_release(&m);
        return due;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *p = (const char *)data, *end = p + size;
        struct dm_mcp_session *s;

        if (!srv)
                setup();
        s = dm_mcp_session_new(srv, on_send, NULL);
        FUZZ_CHECK(s);
        for (int i = 0; i < MAX_LINES && p < end; i++) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
                bool call;
                int due = answers_due(p, len, &call);

                atomic_store(&sync_answers, 0);
                dm_mcp_session_handle(s, p, len);
                /* A tool call answers from its thread unless refused at once. */
                if (call)
                        FUZZ_CHECK(atomic_load(&sync_answers) <= 1);
                else
                        FUZZ_CHECK(atomic_load(&sync_answers) == due);
                p += len + 1;
        }
        dm_mcp_session_free(s);
        return 0;
}
