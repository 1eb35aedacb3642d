/* SPDX-License-Identifier: MIT */
/* Egress without a veth pair (what a normal user with rootless Podman gets):
 * the sandbox keeps lo only, and the server makes its listeners inside its
 * network namespace (netpolicy/netns.c). Runs sandboxes through dm_run, the
 * code sandbox_script and the agent tools use, against the engine of
 * DOCKER_HOST. As root the same code runs against the rootful engine
 * (DEMESNE_EGRESS_NETNS=1). The upstreams are the test host of
 * tests/e2e/lib/testhost.sh: DEMESNE_TEST_HOST (root makes one itself when
 * it is unset; a normal user without it gets exit 77 naming it). */
#include "config.h"

#include <dirent.h>
#include <sys/socket.h>
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netpolicy/vendor.h"
#include "src/core/egress.h"
#include "src/core/images.h"
#include "src/core/server.h"
#include "src/core/runner.h"
#include "src/core/sandbox.h"
#include "tests/integration/common.h"
#include "tests/tap.h"

static struct dm_context ctx;
static const char *test_host, *test_gateway;
static char hostdir[PATH_MAX], host_env[2][256];

/* testhost.sh's DIR/env: the test host's address and the host side's
 * (its slot's /30: another run may hold another slot beside this one). */
static int read_host_env(void)
{
        char path[PATH_MAX + 8], line[256];
        FILE *f;

        snprintf(path, sizeof(path), "%s/env", hostdir);
        f = fopen(path, "re");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\n")] = 0;
                if (!strncmp(line, "DEMESNE_TEST_HOST=", 18))
                        snprintf(host_env[0], sizeof(host_env[0]), "%s", line + 18);
                else if (!strncmp(line, "DEMESNE_TEST_HOST_GATEWAY=", 26))
                        snprintf(host_env[1], sizeof(host_env[1]), "%s", line + 26);
        }
        fclose(f);
        if (!host_env[0][0] || !host_env[1][0])
                return -1;
        test_host = host_env[0];
        test_gateway = host_env[1];
        return 0;
}
static struct dm_vendor_proxy *vendor;
static char vendor_upstream[64];

static int run_policy(const char *mode, const char *const *allow, const char *cmd, struct dm_run_result *res)
{
        struct dm_error err = { 0 };
        struct dm_policy *policy = NULL;
        int r = dm_policy_parse(mode, allow, DM_POLICY_CALLER_ALLOWED, &policy, &err);

        memset(res, 0, sizeof(*res));
        if (r < 0) {
                printf("# policy %s: %s\n", mode, err.msg);
                return r;
        }
        struct dm_run_request req = { .image = "python", .command = cmd, .timeout_s = 60, .policy = policy };
        r = dm_run(&ctx, &req, res, &err);
        if (r < 0)
                printf("# run: %s\n", err.msg);
        else
                printf("# stdout: %.*s# stderr: %.*s\n", (int)res->stdout_len, res->stdout_text, (int)res->stderr_len,
                       res->stderr_text);
        dm_policy_free(policy);
        return r;
}

static bool out_has(const struct dm_run_result *res, const char *needle)
{
        return res->stdout_text && strstr(res->stdout_text, needle);
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
        return n;
}

/* Open fds that are not Unix sockets, pipes or files the engine client
 * keeps: IPv4 and netlink sockets (listeners, relays) and pidfds. */
static int egress_fds(void)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int n = 0;

        while (d && (e = readdir(d))) {
                int fd = atoi(e->d_name), dom = 0;
                socklen_t len = sizeof(dom);
                char link[64], target[128] = "";

                if (e->d_name[0] == '.' || fd == dirfd(d))
                        continue;
                snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
                if (readlink(link, target, sizeof(target) - 1) < 0)
                        continue;
                if (strstr(target, "pidfd") || strstr(target, "nsfs") ||
                    (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &len) == 0 && dom != AF_UNIX))
                        n++;
        }
        if (d)
                closedir(d);
        return n;
}

static int on_network(void *userdata, const struct dm_netlink *net, const char *output_dir, char ***ret_env,
                      struct dm_error *err)
{
        (void)userdata;
        (void)output_dir;
        struct dm_vendor_conf conf = {
                .provider = DM_VENDOR_ANTHROPIC,
                .bind = { .sin_family = AF_INET, .sin_addr.s_addr = net->host_addr },
                .listen_fd = net->vendor_fd,
                .upstream = vendor_upstream,
                .token = "test-token-0123456789",
                .cred = { .auth = DM_VENDOR_AUTH_API_KEY, .secret = (char *)"sk-real" },
        };
        ok(net->vendor_fd > 0 && !net->host_ifname[0], "the vendor socket was made in the sandbox's namespace");
        *ret_env = NULL;
        return dm_vendor_start(&conf, &vendor, err);
}

