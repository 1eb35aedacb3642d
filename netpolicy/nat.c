/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "netpolicy/nat.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/rule.h>
#include <libnftnl/table.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#define CHAIN "postrouting"

struct batch {
        char *buf;
        struct mnl_nlmsg_batch *b;
        uint32_t seq;
        int msgs; /* messages that ask for an ack */
};

static int batch_open(struct batch *bt, struct dm_error *err)
{
        bt->buf = malloc(MNL_SOCKET_BUFFER_SIZE * 2);
        if (!bt->buf)
                return dm_error_set(err, -ENOMEM, "out of memory");
        bt->b = mnl_nlmsg_batch_start(bt->buf, MNL_SOCKET_BUFFER_SIZE * 2);
        bt->seq = (uint32_t)time(NULL);
        nftnl_batch_begin(mnl_nlmsg_batch_current(bt->b), bt->seq++);
        mnl_nlmsg_batch_next(bt->b);
        return 0;
}

static void batch_close(struct batch *bt)
{
        if (bt->b)
                mnl_nlmsg_batch_stop(bt->b);
        free(bt->buf);
}

static struct nftnl_table *table_of(const char *table, uint32_t family)
{
        struct nftnl_table *t = nftnl_table_alloc();

        if (t) {
                nftnl_table_set_str(t, NFTNL_TABLE_NAME, table);
                nftnl_table_set_u32(t, NFTNL_TABLE_FAMILY, family);
        }
        return t;
}

static struct nftnl_table *table_obj(const char *table)
{
        return table_of(table, NFPROTO_IPV4);
}

/* Sends the batch and reads one answer per message that asked for an ack:
 * the first error wins. */
static int batch_send(struct batch *bt, const char *what, struct dm_error *err)
{
        struct timeval tv = { .tv_sec = 5 };
        struct mnl_socket *nl;
        char buf[MNL_SOCKET_BUFFER_SIZE];
        int acks = 0, r = 0;

        nftnl_batch_end(mnl_nlmsg_batch_current(bt->b), bt->seq++);
        mnl_nlmsg_batch_next(bt->b);
        nl = mnl_socket_open(NETLINK_NETFILTER);
        if (!nl)
                return dm_error_set(err, -errno, "%s: cannot open a netfilter socket: %s", what, strerror(errno));
        if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ||
            setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
            mnl_socket_sendto(nl, mnl_nlmsg_batch_head(bt->b), mnl_nlmsg_batch_size(bt->b)) < 0) {
                r = dm_error_set(err, -errno, "%s: %s", what, strerror(errno));
                goto out;
        }
        while (acks < bt->msgs && r == 0) {
                ssize_t got = mnl_socket_recvfrom(nl, buf, sizeof(buf));
                int n = (int)got;

                if (got < 0) {
                        r = dm_error_set(err, -errno, "%s: no answer from nf_tables: %s", what, strerror(errno));
                        break;
                }
                for (struct nlmsghdr *h = (struct nlmsghdr *)buf; mnl_nlmsg_ok(h, n); h = mnl_nlmsg_next(h, &n)) {
                        if (h->nlmsg_type != NLMSG_ERROR)
                                continue;
                        const struct nlmsgerr *e = mnl_nlmsg_get_payload(h);
                        if (e->error < 0) {
                                r = dm_error_set(err, e->error, "%s: %s", what, strerror(-e->error));
                                break;
                        }
                        acks++;
                }
        }
out:
        mnl_socket_close(nl);
        return r;
}

static void add_expr(struct nftnl_rule *r, struct nftnl_expr *e)
{
        if (e)
                nftnl_rule_add_expr(r, e);
}

