/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_LINK_H
#define DM_NETPOLICY_LINK_H

/* A sandbox's network, through netlink only (libnl-route): a veth pair
 * whose host side the server creates, names and owns, and whose peer is
 * created directly in the container's network namespace as eth0, with a
 * /30 from a private pool. Inside, only the routes the policy allows go
 * to the host side; the default route is `prohibit`, so a connect to
 * anything else fails at once (EACCES) instead of timing out.
 *
 * The host side carries an alias "demesne <tag> <owner>", which is how a
 * later server tells its links from anyone else's: it never touches an
 * interface without that alias. When the container's namespace goes away
 * (the container stops or is removed) the kernel removes the pair. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <net/if.h>

#include "src/basic/error.h"

#define DM_NETLINK_ALIAS_PREFIX "demesne "
#define DM_NETLINK_POOL_DEFAULT "10.213.0.0/16"
/* One lock for every server on the machine (egress needs root): two must
 * not pick the same /30. */
#define DM_NETLINK_LOCK "/run/demesne-netpolicy.lock"

struct dm_cidr {
        uint32_t addr; /* network byte order */
        int prefix;    /* 0..32 */
};

/* "10.1.2.0/24" or "10.1.2.3" (a /32). -EINVAL with a message otherwise. */
int dm_cidr_parse(const char *s, struct dm_cidr *ret, struct dm_error *err);
bool dm_cidr_overlap(const struct dm_cidr *a, const struct dm_cidr *b);

struct dm_netlink_spec {
        int container_pid;            /* the container's PID 1, as the engine reports it */
        const char *tag;              /* the run or sandbox id: in the alias and the name */
        const char *owner;            /* the owning server's label value; "-" for none */
        struct dm_cidr pool;          /* where the /30 comes from */
        const struct dm_cidr *routes; /* routed through the host side */
        size_t n_routes;
        bool default_via_host; /* `open`: the default route too, instead of prohibit */
        const char *lock_path; /* a file to flock while choosing the /30 (may be NULL) */
};

struct dm_netlink {
        char host_ifname[IF_NAMESIZE];
        int host_ifindex;
        uint32_t host_addr; /* network byte order: the host side, the sandbox's gateway */
        uint32_t peer_addr; /* the sandbox's eth0 */
        /* A sandbox without a pair (rootless, netns.h): no host_ifname,
         * host_addr 127.0.0.1 (the sandbox's own loopback) and, > 0, the
         * vendor proxy's socket listening there (owned by the egress run). */
        int vendor_fd;
};

/* Creates and configures the pair. On error nothing is left behind. */
int dm_netlink_setup(const struct dm_netlink_spec *spec, struct dm_netlink *ret, struct dm_error *err);

/* Removes the pair by its host side, after checking the alias names tag.
 * A link that is already gone is not an error. */
int dm_netlink_teardown(const char *host_ifname, const char *tag, struct dm_error *err);

/* Whether host_ifname exists and its alias names tag. */
bool dm_netlink_exists(const char *host_ifname, const char *tag);

/* Refuses a pool that overlaps a route of the host's main table (other
 * than the routes of demesne's own links), with a message naming it. */
int dm_netlink_pool_check(const struct dm_cidr *pool, struct dm_error *err);

/* The host-side links demesne made (alias prefix), for clean-up: calls fn
 * with each one's name, tag and owner. Returns how many or -errno. */
int dm_netlink_list(void (*fn)(void *userdata, const char *ifname, const char *tag, const char *owner), void *userdata,
                    struct dm_error *err);

/* The host's own IPv4 addresses (every interface), for the filter to
 * block. *ret is malloc'ed. */
int dm_netlink_host_addrs(uint32_t **ret, size_t *ret_n, struct dm_error *err);

/* "dm-" and 10 hex digits of a hash of tag: unique enough, at most 13
 * characters. */
void dm_netlink_ifname(const char *tag, char buf[IF_NAMESIZE]);

#endif
