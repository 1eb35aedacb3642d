/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_HTTP_INTERNAL_H
#define DM_MCP_HTTP_INTERNAL_H

/* What the parts of the HTTP transport share: the server, its legacy
 * sessions, and the exchange, which carries one request's answer from the
 * MCP server (any thread) to libmicrohttpd's thread for that connection.
 *
 * Threads: libmicrohttpd runs one thread per connection, so a stream's
 * reader may block until there is something to send (and watch the socket
 * meanwhile to notice a client that left); tools/call runs on threads of
 * the MCP server; the janitor thread enforces deadlines and expiry.
 *
 * Locks, in the only order they are taken: dm_http.lock, then an
 * exchange's lock. Never log while holding either: the log hook may send to
 * a session, which takes dm_http.lock. */

#include <json-c/json.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "src/mcp/http-token.h"
#include "src/mcp/http.h"
#include "src/basic/buf.h"

struct dm_mcp_session;

enum stream_mode {
        STREAM_NONE = 0, /* answered at once, as JSON */
        STREAM_SSE,      /* text/event-stream: notifications, then the response */
        STREAM_JSON,     /* application/json, held until the response is there */
};

struct http_exchange {
        atomic_int refs;
        struct dm_mcphttp *h;
        struct http_session *session;                /* legacy: the session it routes through */
        struct dm_mcp_session *ephemeral;            /* 2026-07-28: a session of its own */
        char *id;                                    /* the request id as JSON text, NULL for a GET stream */
        char *progress_token;                        /* as JSON text, or NULL */
        struct http_exchange *next;                  /* in session->exchanges; guarded by h->lock */
        bool registered;                             /* in session->exchanges; guarded by h->lock */
        bool counted;                                /* holds a stream slot; guarded by h->lock */
        struct http_session *slot_session;           /* whose slot it holds */
        struct http_exchange *all_next, **all_pprev; /* h->streams, while counted */

        pthread_mutex_t lock; /* guards what follows */
        enum stream_mode mode;
        struct dm_buf out; /* framed bytes waiting for the reader */
        size_t out_pos;
        char *final; /* the response, raw JSON, once it came */
        size_t final_len;
        int final_error;   /* its error code, 0 for a result */
        unsigned dropped;  /* notifications a slow reader lost */
        bool final_framed; /* moved into out */
        bool aborted;      /* end the stream without a response */
        bool client_gone;
        int wake_fd; /* eventfd: something to send, or abort */
        int sock_fd; /* the connection, watched for hang-up */
        unsigned keepalive_ms;
};

struct http_session {
        struct dm_mcphttp *h;
        struct http_session *next;
        char id[33];
        struct dm_mcp_session *mcp;
        /* The token that made it, in h->tokens: only requests with that
         * token find it (compared by address). */
        const struct dm_mcphttp_token *owner;
        int refs;                        /* table + exchanges + streams; guarded by h->lock */
        struct http_exchange *exchanges; /* POSTs waiting for their response */
        struct http_exchange *get;       /* the GET stream, if one is open */
        unsigned n_streams;
        int busy; /* requests in progress: not idle */
        int64_t last_used_ms;
        bool listed; /* in h->sessions: new requests find it */
};

/* One TCP connection, for the request deadline (libmicrohttpd's own
 * timeout restarts with every byte, which a trickle defeats). */
struct http_conn {
        struct http_conn *next, **pprev;
        int fd;
        int64_t deadline_ms; /* 0 = none (a request is being answered) */
        char addr[64];       /* the client's address, without the port */
        bool calling;        /* holds one of its address's call slots (dm_mcphttp_gate_enter) */
};

struct dm_mcphttp {
        struct dm_mcp_server *srv;
        struct dm_mcphttp_options opt;
        struct dm_mcphttp_tokens tokens; /* read-only once serving */
        bool token_made;                 /* by the server: written to token_path */
        char *token_path;
        struct stat token_st;
        const char **hosts; /* allowed Host names, NULL-terminated */
        char bind_host[64];
        struct MHD_Daemon *daemon;
        int listen_fd;
        bool loopback; /* listen_fd is bound to a loopback address */
        pthread_t janitor;

        pthread_mutex_t lock;
        pthread_cond_t tick;
        pthread_cond_t slot_freed; /* a call slot was given back (CLOCK_MONOTONIC) */
        struct http_session *sessions;
        unsigned n_sessions;
        struct http_conn *conns;
        struct http_exchange *streams; /* every exchange holding a stream slot */
        unsigned n_streams;
        bool stopping;
        bool janitor_stop;
        /* refusals: logged a few at a time, counted otherwise */
        unsigned refused_logged, refused_quiet;
        int64_t refused_window_ms;
        unsigned slow_closed;
};

/* ---- the per-address limits (http-session.c) ---- */

/* A POST from conn takes one of its address's call slots
 * (opt.max_connections_per_ip calls at once per address): past them it
 * waits for one to be given back, up to opt.request_timeout_s. 0 with the
 * slot taken; -EAGAIN when the wait ran out, -ESHUTDOWN when the server is
 * stopping: the caller answers 503 with Retry-After. conn NULL: 0, nothing
 * taken. */
int dm_mcphttp_gate_enter(struct dm_mcphttp *h, struct http_conn *conn);
/* Gives conn's slot back (none taken: nothing). */
void dm_mcphttp_gate_leave(struct dm_mcphttp *h, struct http_conn *conn);
/* Wakes every waiter (the server is stopping). */
void dm_mcphttp_gate_wake(struct dm_mcphttp *h);

