/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_H
#define DM_NETPOLICY_H

/* Egress policy of a sandbox. Today only `none` is enforced (the container
 * gets NetworkMode none: loopback only); the other modes are parsed and
 * refused with a clear message until the veth/tc/proxy plumbing lands. */

#include <stddef.h>

#include "src/util/error.h"

enum dm_egress {
        DM_EGRESS_NONE,
        DM_EGRESS_PACKAGE_MANAGERS,
        DM_EGRESS_OPEN,
};

/* The names a tool schema lists, NULL-terminated. */
extern const char *const dm_egress_names[];

/* Parses mode and the caller's extra allow entries (netpolicy/policy.h has
 * the full model; this reads DEMESNE_ALLOW_CALLER_EGRESS itself); fails with
 * a message a caller can act on for unknown modes, malformed or refused
 * entries, and for modes not available yet. */
int dm_netpolicy_parse(const char *mode, const char *const *allow, enum dm_egress *ret, struct dm_error *err);

/* The engine's NetworkMode for a policy. */
const char *dm_netpolicy_network_mode(enum dm_egress e);

#endif
