/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_NETNS_H
#define DM_NETPOLICY_NETNS_H

/* Listening sockets made inside a container's own network namespace, for a
 * sandbox that has no device but lo (rootless: NetworkMode none, no veth).
 * A single-threaded child joins the container's user namespace (when it is
 * not the server's) and network namespace, brings lo up, adds AnyIP local
 * routes (`local CIDR dev lo`, table local) so that connects to those
 * networks land on lo, binds and listens, and passes the sockets back over
 * SCM_RIGHTS. The server then serves them from its own namespace: only its
 * listeners lead out of the sandbox. See docs/explanation/egress.md. */

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "netpolicy/link.h"
#include "src/basic/error.h"

#define DM_NETNS_MAX_LISTEN 32
#define DM_NETNS_MAX_ROUTES 64

/* Makes n listeners (TCP, SO_REUSEADDR, backlog 128, close-on-exec and
 * non-blocking) bound to addrs[i] inside the network namespace of pid, and
 * the local routes for routes[]. ret_fds[i] gets each socket. The pid is
 * pinned with a pidfd while its namespace files are opened, so a recycled
 * pid cannot redirect this. The child is reaped before return (a time-out
 * kills it). On error nothing is left open. */
int dm_netns_listen(int pid, const struct sockaddr_in *addrs, size_t n, const struct dm_cidr *routes, size_t n_routes,
                    int *ret_fds, struct dm_error *err);
/* The same with addrs NULL and no routes: n unconnected TCP sockets of that
 * namespace (a connect on one reaches the sandbox's own loopback; lo is left
 * as the engine set it up). */
#define dm_netns_sockets(pid, n, ret_fds, err) dm_netns_listen((pid), NULL, (n), NULL, 0, (ret_fds), (err))

#endif
