/* SPDX-License-Identifier: MIT */
/* Settings are read in one place (src/core/settings.c): what each variable
 * gives, and that the parts below core get them as values, not by reading
 * the environment themselves. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/core/settings.h"
#include "tests/tap.h"

static const char *const vars[] = {
        "DEMESNE_SHIM_WARM",
        "DEMESNE_ALLOW_CALLER_EGRESS",
        "DEMESNE_ALLOWED_PATHS",
        "DEMESNE_OUTPUT_ROOT",
        "DEMESNE_PROXY_HOSTS",
        "DEMESNE_VENDOR_UPSTREAM_ANTHROPIC",
        "DEMESNE_VENDOR_UPSTREAM_OPENAI",
        "DEMESNE_BACKEND",
        "DEMESNE_OPENSANDBOX_EGRESS",
        "DEMESNE_CLAUDE_CREDENTIALS",
        "DEMESNE_CODEX_AUTH",
        "DEMESNE_PRICES",
        "ANTHROPIC_API_KEY",
        "CLAUDE_CODE_OAUTH_TOKEN",
        "OPENAI_API_KEY",
        "DEMESNE_SANDBOX_SUBNET",
        "DEMESNE_EGRESS_ALLOW_PRIVATE",
        NULL,
};

static bool load(struct dm_config *cfg)
{
        struct dm_error err = { 0 };

        if (dm_config_load(cfg, &err) < 0) {
                diag("dm_config_load: %s", err.msg);
                return false;
        }
        return true;
}

static bool same(const char *got, const char *want)
{
        return got && want ? strcmp(got, want) == 0 : got == want;
}

/* The vendors' credentials: read here, handed to netpolicy/vendor-cred.c. */
static void test_vendor_env(void)
{
        struct dm_config cfg;

        setenv("ANTHROPIC_API_KEY", "sk-ant-settings", 1);
        setenv("CLAUDE_CODE_OAUTH_TOKEN", "", 1);
        setenv("OPENAI_API_KEY", "sk-settings", 1);
        setenv("HOME", "/tmp/dm-settings-home", 1);
        if (!load(&cfg))
                return;
        ok(same(cfg.vendor_env.anthropic_api_key, "sk-ant-settings") &&
                   same(cfg.vendor_env.openai_api_key, "sk-settings") &&
                   same(cfg.vendor_env.home, "/tmp/dm-settings-home"),
           "ANTHROPIC_API_KEY, OPENAI_API_KEY and HOME copied");
        ok(!cfg.vendor_env.claude_oauth_token, "an empty CLAUDE_CODE_OAUTH_TOKEN counts as unset");
        setenv("ANTHROPIC_API_KEY", "sk-ant-later", 1);
        ok(same(cfg.vendor_env.anthropic_api_key, "sk-ant-settings"), "a later change does not reach the copy");
        dm_config_release(&cfg);
        ok(!cfg.vendor_env.anthropic_api_key && !cfg.vendor_env.openai_api_key && !cfg.vendor_env.home,
           "released with the config");
        unsetenv("ANTHROPIC_API_KEY");
        unsetenv("CLAUDE_CODE_OAUTH_TOKEN");
        unsetenv("OPENAI_API_KEY");
}

/* The egress blocklist's process-wide part: parsed here into the config;
 * netpolicy's state changes only when the server's start hands it over. */
