/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "src/mcp/jsonrpc.h"
#include "tests/tap.h"

static enum dm_rpc_kind kind_of(const char *s, int *code)
{
        struct dm_rpc_msg m;
        enum dm_rpc_kind k;

        dm_rpc_parse(s, strlen(s), &m);
        k = m.kind;
        if (code)
                *code = m.error_code;
        dm_rpc_msg_release(&m);
        return k;
}

int main(void)
{
        struct dm_rpc_msg m;
        int code;

        dm_rpc_parse("{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":{}}", 59, &m);
        is_int(m.kind, DM_RPC_REQUEST, "request recognised");
        is_str(m.method, "tools/list", "method");
        is_int(json_object_get_int(m.id), 7, "integer id");
        dm_rpc_msg_release(&m);

        is_int(kind_of("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", NULL), DM_RPC_NOTIFICATION,
               "notification without id");
        is_int(kind_of("{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}", NULL), DM_RPC_RESPONSE, "response");

        is_int(kind_of("{not json", &code), DM_RPC_INVALID, "malformed JSON invalid");
        is_int(code, DM_RPC_PARSE_ERROR, "malformed JSON gives -32700");
        kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"} trailing", &code);
        is_int(code, DM_RPC_PARSE_ERROR, "trailing garbage gives -32700");
        kind_of("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]", &code);
        is_int(code, DM_RPC_INVALID_REQUEST, "batch gives -32600");
        kind_of("42", &code);
        is_int(code, DM_RPC_INVALID_REQUEST, "non-object gives -32600");
        kind_of("{\"jsonrpc\":\"1.0\",\"id\":1,\"method\":\"ping\"}", &code);
        is_int(code, DM_RPC_INVALID_REQUEST, "wrong jsonrpc version gives -32600");
        kind_of("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", &code);
        is_int(code, DM_RPC_INVALID_REQUEST, "object id gives -32600");
        kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", &code);
        is_int(code, DM_RPC_INVALID_REQUEST, "non-string method gives -32600");
        kind_of("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":[1]}", &code);
        is_int(code, DM_RPC_INVALID_PARAMS, "array params gives -32602");

        /* Deep nesting is refused without recursing the stack away. */
        char deep[4096];
        size_t n = 0;
        for (int i = 0; i < 2000; i++)
                deep[n++] = '[';
        deep[n] = '\0';
        kind_of(deep, &code);
        is_int(code, DM_RPC_PARSE_ERROR, "2000-deep nesting refused");

        /* An id survives on shape errors so the error can be matched. */
        dm_rpc_parse("{\"jsonrpc\":\"2.0\",\"id\":9}", 24, &m);
        ok(m.kind == DM_RPC_INVALID && m.id && json_object_get_int(m.id) == 9, "id kept on a request without method");
        dm_rpc_msg_release(&m);

        json_object *id = json_object_new_int(3);
        json_object *e = dm_rpc_error(id, -32601, "method not found", NULL);
        size_t len;
        char *s = dm_rpc_serialize(e, &len);
        is_str(s, "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32601,\"message\":\"method not found\"}}",
               "error serialised on one line");
        free(s);
        json_object_put(e);
        json_object *r = dm_rpc_result(id, json_object_new_string("a\nb/c"));
        s = dm_rpc_serialize(r, &len);
        ok(strchr(s, '\n') == NULL && strstr(s, "b/c") != NULL, "newlines escaped, slashes not: %s", s);
        free(s);
        json_object_put(r);
        json_object_put(id);
        return done_testing();
}