/* reg1 = ip header bytes [offset, offset+4) & mask; compare with net. */
static void match_addr(struct nftnl_rule *r, uint32_t offset, const struct dm_cidr *c, enum nft_cmp_ops op)
{
        uint32_t mask = c->prefix ? htonl(~0u << (32 - c->prefix)) : 0, zero = 0;
        struct nftnl_expr *e;

        e = nftnl_expr_alloc("payload");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, offset);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, 4);
        }
        add_expr(r, e);
        e = nftnl_expr_alloc("bitwise");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 4);
                nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, 4);
                nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &zero, 4);
        }
        add_expr(r, e);
        e = nftnl_expr_alloc("cmp");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, op);
                nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, &c->addr, 4);
        }
        add_expr(r, e);
}

int dm_nat_ensure_in(const char *table, const struct dm_cidr *pool, struct dm_error *err)
{
        struct batch bt = { 0 };
        struct nftnl_table *t = NULL;
        struct nftnl_chain *c = NULL;
        struct nftnl_rule *flush = NULL, *rule = NULL;
        struct nlmsghdr *nlh;
        int r;

        r = batch_open(&bt, err);
        if (r < 0)
                return r;
        t = table_obj(table);
        c = nftnl_chain_alloc();
        flush = nftnl_rule_alloc();
        rule = nftnl_rule_alloc();
        if (!t || !c || !flush || !rule) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto out;
        }
        nlh = nftnl_table_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt.b), NFT_MSG_NEWTABLE, NFPROTO_IPV4,
                                          NLM_F_CREATE | NLM_F_ACK, bt.seq++);
        nftnl_table_nlmsg_build_payload(nlh, t);
        mnl_nlmsg_batch_next(bt.b);
        bt.msgs++;

        nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table);
        nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, CHAIN);
        nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, "nat");
        nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, NF_INET_POST_ROUTING);
        nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, 100); /* srcnat */
        nlh = nftnl_chain_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt.b), NFT_MSG_NEWCHAIN, NFPROTO_IPV4,
                                          NLM_F_CREATE | NLM_F_ACK, bt.seq++);
        nftnl_chain_nlmsg_build_payload(nlh, c);
        mnl_nlmsg_batch_next(bt.b);
        bt.msgs++;

        /* Whatever the chain held (an older pool) goes, in the same batch. */
        nftnl_rule_set_str(flush, NFTNL_RULE_TABLE, table);
        nftnl_rule_set_str(flush, NFTNL_RULE_CHAIN, CHAIN);
        nlh = nftnl_rule_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt.b), NFT_MSG_DELRULE, NFPROTO_IPV4, NLM_F_ACK,
                                         bt.seq++);
        nftnl_rule_nlmsg_build_payload(nlh, flush);
        mnl_nlmsg_batch_next(bt.b);
        bt.msgs++;

        nftnl_rule_set_str(rule, NFTNL_RULE_TABLE, table);
        nftnl_rule_set_str(rule, NFTNL_RULE_CHAIN, CHAIN);
        nftnl_rule_set_u32(rule, NFTNL_RULE_FAMILY, NFPROTO_IPV4);
        match_addr(rule, 12, pool, NFT_CMP_EQ);  /* ip saddr in pool */
        match_addr(rule, 16, pool, NFT_CMP_NEQ); /* ip daddr outside it */
        add_expr(rule, nftnl_expr_alloc("masq"));
        nlh = nftnl_rule_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt.b), NFT_MSG_NEWRULE, NFPROTO_IPV4,
                                         NLM_F_APPEND | NLM_F_CREATE | NLM_F_ACK, bt.seq++);
        nftnl_rule_nlmsg_build_payload(nlh, rule);
        mnl_nlmsg_batch_next(bt.b);
        bt.msgs++;

        r = batch_send(&bt, "cannot set up source NAT for the sandboxes", err);
out:
        if (t)
                nftnl_table_free(t);
        if (c)
                nftnl_chain_free(c);
        if (flush)
                nftnl_rule_free(flush);
        if (rule)
                nftnl_rule_free(rule);
        batch_close(&bt);
        return r;
}

