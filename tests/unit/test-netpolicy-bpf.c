/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>

#include "netpolicy/blocked.h"
#include "netpolicy/bpf.h"
#include "netpolicy/policy.h"
#include "src/basic/cleanup.h"
#include "tests/tap.h"
#include "tests/unit/bpf-interp.h"

/* A frame as the host-side veth's tc ingress sees it: Ethernet header first. */
struct frame {
        uint8_t b[256];
        uint32_t len;
        bool vlan;
};

struct spec {
        uint16_t ethertype;
        uint8_t version; /* 4 unless set otherwise */
        uint8_t ihl;     /* 5 unless set otherwise */
        uint8_t proto;   /* IPPROTO_* */
        const char *dst;
        uint16_t dport;
        uint16_t frag;    /* the flags+offset field: 0x2000 = MF, low 13 bits = offset */
        uint8_t opt_fill; /* byte to fill IP options with */
        uint32_t cut;     /* keep only this many bytes (0 = whole frame) */
};

static struct frame build(struct spec s)
{
        struct frame f = { .len = 0 };
        uint8_t *ip = f.b + 14;
        struct in_addr d = { 0 };
        uint8_t ihl = s.ihl ? s.ihl : 5;

        memset(f.b, 0xaa, 12); /* MAC addresses */
        f.b[12] = (uint8_t)(s.ethertype >> 8);
        f.b[13] = (uint8_t)s.ethertype;
        if (s.ethertype != 0x0800) {
                memset(f.b + 14, 0x11, 46); /* an ARP or IPv6 body of some bytes */
                f.len = 60;
                return f;
        }
        ip[0] = (uint8_t)(((s.version ? s.version : 4) << 4) | ihl);
        ip[2] = 0, ip[3] = 60;
        ip[6] = (uint8_t)(s.frag >> 8);
        ip[7] = (uint8_t)s.frag;
        ip[8] = 64;
        ip[9] = s.proto;
        inet_pton(AF_INET, "10.99.0.2", ip + 12);
        inet_pton(AF_INET, s.dst, &d);
        memcpy(ip + 16, &d, 4);
        if (ihl > 5)
                memset(ip + 20, s.opt_fill, (size_t)(ihl - 5) * 4);
        uint8_t *l4 = ip + (ihl < 5 ? 5 : ihl) * 4;
        l4[0] = 0xc3, l4[1] = 0x50; /* source port 50000 */
        l4[2] = (uint8_t)(s.dport >> 8);
        l4[3] = (uint8_t)s.dport;
        f.len = (uint32_t)(l4 + 20 - f.b);
        if (s.cut)
                f.len = s.cut;
        return f;
}

static struct sock_filter *prog;
static size_t prog_len;

static uint32_t run(struct frame f)
{
        struct bpf_pkt p = { .data = f.b, .len = f.len, .vlan_tag_present = f.vlan };
        struct bpf_run r = bpf_interp_run(prog, prog_len, &p);
        if (r.aborted)
                diag("program aborted (an out-of-bounds load, which the kernel turns into a pass)");
        return r.aborted ? 0xdead : r.ret;
}

#define TCP(d, port) build((struct spec){ .ethertype = 0x0800, .proto = IPPROTO_TCP, .dst = (d), .dport = (port) })
#define UDP(d, port) build((struct spec){ .ethertype = 0x0800, .proto = IPPROTO_UDP, .dst = (d), .dport = (port) })
#define PASS DM_BPF_PASS
#define DROP DM_BPF_DROP

static struct dm_bpf_host host;
static struct in_addr host_addrs[3];

static int compile(const char *mode, const char *const *allow)
{
        struct dm_policy *pol = NULL;
        struct dm_error err = { 0 };
        int r;

        free(prog);
        prog = NULL;
        r = dm_policy_parse(mode, allow, DM_POLICY_CALLER_ALLOWED, &pol, &err);
        if (r == 0)
                r = dm_bpf_compile(pol, &host, &prog, &prog_len, &err);
        dm_policy_free(pol);
        if (r < 0)
                diag("compile failed: %s", err.msg);
        ok(r == 0 && bpf_interp_check(prog, prog_len) == 0 && prog_len <= DM_BPF_MAX_INSNS,
           "%s: compiles to a valid program of %zu instructions", mode, prog_len);
        return r;
}