static void test_blocked(void)
{
        struct dm_config cfg;
        struct dm_cidr pool, priv[DM_BLOCKED_MAX_PRIVATE];
        struct dm_error err = { 0 };
        char a[INET_ADDRSTRLEN];

        setenv("DEMESNE_SANDBOX_SUBNET", "10.200.0.0/16", 1);
        setenv("DEMESNE_EGRESS_ALLOW_PRIVATE", "10.1.0.0/16, 192.168.7.0/24", 1);
        if (load(&cfg)) {
                inet_ntop(AF_INET, &cfg.blocked.pool.addr, a, sizeof(a));
                ok(cfg.blocked.has_pool && strcmp(a, "10.200.0.0") == 0 && cfg.blocked.pool.prefix == 16,
                   "DEMESNE_SANDBOX_SUBNET in the config: %s", a);
                is_int((long long)cfg.blocked.n_private_allowed, 2, "DEMESNE_EGRESS_ALLOW_PRIVATE: two ranges");
                dm_blocked_get_pool(&pool);
                inet_ntop(AF_INET, &pool.addr, a, sizeof(a));
                ok(strcmp(a, "10.213.0.0") == 0 && dm_blocked_get_private_allowed(priv, DM_BLOCKED_MAX_PRIVATE) == 0,
                   "loading the settings leaves netpolicy's blocklist alone (pool %s)", a);
                dm_blocked_init(&cfg.blocked);
                dm_blocked_get_pool(&pool);
                inet_ntop(AF_INET, &pool.addr, a, sizeof(a));
                ok(strcmp(a, "10.200.0.0") == 0 && dm_blocked_get_private_allowed(priv, DM_BLOCKED_MAX_PRIVATE) == 2,
                   "dm_blocked_init makes them the process's");
                ok(dm_blocked_why(ntohl(inet_addr("10.1.2.3"))) == NULL &&
                           dm_blocked_why(ntohl(inet_addr("10.200.0.9"))) != NULL,
                   "the operator's range is reachable, the pool is not");
                dm_config_release(&cfg);
        }
        setenv("DEMESNE_SANDBOX_SUBNET", "not-a-subnet", 1);
        setenv("DEMESNE_EGRESS_ALLOW_PRIVATE", "", 1);
        if (load(&cfg)) {
                ok(!cfg.blocked.has_pool && cfg.blocked.n_private_allowed == 0,
                   "a bad DEMESNE_SANDBOX_SUBNET leaves the default (reported where egress is set up)");
                dm_config_release(&cfg);
        }
        setenv("DEMESNE_EGRESS_ALLOW_PRIVATE", "10.1.0.0/16,8.8.8.0/24", 1);
        is_int(dm_config_load(&cfg, &err), -EINVAL, "a public range in DEMESNE_EGRESS_ALLOW_PRIVATE: the load fails");
        ok(strstr(err.msg, "DEMESNE_EGRESS_ALLOW_PRIVATE") != NULL, "naming the variable: %s", err.msg);
        unsetenv("DEMESNE_SANDBOX_SUBNET");
        unsetenv("DEMESNE_EGRESS_ALLOW_PRIVATE");
}

/* DEMESNE_EXPOSE_ADDR: where sandbox_expose's previews listen. */
static void test_expose_addr(void)
{
        struct dm_config cfg;
        struct dm_error err = { 0 };

        unsetenv("DEMESNE_EXPOSE_ADDR");
        if (load(&cfg)) {
                ok(cfg.expose_addr == htonl(INADDR_LOOPBACK), "DEMESNE_EXPOSE_ADDR unset: 127.0.0.1");
                dm_config_release(&cfg);
        }
        setenv("DEMESNE_EXPOSE_ADDR", "127.0.0.2", 1);
        if (load(&cfg)) {
                ok(cfg.expose_addr == inet_addr("127.0.0.2"), "DEMESNE_EXPOSE_ADDR=127.0.0.2: as given");
                dm_config_release(&cfg);
        }
        setenv("DEMESNE_EXPOSE_ADDR", "localhost", 1);
        is_int(dm_config_load(&cfg, &err), -EINVAL, "DEMESNE_EXPOSE_ADDR=localhost: the load fails");
        ok(strstr(err.msg, "DEMESNE_EXPOSE_ADDR") && strstr(err.msg, "'localhost'"),
           "naming the variable and value: %s", err.msg);
        unsetenv("DEMESNE_EXPOSE_ADDR");
}

/* DEMESNE_SHIM_WARM: the operator's switch for every sandbox's warm shell. */
static void test_shim_warm(void)
{
        struct dm_config cfg;
        struct dm_error err = { 0 };

        if (load(&cfg)) {
                ok(!cfg.shim_warm_off, "DEMESNE_SHIM_WARM unset: warm shells on");
                dm_config_release(&cfg);
        }
        setenv("DEMESNE_SHIM_WARM", "off", 1);
        if (load(&cfg)) {
                ok(cfg.shim_warm_off, "DEMESNE_SHIM_WARM=off: off");
                dm_config_release(&cfg);
        }
        setenv("DEMESNE_SHIM_WARM", "0", 1);
        if (load(&cfg)) {
                ok(cfg.shim_warm_off, "DEMESNE_SHIM_WARM=0: off");
                dm_config_release(&cfg);
        }
        setenv("DEMESNE_SHIM_WARM", "maybe", 1);
        is_int(dm_config_load(&cfg, &err), -EINVAL, "DEMESNE_SHIM_WARM=maybe: the load fails");
        ok(strstr(err.msg, "DEMESNE_SHIM_WARM='maybe'") != NULL, "naming the variable and the value: %s", err.msg);
        unsetenv("DEMESNE_SHIM_WARM");
}