static int table_remove(const char *table, uint32_t family, struct dm_error *err)
{
        struct batch bt = { 0 };
        struct nftnl_table *t;
        struct nlmsghdr *nlh;
        int r;

        r = batch_open(&bt, err);
        if (r < 0)
                return r;
        t = table_of(table, family);
        if (!t) {
                batch_close(&bt);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        nlh = nftnl_table_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt.b), NFT_MSG_DELTABLE, family, NLM_F_ACK, bt.seq++);
        nftnl_table_nlmsg_build_payload(nlh, t);
        mnl_nlmsg_batch_next(bt.b);
        bt.msgs++;
        r = batch_send(&bt, "cannot remove demesne's nf_tables table", err);
        nftnl_table_free(t);
        batch_close(&bt);
        if (r == -ENOENT) {
                dm_error_clear(err);
                r = 0;
        }
        return r;
}

int dm_nat_remove_in(const char *table, struct dm_error *err)
{
        return table_remove(table, NFPROTO_IPV4, err);
}

static bool table_present(const char *table, uint32_t family)
{
        struct mnl_socket *nl = mnl_socket_open(NETLINK_NETFILTER);
        struct timeval tv = { .tv_sec = 5 };
        char buf[MNL_SOCKET_BUFFER_SIZE];
        struct nftnl_table *t = table_of(table, family);
        struct nlmsghdr *nlh;
        bool found = false;
        int n;

        if (!nl || !t || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ||
            setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
                goto out;
        nlh = nftnl_table_nlmsg_build_hdr(buf, NFT_MSG_GETTABLE, family, NLM_F_ACK, (uint32_t)time(NULL));
        nftnl_table_nlmsg_build_payload(nlh, t);
        if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
                goto out;
        n = (int)mnl_socket_recvfrom(nl, buf, sizeof(buf));
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; n > 0 && mnl_nlmsg_ok(h, n); h = mnl_nlmsg_next(h, &n)) {
                if (h->nlmsg_type == NLMSG_ERROR) {
                        const struct nlmsgerr *e = mnl_nlmsg_get_payload(h);
                        if (e->error < 0)
                                break;
                } else {
                        found = true;
                }
        }
out:
        if (t)
                nftnl_table_free(t);
        if (nl)
                mnl_socket_close(nl);
        return found;
}

bool dm_nat_present_in(const char *table)
{
        return table_present(table, NFPROTO_IPV4);
}

int dm_nat_ensure(const struct dm_cidr *pool, struct dm_error *err)
{
        return dm_nat_ensure_in(DM_NAT_TABLE, pool, err);
}

int dm_nat_remove(struct dm_error *err)
{
        return dm_nat_remove_in(DM_NAT_TABLE, err);
}

bool dm_nat_present(void)
{
        return dm_nat_present_in(DM_NAT_TABLE);
}

/* --- the guard: what a sandbox may send to the host itself ----------------- */

static void add_cmp(struct nftnl_rule *r, const void *data, uint32_t len)
{
        struct nftnl_expr *e = nftnl_expr_alloc("cmp");

        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, NFT_CMP_EQ);
                nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, data, len);
        }
        add_expr(r, e);
}

static void add_meta(struct nftnl_rule *r, uint32_t key)
{
        struct nftnl_expr *e = nftnl_expr_alloc("meta");

        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, key);
                nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
        }
        add_expr(r, e);
}

/* iifname "<prefix>*": a compare on the first strlen(prefix) bytes, as nft
 * compiles a wildcard. */
static void match_iif_prefix(struct nftnl_rule *r, const char *prefix)
{
        add_meta(r, NFT_META_IIFNAME);
        add_cmp(r, prefix, (uint32_t)strlen(prefix));
}

static void match_nfproto(struct nftnl_rule *r, uint8_t proto)
{
        add_meta(r, NFT_META_NFPROTO);
        add_cmp(r, &proto, 1);
}