/* Truncations and byte flips of a frame must never make the program read out
 * of bounds (which would pass the frame) and must only ever return 0 or 2. */
static void mutate(struct frame base, const char *what, bool needs_ports)
{
        unsigned bad = 0, seed = 12345;

        for (uint32_t cut = 0; cut <= base.len; cut++) {
                struct frame f = base;
                f.len = cut;
                uint32_t r = run(f);
                if (r != PASS && r != DROP)
                        bad++;
                if (needs_ports && cut < 14 + 20 + 4 && r == PASS)
                        bad++; /* an IPv4 frame too short for its ports never passes a port rule */
        }
        for (int i = 0; i < 20000; i++) {
                struct frame f = base;
                for (int j = 0; j < 4; j++) {
                        seed = seed * 1103515245u + 12345u;
                        f.b[(seed >> 8) % 60] = (uint8_t)(seed >> 20);
                }
                seed = seed * 1103515245u + 12345u;
                f.len = (seed >> 8) % (base.len + 1);
                struct bpf_pkt p = { .data = f.b, .len = f.len };
                struct bpf_run r = bpf_interp_run(prog, prog_len, &p);
                if (r.aborted || (r.ret != PASS && r.ret != DROP))
                        bad++;
        }
        is_int(bad, 0, "%s: 20000 mutated and every truncated frame: no out-of-bounds load, only pass or drop", what);
}

static void test_interpreter(void)
{
        /* The interpreter itself: an out-of-bounds load ends with 0, as in the kernel. */
        struct sock_filter f[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 100), BPF_STMT(BPF_RET | BPF_K, 2) };
        uint8_t b[20] = { 0 };
        struct bpf_pkt p = { .data = b, .len = sizeof(b) };
        struct bpf_run r = bpf_interp_run(f, 2, &p);
        ok(r.aborted && r.ret == 0, "interpreter: an out-of-bounds load ends the program with 0 (kernel semantics)");
        struct sock_filter bad[] = { BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 5, 0), BPF_STMT(BPF_RET | BPF_K, 0) };
        ok(bpf_interp_check(bad, 2) == 1, "interpreter: a jump past the end is refused");
}

