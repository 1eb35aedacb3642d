/* SPDX-License-Identifier: MIT */
/* The egress proxy over real sockets, in network namespaces of the test's
 * own: the proxy and its clients in one (listeners on its loopback), a tiny
 * HTTP server and a TCP echo server as upstreams in a second one reached
 * over a veth pair (198.18.77.2: the proxy never connects to loopback, to
 * the host's own addresses or to private ranges), names pinned through a
 * DEMESNE_PROXY_HOSTS file. */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "netpolicy/proxy.h"
#include "src/basic/cleanup.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"

#define MAX_UPSTREAM_CONNS 256

/* --- upstream servers ------------------------------------------------------ */

struct upstream {
        int fd;
        uint16_t port;
        bool http; /* else echo */
        atomic_int stop;
        pthread_t thread, conns[MAX_UPSTREAM_CONNS];
        int n_conns;
};

static void *echo_conn(void *arg)
{
        int fd = (int)(intptr_t)arg;
        char buf[4096];
        ssize_t n;

        while ((n = read(fd, buf, sizeof(buf))) > 0)
                if (write(fd, buf, (size_t)n) != n)
                        break;
        close(fd);
        return NULL;
}

/* Answers one request with what it received: request line and headers. */
static void *http_conn(void *arg)
{
        int fd = (int)(intptr_t)arg;
        char buf[8192], resp[9000];
        size_t len = 0;
        ssize_t n;

        while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0) {
                len += (size_t)n;
                buf[len] = '\0';
                if (strstr(buf, "\r\n\r\n"))
                        break;
        }
        buf[len] = '\0';
        n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\n"
                     "Keep-Alive: timeout=5\r\nContent-Length: %zu\r\n\r\n%s",
                     len, buf);
        if (write(fd, resp, (size_t)n) < 0)
                diag("http upstream: write: %s", strerror(errno));
        close(fd);
        return NULL;
}

static void *upstream_main(void *arg)
{
        struct upstream *u = arg;

        while (!u->stop) {
                struct pollfd p = { .fd = u->fd, .events = POLLIN };
                int fd;
                if (poll(&p, 1, 50) <= 0)
                        continue;
                fd = accept4(u->fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd < 0)
                        continue;
                if (u->n_conns == MAX_UPSTREAM_CONNS ||
                    pthread_create(&u->conns[u->n_conns], NULL, u->http ? http_conn : echo_conn,
                                   (void *)(intptr_t)fd) != 0) {
                        close(fd);
                        continue;
                }
                u->n_conns++;
        }
        for (int i = 0; i < u->n_conns; i++)
                pthread_join(u->conns[i], NULL);
        return NULL;
}

#define UPSTREAM_IP "198.18.77.2"

/* A listener on the upstream host (the calling thread is in its namespace). */
static int listen_upstream(int backlog, uint16_t *ret_port)
{
        struct sockaddr_in a = { .sin_family = AF_INET };
        socklen_t len = sizeof(a);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        inet_pton(AF_INET, UPSTREAM_IP, &a.sin_addr);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, backlog) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
                perror("listen_upstream");
                exit(1);
        }
        *ret_port = ntohs(a.sin_port);
        return fd;
}

static void upstream_start(struct upstream *u, bool http)
{
        memset(u, 0, sizeof(*u));
        u->http = http;
        u->fd = listen_upstream(128, &u->port);
        pthread_create(&u->thread, NULL, upstream_main, u);
}

static void upstream_stop(struct upstream *u)
{
        u->stop = 1;
        pthread_join(u->thread, NULL);
        close(u->fd);
}

/* --- clients --------------------------------------------------------------- */

static int dial(const struct sockaddr_in *proxy)
{
        struct timeval tv = { .tv_sec = 5 };
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (connect(fd, (const struct sockaddr *)proxy, sizeof(*proxy)) < 0) {
                diag("connect to proxy: %s", strerror(errno));
                close(fd);
                return -1;
        }
        return fd;
}

/* Reads until the end of a response head (or EOF). */
static size_t read_head(int fd, char *buf, size_t cap)
{
        size_t len = 0;
        buf[0] = '\0';
        while (len < cap - 1 && !strstr(buf, "\r\n\r\n")) {
                ssize_t n = read(fd, buf + len, 1);
                if (n <= 0)
                        break;
                len += (size_t)n;
                buf[len] = '\0';
        }
        return len;
}

