/* SPDX-License-Identifier: MIT */
/* MCP over Streamable HTTP with libmicrohttpd: the daemon, the checks every
 * request passes (Host, Origin, token, size, media types), and the POST,
 * GET and DELETE handling of both protocol eras. See http.h for the shape
 * and http-internal.h for the threads and locks. */
#include "config.h"
#include "src/mcp/http.h"

#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "src/mcp/http-guard.h"
#include "src/mcp/http-internal.h"
#include "src/mcp/http-token.h"
#include "src/mcp/jsonrpc.h"
#include "src/mcp/server.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

#define ENDPOINT "/mcp"
/* Connection threads only parse and route; calls run on threads of their own. */
#define THREAD_STACK (512 * 1024)
#define CONN_MEMORY (64 * 1024)
#define STREAM_BLOCK (16 * 1024)
#define META_VERSION "io.modelcontextprotocol/protocolVersion"

static const char *const legacy_versions[] = { "2025-11-25", "2025-06-18", NULL };
/* Versions that mean the legacy wire even where we refuse them: a header
 * naming anything else is read as the 2026-07-28 (per-request) wire. */
static const char *const legacy_wire[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07", NULL };

struct http_request {
        struct http_conn *conn;
        struct dm_buf body;
        bool post;
        struct http_exchange *ex;
        const struct dm_mcphttp_token *token; /* the one its Authorization carries, in h->tokens */
        bool ui;                              /* under /ui/: the activity view answers */
        void *ui_cls;                         /* ... and keeps its own per-request state here */
};

void dm_mcphttp_options_init(struct dm_mcphttp_options *o)
{
        memset(o, 0, sizeof(*o));
        o->max_sessions = 64;
        o->max_streams = 64;
        o->max_session_streams = 16;
        /* One address holds half (the rest stay for others), which must
         * cover an SDK client's 100 calls in flight: its fetch opens up to
         * twice as many connections while calls wait. */
        o->max_connections = 512;
        o->max_connections_per_ip = 64;
        o->session_idle_s = 1800;
        o->request_timeout_s = 30;
        o->keepalive_s = 15;
}

static bool in_list(const char *v, const char *const *list)
{
        for (size_t i = 0; v && list[i]; i++)
                if (strcmp(v, list[i]) == 0)
                        return true;
        return false;
}

static const char *header(struct MHD_Connection *c, const char *name)
{
        return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* ---- responses ------------------------------------------------------------------ */

static void add_cors(struct MHD_Connection *c, struct MHD_Response *r)
{
        const char *origin = header(c, "Origin");

        /* Only reached when the Origin passed the allowlist. */
        if (origin) {
                MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
                MHD_add_response_header(r, "Access-Control-Expose-Headers", "Mcp-Session-Id");
                MHD_add_response_header(r, "Vary", "Origin");
        }
}

/* extra: name/value pairs, NULL-terminated. */
static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *ctype, const char *body,
                               size_t len, const char *const *extra)
{
        struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
        enum MHD_Result ret;

        if (!r)
                return MHD_NO;
        if (ctype)
                MHD_add_response_header(r, "Content-Type", ctype);
        MHD_add_response_header(r, "Cache-Control", "no-store");
        for (size_t i = 0; extra && extra[i] && extra[i + 1]; i += 2)
                MHD_add_response_header(r, extra[i], extra[i + 1]);
        add_cors(c, r);
        ret = MHD_queue_response(c, status, r);
        MHD_destroy_response(r);
        return ret;
}

/* A JSON-RPC error as the body of an HTTP error. id is JSON text or NULL
 * (then there is no "id" member: clients reject "id": null). */
static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, const char *id, int code,
                                     const char *const *extra, const char *fmt, ...)
        __attribute__((format(printf, 6, 7)));
static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, const char *id, int code,
                                     const char *const *extra, const char *fmt, ...)
{
        json_object *o = json_object_new_object(), *e = json_object_new_object();
        char msg[600];
        va_list ap;
        size_t len;
        enum MHD_Result ret;
        char *text;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        json_object_object_add(o, "jsonrpc", json_object_new_string("2.0"));
        if (id)
                json_object_object_add(o, "id", json_tokener_parse(id));
        json_object_object_add(e, "code", json_object_new_int(code));
        json_object_object_add(e, "message", json_object_new_string(msg));
        json_object_object_add(o, "error", e);
        text = dm_rpc_serialize(o, &len);
        json_object_put(o);
        if (!text)
                return MHD_NO;
        ret = respond(c, status, "application/json", text, len, extra);
        free(text);
        return ret;
}

/* The HTTP status of an answer: 2026-07-28 gives protocol errors their own
 * statuses (SEP-2575); the legacy wire keeps JSON-RPC errors in a 200. */
static unsigned status_for(int error_code, bool modern)
{
        switch (error_code) {
        case 0: return MHD_HTTP_OK;
        case DM_RPC_PARSE_ERROR:
        case DM_RPC_INVALID_REQUEST: return MHD_HTTP_BAD_REQUEST;
        case DM_RPC_METHOD_NOT_FOUND: return modern ? MHD_HTTP_NOT_FOUND : MHD_HTTP_OK;
        case DM_RPC_INVALID_PARAMS:
        case DM_RPC_HEADER_MISMATCH:
        case DM_RPC_MISSING_CLIENT_CAPABILITY:
        case DM_RPC_UNSUPPORTED_PROTOCOL_VERSION: return modern ? MHD_HTTP_BAD_REQUEST : MHD_HTTP_OK;
        case DM_RPC_INTERNAL_ERROR: return modern ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_OK;
        default: return MHD_HTTP_OK;
        }
}

