/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_SERVER_INTERNAL_H
#define DM_MCP_SERVER_INTERNAL_H

/* What the server's files share (server.c, server-tasks.c): the session
 * and call types and the sending helpers. Nothing outside src/mcp includes
 * this. */

#include <pthread.h>

#include "src/mcp/server.h"
#include "src/basic/cancel.h"
#include "src/mcp/jsonrpc.h"

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_INFO "io.modelcontextprotocol/clientInfo"

/* A 2026-07-28 question this server asked (an input_required result): the
 * requestState the retry must bring back, and what it was for. */
#define DM_MCP_ASK_STATES 64
#define DM_MCP_ASK_TOKEN_MAX 33
#define DM_MCP_ASK_KEY_MAX 64
#define DM_MCP_ASK_ID_MAX 256
struct dm_ask_state {
        char token[DM_MCP_ASK_TOKEN_MAX]; /* "" = a free slot */
        char key[DM_MCP_ASK_KEY_MAX];
        char principal[DM_PRINCIPAL_MAX];
        uint64_t digest; /* the call's tool and arguments */
        int64_t expires_ms;
};
struct dm_ask;

struct dm_mcp_server {
        void *app;                                 /* the tools' (borrowed) */
        struct dm_registry *registry;              /* the tools it serves (borrowed) */
        int log_handle;                            /* its log sink's, > 0; 0: none */
        const struct dm_mcp_resource_ops *res_ops; /* NULL: the skills only */
        void *res_data;
        uint64_t next_session_id;
        /* Guards sessions and their call lists. Never log while holding it:
         * the log hook takes it to find the sessions that want records. */
        pthread_mutex_t lock;
        pthread_cond_t idle;
        struct dm_mcp_session *sessions;
        bool private_logs;                      /* no log records to sessions: several principals */
        struct dm_skills *skills;               /* served with the skills extension; read-only once made */
        const struct dm_mcp_task_ops *task_ops; /* NULL: no tasks extension */
        void *task_data;
        int ask_timeout_ms;   /* 0: never ask (DEMESNE_ELICIT=off) */
        uint64_t next_ask;    /* guarded by lock */
        pthread_cond_t asked; /* on srv->lock: an answer came, a call was cancelled, a session closes */
        struct dm_ask_state states[DM_MCP_ASK_STATES]; /* 2026-07-28 questions issued; guarded by lock */
};

struct dm_mcp_session {
        struct dm_mcp_server *srv;
        dm_mcp_send_fn send;
        void *transport;
        struct dm_mcp_session *next;

        /* Guarded by srv->lock. */
        char version[16]; /* negotiated legacy version, "" before initialize */
        bool initialized;
        bool log_enabled;
        enum dm_log_level log_level;
        struct dm_call *calls; /* in flight */
        int n_calls;
        bool closing;
        uint64_t id;                          /* names the session to jobs that outlive their call */
        char principal[DM_MCP_PRINCIPAL_MAX]; /* set before the first message; then read-only */
        int refs;                             /* senders outside the lock (dm_mcp_server_notify) */
        bool can_elicit;                      /* initialize declared capabilities.elicitation (form) */
        struct dm_ask *asks;                  /* questions waiting for an answer (server-ask.c) */
};

struct dm_call {
        struct dm_mcp_session *session;
        json_object *id;             /* owned reference */
        json_object *progress_token; /* owned reference, may be NULL */
        json_object *params;         /* owned reference */
        const struct dm_tool *tool;
        bool modern;
        bool task; /* the request declared tasks and the tool supports them: task_ops->call runs it */
        struct dm_cancel cancel;
        double last_progress;
        double progress_base; /* added to dm_call_progress values (after notes) */
        int64_t last_note_ms;
        json_object *input_required; /* 2026-07-28: the questions its result becomes (server-ask.c), owned */
        char request_state[DM_MCP_ASK_TOKEN_MAX];
        struct dm_call *next;
};

/* Sends msg (owned) to the session's client; a failed send means the client
 * is gone and the reader sees EOF next. */
void dm_mcp_send_msg(struct dm_mcp_session *s, json_object *msg);
/* A response with result (owned); on the modern era a result without a
 * resultType gets "complete". */
void dm_mcp_reply(struct dm_mcp_session *s, json_object *id, json_object *result, bool modern);
/* An error response; data (owned) may be NULL. */
void dm_mcp_reply_error(struct dm_mcp_session *s, json_object *id, int code, const char *message, json_object *data);
/* params._meta when it is an object, else NULL (borrowed). */
json_object *dm_mcp_get_meta(json_object *params);

/* server-tasks.c: whether this request may get a CreateTaskResult and use
 * the tasks/ methods; the tasks/get, tasks/update and tasks/cancel
 * methods themselves. */
bool dm_mcp_request_declares_tasks(struct dm_mcp_session *s, json_object *params, bool modern);
void dm_mcp_handle_tasks(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern);

/* server-ask.c: the server's part of asking (init and release with the server);
 * whether client capabilities declare form elicitation; a response from
 * the client (to a question, or to nothing: logged and ignored); a call's
 * result as the input_required result when the call asked on 2026-07-28
 * (takes result, returns what to send). */
void dm_mcp_ask_init(struct dm_mcp_server *srv);
void dm_mcp_ask_release(struct dm_mcp_server *srv);
bool dm_mcp_caps_elicit_form(json_object *caps);
void dm_mcp_ask_answer(struct dm_mcp_session *s, struct dm_rpc_msg *m);
json_object *dm_mcp_ask_result(struct dm_call *c, json_object *result);

#endif
