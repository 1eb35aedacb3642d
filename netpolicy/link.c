/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "netpolicy/link.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/rtnetlink.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#define PEER_IFNAME "eth0"

int dm_cidr_parse(const char *s, struct dm_cidr *ret, struct dm_error *err)
{
        char buf[32], *slash, *end;
        struct in_addr a;
        long prefix = 32;

        if (!s || strlen(s) >= sizeof(buf))
                return dm_error_set(err, -EINVAL, "'%.40s' is not an IPv4 address or CIDR", s ? s : "");
        if (strchr(s, ':'))
                return dm_error_set(err, -EINVAL, "'%s': IPv6 is not supported (sandboxes have IPv4 only)", s);
        snprintf(buf, sizeof(buf), "%s", s);
        slash = strchr(buf, '/');
        if (slash) {
                *slash = '\0';
                errno = 0;
                prefix = strtol(slash + 1, &end, 10);
                if (errno || *end || end == slash + 1 || prefix < 0 || prefix > 32)
                        return dm_error_set(err, -EINVAL, "'%s': the prefix length must be 0 to 32", s);
        }
        if (inet_pton(AF_INET, buf, &a) != 1)
                return dm_error_set(err, -EINVAL, "'%s' is not an IPv4 address or CIDR", s);
        ret->prefix = (int)prefix;
        ret->addr = prefix ? a.s_addr & htonl(~0u << (32 - prefix)) : 0;
        return 0;
}

static uint32_t mask_of(int prefix)
{
        return prefix ? htonl(~0u << (32 - prefix)) : 0;
}

bool dm_cidr_overlap(const struct dm_cidr *a, const struct dm_cidr *b)
{
        uint32_t m = mask_of(a->prefix < b->prefix ? a->prefix : b->prefix);
        return (a->addr & m) == (b->addr & m);
}

void dm_netlink_ifname(const char *tag, char buf[IF_NAMESIZE])
{
        uint64_t h = 1469598103934665603ull; /* FNV-1a */

        for (const unsigned char *p = (const unsigned char *)tag; *p; p++)
                h = (h ^ *p) * 1099511628211ull;
        snprintf(buf, IF_NAMESIZE, "dm-%010llx", (unsigned long long)(h & 0xffffffffffull));
}

static int nl_fail(struct dm_error *err, int nlerr, const char *what)
{
        return dm_error_set(err, -EIO, "%s: %s", what, nl_geterror(nlerr));
}

static struct nl_sock *nl_open(struct dm_error *err)
{
        struct nl_sock *sk = nl_socket_alloc();
        int r;

        if (!sk) {
                dm_error_set(err, -ENOMEM, "out of memory");
                return NULL;
        }
        r = nl_connect(sk, NETLINK_ROUTE);
        if (r < 0) {
                nl_fail(err, r, "cannot open a netlink socket");
                nl_socket_free(sk);
                return NULL;
        }
        return sk;
}

/* ---- the alias: "demesne <tag> <owner>" --------------------------------------- */

static bool parse_alias(const char *alias, char *tag, size_t tag_len, char *owner, size_t owner_len)
{
        const char *t, *sp;

        if (!alias || strncmp(alias, DM_NETLINK_ALIAS_PREFIX, strlen(DM_NETLINK_ALIAS_PREFIX)) != 0)
                return false;
        t = alias + strlen(DM_NETLINK_ALIAS_PREFIX);
        sp = strchr(t, ' ');
        if (!sp || (size_t)(sp - t) >= tag_len)
                return false;
        memcpy(tag, t, (size_t)(sp - t));
        tag[sp - t] = '\0';
        snprintf(owner, owner_len, "%s", sp + 1);
        return true;
}

struct list_ctx {
        void (*fn)(void *, const char *, const char *, const char *);
        void *userdata;
        int n;
};

