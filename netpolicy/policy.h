/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_POLICY_H
#define DM_NETPOLICY_POLICY_H

/* The egress policy of one sandbox: a mode and the caller's `allow` entries,
 * split by who enforces them. Address rules (`CIDR`, `CIDR:port`, bare IPv4
 * addresses) go to the tc filter (netpolicy/bpf.h) and to the sandbox's
 * routes; name rules (`host`, `*.host`, with or without `:port`) go to the
 * egress proxy, which resolves names on the host. IPv4 only. */

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netpolicy/netpolicy.h"
#include "src/basic/error.h"

/* Limits on what a caller may send: entries per policy and bytes per entry
 * (a DNS name is at most 253 bytes, plus ":65535"). */
#define DM_POLICY_MAX_ENTRIES 256
#define DM_POLICY_ENTRY_MAX 260

/* An address rule. `net` has no host bits set. port 0 allows every protocol
 * and port to the network (fragments included); a port allows TCP and UDP to
 * that port only (UDP too, so that `resolver:53` makes DNS work). */
struct dm_policy_cidr {
        struct in_addr net; /* network byte order */
        uint8_t prefix;     /* 0..32 */
        uint16_t port;      /* host byte order, 0 = any */
};

/* A name rule for the proxy. `host` is lowercase, without a trailing dot and
 * without the "*." of a wildcard. A wildcard matches strict subdomains of
 * host only (`*.example.com` matches `a.example.com`, not `example.com`). */
struct dm_policy_name {
        char *host;
        bool wildcard;
        uint16_t port; /* host byte order, 0 = any */
};

struct dm_policy {
        enum dm_egress mode;
        struct dm_policy_cidr *cidrs;
        size_t n_cidrs;
        struct dm_policy_name *names;
        size_t n_names;
};

/* flags of dm_policy_parse */
#define DM_POLICY_CALLER_ALLOWED \
        0x1u /* the server accepts caller `allow` entries
                                       * (DEMESNE_ALLOW_CALLER_EGRESS=1, src/core/settings.h) */

/* Parses a mode (NULL means "none") and a NULL-terminated list of allow
 * entries (NULL for none). Fails with -EINVAL and a message that quotes the
 * entry for an unknown mode or a malformed or IPv6 entry, or one that
 * overlaps (contains or lies in) a blocked range of netpolicy/blocked.h (the
 * message names the range and why it is blocked); with -EPERM when there are
 * entries and flags lack DM_POLICY_CALLER_ALLOWED; with -E2BIG past the
 * limits above. On success *ret_policy is a new policy for dm_policy_free.
 * With mode "none", allow entries make an allowlist: only those entries. */
int dm_policy_parse(const char *mode, const char *const *allow, unsigned flags, struct dm_policy **ret_policy,
                    struct dm_error *err);

/* True when the policy needs any network beyond loopback (a veth, a filter). */
bool dm_policy_needs_network(const struct dm_policy *p);

/* Frees p; accepts NULL. */
void dm_policy_free(struct dm_policy *p);

/* A deep copy of p in *ret_policy (for dm_policy_free): what holds a
 * policy beyond its parser's caller keeps its own copy, never a text to
 * parse again. -ENOMEM. */
int dm_policy_dup(const struct dm_policy *p, struct dm_policy **ret_policy);

#endif
