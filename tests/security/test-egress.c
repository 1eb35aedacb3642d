/* SPDX-License-Identifier: MIT */
/* Security battery, egress: a sandbox never reaches the host or another
 * sandbox, through the kernel filters or through the egress proxy.
 *
 * Everything happens inside a network namespace this test makes for itself
 * and treats as "the host": the sandboxes' pairs, the tc filters, the
 * nf_tables guard and NAT tables, a metadata address (on its loopback
 * interface, as a host address the filter must keep out), a public test host
 * (a second namespace behind a veth) and host services bound to 0.0.0.0 and
 * 127.0.0.1. The sandboxes are processes in namespaces of their own (as a
 * container's), set up by the server's own code (src/core/egress.c). Nothing
 * touches the machine's namespace; traffic goes only to these hosts. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netpolicy/nat.h"
#include "netpolicy/policy.h"
#include "src/core/context.h"
#include "src/core/egress.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"
#include "tests/netns.h"

#define WAIT_MS 800
#define PUB_IP "198.18.99.2"
#define META_IP "169.254.169.254"
#define LATE_IP "203.0.113.50"

static int test_ns = -1;

/* Moves the calling thread into pid's namespace (pid 0: the test's). */
static int enter(pid_t pid)
{
        char path[64];
        int fd, r;

        if (pid == 0)
                return setns(test_ns, CLONE_NEWNET);
        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -1;
        r = setns(fd, CLONE_NEWNET);
        close(fd);
        return r;
}

/* --- services: each connection gets a fixed line ------------------------- */

struct service {
        int fd;
        const char *banner;
        pthread_t thread;
        atomic_int stop;
};

static void *service_main(void *arg)
{
        struct service *s = arg;
        char buf[512];

        while (!atomic_load(&s->stop)) {
                struct pollfd p = { .fd = s->fd, .events = POLLIN };
                if (poll(&p, 1, 50) <= 0)
                        continue;
                int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0)
                        continue;
                struct pollfd q = { .fd = c, .events = POLLIN };
                if (poll(&q, 1, 200) == 1 && read(c, buf, sizeof(buf)) < 0)
                        diag("service read: %s", strerror(errno));
                dprintf(c, "HTTP/1.0 200 OK\r\n\r\n%s\n", s->banner);
                close(c);
        }
        return NULL;
}

/* A listener on ip:port in pid's namespace (0: the test's). */
static bool service_start(struct service *s, pid_t pid, const char *ip, int port, const char *banner)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
        int one = 1;

        memset(s, 0, sizeof(*s));
        s->banner = banner;
        inet_pton(AF_INET, ip, &a.sin_addr);
        if (enter(pid) < 0)
                return false;
        s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        setsockopt(s->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        bool ok_ = s->fd >= 0 && bind(s->fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(s->fd, 16) == 0;
        if (enter(0) < 0 || !ok_)
                return false;
        return pthread_create(&s->thread, NULL, service_main, s) == 0;
}

static void service_stop(struct service *s)
{
        atomic_store(&s->stop, 1);
        pthread_join(s->thread, NULL);
        close(s->fd);
}

/* --- probes from inside a sandbox ---------------------------------------- */

struct probe {
        pid_t pid;
        struct sockaddr_in to;
        const char *send; /* NULL: connect and read only */
        int wait_ms;
        bool connected;
        int err;
        char reply[1024];
};

static void *probe_main(void *arg)
{
        struct probe *p = arg;
        int fd, e = 0;
        socklen_t el = sizeof(e);
        struct pollfd q;
        size_t len = 0;

        if (enter(p->pid) < 0) {
                p->err = errno;
                return NULL;
        }
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        q = (struct pollfd){ .fd = fd, .events = POLLOUT };
        if (connect(fd, (struct sockaddr *)&p->to, sizeof(p->to)) < 0 && errno != EINPROGRESS) {
                p->err = errno;
        } else if (poll(&q, 1, p->wait_ms) != 1) {
                p->err = ETIMEDOUT;
        } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) < 0 || e != 0) {
                p->err = e ? e : errno;
        } else {
                p->connected = true;
                if (p->send && write(fd, p->send, strlen(p->send)) < 0)
                        p->err = errno;
                q.events = POLLIN;
                while (len < sizeof(p->reply) - 1 && poll(&q, 1, 5000) == 1) {
                        ssize_t n = read(fd, p->reply + len, sizeof(p->reply) - 1 - len);
                        if (n <= 0)
                                break;
                        len += (size_t)n;
                }
        }
        p->reply[len] = '\0';
        close(fd);
        return NULL;
}

