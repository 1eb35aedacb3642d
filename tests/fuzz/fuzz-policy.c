/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the egress policy: the `egress` mode and `allow`
 * entries a caller sends (netpolicy/policy.c), and how the egress proxy
 * takes the result (netpolicy/proxy-policy.c, as src/core/egress.c hands it
 * over): every name and address rule the policy accepts must be accepted
 * by the proxy too and must let through what it names, and nothing in a
 * range no sandbox reaches may be accepted. The proxy's own entry parser
 * (dm_proxy_policy_add_entry) gets each entry as well.
 *
 * Input: byte 0 bit 0 = the server accepts caller entries; then
 * newline-separated lines: the mode, then the allow entries. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>

#include "netpolicy/policy.h"
#include "netpolicy/proxy-internal.h"
#include "netpolicy/blocked.h"
#include "tests/fuzz/fuzz.h"

#define MAX_ENTRIES (DM_POLICY_MAX_ENTRIES + 8)

static void check_name_rule(const struct dm_policy_name *n, struct dm_proxy_policy *pp)
{
        struct dm_proxy_verdict v;
        struct in_addr lit;
        char pattern[300], name[256], probe[300];
        size_t len = strlen(n->host);
        uint16_t port = n->port ? n->port : 80;

        FUZZ_CHECK(len > 0 && len <= 253 && n->host[len - 1] != '.');
        for (const char *c = n->host; *c; c++)
                FUZZ_CHECK(islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '-' || *c == '.');
        snprintf(pattern, sizeof(pattern), "%s%s", n->wildcard ? "*." : "", n->host);
        /* src/core/egress.c adds every name rule this way; a refusal there fails
         * the sandbox after its caller was told the policy is fine. */
        FUZZ_CHECK(dm_proxy_policy_add_host(pp, pattern, n->port, NULL) == 0);
        snprintf(probe, sizeof(probe), "%s%s", n->wildcard ? "a." : "", n->host);
        if (strlen(probe) <= 253)
                FUZZ_CHECK(dm_proxy_check_target(pp, probe, port, n->port != 0, name, &lit, &v) == 0);
}

static void check_cidr_rule(const struct dm_policy_cidr *c, struct dm_proxy_policy *pp)
{
        uint32_t h = ntohl(c->net.s_addr), mask = c->prefix ? 0xffffffffu << (32 - c->prefix) : 0;
        struct dm_proxy_verdict v;
        struct in_addr lit;
        char a[INET_ADDRSTRLEN], name[256], why[160];

        FUZZ_CHECK(c->prefix <= 32 && (h & ~mask) == 0);
        /* Neither inside nor around a range no sandbox reaches. */
        FUZZ_CHECK(dm_blocked_overlap(h, c->prefix, why, sizeof(why)) == NULL);
        FUZZ_CHECK(dm_proxy_policy_add_cidr(pp, c->net, c->prefix, c->port, NULL) == 0);
        inet_ntop(AF_INET, &c->net, a, sizeof(a));
        FUZZ_CHECK(dm_proxy_check_target(pp, a, c->port ? c->port : 80, c->port != 0, name, &lit, &v) == 1 &&
                   lit.s_addr == c->net.s_addr);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *allow[MAX_ENTRIES + 1];
        struct dm_policy *p = NULL;
        struct dm_error err = { 0 };
        char *text, *mode, *save = NULL;
        size_t n = 0;
        int r;

        if (size < 1)
                return 0;
        text = fuzz_strndup(data + 1, size - 1);
        mode = strtok_r(text, "\n", &save);
        for (char *e; n < MAX_ENTRIES && (e = strtok_r(NULL, "\n", &save));)
                allow[n++] = e;
        allow[n] = NULL;

        r = dm_policy_parse(mode, n ? allow : NULL, data[0] & 1 ? DM_POLICY_CALLER_ALLOWED : 0, &p, &err);
        if (r == 0) {
                struct dm_proxy_policy pp;

                FUZZ_CHECK(p->n_names + p->n_cidrs == n);
                dm_proxy_policy_init(&pp);
                for (size_t i = 0; i < p->n_names; i++)
                        check_name_rule(&p->names[i], &pp);
                for (size_t i = 0; i < p->n_cidrs; i++)
                        check_cidr_rule(&p->cidrs[i], &pp);
                dm_proxy_policy_release(&pp);
                dm_policy_free(p);
        } else {
                FUZZ_CHECK(r == err.code && (r == -EINVAL || r == -EPERM || r == -E2BIG) && err.msg[0]);
        }

        /* The proxy's parser of the same syntax, on its own. */
        for (size_t i = 0; i < n; i++) {
                struct dm_proxy_policy pp;
                struct dm_error e2 = { 0 };

                dm_proxy_policy_init(&pp);
                if (dm_proxy_policy_add_entry(&pp, allow[i], &e2) == 0)
                        FUZZ_CHECK(pp.n_hosts + pp.n_cidrs == 1);
                else
                        FUZZ_CHECK(e2.code < 0 && e2.msg[0]);
                dm_proxy_policy_release(&pp);
        }
        free(text);
        return 0;
}