static void test_allowlist(void)
{
        const char *allow[] = { "10.1.0.0/16:443", "192.0.2.7",    "198.51.100.53:53",
                                "*.example.com",   "pypi.org:443", NULL };
        if (compile("package-managers", allow) < 0)
                return;
        is_int(run(build((struct spec){ .ethertype = 0x0806 })), PASS, "ARP passes");
        is_int(run(build((struct spec){ .ethertype = 0x86dd })), DROP, "IPv6 is dropped");
        is_int(run(build((struct spec){ .ethertype = 0x88cc })), DROP, "another ethertype (LLDP) is dropped");
        struct frame v = TCP("10.1.2.3", 443);
        v.vlan = true;
        is_int(run(v), DROP, "a VLAN-tagged frame is dropped, even to an allowed port");

        static const struct {
                uint8_t proto;
                const char *dst;
                uint16_t port;
                uint32_t want;
                const char *what;
        } cases[] = {
                { IPPROTO_TCP, "10.1.2.3", 443, PASS, "TCP to an allowed CIDR:port passes" },
                { IPPROTO_UDP, "10.1.2.3", 443, PASS,
                  "UDP to an allowed CIDR:port passes (port rules cover TCP and UDP)" },
                { IPPROTO_TCP, "10.1.2.3", 80, DROP, "TCP to another port of the allowed CIDR is dropped" },
                { IPPROTO_TCP, "10.2.0.1", 443, DROP, "TCP to the allowed port outside the CIDR is dropped" },
                { IPPROTO_TCP, "192.0.2.7", 22, PASS, "any port to a bare allowed address passes" },
                { IPPROTO_TCP, "8.8.8.8", 443, DROP, "an address not in the policy is dropped" },
                { IPPROTO_UDP, "8.8.8.8", 53, DROP, "UDP DNS to a resolver the policy does not name is dropped" },
                { IPPROTO_TCP, "8.8.8.8", 53, DROP, "TCP DNS to a resolver the policy does not name is dropped" },
                { IPPROTO_UDP, "198.51.100.53", 53, PASS, "UDP DNS to the allowed resolver passes" },
                { IPPROTO_TCP, "198.51.100.53", 53, PASS, "TCP DNS to the allowed resolver passes" },
                { IPPROTO_UDP, "198.51.100.53", 5353, DROP, "another UDP port of the allowed resolver is dropped" },
                { IPPROTO_TCP, "10.200.0.1", 3128, PASS, "TCP to the proxy passes" },
                { IPPROTO_UDP, "10.200.0.1", 3128, DROP, "UDP to the proxy port is dropped" },
                { IPPROTO_TCP, "10.200.0.1", 22, DROP, "another port of the proxy address is dropped" },
                { IPPROTO_TCP, "192.168.1.10", 443, DROP, "a host address is dropped" },
                { IPPROTO_TCP, "10.1.5.5", 443, DROP, "a host address inside an allowed CIDR is dropped" },
                { IPPROTO_TCP, "169.254.169.254", 80, DROP, "link-local (metadata) is dropped" },
                { IPPROTO_TCP, "127.0.0.1", 443, DROP, "loopback is dropped" },
                { IPPROTO_UDP, "224.0.0.251", 5353, DROP, "multicast (mDNS) is dropped" },
                { IPPROTO_UDP, "255.255.255.255", 67, DROP, "broadcast is dropped" },
        };
        for (size_t i = 0; i < DM_ARRAY_SIZE(cases); i++)
                is_int(run(build((struct spec){ .ethertype = 0x0800,
                                                .proto = cases[i].proto,
                                                .dst = cases[i].dst,
                                                .dport = cases[i].port })),
                       cases[i].want, "%s", cases[i].what);
        is_int(run(build((struct spec){ .ethertype = 0x0800, .proto = IPPROTO_ICMP, .dst = "10.1.2.3" })), DROP,
               "ICMP to a CIDR:port destination is dropped");
        is_int(run(build((struct spec){ .ethertype = 0x0800, .proto = IPPROTO_ICMP, .dst = "192.0.2.7" })), PASS,
               "ICMP to a bare allowed address passes");
        is_int(run(build((struct spec){ .ethertype = 0x0800,
                                        .ihl = 6,
                                        .proto = IPPROTO_TCP,
                                        .dst = "10.200.0.1",
                                        .dport = 3128,
                                        .opt_fill = 0x01 })),
               DROP, "the proxy with IP options (a source route could make the host forward it) is dropped");

        /* IP options: the port is after IHL*4 bytes. The options are filled
         * with 0x01bb (443) so that a fixed offset of 20 would read 443. */
        struct spec o = { .ethertype = 0x0800, .ihl = 6, .proto = IPPROTO_TCP, .dst = "10.1.2.3", .dport = 80 };
        struct frame fo = build(o);
        fo.b[14 + 20] = 0x01, fo.b[14 + 21] = 0xbb, fo.b[14 + 22] = 0x01, fo.b[14 + 23] = 0xbb;
        is_int(run(fo), DROP, "with IP options the port is read after the options (80: dropped)");
        o.dport = 443;
        is_int(run(build(o)), PASS, "with 4 bytes of IP options, the allowed port passes");
        o.ihl = 15;
        is_int(run(build(o)), PASS, "with 40 bytes of IP options (IHL 15), the allowed port passes");
        o.ihl = 4;
        is_int(run(build(o)), DROP, "an IHL below 5 is dropped");
        o.ihl = 5;
        o.version = 6;
        is_int(run(build(o)), DROP, "IP version 6 in an IPv4 ethertype frame is dropped");
        o.version = 4;
        o.cut = 14 + 20 + 2;
        is_int(run(build(o)), DROP, "a TCP packet cut before its destination port is dropped");
        o.cut = 14 + 19;
        is_int(run(build(o)), DROP, "a frame shorter than an IPv4 header is dropped");
        o.cut = 10;
        is_int(run(build(o)), DROP, "a frame shorter than an Ethernet header is dropped");
        o.cut = 0;

        /* Fragments. */
        o.frag = 0x2000; /* MF, offset 0: the first fragment carries the ports */
        is_int(run(build(o)), PASS, "the first fragment to an allowed port passes");
        o.frag = 0x2000 | 185;
        is_int(run(build(o)), DROP, "a later fragment to a CIDR:port destination is dropped (it has no ports)");
        o.frag = 185;
        is_int(run(build(o)), DROP, "the last fragment to a CIDR:port destination is dropped");
        o.dst = "192.0.2.7";
        is_int(run(build(o)), PASS, "a later fragment to a destination allowed on every port passes");
        o.dst = "10.1.2.3";
        o.frag = 0x4000; /* DF */
        is_int(run(build(o)), PASS, "DF set, not a fragment: passes");

        mutate(TCP("10.1.2.3", 443), "allowlist, TCP allowed", true);
        mutate(build((struct spec){
                       .ethertype = 0x0800, .ihl = 15, .proto = IPPROTO_UDP, .dst = "198.51.100.53", .dport = 53 }),
               "allowlist, UDP with options", true);
        mutate(TCP("10.200.0.1", 3128), "allowlist, proxy", true);
}

