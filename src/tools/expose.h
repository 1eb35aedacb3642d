/* SPDX-License-Identifier: MIT */
#ifndef DM_TOOLS_EXPOSE_H
#define DM_TOOLS_EXPOSE_H

/* Previews (sandbox_expose): one port of a persistent sandbox served on a
 * host loopback port. expose-relay.c is one preview: its listener, the
 * one-time code and cookie check, the relay into the sandbox's own
 * loopback through sockets made in its network namespace (netpolicy/netns.h).
 * expose.c is the tool, the table of open previews and their ends. */

#include <netinet/in.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <stdint.h>

#include "src/basic/error.h"

#define DM_PREVIEW_CODE_LEN 32    /* hex digits of a one-time code */
#define DM_PREVIEW_MAX_CONNS 32   /* connections one preview relays at once */
#define DM_PREVIEW_HEAD_MAX 16384 /* bytes of the first request head, then 431 */

struct dm_preview;

struct dm_endpoint;
struct dm_preview_upstream;

/* Opens a preview of port (1..65535) in the network namespace of pid (the
 * sandbox's PID 1, pinned by a pidfd), or, with ep, at the server's
 * endpoint of that port (a backend without DM_CAP_HOST_NETNS), on bind (its
 * port 0: the kernel chooses), and starts serving it. ret_code gets its
 * first one-time code. -ESRCH when pid is gone; other -errno with a
 * message. Nothing is left open on an error. */
int dm_preview_open(const struct sockaddr_in *bind, int pid, const struct dm_endpoint *ep, uint16_t port,
                    const char *what, struct dm_preview **ret, char ret_code[DM_PREVIEW_CODE_LEN + 1],
                    struct dm_error *err);
/* A new one-time code (the old one, used or not, no longer works); the
 * cookie stays. 0 or -errno (no randomness). */
int dm_preview_new_code(struct dm_preview *p, char ret_code[DM_PREVIEW_CODE_LEN + 1]);
/* The host address it listens on. */
void dm_preview_address(const struct dm_preview *p, struct sockaddr_in *ret);
/* Whether the sandbox's process it relays to still runs. */
bool dm_preview_alive(const struct dm_preview *p);
/* Stops accepting, ends every relayed connection, joins its threads,
 * closes every fd and frees. NULL is fine. */
void dm_preview_close(struct dm_preview *p);

/* expose-endpoint.c: a server's endpoint as a preview's upstream. -EPROTO
 * or -EPROTONOSUPPORT (https) for a URL it cannot relay to, -EHOSTUNREACH
 * when its host does not resolve. */
int dm_preview_upstream_new(const struct dm_endpoint *ep, struct dm_preview_upstream **ret, struct dm_error *err);
void dm_preview_upstream_free(struct dm_preview_upstream *u);
const struct sockaddr *dm_preview_upstream_addr(const struct dm_preview_upstream *u, socklen_t *ret_len);
/* A connection's first request head (NUL-terminated, with its blank line)
 * as the endpoint gets it, malloc'd into *ret. -EINVAL when its target is
 * not an origin-form path or could climb out of the endpoint's path. */
int dm_preview_upstream_head(const struct dm_preview_upstream *u, const char *cookie_name, const char *head, char **ret,
                             size_t *ret_len);

#endif
