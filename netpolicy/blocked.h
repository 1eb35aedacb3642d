/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_BLOCKED_H
#define DM_NETPOLICY_BLOCKED_H

/* The IPv4 destinations no sandbox reaches, whatever its policy: the one
 * table that the policy parser (refuses entries overlapping them), the tc
 * filter (drops them) and the egress proxy (refuses them after resolution
 * and for IP literals) all read. docs/explanation/egress.md lists them.
 *
 *  - always: 0/8, loopback, link-local, multicast, 240/4 and broadcast, and
 *    the cloud metadata addresses outside link-local (100.100.100.200,
 *    168.63.129.16);
 *  - the sandbox pool (DEMESNE_SANDBOX_SUBNET): other sandboxes and the host
 *    side of every pair (the filter lets a sandbox reach only its own proxy
 *    ports on its own host-side address, before this check);
 *  - private ranges (10/8, 172.16/12, 192.168/16, 100.64/10), unless the
 *    operator names a part of them in DEMESNE_EGRESS_ALLOW_PRIVATE.
 *
 * The host's own addresses are not a fixed range: the filter drops those it
 * saw when built, the nf_tables guard (nat.h) drops every local address
 * (kept current by the kernel), and the proxy checks getifaddrs(3) per
 * request.
 *
 * The pool and the operator's private ranges are process-wide state of this
 * module: the server's settings (src/core/settings.c) parse them into a
 * struct dm_blocked_settings, and the server's start hands that to
 * dm_blocked_init once, before any thread reads them. Addresses below are
 * in host byte order. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netpolicy/link.h"
#include "src/basic/error.h"

/* How many ranges DEMESNE_EGRESS_ALLOW_PRIVATE may name. */
#define DM_BLOCKED_MAX_PRIVATE 16

struct dm_blocked_range {
        uint32_t net;
        uint8_t prefix;
        const char *what; /* "loopback (127.0.0.0/8)": for messages */
};

/* The fixed tables. */
extern const struct dm_blocked_range dm_blocked_always[];
extern const size_t dm_blocked_n_always;
extern const struct dm_blocked_range dm_blocked_private[];
extern const size_t dm_blocked_n_private;

/* The process-wide part of the blocklist, as the settings give it. */
struct dm_blocked_settings {
        bool has_pool;       /* false: the default pool, 10.213.0.0/16 */
        bool no_pool;        /* the backend makes no pool (OpenSandbox): nothing to block there */
        struct dm_cidr pool; /* DEMESNE_SANDBOX_SUBNET */
        size_t n_private_allowed;
        struct dm_cidr private_allowed[DM_BLOCKED_MAX_PRIVATE]; /* DEMESNE_EGRESS_ALLOW_PRIVATE */
};

/* Fills *ret from the pool (NULL, empty or malformed: the default; a bad
 * DEMESNE_SANDBOX_SUBNET is reported where egress is set up, so the default
 * stays blocked) and a list of CIDRs (comma or blank separated; NULL or
 * empty = none) that the operator lets sandboxes reach inside the private
 * ranges. -EINVAL with a message naming the entry for a malformed one or one
 * not inside a private range; -E2BIG past DM_BLOCKED_MAX_PRIVATE. Touches no
 * process-wide state. The pool stays blocked whatever the list says. */
int dm_blocked_settings_parse(const char *pool, const char *private_list, struct dm_blocked_settings *ret,
                              struct dm_error *err);
/* Makes s the process's blocklist: once at start, before any thread reads it. */
void dm_blocked_init(const struct dm_blocked_settings *s);

/* The pool whose addresses are blocked (default 10.213.0.0/16). */
void dm_blocked_get_pool(struct dm_cidr *ret);

/* The operator's ranges: up to max into ret; returns the count. */
size_t dm_blocked_get_private_allowed(struct dm_cidr *ret, size_t max);

/* Why addr can never be reached (a description naming the range and the
 * reason), or NULL when it may be. Host addresses are not checked here. */
const char *dm_blocked_why(uint32_t addr);

/* Why an allow entry net/prefix is refused: the first blocked range it
 * overlaps (contains or lies in), described in buf; NULL when none. */
const char *dm_blocked_overlap(uint32_t net, unsigned prefix, char *buf, size_t len);

#endif