/* fib daddr [. iif] type local */
static void match_local(struct nftnl_rule *r, bool on_iif)
{
        struct nftnl_expr *e = nftnl_expr_alloc("fib");
        uint32_t local = RTN_LOCAL;

        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_FLAGS, NFTA_FIB_F_DADDR | (on_iif ? NFTA_FIB_F_IIF : 0));
                nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_RESULT, NFT_FIB_RESULT_ADDRTYPE);
                nftnl_expr_set_u32(e, NFTNL_EXPR_FIB_DREG, NFT_REG_1);
        }
        add_expr(r, e);
        add_cmp(r, &local, sizeof(local));
}

static void match_tcp_dport(struct nftnl_rule *r, uint16_t port)
{
        struct nftnl_expr *e;
        uint8_t tcp = IPPROTO_TCP;
        uint16_t be = htons(port);

        add_meta(r, NFT_META_L4PROTO);
        add_cmp(r, &tcp, 1);
        e = nftnl_expr_alloc("payload");
        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_TRANSPORT_HEADER);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, 2);
                nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, 2);
        }
        add_expr(r, e);
        add_cmp(r, &be, 2);
}

static void add_verdict(struct nftnl_rule *r, int verdict)
{
        struct nftnl_expr *e = nftnl_expr_alloc("immediate");

        if (e) {
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
                nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, (uint32_t)verdict);
        }
        add_expr(r, e);
}

/* Queues the chain (base chain of hook, priority -10, policy accept) and
 * the removal of its rules; false when out of memory. */
static bool queue_chain(struct batch *bt, const char *table, const char *name, uint32_t hook)
{
        struct nftnl_chain *c = nftnl_chain_alloc();
        struct nftnl_rule *flush = nftnl_rule_alloc();
        struct nlmsghdr *nlh;

        if (!c || !flush) {
                if (c)
                        nftnl_chain_free(c);
                if (flush)
                        nftnl_rule_free(flush);
                return false;
        }
        nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table);
        nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
        nftnl_chain_set_str(c, NFTNL_CHAIN_TYPE, "filter");
        nftnl_chain_set_u32(c, NFTNL_CHAIN_HOOKNUM, hook);
        nftnl_chain_set_s32(c, NFTNL_CHAIN_PRIO, -10);
        nlh = nftnl_chain_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt->b), NFT_MSG_NEWCHAIN, NFPROTO_INET,
                                          NLM_F_CREATE | NLM_F_ACK, bt->seq++);
        nftnl_chain_nlmsg_build_payload(nlh, c);
        mnl_nlmsg_batch_next(bt->b);
        bt->msgs++;
        nftnl_rule_set_str(flush, NFTNL_RULE_TABLE, table);
        nftnl_rule_set_str(flush, NFTNL_RULE_CHAIN, name);
        nlh = nftnl_rule_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt->b), NFT_MSG_DELRULE, NFPROTO_INET, NLM_F_ACK,
                                         bt->seq++);
        nftnl_rule_nlmsg_build_payload(nlh, flush);
        mnl_nlmsg_batch_next(bt->b);
        bt->msgs++;
        nftnl_chain_free(c);
        nftnl_rule_free(flush);
        return true;
}

static struct nftnl_rule *rule_new(const char *table, const char *chain, const char *ifprefix)
{
        struct nftnl_rule *r = nftnl_rule_alloc();

        if (r) {
                nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table);
                nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, chain);
                nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
                match_iif_prefix(r, ifprefix);
        }
        return r;
}

/* Queues r (and frees it); false when r is NULL. */
static bool queue_rule(struct batch *bt, struct nftnl_rule *r)
{
        struct nlmsghdr *nlh;

        if (!r)
                return false;
        nlh = nftnl_rule_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt->b), NFT_MSG_NEWRULE, NFPROTO_INET,
                                         NLM_F_APPEND | NLM_F_CREATE | NLM_F_ACK, bt->seq++);
        nftnl_rule_nlmsg_build_payload(nlh, r);
        mnl_nlmsg_batch_next(bt->b);
        bt->msgs++;
        nftnl_rule_free(r);
        return true;
}

