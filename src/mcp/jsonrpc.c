/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/mcp/jsonrpc.h"

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* Nesting deeper than this is no MCP message: refuse before json-c recurses. */
#define MAX_DEPTH 64

static void invalid(struct dm_rpc_msg *m, int code, const char *message)
{
        m->kind = DM_RPC_INVALID;
        m->error_code = code;
        m->error_message = message;
}

static bool valid_id(json_object *id)
{
        json_type t = json_object_get_type(id);
        return t == json_type_string || t == json_type_int;
}

void dm_rpc_parse(const char *data, size_t len, struct dm_rpc_msg *m)
{
        json_tokener *tok;
        json_object *v, *result, *error;
        enum json_tokener_error jerr;

        memset(m, 0, sizeof(*m));
        if (len > INT_MAX) {
                invalid(m, DM_RPC_INVALID_REQUEST, "message too large");
                return;
        }
        tok = json_tokener_new_ex(MAX_DEPTH);
        if (!tok) {
                invalid(m, DM_RPC_INTERNAL_ERROR, "out of memory");
                return;
        }
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
        m->root = json_tokener_parse_ex(tok, data, (int)len);
        jerr = json_tokener_get_error(tok);
        if (!m->root && jerr == json_tokener_continue) {
                /* A bare number may still be growing: a NUL byte ends it. */
                m->root = json_tokener_parse_ex(tok, "", 1);
                jerr = json_tokener_get_error(tok);
                len = 0; /* nothing of data is left to check */
        }
        if (m->root && jerr == json_tokener_success) {
                /* Only whitespace may follow the value. */
                size_t off = json_tokener_get_parse_end(tok);
                for (; off < len; off++)
                        if (!strchr(" \t\r\n", data[off])) {
                                jerr = json_tokener_error_parse_unexpected;
                                break;
                        }
        }
        json_tokener_free(tok);
        if (!m->root || jerr != json_tokener_success) {
                json_object_put(m->root);
                m->root = NULL;
                invalid(m, DM_RPC_PARSE_ERROR, "parse error: the message is not valid JSON");
                return;
        }
        if (json_object_is_type(m->root, json_type_array)) {
                invalid(m, DM_RPC_INVALID_REQUEST, "invalid request: JSON-RPC batches are not supported");
                return;
        }
        if (!json_object_is_type(m->root, json_type_object)) {
                invalid(m, DM_RPC_INVALID_REQUEST, "invalid request: a message must be a JSON object");
                return;
        }
        if (json_object_object_get_ex(m->root, "id", &v)) {
                if (!valid_id(v)) {
                        invalid(m, DM_RPC_INVALID_REQUEST, "invalid request: id must be a string or an integer");
                        return;
                }
                m->id = v;
        }
        if (!json_object_object_get_ex(m->root, "jsonrpc", &v) || !json_object_is_type(v, json_type_string) ||
            strcmp(json_object_get_string(v), "2.0") != 0) {
                invalid(m, DM_RPC_INVALID_REQUEST, "invalid request: \"jsonrpc\" must be \"2.0\"");
                return;
        }
        if (json_object_object_get_ex(m->root, "method", &v)) {
                if (!json_object_is_type(v, json_type_string)) {
                        invalid(m, DM_RPC_INVALID_REQUEST, "invalid request: method must be a string");
                        return;
                }
                m->method = json_object_get_string(v);
                if (json_object_object_get_ex(m->root, "params", &v) && v) {
                        if (!json_object_is_type(v, json_type_object)) {
                                invalid(m, DM_RPC_INVALID_PARAMS, "invalid params: params must be an object");
                                return;
                        }
                        m->params = v;
                }
                m->kind = m->id ? DM_RPC_REQUEST : DM_RPC_NOTIFICATION;
                return;
        }
        if (m->id && (json_object_object_get_ex(m->root, "result", &result) ||
                      json_object_object_get_ex(m->root, "error", &error))) {
                m->kind = DM_RPC_RESPONSE;
                return;
        }
        invalid(m, DM_RPC_INVALID_REQUEST, "invalid request: no method");
}

void dm_rpc_msg_release(struct dm_rpc_msg *m)
{
        json_object_put(m->root);
        memset(m, 0, sizeof(*m));
}

static json_object *envelope(json_object *id)
{
        json_object *o = json_object_new_object();

        json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
        json_object_object_add(o, "id", id ? json_object_get(id) : NULL);
        return o;
}

json_object *dm_rpc_result(json_object *id, json_object *result)
{
        json_object *o = envelope(id);

        json_object_object_add(o, "result", result ? result : json_object_new_object());
        return o;
}

json_object *dm_rpc_error(json_object *id, int code, const char *message, json_object *data)
{
        json_object *o = envelope(id), *e = json_object_new_object();

        json_object_object_add(e, "code", json_object_new_int(code));
        json_object_object_add(e, "message", json_object_new_string(message));
        if (data)
                json_object_object_add(e, "data", data);
        json_object_object_add(o, "error", e);
        return o;
}

json_object *dm_rpc_notification(const char *method, json_object *params)
{
        json_object *o = json_object_new_object();

        json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
        json_object_object_add(o, "method", json_object_new_string(method));
        if (params)
                json_object_object_add(o, "params", params);
        return o;
}

char *dm_rpc_serialize(json_object *msg, size_t *ret_len)
{
        size_t len;
        /* PLAIN never emits newlines; NOSLASHESCAPE keeps paths readable. */
        const char *s =
                json_object_to_json_string_length(msg, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
        char *copy = s ? malloc(len + 1) : NULL;

        if (!copy)
                return NULL;
        memcpy(copy, s, len + 1);
        if (ret_len)
                *ret_len = len;
        return copy;
}