static struct probe probe(pid_t pid, uint32_t addr, int port, const char *send)
{
        struct probe p = { .pid = pid, .send = send, .wait_ms = send ? 3000 : WAIT_MS };
        pthread_t t;

        p.to = (struct sockaddr_in){ .sin_family = AF_INET,
                                     .sin_port = htons((uint16_t)port),
                                     .sin_addr.s_addr = addr };
        if (pthread_create(&t, NULL, probe_main, &p) == 0)
                pthread_join(t, NULL);
        return p;
}

static uint32_t ip4(const char *s)
{
        struct in_addr a = { 0 };
        inet_pton(AF_INET, s, &a);
        return a.s_addr;
}

static const char *ntoa(uint32_t a, char *buf)
{
        struct in_addr x = { a };
        return inet_ntop(AF_INET, &x, buf, INET_ADDRSTRLEN);
}

/* A TCP connect from the sandbox to addr:port does not get through. */
static void unreachable(pid_t pid, uint32_t addr, int port, const char *what)
{
        struct probe p = probe(pid, addr, port, NULL);
        char a[INET_ADDRSTRLEN];

        ok(!p.connected && p.reply[0] == '\0', "%s (%s:%d) is not reached: %s", what, ntoa(addr, a), port,
           p.connected ? p.reply : strerror(p.err));
}

/* A request through the sandbox's proxy is refused with 403 and why. */
static void proxy_refuses(pid_t pid, uint32_t proxy, const char *req, const char *why, const char *what)
{
        struct probe p = probe(pid, proxy, DM_EGRESS_PROXY_PORT, req);

        const char *body = strstr(p.reply, "\r\n\r\n");

        /* The banners of the services all have "-service" in them. */
        ok(p.connected && strstr(p.reply, "403 Forbidden") && strstr(p.reply, why) && !strstr(p.reply, "-service"),
           "proxy refuses %s: %.*s", what, body ? (int)strcspn(body + 4, "\n") : 200,
           body          ? body + 4
           : p.connected ? p.reply
                         : strerror(p.err));
}

static int count_links(void)
{
        struct dm_error err = { 0 };
        return dm_netlink_list(NULL, NULL, &err);
}

static void test_parse(void)
{
        static const char *const wide[] = { "0.0.0.0/0", "126.0.0.0/7", "168.0.0.0/6" };
        struct dm_error err = { 0 };

        for (size_t i = 0; i < sizeof(wide) / sizeof(wide[0]); i++) {
                const char *allow[] = { wide[i], "example.com", NULL };
                struct dm_policy *p = NULL;
                dm_error_clear(&err);
                is_int(dm_policy_parse("package-managers", allow, DM_POLICY_CALLER_ALLOWED, &p, &err), -EINVAL,
                       "allow '%s' is refused at parse time", wide[i]);
                ok(p == NULL && strstr(err.msg, wide[i]) && strstr(err.msg, "overlaps") &&
                           strstr(err.msg, "never reaches"),
                   "  naming the entry, the range and why: %s", err.msg);
                dm_policy_free(p);
        }
}

static struct dm_egress_run *start(struct dm_context *ctx, const char *mode, const char *const *allow, const char *tag,
                                   pid_t pid, const char *outdir)
{
        struct dm_policy *p = NULL;
        struct dm_egress_run *e = NULL;
        struct dm_error err = { 0 };
        int64_t t0 = dm_now_ms();

        if (dm_policy_parse(mode, allow, DM_POLICY_CALLER_ALLOWED, &p, &err) == 0)
                dm_egress_start(ctx, p, tag, "-", (int)pid, NULL, outdir, &e, &err);
        ok(e != NULL, "sandbox %s (egress %s) set up in %lld ms: %s", tag, mode, (long long)(dm_now_ms() - t0),
           err.msg);
        dm_policy_free(p);
        return e;
}

