/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "netpolicy/bpf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/blocked.h"

/* Classic BPF ends a program with return value 0 when a load falls outside
 * the packet, and 0 is TC_ACT_OK here: a truncated frame would pass. So
 * every load below is guarded by a length check, and tests run the program
 * over truncated frames to prove no load ever goes out of bounds. */

#define ETH_HLEN_ 14
#define OFF_ETHERTYPE 12
#define OFF_IP (ETH_HLEN_)
#define OFF_IP_FRAG (OFF_IP + 6)
#define OFF_IP_PROTO (OFF_IP + 9)
#define OFF_IP_DST (OFF_IP + 16)

#define ETHERTYPE_IPV4 0x0800
#define ETHERTYPE_ARP 0x0806

/* Scratch memory slots. */
#define M_DST 0   /* destination address */
#define M_PROTO 1 /* IP protocol */
#define M_DPORT 2 /* TCP/UDP destination port; 0 when there is none to read (other protocol, later fragment) */

struct prog {
        struct sock_filter *ins; /* DM_BPF_MAX_INSNS slots; what is emitted past them is only counted */
        size_t n;
        bool far_jump; /* a jump longer than 255 instructions: a bug of this file */
};

static size_t emit(struct prog *p, uint16_t code, uint8_t jt, uint8_t jf, uint32_t k)
{
        if (p->n < DM_BPF_MAX_INSNS)
                p->ins[p->n] = (struct sock_filter)BPF_JUMP(code, k, jt, jf);
        return p->n++;
}

static void stmt(struct prog *p, uint16_t code, uint32_t k)
{
        emit(p, code, 0, 0, k);
}

/* Points the false branch of the jump at `at` to the next instruction to emit. */
static void land_jf(struct prog *p, size_t at)
{
        size_t d = p->n - at - 1;
        if (d > 255)
                p->far_jump = true;
        else if (at < DM_BPF_MAX_INSNS)
                p->ins[at].jf = (uint8_t)d;
}

/* Returns ret when A compares true against k (ret_if) or false (ret_unless):
 * the return sits right after the test, so no jump is ever long. */
static void ret_if(struct prog *p, uint16_t jop, uint32_t k, uint32_t ret)
{
        emit(p, BPF_JMP | jop | BPF_K, 0, 1, k);
        stmt(p, BPF_RET | BPF_K, ret);
}

static void ret_unless(struct prog *p, uint16_t jop, uint32_t k, uint32_t ret)
{
        emit(p, BPF_JMP | jop | BPF_K, 1, 0, k);
        stmt(p, BPF_RET | BPF_K, ret);
}

static uint32_t mask_of(unsigned prefix)
{
        return prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
}