int dm_guard_ensure_in(const char *table, const char *ifprefix, const struct dm_cidr *pool, const uint16_t *ports,
                       size_t n_ports, struct dm_error *err)
{
        struct batch bt = { 0 };
        struct nftnl_table *t;
        struct nftnl_rule *r;
        struct nlmsghdr *nlh;
        bool ok = true;
        int ret;

        if (!*ifprefix || strlen(ifprefix) >= IFNAMSIZ || n_ports > 8)
                return dm_error_set(err, -EINVAL, "internal error: bad guard interface prefix or ports");
        ret = batch_open(&bt, err);
        if (ret < 0)
                return ret;
        t = table_of(table, NFPROTO_INET);
        if (!t) {
                batch_close(&bt);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        nlh = nftnl_table_nlmsg_build_hdr(mnl_nlmsg_batch_current(bt.b), NFT_MSG_NEWTABLE, NFPROTO_INET,
                                          NLM_F_CREATE | NLM_F_ACK, bt.seq++);
        nftnl_table_nlmsg_build_payload(nlh, t);
        mnl_nlmsg_batch_next(bt.b);
        bt.msgs++;
        nftnl_table_free(t);

        /* input: the proxy ports on the link's own host-side address, then
         * nothing local at all, whatever address it has or gets later. */
        ok = queue_chain(&bt, table, "input", NF_INET_LOCAL_IN);
        for (size_t i = 0; ok && i < n_ports; i++) {
                r = rule_new(table, "input", ifprefix);
                if (r) {
                        match_local(r, true);
                        match_tcp_dport(r, ports[i]);
                        add_verdict(r, NF_ACCEPT);
                }
                ok = queue_rule(&bt, r);
        }
        r = ok ? rule_new(table, "input", ifprefix) : NULL;
        if (r) {
                match_local(r, false);
                add_verdict(r, NF_DROP);
        }
        ok = ok && queue_rule(&bt, r);

        /* forward: no IPv6 at all, no other sandbox. */
        ok = ok && queue_chain(&bt, table, "forward", NF_INET_FORWARD);
        r = ok ? rule_new(table, "forward", ifprefix) : NULL;
        if (r) {
                match_nfproto(r, NFPROTO_IPV6);
                add_verdict(r, NF_DROP);
        }
        ok = ok && queue_rule(&bt, r);
        r = ok ? rule_new(table, "forward", ifprefix) : NULL;
        if (r) {
                match_nfproto(r, NFPROTO_IPV4);
                match_addr(r, 16, pool, NFT_CMP_EQ);
                add_verdict(r, NF_DROP);
        }
        ok = ok && queue_rule(&bt, r);

        ret = ok ? batch_send(&bt, "cannot set up the sandboxes' host guard", err)
                 : dm_error_set(err, -ENOMEM, "out of memory");
        batch_close(&bt);
        return ret;
}

int dm_guard_remove_in(const char *table, struct dm_error *err)
{
        return table_remove(table, NFPROTO_INET, err);
}

bool dm_guard_present_in(const char *table)
{
        return table_present(table, NFPROTO_INET);
}

int dm_guard_ensure(const struct dm_cidr *pool, const uint16_t *ports, size_t n_ports, struct dm_error *err)
{
        return dm_guard_ensure_in(DM_GUARD_TABLE, DM_GUARD_IFPREFIX, pool, ports, n_ports, err);
}

int dm_guard_remove(struct dm_error *err)
{
        return dm_guard_remove_in(DM_GUARD_TABLE, err);
}

bool dm_guard_present(void)
{
        return dm_guard_present_in(DM_GUARD_TABLE);
}