int main(void)
{
        char dir[] = "/tmp/dm-sec-egress-XXXXXX", hosts[300], tag_a[64], tag_b[64], req[256], a_s[16];
        struct service host_any, host_lo, meta, pub, in_b;
        struct dm_context ctx;
        struct dm_egress_run *a = NULL, *b = NULL;
        pid_t pid_a = -1, pid_b = -1, pid_pub = -1;
        FILE *f;

        if (geteuid() != 0)
                return skip_all(
                        "needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) for network namespaces, veths and nf_tables");
        test_parse();

        /* The test's "host": a namespace of its own, forwarding on (as
         * wherever an engine runs containers with networks). */
        if (unshare(CLONE_NEWNET) < 0)
                return skip_all("cannot make a network namespace (needs CAP_SYS_ADMIN)");
        test_ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        pid_pub = netns_spawn();
        if (!mkdtemp(dir) || test_ns < 0 || pid_pub < 0 || sh("ip link set lo up") ||
            sh("echo 1 > /proc/sys/net/ipv4/ip_forward") || sh("ip addr add " META_IP "/32 dev lo") ||
            sh("ip link add dmt-pub type veth peer name eth0 netns %d && ip addr add 198.18.99.1/30 dev dmt-pub && "
               "ip link set dmt-pub up",
               (int)pid_pub) ||
            enter(pid_pub) < 0 ||
            sh("ip link set lo up && ip addr add " PUB_IP "/30 dev eth0 && ip link set eth0 up") || enter(0) < 0) {
                printf("Bail out! could not set up the test's namespaces\n");
                netns_end(pid_pub);
                return 1;
        }
        ok(service_start(&host_any, 0, "0.0.0.0", 7001, "host-service-any") &&
                   service_start(&host_lo, 0, "127.0.0.1", 7002, "host-service-loopback") &&
                   service_start(&meta, 0, META_IP, 80, "metadata-service") &&
                   service_start(&pub, pid_pub, PUB_IP, 8080, "public-host"),
           "services: the host on 0.0.0.0 and 127.0.0.1, a metadata address, a public test host");

        snprintf(hosts, sizeof(hosts), "%s/hosts", dir);
        f = fopen(hosts, "we");
        if (f) {
                fprintf(f, PUB_IP " pub.test\n127.0.0.1 loop.test\n" META_IP " meta.test\n");
                fclose(f);
        }
        memset(&ctx, 0, sizeof(ctx));
        ctx.cfg.proxy_hosts = hosts; /* as DEMESNE_PROXY_HOSTS gives it a server */
        ctx.egress = dm_egress_host_new();
        snprintf(tag_a, sizeof(tag_a), "sec-egress-a-%d", (int)getpid());
        snprintf(tag_b, sizeof(tag_b), "sec-egress-b-%d", (int)getpid());
        pid_a = netns_spawn();
        pid_b = netns_spawn();
        const char *allow_b[] = { "pub.test:8080", "loop.test", "meta.test", NULL };
        a = start(&ctx, "open", NULL, tag_a, pid_a, dir);
        b = start(&ctx, "package-managers", allow_b, tag_b, pid_b, dir);
        if (!a || !b)
                goto out;
        const struct dm_netlink *na = dm_egress_net(a), *nb = dm_egress_net(b);
        ok(service_start(&in_b, pid_b, "0.0.0.0", 7003, "sandbox-b-service"), "a service inside sandbox B");
        {
                /* What the guard adds to each sandbox's set-up (it is made sure of each time). */
                struct dm_cidr pool;
                struct dm_error err = { 0 };
                uint16_t ports[] = { DM_EGRESS_PROXY_PORT, DM_EGRESS_VENDOR_PORT };
                int64_t t0 = dm_now_ms();
                int r = 0;
                dm_cidr_parse(DM_NETLINK_POOL_DEFAULT, &pool, &err);
                for (int i = 0; i < 20 && r == 0; i++)
                        r = dm_guard_ensure(&pool, ports, 2, &err);
                ok(r == 0, "the guard is idempotent: %s", err.msg);
                diag("dm_guard_ensure: %.2f ms each (20 runs)", (double)(dm_now_ms() - t0) / 20);
        }

        /* The setup works: the filters are what stop the rest. */
        struct probe p = probe(pid_a, ip4(PUB_IP), 8080, "GET / HTTP/1.0\r\n\r\n");
        ok(strstr(p.reply, "public-host") != NULL, "A (open) reaches the public test host: %s", p.reply);
        snprintf(req, sizeof(req), "GET http://pub.test:8080/ HTTP/1.1\r\n\r\n");
        p = probe(pid_b, nb->host_addr, DM_EGRESS_PROXY_PORT, req);
        ok(strstr(p.reply, "public-host") != NULL, "B reaches an allowed name through its own proxy: %.80s", p.reply);

        /* Sandbox A, egress open, made before B. */
        unreachable(pid_a, nb->host_addr, 7001, "A: B's host-side address, a host service on 0.0.0.0");
        unreachable(pid_a, nb->host_addr, DM_EGRESS_PROXY_PORT, "A: B's proxy");
        unreachable(pid_a, nb->peer_addr, 7003, "A: B's container address");
        unreachable(pid_a, na->host_addr, 7001, "A: its own host-side address, a host service on 0.0.0.0");
        unreachable(pid_a, ip4(META_IP), 80, "A: the metadata address");
        unreachable(pid_a, ip4("198.18.99.1"), 7001, "A: another address of the host");
        sh("ip addr add " LATE_IP "/32 dev lo");
        unreachable(pid_a, ip4(LATE_IP), 7001, "A: an address the host got after the sandbox started");
        unreachable(pid_b, ip4(LATE_IP), 7001, "B: an address the host got after the sandbox started");

        /* Sandbox B, package-managers with allow entries, direct. */
        unreachable(pid_b, nb->host_addr, 7001, "B: its own host-side address, another port");
        unreachable(pid_b, na->host_addr, 7001, "B: A's host-side address");
        unreachable(pid_b, na->peer_addr, 7003, "B: A's container address");

        /* And through its proxy: the reproduction of the report, and more. */
        snprintf(req, sizeof(req), "GET http://127.0.0.1:7002/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
        proxy_refuses(pid_b, nb->host_addr, req, "loopback", "a service on the host's 127.0.0.1");
        proxy_refuses(pid_b, nb->host_addr, "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n", "link-local",
                      "the metadata address");
        snprintf(req, sizeof(req), "GET http://%s:7001/ HTTP/1.1\r\n\r\n", ntoa(na->host_addr, a_s));
        proxy_refuses(pid_b, nb->host_addr, req, "sandbox pool", "A's host-side address");
        snprintf(req, sizeof(req), "CONNECT %s:7003 HTTP/1.1\r\n\r\n", ntoa(na->peer_addr, a_s));
        proxy_refuses(pid_b, nb->host_addr, req, "sandbox pool", "A's container address");
        proxy_refuses(pid_b, nb->host_addr, "CONNECT deb.debian.org:22 HTTP/1.1\r\n\r\n", "port 22 is not allowed",
                      "CONNECT to port 22 of a package host");
        proxy_refuses(pid_b, nb->host_addr, "CONNECT loop.test:7002 HTTP/1.1\r\n\r\n", "loopback",
                      "an allowed name resolving to 127.0.0.1");
        proxy_refuses(pid_b, nb->host_addr, "GET http://meta.test/latest/ HTTP/1.1\r\n\r\n", "link-local",
                      "an allowed name resolving to the metadata address");
        proxy_refuses(pid_b, nb->host_addr, "CONNECT [::ffff:127.0.0.1]:7002 HTTP/1.1\r\n\r\n", "IPv6",
                      "a v4-mapped loopback literal");
        proxy_refuses(pid_b, nb->host_addr, "CONNECT [::1]:7002 HTTP/1.1\r\n\r\n", "IPv6", "::1");
        proxy_refuses(pid_b, nb->host_addr, "CONNECT [fd00:ec2::254]:80 HTTP/1.1\r\n\r\n", "IPv6",
                      "the IPv6 metadata address");
        snprintf(req, sizeof(req), "CONNECT " LATE_IP ":7001 HTTP/1.1\r\n\r\n");
        proxy_refuses(pid_b, nb->host_addr, req, "not covered", "a host address by literal");
        service_stop(&in_b);

        /* A's pair goes with its namespace, as a container's does when the
         * engine removes it (the guard must not hold it up). */
        {
                char ifname[IF_NAMESIZE];
                int64_t t0;
                snprintf(ifname, sizeof(ifname), "%s", na->host_ifname);
                dm_egress_stop(&ctx, a, false);
                a = NULL;
                t0 = dm_now_ms();
                netns_end(pid_a);
                pid_a = -1;
                while (dm_netlink_exists(ifname, tag_a) && dm_now_ms() - t0 < slack_ms(60000))
                        usleep(5000);
                ok(!dm_netlink_exists(ifname, tag_a), "A's pair went with its namespace in %lld ms",
                   (long long)(dm_now_ms() - t0));
        }

out:
        dm_egress_stop(&ctx, a, true);
        dm_egress_stop(&ctx, b, true);
        dm_egress_shutdown(&ctx);
        netns_end(pid_a);
        netns_end(pid_b);
        service_stop(&host_any);
        service_stop(&host_lo);
        service_stop(&meta);
        service_stop(&pub);
        netns_end(pid_pub);
        sh("ip link del dmt-pub 2>/dev/null; true");
        is_int(count_links(), 0, "no sandbox veth left");
        ok(!dm_guard_present() && !dm_nat_present(), "no nf_tables table of demesne left");
        unlink(hosts);
        {
                char log[sizeof(dir) + 16];

                snprintf(log, sizeof(log), "%s/egress.log", dir);
                unlink(log);
        }
        ok(rmdir(dir) == 0, "no file left in %s", dir);
        dm_egress_host_free(ctx.egress);
        close(test_ns);
        return done_testing();
}
