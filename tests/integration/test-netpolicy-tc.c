/* SPDX-License-Identifier: MIT */
#include "config.h"

/* The compiled egress filter on a real kernel. Two network namespaces of the
 * test's own ("sandbox" S and "host" H) joined by a veth pair made directly
 * inside them (s0 in S, h0 in H), so nothing appears in the machine's own
 * namespace; the filter goes on h0's ingress, which sees what S sends, as
 * it will on a sandbox's host-side veth. Traffic goes only between S and H.
 * `ip` sets up the scaffolding; the filter goes on through netpolicy/tc.c. */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "netpolicy/blocked.h"
#include "netpolicy/bpf.h"
#include "netpolicy/policy.h"
#include "netpolicy/tc.h"
#include "tests/tap.h"
#include "tests/netns.h"

#define P_PROXY 3128
#define P_OK 8443
#define P_OTHER 8080
#define BLOCKED_WAIT_MS 700

static char ns_s[64], ns_h[64];
static int fd_orig = -1, fd_s = -1, fd_h = -1;

static void cleanup(void)
{
        if (fd_orig >= 0 && setns(fd_orig, CLONE_NEWNET) < 0)
                perror("setns back");
        if (fd_s >= 0)
                close(fd_s);
        if (fd_h >= 0)
                close(fd_h);
        fd_s = fd_h = -1;
        if (ns_s[0])
                sh("ip netns del %s 2>/dev/null", ns_s);
        if (ns_h[0])
                sh("ip netns del %s 2>/dev/null", ns_h);
        ns_s[0] = ns_h[0] = '\0';
}

static void enter(int fd)
{
        if (setns(fd, CLONE_NEWNET) < 0) {
                perror("setns");
                exit(1);
        }
}

static bool in_ns(int fd)
{
        struct stat a, b;
        return stat("/proc/thread-self/ns/net", &a) == 0 && fstat(fd, &b) == 0 && a.st_ino == b.st_ino &&
               a.st_dev == b.st_dev;
}

static int sock_in(int nsfd, int type)
{
        int s;
        enter(nsfd);
        s = socket(AF_INET, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        enter(fd_orig);
        return s;
}

static struct sockaddr_in addr(const char *ip, int port)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        inet_pton(AF_INET, ip, &a.sin_addr);
        return a;
}

static int listener(int type, int port)
{
        struct sockaddr_in a = addr("0.0.0.0", port);
        int one = 1, s = sock_in(fd_h, type);

        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || (type == SOCK_STREAM && listen(s, 16) < 0)) {
                perror("listener");
                exit(1);
        }
        return s;
}

/* A TCP connect from S; true when it completes within the wait. */
static bool tcp_reaches(const char *ip, int port)
{
        struct sockaddr_in a = addr(ip, port);
        struct pollfd p = { .events = POLLOUT };
        int e = 0;
        socklen_t el = sizeof(e);
        bool ok_ = false;

        p.fd = sock_in(fd_s, SOCK_STREAM);
        if (connect(p.fd, (struct sockaddr *)&a, sizeof(a)) == 0)
                ok_ = true;
        else if (errno == EINPROGRESS && poll(&p, 1, BLOCKED_WAIT_MS) == 1 &&
                 getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0)
                ok_ = true;
        close(p.fd);
        return ok_;
}

/* A UDP datagram from S; true when rx (bound in H) receives it. */
static bool udp_reaches(const char *ip, int port, int rx)
{
        struct sockaddr_in a = addr(ip, port);
        struct pollfd p = { .fd = rx, .events = POLLIN };
        char buf[16];
        int s = sock_in(fd_s, SOCK_DGRAM);
        bool got;

        sendto(s, "ping", 4, 0, (struct sockaddr *)&a, sizeof(a));
        got = poll(&p, 1, BLOCKED_WAIT_MS) == 1 && recv(rx, buf, sizeof(buf), 0) == 4;
        close(s);
        return got;
}

/* Runs in H only: asserts where we are before touching any interface. */
static int attach(int ifindex, const struct sock_filter *prog, size_t n, struct dm_error *err)
{
        int r;
        dm_error_clear(err);
        enter(fd_h);
        if (!in_ns(fd_h)) {
                enter(fd_orig);
                return dm_error_set(err, -EPERM, "not in the test namespace: refusing to attach");
        }
        r = dm_tc_attach_ingress(NULL, ifindex, prog, n, err);
        enter(fd_orig);
        return r;
}

