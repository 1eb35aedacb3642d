/* SPDX-License-Identifier: MIT */
/* netpolicy/link.c against the real kernel (root): a veth pair into a
 * network namespace this test makes (a child process that unshared its
 * network, standing in for a container), its addresses and routes, the
 * alias that marks it as demesne's, teardown, and the kernel removing the
 * pair when the namespace goes. Traffic goes only to the host side of the
 * pair this test created; other destinations are checked by reading the
 * namespace's routes, never by sending to them. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netpolicy/link.h"
#include "tests/tap.h"
#include "tests/netns.h"

static char *run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *run(const char *fmt, ...)
{
        char cmd[1024], *out = calloc(1, 65536);
        va_list ap;
        size_t n = 0;
        FILE *f;

        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        f = popen(cmd, "r");
        if (f) {
                n = fread(out, 1, 65535, f);
                pclose(f);
        }
        out[n] = '\0';
        return out;
}

struct probe {
        pid_t pid;
        uint32_t addr;
        int port;
        int result; /* 0 or errno */
        char reply[16];
};

/* Connects from inside the namespace (setns on a thread of its own). */
static void *connect_inside(void *arg)
{
        struct probe *p = arg;
        char path[64];
        int nsfd, fd;
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p->port) };

        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)p->pid);
        nsfd = open(path, O_RDONLY | O_CLOEXEC);
        if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0) {
                p->result = errno;
                return NULL;
        }
        close(nsfd);
        sa.sin_addr.s_addr = p->addr;
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
                p->result = errno;
        } else {
                ssize_t n = read(fd, p->reply, sizeof(p->reply) - 1);
                p->reply[n > 0 ? n : 0] = '\0';
        }
        close(fd);
        return NULL;
}

static int probe(pid_t pid, uint32_t addr, int port, char *reply, size_t len)
{
        struct probe p = { .pid = pid, .addr = addr, .port = port };
        pthread_t t;

        pthread_create(&t, NULL, connect_inside, &p);
        pthread_join(t, NULL);
        snprintf(reply, len, "%s", p.reply);
        return p.result;
}

struct server {
        int fd;
        pthread_t t;
};

static void *serve_one(void *arg)
{
        struct server *s = arg;
        struct pollfd p = { .fd = s->fd, .events = POLLIN };
        /* Never wait for ever: a probe the host drops must fail the test,
         * not hang it. */
        int c = poll(&p, 1, 15000) == 1 ? accept(s->fd, NULL, NULL) : -1;

        if (c >= 0) {
                (void)!write(c, "hello", 5);
                close(c);
        }
        return NULL;
}

/* On port 3128 of the pair's host side: the one place (with 3129) that
 * the nf_tables guard of a running demesne server lets a sandbox's packets
 * reach on this host (netpolicy/nat.h), and a guard may well be in place
 * while this test runs beside other tests. */
static int listen_on(uint32_t addr, struct server *s)
{
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = addr, .sin_port = htons(3128) };
        socklen_t len = sizeof(sa);

        s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (bind(s->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s->fd, 4) < 0 ||
            getsockname(s->fd, (struct sockaddr *)&sa, &len) < 0)
                return -1;
        pthread_create(&s->t, NULL, serve_one, s);
        return ntohs(sa.sin_port);
}

struct found {
        const char *tag;
        int n;
        char owner[160];
};

static void on_link(void *userdata, const char *ifname, const char *tag, const char *owner)
{
        struct found *f = userdata;

        (void)ifname;
        if (strcmp(tag, f->tag) == 0) {
                f->n++;
                snprintf(f->owner, sizeof(f->owner), "%s", owner);
        }
}

static int count_tag(const char *tag, char *owner)
{
        struct found f = { .tag = tag };
        struct dm_error err = { 0 };

        if (dm_netlink_list(on_link, &f, &err) < 0)
                return -1;
        if (owner)
                strcpy(owner, f.owner);
        return f.n;
}