static void list_one(struct nl_object *obj, void *arg)
{
        struct rtnl_link *l = (struct rtnl_link *)obj;
        struct list_ctx *c = arg;
        char tag[128], owner[160];

        if (parse_alias(rtnl_link_get_ifalias(l), tag, sizeof(tag), owner, sizeof(owner))) {
                c->n++;
                if (c->fn)
                        c->fn(c->userdata, rtnl_link_get_name(l), tag, owner);
        }
}

int dm_netlink_list(void (*fn)(void *userdata, const char *ifname, const char *tag, const char *owner), void *userdata,
                    struct dm_error *err)
{
        struct list_ctx c = { .fn = fn, .userdata = userdata };
        struct nl_cache *cache = NULL;
        struct nl_sock *sk = nl_open(err);
        int r;

        if (!sk)
                return err->code;
        r = rtnl_link_alloc_cache(sk, AF_UNSPEC, &cache);
        if (r < 0) {
                nl_socket_free(sk);
                return nl_fail(err, r, "cannot list network interfaces");
        }
        nl_cache_foreach(cache, list_one, &c);
        nl_cache_free(cache);
        nl_socket_free(sk);
        return c.n;
}

/* ---- the pool ------------------------------------------------------------------- */

struct route_scan {
        const struct dm_cidr *pool;
        struct nl_cache *links;
        char hit[64];
};

static bool ours(struct nl_cache *links, int ifindex)
{
        struct rtnl_link *l = links ? rtnl_link_get(links, ifindex) : NULL;
        char tag[128], owner[160];
        bool r = l && parse_alias(rtnl_link_get_ifalias(l), tag, sizeof(tag), owner, sizeof(owner));

        if (l)
                rtnl_link_put(l);
        return r;
}

static void scan_route(struct nl_object *obj, void *arg)
{
        struct rtnl_route *rt = (struct rtnl_route *)obj;
        struct route_scan *s = arg;
        struct nl_addr *dst = rtnl_route_get_dst(rt);
        struct rtnl_nexthop *nh;
        struct dm_cidr c;

        if (s->hit[0] || rtnl_route_get_family(rt) != AF_INET || rtnl_route_get_table(rt) != RT_TABLE_MAIN || !dst)
                return;
        c.prefix = (int)nl_addr_get_prefixlen(dst);
        if (c.prefix == 0)
                return; /* the default route covers everything and collides with nothing */
        memcpy(&c.addr, nl_addr_get_binary_addr(dst), 4);
        c.addr &= mask_of(c.prefix);
        nh = rtnl_route_nexthop_n(rt, 0);
        if (nh && ours(s->links, rtnl_route_nh_get_ifindex(nh)))
                return;
        if (dm_cidr_overlap(&c, s->pool))
                nl_addr2str(dst, s->hit, sizeof(s->hit));
}

int dm_netlink_pool_check(const struct dm_cidr *pool, struct dm_error *err)
{
        struct route_scan s = { .pool = pool };
        struct nl_cache *routes = NULL;
        struct nl_sock *sk;
        char p[INET_ADDRSTRLEN];
        int r;

        if (pool->prefix > 29)
                return dm_error_set(err, -EINVAL, "DEMESNE_SANDBOX_SUBNET must be a /29 or larger");
        sk = nl_open(err);
        if (!sk)
                return err->code;
        r = rtnl_link_alloc_cache(sk, AF_UNSPEC, &s.links);
        if (r >= 0)
                r = rtnl_route_alloc_cache(sk, AF_INET, 0, &routes);
        if (r < 0) {
                r = nl_fail(err, r, "cannot read the host's routes");
                goto out;
        }
        nl_cache_foreach(routes, scan_route, &s);
        inet_ntop(AF_INET, &pool->addr, p, sizeof(p));
        if (s.hit[0])
                r = dm_error_set(err, -EADDRINUSE,
                                 "the sandbox subnet %s/%d overlaps the host's route to %s: set "
                                 "DEMESNE_SANDBOX_SUBNET to a private range the host does not use",
                                 p, pool->prefix, s.hit);
out:
        if (routes)
                nl_cache_free(routes);
        if (s.links)
                nl_cache_free(s.links);
        nl_socket_free(sk);
        return r;
}

