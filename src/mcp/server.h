/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_SERVER_H
#define DM_MCP_SERVER_H

/* The MCP server, independent of transport. A transport hands it whole
 * messages and gives it a way to send; the server answers requests, runs
 * tools/call on worker threads (so the reader keeps reading and can see
 * notifications/cancelled), and speaks both protocol eras:
 *   legacy  - initialize (2025-06-18, 2025-11-25), a session per connection;
 *   modern  - 2026-07-28, every request self-describing through _meta. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "src/basic/error.h"
#include "src/basic/log.h"
#include "src/basic/principal.h"

#define DM_MCP_MODERN_VERSION "2026-07-28"
#define DM_MCP_LATEST_LEGACY_VERSION "2025-11-25"

struct dm_mcp_server;
struct dm_mcp_session;
struct dm_call;

/* A transport's way to send one message. Must be thread-safe; borrows msg.
 * A negative return means the peer is gone. */
typedef int (*dm_mcp_send_fn)(void *transport, json_object *msg);

/* Resources the application serves beside the skills (demesne's run
 * outputs), for one principal's session. list and templates return new
 * arrays; read fills *ret with a contents array, or returns -ENOENT (no such
 * resource for this principal), -ENOMEM or another negative errno with err
 * set. */
struct dm_mcp_resource_ops {
        json_object *(*list)(void *data, const char *principal);
        json_object *(*templates)(void *data);
        int (*read)(void *data, const char *principal, const char *uri, json_object **ret, struct dm_error *err);
};

/* app is what tool handlers get back through dm_call_app (borrowed);
 * registry the tools tools/list, tools/call and initialize's instructions
 * come from (borrowed: it must outlive the server, and its tools are added
 * before the first session); skills_dir the setting dm_skills_dir resolves
 * (may be NULL). The server forwards log records to its sessions through a
 * log sink of its own (dm_log_hook_add), removed by dm_mcp_server_free. */
struct dm_registry;
struct dm_mcp_server *dm_mcp_server_new(void *app, struct dm_registry *registry, const char *skills_dir);
/* Serves ops' resources (borrowed, with data) after the skills'. Call
 * before the first session. */
void dm_mcp_server_set_resources(struct dm_mcp_server *srv, const struct dm_mcp_resource_ops *ops, void *data);
/* The tasks extension (SEP-2663, io.modelcontextprotocol/tasks), served by
 * the application (demesne's tasks are its background jobs, src/tools/
 * tasks.c). With ops set, the server advertises the extension and answers
 * tasks/get, tasks/update and tasks/cancel; a tools/call of a tool that
 * supports (true) from a request that declared the extension (its _meta
 * clientCapabilities, or the session's initialize) goes to call instead of
 * the tool's handler: it returns a CallToolResult, or a CreateTaskResult
 * (resultType "task", kept as it is), or NULL (cancelled). get fills *ret
 * with the task as tasks/get shows it (without resultType); get and cancel
 * return -ENOENT for a task principal may not see (unknown and another's
 * alike), with err set. Call before the first session. */
#define DM_MCP_TASKS_EXTENSION "io.modelcontextprotocol/tasks"
struct dm_tool;
struct dm_mcp_task_ops {
        bool (*supports)(void *data, const struct dm_tool *tool);
        json_object *(*call)(void *data, struct dm_call *call, json_object *args);
        int (*get)(void *data, const char *principal, const char *task_id, json_object **ret, struct dm_error *err);
        int (*cancel)(void *data, const char *principal, const char *task_id, struct dm_error *err);
};
void dm_mcp_server_set_tasks(struct dm_mcp_server *srv, const struct dm_mcp_task_ops *ops, void *data);
/* Stops forwarding the server's log records to sessions (logging/setLevel
 * still answers; a job's own end notice still reaches its session): for a
 * server with several principals, whose log tells of all of them. */
void dm_mcp_server_set_private_logs(struct dm_mcp_server *srv);
/* Cancels every call in flight and waits for their threads. */
void dm_mcp_server_shutdown(struct dm_mcp_server *srv);
void dm_mcp_server_free(struct dm_mcp_server *srv);

struct dm_mcp_session *dm_mcp_session_new(struct dm_mcp_server *srv, dm_mcp_send_fn send, void *transport);
/* Cancels the session's calls, waits for them, frees it. */
void dm_mcp_session_free(struct dm_mcp_session *s);