/* ---- end of a request ----------------------------------------------------------- */

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
        struct dm_mcphttp *h = cls;
        struct http_request *rq = *con_cls;

        if (!rq)
                return;
        if (rq->ex)
                dm_mcphttp_ex_end(h, c, rq->ex, toe);
        dm_mcphttp_conn_deadline(h, rq->conn, false);
        dm_mcphttp_gate_leave(h, rq->conn);
        dm_buf_release(&rq->body);
        free(rq);
        *con_cls = NULL;
}

/* ---- answering -------------------------------------------------------------------- */

static enum MHD_Result start_stream(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_request *rq,
                                    enum stream_mode mode, const char *session_id)
{
        struct http_exchange *ex = rq->ex;
        struct MHD_Response *r;
        enum MHD_Result ret;

        dm_mcphttp_ex_set_mode(ex, mode);
        /* A stream may be quiet for minutes; the keep-alive comments and the
         * socket watch in the reader take over from the idle timeout. */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0);
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, dm_mcphttp_ex_read, ex,
                                              dm_mcphttp_ex_release_cb);
        if (!r)
                return MHD_NO;
        dm_mcphttp_ex_ref(ex);
        MHD_add_response_header(r, "Content-Type", mode == STREAM_SSE ? "text/event-stream" : "application/json");
        MHD_add_response_header(r, "Cache-Control", "no-cache, no-store");
        /* Keeps buffering proxies (nginx) from holding progress back. */
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        if (session_id)
                MHD_add_response_header(r, "Mcp-Session-Id", session_id);
        add_cors(c, r);
        (void)h;
        ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
}

static char *json_text(json_object *v)
{
        return v ? strdup(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN)) : NULL;
}

static json_object *meta_of(json_object *params)
{
        json_object *meta;

        return params && json_object_object_get_ex(params, "_meta", &meta) &&
                               json_object_is_type(meta, json_type_object)
                       ? meta
                       : NULL;
}

/* Hands one message to the MCP server and answers with what comes back:
 * 202 for a notification, JSON when the response is there at once, a
 * stream otherwise (tools/call). s is the legacy session (a reference the
 * caller keeps) or NULL for a 2026-07-28 request. */
static enum MHD_Result dispatch(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_request *rq,
                                struct dm_rpc_msg *m, struct http_session *s, bool initialize)
{
        const char *accept = header(c, "Accept");
        json_object *meta = meta_of(m->params), *tok;
        const union MHD_ConnectionInfo *info;
        struct http_exchange *ex;
        char *json;
        size_t len;
        int code, r;

        if (m->kind != DM_RPC_REQUEST) {
                /* Notifications and responses need no answer. A 2026-07-28
                 * notification has no session to act on: cancelling there
                 * is closing the request's stream. A response answers a
                 * question of the session's (src/mcp/server-ask.c). */
                if (s)
                        dm_mcp_session_handle(s->mcp, rq->body.data, rq->body.len);
                return respond(c, MHD_HTTP_ACCEPTED, NULL, "", 0, NULL);
        }

        info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        ex = dm_mcphttp_ex_new(h, info ? info->connect_fd : -1);
        if (!ex)
                return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, DM_RPC_INTERNAL_ERROR, NULL,
                                     "out of memory");
        rq->ex = ex;
        ex->id = json_text(m->id);
        if (meta && json_object_object_get_ex(meta, "progressToken", &tok))
                ex->progress_token = json_text(tok);

        if (strcmp(m->method, "tools/call") == 0 && (r = dm_mcphttp_slot_take(h, s, ex)) < 0) {
                static const char *const retry[] = { "Retry-After", "2", NULL };
                dm_mcphttp_refused(h, "tools/call %s: %s", ex->id,
                                   r == -EBUSY ? "max streams reached" : "the session's max streams reached");
                return respond_error(c, MHD_HTTP_TOO_MANY_REQUESTS, ex->id, DM_RPC_INTERNAL_ERROR, retry,
                                     "too many calls in flight (%u in the server, %u per session): retry when one ends",
                                     h->opt.max_streams, h->opt.max_session_streams);
        }
        if (s) {
                if (dm_mcphttp_session_register(s, ex) < 0) {
                        /* While the caller's reference holds: the slot names the session. */
                        dm_mcphttp_slot_put(ex);
                        dm_mcphttp_refused(h, "%s %s: the id of a request still in flight", m->method, ex->id);
                        return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                             "request id %s is in use by a request of this session still in "
                                             "flight: each request needs an id of its own",
                                             ex->id);
                }
        } else {
                ex->ephemeral = dm_mcp_session_new(h->srv, dm_mcphttp_ex_send, ex);
                if (!ex->ephemeral)
                        return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, ex->id, DM_RPC_INTERNAL_ERROR, NULL,
                                             "out of memory");
                dm_mcp_session_set_principal(ex->ephemeral, dm_mcphttp_principal_of(h, rq->token));
        }

        dm_mcp_session_handle(s ? s->mcp : ex->ephemeral, rq->body.data, rq->body.len);

        if (dm_mcphttp_ex_take_final(ex, &json, &len, &code)) {
                const char *extra[] = { "Mcp-Session-Id", s ? s->id : NULL, NULL };
                if (initialize && code == 0) {
                        if (dm_mcphttp_session_list(s) < 0) {
                                static const char *const retry[] = { "Retry-After", "10", NULL };
                                dm_mcphttp_refused(h, "initialize: %u sessions already", h->opt.max_sessions);
                                return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, ex->id, DM_RPC_INTERNAL_ERROR,
                                                     retry,
                                                     "too many sessions (%u): end one with DELETE, or wait for an "
                                                     "idle one to expire",
                                                     h->opt.max_sessions);
                        }
                        log_info("http: session %.8s... started", s->id);
                        return respond(c, MHD_HTTP_OK, "application/json", json, len, extra);
                }
                return respond(c, status_for(code, s == NULL), "application/json", json, len, NULL);
        }
        /* Still running: tools/call. SSE carries its progress; a client
         * that takes only JSON gets the result when it is there. */
        return start_stream(h, c, rq, dm_mcphttp_accepts(accept, "text/event-stream") ? STREAM_SSE : STREAM_JSON, NULL);
}

