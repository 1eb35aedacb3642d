/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_H
#define DM_NETPOLICY_H

/* The egress modes of a sandbox: none (loopback only), package-managers
 * (the egress proxy, to the package registries), open (anything public).
 * netpolicy/policy.h parses a mode and its allow entries; the rest of this
 * folder enforces them. A header only: the names live in policy.c. */

enum dm_egress {
        DM_EGRESS_NONE,
        DM_EGRESS_PACKAGE_MANAGERS,
        DM_EGRESS_OPEN,
};

/* The names a tool schema lists, NULL-terminated. */
extern const char *const dm_egress_names[];

#endif
