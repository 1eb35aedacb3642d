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
 * with optional "max_message" (bytes of one answer), "timeout_seconds"
 * (of one call) and, for command servers, "user" (run it as that user;
 * demesne must be root) per server. */

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
        char **env;          /* "K=V": with PATH, HOME, LANG, TZ, the server's whole environment; never NULL */
        char *user;          /* stdio: run as this user (demesne must be root); NULL: as demesne */
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

/* The environment a stdio server gets: spec's env entries, then PATH,
 * HOME, LANG and TZ from environ where set and not named by spec
 * (home_env, "HOME=...", instead of environ's HOME when not NULL). Nothing else of demesne's environment.
 * A new NULL-terminated array of borrowed strings (free only the array),
 * or NULL when out of memory. */
char **dm_mcpclient_env(const struct dm_mcpclient_spec *spec, char *const *environ_, const char *home_env);

/* Restarts of a stdio server, spaced. A server that fails to start or to
 * answer initialize waits 0.5 s, then doubling to 30 s, before it is
 * started again; a server that gave one call a bad answer (or died during
 * it) is started again after 0.5 s, and its delay is not doubled, so that
 * a caller cannot keep it from the others. A server that ran
 * DM_MCPCLIENT_HEALTHY_MS before it failed starts from 0.5 s again. */
#define DM_MCPCLIENT_BACKOFF_MIN_MS 500
#define DM_MCPCLIENT_BACKOFF_MAX_MS 30000
#define DM_MCPCLIENT_HEALTHY_MS 60000
struct dm_mcpclient_backoff {
        int64_t delay_ms; /* the last doubled delay; 0: none yet */
};
/* A failure ran_ms after the last start (by_answer: in a call's answer):
 * the delay before the server may start again. */
int64_t dm_mcpclient_backoff_failed(struct dm_mcpclient_backoff *b, int64_t ran_ms, bool by_answer);

/* Whether args (a JSON object, or NULL for none) fit schema, a tool's
 * inputSchema, in the subset tool schemas use: type (a name or an array
 * of names; "integer" and "number" distinguished), properties, required,
 * additionalProperties (false, or a schema), items, enum. Unknown keywords
 * are ignored. 0, or -EINVAL with err naming the member ("argument
 * 'a.b[2]': must be a string"); nesting deeper than 32 is refused. */
int dm_mcpclient_check_args(json_object *schema, json_object *args, struct dm_error *err);

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
 * to one server go one at a time: a request waiting for its turn waits
 * within its timeout and ends at once when cancel fires. A stdio server
 * that died, or was ended after a fault, is started again on a later
 * request, after the backoff (dm_mcpclient_backoff_failed): a request
 * that comes sooner waits for it, or fails with -EAGAIN when the wait is
 * longer than its timeout. */
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