/* 2026-07-28: the headers repeat what the body says and must agree with it
 * (SEP-2243), so intermediaries can route on them. */
static const char *name_field(const char *method)
{
        static const char *const table[][2] = {
                { "tools/call", "name" },  { "prompts/get", "name" },    { "resources/read", "uri" },
                { "tasks/get", "taskId" }, { "tasks/update", "taskId" }, { "tasks/cancel", "taskId" },
        };

        for (size_t i = 0; i < DM_ARRAY_SIZE(table); i++)
                if (strcmp(method, table[i][0]) == 0)
                        return table[i][1];
        return NULL;
}

static enum MHD_Result modern_post(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_request *rq,
                                   struct dm_rpc_msg *m, const char *hv)
{
        json_object *meta = meta_of(m->params), *v;
        _cleanup_free_ char *id = json_text(m->id), *hmethod = NULL, *hname = NULL;
        const char *bv = NULL, *field, *raw;

        if (meta && json_object_object_get_ex(meta, META_VERSION, &v) && json_object_is_type(v, json_type_string))
                bv = json_object_get_string(v);
        if (!hv)
                return respond_error(c, MHD_HTTP_BAD_REQUEST, id, DM_RPC_HEADER_MISMATCH, NULL,
                                     "the MCP-Protocol-Version header is missing; the body's _meta says '%s'",
                                     bv ? bv : "(not a string)");
        if (m->kind != DM_RPC_REQUEST)
                return dispatch(h, c, rq, m, NULL, false);
        if (!meta || !json_object_object_get_ex(meta, META_VERSION, &v))
                return respond_error(c, MHD_HTTP_BAD_REQUEST, id, DM_RPC_INVALID_PARAMS, NULL,
                                     "a %s request must carry params._meta[\"" META_VERSION "\"]", hv);
        if (bv && strcmp(bv, hv) != 0)
                return respond_error(c, MHD_HTTP_BAD_REQUEST, id, DM_RPC_HEADER_MISMATCH, NULL,
                                     "header mismatch: MCP-Protocol-Version is '%s' but _meta says '%s'", hv, bv);
        raw = header(c, "Mcp-Method");
        if (!raw || dm_mcphttp_header_value(raw, &hmethod) < 0 || strcmp(hmethod, m->method) != 0)
                return respond_error(c, MHD_HTTP_BAD_REQUEST, id, DM_RPC_HEADER_MISMATCH, NULL,
                                     "header mismatch: Mcp-Method is %s%s%s but the body's method is '%s'",
                                     raw ? "'" : "", raw ? raw : "missing", raw ? "'" : "", m->method);
        field = name_field(m->method);
        if (field) {
                const char *bname = m->params && json_object_object_get_ex(m->params, field, &v) &&
                                                    json_object_is_type(v, json_type_string)
                                            ? json_object_get_string(v)
                                            : NULL;
                raw = header(c, "Mcp-Name");
                if (raw && dm_mcphttp_header_value(raw, &hname) < 0)
                        return respond_error(c, MHD_HTTP_BAD_REQUEST, id, DM_RPC_HEADER_MISMATCH, NULL,
                                             "header mismatch: Mcp-Name is not valid =?base64?...?= encoding");
                if ((bname || hname) && (!bname || !hname || strcmp(bname, hname) != 0))
                        return respond_error(c, MHD_HTTP_BAD_REQUEST, id, DM_RPC_HEADER_MISMATCH, NULL,
                                             "header mismatch: Mcp-Name is %s%s%s but params.%s is %s%s%s",
                                             hname ? "'" : "", hname ? hname : "missing", hname ? "'" : "", field,
                                             bname ? "'" : "", bname ? bname : "missing", bname ? "'" : "");
        }
        return dispatch(h, c, rq, m, NULL, false);
}

static enum MHD_Result legacy_post(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_request *rq,
                                   struct dm_rpc_msg *m, const char *hv)
{
        _cleanup_free_ char *id = json_text(m->id);
        const char *sid = header(c, "Mcp-Session-Id");
        struct http_session *s;
        enum MHD_Result ret;