static void test_open(void)
{
        if (compile("open", NULL) < 0)
                return;
        is_int(run(TCP("8.8.8.8", 443)), PASS, "open: any address passes");
        is_int(run(UDP("8.8.8.8", 53)), PASS, "open: any resolver passes");
        is_int(run(build((struct spec){ .ethertype = 0x0800, .proto = IPPROTO_TCP, .dst = "8.8.8.8", .frag = 185 })),
               PASS, "open: a later fragment passes");
        is_int(run(TCP("169.254.169.254", 80)), DROP, "open: link-local is still dropped");
        is_int(run(TCP("192.168.1.10", 22)), DROP, "open: host addresses are still dropped");
        is_int(run(TCP("10.200.0.1", 22)), DROP, "open: the proxy address on another port is dropped");
        is_int(run(TCP("10.200.0.1", 3128)), PASS, "open: the proxy passes");
        is_int(run(TCP("10.200.0.5", 80)), DROP, "open: another sandbox (the pool) is dropped");
        is_int(run(TCP("10.200.0.9", 3128)), DROP, "open: another sandbox's proxy (host side) is dropped");
        is_int(run(UDP("10.200.255.255", 53)), DROP, "open: anywhere in the pool is dropped");
        is_int(run(TCP("100.100.100.200", 80)), DROP, "open: Alibaba metadata is dropped");
        is_int(run(TCP("168.63.129.16", 80)), DROP, "open: Azure wireserver is dropped");
        is_int(run(TCP("10.9.9.9", 443)), DROP, "open: 10/8 is dropped");
        is_int(run(TCP("172.16.5.5", 443)), DROP, "open: 172.16/12 is dropped");
        is_int(run(TCP("192.168.50.1", 443)), DROP, "open: 192.168/16 is dropped");
        is_int(run(TCP("100.64.1.1", 443)), DROP, "open: 100.64/10 is dropped");
        is_int(run(TCP("10.1.7.7", 443)), PASS, "open: the private range the operator allowed passes");
        is_int(run(TCP("203.0.113.9", 22)), PASS, "open: a public address passes");
        is_int(run(build((struct spec){ .ethertype = 0x86dd })), DROP, "open: IPv6 is dropped");
        is_int(run(build((struct spec){ .ethertype = 0x0806 })), PASS, "open: ARP passes");
        mutate(TCP("8.8.8.8", 443), "open", false);
}

static void test_none(void)
{
        struct dm_bpf_host saved = host;

        host = (struct dm_bpf_host){ 0 };
        if (compile("none", NULL) == 0) {
                is_int(run(TCP("8.8.8.8", 443)), DROP, "none: TCP is dropped");
                is_int(run(UDP("10.200.0.1", 53)), DROP, "none: UDP is dropped");
                is_int(run(build((struct spec){ .ethertype = 0x0806 })), PASS, "none: ARP passes");
        }
        host = saved;
        const char *wide[] = { "8.0.0.0/7", NULL };
        if (compile("none", wide) == 0) {
                is_int(run(TCP("8.8.8.8", 443)), PASS, "8.0.0.0/7: an address in it passes");
                is_int(run(TCP("169.254.169.254", 80)), DROP, "8.0.0.0/7: link-local is still dropped");
                is_int(run(TCP("192.168.1.10", 80)), DROP, "8.0.0.0/7: host addresses are still dropped");
                is_int(run(TCP("10.200.0.5", 80)), DROP, "8.0.0.0/7: the pool is still dropped");
        }
}

