/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_BPF_INTERP_H
#define DM_TESTS_BPF_INTERP_H

/* A classic BPF interpreter with the kernel's semantics for a socket buffer
 * program (net/core/filter.c as converted for cls_bpf): a load outside the
 * packet or a division by zero ends the program with return value 0;
 * ancillary loads at SKF_AD_OFF read metadata. It first checks the program
 * the way the kernel's bpf_check_classic does (known opcodes, jumps inside
 * the program, scratch slots below 16, a return at the end). */

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct bpf_pkt {
        const uint8_t *data;
        uint32_t len;
        bool vlan_tag_present;
        uint16_t protocol; /* skb->protocol, host order */
};

struct bpf_run {
        uint32_t ret;
        bool aborted; /* ended by an out-of-bounds load or a division by zero */
        size_t steps;
};

/* 0 when the program is valid, else the index of the first bad instruction + 1. */
static inline size_t bpf_interp_check(const struct sock_filter *f, size_t n)
{
        if (n == 0 || n > BPF_MAXINSNS)
                return 1;
        for (size_t i = 0; i < n; i++) {
                uint16_t c = f[i].code;
                switch (BPF_CLASS(c)) {
                case BPF_LD:
                case BPF_LDX:
                        if (BPF_MODE(c) == BPF_MEM && f[i].k >= BPF_MEMWORDS)
                                return i + 1;
                        break;
                case BPF_ST:
                case BPF_STX:
                        if (f[i].k >= BPF_MEMWORDS)
                                return i + 1;
                        break;
                case BPF_JMP:
                        if (BPF_OP(c) == BPF_JA) {
                                if (f[i].k >= n - i - 1)
                                        return i + 1;
                        } else if (i + 1 + f[i].jt >= n || i + 1 + f[i].jf >= n) {
                                return i + 1;
                        }
                        break;
                case BPF_ALU:
                        if ((BPF_OP(c) == BPF_DIV || BPF_OP(c) == BPF_MOD) && BPF_SRC(c) == BPF_K && f[i].k == 0)
                                return i + 1;
                        break;
                case BPF_RET:
                case BPF_MISC: break;
                default: return i + 1;
                }
        }
        return BPF_CLASS(f[n - 1].code) == BPF_RET ? 0 : n;
}

static inline bool bpf_load(const struct bpf_pkt *p, uint32_t off, unsigned size, uint32_t *ret)
{
        uint32_t v = 0;
        if (off >= p->len || size > p->len - off)
                return false;
        for (unsigned i = 0; i < size; i++)
                v = (v << 8) | p->data[off + i];
        *ret = v;
        return true;
}

static inline struct bpf_run bpf_interp_run(const struct sock_filter *f, size_t n, const struct bpf_pkt *p)
{
        struct bpf_run r = { 0 };
        uint32_t A = 0, X = 0, M[BPF_MEMWORDS] = { 0 }, v;
        unsigned size;

        for (size_t pc = 0; pc < n; pc++) {
                const struct sock_filter *in = &f[pc];
                uint32_t k = in->k, src;
                r.steps++;
                switch (in->code) {
                case BPF_RET | BPF_K: r.ret = k; return r;
                case BPF_RET | BPF_A: r.ret = A; return r;
                case BPF_LD | BPF_W | BPF_LEN: A = p->len; continue;
                case BPF_LDX | BPF_W | BPF_LEN: X = p->len; continue;
                case BPF_LD | BPF_IMM: A = k; continue;
                case BPF_LDX | BPF_IMM: X = k; continue;
                case BPF_LD | BPF_MEM: A = M[k]; continue;
                case BPF_LDX | BPF_MEM: X = M[k]; continue;
                case BPF_ST: M[k] = A; continue;
                case BPF_STX: M[k] = X; continue;
                case BPF_MISC | BPF_TAX: X = A; continue;
                case BPF_MISC | BPF_TXA: A = X; continue;
                case BPF_LDX | BPF_B | BPF_MSH:
                        if (!bpf_load(p, k, 1, &v))
                                goto abort;
                        X = (v & 0xf) << 2;
                        continue;
                default: break;
                }
                switch (BPF_CLASS(in->code)) {
                case BPF_LD:
                        size = BPF_SIZE(in->code) == BPF_W ? 4 : BPF_SIZE(in->code) == BPF_H ? 2 : 1;
                        if (BPF_MODE(in->code) == BPF_ABS && (int32_t)k < 0) {
                                /* Ancillary data: only what this project uses. */
                                if (k == (uint32_t)(SKF_AD_OFF + SKF_AD_VLAN_TAG_PRESENT))
                                        A = p->vlan_tag_present;
                                else if (k == (uint32_t)(SKF_AD_OFF + SKF_AD_PROTOCOL))
                                        A = p->protocol;
                                else
                                        goto abort;
                                continue;
                        }
                        if (BPF_MODE(in->code) == BPF_ABS) {
                                if (!bpf_load(p, k, size, &A))
                                        goto abort;
                        } else if (BPF_MODE(in->code) == BPF_IND) {
                                if (!bpf_load(p, X + k, size, &A))
                                        goto abort;
                        } else {
                                goto abort;
                        }
                        continue;
                case BPF_ALU:
                        src = BPF_SRC(in->code) == BPF_X ? X : k;
                        switch (BPF_OP(in->code)) {
                        case BPF_ADD: A += src; break;
                        case BPF_SUB: A -= src; break;
                        case BPF_MUL: A *= src; break;
                        case BPF_DIV:
                                if (!src)
                                        goto abort;
                                A /= src;
                                break;
                        case BPF_MOD:
                                if (!src)
                                        goto abort;
                                A %= src;
                                break;
                        case BPF_AND: A &= src; break;
                        case BPF_OR: A |= src; break;
                        case BPF_XOR: A ^= src; break;
                        case BPF_LSH: A = src >= 32 ? 0 : A << src; break;
                        case BPF_RSH: A = src >= 32 ? 0 : A >> src; break;
                        case BPF_NEG: A = -A; break;
                        default: goto abort;
                        }
                        continue;
                case BPF_JMP:
                        src = BPF_SRC(in->code) == BPF_X ? X : k;
                        switch (BPF_OP(in->code)) {
                        case BPF_JA: pc += k; continue;
                        case BPF_JEQ: pc += A == src ? in->jt : in->jf; continue;
                        case BPF_JGT: pc += A > src ? in->jt : in->jf; continue;
                        case BPF_JGE: pc += A >= src ? in->jt : in->jf; continue;
                        case BPF_JSET: pc += (A & src) ? in->jt : in->jf; continue;
                        default: goto abort;
                        }
                default: goto abort;
                }
        }
abort:
        r.aborted = true;
        r.ret = 0;
        return r;
}

#endif
