/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/egress.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "netpolicy/blocked.h"
#include "netpolicy/bpf.h"
#include "netpolicy/nat.h"
#include "netpolicy/netns.h"
#include "netpolicy/proxy.h"
#include "netpolicy/tc.h"
#include "src/core/activity.h"
#include "src/core/launch.h"
#include "src/core/settings.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/paths.h"
#include "src/basic/timeutil.h"

struct dm_egress_run {
        char tag[128];
        struct dm_netlink net;
        struct dm_proxy_sandbox *proxy;
        struct dm_proxy_sandbox *relay[DM_NETNS_MAX_LISTEN]; /* CIDR:port listeners in the sandbox's namespace */
        size_t n_relay;
        char **env;
        struct dm_activity_egress *journal; /* the proxies' decisions, for the run journal */
};

/* The public PyPI, conda and Go module proxy hosts: package-managers gets
 * them whatever the image says. */
static const char *const builtin_package_hosts[] = {
        "pypi.org",
        "files.pythonhosted.org",
        "repo.anaconda.com",
        "conda.anaconda.org",
        "proxy.golang.org",
        "sum.golang.org",
        NULL,
};

/* For an image built before images/build.sh labelled its hosts. */
static const char fallback_image_hosts[] = "deb.debian.org,security.debian.org";

static const char *package_hosts[64];
static char package_buf[2048];

static void package_hosts_init(void)
{
        size_t n = 0;
        const char *extra = dm_process_settings()->egress_package_hosts;

        for (size_t i = 0; builtin_package_hosts[i]; i++)
                package_hosts[n++] = builtin_package_hosts[i];
        if (extra) {
                snprintf(package_buf, sizeof(package_buf), "%s", extra);
                for (char *save = NULL, *t = strtok_r(package_buf, ", \t", &save); t && n < 63;
                     t = strtok_r(NULL, ", \t", &save))
                        package_hosts[n++] = t;
        }
        package_hosts[n] = NULL;
}

const char *const *dm_egress_package_hosts(void)
{
        static pthread_once_t once = PTHREAD_ONCE_INIT;

        pthread_once(&once, package_hosts_init);
        return package_hosts;
}

const char *dm_egress_why_none(struct dm_context *ctx)
{
        struct dm_error err = { 0 };
        struct dm_backend *b;

        if (dm_context_backend(ctx, &b, &err) < 0)
                return "no engine"; /* the call fails on the engine anyway */
        if (!(b->ops->caps & DM_CAP_HOST_NETNS))
                return "the backend's containers are not on this host";
        if (!dm_launch_use_shim(ctx, b))
                return "demesne-shim is off (DEMESNE_SHIM=off)";
        return NULL;
}

void dm_egress_offer(struct dm_context *ctx, struct dm_egress_offer *ret)
{
        struct dm_error err = { 0 };
        struct dm_backend *b = NULL;
        const char *mode = ctx->cfg.opensandbox_egress;

        memset(ret, 0, sizeof(*ret));
        if (dm_context_backend(ctx, &b, &err) < 0 || dm_backend_can(b, DM_CAP_HOST_NETNS)) {
                ret->why = dm_egress_why_none(ctx);
                ret->none = true;
                ret->package_managers = ret->open = ret->allow = !ret->why;
                if (ret->why && !b)
                        ret->fix = "start the container engine";
                else if (ret->why)
                        ret->fix = "unset DEMESNE_SHIM (demesne-shim sets the sandbox's network up)";
                return;
        }
        /* OpenSandbox: its sidecar holds the policy, or nothing does. */
        if (!ctx->cfg.shim_off) {
                ret->why = "the opensandbox backend cannot run demesne-shim, and refuses every call until "
                           "DEMESNE_SHIM=off accepts the server's own seccomp profile";
                ret->fix = "set DEMESNE_SHIM=off";
                return;
        }
        ret->open = true;
        if (mode && strcmp(mode, "dns+nft") == 0) {
                ret->none = ret->package_managers = ret->allow = ret->none_reaches_dns = true;
                return;
        }
        if (mode && strcmp(mode, "none") == 0) {
                ret->why = "the OpenSandbox server has no egress sidecar (DEMESNE_OPENSANDBOX_EGRESS=none), so "
                           "only 'open' (the server's own network) can be had";
        } else {
                ret->why = "the OpenSandbox server's egress sidecar runs in mode \"dns\" "
                           "(DEMESNE_OPENSANDBOX_EGRESS unset or dns), which filters name lookups only, so only "
                           "'open' (the server's own network) can be had";
        }
        ret->fix = "set mode = \"dns+nft\" (and an egress image) in the [egress] section of the server's "
                   "config.toml, then DEMESNE_OPENSANDBOX_EGRESS=dns+nft";
}

