/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "netpolicy/tc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/pkt_cls.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/route/qdisc.h>
#include <netlink/route/tc.h>
#include <string.h>

/* libnl's NLE_* codes, as the errno the rest of demesne speaks. */
static int nl_errno(int nle)
{
        switch (nle < 0 ? -nle : nle) {
        case NLE_NOMEM: return -ENOMEM;
        case NLE_EXIST: return -EEXIST;
        case NLE_INVAL: return -EINVAL;
        case NLE_RANGE: return -ERANGE;
        case NLE_MSGSIZE: return -EMSGSIZE;
        case NLE_OPNOTSUPP: return -EOPNOTSUPP;
        case NLE_OBJ_NOTFOUND: return -ENOENT;
        case NLE_BUSY: return -EBUSY;
        case NLE_PERM:
        case NLE_NOACCESS: return -EPERM;
        case NLE_NODEV: return -ENODEV;
        case NLE_AGAIN: return -EAGAIN;
        default: return -EIO;
        }
}

static int nl_fail(struct dm_error *err, int nle, const char *what, int ifindex)
{
        return dm_error_set(err, nl_errno(nle), "%s on interface %d: %s", what, ifindex, nl_geterror(nle));
}

/* Uses the caller's socket or opens one; *owned tells the caller to free it. */
static int get_sock(struct nl_sock *given, struct nl_sock **ret, struct dm_error *err)
{
        struct nl_sock *sk;
        int r;

        if (given) {
                *ret = given;
                return 0;
        }
        sk = nl_socket_alloc();
        if (!sk)
                return dm_error_set(err, -ENOMEM, "out of memory for a netlink socket");
        r = nl_connect(sk, NETLINK_ROUTE);
        if (r < 0) {
                nl_socket_free(sk);
                return dm_error_set(err, nl_errno(r), "connect a netlink route socket: %s", nl_geterror(r));
        }
        *ret = sk;
        return 0;
}

static void put_sock(struct nl_sock *given, struct nl_sock *sk)
{
        if (sk && sk != given)
                nl_socket_free(sk);
}

static struct rtnl_qdisc *clsact_for(int ifindex)
{
        struct rtnl_qdisc *q = rtnl_qdisc_alloc();

        if (!q)
                return NULL;
        rtnl_tc_set_ifindex(TC_CAST(q), ifindex);
        rtnl_tc_set_parent(TC_CAST(q), TC_H_CLSACT);
        rtnl_tc_set_handle(TC_CAST(q), TC_H_MAKE(TC_H_CLSACT, 0));
        if (rtnl_tc_set_kind(TC_CAST(q), "clsact") < 0) {
                rtnl_qdisc_put(q);
                return NULL;
        }
        return q;
}

/* A socket and the clsact qdisc object of ifindex, for add or delete. */
static int prepare(struct nl_sock *given, int ifindex, struct nl_sock **ret_sk, struct rtnl_qdisc **ret_q,
                   struct dm_error *err)
{
        int r = get_sock(given, ret_sk, err);
        if (r < 0)
                return r;
        *ret_q = clsact_for(ifindex);
        if (!*ret_q) {
                put_sock(given, *ret_sk);
                return dm_error_set(err, -ENOMEM, "out of memory for a qdisc");
        }
        return 0;
}

static int send_filter(struct nl_sock *sk, int ifindex, const struct sock_filter *prog, size_t len)
{
        struct tcmsg t = {
                .tcm_family = AF_UNSPEC,
                .tcm_ifindex = ifindex,
                .tcm_handle = DM_TC_HANDLE,
                .tcm_parent = TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS),
                .tcm_info = TC_H_MAKE((uint32_t)DM_TC_PRIO << 16, htons(ETH_P_ALL)),
        };
        struct nl_msg *m;
        struct nlattr *opts;
        int r;

        /* No NLM_F_EXCL: an existing filter at our handle gets the new program. */
        m = nlmsg_alloc_simple(RTM_NEWTFILTER, NLM_F_CREATE);
        if (!m)
                return -NLE_NOMEM;
        if (nlmsg_append(m, &t, sizeof(t), NLMSG_ALIGNTO) < 0 || nla_put_string(m, TCA_KIND, "bpf") < 0 ||
            !(opts = nla_nest_start(m, TCA_OPTIONS)) || nla_put_u16(m, TCA_BPF_OPS_LEN, (uint16_t)len) < 0 ||
            nla_put(m, TCA_BPF_OPS, (int)(len * sizeof(*prog)), prog) < 0 ||
            nla_put_u32(m, TCA_BPF_FLAGS, TCA_BPF_FLAG_ACT_DIRECT) < 0 || nla_nest_end(m, opts) < 0) {
                nlmsg_free(m);
                return -NLE_MSGSIZE;
        }
        r = nl_send_auto(sk, m);
        nlmsg_free(m);
        if (r < 0)
                return r;
        return nl_wait_for_ack(sk);
}

int dm_tc_attach_ingress(struct nl_sock *given, int ifindex, const struct sock_filter *prog, size_t len,
                         struct dm_error *err)
{
        struct nl_sock *sk = NULL;
        struct rtnl_qdisc *q;
        int r;