        if (hv && !in_list(hv, legacy_versions))
                return respond_error(c, MHD_HTTP_BAD_REQUEST, id, DM_RPC_INVALID_REQUEST, NULL,
                                     "unsupported MCP-Protocol-Version '%s' (this server speaks 2026-07-28, 2025-11-25 "
                                     "and 2025-06-18)",
                                     hv);
        if (m->kind == DM_RPC_REQUEST && strcmp(m->method, "initialize") == 0) {
                /* A new session, whatever Mcp-Session-Id said: listed only
                 * once initialize succeeded. */
                s = dm_mcphttp_session_new(h, rq->token);
                if (!s)
                        return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, id, DM_RPC_INTERNAL_ERROR, NULL,
                                             "out of memory");
                ret = dispatch(h, c, rq, m, s, true);
                dm_mcphttp_session_unref(s);
                return ret;
        }
        if (!sid)
                return respond_error(c, MHD_HTTP_BAD_REQUEST, id, DM_RPC_INVALID_REQUEST, NULL,
                                     "the Mcp-Session-Id header is missing: send initialize first, then its "
                                     "Mcp-Session-Id with every request (or use protocol 2026-07-28)");
        s = dm_mcphttp_session_find(h, sid, rq->token);
        if (!s)
                return respond_error(c, MHD_HTTP_NOT_FOUND, id, -32001, NULL,
                                     "session not found (it ended or expired): initialize a new one");
        ret = dispatch(h, c, rq, m, s, false);
        dm_mcphttp_session_unref(s);
        return ret;
}

static enum MHD_Result handle_post(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_request *rq)
{
        const char *hv_raw = header(c, "MCP-Protocol-Version");
        _cleanup_free_ char *hv = NULL, *id = NULL;
        struct dm_rpc_msg m;
        json_object *meta, *v;
        enum MHD_Result ret;
        bool modern;

        if (hv_raw && dm_mcphttp_header_value(hv_raw, &hv) < 0)
                return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                     "MCP-Protocol-Version is not a valid header value");
        dm_rpc_parse(rq->body.data ? rq->body.data : "", rq->body.len, &m);
        if (m.kind == DM_RPC_INVALID) {
                id = json_text(m.id);
                ret = respond_error(c, MHD_HTTP_BAD_REQUEST, id, m.error_code, NULL, "%s", m.error_message);
                dm_rpc_msg_release(&m);
                return ret;
        }
        meta = meta_of(m.params);
        /* The era: a 2026-07-28 request says so in its header or its _meta. */
        modern = (hv && !in_list(hv, legacy_wire)) || (meta && json_object_object_get_ex(meta, META_VERSION, &v));
        ret = modern ? modern_post(h, c, rq, &m, hv) : legacy_post(h, c, rq, &m, hv);
        dm_rpc_msg_release(&m);
        return ret;
}

static enum MHD_Result handle_get(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_request *rq)
{
        static const char *const allow_post[] = { "Allow", "POST", NULL };
        const char *hv = header(c, "MCP-Protocol-Version"), *sid = header(c, "Mcp-Session-Id");
        const union MHD_ConnectionInfo *info;
        struct http_session *s;
        int r;

        if (hv && !in_list(hv, legacy_wire))
                return respond_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, DM_RPC_INVALID_REQUEST, allow_post,
                                     "protocol %s has no GET stream: every request is a POST", hv);
        if (!sid)
                return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                     "the Mcp-Session-Id header is missing: a GET stream belongs to a session");
        if (!dm_mcphttp_accepts(header(c, "Accept"), "text/event-stream"))
                return respond_error(c, MHD_HTTP_NOT_ACCEPTABLE, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                     "a GET stream is text/event-stream: the Accept header must allow it");
        s = dm_mcphttp_session_find(h, sid, rq->token);
        if (!s)
                return respond_error(c, MHD_HTTP_NOT_FOUND, NULL, -32001, NULL,
                                     "session not found (it ended or expired): initialize a new one");
        info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        rq->ex = dm_mcphttp_ex_new(h, info ? info->connect_fd : -1);
        if (!rq->ex) {
                dm_mcphttp_session_unref(s);
                return MHD_NO;
        }
        if ((r = dm_mcphttp_slot_take(h, s, rq->ex)) < 0) {
                static const char *const retry[] = { "Retry-After", "2", NULL };
                dm_mcphttp_session_unref(s);
                return respond_error(c, MHD_HTTP_TOO_MANY_REQUESTS, NULL, DM_RPC_INTERNAL_ERROR, retry,
                                     "too many open streams (%u in the server, %u per session)", h->opt.max_streams,
                                     h->opt.max_session_streams);
        }
        r = dm_mcphttp_session_attach_get(s, rq->ex);
        if (r < 0)
                /* Before our reference goes: the slot names the session. */
                dm_mcphttp_slot_put(rq->ex);
        dm_mcphttp_session_unref(s);
        if (r < 0)
                return respond_error(c, r == -EEXIST ? MHD_HTTP_CONFLICT : MHD_HTTP_NOT_FOUND, NULL,
                                     DM_RPC_INVALID_REQUEST, NULL,
                                     r == -EEXIST ? "this session has a GET stream open already"
                                                  : "session not found (it ended or expired)");
        return start_stream(h, c, rq, STREAM_SSE, NULL);
}

static enum MHD_Result handle_delete(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_request *rq)
{
        static const char *const allow_post[] = { "Allow", "POST", NULL };
        const char *hv = header(c, "MCP-Protocol-Version"), *sid = header(c, "Mcp-Session-Id");
        struct http_session *s;
        char id[9];