/* ctx->egress. */
struct dm_egress_host {
        pthread_mutex_t lock;   /* guards the rest */
        struct dm_proxy *proxy; /* the egress proxy, made on first use */
        bool nat_done;          /* the pool's source NAT is in place */
};

struct dm_egress_host *dm_egress_host_new(void)
{
        struct dm_egress_host *h = calloc(1, sizeof(*h));

        if (h)
                pthread_mutex_init(&h->lock, NULL);
        return h;
}

void dm_egress_host_free(struct dm_egress_host *h)
{
        if (!h)
                return;
        pthread_mutex_destroy(&h->lock);
        free(h);
}

const char *dm_egress_default(struct dm_context *ctx)
{
        static bool told;
        const char *why = dm_egress_why_none(ctx);

        if (!why)
                return "package-managers";
        pthread_mutex_lock(&ctx->egress->lock);
        if (!told)
                log_info("egress defaults to none instead of package-managers: %s", why);
        told = true;
        pthread_mutex_unlock(&ctx->egress->lock);
        return "none";
}

bool dm_egress_needed(const struct dm_policy *policy)
{
        return policy && dm_policy_needs_network(policy);
}

bool dm_egress_backend_open(struct dm_backend *b, const struct dm_policy *policy)
{
        return b && policy && policy->mode == DM_EGRESS_OPEN && policy->n_cidrs == 0 && policy->n_names == 0 &&
               !dm_backend_can(b, DM_CAP_HOST_NETNS);
}

/* The server's one proxy, made on first use. */
static int proxy_of(struct dm_context *ctx, struct dm_proxy **ret, struct dm_error *err)
{
        int r = 0;

        pthread_mutex_lock(&ctx->egress->lock);
        if (!ctx->egress->proxy) {
                struct dm_proxy_limits l;

                dm_proxy_limits_default(&l);
                r = dm_proxy_new(&l, ctx->cfg.proxy_hosts, &ctx->egress->proxy, err);
        }
        *ret = ctx->egress->proxy;
        pthread_mutex_unlock(&ctx->egress->lock);
        return r;
}

/* "host" (web ports only) or "host:port" (that port) from the operator. */
static int add_package_host(struct dm_proxy_policy *pp, const char *h, struct dm_error *err)
{
        const char *colon = strchr(h, ':');
        char name[300];
        char *end;
        unsigned long port;

        if (!colon)
                return dm_proxy_policy_add_web_host(pp, h, err);
        port = strtoul(colon + 1, &end, 10);
        if (colon == h || (size_t)(colon - h) >= sizeof(name) || *end || port == 0 || port > 65535)
                return dm_error_set(err, -EINVAL, "'%s' is not host or host:port", h);
        snprintf(name, sizeof(name), "%.*s", (int)(colon - h), h);
        return dm_proxy_policy_add_host(pp, name, (uint16_t)port, err);
}

static int proxy_policy(const struct dm_policy *policy, const char *image_hosts, struct dm_proxy_policy *pp,
                        struct dm_error *err)
{
        int r = 0;

