/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "netpolicy/blocked.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

const struct dm_blocked_range dm_blocked_always[] = {
        { 0x00000000u, 8, "the 'this network' range 0.0.0.0/8" },
        { 0x7f000000u, 8, "loopback (127.0.0.0/8: the host's own services)" },
        { 0xa9fe0000u, 16, "link-local (169.254.0.0/16, where cloud metadata services such as 169.254.169.254 live)" },
        { 0x646464c8u, 32, "the Alibaba Cloud metadata address 100.100.100.200" },
        { 0xa83f8110u, 32, "the Azure host address 168.63.129.16 (wireserver and metadata)" },
        { 0xe0000000u, 4, "multicast (224.0.0.0/4)" },
        { 0xf0000000u, 4, "reserved or broadcast (240.0.0.0/4)" },
};
const size_t dm_blocked_n_always = sizeof(dm_blocked_always) / sizeof(dm_blocked_always[0]);

const struct dm_blocked_range dm_blocked_private[] = {
        { 0x0a000000u, 8, "the private range 10.0.0.0/8" },
        { 0xac100000u, 12, "the private range 172.16.0.0/12" },
        { 0xc0a80000u, 16, "the private range 192.168.0.0/16" },
        { 0x64400000u, 10, "the shared address space 100.64.0.0/10" },
};
const size_t dm_blocked_n_private = sizeof(dm_blocked_private) / sizeof(dm_blocked_private[0]);

/* Written once at start by dm_blocked_init, before any thread reads them. */
#define POOL_WHAT_FMT "the sandbox pool (%s/%d: other sandboxes and the host side of their links)"
static uint32_t pool_net = 0x0ad50000u; /* DM_NETLINK_POOL_DEFAULT */
static unsigned pool_prefix = 16;
static bool pool_on = true; /* false: the backend makes no pool (dm_blocked_settings.no_pool) */
static char pool_what[128] = "the sandbox pool (10.213.0.0/16: other sandboxes and the host side of their links)";
static struct dm_cidr private_allowed[DM_BLOCKED_MAX_PRIVATE];
static size_t n_private_allowed;

static uint32_t mask_of(unsigned prefix)
{
        return prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
}

/* Whether net/prefix and b/bprefix share an address. */
static bool overlaps(uint32_t net, unsigned prefix, uint32_t b, unsigned bprefix)
{
        uint32_t m = mask_of(prefix < bprefix ? prefix : bprefix);
        return (net & m) == (b & m);
}

/* Whether net/prefix lies wholly inside b/bprefix. */
static bool inside(uint32_t net, unsigned prefix, uint32_t b, unsigned bprefix)
{
        return prefix >= bprefix && (net & mask_of(bprefix)) == b;
}

static void set_pool(const struct dm_cidr *p)
{
        struct in_addr a = { p->addr };
        char s[INET_ADDRSTRLEN];

        pool_net = ntohl(p->addr);
        pool_prefix = (unsigned)p->prefix;
        inet_ntop(AF_INET, &a, s, sizeof(s));
        snprintf(pool_what, sizeof(pool_what), POOL_WHAT_FMT, s, p->prefix);
}

void dm_blocked_get_pool(struct dm_cidr *ret)
{
        ret->addr = htonl(pool_net);
        ret->prefix = (int)pool_prefix;
}