        if (hv && !in_list(hv, legacy_wire))
                return respond_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, DM_RPC_INVALID_REQUEST, allow_post,
                                     "protocol %s has no sessions to delete", hv);
        if (!sid)
                return respond_error(c, MHD_HTTP_BAD_REQUEST, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                     "the Mcp-Session-Id header is missing: DELETE ends the session it names");
        s = dm_mcphttp_session_find(h, sid, rq->token);
        if (!s)
                return respond_error(c, MHD_HTTP_NOT_FOUND, NULL, -32001, NULL, "session not found");
        snprintf(id, sizeof(id), "%.8s", s->id);
        dm_mcphttp_session_end(s);
        /* The last reference may be ours: then this waits until the
         * session's calls are cancelled and their containers gone. */
        dm_mcphttp_session_unref(s);
        log_info("http: session %s... ended by the client", id);
        return respond(c, MHD_HTTP_OK, NULL, "", 0, NULL);
}

static enum MHD_Result handle_options(struct MHD_Connection *c)
{
        const char *req_headers = header(c, "Access-Control-Request-Headers");
        const char *const extra[] = {
                "Access-Control-Allow-Methods",
                "GET, POST, DELETE, OPTIONS",
                "Access-Control-Allow-Headers",
                req_headers ? req_headers
                            : "Content-Type, Accept, Authorization, Mcp-Session-Id, MCP-Protocol-Version, "
                              "Mcp-Method, Mcp-Name, Last-Event-ID",
                "Access-Control-Max-Age",
                "600",
                "Allow",
                "GET, POST, DELETE, OPTIONS",
                NULL,
        };

        return respond(c, MHD_HTTP_NO_CONTENT, NULL, "", 0, extra);
}

/* ---- the access handler: every request passes here first ------------------------- */

static enum MHD_Result begin_request(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_request *rq,
                                     const char *url, const char *method)
{
        const char *host = header(c, "Host"), *origin = header(c, "Origin");
        bool stopping;

        pthread_mutex_lock(&h->lock);
        stopping = h->stopping;
        pthread_mutex_unlock(&h->lock);
        if (stopping)
                return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, DM_RPC_INTERNAL_ERROR, NULL,
                                     "the server is shutting down");
        /* DNS rebinding: a page of evil.example resolving to 127.0.0.1 still
         * says Host: evil.example; and a page elsewhere says its Origin. */
        if (!dm_mcphttp_host_allowed(host, h->hosts)) {
                dm_mcphttp_refused(h, "Host '%.100s' is not allowed", host ? host : "(none)");
                return respond_error(c, MHD_HTTP_FORBIDDEN, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                     "Host '%.100s' is not allowed (DNS-rebinding protection): start the server with "
                                     "--allowed-host NAME for each name clients use",
                                     host ? host : "(none)");
        }
        if (!dm_mcphttp_origin_allowed(origin, h->hosts, h->opt.allowed_origins)) {
                dm_mcphttp_refused(h, "Origin '%.100s' is not allowed", origin);
                return respond_error(c, MHD_HTTP_FORBIDDEN, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                     "Origin '%.100s' is not allowed: start the server with --allowed-origin ORIGIN "
                                     "to let a web page in",
                                     origin);
        }
        if (strcmp(url, ENDPOINT) != 0)
                return respond_error(c, MHD_HTTP_NOT_FOUND, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                     "nothing at '%.100s': the MCP endpoint is " ENDPOINT, url);
        if (strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0)
                return handle_options(c);
        rq->token = dm_mcphttp_bearer_match(header(c, "Authorization"), &h->tokens);
        if (!rq->token) {
                static const char *const challenge[] = { "WWW-Authenticate", "Bearer realm=\"demesne\"", NULL };
                dm_mcphttp_refused(h, "%s without a valid bearer token", method);
                return respond_error(c, MHD_HTTP_UNAUTHORIZED, NULL, DM_RPC_INVALID_REQUEST, challenge,
                                     "a valid 'Authorization: Bearer TOKEN' header is required");
        }
        if (strcmp(method, MHD_HTTP_METHOD_POST) == 0) {
                const char *length = header(c, "Content-Length"), *accept = header(c, "Accept");
                int r = dm_mcphttp_gate_enter(h, rq->conn);

                /* Calls past the address's share wait for a slot; what
                 * still finds none is told when to come back. */
                if (r < 0) {
                        static const char *const retry[] = { "Retry-After", "1", NULL };

                        dm_mcphttp_refused(h, "a call from '%s': %s", rq->conn ? rq->conn->addr : "?",
                                           r == -ESHUTDOWN ? "the server is stopping"
                                                           : "no call slot of its address came free in time");
                        return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, NULL, DM_RPC_INTERNAL_ERROR, retry, "%s",
                                             r == -ESHUTDOWN ? "the server is shutting down"
                                                             : "too many calls from this address at once: retry "
                                                               "later");
                }

                if (!dm_mcphttp_media_is(header(c, "Content-Type"), "application/json"))
                        return respond_error(c, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                             "the body must be JSON: Content-Type: application/json");
                if (!dm_mcphttp_accepts(accept, "application/json") && !dm_mcphttp_accepts(accept, "text/event-stream"))
                        return respond_error(c, MHD_HTTP_NOT_ACCEPTABLE, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                             "answers are application/json or text/event-stream: the Accept header "
                                             "must allow them");
                if (length && strtoull(length, NULL, 10) > h->opt.max_message) {
                        dm_mcphttp_refused(h, "a body of %.30s bytes (the limit is %zu)", length, h->opt.max_message);
                        return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                             "message too large: over %zu bytes (DEMESNE_MAX_MESSAGE sets the limit)",
                                             h->opt.max_message);
                }
                rq->post = true;
                dm_buf_init(&rq->body, h->opt.max_message);
                return MHD_YES;
        }
        dm_mcphttp_conn_deadline(h, rq->conn, true);
        if (strcmp(method, MHD_HTTP_METHOD_GET) == 0)
                return handle_get(h, c, rq);
        if (strcmp(method, MHD_HTTP_METHOD_DELETE) == 0)
                return handle_delete(h, c, rq);
        {
                static const char *const allow[] = { "Allow", "GET, POST, DELETE, OPTIONS", NULL };
                return respond_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, DM_RPC_INVALID_REQUEST, allow,
                                     "method %.20s is not allowed here", method);
        }
}

