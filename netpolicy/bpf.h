/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_BPF_H
#define DM_NETPOLICY_BPF_H

/* Compiles a policy into a classic BPF program for a tc clsact ingress
 * filter (cls_bpf, direct action) on the host side of a sandbox's veth: it
 * sees every frame the sandbox sends, Ethernet header at offset 0, and
 * returns TC_ACT_OK (0) to pass or TC_ACT_SHOT (2) to drop. What it checks,
 * in order, is in docs/reference/egress-bpf.md. */

#include <linux/filter.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>

#include "netpolicy/policy.h"
#include "src/basic/error.h"

/* The kernel's limit on a classic BPF program (BPF_MAXINSNS). */
#define DM_BPF_MAX_INSNS 4096

#define DM_BPF_PASS 0 /* TC_ACT_OK */
#define DM_BPF_DROP 2 /* TC_ACT_SHOT */

/* What the filter needs to know of the host. The proxy is reachable by TCP
 * on its port only, from packets without IP options (a source-route option
 * could make the host forward them on); every other packet to the proxy
 * address or to a host address is dropped, whatever the policy says. */
struct dm_bpf_host {
        struct in_addr proxy_addr;        /* network byte order; INADDR_ANY = no proxy */
        uint16_t proxy_port;              /* host byte order */
        uint16_t vendor_port;             /* a second port on the proxy address (the
                                           * vendor proxy of an agent run); 0 = none */
        const struct in_addr *host_addrs; /* the host's own IPv4 addresses */
        size_t n_host_addrs;
};

/* Compiles p for host. On success *ret_prog is a malloc'd array of
 * *ret_len instructions (at most DM_BPF_MAX_INSNS) for free(). Fails with
 * -E2BIG and a message naming the count when the program would be longer
 * than the kernel accepts, -ENOMEM when out of memory. */
int dm_bpf_compile(const struct dm_policy *p, const struct dm_bpf_host *host, struct sock_filter **ret_prog,
                   size_t *ret_len, struct dm_error *err);

#endif