int main(void)
{
        struct dm_error err = { 0 };
        struct dm_cidr pool, allowed, bad;
        struct dm_netlink net;
        char tag[64], owner[160], host[INET_ADDRSTRLEN], peer[INET_ADDRSTRLEN], reply[16], *s;
        struct server srv;
        pid_t ns;
        int port;

        if (geteuid() != 0) {
                printf("1..0 # SKIP needs root (veth pairs and network namespaces)\n");
                return 0;
        }
        snprintf(tag, sizeof(tag), "run-test-netlink-%d", (int)getpid());

        /* CIDR parsing. */
        ok(dm_cidr_parse("10.1.2.3/24", &allowed, &err) == 0 && allowed.prefix == 24 &&
                   allowed.addr == inet_addr("10.1.2.0"),
           "10.1.2.3/24 parses to 10.1.2.0/24");
        ok(dm_cidr_parse("198.51.100.7", &allowed, &err) == 0 && allowed.prefix == 32, "a bare address is a /32");
        is_int(dm_cidr_parse("10.0.0.0/33", &bad, &err), -EINVAL, "prefix 33 refused: %s", err.msg);
        is_int(dm_cidr_parse("fe80::1/64", &bad, &err), -EINVAL, "IPv6 refused: %s", err.msg);
        is_int(dm_cidr_parse("example.com", &bad, &err), -EINVAL, "a name is not a CIDR: %s", err.msg);

        /* The pool against the host's routes (read only). */
        dm_cidr_parse(DM_NETLINK_POOL_DEFAULT, &pool, &err);
        is_int(dm_netlink_pool_check(&pool, &err), 0, "the default pool collides with no host route (%s)", err.msg);
        s = run("ip -4 route show table main | awk '$1 != \"default\" && $1 ~ /\\// { print $1; exit }'");
        s[strcspn(s, "\n")] = '\0';
        if (*s && dm_cidr_parse(s, &bad, &err) == 0) {
                int r = dm_netlink_pool_check(&bad, &err);
                ok(r == -EADDRINUSE && strstr(err.msg, "DEMESNE_SANDBOX_SUBNET") != NULL,
                   "a pool on the host's route %s is refused: %s", s, err.msg);
        } else {
                ok(1, "the host has no prefix route to collide with (nothing to check)");
        }
        free(s);

        /* A namespace, and the pair into it. */
        ns = netns_spawn();
        if (!ok(ns > 0, "a process in a network namespace of its own"))
                return done_testing();
        dm_cidr_parse("198.51.100.0/24", &allowed, &err);
        struct dm_netlink_spec spec = {
                .container_pid = ns,
                .tag = tag,
                .owner = "boot-1-2",
                .pool = pool,
                .routes = &allowed,
                .n_routes = 1,
                .lock_path = DM_NETLINK_LOCK,
        };
        if (!ok(dm_netlink_setup(&spec, &net, &err) == 0, "set up the veth pair (%s)", err.msg)) {
                netns_end(ns);
                return done_testing();
        }
        inet_ntop(AF_INET, &net.host_addr, host, sizeof(host));
        inet_ntop(AF_INET, &net.peer_addr, peer, sizeof(peer));
        diag("host side %s (%s), sandbox %s", net.host_ifname, host, peer);
        ok(strncmp(net.host_ifname, "dm-", 3) == 0 && net.host_ifindex > 0, "host side %s, ifindex %d", net.host_ifname,
           net.host_ifindex);
        is_int(count_tag(tag, owner), 1, "dm_netlink_list finds it by its alias");
        is_str(owner, "boot-1-2", "with its owner");

        s = run("nsenter -t %d -n ip -4 -o addr show dev eth0", (int)ns);
        ok(strstr(s, peer) && strstr(s, "/30") != NULL, "inside: eth0 has %s/30", peer);
        free(s);
        s = run("nsenter -t %d -n ip -4 route show", (int)ns);
        ok(strstr(s, "prohibit default") != NULL, "inside: the default route is prohibit");
        {
                char want[96];
                snprintf(want, sizeof(want), "198.51.100.0/24 via %s dev eth0", host);
                ok(strstr(s, want) != NULL, "inside: the allowed CIDR goes to the host side (%s)", want);
        }
        free(s);

        /* Traffic to the host side of our own pair. */
        port = listen_on(net.host_addr, &srv);
        ok(port > 0, "a server on the host side, port %d", port);
        is_int(probe(ns, net.host_addr, port, reply, sizeof(reply)), 0, "the sandbox reaches the host side");
        is_str(reply, "hello", "and talks to it");
        pthread_join(srv.t, NULL);
        close(srv.fd);

        /* Setting the same tag up twice fails cleanly. */
        {
                struct dm_netlink again;
                int r = dm_netlink_setup(&spec, &again, &err);
                ok(r == -EEXIST, "a second pair for the same tag: %s", err.msg);
                is_int(count_tag(tag, NULL), 1, "and the first one is untouched");
        }

        /* Teardown only with the right tag. */
        is_int(dm_netlink_teardown(net.host_ifname, "run-someone-else", &err), -EPERM,
               "teardown with another tag is refused: %s", err.msg);
        is_int(count_tag(tag, NULL), 1, "the link is still there");
        is_int(dm_netlink_teardown(net.host_ifname, tag, &err), 0, "teardown (%s)", err.msg);
        is_int(count_tag(tag, NULL), 0, "the pair is gone");
        is_int(dm_netlink_teardown(net.host_ifname, tag, &err), 0, "a second teardown is fine");
        s = run("nsenter -t %d -n ip -o link show", (int)ns);
        ok(!strstr(s, "eth0"), "inside: eth0 is gone too");
        free(s);

        /* The kernel removes the pair with the namespace. */
        ok(dm_netlink_setup(&spec, &net, &err) == 0, "set up again (%s)", err.msg);
        netns_end(ns);
        for (int i = 0; i < 50 && count_tag(tag, NULL) > 0; i++)
                usleep(100 * 1000);
        is_int(count_tag(tag, NULL), 0, "the pair went with the namespace");

        /* A dead pid: a clear error and nothing left. */
        spec.container_pid = ns;
        ok(dm_netlink_setup(&spec, &net, &err) < 0 && strstr(err.msg, "network namespace") != NULL,
           "a gone process: %s", err.msg);
        is_int(count_tag(tag, NULL), 0, "nothing left behind");
        return done_testing();
}