/* The activity view (opt.ui) beside /mcp: Host as for /mcp; the rest
 * (its login, Origin, cookie or this endpoint's bearer token) is its own. */
static enum MHD_Result ui_request(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_request *rq,
                                  const char *url, const char *method, size_t *upload_data_size)
{
        const char *host = header(c, "Host");

        if (!dm_mcphttp_host_allowed(host, h->hosts)) {
                dm_mcphttp_refused(h, "Host '%.100s' is not allowed", host ? host : "(none)");
                return respond_error(c, MHD_HTTP_FORBIDDEN, NULL, DM_RPC_INVALID_REQUEST, NULL,
                                     "Host '%.100s' is not allowed (DNS-rebinding protection)", host ? host : "(none)");
        }
        return (enum MHD_Result)h->opt.ui(h->opt.ui_data, c, url, method, upload_data_size, &rq->ui_cls,
                                          dm_mcphttp_bearer_match(header(c, "Authorization"), &h->tokens) != NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
        struct dm_mcphttp *h = cls;
        struct http_request *rq = *con_cls;

        (void)version;
        if (!rq) {
                const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
                rq = calloc(1, sizeof(*rq));
                if (!rq)
                        return MHD_NO;
                rq->conn = info ? info->socket_context : NULL;
                *con_cls = rq;
                rq->ui = h->opt.ui && strncmp(url, "/ui/", 4) == 0;
                if (!rq->ui)
                        return begin_request(h, c, rq, url, method);
        }
        if (rq->ui)
                return ui_request(h, c, rq, url, method, upload_data_size);
        if (*upload_data_size) {
                if (dm_buf_append(&rq->body, upload_data, *upload_data_size) < 0) {
                        /* Only a body without Content-Length gets here (a
                         * chunked one): nothing can be answered mid-upload,
                         * so the connection is closed. */
                        dm_mcphttp_refused(h, "a chunked body over %zu bytes: connection closed", h->opt.max_message);
                        return MHD_NO;
                }
                *upload_data_size = 0;
                return MHD_YES;
        }
        dm_mcphttp_conn_deadline(h, rq->conn, true);
        return handle_post(h, c, rq);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
        char line[512];
        size_t n;

        (void)cls;
        vsnprintf(line, sizeof(line), fmt, ap);
        n = strlen(line);
        while (n && line[n - 1] == '\n')
                line[--n] = '\0';
        /* Debug only: under a flood it says the same thing per connection. */
        log_debug("http: libmicrohttpd: %s", line);
}

/* ---- serving ------------------------------------------------------------------------ */

static int setup(struct dm_mcphttp *h, const struct dm_mcphttp_options *o, struct sockaddr_storage *addr,
                 socklen_t *addr_len, struct dm_error *err)
{
        size_t n = 0, extra = 0;
        int r;

        if (o->adopt_only) {
                /* No address of its own: Host is the caller's list alone. */
                struct sockaddr_in *in = (struct sockaddr_in *)addr;

                memset(addr, 0, sizeof(*addr));
                in->sin_family = AF_INET;
                in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                *addr_len = sizeof(*in);
        } else if (o->use_listen_fd) {
                *addr_len = sizeof(*addr);
                if (getsockname(o->listen_fd, (struct sockaddr *)addr, addr_len) < 0)
                        return dm_error_set(err, -errno, "getsockname: %s", strerror(errno));
        } else {
                r = dm_mcphttp_parse_listen(o->listen, addr, addr_len, err);
                if (r < 0)
                        return r;
        }
        dm_mcphttp_addr_host((struct sockaddr *)addr, h->bind_host, sizeof(h->bind_host));
        h->loopback = dm_mcphttp_addr_is_loopback((struct sockaddr *)addr);
        if (dm_mcphttp_addr_is_wildcard((struct sockaddr *)addr) && !o->allowed_hosts)
                return dm_error_set(err, -EINVAL,
                                    "--http %s listens on every address: name the host names clients use with "
                                    "--allowed-host NAME (or --allowed-host '*' to leave the Host check to the token)",
                                    o->listen);
        if (o->token_file) {
                r = dm_mcphttp_read_tokens(o->token_file, &h->tokens, err);
        } else if (o->token) {
                r = dm_mcphttp_tokens_add(&h->tokens, "token", o->token, "DEMESNE_HTTP_TOKEN", 0, err);
        } else {
                char made[65];
                if (!o->state_dir)
                        return dm_error_set(err, -EINVAL, "no state directory to write the token to");
                if ((r = dm_mcphttp_token_generate(made)) < 0)
                        return dm_error_set(err, r, "cannot make a token: getrandom: %s", strerror(-r));
                r = dm_mcphttp_tokens_add(&h->tokens, "token", made, "a made token", 0, err);
                explicit_bzero(made, sizeof(made));
                h->token_made = true; /* written once the port is known */
        }
        if (r < 0)
                return r;
        for (size_t i = 0; o->allowed_hosts && o->allowed_hosts[i]; i++)
                extra++;
        h->hosts = calloc(extra + 5, sizeof(*h->hosts));
        if (!h->hosts)
                return dm_error_set(err, -ENOMEM, "out of memory");
        h->hosts[n++] = "localhost";
        h->hosts[n++] = "127.0.0.1";
        h->hosts[n++] = "[::1]";
        if (!dm_mcphttp_addr_is_wildcard((struct sockaddr *)addr))
                h->hosts[n++] = h->bind_host;
        for (size_t i = 0; i < extra; i++)
                h->hosts[n++] = o->allowed_hosts[i];
        return 0;
}

/* Whether a TCP socket in TIME_WAIT, and no listener, has the port of addr
 * as its local port (/proc/net/tcp{,6}: "sl local rem st", 06 = TIME_WAIT,
 * 0A = LISTEN). */
static bool time_wait_on(const struct sockaddr_storage *addr)
{
        static const char *const tables[] = { "/proc/net/tcp", "/proc/net/tcp6" };
        unsigned port = ntohs(addr->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)addr)->sin6_port
                                                          : ((const struct sockaddr_in *)addr)->sin_port);
        bool waiting = false, listening = false;

        for (size_t t = 0; t < DM_ARRAY_SIZE(tables); t++) {
                FILE *f = fopen(tables[t], "re");
                char line[512], local[64];
                unsigned lport, st;

                while (f && fgets(line, sizeof(line), f))
                        if (sscanf(line, " %*u: %63[0-9A-Fa-f]:%x %*s %x", local, &lport, &st) == 3 && lport == port) {
                                waiting |= st == 0x06;
                                listening |= st == 0x0A;
                        }
                if (f)
                        fclose(f);
        }
        return waiting && !listening;
}