/* Who the session acts for: the name of the HTTP bearer token its requests
 * carry ("local" on stdio, the default). What a call makes (a run's output
 * files, served as resources) can be read only by calls of the same
 * principal. Set once, before the session handles a message; copied. */
#define DM_MCP_PRINCIPAL_MAX DM_PRINCIPAL_MAX
void dm_mcp_session_set_principal(struct dm_mcp_session *s, const char *principal);

/* Handles one raw message (a stdio line or an HTTP body). Replies go out
 * through the session's send function, possibly later and from another
 * thread. */
void dm_mcp_session_handle(struct dm_mcp_session *s, const char *data, size_t len);

/* For the transport: answer a message it refused before parsing (too large). */
void dm_mcp_session_send_error(struct dm_mcp_session *s, int code, const char *message);

/* What a tool handler may ask of its call. */
void *dm_call_app(struct dm_call *call);
struct dm_cancel *dm_call_cancel(struct dm_call *call);
/* Sends notifications/progress when the caller gave a progressToken;
 * progress must grow from call to call. */
void dm_call_progress(struct dm_call *call, double progress, double total, const char *message);
/* A progress notification carrying only news (an image build's line): at
 * most two a second, the rest dropped. Later dm_call_progress values are
 * counted on from it, so progress still only grows. */
void dm_call_note(struct dm_call *call, const char *message);

/* Jobs outlive the call that started them; they name its session by id and
 * notify it later, if it still exists (-ENOENT otherwise). level filters
 * by the session's logging/setLevel. Takes ownership of params. */
struct dm_mcp_server *dm_call_server(struct dm_call *call);
uint64_t dm_call_session_id(struct dm_call *call);
/* The tool the call is for (the registry's; its data is the family's). */
struct dm_tool;
const struct dm_tool *dm_call_tool(struct dm_call *call);
/* The principal of the call's session (never NULL). */
const char *dm_call_principal(struct dm_call *call);
/* Asking the person at the client before a call gets more than the
 * operator allows (MCP elicitation, src/mcp/server-ask.c). message says what is
 * asked (the facts); key names the question (letters, under 64 bytes). The
 * client is asked to allow once or refuse:
 *   2025-11-25  an elicitation/create request on the call's stream, when the
 *               session's initialize declared capabilities.elicitation;
 *               the call's thread waits for the answer, at most the
 *               server's ask timeout, or until the call is cancelled;
 *   2026-07-28  when the request's _meta declares elicitation: the answer
 *               the retry carries (inputResponses[key] with a requestState
 *               this server issued for this call), else DM_ASK_PENDING: the
 *               tool answers as if refused and the server sends the
 *               input_required result instead.
 * A session of a nested caller (a sandbox) is never asked. Never fails:
 * anything that is not an answer is DM_ASK_NO_ANSWER. */
enum dm_ask_answer {
        DM_ASK_NO_ANSWER = 0, /* off, no capability, timed out, malformed, a nested caller */
        DM_ASK_ALLOW,         /* accepted, "allow": this call alone proceeds */
        DM_ASK_REFUSE,        /* declined, or accepted with "refuse" */
        DM_ASK_CANCEL,        /* the person dismissed the question */
        DM_ASK_PENDING,       /* 2026-07-28: the result becomes input_required */
};
/* A question's request id: the prefix, a number, DM_MCP_ASK_FOR and the
 * JSON text of the asking call's id (the HTTP transport routes on it). */
#define DM_MCP_ASK_ID_PREFIX "demesne-ask-"
#define DM_MCP_ASK_FOR " for "
enum dm_ask_answer dm_call_ask(struct dm_call *call, const char *key, const char *message);
/* For a nested caller's call (a sandbox's, never asked itself): asks the
 * host's session session_id instead, with a 2025-11-25 elicitation/create
 * on that session's own stream, waiting as dm_call_ask does; a session
 * that is gone, of a nested caller, or without elicitation is no answer. */
enum dm_ask_answer dm_call_ask_host(struct dm_call *call, uint64_t session_id, const char *key, const char *message);
const char *dm_ask_answer_name(enum dm_ask_answer a);
/* How long a 2025-11-25 question waits for its answer, and a 2026-07-28
 * requestState stays good; 0 (the default): never ask. Call before the
 * first session. */
void dm_mcp_server_set_ask_timeout(struct dm_mcp_server *srv, int timeout_ms);
int dm_mcp_server_notify(struct dm_mcp_server *srv, uint64_t session_id, enum dm_log_level level, const char *method,
                         json_object *params);

#endif
