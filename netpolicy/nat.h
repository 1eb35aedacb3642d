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

#include "netpolicy/link.h"
#include "src/util/error.h"

#define DM_NAT_TABLE "demesne"

/* Creates the table, chain and rule, replacing the chain's rules (one
 * atomic batch): idempotent, and a changed pool replaces the old rule. */
int dm_nat_ensure(const struct dm_cidr *pool, struct dm_error *err);

/* Deletes the table (and so its chain and rule). Not there is not an error. */
int dm_nat_remove(struct dm_error *err);

/* Whether the table exists. */
bool dm_nat_present(void);

/* The same on a table of another name (tests use their own). */
int dm_nat_ensure_in(const char *table, const struct dm_cidr *pool, struct dm_error *err);
int dm_nat_remove_in(const char *table, struct dm_error *err);
bool dm_nat_present_in(const char *table);

#endif