/* Sends req on a new connection and reads the whole answer until EOF. */
static size_t roundtrip(const struct sockaddr_in *proxy, const char *req, size_t req_len, char *buf, size_t cap)
{
        int fd = dial(proxy);
        size_t len = 0;
        ssize_t n;

        buf[0] = '\0';
        if (fd < 0)
                return 0;
        if (write(fd, req, req_len) < 0)
                diag("write request: %s", strerror(errno));
        while (len < cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) > 0)
                len += (size_t)n;
        buf[len] = '\0';
        close(fd);
        return len;
}

static size_t ask(const struct sockaddr_in *proxy, const char *req, char *buf, size_t cap)
{
        return roundtrip(proxy, req, strlen(req), buf, cap);
}

/* A tunnel through CONNECT: the fd after a 200, or -1. */
static int tunnel(const struct sockaddr_in *proxy, const char *target)
{
        char req[256], head[1024];
        int fd = dial(proxy);

        if (fd < 0)
                return -1;
        snprintf(req, sizeof(req), "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target);
        if (write(fd, req, strlen(req)) < 0 ||
            (read_head(fd, head, sizeof(head)), strncmp(head, "HTTP/1.1 200 ", 13))) {
                diag("tunnel to %s: '%s'", target, head);
                close(fd);
                return -1;
        }
        return fd;
}

static bool echo_ok(int fd, const char *msg)
{
        char buf[256];
        size_t len = 0, want = strlen(msg);

        if (write(fd, msg, want) != (ssize_t)want)
                return false;
        while (len < want) {
                ssize_t n = read(fd, buf + len, want - len);
                if (n <= 0)
                        return false;
                len += (size_t)n;
        }
        return memcmp(buf, msg, want) == 0;
}

/* --- the log and the process ----------------------------------------------- */

static char log_path[256];

/* Waits up to 3 s for a log line that contains both needles. */
static bool log_has(const char *a, const char *b)
{
        for (int64_t end = dm_now_ms() + 3000; dm_now_ms() < end; usleep(20000)) {
                char line[2048];
                FILE *f = fopen(log_path, "re");
                bool found = false;
                while (f && !found && fgets(line, sizeof(line), f))
                        found = strstr(line, a) && strstr(line, b);
                if (f)
                        fclose(f);
                if (found)
                        return true;
        }
        diag("no log line with '%s' and '%s'", a, b);
        return false;
}

static int count_dir(const char *path)
{
        DIR *d = opendir(path);
        struct dirent *e;
        int n = 0;

        while (d && (e = readdir(d)))
                n += e->d_name[0] != '.';
        if (d)
                closedir(d);
        return n - (strcmp(path, "/proc/self/fd") == 0); /* opendir's own fd */
}

static int sh(const char *cmd)
{
        int r = system(cmd);
        if (r != 0)
                diag("'%s' failed (%d)", cmd, r);
        return r;
}

/* The test's own namespaces: this thread moves into a fresh one (the
 * proxy's; nothing of the host is touched) and *ret_up is a second one
 * behind a veth pair, 198.18.77.1 here and UPSTREAM_IP there. */
static int make_namespaces(int *ret_proxy, int *ret_up)
{
        char cmd[256];

        if (unshare(CLONE_NEWNET) < 0)
                return -errno;
        *ret_proxy = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (sh("ip link set lo up") != 0 || unshare(CLONE_NEWNET) < 0)
                return -1;
        *ret_up = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
        if (sh("ip link set lo up") != 0 || setns(*ret_proxy, CLONE_NEWNET) < 0)
                return -1;
        snprintf(cmd, sizeof(cmd), "ip link add dmtp0 type veth peer name dmtp1 netns /proc/%d/fd/%d", (int)getpid(),
                 *ret_up);
        if (sh(cmd) != 0 || sh("ip addr add 198.18.77.1/30 dev dmtp0 && ip link set dmtp0 up") != 0 ||
            setns(*ret_up, CLONE_NEWNET) < 0 || sh("ip addr add " UPSTREAM_IP "/30 dev dmtp1 && ip link set dmtp1 up"))
                return -1;
        return setns(*ret_proxy, CLONE_NEWNET);
}

static void *nothing(void *arg)
{
        return arg;
}

static bool wait_connections(struct dm_proxy_sandbox *s, unsigned want)
{
        for (int i = 0; i < 300 && dm_proxy_sandbox_connections(s) != want; i++)
                usleep(10000);
        return dm_proxy_sandbox_connections(s) == want;
}

/* --- the tests ------------------------------------------------------------- */

struct concurrent {
        struct sockaddr_in proxy;
        char target[64];
        int index;
        bool ok;
};

static void *concurrent_client(void *arg)
{
        struct concurrent *c = arg;
        char msg[64];
        int fd = tunnel(&c->proxy, c->target);

        snprintf(msg, sizeof(msg), "client %d says hello", c->index);
        c->ok = fd >= 0 && echo_ok(fd, msg) && echo_ok(fd, "and again");
        if (fd >= 0)
                close(fd);
        return NULL;
}

static struct dm_proxy_sandbox *add(struct dm_proxy *p, const char *id, const char *listen_ip, const char *source,
                                    const char *const *allow, int log_fd)
{
        struct dm_proxy_policy pol;
        struct dm_error err = { 0 };
        struct dm_proxy_sandbox_conf conf = { .id = id, .log_fd = log_fd, .policy = &pol };
        struct dm_proxy_sandbox *s = NULL;

        dm_proxy_policy_init(&pol);
        for (size_t i = 0; allow[i]; i++)
                if (dm_proxy_policy_add_entry(&pol, allow[i], &err) < 0)
                        diag("allow '%s': %s", allow[i], err.msg);
        conf.listen.sin_family = AF_INET;
        inet_pton(AF_INET, listen_ip, &conf.listen.sin_addr);
        inet_pton(AF_INET, source, &conf.source);
        if (dm_proxy_add(p, &conf, &s, &err) < 0)
                diag("dm_proxy_add '%s': %s", id, err.msg);
        dm_proxy_policy_release(&pol);
        return s;
}

int main(void)
{
        char dir[] = "/tmp/dm-test-proxy-XXXXXX", hosts[300], buf[65536], echo_allow[64], web_allow[64], target[64],
             req[512];
        struct upstream echo, web;
        struct dm_proxy_limits limits;
        struct dm_proxy *proxy = NULL;
        struct dm_proxy_sandbox *a, *b, *c, *d;
        struct sockaddr_in pa, pb, pc, pd;
        struct dm_error err = { 0 };
        int fds0, tasks0, log_fd, hold[8], full[2], proxy_ns = -1, up_ns = -1;
        uint16_t dead_port, full_port;
        FILE *f;

        pthread_t warm;

        /* Sanitizer runtimes start a helper thread with the first thread:
         * have it running before the baseline is taken. */
        pthread_create(&warm, NULL, nothing, NULL);
        pthread_join(warm, NULL);
        if (geteuid() != 0)
                return skip_all("needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) for network namespaces of its own");
        int r = make_namespaces(&proxy_ns, &up_ns);
        if (r == -EPERM)
                return skip_all("cannot make network namespaces (needs CAP_SYS_ADMIN)");
        if (r < 0) {
                ok(0, "the test's network namespaces and veth pair are made");
                return done_testing();
        }
        fds0 = count_dir("/proc/self/fd");
        tasks0 = count_dir("/proc/self/task");
        if (!mkdtemp(dir))
                return skip_all("mkdtemp failed");
        if (setns(up_ns, CLONE_NEWNET) < 0)
                return skip_all("setns into the test's namespace failed (needs CAP_SYS_ADMIN)");
        upstream_start(&echo, false);
        upstream_start(&web, true);
        /* A port nothing listens on (502), and a listener whose accept queue
         * is full, which drops SYNs (504). */
        close(listen_upstream(1, &dead_port));
        full[0] = listen_upstream(0, &full_port);
        if (setns(proxy_ns, CLONE_NEWNET) < 0)
                return skip_all("setns into the test's namespace failed (needs CAP_SYS_ADMIN)");

        snprintf(hosts, sizeof(hosts), "%s/hosts", dir);
        f = fopen(hosts, "we");
        fprintf(f, "# pinned for the test\n" UPSTREAM_IP " allowed.test web.test down.test full.test\n" UPSTREAM_IP
                   " notallowed.test\n127.0.0.1 loop.test\n10.213.0.1 pool.test\n"
                   "169.254.169.254 meta.test\n");
        fclose(f);
        snprintf(log_path, sizeof(log_path), "%s/egress.log", dir);
        log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

        dm_proxy_limits_default(&limits);
        limits.connect_timeout_ms = 700;
        limits.header_timeout_ms = 1000;
        limits.idle_timeout_ms = 1500;
        limits.max_conns = 100;
        is_int(dm_proxy_new(&limits, hosts, &proxy, &err), 0, "proxy created");

        snprintf(echo_allow, sizeof(echo_allow), "allowed.test:%u", echo.port);
        snprintf(web_allow, sizeof(web_allow), "WEB.test.:%u", web.port);
        {
                const char *with_cidr[] = { echo_allow,     web_allow,        "down.test", "full.test",
                                            "127.0.0.1/32", "198.18.77.0/30", NULL };
                const char *no_cidr[] = { echo_allow, "loop.test", "pool.test", "meta.test", NULL };
                a = add(proxy, "sb-a", "127.0.0.1", "127.0.0.1", with_cidr, log_fd);
                b = add(proxy, "sb-b", "127.0.0.2", "127.0.0.1", no_cidr, log_fd);
                c = add(proxy, "sb-c", "127.0.0.1", "127.0.0.9", with_cidr, log_fd);
        }
        close(log_fd);
        ok(a && b && c, "three sandboxes added");
        if (!a || !b || !c)
                return done_testing();
        dm_proxy_sandbox_address(a, &pa);
        dm_proxy_sandbox_address(b, &pb);
        dm_proxy_sandbox_address(c, &pc);
        ok(pa.sin_port != 0 && pa.sin_addr.s_addr == htonl(INADDR_LOOPBACK), "listener bound, port %u",
           ntohs(pa.sin_port));

        /* CONNECT to an allowed name tunnels both ways, early data included. */
        {
                int fd = dial(&pa);
                size_t n;
                snprintf(req, sizeof(req), "CONNECT allowed.test:%u HTTP/1.1\r\nHost: x\r\n\r\nearly", echo.port);
                ok(fd >= 0 && write(fd, req, strlen(req)) > 0, "CONNECT with early data sent");
                n = read_head(fd, buf, sizeof(buf));
                ok(n > 0 && strncmp(buf, "HTTP/1.1 200 ", 13) == 0, "CONNECT answered 200");
                n = 0;
                while (n < 5) {
                        ssize_t k = read(fd, buf + n, 5 - n);
                        if (k <= 0)
                                break;
                        n += (size_t)k;
                }
                ok(n == 5 && memcmp(buf, "early", 5) == 0, "early data reached the upstream and came back");
                ok(echo_ok(fd, "hello through the tunnel"), "tunnel echoes");
                shutdown(fd, SHUT_WR);
                ok(read(fd, buf, 1) == 0, "half-close passed on: EOF comes back");
                close(fd);
                snprintf(target, sizeof(target), "CONNECT allowed.test:%u allowed 200", echo.port);
                ok(log_has(target, "up=29 down=29 ms="), "log line with byte counts at close");
        }

        /* Plain HTTP: origin-form, Host from the URI, hop-by-hop dropped. */
        snprintf(req, sizeof(req),
                 "GET http://web.test:%u/path?q=1 HTTP/1.1\r\nHost: ignored.test\r\nProxy-Authorization: Basic eA==\r\n"
                 "Proxy-Connection: keep-alive\r\nX-Kept: yes\r\n\r\n",
                 web.port);
        ask(&pa, req, buf, sizeof(buf));
        ok(strncmp(buf, "HTTP/1.1 200 OK\r\n", 17) == 0, "GET forwarded");
        ok(strstr(buf, "\r\n\r\nGET /path?q=1 HTTP/1.1\r\n") != NULL, "upstream saw the origin form");
        snprintf(target, sizeof(target), "Host: web.test:%u\r\n", web.port);
        ok(strstr(buf, target) != NULL, "upstream saw Host from the URI");
        ok(!strstr(buf, "ignored.test") && !strstr(buf, "Proxy-"), "client Host and Proxy-* headers dropped");
        ok(strstr(buf, "X-Kept: yes") != NULL, "end-to-end headers kept");
        ok(strstr(buf, "Connection: close\r\n") && !strstr(buf, "Keep-Alive"), "response rewritten to close");
        snprintf(target, sizeof(target), "GET web.test:%u allowed 200", web.port);
        ok(log_has(target, "up="), "GET logged");

        /* Refusals. */
        snprintf(req, sizeof(req), "CONNECT notallowed.test:%u HTTP/1.1\r\n\r\n", echo.port);
        ask(&pa, req, buf, sizeof(buf));
        ok(strncmp(buf, "HTTP/1.1 403 Forbidden\r\n", 24) == 0, "name not allowed: 403");
        ok(strstr(buf, "'notallowed.test' is not in this sandbox's egress allowlist\n") != NULL, "with reason body");
        ok(log_has("CONNECT notallowed.test", "denied 403"), "denial logged");

        ask(&pa, "CONNECT 192.0.2.1:443 HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "not covered by an allowed CIDR"), "IP literal: 403");
        ok(log_has("192.0.2.1:443 denied 403", "CIDR"), "logged");

        ask(&pa, "CONNECT allowed.test:1 HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "port 1 is not allowed for 'allowed.test'"), "wrong port: 403");

        ask(&pa, "GET http://[::1]/ HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "IPv6"), "IPv6: 403");

        ask(&pa, "HELLO\r\n\r\n", buf, sizeof(buf));
        ok(strncmp(buf, "HTTP/1.1 400 Bad Request\r\n", 26) == 0, "malformed request: 400");
        ask(&pa, "GET /index.html HTTP/1.1\r\nHost: web.test\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "400 Bad Request") && strstr(buf, "absolute http:// URI"), "origin-form to the proxy: 400");

        {
                char *big = malloc(20000);
                int n = snprintf(big, 20000, "GET http://web.test:%u/ HTTP/1.1\r\nX-Big: ", web.port);
                memset(big + n, 'a', 19000 - (size_t)n);
                memcpy(big + 19000, "\r\n\r\n", 4);
                roundtrip(&pa, big, 19004, buf, sizeof(buf));
                ok(strncmp(buf, "HTTP/1.1 431 ", 13) == 0, "oversized head: 431");
                free(big);
        }

        snprintf(req, sizeof(req), "CONNECT down.test:%u HTTP/1.1\r\n\r\n", dead_port);
        ask(&pa, req, buf, sizeof(buf));
        ok(strncmp(buf, "HTTP/1.1 502 ", 13) == 0 && strstr(buf, "Connection refused"), "upstream down: 502");
        snprintf(target, sizeof(target), "down.test:%u allowed 502", dead_port);
        ok(log_has(target, "refused"), "logged as allowed by policy, 502");

        {
                /* Fill the accept queue of the backlog-0 listener. */
                struct sockaddr_in fa = { .sin_family = AF_INET, .sin_port = htons(full_port) };
                int q[2];
                inet_pton(AF_INET, UPSTREAM_IP, &fa.sin_addr);
                for (int i = 0; i < 2; i++) {
                        q[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                        connect(q[i], (struct sockaddr *)&fa, sizeof(fa));
                }
                usleep(50000);
                snprintf(req, sizeof(req), "CONNECT full.test:%u HTTP/1.1\r\n\r\n", full_port);
                ask(&pa, req, buf, sizeof(buf));
                ok(strncmp(buf, "HTTP/1.1 504 ", 13) == 0 && strstr(buf, "timed out"), "connect timeout: 504");
                for (int i = 0; i < 2; i++)
                        close(q[i]);
        }

        /* Names that resolve where no sandbox goes are refused, and no CIDR
         * rule opens loopback (sb-a has 127.0.0.1/32, as 0.0.0.0/0 once did). */
        ask(&pb, "CONNECT loop.test:22 HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "resolves to 127.0.0.1 (loopback"),
           "rebinding rule: a name resolving to loopback is refused");
        ok(log_has("loop.test", "(loopback"), "logged");
        ask(&pb, "GET http://pool.test:3128/ HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "sandbox pool"), "a name resolving into the sandbox pool: 403");
        ask(&pb, "GET http://meta.test/latest/meta-data/ HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "link-local"), "a name resolving to the metadata address: 403");
        ask(&pa, "GET http://127.0.0.1:22/ HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "loopback"), "a loopback literal a CIDR covers: still 403");
        ask(&pa, "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "link-local"), "the metadata literal: 403");
        ask(&pa, "CONNECT [::ffff:127.0.0.1]:22 HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "IPv6"), "a v4-mapped loopback literal: 403");
        ask(&pa, "CONNECT 198.18.77.1:22 HTTP/1.1\r\n\r\n", buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "an address of this host"),
           "an address of the proxy's own host a CIDR covers: 403");

        /* Source address check. */
        ask(&pc, req, buf, sizeof(buf));
        ok(strstr(buf, "403 Forbidden") && strstr(buf, "not this sandbox's address"), "wrong source: 403");

        /* Timeouts: an incomplete head, an idle tunnel. */
        {
                int fd = dial(&pa);
                int64_t t0 = dm_now_ms();
                if (write(fd, "CONNECT allo", 12) < 0)
                        diag("write: %s", strerror(errno));
                read_head(fd, buf, sizeof(buf));
                ok(strstr(buf, "400 Bad Request") != NULL, "incomplete head answered 400 after the head timeout");
                /* Not before the 1 s head timeout; the upper bound is against none. */
                ok(dm_now_ms() - t0 >= 900 && dm_now_ms() - t0 < slack_ms(20000),
                   "after the 1 s head timeout (%lld ms)", (long long)(dm_now_ms() - t0));
                close(fd);
                snprintf(target, sizeof(target), "allowed.test:%u", echo.port);
                fd = tunnel(&pa, target);
                t0 = dm_now_ms();
                ok(fd >= 0 && read(fd, buf, 1) == 0, "idle tunnel closed by the proxy");
                ok(dm_now_ms() - t0 >= 1400 && dm_now_ms() - t0 < slack_ms(20000), "after the idle timeout (%lld ms)",
                   (long long)(dm_now_ms() - t0));
                if (fd >= 0)
                        close(fd);
        }

        /* Many at once. */
        {
                struct concurrent cs[40];
                pthread_t th[40];
                int good = 0;
                for (int i = 0; i < 40; i++) {
                        cs[i] = (struct concurrent){ .proxy = pa, .index = i };
                        snprintf(cs[i].target, sizeof(cs[i].target), "allowed.test:%u", echo.port);
                        pthread_create(&th[i], NULL, concurrent_client, &cs[i]);
                }
                for (int i = 0; i < 40; i++) {
                        pthread_join(th[i], NULL);
                        good += cs[i].ok;
                }
                is_int(good, 40, "40 concurrent tunnels all echo");
                ok(wait_connections(a, 0), "and all their connections end");
        }

        /* The connection cap. */
        {
                const char *allow[] = { echo_allow, NULL };
                struct dm_proxy_limits tight = limits;
                struct dm_proxy *p2 = NULL;
                int x, y;
                tight.max_conns = 2;
                dm_proxy_new(&tight, hosts, &p2, &err);
                d = add(p2, "sb-d", "127.0.0.1", "0.0.0.0", allow, -1);
                dm_proxy_sandbox_address(d, &pd);
                snprintf(target, sizeof(target), "allowed.test:%u", echo.port);
                x = tunnel(&pd, target);
                y = tunnel(&pd, target);
                ok(x >= 0 && y >= 0, "two tunnels under a cap of two");
                ask(&pd, req, buf, sizeof(buf));
                ok(strncmp(buf, "HTTP/1.1 503 ", 13) == 0 && strstr(buf, "too many"), "third: 503");
                close(x);
                ok(wait_connections(d, 1), "one closes");
                x = tunnel(&pd, target);
                ok(x >= 0 && echo_ok(x, "room again"), "then another fits");
                close(x);
                close(y);
                dm_proxy_free(p2);
        }

        /* Removing one sandbox leaves the others serving. */
        dm_proxy_remove(proxy, c);
        ok(dial(&pc) < 0, "removed sandbox's listener is closed");

        /* Shutdown with tunnels open. */
        snprintf(target, sizeof(target), "allowed.test:%u", echo.port);
        for (int i = 0; i < 8; i++)
                hold[i] = tunnel(&pa, target);
        ok(wait_connections(a, 8), "eight tunnels open");
        dm_proxy_free(proxy);
        {
                int closed = 0;
                for (int i = 0; i < 8; i++) {
                        closed += hold[i] >= 0 && read(hold[i], buf, 1) == 0;
                        if (hold[i] >= 0)
                                close(hold[i]);
                }
                is_int(closed, 8, "shutdown closed every client connection");
        }
        close(full[0]);
        upstream_stop(&echo);
        upstream_stop(&web);
        is_int(count_dir("/proc/self/fd"), fds0, "no fd left");
        is_int(count_dir("/proc/self/task"), tasks0, "no thread left");

        close(proxy_ns);
        close(up_ns);
        if (getenv("DM_TEST_KEEP")) { /* to read the log by hand */
                diag("kept %s", dir);
        } else {
                unlink(hosts);
                unlink(log_path);
                rmdir(dir);
        }
        return done_testing();
}