        dm_proxy_policy_init(pp);
        for (size_t i = 0; r >= 0 && i < policy->n_names; i++) {
                char pattern[300];

                snprintf(pattern, sizeof(pattern), "%s%s", policy->names[i].wildcard ? "*." : "",
                         policy->names[i].host);
                r = dm_proxy_policy_add_host(pp, pattern, policy->names[i].port, err);
        }
        for (size_t i = 0; r >= 0 && i < policy->n_cidrs; i++)
                r = dm_proxy_policy_add_cidr(pp, policy->cidrs[i].net, policy->cidrs[i].prefix, policy->cidrs[i].port,
                                             err);
        /* open through the proxy (a sandbox without a pair): any name,
         * any address that is not blocked (checked before the rules). */
        if (r >= 0 && policy->mode == DM_EGRESS_OPEN) {
                pp->any_name = true;
                r = dm_proxy_policy_add_cidr(pp, (struct in_addr){ 0 }, 0, 0, err);
        }
        if (r >= 0 && policy->mode == DM_EGRESS_PACKAGE_MANAGERS) {
                char buf[2048];

                /* Package hosts are web hosts: 443 by CONNECT, 80 by plain
                 * HTTP; only the operator's list may name another port. */
                for (const char *const *h = dm_egress_package_hosts(); r >= 0 && *h; h++)
                        r = add_package_host(pp, *h, err);
                if (r < 0)
                        dm_error_wrap(err, "DEMESNE_EGRESS_PACKAGE_HOSTS");
                snprintf(buf, sizeof(buf), "%s", image_hosts && *image_hosts ? image_hosts : fallback_image_hosts);
                for (char *save = NULL, *t = strtok_r(buf, ", ", &save); r >= 0 && t; t = strtok_r(NULL, ", ", &save))
                        r = dm_proxy_policy_add_web_host(pp, t, err);
                if (r < 0)
                        dm_error_wrap(err, "the image's label demesne.package-hosts");
        }
        if (r < 0)
                dm_proxy_policy_release(pp);
        return r;
}

/* Where the sandbox's proxies count their decisions: the run journal under
 * the state directory (the run's id is its output directory's name), which
 * no sandbox writes, unlike egress.log in its /out. */
static struct dm_egress_tally *journal_of(struct dm_context *ctx, struct dm_egress_run *e, const char *outdir)
{
        if (!e->journal)
                e->journal =
                        dm_activity_egress_new(ctx->cfg.state_dir, ctx->cfg.activity_days, dm_path_basename(outdir));
        return dm_activity_egress_tally(e->journal);
}

/* The listener on the host side of the pair, and the sandbox's environment. */
static int start_proxy(struct dm_context *ctx, const struct dm_policy *policy, const char *image_hosts,
                       struct dm_egress_run *e, const char *outdir, int listen_fd, struct dm_error *err)
{
        struct dm_proxy_policy pp;
        struct dm_proxy *proxy;
        struct sockaddr_in bound;
        char path[PATH_MAX];
        int dirfd, logfd, r;

