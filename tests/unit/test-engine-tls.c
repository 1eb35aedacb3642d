/* SPDX-License-Identifier: MIT */
/* The engine's tcp:// rules, without an engine: Docker's DOCKER_TLS_VERIFY
 * and DOCKER_CERT_PATH (default ~/.docker), plain tcp only to loopback
 * (refused before any connection), and what a remote engine declares.
 * tests/integration/test-docker-tls.sh proves the same against dockerd. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/curl.h"
#include "netpolicy/policy.h"
#include "src/core/context.h"
#include "tests/tap.h"

static char dir[] = "/tmp/dm-engine-tls-XXXXXX";

static void touch(const char *sub, const char *name)
{
        char p[256];
        int fd;

        snprintf(p, sizeof(p), "%s/%s", dir, sub);
        mkdir(p, 0700);
        snprintf(p, sizeof(p), "%s/%s/%s", dir, sub, name);
        fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd >= 0)
                close(fd);
}

/* dm_curl_new on host, with the environment as it is now (read as the
 * settings read it); the errno, and the message in msg. */
static int open_host(const char *host, struct dm_curl **ret, char *msg, size_t n)
{
        struct dm_error err = { 0 };
        struct dm_curl *h = NULL;
        struct dm_engine_env env;
        int r = dm_engine_env_read(&env);

        if (r == 0)
                r = dm_curl_new(host, 4096, &env, &h, &err);
        dm_engine_env_release(&env);

        snprintf(msg, n, "%s", err.msg);
        if (ret)
                *ret = h;
        else
                dm_curl_free(h);
        return r;
}

static void test_plain(void)
{
        static const char *const refused[] = { "tcp://192.0.2.1:2375", "tcp://10.0.0.1", "tcp://localhost:2375",
                                               "tcp://[2001:db8::1]:2375", "tcp://128.0.0.1:2375" };
        static const char *const allowed[] = { "tcp://127.0.0.1:2375", "tcp://127.5.6.7:1", "tcp://[::1]:2375" };
        char msg[1024];
        struct dm_curl *h;

        unsetenv("DOCKER_TLS_VERIFY");
        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                is_int(open_host(refused[i], NULL, msg, sizeof(msg)), -EPERM, "plain %s: refused", refused[i]);
                ok(strstr(msg, "loopback address only") && strstr(msg, "DOCKER_TLS_VERIFY=1") &&
                           strstr(msg, "DOCKER_CERT_PATH"),
                   "... naming the variables: %s", msg);
        }
        /* An empty DOCKER_TLS_VERIFY is unset, as for the docker CLI. */
        setenv("DOCKER_TLS_VERIFY", "", 1);
        is_int(open_host("tcp://192.0.2.1:2375", NULL, msg, sizeof(msg)), -EPERM,
               "DOCKER_TLS_VERIFY empty: plain, so refused");
        for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
                h = NULL;
                is_int(open_host(allowed[i], &h, msg, sizeof(msg)), 0, "plain %s (loopback): allowed", allowed[i]);
                ok(h && !dm_curl_tls(h) && dm_curl_on_this_host(h), "... without TLS, on this host");
                ok(h && strstr(dm_curl_describe_host(h), "(no TLS: plain tcp, loopback only)") != NULL,
                   "... described as %s", h ? dm_curl_describe_host(h) : "nothing");
                dm_curl_free(h);
        }
        h = NULL;
        is_int(open_host("unix:///run/x.sock", &h, msg, sizeof(msg)), 0, "unix socket");
        ok(h && dm_curl_on_this_host(h) && !dm_curl_tls(h), "... on this host, no TLS");
        ok(h && strcmp(dm_curl_describe_host(h), "unix:///run/x.sock") == 0, "... described as the socket alone");
        dm_curl_free(h);
        unsetenv("DOCKER_TLS_VERIFY");
}

