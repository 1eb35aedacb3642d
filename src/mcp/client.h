/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_CLIENT_H
#define DM_MCP_CLIENT_H

/* An MCP client for other MCP servers: a child process speaking JSON-RPC
 * lines on stdin/stdout (stdio), or a Streamable HTTP endpoint (POST, a
 * JSON or SSE answer, Mcp-Session-Id kept). It knows nothing of sandboxes;
 * src/tools/hostmcp.c offers what it finds to nested callers.
 *
 * Its servers are listed in a file shaped like an MCP client's own
 * configuration (client-config.c):
 *   {"mcpServers": {"<name>": {"command": "...", "args": [...], "env": {...},
 *                              "tools": ["<tool>", ...]},
 *                   "<name>": {"url": "http://...", "headers": {...}, "tools": [...]}}}
 * with optional "max_message" (bytes of one answer) and "timeout_seconds"
 * (of one call) per server. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/basic/cancel.h"
#include "src/basic/error.h"

/* Names of servers and tools: [A-Za-z0-9_-], 1 to this many bytes. */
#define DM_MCPCLIENT_NAME_MAX 64
#define DM_MCPCLIENT_MAX_MESSAGE (4 << 20)
#define DM_MCPCLIENT_TIMEOUT_MS 60000

struct dm_mcpclient_spec {
        char *name;
        char *command;       /* stdio: the program, searched in PATH; NULL for url */
        char **args;         /* NULL-terminated, never NULL */
        char **env;          /* "K=V" added to the server's environment, NULL-terminated, never NULL */
        char *url;           /* Streamable HTTP (http:// or https://); NULL for command */
        char **headers;      /* "Name: value" sent with every request, NULL-terminated, never NULL */
        char **tools;        /* the operator's allowlist, NULL-terminated, never NULL */
        int64_t max_message; /* bytes of one message from the server; 0 = DM_MCPCLIENT_MAX_MESSAGE */
        int64_t timeout_ms;  /* one request; 0 = DM_MCPCLIENT_TIMEOUT_MS */
};

struct dm_mcpclient_config {
        struct dm_mcpclient_spec *servers;
        size_t n;
};

/* Reads and checks the file at path (a regular file, at most 1 MiB). Every
 * error is one line naming path and, where it is about one, the entry:
 * "<path>: not JSON: ...", "<path>: server 'fs': has both command and url",
 * ... 0 or -EINVAL (bad content), -errno (unreadable), with err set. */
int dm_mcpclient_config_load(const char *path, struct dm_mcpclient_config *ret, struct dm_error *err);
/* The same for text already read; path only names it in messages. */
int dm_mcpclient_config_parse(const char *path, const char *text, size_t len, struct dm_mcpclient_config *ret,
                              struct dm_error *err);
void dm_mcpclient_config_release(struct dm_mcpclient_config *cfg);
/* Whether s is 1..DM_MCPCLIENT_NAME_MAX bytes of [A-Za-z0-9_-]. */
bool dm_mcpclient_name_ok(const char *s);

struct dm_mcpclient;

/* Starts (stdio) or reaches (HTTP) the server of spec (borrowed: it must
 * outlive the client) and
 * initializes a session: initialize, then notifications/initialized.
 * Answers over max_message bytes are errors; each request waits at most
 * timeout_ms. A stdio server's stderr lines go to the log, prefixed with
 * its name. 0 and *ret, or a negative errno with err naming the server. */
int dm_mcpclient_open(const struct dm_mcpclient_spec *spec, struct dm_mcpclient **ret, struct dm_error *err);

/* Sends one request and waits for its answer: 0 and *ret_result (the
 * "result" member, owned by the caller); -EREMOTEIO with err holding the
 * server's own error message when it answered with a JSON-RPC error;
 * -ECANCELED when cancel (may be NULL) fired, -ETIMEDOUT, -E2BIG (an answer
 * over max_message), -EPROTO (malformed JSON, an answer to an id it was not
 * asked), -EPIPE (the server is gone) with err naming the server. Requests
 * to one server go one at a time. A stdio server that died is started
 * again once, on the next request. */
int dm_mcpclient_request(struct dm_mcpclient *c, const char *method, json_object *params, struct dm_cancel *cancel,
                         json_object **ret_result, struct dm_error *err);

/* tools/list, every page (nextCursor followed, at most 100 pages): a new
 * array of the server's tool objects. */
int dm_mcpclient_list_tools(struct dm_mcpclient *c, json_object **ret_tools, struct dm_error *err);

/* The name of its server (spec's). */
const char *dm_mcpclient_name(const struct dm_mcpclient *c);

/* Ends the session: a stdio server's stdin is closed, then SIGTERM after a
 * short grace, then SIGKILL, and it is reaped; an HTTP session is DELETEd.
 * Accepts NULL. */
void dm_mcpclient_free(struct dm_mcpclient *c);

#endif