int main(void)
{
        struct dm_config cfg;
        const struct dm_process_settings *ps;

        for (size_t i = 0; vars[i]; i++)
                unsetenv(vars[i]);
        setenv("DEMESNE_STATE_DIR", "/tmp/dm-settings-state", 1);
        test_shim_warm();

        if (load(&cfg)) {
                ok(!cfg.allow_caller_egress, "DEMESNE_ALLOW_CALLER_EGRESS unset: callers' egress not allowed");
                ok(!cfg.allowed_paths_given && !cfg.output_root_given, "nothing given");
                ok(!cfg.proxy_hosts && !cfg.vendor_upstream[0] && !cfg.vendor_upstream[1] && !cfg.backend &&
                           !cfg.opensandbox_egress && !cfg.claude_credentials && !cfg.codex_auth && !cfg.prices,
                   "the rest unset: NULL (the defaults are the users')");
                dm_config_release(&cfg);
        }

        setenv("DEMESNE_ALLOW_CALLER_EGRESS", "yes", 1);
        setenv("DEMESNE_ALLOWED_PATHS", "", 1);
        setenv("DEMESNE_PROXY_HOSTS", "", 1);
        if (load(&cfg)) {
                ok(!cfg.allow_caller_egress, "'yes' is not '1'");
                ok(cfg.allowed_paths_given && strcmp(cfg.allowed_paths, "") == 0,
                   "DEMESNE_ALLOWED_PATHS set empty: given, and empty");
                ok(!cfg.proxy_hosts, "an empty value counts as unset");
                dm_config_release(&cfg);
        }

        setenv("DEMESNE_ALLOW_CALLER_EGRESS", "1", 1);
        setenv("DEMESNE_OUTPUT_ROOT", "/tmp/dm-settings-out", 1);
        setenv("DEMESNE_PROXY_HOSTS", "/tmp/hosts", 1);
        setenv("DEMESNE_VENDOR_UPSTREAM_ANTHROPIC", "http://127.0.0.1:1", 1);
        setenv("DEMESNE_VENDOR_UPSTREAM_OPENAI", "http://127.0.0.1:2", 1);
        setenv("DEMESNE_BACKEND", "opensandbox", 1);
        setenv("DEMESNE_OPENSANDBOX_EGRESS", "dns+nft", 1);
        setenv("DEMESNE_CLAUDE_CREDENTIALS", "/tmp/claude.json", 1);
        setenv("DEMESNE_CODEX_AUTH", "/tmp/codex.json", 1);
        setenv("DEMESNE_PRICES", "/tmp/prices.json", 1);
        if (load(&cfg)) {
                ok(cfg.allow_caller_egress, "'1': callers' egress allowed");
                ok(cfg.output_root_given && strcmp(cfg.output_root, "/tmp/dm-settings-out") == 0,
                   "DEMESNE_OUTPUT_ROOT given");
                ok(same(cfg.proxy_hosts, "/tmp/hosts") && same(cfg.vendor_upstream[0], "http://127.0.0.1:1") &&
                           same(cfg.vendor_upstream[1], "http://127.0.0.1:2") && same(cfg.backend, "opensandbox") &&
                           same(cfg.opensandbox_egress, "dns+nft") &&
                           same(cfg.claude_credentials, "/tmp/claude.json") &&
                           same(cfg.codex_auth, "/tmp/codex.json") && same(cfg.prices, "/tmp/prices.json"),
                   "each variable's value, copied");
                /* Copies: the environment may change under a running server
                 * (tests do); the settings do not. */
                setenv("DEMESNE_PROXY_HOSTS", "/tmp/other", 1);
                ok(same(cfg.proxy_hosts, "/tmp/hosts"), "a later change of the environment does not reach them");
                dm_config_release(&cfg);
        }

        test_vendor_env();
        test_blocked();
        test_expose_addr();

        /* Process-wide settings: read once, on first use. */
        setenv("DEMESNE_IMAGE_REPO", "", 1);
        setenv("DEMESNE_IMAGES_DIR", "/tmp/dm-images", 1);
        setenv("DEMESNE_EGRESS_PACKAGE_HOSTS", "pkg.example:8443", 1);
        ps = dm_process_settings();
        ok(strcmp(ps->image_repo, "localhost/demesne") == 0, "DEMESNE_IMAGE_REPO empty: localhost/demesne");
        ok(same(ps->images_dir, "/tmp/dm-images") && same(ps->egress_package_hosts, "pkg.example:8443"),
           "DEMESNE_IMAGES_DIR and DEMESNE_EGRESS_PACKAGE_HOSTS as given");
        setenv("DEMESNE_IMAGE_REPO", "registry.example/team", 1);
        ok(dm_process_settings() == ps && strcmp(ps->image_repo, "localhost/demesne") == 0,
           "read once: a later change is not seen");
        return done_testing();
}
