/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_HTTP_FRONT_H
#define DM_MCP_HTTP_FRONT_H

/* The remote listener (DEMESNE_REMOTE_LISTEN): one TCP address, TLS unless
 * it is loopback, in front of many endpoints (src/mcp/http.h) and vendor
 * proxies (netpolicy/vendor.h), each behind a token of its own. It reads a
 * connection's first request head, finds the route whose token its
 * Authorization: Bearer (MCP clients, Codex) or x-api-key (Claude Code)
 * carries, and hands the connection to that endpoint (dm_mcphttp_adopt) or
 * connects to that proxy on this host's loopback, relaying the bytes both
 * ways; the endpoint or proxy itself checks the token of every request, as
 * it does where it listens on its own, so a later request of the same
 * connection with another token is refused there. A connection with no
 * known token gets 401, and learns nothing of what is behind. */

#include <netinet/in.h>
#include <stdbool.h>

#include "src/basic/error.h"

struct dm_mcphttp;
struct dm_mcphttp_front;

struct dm_mcphttp_front_options {
        const char *listen;   /* "ADDR:PORT" (PORT 0: any free one) */
        const char *tls_cert; /* PEM files; both or neither */
        const char *tls_key;
        const char *tls_ca;       /* PEM file handed to the sandboxes (dm_mcphttp_front_ca); NULL: none */
        unsigned max_connections; /* at once (0: 256); past them, closed at accept */
        unsigned head_timeout_s;  /* the TLS handshake and the first head must come within (0: 30) */
};

/* Listens (refused: a non-loopback address without TLS) and serves from
 * its own threads until dm_mcphttp_front_stop. */
int dm_mcphttp_front_start(const struct dm_mcphttp_front_options *o, struct dm_mcphttp_front **ret,
                           struct dm_error *err);
/* Stops accepting, ends every relayed connection, and waits for them.
 * The endpoints are the caller's. NULL is fine. */
void dm_mcphttp_front_stop(struct dm_mcphttp_front *f);

/* Serves fd (a connected stream socket, f's from now on) as if it had
 * been accepted: for the fuzz target, whose tens of thousands of
 * connections would wear out loopback's ports. */
void dm_mcphttp_front_take(struct dm_mcphttp_front *f, int fd);

/* "http://ADDR:PORT" or "https://ADDR:PORT", the port as bound. */
const char *dm_mcphttp_front_url(const struct dm_mcphttp_front *f);
/* tls_ca's text, NULL without it. */
const char *dm_mcphttp_front_ca(const struct dm_mcphttp_front *f);
/* "ADDR" and "ADDR:PORT": what an endpoint behind it must take as Host. */
const char *dm_mcphttp_front_host(const struct dm_mcphttp_front *f);
const char *dm_mcphttp_front_hostport(const struct dm_mcphttp_front *f);

/* Requests with token go to h (started with adopt_only) from now on. */
int dm_mcphttp_front_add(struct dm_mcphttp_front *f, const char *token, struct dm_mcphttp *h, struct dm_error *err);
/* ... no more: call before stopping h. Connections it has are h's to end. */
void dm_mcphttp_front_remove(struct dm_mcphttp_front *f, struct dm_mcphttp *h);

/* Connections with token (in either header) are relayed to the server
 * listening at to (a vendor proxy on loopback) from now on. */
int dm_mcphttp_front_add_relay(struct dm_mcphttp_front *f, const char *token, const struct sockaddr_in *to,
                               struct dm_error *err);
/* ... no more: call before stopping that server. NULL f is fine. */
void dm_mcphttp_front_remove_relay(struct dm_mcphttp_front *f, const char *token);

#endif