        if (ifindex <= 0)
                return dm_error_set(err, -EINVAL, "attach egress filter: bad interface index %d", ifindex);
        if (!prog || len == 0 || len > BPF_MAXINSNS)
                return dm_error_set(err, -EINVAL,
                                    "attach egress filter on interface %d: program of %zu instructions "
                                    "(1 to %d)",
                                    ifindex, len, BPF_MAXINSNS);
        r = prepare(given, ifindex, &sk, &q, err);
        if (r < 0)
                return r;
        r = rtnl_qdisc_add(sk, q, NLM_F_CREATE);
        rtnl_qdisc_put(q);
        if (r < 0 && r != -NLE_EXIST) {
                put_sock(given, sk);
                return nl_fail(err, r, "add clsact qdisc", ifindex);
        }
        r = send_filter(sk, ifindex, prog, len);
        put_sock(given, sk);
        if (r < 0)
                return nl_fail(err, r, "add cls_bpf ingress filter", ifindex);
        return 0;
}

int dm_tc_detach_ingress(struct nl_sock *given, int ifindex, struct dm_error *err)
{
        struct nl_sock *sk = NULL;
        struct rtnl_qdisc *q;
        int r;

        if (ifindex <= 0)
                return dm_error_set(err, -EINVAL, "detach egress filter: bad interface index %d", ifindex);
        r = prepare(given, ifindex, &sk, &q, err);
        if (r < 0)
                return r;
        r = rtnl_qdisc_delete(sk, q);
        rtnl_qdisc_put(q);
        /* Once an interface has had a clsact qdisc, deleting a missing one is
         * EINVAL ("invalid handle"), not ENOENT: look before calling it a failure. */
        if (r == -NLE_INVAL) {
                bool clsact = true;
                size_t len;
                if (dm_tc_query_ingress(sk, ifindex, &clsact, &len, NULL) == 0 && !clsact)
                        r = 0;
        }
        put_sock(given, sk);
        /* Already gone (or the interface with it): the goal is reached. */
        if (r < 0 && r != -NLE_OBJ_NOTFOUND && r != -NLE_NODEV)
                return nl_fail(err, r, "delete clsact qdisc", ifindex);
        return 0;
}

struct query {
        int ifindex;
        bool clsact;
        size_t filter_len;
};

static int on_tc_msg(struct nl_msg *msg, void *arg)
{
        struct query *q = arg;
        struct nlmsghdr *h = nlmsg_hdr(msg);
        struct tcmsg *t = nlmsg_data(h);
        struct nlattr *tb[TCA_MAX + 1], *opts[TCA_BPF_MAX + 1];
        const char *kind;

        if (t->tcm_ifindex != q->ifindex || nlmsg_parse(h, sizeof(*t), tb, TCA_MAX, NULL) < 0 || !tb[TCA_KIND])
                return NL_OK;
        kind = nla_get_string(tb[TCA_KIND]);
        if (h->nlmsg_type == RTM_NEWQDISC && strcmp(kind, "clsact") == 0)
                q->clsact = true;
        if (h->nlmsg_type == RTM_NEWTFILTER && strcmp(kind, "bpf") == 0 && t->tcm_handle == DM_TC_HANDLE &&
            TC_H_MAJ(t->tcm_info) >> 16 == DM_TC_PRIO && tb[TCA_OPTIONS] &&
            nla_parse_nested(opts, TCA_BPF_MAX, tb[TCA_OPTIONS], NULL) == 0 && opts[TCA_BPF_OPS_LEN])
                q->filter_len = nla_get_u16(opts[TCA_BPF_OPS_LEN]);
        return NL_OK;
}

static int dump(struct nl_sock *sk, int type, struct tcmsg *t, struct query *q)
{
        int r;

        r = nl_send_simple(sk, type, NLM_F_DUMP, t, sizeof(*t));
        if (r < 0)
                return r;
        /* A private copy of the socket's callbacks: a caller's socket keeps its own. */
        struct nl_cb *base = nl_socket_get_cb(sk), *cb = nl_cb_clone(base);
        nl_cb_put(base);
        if (!cb)
                return -NLE_NOMEM;
        nl_cb_set(cb, NL_CB_VALID, NL_CB_CUSTOM, on_tc_msg, q);
        r = nl_recvmsgs(sk, cb);
        nl_cb_put(cb);
        return r;
}

int dm_tc_query_ingress(struct nl_sock *given, int ifindex, bool *ret_clsact, size_t *ret_filter_len,
                        struct dm_error *err)
{
        struct query q = { .ifindex = ifindex };
        struct tcmsg t = { .tcm_family = AF_UNSPEC, .tcm_ifindex = ifindex };
        struct nl_sock *sk = NULL;
        int r;

        r = get_sock(given, &sk, err);
        if (r < 0)
                return r;
        r = dump(sk, RTM_GETQDISC, &t, &q);
        if (r >= 0 && q.clsact) {
                t.tcm_parent = TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_INGRESS);
                r = dump(sk, RTM_GETTFILTER, &t, &q);
        }
        put_sock(given, sk);
        if (r < 0)
                return nl_fail(err, r, "list tc objects", ifindex);
        *ret_clsact = q.clsact;
        *ret_filter_len = q.filter_len;
        return 0;
}