/* An agent run: none, plus the vendor proxy's port on the proxy address. */
static void test_vendor_port(void)
{
        struct dm_bpf_host saved = host;

        host.vendor_port = 3129;
        if (compile("none", NULL) == 0) {
                is_int(run(TCP("10.200.0.1", 3129)), PASS, "vendor: TCP to the vendor port passes");
                is_int(run(TCP("10.200.0.1", 3128)), PASS, "vendor: TCP to the egress proxy still passes");
                is_int(run(TCP("10.200.0.1", 3130)), DROP, "vendor: another port on the proxy address is dropped");
                is_int(run(UDP("10.200.0.1", 3129)), DROP, "vendor: UDP to the vendor port is dropped");
                is_int(run(TCP("192.168.1.10", 3129)), DROP, "vendor: the port on a host address is dropped");
                is_int(run(TCP("8.8.8.8", 443)), DROP, "vendor: anything else is dropped");
                is_int(run(build((struct spec){ .ethertype = 0x0800,
                                                .ihl = 6,
                                                .proto = IPPROTO_TCP,
                                                .dst = "10.200.0.1",
                                                .dport = 3129,
                                                .opt_fill = 0x01 })),
                       DROP, "vendor: IP options to the vendor port are dropped");
                mutate(TCP("10.200.0.1", 3129), "vendor port", true);
        }
        host = saved;
}

static void test_limit(void)
{
        static char entries[DM_POLICY_MAX_ENTRIES][32];
        static const char *allow[DM_POLICY_MAX_ENTRIES + 1];
        static struct in_addr many[1500];
        struct dm_bpf_host big = host;
        struct dm_policy *pol = NULL;
        struct dm_error err = { 0 };
        struct sock_filter *p = NULL;
        size_t n = 0;

        for (int i = 0; i < DM_POLICY_MAX_ENTRIES; i++) {
                snprintf(entries[i], sizeof(entries[i]), "11.%d.%d.0/24:%d", i / 200, i % 200, 1000 + i);
                allow[i] = entries[i];
        }
        is_int(dm_policy_parse("package-managers", allow, DM_POLICY_CALLER_ALLOWED, &pol, &err), 0,
               "%d port rules parse", DM_POLICY_MAX_ENTRIES);
        if (!pol)
                return;
        is_int(dm_bpf_compile(pol, &host, &p, &n, &err), 0,
               "the most allow entries fit in the program (%zu instructions)", n);
        ok(bpf_interp_check(p, n) == 0, "and the program is valid");
        free(p);
        p = NULL;
        for (size_t i = 0; i < DM_ARRAY_SIZE(many); i++)
                many[i].s_addr = htonl(0x0b000000u + (uint32_t)i);
        big.host_addrs = many;
        big.n_host_addrs = DM_ARRAY_SIZE(many);
        is_int(dm_bpf_compile(pol, &big, &p, &n, &err), -E2BIG, "a program over 4096 instructions is refused");
        ok(strstr(err.msg, "4096") && strstr(err.msg, "instructions"), "message names the limit: %s", err.msg);
        ok(p == NULL, "nothing is returned on failure");
        dm_policy_free(pol);
}

int main(void)
{
        struct dm_error err = { 0 };
        struct dm_blocked_settings bs;

        /* As DEMESNE_SANDBOX_SUBNET=10.200.0.0/16 and
         * DEMESNE_EGRESS_ALLOW_PRIVATE=10.1.0.0/16 would: the proxy address
         * below is in the pool. */
        is_int(dm_blocked_settings_parse("10.200.0.0/16", "10.1.0.0/16", &bs, &err), 0,
               "pool and operator's private range parsed");
        ok(bs.has_pool, "the pool is taken");
        dm_blocked_init(&bs);
        inet_pton(AF_INET, "10.200.0.1", &host.proxy_addr);
        host.proxy_port = 3128;
        inet_pton(AF_INET, "192.168.1.10", &host_addrs[0]);
        inet_pton(AF_INET, "10.1.5.5", &host_addrs[1]);
        inet_pton(AF_INET, "10.200.0.1", &host_addrs[2]);
        host.host_addrs = host_addrs;
        host.n_host_addrs = 3;

        test_interpreter();
        test_allowlist();
        test_open();
        test_none();
        test_vendor_port();
        test_limit();
        free(prog);
        return done_testing();
}