        r = proxy_of(ctx, &proxy, err);
        if (r < 0)
                return r;
        r = proxy_policy(policy, image_hosts, &pp, err);
        if (r < 0)
                return r;
        /* The sandbox writes this directory: never follow what it put at
         * egress.log, and never block on a FIFO there (adoption runs under
         * the shim lock). */
        snprintf(path, sizeof(path), "%s/egress.log", outdir);
        dirfd = dm_io_open_dir(outdir);
        logfd = dirfd < 0 ? dirfd : dm_io_open_beneath(dirfd, "egress.log", O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (dirfd >= 0)
                close(dirfd);
        if (logfd < 0)
                log_warning("%s: cannot open '%s' (%s): proxy decisions go unlogged", e->tag, path,
                            dm_io_strerror(logfd));
        struct dm_proxy_sandbox_conf conf = {
                .id = e->tag,
                .listen = { .sin_family = AF_INET,
                            .sin_port = htons(DM_EGRESS_PROXY_PORT),
                            .sin_addr.s_addr = e->net.host_addr },
                .listen_fd = listen_fd,
                /* A listener in the sandbox's own namespace (listen_fd) is
                 * reachable from that sandbox only: any source. */
                .source = { .s_addr = listen_fd > 0 ? htonl(INADDR_ANY) : e->net.peer_addr },
                .policy = &pp,
                .log_fd = logfd,
                .tally = journal_of(ctx, e, outdir),
        };
        r = dm_proxy_add(proxy, &conf, &e->proxy, err);
        if (logfd >= 0)
                close(logfd);
        dm_proxy_policy_release(&pp);
        if (r < 0)
                return dm_error_wrap(err, "start the egress proxy");
        dm_proxy_sandbox_address(e->proxy, &bound);
        if (dm_proxy_env(&bound, &e->env) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        return 0;
}

static int attach_filter(const struct dm_policy *policy, struct dm_egress_run *e, uint16_t vendor_port,
                         struct dm_error *err)
{
        struct sock_filter *prog = NULL;
        uint32_t *addrs = NULL;
        size_t n_addrs = 0, len = 0;
        int r;

        r = dm_netlink_host_addrs(&addrs, &n_addrs, err);
        if (r < 0)
                return r;
        struct dm_bpf_host host = {
                .proxy_addr = { .s_addr = e->net.host_addr },
                .proxy_port = DM_EGRESS_PROXY_PORT,
                .vendor_port = vendor_port,
                .host_addrs = (const struct in_addr *)addrs,
                .n_host_addrs = n_addrs,
        };
        r = dm_bpf_compile(policy, &host, &prog, &len, err);
        if (r >= 0)
                r = dm_tc_attach_ingress(NULL, e->net.host_ifindex, prog, len, err);
        free(prog);
        free(addrs);
        return r < 0 ? dm_error_wrap(err, "attach the egress filter") : 0;
}

static void egress_free(struct dm_egress_run *e)
{
        if (e) {
                if (e->net.vendor_fd > 0)
                        close(e->net.vendor_fd);
                dm_proxy_env_free(e->env);
                dm_activity_egress_free(e->journal); /* its proxies are gone: the last flush */
                free(e);
        }
}

/* The pool's source NAT, made sure of after the sandbox's pair exists:
 * a server that removes the table (dm_egress_shutdown) does so under the
 * machine-wide lock and only when no pair is left, so once ours exists the
 * table cannot go away under it. Each time, not once per server: another
 * server may have removed it since. */
static int nat_ensured(struct dm_context *ctx, const struct dm_cidr *pool, struct dm_error *err)
{
        int r = dm_nat_ensure(pool, err);

        pthread_mutex_lock(&ctx->egress->lock);
        ctx->egress->nat_done |= r >= 0;
        pthread_mutex_unlock(&ctx->egress->lock);
        return r;
}

/* The nf_tables guard that keeps every sandbox off the host's own
 * addresses (those it gets later too) and off other sandboxes. Made sure of
 * for each sandbox, since another server may have removed it: written once
 * per server and pool (replacing its rules costs ~15 ms of RCU grace), then
 * only looked for (a netlink round trip). */
static int guard_ensured(struct dm_context *ctx, const struct dm_cidr *pool, struct dm_error *err)
{
        static const uint16_t ports[] = { DM_EGRESS_PROXY_PORT, DM_EGRESS_VENDOR_PORT };
        static struct dm_cidr written = { .prefix = -1 };
        int r = 0;

        pthread_mutex_lock(&ctx->egress->lock);
        if (written.prefix != pool->prefix || written.addr != pool->addr || !dm_guard_present()) {
                r = dm_guard_ensure(pool, ports, sizeof(ports) / sizeof(ports[0]), err);
                if (r >= 0)
                        written = *pool;
        }
        ctx->egress->nat_done |= r >= 0;
        pthread_mutex_unlock(&ctx->egress->lock);
        return r;
}

/* The pool against the host's routes: once per server (and pool), not per
 * sandbox; a route added later is caught by the next server. */
static int pool_checked(struct dm_context *ctx, const struct dm_cidr *pool, struct dm_error *err)
{
        static struct dm_cidr checked;
        static bool ok;
        int r = 0;

        pthread_mutex_lock(&ctx->egress->lock);
        if (!ok || checked.addr != pool->addr || checked.prefix != pool->prefix) {
                r = dm_netlink_pool_check(pool, err);
                ok = r >= 0;
                checked = *pool;
        }
        pthread_mutex_unlock(&ctx->egress->lock);
        return r;
}

/* The CIDR:port listeners of a sandbox without a pair: one per port, on
 * 0.0.0.0 in its namespace, each relaying (transparent) what the CIDR rules
 * let through. Takes every fd in fds. */
static int start_relays(struct dm_context *ctx, const struct dm_policy *policy, struct dm_egress_run *e,
                        const char *outdir, int *fds, size_t n, struct dm_error *err)
{
        struct dm_proxy_policy pp;
        struct dm_proxy *proxy;
        int r, logfd = -1;

        if (n == 0)
                return 0;
        r = proxy_of(ctx, &proxy, err);
        if (r >= 0)
                r = proxy_policy(policy, NULL, &pp, err);
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        close(fds[i]);
                return r;
        }
        int dirfd = dm_io_open_dir(outdir);
        if (dirfd >= 0) {
                logfd = dm_io_open_beneath(dirfd, "egress.log", O_WRONLY | O_APPEND | O_CREAT, 0644);
                close(dirfd);
        }
        for (size_t i = 0; i < n; i++) {
                struct dm_proxy_sandbox_conf conf = {
                        .id = e->tag,
                        .listen_fd = fds[i],
                        .source = { .s_addr = htonl(INADDR_ANY) },
                        .policy = &pp,
                        .log_fd = logfd,
                        .transparent = true,
                        .tally = journal_of(ctx, e, outdir),
                };
                if (r >= 0 && (r = dm_proxy_add(proxy, &conf, &e->relay[e->n_relay], err)) >= 0)
                        e->n_relay++;
                close(fds[i]);
        }
        if (logfd >= 0)
                close(logfd);
        dm_proxy_policy_release(&pp);
        return r < 0 ? dm_error_wrap(err, "start the relay of an allowed CIDR:port") : 0;
}

int dm_egress_start_in_netns(struct dm_context *ctx, const struct dm_policy *policy, const char *tag, int pid,
                             const char *image_hosts, const char *outdir, uint16_t vendor_port,
                             struct dm_egress_run **ret, struct dm_error *err)
{
        struct sockaddr_in addrs[DM_NETNS_MAX_LISTEN];
        struct dm_cidr routes[DM_NETNS_MAX_ROUTES];
        int fds[DM_NETNS_MAX_LISTEN];
        size_t n = 0, n_routes = 0, first_relay;
        bool proxy = dm_egress_needed(policy);
        struct dm_egress_run *e;
        int64_t t0 = dm_now_ms();
        int r;

