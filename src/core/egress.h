/* SPDX-License-Identifier: MIT */
#ifndef DM_EGRESS_H
#define DM_EGRESS_H

/* A sandbox's egress policy put in place, from the pieces in netpolicy/:
 * the veth pair and the routes inside (link.c), the tc ingress filter on
 * the host side (bpf.c, tc.c) and the sandbox's listener in the server's
 * egress proxy (proxy.c). Called once the container runs (its network
 * namespace exists) and before any command does.
 *
 * The container keeps NetworkMode none: it starts with loopback only, and
 * gets eth0 from here. The pair goes away with the container's namespace;
 * the proxy listener with dm_egress_stop or the server. */

#include <stdbool.h>
#include <stdint.h>

#include "netpolicy/link.h"
#include "netpolicy/policy.h"
#include "src/core/context.h"

#define DM_EGRESS_PROXY_PORT 3128
/* Where an agent run's vendor proxy listens, on the same host-side address. */
#define DM_EGRESS_VENDOR_PORT 3129

struct dm_egress_run;

/* The egress a tool call gets when it names none: package-managers where
 * this server can set a network up (the shim, a backend whose containers'
 * namespaces are on this host; as root or as a normal user), else none, which is stricter,
 * with a notice in the log once. */
const char *dm_egress_default(struct dm_context *ctx);
/* Why the default is none here (no engine, a backend whose containers are
 * not on this host, the shim off), or NULL when sandboxes can have a
 * network: the one place that rule is written. */
const char *dm_egress_why_none(struct dm_context *ctx);

/* The egress modes a call can get on this server with its backend and
 * configuration, before the operator's DEMESNE_ALLOW_CALLER_EGRESS (which
 * the tools add): what the schemas list and doctor reports. */
struct dm_egress_offer {
        bool none, package_managers, open, allow; /* allow: an allow list under none */
        bool none_reaches_dns; /* none still reaches name servers (OpenSandbox's sidecar lets them through) */
        const char *why;       /* why some mode is missing (a sentence), NULL when none is */
        const char *fix;       /* what the operator can do about it, or NULL */
};
/* Fills *ret. The docker backend: every mode where dm_egress_why_none is
 * NULL, else none alone. OpenSandbox: as its egress sidecar can hold them
 * (DEMESNE_OPENSANDBOX_EGRESS: dns+nft every mode, dns or none open
 * alone); nothing at all while demesne-shim is asked for (DEMESNE_SHIM
 * not off), which that backend refuses. */
void dm_egress_offer(struct dm_context *ctx, struct dm_egress_offer *ret);

/* Whether policy needs any of this (anything but plain `none`). */
bool dm_egress_needed(const struct dm_policy *policy);
/* True when backend b keeps its sandboxes' network itself (no namespace on
 * this host: OpenSandbox) and the policy is plain "open": the sandbox gets
 * the backend's default network (network_mode "open") and demesne sets up
 * nothing here. */
bool dm_egress_backend_open(struct dm_backend *b, const struct dm_policy *policy);

/* Puts policy in place for the container whose PID 1 is pid. tag names the
 * run or sandbox (interface alias, logs), owner the server ("-" for a
 * persistent sandbox), and outdir the host directory that gets egress.log.
 * On error nothing is left behind. */
int dm_egress_start(struct dm_context *ctx, const struct dm_policy *policy, const char *tag, const char *owner, int pid,
                    const char *image_hosts, const char *outdir, struct dm_egress_run **ret, struct dm_error *err);
/* The same, with TCP to vendor_port on the host-side address let through
 * as well (an agent run's vendor proxy; 0 = none). The pair is made even
 * for the policy none, whose sandbox then reaches that port and nothing
 * else. */
int dm_egress_start_vendor(struct dm_context *ctx, const struct dm_policy *policy, const char *tag, const char *owner,
                           int pid, const char *image_hosts, const char *outdir, uint16_t vendor_port,
                           struct dm_egress_run **ret, struct dm_error *err);

/* The same without a veth pair, for a sandbox whose namespace has lo only
 * (how dm_egress_start_vendor does it when demesne is not root; callable
 * as root too, for tests): the proxy on 127.0.0.1:3128 and the vendor
 * proxy's socket on 127.0.0.1:vendor_port inside that namespace, and for
 * each CIDR:port rule a local route and a relaying listener on the port.
 * A later server calls it again for an adopted sandbox (the listeners die
 * with the server that made them). */
int dm_egress_start_in_netns(struct dm_context *ctx, const struct dm_policy *policy, const char *tag, int pid,
                             const char *image_hosts, const char *outdir, uint16_t vendor_port,
                             struct dm_egress_run **ret, struct dm_error *err);

/* For a sandbox a later server adopts: the pair and the filter are still
 * there (they live with the container); only the proxy listener comes back. */
int dm_egress_adopt(struct dm_context *ctx, const struct dm_policy *policy, const char *tag,
                    const struct dm_netlink *net, const char *image_hosts, const char *outdir,
                    struct dm_egress_run **ret, struct dm_error *err);

/* What every command in the sandbox gets on top of its environment: the
 * proxy variables (NULL-terminated; owned by e). */
const char *const *dm_egress_env(const struct dm_egress_run *e);
const struct dm_netlink *dm_egress_net(const struct dm_egress_run *e);

/* Stops the proxy listener and removes the pair (when remove_link). NULL
 * is fine. */
void dm_egress_stop(struct dm_context *ctx, struct dm_egress_run *e, bool remove_link);

/* Releases the server's proxy (at exit). */
void dm_egress_shutdown(struct dm_context *ctx);

/* ctx->egress: made by dm_server_init, freed by dm_server_release after
 * dm_egress_shutdown. NULL: no memory. */
struct dm_egress_host *dm_egress_host_new(void);
void dm_egress_host_free(struct dm_egress_host *h);

/* The hosts `package-managers` lets through the proxy besides the image's
 * own (its label demesne.package-hosts, written by images/build.sh from the
 * image's apt, pip, npm, conda and Go settings; image_hosts below): the
 * public PyPI, conda and Go module proxy hosts, plus
 * DEMESNE_EGRESS_PACKAGE_HOSTS (comma or space separated). NULL-terminated,
 * static. */
const char *const *dm_egress_package_hosts(void);

#endif