static int compile(const char *mode, const char *const *allow, struct sock_filter **prog, size_t *n)
{
        static struct in_addr host_addrs[1];
        struct dm_bpf_host host = { .proxy_port = P_PROXY, .host_addrs = host_addrs, .n_host_addrs = 1 };
        struct dm_policy *pol = NULL;
        struct dm_error err = { 0 };
        int r;

        inet_pton(AF_INET, "10.77.0.1", &host.proxy_addr);
        host_addrs[0] = host.proxy_addr;
        r = dm_policy_parse(mode, allow, DM_POLICY_CALLER_ALLOWED, &pol, &err);
        if (r == 0)
                r = dm_bpf_compile(pol, &host, prog, n, &err);
        dm_policy_free(pol);
        if (r < 0)
                diag("compile: %s", err.msg);
        return r;
}

int main(void)
{
        struct dm_error err = { 0 };
        struct dm_blocked_settings bs;
        struct sock_filter *prog = NULL;
        size_t n = 0;
        int ifindex, udp_ok, udp_dns, tcp[3];
        bool clsact = true;
        size_t flen = 1;

        if (geteuid() != 0)
                return skip_all("needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) for network namespaces and tc");
        if (system("ip -V >/dev/null 2>&1") != 0)
                return skip_all("needs the ip command (iproute2) to set up test namespaces");

        /* The test hosts live in 10.77.0.0/24, a private range sandboxes
         * reach only where the operator allows it. */
        if (dm_blocked_settings_parse(NULL, "10.77.0.0/24", &bs, &err) < 0) {
                printf("Bail out! %s\n", err.msg);
                return 1;
        }
        dm_blocked_init(&bs);
        snprintf(ns_s, sizeof(ns_s), "dm-bpf-%d-s", (int)getpid());
        snprintf(ns_h, sizeof(ns_h), "dm-bpf-%d-h", (int)getpid());
        atexit(cleanup);
        fd_orig = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (sh("ip netns add %s", ns_s) || sh("ip netns add %s", ns_h) ||
            sh("ip -n %s link add s0 type veth peer name h0 netns %s", ns_s, ns_h) ||
            sh("ip -n %s addr add 10.77.0.2/24 dev s0 && ip -n %s link set s0 up && ip -n %s link set lo up", ns_s,
               ns_s, ns_s) ||
            sh("ip -n %s addr add 10.77.0.1/24 dev h0 && ip -n %s addr add 10.77.0.3/24 dev h0 && "
               "ip -n %s addr add 10.77.0.4/24 dev h0 && ip -n %s link set h0 up && ip -n %s link set lo up",
               ns_h, ns_h, ns_h, ns_h, ns_h)) {
                printf("Bail out! could not set up the test namespaces\n");
                return 1;
        }
        char path[128];
        snprintf(path, sizeof(path), "/run/netns/%s", ns_s);
        fd_s = open(path, O_RDONLY | O_CLOEXEC);
        snprintf(path, sizeof(path), "/run/netns/%s", ns_h);
        fd_h = open(path, O_RDONLY | O_CLOEXEC);
        ok(fd_orig >= 0 && fd_s >= 0 && fd_h >= 0, "namespaces %s and %s made", ns_s, ns_h);

        enter(fd_h);
        ifindex = (int)if_nametoindex("h0");
        enter(fd_orig);
        ok(ifindex > 0, "h0 found in the host-role namespace (ifindex %d)", ifindex);
        tcp[0] = listener(SOCK_STREAM, P_PROXY);
        tcp[1] = listener(SOCK_STREAM, P_OK);
        tcp[2] = listener(SOCK_STREAM, P_OTHER);
        udp_ok = listener(SOCK_DGRAM, P_OK);
        udp_dns = listener(SOCK_DGRAM, 53);

        ok(tcp_reaches("10.77.0.4", P_OK), "without a filter, another host's port is reachable (the setup works)");

        /* Where the packet starts: a program that drops frames whose bytes
         * 12-13 are the IPv4 ethertype, then one that drops by the address at
         * 30 (14 + 16): the frame has its Ethernet header at tc ingress. */
        struct sock_filter eth_probe[] = {
                BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 12),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0800, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, 2),
                BPF_STMT(BPF_RET | BPF_K, 0),
        };
        struct sock_filter dst_probe[] = {
                BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 30),
                BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0a4d0003, 0, 1),
                BPF_STMT(BPF_RET | BPF_K, 2),
                BPF_STMT(BPF_RET | BPF_K, 0),
        };
        is_int(attach(ifindex, eth_probe, 4, &err), 0, "probe attached: %s", err.msg);
        ok(!tcp_reaches("10.77.0.4", P_OK), "ethertype at offset 12: IPv4 frames dropped by the probe");
        is_int(attach(ifindex, dst_probe, 4, &err), 0, "probe replaced: %s", err.msg);
        ok(!tcp_reaches("10.77.0.3", P_OK), "IPv4 destination at offset 30 (Ethernet 14 + 16): .3 dropped");
        ok(tcp_reaches("10.77.0.4", P_OK), "and .4 reached: the frame starts with its Ethernet header");

        /* The real policy: proxy at .1:3128, .1 is a host address, allow .3:8443. */
        const char *allow[] = { "10.77.0.3:8443", NULL };
        if (compile("none", allow, &prog, &n) == 0) {
                is_int(attach(ifindex, prog, n, &err), 0, "policy filter attached (%zu instructions): %s", n, err.msg);
                enter(fd_h);
                is_int(dm_tc_query_ingress(NULL, ifindex, &clsact, &flen, &err), 0, "query: %s", err.msg);
                enter(fd_orig);
                ok(clsact, "clsact qdisc is there");
                is_int(flen, n, "our cls_bpf filter is on ingress, with the program's length");

                ok(tcp_reaches("10.77.0.3", P_OK), "allowed address:port connects");
                ok(!tcp_reaches("10.77.0.3", P_OTHER), "another port of the allowed address is dropped");
                ok(!tcp_reaches("10.77.0.4", P_OK), "the allowed port on another host is dropped");
                ok(tcp_reaches("10.77.0.1", P_PROXY), "the proxy connects");
                ok(!tcp_reaches("10.77.0.1", P_OK), "another port on the host address (proxy address) is dropped");
                ok(udp_reaches("10.77.0.3", P_OK, udp_ok), "UDP to the allowed address:port is delivered");
                ok(!udp_reaches("10.77.0.3", 53, udp_dns), "UDP DNS to a resolver not in the policy is dropped");
                ok(!udp_reaches("10.77.0.1", 53, udp_dns), "UDP DNS to the host address is dropped");
        }
        free(prog);
        prog = NULL;

        if (compile("open", NULL, &prog, &n) == 0) {
                is_int(attach(ifindex, prog, n, &err), 0, "open filter replaces the policy: %s", err.msg);
                ok(tcp_reaches("10.77.0.4", P_OTHER), "open: any other host and port connects");
                ok(udp_reaches("10.77.0.4", 53, udp_dns), "open: UDP to another host is delivered");
                ok(!tcp_reaches("10.77.0.1", P_OK), "open: the host address is still dropped");
        }
        free(prog);

        is_int(attach(999999, eth_probe, 4, &err), -ENODEV, "attach to a missing interface fails");
        ok(strstr(err.msg, "999999") != NULL, "message names the interface: %s", err.msg);

        enter(fd_h);
        dm_error_clear(&err);
        is_int(dm_tc_detach_ingress(NULL, ifindex, &err), 0, "detach: %s", err.msg);
        is_int(dm_tc_query_ingress(NULL, ifindex, &clsact, &flen, &err), 0, "query after detach");
        ok(!clsact && flen == 0, "no qdisc and no filter left on h0");
        is_int(dm_tc_detach_ingress(NULL, ifindex, &err), 0, "detach again is a no-op: %s", err.msg);
        enter(fd_orig);
        ok(tcp_reaches("10.77.0.1", P_OK), "after detach, traffic flows unfiltered");

        for (int i = 0; i < 3; i++)
                close(tcp[i]);
        close(udp_ok);
        close(udp_dns);
        char saved_s[64], saved_h[64];
        snprintf(saved_s, sizeof(saved_s), "%s", ns_s);
        snprintf(saved_h, sizeof(saved_h), "%s", ns_h);
        cleanup();
        snprintf(path, sizeof(path), "/run/netns/%s", saved_s);
        ok(access(path, F_OK) != 0, "namespace %s removed", saved_s);
        snprintf(path, sizeof(path), "/run/netns/%s", saved_h);
        ok(access(path, F_OK) != 0, "namespace %s removed", saved_h);
        snprintf(path, sizeof(path), "ip netns list | grep -q 'dm-bpf-%d-'", (int)getpid());
        ok(system(path) != 0, "ip netns list shows none of ours");
        close(fd_orig);
        fd_orig = -1;
        return done_testing();
}