static void test_tls(void)
{
        char msg[1024], want[512], certs[256], home[256];
        struct dm_curl *h = NULL;

        snprintf(certs, sizeof(certs), "%s/certs", dir);
        touch("certs", "ca.pem");
        setenv("DOCKER_TLS_VERIFY", "1", 1);
        setenv("DOCKER_CERT_PATH", certs, 1);
        is_int(open_host("tcp://192.0.2.1:2376", NULL, msg, sizeof(msg)), -ENOENT, "cert.pem missing: -ENOENT");
        snprintf(want, sizeof(want), "'%s/cert.pem' (from DOCKER_CERT_PATH)", certs);
        ok(strstr(msg, want) != NULL, "... naming the file: %s", msg);
        touch("certs", "cert.pem");
        is_int(open_host("tcp://192.0.2.1:2376", NULL, msg, sizeof(msg)), -ENOENT, "key.pem missing: -ENOENT");
        snprintf(want, sizeof(want), "'%s/key.pem'", certs);
        ok(strstr(msg, want) != NULL, "... naming the file: %s", msg);
        touch("certs", "key.pem");
        is_int(open_host("tcp://192.0.2.1:2376", &h, msg, sizeof(msg)), 0, "all three files: a remote engine over TLS");
        ok(h && dm_curl_tls(h) && !dm_curl_on_this_host(h), "... TLS on, not on this host");
        ok(h && strstr(dm_curl_describe_host(h), "tcp://192.0.2.1:2376 (TLS, engine verified") != NULL,
           "... described as %s", h ? dm_curl_describe_host(h) : "nothing");
        dm_curl_free(h);

        /* Docker's default: ~/.docker. */
        unsetenv("DOCKER_CERT_PATH");
        snprintf(home, sizeof(home), "%s/home", dir);
        mkdir(home, 0700);
        setenv("HOME", home, 1);
        is_int(open_host("tcp://192.0.2.1:2376", NULL, msg, sizeof(msg)), -ENOENT,
               "DOCKER_CERT_PATH unset, ~/.docker empty: -ENOENT");
        snprintf(want, sizeof(want), "'%s/.docker/ca.pem' (from ~/.docker, DOCKER_CERT_PATH unset)", home);
        ok(strstr(msg, want) != NULL, "... naming ~/.docker/ca.pem: %s", msg);
        touch("home/.docker", "ca.pem");
        touch("home/.docker", "cert.pem");
        touch("home/.docker", "key.pem");
        h = NULL;
        is_int(open_host("tcp://[2001:db8::1]:2376", &h, msg, sizeof(msg)), 0, "~/.docker with the three files");
        ok(h && dm_curl_tls(h), "... TLS on");
        dm_curl_free(h);
}

static void test_caps(void)
{
        static const struct dm_mount m = { .host = "/etc", .target = "/in/etc", .readonly = true };
        struct dm_container_spec spec = { .image = "localhost/demesne/base:latest", .mounts = &m, .n_mounts = 1 };
        struct dm_error err = { 0 };
        struct dm_backend *b = NULL;
        char *id = NULL;
        unsigned lacks = DM_CAP_SHIM | DM_CAP_EXEC_PID | DM_CAP_HOST_NETNS;

        /* DOCKER_TLS_VERIFY and ~/.docker as test_tls left them. */
        struct dm_engine_env env;

        is_int(dm_engine_env_read(&env), 0, "the environment read");
        is_int(dm_docker_backend_new("tcp://192.0.2.1:2376", 0, &env, &b, &err), 0,
               "a docker backend on a remote engine");
        dm_engine_env_release(&env);
        ok(b && !(b->ops->caps & lacks) && dm_backend_can(b, DM_CAP_ATTACH | DM_CAP_IMAGES | DM_CAP_HARDENING),
           "... declares no shim, exec pid or host netns, keeps the rest (caps 0x%x)", b ? b->ops->caps : 0);
        /* Refused before any request: 192.0.2.1 routes nowhere. */
        is_int(b ? b->ops->create(b, &spec, &id, &err) : 0, -EOPNOTSUPP, "create with a host mount: -EOPNOTSUPP");
        ok(strstr(err.msg, "not on this host, so host paths ('/etc'") != NULL, "... saying why: %s", err.msg);
        /* A policy the engine would have to enforce is refused as well. */
        {
                struct dm_policy pm = { .mode = DM_EGRESS_PACKAGE_MANAGERS };
                struct dm_container_spec s2 = { .image = spec.image, .egress = &pm };

                dm_error_clear(&err);
                is_int(b ? b->ops->create(b, &s2, &id, &err) : 0, -EOPNOTSUPP,
                       "create with egress package-managers on a remote engine: -EOPNOTSUPP");
                ok(strstr(err.msg, "cannot enforce an egress policy there") != NULL, "... saying why: %s", err.msg);
        }
        free(id);
        dm_backend_free(b);
        b = NULL;
        unsetenv("DOCKER_TLS_VERIFY");
        is_int(dm_docker_backend_new("tcp://127.0.0.1:1", 0, NULL, &b, &err), 0, "a docker backend on loopback tcp");
        ok(b && (b->ops->caps & lacks) == lacks, "... is on this host: every cap (0x%x)", b ? b->ops->caps : 0);
        dm_backend_free(b);
}

int main(void)
{
        if (!mkdtemp(dir))
                return 1;
        unsetenv("DOCKER_CERT_PATH");
        test_plain();
        test_tls();
        test_caps();
        dm_remove_tree(dir);
        ok(access(dir, F_OK) < 0, "nothing left behind");
        return done_testing();
}