static void stop_host(void)
{
        char cmd[PATH_MAX * 2];
        const char *srcdir = getenv("srcdir");

        if (!hostdir[0])
                return;
        snprintf(cmd, sizeof(cmd), "%s/tests/e2e/lib/testhost.sh stop %s", srcdir ? srcdir : ".", hostdir);
        if (system(cmd) != 0)
                printf("# %s failed\n", cmd);
}

int main(void)
{
        struct dm_error err = { 0 };
        struct dm_run_result res;
        struct dm_backend *b;
        const struct dm_image_info *img;
        char hosts[PATH_MAX], v[PATH_MAX + 64];
        bool root = geteuid() == 0;
        int fds0, threads0, r;

        test_host = getenv("DEMESNE_TEST_HOST");
        if ((!test_host || !*test_host) && !root) {
                printf("1..0 # SKIP needs root, or DEMESNE_TEST_HOST from tests/e2e/lib/testhost.sh\n");
                return 77;
        }
        test_env_setup("egress-rootless");
        if (!test_host || !*test_host) {
                const char *srcdir = getenv("srcdir");
                snprintf(hostdir, sizeof(hostdir), "%s/testhost", test_root);
                snprintf(v, sizeof(v), "%s/tests/e2e/lib/testhost.sh start %s", srcdir ? srcdir : ".", hostdir);
                if (system(v) != 0 || read_host_env() < 0) {
                        printf("Bail out! %s failed, or wrote no DIR/env\n", v);
                        stop_host();
                        return 1;
                }
        }
        if (!test_gateway)
                test_gateway = getenv("DEMESNE_TEST_HOST_GATEWAY");
        if (!test_gateway || !*test_gateway) {
                printf("Bail out! DEMESNE_TEST_HOST without DEMESNE_TEST_HOST_GATEWAY (tests/e2e/lib/testhost.sh's "
                       "env)\n");
                return 1;
        }
        if (root)
                setenv("DEMESNE_EGRESS_NETNS", "1", 1); /* the same code a normal user gets */
        snprintf(hosts, sizeof(hosts), "%s/hosts", test_root);
        FILE *f = fopen(hosts, "w");
        fprintf(f, "%s allowed.test other.test deb.debian.org\n", test_host);
        fclose(f);
        setenv("DEMESNE_PROXY_HOSTS", hosts, 1);
        setenv("DEMESNE_EGRESS_PACKAGE_HOSTS", "allowed.test:8080", 1);
        snprintf(vendor_upstream, sizeof(vendor_upstream), "http://%s:8080", test_host);
        if (dm_server_init(&ctx, &err) < 0 || dm_context_backend(&ctx, &b, &err) < 0) {
                printf("Bail out! no engine: %s\n", err.msg);
                stop_host();
                return 1;
        }
        if (dm_image_lookup("python", &img, &err) < 0 || dm_image_require(b, img, true, NULL, &err) < 0) {
                printf("Bail out! %s\n", err.msg);
                stop_host();
                return 1;
        }
        printf("# as %s, test host %s\n", root ? "root (DEMESNE_EGRESS_NETNS=1)" : "a normal user", test_host);
        is_str(dm_egress_default(&ctx), "package-managers", "the default egress is package-managers");

        /* A warm-up run: the first one pays for image checks and threads. */
        r = run_policy("none", NULL, "true", &res);
        dm_run_result_release(&res);
        fds0 = egress_fds();
        threads0 = count_dir("/proc/self/task");

        /* package-managers: a pinned package host through the proxy, no other name, no device. */
        snprintf(v, sizeof(v),
                 "echo \"proxy=$HTTP_PROXY\"; grep -c : /proc/net/dev; "
                 "curl -s -m 5 http://allowed.test:8080/; curl -s -m 5 http://other.test:8080/; echo; "
                 "curl -s -m 5 http://deb.debian.org/; "
                 "curl -s -m 2 --noproxy '*' http://%s:8080/; echo direct=$?",
                 test_host);
        r = run_policy("package-managers", NULL, v, &res);
        is_int(r, 0, "package-managers runs");
        ok(out_has(&res, "proxy=http://127.0.0.1:3128"), "the proxy is on the sandbox's own loopback");
        ok(out_has(&res, "proxy=http://127.0.0.1:3128\n1\n"), "the sandbox has one device (lo)");
        ok(out_has(&res, "hello from 8080\n'other.test' is not in this sandbox's egress allowlist"),
           "the pinned package host passes, another name is refused");
        ok(out_has(&res, "hello from 80\n"), "the image's package host passes on port 80");
        ok(out_has(&res, "direct=7"), "no direct connection (nothing but lo)");
        dm_run_result_release(&res);

        /* allow: names through the proxy, CIDR:port directly. */
        {
                char cidr[64], cmd[2048];
                const char *allow[] = { cidr, "allowed.test:8080", NULL };

                snprintf(cidr, sizeof(cidr), "%s/32:8080", test_host);
                snprintf(cmd, sizeof(cmd),
                         "curl -s -m 5 --noproxy '*' http://%1$s:8080/; echo direct=$?; "
                         "s=$(date +%%s%%N); curl -s -m 3 --noproxy '*' http://%1$s:8081/; "
                         "echo other-port=$? $((($(date +%%s%%N)-s)/1000000)); "
                         "curl -s -m 3 --noproxy '*' http://%2$s:8080/; echo other-addr=$?; "
                         "curl -s -m 5 http://allowed.test:8080/; curl -s -m 5 http://other.test:8080/; echo; "
                         "curl -s -m 5 -x \"$HTTP_PROXY\" --noproxy '' http://169.254.169.254/; echo; "
                         "curl -s -m 5 -x \"$HTTP_PROXY\" --noproxy '' http://127.0.0.1:22/; echo; "
                         "curl -s -m 5 -x \"$HTTP_PROXY\" --noproxy '' http://10.1.2.3/; echo",
                         test_host, test_gateway);
                r = run_policy("none", allow, cmd, &res);
                is_int(r, 0, "an allowlist runs");
                ok(out_has(&res, "hello from 8080\ndirect=0"), "raw TCP to an allowed CIDR:port is relayed");
                /* 7 is a refusal; a dropped SYN would be curl's -m 3 timeout, 28. */
                ok(out_has(&res, "other-port=7"), "another port of that address is refused, not dropped");
                {
                        const char *p = res.stdout_text ? strstr(res.stdout_text, "other-port=7 ") : NULL;
                        diag("refused in %d ms", p ? atoi(p + 13) : -1);
                }
                ok(out_has(&res, "other-addr=7"), "another address is unreachable");
                ok(out_has(&res, "hello from 8080\n'other.test' is not in"), "an allowed name passes the proxy");
                ok(out_has(&res, "169.254.169.254 is in"), "the metadata address is refused");
                ok(out_has(&res, "127.0.0.1 is in"), "the host's loopback is refused");
                ok(out_has(&res, "10.1.2.3 is in"), "private ranges are refused");
                dm_run_result_release(&res);
        }

        /* none: no listener at all. */
        r = run_policy("none", NULL, "tail -n +2 /proc/net/tcp | wc -l; grep -c : /proc/net/dev", &res);
        ok(r == 0 && out_has(&res, "0\n1\n"), "none: no listening socket, lo only");
        dm_run_result_release(&res);

        /* The vendor proxy of an agent run, on the sandbox's loopback. */
        {
                struct dm_policy *policy = NULL;
                struct dm_run_request req = {
                        .image = "python",
                        .command = "curl -s -m 5 -H 'x-api-key: test-token-0123456789' -H 'content-type: "
                                   "application/json' -d '{}' http://127.0.0.1:3129/v1/messages; echo; "
                                   "curl -s -o /dev/null -w '%{http_code}\\n' -m 5 -H 'x-api-key: wrong' -d '{}' "
                                   "http://127.0.0.1:3129/v1/messages; "
                                   "tail -n +2 /proc/net/tcp | awk '$4 == \"0A\"' | wc -l",
                        .timeout_s = 60,
                        .vendor_port = DM_EGRESS_VENDOR_PORT,
                        .on_network = on_network,
                        .kind = "agent",
                };
                dm_policy_parse("none", NULL, 0, &policy, &err);
                req.policy = policy;
                r = dm_run(&ctx, &req, &res, &err);
                is_int(r, 0, "an agent-style run with the vendor proxy: %s", r < 0 ? err.msg : "ok");
                printf("# stdout: %.*s\n", (int)res.stdout_len, res.stdout_text);
                ok(out_has(&res, "hello from 8080\n"), "the vendor proxy reaches its upstream");
                ok(out_has(&res, "\n403\n"), "a wrong token is refused");
                ok(out_has(&res, "\n1\n"), "policy none: the vendor listener is the only one");
                dm_vendor_stop(vendor);
                vendor = NULL;
                dm_run_result_release(&res);
                dm_policy_free(policy);
        }

        /* A persistent sandbox, and its adoption by a later server: the
         * listeners die with the server that made them and come back. */
        {
                char cidr[64], cmd[512];
                const char *allow[] = { cidr, "allowed.test:8080", NULL };
                struct dm_policy *policy = NULL;
                struct dm_sandbox sb;
                struct dm_sandbox_exec_result xr;

                snprintf(cidr, sizeof(cidr), "%s/32:8080", test_host);
                snprintf(cmd, sizeof(cmd),
                         "curl -s -m 5 http://allowed.test:8080/; curl -s -m 5 --noproxy '*' http://%s:8080/; "
                         "curl -s -m 5 http://other.test:8080/; echo",
                         test_host);
                struct dm_sandbox_exec x = { .command = cmd, .timeout_s = 30 };
                dm_policy_parse("none", allow, DM_POLICY_CALLER_ALLOWED, &policy, &err);
                struct dm_sandbox_create cr = {
                        .image = "python", .egress = "none", .allow = allow, .policy = policy, .ttl_s = 600
                };
                r = dm_sandbox_create(&ctx, &cr, &sb, &err);
                is_int(r, 0, "sandbox_create with an allowlist: %s", r < 0 ? err.msg : "ok");
                dm_policy_free(policy);
                memset(&xr, 0, sizeof(xr));
                r = r < 0 ? r : dm_sandbox_exec(&ctx, &sb, &x, &xr, &err);
                ok(r == 0 && xr.stdout_text &&
                           strstr(xr.stdout_text, "hello from 8080\nhello from 8080\n'other.test' is not"),
                   "sandbox_exec: the allowed name by the proxy, the CIDR:port directly, no other name: %s",
                   xr.stdout_text ? xr.stdout_text : err.msg);
                dm_sandbox_exec_result_release(&xr);
                /* The server goes; the next one adopts the sandbox. */
                dm_server_release(&ctx);
                memset(&ctx, 0, sizeof(ctx));
                if (dm_server_init(&ctx, &err) < 0 || dm_context_backend(&ctx, &b, &err) < 0) {
                        printf("Bail out! no engine after restart: %s\n", err.msg);
                        return 1;
                }
                memset(&xr, 0, sizeof(xr));
                r = dm_sandbox_get(&ctx, sb.id, NULL, &sb, &err);
                r = r < 0 ? r : dm_sandbox_exec(&ctx, &sb, &x, &xr, &err);
                ok(r == 0 && xr.stdout_text &&
                           strstr(xr.stdout_text, "hello from 8080\nhello from 8080\n'other.test' is not"),
                   "after adoption by a new server, the listeners are back: %s",
                   xr.stdout_text ? xr.stdout_text : err.msg);
                dm_sandbox_exec_result_release(&xr);
                r = dm_sandbox_destroy(&ctx, sb.id, &err);
                is_int(r, 0, "sandbox_destroy: %s", r < 0 ? err.msg : "ok");
                ok(dm_sandbox_get(&ctx, sb.id, NULL, &sb, &err) == -ENOENT, "its container and record are gone");
        }

        /* Nothing left: fds, threads, children, containers. */
        for (int i = 0; i < 50 && containers_of(b, getpid()) > 0; i++)
                usleep(100 * 1000);
        is_int(containers_of(b, getpid()), 0, "no container of this server left");
        r = egress_fds();
        is_int(r, fds0, "no socket, pidfd or namespace fd left");
        if (r != fds0 && system("ls -l /proc/$PPID/fd | sed 's/^/# /'") != 0)
                printf("# cannot list the fds\n");
        is_int(count_dir("/proc/self/task"), threads0, "no thread left");
        ok(waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD, "no child left");

        dm_server_release(&ctx);
        stop_host();
        r = dm_remove_tree(test_root);
        ok(r == 0, "the test's own directory is removed (%s)", r < 0 ? strerror(-r) : "ok");
        return done_testing();
}