int dm_mcphttp_open_listener(struct sockaddr_storage *addr, socklen_t len, const char *spec, unsigned *ret_port,
                             struct dm_error *err)
{
        _cleanup_close_ int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;

        if (fd < 0)
                return dm_error_set(err, -errno, "socket: %s", strerror(errno));
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)addr, len) < 0 || listen(fd, SOMAXCONN) < 0) {
                int e = errno;
                if (e == EADDRINUSE && time_wait_on(addr))
                        /* SO_REUSEADDR covers our own closed connections, not
                         * those of a client socket that lacked it. */
                        return dm_error_set(err, -e,
                                            "cannot listen on %s: a closed outgoing connection still holds the port "
                                            "(TIME_WAIT, up to 60 s) and the kernel lets nothing bind it until then; "
                                            "use a port outside net.ipv4.ip_local_port_range, or port 0 for a free one",
                                            spec);
                return dm_error_set(err, -e, "cannot listen on %s: %s", spec, strerror(e));
        }
        if (getsockname(fd, (struct sockaddr *)addr, &len) < 0)
                return dm_error_set(err, -errno, "getsockname: %s", strerror(errno));
        *ret_port = ntohs(addr->ss_family == AF_INET6 ? ((struct sockaddr_in6 *)addr)->sin6_port
                                                      : ((struct sockaddr_in *)addr)->sin_port);
        return TAKE_FD(fd);
}

/* A token the server made: local clients read it from a 0600 file named
 * after the address, so servers on other ports keep theirs. */
static int write_token(struct dm_mcphttp *h, const char *dir, unsigned port, struct dm_error *err)
{
        char name[128];
        int r;

        snprintf(name, sizeof(name), "http-%s-%u.token", h->bind_host, port);
        r = dm_mcphttp_token_write(dir, name, h->tokens.v[0].secret, &h->token_path, &h->token_st, err);
        if (r < 0)
                return r;
        log_info("http: bearer token in '%s' (clients send 'Authorization: Bearer TOKEN'; --token-file or "
                 "DEMESNE_HTTP_TOKEN_FILE chooses one)",
                 h->token_path);
        return 0;
}

static void wait_for_signal(void)
{
        sigset_t mask;
        struct signalfd_siginfo si;
        int sfd;

        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);
        sfd = signalfd(-1, &mask, SFD_CLOEXEC);
        if (sfd < 0) {
                int sig;
                if (sigwait(&mask, &sig) == 0)
                        log_info("signal %d: shutting down", sig);
                return;
        }
        while (read(sfd, &si, sizeof(si)) < 0 && errno == EINTR)
                ;
        log_info("signal %u: shutting down", si.ssi_signo);
        close(sfd);
}

/* Stops accepting and ends every session of this endpoint (their calls
 * cancelled and waited for). The MCP server's own shutdown (every call of
 * every transport) only when it serves alone. */
static void stop(struct dm_mcphttp *h, bool shutdown_server)
{
        pthread_mutex_lock(&h->lock);
        h->stopping = true;
        pthread_mutex_unlock(&h->lock);
        dm_mcphttp_gate_wake(h);
        MHD_quiesce_daemon(h->daemon);
        /* Every call is cancelled (commands killed, containers removed)
         * before any connection goes. */
        if (shutdown_server)
                dm_mcp_server_shutdown(h->srv);
        dm_mcphttp_sessions_end_all(h);
        MHD_stop_daemon(h->daemon);
        h->daemon = NULL;
}