        *ret = NULL;
#define LOOPBACK(port)                                                                                    \
        (struct sockaddr_in)                                                                              \
        {                                                                                                 \
                .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK) \
        }
        if (proxy)
                addrs[n++] = LOOPBACK(DM_EGRESS_PROXY_PORT);
        if (vendor_port)
                addrs[n++] = LOOPBACK(vendor_port);
#undef LOOPBACK
        first_relay = n;
        /* Raw TCP reaches CIDR:port entries only: a listener per port (once)
         * and a local route per network. A CIDR without a port is for the
         * proxy (CONNECT, absolute-form) only. */
        for (size_t i = 0; proxy && i < policy->n_cidrs; i++) {
                uint16_t port = policy->cidrs[i].port;
                bool seen = false;

                if (!port)
                        continue;
                if (port == DM_EGRESS_PROXY_PORT || port == vendor_port)
                        return dm_error_set(err, -EINVAL,
                                            "allow entry for port %u: that port is the sandbox's own proxy in "
                                            "rootless mode; reach it through the proxy instead",
                                            port);
                for (size_t j = first_relay; j < n; j++)
                        seen = seen || ntohs(addrs[j].sin_port) == port;
                if (!seen) {
                        if (n == DM_NETNS_MAX_LISTEN)
                                return dm_error_set(err, -E2BIG, "too many allowed ports (at most %d)",
                                                    DM_NETNS_MAX_LISTEN - 2);
                        addrs[n++] = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons(port) };
                }
                if (n_routes == DM_NETNS_MAX_ROUTES)
                        return dm_error_set(err, -E2BIG, "too many allowed networks (at most %d)", DM_NETNS_MAX_ROUTES);
                routes[n_routes++] =
                        (struct dm_cidr){ .addr = policy->cidrs[i].net.s_addr, .prefix = policy->cidrs[i].prefix };
        }
        e = calloc(1, sizeof(*e));
        if (!e)
                return dm_error_set(err, -ENOMEM, "out of memory");
        snprintf(e->tag, sizeof(e->tag), "%s", tag);
        e->net.host_addr = htonl(INADDR_LOOPBACK);
        r = dm_netns_listen(pid, addrs, n, routes, n_routes, fds, err);
        if (r < 0) {
                free(e);
                return dm_error_wrap(err, "set up the sandbox's network");
        }
        if (vendor_port)
                e->net.vendor_fd = fds[proxy ? 1 : 0];
        r = start_relays(ctx, policy, e, outdir, fds + first_relay, n - first_relay, err);
        if (r >= 0 && proxy)
                r = start_proxy(ctx, policy, image_hosts, e, outdir, fds[0], err);
        if (proxy)
                close(fds[0]);
        if (r < 0) {
                dm_egress_stop(ctx, e, false);
                return r;
        }
        log_debug("%s: egress %s in the sandbox's namespace (%zu listeners, %zu routes), set up in %lld ms", tag,
                  dm_egress_names[policy->mode], n, n_routes, (long long)(dm_now_ms() - t0));
        *ret = e;
        return 0;
}

