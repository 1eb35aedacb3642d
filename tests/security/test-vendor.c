/* SPDX-License-Identifier: MIT */
/* The security battery's vendor proxy cases, against the real proxy
 * (netpolicy/vendor*.c) on loopback, for each provider and login kind:
 *   - a request without the run's token gets 401, whatever the path;
 *   - with the token, the vendor's organization and admin endpoints
 *     (/v1/organizations..., OpenAI's /v1/organization/...) get 403, and so
 *     do spellings that try to reach them through a model endpoint's path;
 *   - none of these reaches the upstream, which holds the real credential
 *     (an in-test server that answers 200 to anything, so a request that
 *     slipped through would show);
 *   - once stopped, the proxy leaves no listening port, thread or fd. */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netpolicy/vendor.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"
#include "tests/vendor-loopback.h"

#define REAL_SECRET "sk-REAL-host-credential-never-to-leave"

/* --- the upstream: counts requests, answers 200 to each ------------------- */

static int up_fd;
static atomic_int up_requests, up_stop;

static void *up_main(void *arg)
{
        static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     "Content-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}";
        char buf[16384];

        (void)arg;
        while (!up_stop) {
                struct pollfd p = { .fd = up_fd, .events = POLLIN };
                int fd;

                if (poll(&p, 1, 50) <= 0 || (fd = accept4(up_fd, NULL, NULL, SOCK_CLOEXEC)) < 0)
                        continue;
                up_requests++;
                /* Enough of the request to answer it; the count is what matters. */
                if (read(fd, buf, sizeof(buf)) > 0 && write(fd, answer, sizeof(answer) - 1) < 0)
                        diag("upstream: write: %s", strerror(errno));
                close(fd);
        }
        return NULL;
}

/* --- the client ------------------------------------------------------------ */

/* One request on its own connection; returns the status (0: no answer) and
 * the whole response in buf. */
static int ask(uint16_t port, const char *method, const char *target, const char *auth, char *buf, size_t max)
{
        int fd = test_dial(port);
        char req[2048];
        int n;

        buf[0] = '\0';
        if (fd < 0)
                return 0;
        n = snprintf(req, sizeof(req),
                     "%s %s HTTP/1.1\r\nHost: proxy\r\n%s%sContent-Type: application/json\r\n"
                     "Content-Length: 2\r\nConnection: close\r\n\r\n{}",
                     method, target, auth ? auth : "", auth ? "\r\n" : "");
        if (write(fd, req, (size_t)n) != n)
                diag("client: short write");
        test_read_until(fd, buf, max, NULL, 10000);
        close(fd);
        return strncmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : 0;
}

/* --- one proxy ------------------------------------------------------------- */

struct kind {
        const char *name;
        enum dm_vendor provider;
        enum dm_vendor_auth auth;
        const char *model_path;   /* a model endpoint: forwarded with the token */
        const char *const *admin; /* "METHOD path" pairs that must get 403 */
};

static const char *const anthropic_admin[] = {
        "GET /v1/organizations",
        "GET /v1/organizations/me",
        "GET /v1/organizations/org-1/api_keys",
        "POST /v1/organizations/invites",
        "GET /v1/organizations/usage_report/messages",
        "GET /v1/messages/../organizations",
        "GET /v1/messages/%2e%2e/organizations",
        "POST /v1/messages/..%2forganizations",
        "POST /v1/messages/count_tokens/../../organizations",
        "POST /v1//organizations",
        "POST //v1/organizations",
        "POST /V1/ORGANIZATIONS",
        "POST /v1/messages;/../organizations",
        "POST /v1/messages/%2F..%2F..%2Fv1%2Forganizations",
        "GET /v1/models",
        "GET /api/oauth/profile",
        NULL,
};

static const char *const openai_admin[] = {
        "GET /v1/organizations",
        "GET /v1/organization/admin_api_keys",
        "POST /v1/organization/invites",
        "GET /v1/organization/usage/completions",
        "GET /v1/organization/projects",
        "GET /v1/models/../organization/admin_api_keys",
        "GET /v1/models/..",
        "GET /v1/models/%2e%2e%2forganization%2fprojects",
        "POST /v1/responses/../organization/invites",
        "GET /v1/files",
        NULL,
};

static const char *const chatgpt_admin[] = {
        "GET /v1/organizations",
        "GET /v1/organization/admin_api_keys",
        "GET /organizations",
        "GET /v1/../accounts/check",
        "GET /wham/accounts/check",
        "POST /responses/../me",
        NULL,
};

static const struct kind kinds[] = {
        { "anthropic (api key)", DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "/v1/messages", anthropic_admin },
        { "anthropic (oauth login)", DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_OAUTH, "/v1/messages", anthropic_admin },
        { "openai (api key)", DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "/v1/responses", openai_admin },
        { "openai (chatgpt login)", DM_VENDOR_OPENAI, DM_VENDOR_AUTH_CHATGPT, "/v1/responses", chatgpt_admin },
};