int dm_blocked_settings_parse(const char *pool, const char *list, struct dm_blocked_settings *ret, struct dm_error *err)
{
        struct dm_blocked_settings got = { 0 };
        struct dm_error ignored = { 0 };
        char buf[1024];

        if (list && strlen(list) >= sizeof(buf))
                return dm_error_set(err, -E2BIG, "DEMESNE_EGRESS_ALLOW_PRIVATE is longer than %zu bytes",
                                    sizeof(buf) - 1);
        if (pool && *pool && dm_cidr_parse(pool, &got.pool, &ignored) == 0)
                got.has_pool = true;
        snprintf(buf, sizeof(buf), "%s", list ? list : "");
        for (char *save = NULL, *t = strtok_r(buf, ", \t", &save); t; t = strtok_r(NULL, ", \t", &save)) {
                struct dm_cidr c;
                bool ok = false;
                int r;

                if (got.n_private_allowed == DM_BLOCKED_MAX_PRIVATE)
                        return dm_error_set(err, -E2BIG, "DEMESNE_EGRESS_ALLOW_PRIVATE names more than %d ranges",
                                            DM_BLOCKED_MAX_PRIVATE);
                r = dm_cidr_parse(t, &c, err);
                if (r < 0)
                        return dm_error_wrap(err, "DEMESNE_EGRESS_ALLOW_PRIVATE");
                for (size_t i = 0; i < dm_blocked_n_private; i++)
                        ok = ok || inside(ntohl(c.addr), (unsigned)c.prefix, dm_blocked_private[i].net,
                                          dm_blocked_private[i].prefix);
                if (!ok)
                        return dm_error_set(err, -EINVAL,
                                            "DEMESNE_EGRESS_ALLOW_PRIVATE: '%s' is not inside a private range "
                                            "(10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 100.64.0.0/10)",
                                            t);
                got.private_allowed[got.n_private_allowed++] = c;
        }
        *ret = got;
        return 0;
}

void dm_blocked_init(const struct dm_blocked_settings *s)
{
        if (s->has_pool)
                set_pool(&s->pool);
        pool_on = !s->no_pool;
        memcpy(private_allowed, s->private_allowed, s->n_private_allowed * sizeof(*private_allowed));
        n_private_allowed = s->n_private_allowed;
}

size_t dm_blocked_get_private_allowed(struct dm_cidr *ret, size_t max)
{
        size_t n = n_private_allowed < max ? n_private_allowed : max;

        memcpy(ret, private_allowed, n * sizeof(*ret));
        return n;
}

static bool operator_allows(uint32_t net, unsigned prefix)
{
        for (size_t i = 0; i < n_private_allowed; i++)
                if (inside(net, prefix, ntohl(private_allowed[i].addr), (unsigned)private_allowed[i].prefix))
                        return true;
        return false;
}

const char *dm_blocked_why(uint32_t addr)
{
        for (size_t i = 0; i < dm_blocked_n_always; i++)
                if (inside(addr, 32, dm_blocked_always[i].net, dm_blocked_always[i].prefix))
                        return dm_blocked_always[i].what;
        if (pool_on && inside(addr, 32, pool_net, pool_prefix))
                return pool_what;
        if (operator_allows(addr, 32))
                return NULL;
        for (size_t i = 0; i < dm_blocked_n_private; i++)
                if (inside(addr, 32, dm_blocked_private[i].net, dm_blocked_private[i].prefix))
                        return dm_blocked_private[i].what;
        return NULL;
}

const char *dm_blocked_overlap(uint32_t net, unsigned prefix, char *buf, size_t len)
{
        for (size_t i = 0; i < dm_blocked_n_always; i++)
                if (overlaps(net, prefix, dm_blocked_always[i].net, dm_blocked_always[i].prefix)) {
                        snprintf(buf, len, "%s, which a sandbox never reaches", dm_blocked_always[i].what);
                        return buf;
                }
        if (pool_on && overlaps(net, prefix, pool_net, pool_prefix)) {
                snprintf(buf, len, "%s, which a sandbox never reaches", pool_what);
                return buf;
        }
        if (operator_allows(net, prefix))
                return NULL;
        for (size_t i = 0; i < dm_blocked_n_private; i++)
                if (overlaps(net, prefix, dm_blocked_private[i].net, dm_blocked_private[i].prefix)) {
                        snprintf(buf, len,
                                 "%s, which sandboxes reach only where the operator allows it in "
                                 "DEMESNE_EGRESS_ALLOW_PRIVATE",
                                 dm_blocked_private[i].what);
                        return buf;
                }
        return NULL;
}