int dm_egress_start(struct dm_context *ctx, const struct dm_policy *policy, const char *tag, const char *owner, int pid,
                    const char *image_hosts, const char *outdir, struct dm_egress_run **ret, struct dm_error *err)
{
        return dm_egress_start_vendor(ctx, policy, tag, owner, pid, image_hosts, outdir, 0, ret, err);
}

int dm_egress_start_vendor(struct dm_context *ctx, const struct dm_policy *policy, const char *tag, const char *owner,
                           int pid, const char *image_hosts, const char *outdir, uint16_t vendor_port,
                           struct dm_egress_run **ret, struct dm_error *err)
{
        struct dm_egress_run *e;
        struct dm_cidr *routes = NULL;
        const char *pool_s = ctx->cfg.sandbox_subnet;
        struct dm_cidr pool;
        int64_t t0 = dm_now_ms();
        int r;

        *ret = NULL;
        /* A normal user cannot make a veth pair: the sandbox keeps lo only,
         * and its listeners are made in its own namespace. */
        if (geteuid() != 0 || ctx->cfg.egress_in_netns)
                return dm_egress_start_in_netns(ctx, policy, tag, pid, image_hosts, outdir, vendor_port, ret, err);
        r = dm_cidr_parse(pool_s && *pool_s ? pool_s : DM_NETLINK_POOL_DEFAULT, &pool, err);
        if (r >= 0)
                r = pool_checked(ctx, &pool, err);
        if (r < 0)
                return dm_error_wrap(err, "DEMESNE_SANDBOX_SUBNET");

        e = calloc(1, sizeof(*e));
        routes = calloc(policy->n_cidrs + 1, sizeof(*routes));
        if (!e || !routes) {
                free(e);
                free(routes);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        snprintf(e->tag, sizeof(e->tag), "%s", tag);
        /* Routes per network; the filter judges ports. */
        for (size_t i = 0; i < policy->n_cidrs; i++)
                routes[i] = (struct dm_cidr){ .addr = policy->cidrs[i].net.s_addr, .prefix = policy->cidrs[i].prefix };
        struct dm_netlink_spec spec = {
                .container_pid = pid,
                .tag = tag,
                .owner = owner,
                .pool = pool,
                .routes = routes,
                .n_routes = policy->n_cidrs,
                .default_via_host = policy->mode == DM_EGRESS_OPEN,
                .lock_path = DM_NETLINK_LOCK,
        };
        r = dm_netlink_setup(&spec, &e->net, err);
        free(routes);
        if (r < 0) {
                free(e);
                return dm_error_wrap(err, "set up the sandbox's network");
        }
        /* Traffic that leaves the host directly (open, CIDR rules) needs a
         * source the world routes back to. */
        r = policy->mode == DM_EGRESS_OPEN || policy->n_cidrs ? nat_ensured(ctx, &pool, err) : 0;
        if (r >= 0)
                r = guard_ensured(ctx, &pool, err);
        if (r >= 0)
                r = attach_filter(policy, e, vendor_port, err);
        /* open goes out directly: no proxy, no proxy variables. */
        if (r >= 0 && policy->mode != DM_EGRESS_OPEN)
                r = start_proxy(ctx, policy, image_hosts, e, outdir, 0, err);
        if (r < 0) {
                dm_egress_stop(ctx, e, true);
                return r;
        }
        log_debug("%s: egress %s on %s, set up in %lld ms", tag, dm_egress_names[policy->mode], e->net.host_ifname,
                  (long long)(dm_now_ms() - t0));
        *ret = e;
        return 0;
}

int dm_egress_adopt(struct dm_context *ctx, const struct dm_policy *policy, const char *tag,
                    const struct dm_netlink *net, const char *image_hosts, const char *outdir,
                    struct dm_egress_run **ret, struct dm_error *err)
{
        struct dm_egress_run *e = calloc(1, sizeof(*e));
        int r;