/* Ethernet, then an IPv4 header whose fields are read into scratch memory. */
static void emit_headers(struct prog *p)
{
        size_t j, skip;

        /* A tagged frame has had its tag moved to metadata before tc ingress;
         * nothing of ours sends one. */
        stmt(p, BPF_LD | BPF_W | BPF_LEN, 0);
        ret_unless(p, BPF_JGE, ETH_HLEN_, DM_BPF_DROP);
        stmt(p, BPF_LD | BPF_W | BPF_ABS, (uint32_t)(SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT));
        ret_unless(p, BPF_JEQ, 0, DM_BPF_DROP);
        stmt(p, BPF_LD | BPF_H | BPF_ABS, OFF_ETHERTYPE);
        ret_if(p, BPF_JEQ, ETHERTYPE_ARP, DM_BPF_PASS);
        ret_unless(p, BPF_JEQ, ETHERTYPE_IPV4, DM_BPF_DROP);

        stmt(p, BPF_LD | BPF_W | BPF_LEN, 0);
        ret_unless(p, BPF_JGE, OFF_IP + 20, DM_BPF_DROP);
        stmt(p, BPF_LD | BPF_B | BPF_ABS, OFF_IP);
        stmt(p, BPF_ALU | BPF_AND | BPF_K, 0xf0);
        ret_unless(p, BPF_JEQ, 0x40, DM_BPF_DROP);
        stmt(p, BPF_LDX | BPF_B | BPF_MSH, OFF_IP); /* X = IHL * 4 */
        stmt(p, BPF_MISC | BPF_TXA, 0);
        ret_unless(p, BPF_JGE, 20, DM_BPF_DROP);

        stmt(p, BPF_LD | BPF_W | BPF_ABS, OFF_IP_DST);
        stmt(p, BPF_ST, M_DST);
        stmt(p, BPF_LD | BPF_B | BPF_ABS, OFF_IP_PROTO);
        stmt(p, BPF_ST, M_PROTO);
        stmt(p, BPF_LD | BPF_IMM, 0);
        stmt(p, BPF_ST, M_DPORT);

        /* A later fragment has no transport header: its port stays 0, which
         * no port rule matches. */
        stmt(p, BPF_LD | BPF_H | BPF_ABS, OFF_IP_FRAG);
        j = emit(p, BPF_JMP | BPF_JSET | BPF_K, 0, 0, 0x1fff);
        skip = j; /* jt lands at the end, patched below */
        stmt(p, BPF_LD | BPF_MEM, M_PROTO);
        emit(p, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, IPPROTO_TCP);
        size_t not_udp = emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, IPPROTO_UDP);
        /* The destination port is at IP + IHL*4 + 2: the frame must hold it. */
        stmt(p, BPF_LDX | BPF_B | BPF_MSH, OFF_IP);
        stmt(p, BPF_MISC | BPF_TXA, 0);
        stmt(p, BPF_ALU | BPF_ADD | BPF_K, OFF_IP + 4);
        stmt(p, BPF_MISC | BPF_TAX, 0);
        stmt(p, BPF_LD | BPF_W | BPF_LEN, 0);
        size_t too_short = emit(p, BPF_JMP | BPF_JGE | BPF_X, 0, 0, 0);
        stmt(p, BPF_LDX | BPF_B | BPF_MSH, OFF_IP);
        stmt(p, BPF_LD | BPF_H | BPF_IND, OFF_IP + 2);
        stmt(p, BPF_ST, M_DPORT);
        /* here: the end of the port block */
        size_t d = p->n - skip - 1;
        if (d > 255)
                p->far_jump = true;
        else if (skip < DM_BPF_MAX_INSNS)
                p->ins[skip].jt = (uint8_t)d;
        land_jf(p, not_udp);
        land_jf(p, too_short);
}

static void drop_range(struct prog *p, uint32_t net, unsigned prefix)
{
        stmt(p, BPF_LD | BPF_MEM, M_DST);
        if (prefix < 32)
                stmt(p, BPF_ALU | BPF_AND | BPF_K, mask_of(prefix));
        ret_if(p, BPF_JEQ, net, DM_BPF_DROP);
}

static void emit_blocked(struct prog *p)
{
        for (size_t i = 0; i < dm_blocked_n_always; i++)
                drop_range(p, dm_blocked_always[i].net, dm_blocked_always[i].prefix);
}

/* After the proxy's own address and ports passed: the rest of the pool
 * (other sandboxes, the host side of every pair), then the private ranges
 * but the parts the operator allowed. */
static void emit_pool_private(struct prog *p)
{
        struct dm_cidr pool, allowed[DM_BLOCKED_MAX_PRIVATE];
        size_t n = dm_blocked_get_private_allowed(allowed, DM_BLOCKED_MAX_PRIVATE);
        size_t skips[DM_BLOCKED_MAX_PRIVATE];

        dm_blocked_get_pool(&pool);
        drop_range(p, ntohl(pool.addr), (unsigned)pool.prefix);
        for (size_t i = 0; i < n; i++) {
                stmt(p, BPF_LD | BPF_MEM, M_DST);
                if (allowed[i].prefix < 32)
                        stmt(p, BPF_ALU | BPF_AND | BPF_K, mask_of((unsigned)allowed[i].prefix));
                skips[i] = emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, ntohl(allowed[i].addr));
        }
        for (size_t i = 0; i < dm_blocked_n_private; i++)
                drop_range(p, dm_blocked_private[i].net, dm_blocked_private[i].prefix);
        /* here: an allowed private address jumps to the policy's rules */
        for (size_t i = 0; i < n; i++) {
                size_t d = p->n - skips[i] - 1;
                if (d > 255)
                        p->far_jump = true;
                else if (skips[i] < DM_BPF_MAX_INSNS)
                        p->ins[skips[i]].jt = (uint8_t)d;
        }
}

