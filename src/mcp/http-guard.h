/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_HTTP_GUARD_H
#define DM_MCP_HTTP_GUARD_H

/* The pure checks of the HTTP transport, kept apart from libmicrohttpd so
 * unit tests can feed them hostile input directly: where to listen, which
 * Host and Origin headers to believe (DNS-rebinding protection), the bearer
 * token, content negotiation and the 2026-07-28 header encoding. None of
 * them allocates except where it says so; none logs. */

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "src/mcp/http-token.h"
#include "src/basic/error.h"

/* Parses "[ADDR:]PORT": ADDR is an IPv4 address, an IPv6 address in
 * brackets, or "localhost" (127.0.0.1); no name lookups, so what the server
 * binds to is exactly what the operator wrote. Default ADDR 127.0.0.1.
 * PORT 0 asks the kernel for a free port. -EINVAL with a message otherwise. */
int dm_mcphttp_parse_listen(const char *spec, struct sockaddr_storage *ret, socklen_t *ret_len, struct dm_error *err);

bool dm_mcphttp_addr_is_loopback(const struct sockaddr *sa);
bool dm_mcphttp_addr_is_wildcard(const struct sockaddr *sa);
/* "127.0.0.1" or "[::1]": the form a Host header names the address in. */
void dm_mcphttp_addr_host(const struct sockaddr *sa, char *ret, size_t n);

/* The host part of a Host header or of an Origin's authority, lowercased,
 * without the port: "LocalHost:8080" -> "localhost", "[::1]:80" -> "[::1]".
 * -EINVAL for an empty or malformed value (spaces, a path, userinfo...). */
int dm_mcphttp_host_part(const char *authority, size_t len, char *ret, size_t n);

/* Whether a Host header names one of the allowed host names (a
 * NULL-terminated list; an entry "*" allows any). The port is ignored:
 * DNS rebinding works through the name, whatever the port. */
bool dm_mcphttp_host_allowed(const char *host_header, const char *const *allowed_hosts);

/* Whether an Origin header may talk to us: an http(s) origin whose host is
 * an allowed host (any port), or an exact entry of allowed_origins ("*"
 * allows any). "null" and anything malformed are refused. */
bool dm_mcphttp_origin_allowed(const char *origin, const char *const *allowed_hosts,
                               const char *const *allowed_origins);

/* Constant-time comparison: the time depends only on want_len, never on
 * where the first difference is or on the length of the guess. */
bool dm_mcphttp_secret_equal(const char *given, size_t given_len, const char *want, size_t want_len);

/* The token of tokens an Authorization header carries ("Bearer <token>",
 * the scheme case-insensitive), or NULL. Every
 * token is compared, each in constant time, whatever matched: the time
 * says nothing about which one did, or how close a guess came. */
const struct dm_mcphttp_token *dm_mcphttp_bearer_match(const char *authorization,
                                                       const struct dm_mcphttp_tokens *tokens);

/* Reads a token file into *ret (empty before; see dm_mcphttp_tokens_parse
 * for the format): at most 64 KiB, no NUL bytes. A file other users can
 * read is refused: the tokens are the only guard of a server on the
 * network. Messages name the file and the line, never a token. */
int dm_mcphttp_read_tokens(const char *path, struct dm_mcphttp_tokens *ret, struct dm_error *err);

/* Whether an Accept header admits the media type ("application/json"):
 * exact, type/ wildcard or star/star, unless q=0. A missing header admits all. */
bool dm_mcphttp_accepts(const char *accept, const char *type);
/* Whether a Content-Type header is this media type (parameters ignored). */
bool dm_mcphttp_media_is(const char *content_type, const char *type);

/* A 2026-07-28 header value as the sender meant it: optional whitespace
 * around it removed, and "=?base64?...?=" decoded (how clients send values
 * that are not plain visible ASCII). Malloc'd in *ret; -EINVAL for bad
 * base64 or a decoded value with a NUL. */
int dm_mcphttp_header_value(const char *raw, char **ret);

/* 32 hex digits from getrandom(): visible ASCII, as session ids must be. */
int dm_mcphttp_random_id(char ret[33]);

#endif