static void check_kind(const struct kind *k, const char *upstream, const char *dir)
{
        char token[65], auth[128], buf[65536], logp[256], usage[256], line[512];
        struct dm_vendor_conf conf = {
                .provider = k->provider,
                .bind = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) },
                .upstream = upstream,
                .cred = { .auth = k->auth,
                          .secret = REAL_SECRET,
                          .account_id = k->auth == DM_VENDOR_AUTH_CHATGPT ? "acct-1" : NULL },
                .usage_path = usage,
                .log_path = logp,
        };
        int fds_before = test_count_dir("/proc/self/fd"), threads_before = test_count_dir("/proc/self/task");
        struct dm_error err = { 0 };
        struct dm_vendor_proxy *p;
        struct sockaddr_in a;
        int before, status;
        uint16_t port;
        bool all;

        if (dm_vendor_token_new(token) < 0) {
                ok(0, "%s: a token", k->name);
                return;
        }
        conf.token = token;
        snprintf(logp, sizeof(logp), "%s/vendor-%d-%d.log", dir, k->provider, k->auth);
        snprintf(usage, sizeof(usage), "%s/usage-%d-%d.json", dir, k->provider, k->auth);
        if (!ok(dm_vendor_start(&conf, &p, &err) == 0, "%s: the proxy starts", k->name)) {
                diag("%s", err.msg);
                return;
        }
        dm_vendor_address(p, &a);
        port = ntohs(a.sin_port);

        /* The control: the token on a model endpoint goes through, so the
         * refusals below are the proxy's doing and not a dead upstream. */
        before = up_requests;
        snprintf(auth, sizeof(auth), "%s%s",
                 k->provider == DM_VENDOR_ANTHROPIC ? "x-api-key: " : "Authorization: Bearer ", token);
        status = ask(port, "POST", k->model_path, auth, buf, sizeof(buf));
        ok(status == 200 && up_requests == before + 1, "%s: control: POST %s with the token reaches the upstream (%d)",
           k->name, k->model_path, status);

        /* No token: 401, on model endpoints and admin ones alike. */
        before = up_requests;
        all = true;
        for (const char *const *e = k->admin; *e; e++) {
                char method[8];
                const char *target = strchr(*e, ' ') + 1;

                snprintf(method, sizeof(method), "%.*s", (int)(target - 1 - *e), *e);
                if (strstr(target, "%2") || strstr(target, ";") || strstr(target, "/.."))
                        continue; /* spellings: checked with the token below */
                status = ask(port, method, target, NULL, buf, sizeof(buf));
                if (status != 401 || !strstr(buf, "\"authentication_error\"")) {
                        diag("%s %s without a token: %d", method, target, status);
                        all = false;
                }
        }
        status = ask(port, "POST", k->model_path, NULL, buf, sizeof(buf));
        ok(all && status == 401 && strstr(buf, "\"authentication_error\""),
           "%s: no token: 401 authentication_error on every path, model endpoint included", k->name);
        status = ask(port, "POST", k->model_path, "Authorization: Bearer ", buf, sizeof(buf));
        is_int(status, 401, "%s: an empty bearer is no token: 401", k->name);

        /* With the token: the organization and admin endpoints are 403. */
        all = true;
        for (const char *const *e = k->admin; *e; e++) {
                char method[8];
                const char *target = strchr(*e, ' ') + 1;

                snprintf(method, sizeof(method), "%.*s", (int)(target - 1 - *e), *e);
                status = ask(port, method, target, auth, buf, sizeof(buf));
                /* 403 from the route check; 400 when the target is refused
                 * as malformed before it is routed. Never forwarded. */
                if (status != 403 && status != 400) {
                        diag("%s %s with the token: %d", method, target, status);
                        all = false;
                }
        }
        ok(all, "%s: with the token, every organization/admin path and spelling is refused (403 or 400)", k->name);
        status = ask(port, "GET", "/v1/organizations", auth, buf, sizeof(buf));
        is_int(status, 403, "%s: GET /v1/organizations with the token: 403", k->name);
        ok(strstr(buf, "is not a model endpoint") != NULL, "%s: saying it is not a model endpoint", k->name);
        ok(strstr(buf, REAL_SECRET) == NULL && strstr(buf, token) == NULL,
           "%s: no answer carries the credential or the token", k->name);
        is_int(up_requests, before, "%s: no refused request reached the upstream", k->name);

        dm_vendor_stop(p);
        {
                FILE *f = fopen(logp, "re");
                bool secret = false, refused = false;

                while (f && fgets(line, sizeof(line), f)) {
                        secret = secret || strstr(line, REAL_SECRET) || strstr(line, token);
                        refused = refused || (strstr(line, "/v1/organizations 403") != NULL);
                }
                if (f)
                        fclose(f);
                ok(refused && !secret, "%s: the log has the 403 for /v1/organizations and no secret", k->name);
        }

        /* Nothing left: the port is closed, and no thread or fd remains. */
        ok(ask(port, "POST", k->model_path, auth, buf, sizeof(buf)) == 0, "%s: after stop the port answers nothing",
           k->name);
        /* A joined thread can linger in /proc/self/task for a moment after
         * pthread_join returns (the kernel clears its tid before it is
         * reaped), so the count is given a little while to settle. */
        for (int i = 0; i < 200 && test_count_dir("/proc/self/task") != threads_before; i++)
                usleep(10 * 1000);
        is_int(test_count_dir("/proc/self/task"), threads_before, "%s: after stop no proxy thread is left", k->name);
        is_int(test_count_dir("/proc/self/fd"), fds_before, "%s: after stop no fd is left", k->name);
        unlink(logp);
        unlink(usage);
}

int main(void)
{
        char dir[] = "/tmp/dm-sec-vendor-XXXXXX", upstream[64];
        pthread_t up_thread;
        uint16_t up_port;

        if (!mkdtemp(dir)) {
                perror("mkdtemp");
                return 1;
        }
        up_fd = test_listen_loopback(&up_port);
        snprintf(upstream, sizeof(upstream), "http://127.0.0.1:%u", up_port);
        if (pthread_create(&up_thread, NULL, up_main, NULL) != 0)
                return 1;

        for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
                check_kind(&kinds[i], upstream, dir);

        up_stop = 1;
        pthread_join(up_thread, NULL);
        close(up_fd);
        ok(rmdir(dir) == 0, "nothing of the proxies is left in their directory (%s)", dir);
        return done_testing();
}