static void release(struct dm_mcphttp *h)
{
        if (h->listen_fd >= 0)
                close(h->listen_fd);
        if (h->token_path)
                dm_mcphttp_token_remove(h->token_path, &h->token_st);
        free(h->token_path);
        dm_mcphttp_tokens_release(&h->tokens);
        free(h->hosts);
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->tick);
        pthread_cond_destroy(&h->slot_freed);
        free(h);
}

/* Everything up to a running daemon; *ret_port the port it listens on. */
static int start(struct dm_mcp_server *srv, const struct dm_mcphttp_options *o, struct dm_mcphttp **ret,
                 unsigned *ret_port, struct dm_error *err)
{
        struct dm_mcphttp *h = calloc(1, sizeof(*h));
        struct sockaddr_storage addr;
        socklen_t addr_len = 0;
        unsigned port = 0;
        int r;

        if (!h) {
                if (o->use_listen_fd)
                        close(o->listen_fd);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        h->srv = srv;
        h->opt = *o;
        h->listen_fd = o->use_listen_fd ? o->listen_fd : -1;
        pthread_mutex_init(&h->lock, NULL);
        pthread_cond_init(&h->tick, NULL);
        {
                pthread_condattr_t ca;

                pthread_condattr_init(&ca);
                pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
                pthread_cond_init(&h->slot_freed, &ca);
                pthread_condattr_destroy(&ca);
        }
        r = setup(h, o, &addr, &addr_len, err);
        /* The server's log speaks of every client's work: with more than
         * one top-level principal, no session is sent another's records.
         * A nested endpoint's sessions get none (the log hook), and the
         * host's client may read of its own trees' work. */
        if (r >= 0 && h->tokens.n > 1)
                dm_mcp_server_set_private_logs(srv);
        if (r >= 0 && !o->use_listen_fd && !o->adopt_only)
                r = h->listen_fd = dm_mcphttp_open_listener(&addr, addr_len, o->listen, &port, err);
        if (r >= 0 && h->token_made)
                r = write_token(h, o->state_dir, port, err);
        if (r >= 0 && (r = dm_mcphttp_janitor_start(h, &h->janitor)) < 0)
                dm_error_set(err, r, "cannot start a thread: %s", strerror(-r));
        if (r >= 0) {
                h->daemon = MHD_start_daemon(
                        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC |
                                MHD_USE_ERROR_LOG | (o->adopt_only ? MHD_USE_NO_LISTEN_SOCKET : 0),
                        /* No listening socket at all for adopt_only (libmicrohttpd
                         * refuses the option then): the limit, given twice, instead. */
                        0, NULL, NULL, on_request, h,
                        o->adopt_only ? MHD_OPTION_CONNECTION_LIMIT : MHD_OPTION_LISTEN_SOCKET,
                        o->adopt_only ? (int)o->max_connections : h->listen_fd, MHD_OPTION_CONNECTION_LIMIT,
                        o->max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (o->max_connections + 1) / 2,
                        MHD_OPTION_CONNECTION_TIMEOUT, o->request_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                        (size_t)CONN_MEMORY, MHD_OPTION_THREAD_STACK_SIZE, (size_t)THREAD_STACK,
                        MHD_OPTION_NOTIFY_COMPLETED, request_done, h, MHD_OPTION_NOTIFY_CONNECTION,
                        dm_mcphttp_on_connection, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, h, MHD_OPTION_END);
                if (!h->daemon) {
                        r = dm_error_set(err, -EIO, "libmicrohttpd could not start on %s",
                                         o->use_listen_fd ? "a given socket" : o->listen);
                        dm_mcphttp_janitor_stop(h, h->janitor);
                }
        }
        if (r < 0) {
                release(h);
                return r;
        }
        *ret = h;
        *ret_port = port;
        return 0;
}

int dm_mcp_http_serve(struct dm_mcp_server *srv, const struct dm_mcphttp_options *o, struct dm_error *err)
{
        struct dm_mcphttp *h;
        unsigned port;
        int r = start(srv, o, &h, &port, err);

        if (r < 0)
                return r;
        dm_mcphttp_tokens_log(&h->tokens);
        log_info("serving MCP on http://%s:%u" ENDPOINT " with a bearer token (connections from %s)", h->bind_host,
                 port, h->loopback ? "this machine only" : "the network");
        if (o->ui_ready)
                o->ui_ready(o->ui_data, h->bind_host, port);
        wait_for_signal();
        if (o->ui_ready)
                o->ui_ready(o->ui_data, NULL, 0);
        stop(h, true);
        dm_mcphttp_janitor_stop(h, h->janitor);
        release(h);
        return 0;
}

int dm_mcphttp_start(struct dm_mcp_server *srv, const struct dm_mcphttp_options *o, struct dm_mcphttp **ret,
                     struct dm_error *err)
{
        unsigned port;

        if (!o->token && !o->token_file) {
                if (o->use_listen_fd)
                        close(o->listen_fd);
                return dm_error_set(err, -EINVAL, "an HTTP endpoint started beside another transport needs a token");
        }
        return start(srv, o, ret, &port, err);
}

int dm_mcphttp_adopt(struct dm_mcphttp *h, int fd, const struct sockaddr *sa, socklen_t len)
{
        /* libmicrohttpd closes fd when it refuses it. */
        return MHD_add_connection(h->daemon, fd, sa, len) == MHD_YES ? 0 : -EIO;
}

void dm_mcphttp_stop(struct dm_mcphttp *h)
{
        if (!h)
                return;
        stop(h, false);
        dm_mcphttp_janitor_stop(h, h->janitor);
        release(h);
}
