/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_JSONRPC_H
#define DM_MCP_JSONRPC_H

/* JSON-RPC 2.0 framing: classify one incoming message, build replies. */

#include <json-c/json.h>
#include <stddef.h>

#define DM_RPC_PARSE_ERROR -32700
#define DM_RPC_INVALID_REQUEST -32600
#define DM_RPC_METHOD_NOT_FOUND -32601
#define DM_RPC_INVALID_PARAMS -32602
#define DM_RPC_INTERNAL_ERROR -32603
/* MCP's "resource not found" before 2026-07-28 (which uses -32602, Invalid
 * Params: SEP-2164). */
#define DM_RPC_RESOURCE_NOT_FOUND (-32002)
/* 2026-07-28 */
#define DM_RPC_HEADER_MISMATCH -32020
#define DM_RPC_MISSING_CLIENT_CAPABILITY -32021
#define DM_RPC_UNSUPPORTED_PROTOCOL_VERSION -32022

enum dm_rpc_kind {
        DM_RPC_INVALID = 0, /* parse or shape error: see code/message */
        DM_RPC_REQUEST,
        DM_RPC_NOTIFICATION,
        DM_RPC_RESPONSE, /* a reply from the client to a request of ours */
};

struct dm_rpc_msg {
        enum dm_rpc_kind kind;
        json_object *root;   /* owned: the whole message */
        json_object *id;     /* borrowed from root; NULL for notifications */
        const char *method;  /* borrowed */
        json_object *params; /* borrowed, may be NULL */
        int error_code;      /* for DM_RPC_INVALID */
        const char *error_message;
};

/* Parses one message of len bytes (no NUL needed). Never fails outright: a
 * bad message comes back as DM_RPC_INVALID with the code to answer with
 * (-32700 for bad JSON, -32600 for batches and wrong shapes), and id set
 * when one could be read. */
void dm_rpc_parse(const char *data, size_t len, struct dm_rpc_msg *ret);
void dm_rpc_msg_release(struct dm_rpc_msg *msg);

/* Builders. Each takes a reference to id (NULL = JSON null) and ownership of
 * result/data. The returned object is owned by the caller. */
json_object *dm_rpc_result(json_object *id, json_object *result);
json_object *dm_rpc_error(json_object *id, int code, const char *message, json_object *data);
json_object *dm_rpc_notification(const char *method, json_object *params);

/* Serialises a message as one line (no embedded newlines), malloc'd. */
char *dm_rpc_serialize(json_object *msg, size_t *ret_len);

#endif