struct addr_scan {
        const struct dm_cidr *pool;
        uint8_t *used; /* one byte per /30 of the pool */
        uint32_t n;
};

static void scan_addr(struct nl_object *obj, void *arg)
{
        struct rtnl_addr *a = (struct rtnl_addr *)obj;
        struct addr_scan *s = arg;
        struct nl_addr *local = rtnl_addr_get_local(a);
        uint32_t v;

        if (rtnl_addr_get_family(a) != AF_INET || !local)
                return;
        memcpy(&v, nl_addr_get_binary_addr(local), 4);
        if ((v & mask_of(s->pool->prefix)) != s->pool->addr)
                return;
        v = (ntohl(v) - ntohl(s->pool->addr)) / 4;
        if (v < s->n)
                s->used[v] = 1;
}

/* A free /30 in the pool, starting where the tag's hash points. */
static int pick_subnet(struct nl_sock *sk, const struct dm_netlink_spec *spec, uint32_t *host, uint32_t *peer,
                       struct dm_error *err)
{
        struct addr_scan s = { .pool = &spec->pool };
        struct nl_cache *addrs = NULL;
        uint64_t h = 1469598103934665603ull;
        int r;

        s.n = 1u << (32 - spec->pool.prefix - 2);
        s.used = calloc(s.n, 1);
        if (!s.used)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = rtnl_addr_alloc_cache(sk, &addrs);
        if (r < 0) {
                free(s.used);
                return nl_fail(err, r, "cannot read the host's addresses");
        }
        nl_cache_foreach(addrs, scan_addr, &s);
        nl_cache_free(addrs);
        for (const unsigned char *p = (const unsigned char *)spec->tag; *p; p++)
                h = (h ^ *p) * 1099511628211ull;
        for (uint32_t i = 0; i < s.n; i++) {
                uint32_t k = (uint32_t)((h + i) % s.n);
                /* The pool's first /30 holds its network address: skip it. */
                if (k == 0 || s.used[k])
                        continue;
                *host = htonl(ntohl(spec->pool.addr) + 4 * k + 1);
                *peer = htonl(ntohl(spec->pool.addr) + 4 * k + 2);
                free(s.used);
                return 0;
        }
        free(s.used);
        return dm_error_set(err, -EADDRNOTAVAIL, "no free /30 left in the sandbox subnet (DEMESNE_SANDBOX_SUBNET)");
}

struct addr_list {
        uint32_t *v;
        size_t n, cap;
        bool oom;
};

static void collect_addr(struct nl_object *obj, void *arg)
{
        struct rtnl_addr *a = (struct rtnl_addr *)obj;
        struct nl_addr *local = rtnl_addr_get_local(a);
        struct addr_list *l = arg;

        if (rtnl_addr_get_family(a) != AF_INET || !local || l->oom)
                return;
        if (l->n == l->cap) {
                uint32_t *v = realloc(l->v, (l->cap = l->cap ? 2 * l->cap : 16) * sizeof(*v));
                if (!v) {
                        l->oom = true;
                        return;
                }
                l->v = v;
        }
        memcpy(&l->v[l->n++], nl_addr_get_binary_addr(local), 4);
}