static void emit_host(struct prog *p, const struct dm_bpf_host *host)
{
        uint32_t proxy = host ? ntohl(host->proxy_addr.s_addr) : 0;

        if (proxy) {
                size_t a, b, c, d;
                stmt(p, BPF_LD | BPF_MEM, M_DST);
                a = emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, proxy);
                stmt(p, BPF_LD | BPF_MEM, M_PROTO);
                b = emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, IPPROTO_TCP);
                stmt(p, BPF_LD | BPF_MEM, M_DPORT);
                /* Either port: the first match skips the second test. */
                if (host->vendor_port)
                        emit(p, BPF_JMP | BPF_JEQ | BPF_K, 1, 0, host->proxy_port);
                c = emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, host->vendor_port ? host->vendor_port : host->proxy_port);
                stmt(p, BPF_LD | BPF_B | BPF_ABS, OFF_IP); /* version 4, IHL 5: no options */
                d = emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 0x45);
                stmt(p, BPF_RET | BPF_K, DM_BPF_PASS);
                land_jf(p, a);
                land_jf(p, b);
                land_jf(p, c);
                land_jf(p, d);
        }
        stmt(p, BPF_LD | BPF_MEM, M_DST);
        if (proxy)
                ret_if(p, BPF_JEQ, proxy, DM_BPF_DROP);
        for (size_t i = 0; host && i < host->n_host_addrs; i++)
                ret_if(p, BPF_JEQ, ntohl(host->host_addrs[i].s_addr), DM_BPF_DROP);
}

static void emit_rules(struct prog *p, const struct dm_policy *pol)
{
        for (size_t i = 0; i < pol->n_cidrs; i++) {
                const struct dm_policy_cidr *c = &pol->cidrs[i];
                uint32_t net = ntohl(c->net.s_addr);

                if (c->prefix == 0 && c->port == 0) {
                        stmt(p, BPF_RET | BPF_K, DM_BPF_PASS); /* 0.0.0.0/0: the rest is moot */
                        return;
                }
                stmt(p, BPF_LD | BPF_MEM, M_DST);
                if (c->prefix < 32)
                        stmt(p, BPF_ALU | BPF_AND | BPF_K, mask_of(c->prefix));
                if (c->port == 0) {
                        ret_if(p, BPF_JEQ, net, DM_BPF_PASS);
                        continue;
                }
                size_t miss = emit(p, BPF_JMP | BPF_JEQ | BPF_K, 0, 0, net);
                stmt(p, BPF_LD | BPF_MEM, M_DPORT);
                ret_if(p, BPF_JEQ, c->port, DM_BPF_PASS);
                land_jf(p, miss);
        }
        stmt(p, BPF_RET | BPF_K, DM_BPF_DROP);
}

int dm_bpf_compile(const struct dm_policy *pol, const struct dm_bpf_host *host, struct sock_filter **ret_prog,
                   size_t *ret_len, struct dm_error *err)
{
        struct prog p = { 0 };

        p.ins = calloc(DM_BPF_MAX_INSNS, sizeof(*p.ins));
        if (!p.ins)
                return dm_error_set(err, -ENOMEM, "out of memory");
        emit_headers(&p);
        emit_blocked(&p);
        emit_host(&p, host);
        emit_pool_private(&p);
        if (pol->mode == DM_EGRESS_OPEN)
                stmt(&p, BPF_RET | BPF_K, DM_BPF_PASS);
        else
                emit_rules(&p, pol);

        if (p.n > DM_BPF_MAX_INSNS) {
                free(p.ins);
                return dm_error_set(
                        err, -E2BIG,
                        "the egress filter would have %zu BPF instructions, more than the kernel's "
                        "limit of %d: use fewer or wider allow entries (%zu address rules, %zu host addresses)",
                        p.n, DM_BPF_MAX_INSNS, pol->n_cidrs, host ? host->n_host_addrs : 0);
        }
        if (p.far_jump) {
                free(p.ins);
                return dm_error_set(err, -EINVAL,
                                    "internal error: egress filter has a jump longer than 255 instructions");
        }
        *ret_prog = p.ins;
        *ret_len = p.n;
        return 0;
}