        *ret = NULL;
        if (!e)
                return dm_error_set(err, -ENOMEM, "out of memory");
        snprintf(e->tag, sizeof(e->tag), "%s", tag);
        e->net = *net;
        /* A sandbox made before the guard existed gets it now. */
        struct dm_cidr pool;
        dm_blocked_get_pool(&pool);
        r = guard_ensured(ctx, &pool, err);
        if (r >= 0 && policy->mode != DM_EGRESS_OPEN)
                r = start_proxy(ctx, policy, image_hosts, e, outdir, 0, err);
        if (r < 0) {
                dm_egress_stop(ctx, e, false);
                return r;
        }
        *ret = e;
        return 0;
}

const char *const *dm_egress_env(const struct dm_egress_run *e)
{
        return e ? (const char *const *)e->env : NULL;
}

const struct dm_netlink *dm_egress_net(const struct dm_egress_run *e)
{
        return &e->net;
}

void dm_egress_stop(struct dm_context *ctx, struct dm_egress_run *e, bool remove_link)
{
        struct dm_error err = { 0 };

        if (!e)
                return;
        if (e->proxy || e->n_relay) {
                pthread_mutex_lock(&ctx->egress->lock);
                struct dm_proxy *p = ctx->egress->proxy;
                pthread_mutex_unlock(&ctx->egress->lock);
                dm_proxy_remove(p, e->proxy);
                for (size_t i = 0; i < e->n_relay; i++)
                        dm_proxy_remove(p, e->relay[i]);
        }
        if (remove_link && e->net.host_ifname[0] && dm_netlink_teardown(e->net.host_ifname, e->tag, &err) < 0)
                log_warning("%s: %s", e->tag, err.msg);
        egress_free(e);
}

void dm_egress_shutdown(struct dm_context *ctx)
{
        struct dm_error err = { 0 };

        pthread_mutex_lock(&ctx->egress->lock);
        struct dm_proxy *p = ctx->egress->proxy;
        bool nat = ctx->egress->nat_done;
        ctx->egress->proxy = NULL;
        ctx->egress->nat_done = false;
        pthread_mutex_unlock(&ctx->egress->lock);
        dm_proxy_free(p);
        /* The NAT table goes with the last sandbox network on the machine
         * (another server's, or a persistent sandbox's, keeps it): whichever
         * server that used egress sees none left removes it. */
        if ((nat || p) && geteuid() == 0) {
                /* Under the lock that sandbox set-ups take: none can add a
                 * pair between the count and the removal. */
                int fd = open(DM_NETLINK_LOCK, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);

                if (fd >= 0 && flock(fd, LOCK_EX) == 0 && dm_netlink_list(NULL, NULL, &err) == 0) {
                        if (dm_nat_present() && dm_nat_remove(&err) < 0)
                                log_warning("%s", err.msg);
                        if (dm_guard_present() && dm_guard_remove(&err) < 0)
                                log_warning("%s", err.msg);
                }
                if (fd >= 0)
                        close(fd);
        }
}
