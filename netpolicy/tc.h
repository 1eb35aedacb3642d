/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_TC_H
#define DM_NETPOLICY_TC_H

/* Puts a compiled egress filter (netpolicy/bpf.h) on the ingress of one
 * interface through netlink: a clsact qdisc (libnl rtnl_qdisc) and a cls_bpf
 * filter in direct-action mode (a hand-built RTM_NEWTFILTER: libnl has no
 * cls_bpf API). Everything happens in the network namespace of the calling
 * thread; ifindex is an index there.
 *
 * Callers pass only interfaces the server created (the host side of a
 * sandbox's veth, found by ifindex): a filter on any other interface could
 * cut the machine off. Attach before the sandbox can send: until the filter
 * is in place the link carries everything.
 *
 * sk: a connected NETLINK_ROUTE socket to use, or NULL to open one for the
 * call. Errors: negative errno (libnl's codes converted) with a message that
 * names the interface index. */

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>

#include "src/basic/error.h"

struct nl_sock;

/* The filter's place: one filter per interface, at this priority and handle. */
#define DM_TC_PRIO 1
#define DM_TC_HANDLE 1

/* Adds the clsact qdisc if missing, then adds the filter or replaces the one
 * already there (a policy change swaps the program atomically). The kernel
 * keeps no name for a classic BPF program: ours is known by its place. */
int dm_tc_attach_ingress(struct nl_sock *sk, int ifindex, const struct sock_filter *prog, size_t len,
                         struct dm_error *err);

/* Removes the clsact qdisc and with it every filter on it. Succeeds when
 * there is nothing to remove or the interface is gone. */
int dm_tc_detach_ingress(struct nl_sock *sk, int ifindex, struct dm_error *err);

/* Reads what is attached: whether a clsact qdisc exists, and the length in
 * instructions of the cls_bpf filter at our place on its ingress (0: none). */
int dm_tc_query_ingress(struct nl_sock *sk, int ifindex, bool *ret_clsact, size_t *ret_filter_len,
                        struct dm_error *err);

#endif
