/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_HTTP_H
#define DM_MCP_HTTP_H

/* MCP over Streamable HTTP: one endpoint, /mcp, in both protocol eras.
 *
 *   legacy (2025-06-18, 2025-11-25): initialize makes a session named by
 *     Mcp-Session-Id; POST carries messages, GET opens a stream for what
 *     the server sends outside a request, DELETE ends the session.
 *   2026-07-28: every POST stands alone (no session); the MCP-Protocol-
 *     Version, Mcp-Method and Mcp-Name headers must agree with the body.
 *
 * tools/call answers as a server-sent-event stream (progress first, then the
 * result); everything else answers as plain JSON. A client that closes the
 * stream of a call cancels it. Host and Origin are checked (DNS rebinding),
 * every request needs the bearer token (loopback too: whatever reaches
 * 127.0.0.1, a browser page or a sandbox's proxy, is not the operator), and
 * every resource a client can tie up has a limit. */

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "src/basic/error.h"

struct dm_mcp_server;
struct MHD_Connection;

struct dm_mcphttp_options {
        const char *listen;                 /* "[ADDR:]PORT", ADDR default 127.0.0.1 */
        const char *token_file;             /* the tokens, one per line (mode 0600): dm_mcphttp_tokens_parse */
        const char *token;                  /* else this token; NULL: make one and write it */
        const char *state_dir;              /* where a token the server made is written */
        const char *const *allowed_hosts;   /* extra Host names, NULL-terminated; "*" = any */
        const char *const *allowed_origins; /* extra exact Origins; "*" = any */
        size_t max_message;                 /* request body cap (DEMESNE_MAX_MESSAGE) */
        unsigned max_sessions;              /* legacy sessions at once (503 beyond) */
        unsigned max_streams;               /* open streams (calls, GET) in the server (429 beyond) */
        unsigned max_session_streams;       /* ... in one session (429 beyond) */
        unsigned max_connections;           /* TCP connections (closed at once beyond); one address holds at
                                               most half of them (its next ones closed at accept) */
        unsigned max_connections_per_ip;    /* calls at once from one address (more wait their turn, then 503) */
        unsigned session_idle_s;            /* a session unused this long is ended */
        unsigned request_timeout_s;         /* a request must arrive whole within this */
        unsigned keepalive_s;               /* comment on a quiet stream this often */

        /* For an endpoint the caller starts and stops (dm_mcphttp_start):
         * serve listen_fd, a socket that listens already (e.g. made in a
         * sandbox's network namespace), instead of opening listen; it is
         * taken over, closed on error too. */
        bool use_listen_fd;
        int listen_fd;
        /* Or no socket at all: the connections are handed to it by
         * dm_mcphttp_adopt (the remote listener's, src/mcp/http-front.h). */
        bool adopt_only;
        /* Every request acts for this principal, whatever its token's
         * name (a nested sandbox's endpoint); NULL: the token's name. */
        const char *principal;

        /* Requests under /ui/ go to ui (the activity view, src/cli/ui.h)
         * once Host is checked; bearer_ok: their Authorization carries one of
         * this endpoint's tokens. It answers on c (an enum MHD_Result);
         * con_cls is the request's own. ui_ready is told where the server
         * listens, and with host NULL when it
         * stops (before it waits for open requests). NULL: no /ui/. */
        int (*ui)(void *data, struct MHD_Connection *c, const char *url, const char *method, size_t *upload_size,
                  void **con_cls, bool bearer_ok);
        void (*ui_ready)(void *data, const char *host, unsigned port);
        void *ui_data;
};

/* The defaults; listen and max_message still have to be set. */
void dm_mcphttp_options_init(struct dm_mcphttp_options *o);

/* Serves until SIGTERM, SIGINT or SIGHUP; then refuses new requests,
 * cancels every call (the commands are killed) and waits for them before
 * it returns. The caller must have blocked those signals in every thread.
 * A token it made is in STATE_DIR/http-ADDR-PORT.token (logged) while it
 * serves, removed at the end.
 * 0, or a negative errno with err filled (bad address, port taken, token). */
int dm_mcp_http_serve(struct dm_mcp_server *srv, const struct dm_mcphttp_options *o, struct dm_error *err);

/* The same endpoint beside another transport, without the signals: serves
 * on its own threads from return until dm_mcphttp_stop. A token must be
 * given (o->token or o->token_file). Stopping ends this endpoint's sessions
 * (their calls are cancelled and waited for) and leaves the MCP server's
 * other sessions alone. */
struct dm_mcphttp;
int dm_mcphttp_start(struct dm_mcp_server *srv, const struct dm_mcphttp_options *o, struct dm_mcphttp **ret,
                     struct dm_error *err);
/* NULL is fine. */
void dm_mcphttp_stop(struct dm_mcphttp *h);

/* An endpoint started with adopt_only serves fd (a connected stream
 * socket, taken over: closed on error too) as if it had accepted it from
 * the client at sa. 0, or -EIO when libmicrohttpd refused it (full,
 * stopping). */
int dm_mcphttp_adopt(struct dm_mcphttp *h, int fd, const struct sockaddr *sa, socklen_t len);

/* A listening TCP socket (close-on-exec) at addr (dm_mcphttp_parse_listen's),
 * spec naming it in messages (a port a closed connection still holds in
 * TIME_WAIT is said so); the port it got in *ret_port. fd, or a negative
 * errno with err filled. `demesne ui` listens through it too. */
int dm_mcphttp_open_listener(struct sockaddr_storage *addr, socklen_t len, const char *spec, unsigned *ret_port,
                             struct dm_error *err);

#endif