int dm_netlink_host_addrs(uint32_t **ret, size_t *ret_n, struct dm_error *err)
{
        struct addr_list l = { 0 };
        struct nl_cache *addrs = NULL;
        struct nl_sock *sk = nl_open(err);
        int r;

        if (!sk)
                return err->code;
        r = rtnl_addr_alloc_cache(sk, &addrs);
        nl_socket_free(sk);
        if (r < 0)
                return nl_fail(err, r, "cannot read the host's addresses");
        nl_cache_foreach(addrs, collect_addr, &l);
        nl_cache_free(addrs);
        if (l.oom) {
                free(l.v);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        *ret = l.v;
        *ret_n = l.n;
        return 0;
}

/* ---- configuration -------------------------------------------------------------- */

static int add_addr(struct nl_sock *sk, int ifindex, uint32_t local, uint32_t peer_net, struct dm_error *err)
{
        struct rtnl_addr *a = rtnl_addr_alloc();
        struct nl_addr *l = nl_addr_build(AF_INET, &local, 4);
        int r;

        (void)peer_net;
        if (!a || !l) {
                rtnl_addr_put(a);
                nl_addr_put(l);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        nl_addr_set_prefixlen(l, 30);
        rtnl_addr_set_ifindex(a, ifindex);
        rtnl_addr_set_local(a, l);
        r = rtnl_addr_add(sk, a, 0);
        nl_addr_put(l);
        rtnl_addr_put(a);
        return r < 0 ? nl_fail(err, r, "cannot add an address") : 0;
}

static int link_up(struct nl_sock *sk, int ifindex, const char *alias, struct dm_error *err)
{
        struct rtnl_link *orig = rtnl_link_alloc(), *change = rtnl_link_alloc();
        int r;

        if (!orig || !change) {
                rtnl_link_put(orig);
                rtnl_link_put(change);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        rtnl_link_set_ifindex(orig, ifindex);
        rtnl_link_set_flags(change, IFF_UP);
        if (alias)
                rtnl_link_set_ifalias(change, alias);
        r = rtnl_link_change(sk, orig, change, 0);
        rtnl_link_put(orig);
        rtnl_link_put(change);
        return r < 0 ? nl_fail(err, r, "cannot bring a link up") : 0;
}

static int add_route(struct nl_sock *sk, const struct dm_cidr *dst, int type, int ifindex, uint32_t gw,
                     struct dm_error *err)
{
        struct rtnl_route *rt = rtnl_route_alloc();
        struct nl_addr *d = nl_addr_build(AF_INET, &dst->addr, 4);
        struct nl_addr *g = NULL;
        int r;

        if (!rt || !d) {
                rtnl_route_put(rt);
                nl_addr_put(d);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        nl_addr_set_prefixlen(d, dst->prefix);
        rtnl_route_set_family(rt, AF_INET);
        rtnl_route_set_table(rt, RT_TABLE_MAIN);
        rtnl_route_set_type(rt, type);
        rtnl_route_set_dst(rt, d);
        if (type == RTN_UNICAST) {
                struct rtnl_nexthop *nh = rtnl_route_nh_alloc();

                g = nl_addr_build(AF_INET, &gw, 4);
                if (!nh || !g) {
                        rtnl_route_nh_free(nh);
                        r = dm_error_set(err, -ENOMEM, "out of memory");
                        goto out;
                }
                rtnl_route_nh_set_ifindex(nh, ifindex);
                rtnl_route_nh_set_gateway(nh, g);
                rtnl_route_add_nexthop(rt, nh);
        }
        /* REPLACE: a prohibit default outlives an earlier eth0 in the same namespace. */
        r = rtnl_route_add(sk, rt, NLM_F_CREATE | NLM_F_REPLACE);
        if (r < 0) {
                char s[INET_ADDRSTRLEN];

                inet_ntop(AF_INET, &dst->addr, s, sizeof(s));
                r = dm_error_set(err, -EIO, "cannot add the route to %s/%d in the sandbox: %s", s, dst->prefix,
                                 nl_geterror(r));
        }
out:
        nl_addr_put(g);
        nl_addr_put(d);
        rtnl_route_put(rt);
        return r;
}

struct inside {
        const struct dm_netlink_spec *spec;
        const struct dm_netlink *net;
        int nsfd;
        int r;
        struct dm_error err;
};

/* Runs on a thread of its own: setns changes only the calling thread's
 * network namespace, and a netlink socket opened afterwards talks to the
 * container's. Nothing here reads sysfs (it would still be the host's). */
static void *configure_inside(void *arg)
{
        struct inside *in = arg;
        struct rtnl_link *peer = NULL;
        struct nl_sock *sk;
        struct dm_cidr def = { 0, 0 };
        int r, ifindex;

        if (setns(in->nsfd, CLONE_NEWNET) < 0) {
                in->r = dm_error_set(&in->err, -errno, "cannot enter the sandbox's network namespace: %s",
                                     strerror(errno));
                return NULL;
        }
        sk = nl_open(&in->err);
        if (!sk) {
                in->r = in->err.code;
                return NULL;
        }
        r = rtnl_link_get_kernel(sk, 0, PEER_IFNAME, &peer);
        if (r < 0) {
                in->r = nl_fail(&in->err, r, "the sandbox's end of the veth is missing");
                goto out;
        }
        ifindex = rtnl_link_get_ifindex(peer);
        r = add_addr(sk, ifindex, in->net->peer_addr, in->net->host_addr, &in->err);
        if (r >= 0)
                r = link_up(sk, ifindex, NULL, &in->err);
        for (size_t i = 0; r >= 0 && i < in->spec->n_routes; i++)
                r = add_route(sk, &in->spec->routes[i], RTN_UNICAST, ifindex, in->net->host_addr, &in->err);
        /* Everything else: refused at once, not a timeout. */
        if (r >= 0)
                r = add_route(sk, &def, in->spec->default_via_host ? RTN_UNICAST : RTN_PROHIBIT, ifindex,
                              in->net->host_addr, &in->err);
        in->r = r;
out:
        if (peer)
                rtnl_link_put(peer);
        nl_socket_free(sk);
        return NULL;
}

static int delete_link(struct nl_sock *sk, int ifindex)
{
        struct rtnl_link *l = rtnl_link_alloc();
        int r;

        if (!l)
                return -ENOMEM;
        rtnl_link_set_ifindex(l, ifindex);
        r = rtnl_link_delete(sk, l);
        rtnl_link_put(l);
        return r;
}

int dm_netlink_setup(const struct dm_netlink_spec *spec, struct dm_netlink *ret, struct dm_error *err)
{
        struct rtnl_link *veth = NULL, *host = NULL;
        struct inside in = { .spec = spec, .net = ret, .nsfd = -1 };
        struct nl_sock *sk;
        char path[64], alias[256];
        pthread_t t;
        int lockfd = -1, r;

        memset(ret, 0, sizeof(*ret));
        if (!spec->tag || !*spec->tag || strchr(spec->tag, ' ') || spec->container_pid <= 0)
                return dm_error_set(err, -EINVAL, "a sandbox network needs a tag without spaces and a pid");
        snprintf(path, sizeof(path), "/proc/%d/ns/net", spec->container_pid);
        in.nsfd = open(path, O_RDONLY | O_CLOEXEC);
        if (in.nsfd < 0)
                return dm_error_set(err, -errno, "cannot open the sandbox's network namespace (%s): %s", path,
                                    strerror(errno));
        sk = nl_open(err);
        if (!sk) {
                close(in.nsfd);
                return err->code;
        }
        dm_netlink_ifname(spec->tag, ret->host_ifname);
        snprintf(alias, sizeof(alias), DM_NETLINK_ALIAS_PREFIX "%s %s", spec->tag,
                 spec->owner && *spec->owner ? spec->owner : "-");

        /* Two servers must not pick the same /30. */
        if (spec->lock_path) {
                lockfd = open(spec->lock_path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
                if (lockfd < 0 || flock(lockfd, LOCK_EX) < 0) {
                        r = dm_error_set(err, -errno, "cannot lock '%s': %s", spec->lock_path, strerror(errno));
                        goto out;
                }
        }
        r = pick_subnet(sk, spec, &ret->host_addr, &ret->peer_addr, err);
        if (r < 0)
                goto out;

        veth = rtnl_link_veth_alloc();
        if (!veth) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto out;
        }
        rtnl_link_set_name(veth, ret->host_ifname);
        {
                /* get_peer takes a reference: one call, one put (two
                 * unreleased references leaked both links under ASan). */
                struct rtnl_link *peer = rtnl_link_veth_get_peer(veth);

                rtnl_link_set_name(peer, PEER_IFNAME);
                rtnl_link_set_ns_fd(peer, in.nsfd);
                rtnl_link_put(peer);
        }
        r = rtnl_link_add(sk, veth, NLM_F_CREATE | NLM_F_EXCL);
        if (r < 0) {
                r = dm_error_set(err, r == -NLE_EXIST ? -EEXIST : -EIO, "cannot create the veth pair %s: %s",
                                 ret->host_ifname, nl_geterror(r));
                goto out;
        }
        r = rtnl_link_get_kernel(sk, 0, ret->host_ifname, &host);
        if (r < 0) {
                r = nl_fail(err, r, "the new veth's host side is missing");
                goto out;
        }
        ret->host_ifindex = rtnl_link_get_ifindex(host);
        r = link_up(sk, ret->host_ifindex, alias, err);
        if (r >= 0)
                r = add_addr(sk, ret->host_ifindex, ret->host_addr, ret->peer_addr, err);
        if (lockfd >= 0) {
                close(lockfd);
                lockfd = -1;
        }
        if (r < 0)
                goto out;
        if ((r = -pthread_create(&t, NULL, configure_inside, &in)) < 0) {
                dm_error_set(err, r, "cannot start a thread: %s", strerror(-r));
                goto out;
        }
        pthread_join(t, NULL);
        r = in.r;
        if (r < 0)
                *err = in.err;
out:
        if (r < 0 && ret->host_ifindex > 0)
                delete_link(sk, ret->host_ifindex);
        if (r < 0)
                ret->host_ifindex = 0;
        if (lockfd >= 0)
                close(lockfd);
        if (host)
                rtnl_link_put(host);
        if (veth)
                rtnl_link_veth_release(veth);
        nl_socket_free(sk);
        close(in.nsfd);
        return r;
}

bool dm_netlink_exists(const char *host_ifname, const char *tag)
{
        struct dm_error err = { 0 };
        struct rtnl_link *l = NULL;
        struct nl_sock *sk = nl_open(&err);
        char t[128], owner[160];
        bool r = false;

        if (!sk)
                return false;
        if (rtnl_link_get_kernel(sk, 0, host_ifname, &l) >= 0) {
                r = parse_alias(rtnl_link_get_ifalias(l), t, sizeof(t), owner, sizeof(owner)) && strcmp(t, tag) == 0;
                rtnl_link_put(l);
        }
        nl_socket_free(sk);
        return r;
}

int dm_netlink_teardown(const char *host_ifname, const char *tag, struct dm_error *err)
{
        struct rtnl_link *l = NULL;
        struct nl_sock *sk = nl_open(err);
        char t[128], owner[160];
        int r;

        if (!sk)
                return err->code;
        r = rtnl_link_get_kernel(sk, 0, host_ifname, &l);
        if (r == -NLE_NODEV || r == -NLE_OBJ_NOTFOUND) {
                r = 0; /* gone with its namespace */
                goto out;
        }
        if (r < 0) {
                r = nl_fail(err, r, "cannot look the sandbox's link up");
                goto out;
        }
        /* Only a link that says it is this sandbox's. */
        if (!parse_alias(rtnl_link_get_ifalias(l), t, sizeof(t), owner, sizeof(owner)) || strcmp(t, tag) != 0) {
                r = dm_error_set(err, -EPERM, "interface %s is not sandbox %s's: left alone", host_ifname, tag);
                goto out;
        }
        r = delete_link(sk, rtnl_link_get_ifindex(l));
        if (r == -NLE_NODEV || r == -NLE_OBJ_NOTFOUND)
                r = 0;
        else if (r < 0)
                r = nl_fail(err, r, "cannot remove the sandbox's veth");
out:
        if (l)
                rtnl_link_put(l);
        nl_socket_free(sk);
        return r;
}
