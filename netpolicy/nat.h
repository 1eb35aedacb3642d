/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_NAT_H
#define DM_NETPOLICY_NAT_H

/* Source NAT for the sandboxes' pool, through nf_tables over netlink
 * (libnftnl and libmnl: building nf_tables batches by hand is error-prone,
 * and both are Debian's): one table `ip demesne` with a postrouting nat
 * chain and one rule, "from the pool, to outside the pool: masquerade".
 * Without it, a sandbox's packets leave the host with a 10.213.x.x source
 * that nothing routes back. The table belongs to demesne alone; no other
 * table, chain or interface is touched. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netpolicy/link.h"
#include "src/basic/error.h"

#define DM_NAT_TABLE "demesne"

/* Creates the table, chain and rule, replacing the chain's rules (one
 * atomic batch): idempotent, and a changed pool replaces the old rule. */
int dm_nat_ensure(const struct dm_cidr *pool, struct dm_error *err);

/* Deletes the table (and so its chain and rule). Not there is not an error. */
int dm_nat_remove(struct dm_error *err);

/* Whether the table exists. */
bool dm_nat_present(void);

/* The guard: a table `inet demesne_guard` that keeps sandboxes off the
 * host itself, whatever addresses the host has or gets later (the kernel's
 * fib lookup decides "local" per packet, so nothing needs refreshing). For
 * packets that arrive on an interface whose name starts with "dm-" (the
 * host side of a sandbox's pair, netpolicy/link.h):
 *   input:   TCP to one of ports[] on an address of that same interface
 *            (the sandbox's own proxy ports) passes; anything else to a
 *            local address (fib daddr type local) is dropped;
 *   forward: IPv6 is dropped, and IPv4 to the pool (another sandbox).
 * Both base chains have priority -10 and policy accept: they only drop.
 * Idempotent (one atomic batch that replaces the chains' rules). */
#define DM_GUARD_TABLE "demesne_guard"
#define DM_GUARD_IFPREFIX "dm-"
int dm_guard_ensure(const struct dm_cidr *pool, const uint16_t *ports, size_t n_ports, struct dm_error *err);
int dm_guard_remove(struct dm_error *err);
bool dm_guard_present(void);

/* The same on a table of another name (tests use their own). */
int dm_nat_ensure_in(const char *table, const struct dm_cidr *pool, struct dm_error *err);
int dm_nat_remove_in(const char *table, struct dm_error *err);
bool dm_nat_present_in(const char *table);
int dm_guard_ensure_in(const char *table, const char *ifprefix, const struct dm_cidr *pool, const uint16_t *ports,
                       size_t n_ports, struct dm_error *err);
int dm_guard_remove_in(const char *table, struct dm_error *err);
bool dm_guard_present_in(const char *table);

#endif