/* ---- exchanges (http-stream.c) ---- */

struct http_exchange *dm_mcphttp_ex_new(struct dm_mcphttp *h, int sock_fd);
void dm_mcphttp_ex_ref(struct http_exchange *ex);
void dm_mcphttp_ex_unref(struct http_exchange *ex);
/* Queues one serialized message (not NUL-terminated data of len bytes);
 * is_response ends the exchange. Notifications that do not fit the cap on
 * waiting bytes are dropped (a client that does not read loses progress,
 * never its result). */
void dm_mcphttp_ex_push(struct http_exchange *ex, const char *json, size_t len, bool is_response, int error_code);
/* Ends the stream without a response (shutdown, session ended). */
void dm_mcphttp_ex_abort(struct http_exchange *ex);
/* The response, if it came before any stream started: the request is then
 * answered as plain JSON. The text stays owned by the exchange. */
bool dm_mcphttp_ex_take_final(struct http_exchange *ex, char **ret_json, size_t *ret_len, int *ret_error);
bool dm_mcphttp_ex_answered(struct http_exchange *ex);
void dm_mcphttp_ex_set_mode(struct http_exchange *ex, enum stream_mode mode);
/* How a message finds its exchange: a response by its id, a progress
 * notification by its token (both as JSON text, malloc'd); true for a
 * response, with its error code (0 for a result). */
bool dm_mcphttp_msg_route(json_object *msg, char **ret_id, char **ret_token, int *ret_code);
/* The transport's send function for an exchange that is its session's
 * only destination (the 2026-07-28 per-request session). */
int dm_mcphttp_ex_send(void *transport, json_object *msg);
/* libmicrohttpd's content reader and its free callback for streamed answers. */
ssize_t dm_mcphttp_ex_read(void *cls, uint64_t pos, char *buf, size_t max);
void dm_mcphttp_ex_release_cb(void *cls);

/* Who a request with token t acts for: the endpoint's principal when it
 * has one (a nested sandbox's), else the token's name. */
static inline const char *dm_mcphttp_principal_of(const struct dm_mcphttp *h, const struct dm_mcphttp_token *t)
{
        return h->opt.principal ? h->opt.principal : t->name;
}

/* ---- sessions (http-session.c) ---- */

/* A session acting for owner's principal (a token of h->tokens). */
struct http_session *dm_mcphttp_session_new(struct dm_mcphttp *h, const struct dm_mcphttp_token *owner);
/* Finds a listed session by id and takes a reference; NULL if unknown or
 * made with another token than owner, alike, so a client cannot tell that
 * another's session exists. */
struct http_session *dm_mcphttp_session_find(struct dm_mcphttp *h, const char *id,
                                             const struct dm_mcphttp_token *owner);
void dm_mcphttp_session_ref_locked(struct http_session *s);
/* Drops a reference; the last one frees the MCP session, which waits for
 * its calls to end: never call it from a thread a call may wait on. */
void dm_mcphttp_session_unref(struct http_session *s);
/* Lists it (after a successful initialize); -EBUSY when full. */
int dm_mcphttp_session_list(struct http_session *s);
/* Unlists it and aborts its streams (DELETE, expiry, shutdown). */
void dm_mcphttp_session_end(struct http_session *s);
/* Legacy: the client left before the answer to request id; tells the MCP
 * session as if it had sent notifications/cancelled, so the command is
 * killed. */
void dm_mcphttp_session_cancel(struct http_session *s, const char *id);
int dm_mcphttp_session_send(void *transport, json_object *msg);
/* Routes messages to ex until unregistered; takes a session reference
 * that the caller drops after unregistering. -EEXIST, and nothing taken,
 * when a request of the session with ex's id is still in flight: its
 * answers would be routed to one of the two (MCP: an id is used once in
 * a session). */
int dm_mcphttp_session_register(struct http_session *s, struct http_exchange *ex);
/* Makes ex the session's GET stream (-EEXIST: it has one; -ENOENT: ended). */
int dm_mcphttp_session_attach_get(struct http_session *s, struct http_exchange *ex);
void dm_mcphttp_session_unregister(struct http_exchange *ex);

/* A stream slot for a call or a GET stream: -EBUSY when the server has
 * max_streams, -EAGAIN when the session (may be NULL) has its share. */
int dm_mcphttp_slot_take(struct dm_mcphttp *h, struct http_session *s, struct http_exchange *ex);
void dm_mcphttp_slot_put(struct http_exchange *ex);
/* libmicrohttpd's completion of a request with exchange ex: its slot, its
 * session's routing (a call still running is cancelled) and its reference
 * given back. */
void dm_mcphttp_ex_end(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_exchange *ex,
                       enum MHD_RequestTerminationCode toe);
/* Shutdown: aborts every stream and ends every listed session. */
void dm_mcphttp_sessions_end_all(struct dm_mcphttp *h);

/* ---- the janitor (http-session.c) ---- */

/* libmicrohttpd's connection notifier: lists a connection in h->conns with
 * the deadline for its first request. */
void dm_mcphttp_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode code);
/* No deadline while a request is answered (running), a fresh one after. */
void dm_mcphttp_conn_deadline(struct dm_mcphttp *h, struct http_conn *conn, bool running);
int dm_mcphttp_janitor_start(struct dm_mcphttp *h, pthread_t *ret);
void dm_mcphttp_janitor_stop(struct dm_mcphttp *h, pthread_t th);
/* A refusal worth a log line, unless many come at once. */
void dm_mcphttp_refused(struct dm_mcphttp *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
