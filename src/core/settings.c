/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/settings.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <pthread.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dm_parse_size(const char *s, int64_t *ret)
{
        char *end;
        long long v;
        int64_t mul = 1;

        if (!s || !*s)
                return -EINVAL;
        errno = 0;
        v = strtoll(s, &end, 10);
        if (errno || end == s || v < 0)
                return -EINVAL;
        switch (*end) {
        case '\0': break;
        case 'k':
        case 'K':
                mul = 1024;
                end++;
                break;
        case 'm':
        case 'M':
                mul = 1024 * 1024;
                end++;
                break;
        case 'g':
        case 'G':
                mul = 1024LL * 1024 * 1024;
                end++;
                break;
        default: return -EINVAL;
        }
        if (*end == 'b' || *end == 'B')
                end++;
        if (*end != '\0')
                return -EINVAL;
        if (v > INT64_MAX / mul)
                return -ERANGE;
        *ret = v * mul;
        return 0;
}

static const char *home_dir(void)
{
        const char *h = getenv("HOME");
        struct passwd *pw;

        if (h && *h == '/')
                return h;
        pw = getpwuid(getuid());
        return pw && pw->pw_dir ? pw->pw_dir : "/";
}

static int env_size(const char *name, int64_t def, int64_t min, int64_t max, int64_t *ret, struct dm_error *err)
{
        const char *v = getenv(name);
        int64_t x;

        if (!v || !*v) {
                *ret = def;
                return 0;
        }
        if (dm_parse_size(v, &x) < 0 || x < min || x > max)
                return dm_error_set(err, -EINVAL, "%s='%s' is not a size between %lld and %lld (e.g. 512, 64k, 2g)",
                                    name, v, (long long)min, (long long)max);
        *ret = x;
        return 0;
}

/* DEMESNE_SHIM is "on" (the default) or "off"; an absolute path there is
 * the older spelling of DEMESNE_SHIM_PATH. Anything else is a typo that
 * must not silently leave the filter on or off. */
static int shim_settings(struct dm_config *cfg, struct dm_error *err)
{
        const char *mode = getenv("DEMESNE_SHIM");
        const char *path = getenv("DEMESNE_SHIM_PATH");

        if (mode && *mode == '/' && !(path && *path))
                path = mode;
        else if (mode && *mode && *mode != '/' && strcmp(mode, "on") != 0 && strcmp(mode, "off") != 0)
                return dm_error_set(err, -EINVAL,
                                    "DEMESNE_SHIM='%s' is neither 'on' nor 'off' (the shim's path goes in "
                                    "DEMESNE_SHIM_PATH)",
                                    mode);
        cfg->shim_off = mode && strcmp(mode, "off") == 0;
        mode = getenv("DEMESNE_SHIM_WARM");
        if (mode && *mode && strcmp(mode, "on") != 0 && strcmp(mode, "1") != 0 && strcmp(mode, "off") != 0 &&
            strcmp(mode, "0") != 0)
                return dm_error_set(err, -EINVAL, "DEMESNE_SHIM_WARM='%s' is neither 'on' (1) nor 'off' (0)", mode);
        cfg->shim_warm_off = mode && (strcmp(mode, "off") == 0 || strcmp(mode, "0") == 0);
        if (path && *path) {
                if (*path != '/')
                        return dm_error_set(err, -EINVAL, "DEMESNE_SHIM_PATH='%s' must be an absolute path", path);
                cfg->shim_path = strdup(path);
                if (!cfg->shim_path)
                        return dm_error_set(err, -ENOMEM, "out of memory");
        }
        return 0;
}

/* A decimal number such as "1.5" in [min, max]: CPUs and dollars. */
static int env_decimal(const char *name, double def, double min, double max, const char *example, double *ret,
                       struct dm_error *err)
{
        const char *v = getenv(name);
        char *end;
        double x;

        if (!v || !*v) {
                *ret = def;
                return 0;
        }
        errno = 0;
        x = strtod(v, &end);
        if (errno || end == v || *end || !(x >= min && x <= max))
                return dm_error_set(err, -EINVAL, "%s='%s' is not a number between %g and %g (e.g. %s)", name, v, min,
                                    max, example);
        *ret = x;
        return 0;
}

static int load_limits(struct dm_config *cfg, struct dm_error *err)
{
        double cpus;
        int r;

        if ((r = env_decimal("DEMESNE_CPUS", 1.0, 0.0, 1024.0, "1.5; 0 = no limit", &cpus, err)) < 0)
                return r;
        if (cpus > 0 && cpus < 0.01)
                return dm_error_set(err, -EINVAL, "DEMESNE_CPUS='%s' is below the engines' minimum of 0.01 CPU",
                                    getenv("DEMESNE_CPUS"));
        cfg->nano_cpus = (int64_t)(cpus * 1e9 + 0.5);
        /* 1 MiB at least: the logs and a shell's history need room. */
        if ((r = env_size("DEMESNE_DISK_MAX", 2LL << 30, 0, 1LL << 50, &cfg->disk_max, err)) < 0)
                return r;
        if (cfg->disk_max > 0 && cfg->disk_max < (1 << 20))
                return dm_error_set(err, -EINVAL, "DEMESNE_DISK_MAX='%s' is below 1m (0 turns the cap off)",
                                    getenv("DEMESNE_DISK_MAX"));
        if ((r = env_size("DEMESNE_SNAPSHOT_TTL", 7 * 86400, 1, 365 * 86400, &cfg->snapshot_ttl_s, err)) < 0 ||
            (r = env_size("DEMESNE_SNAPSHOT_MAX", 16, 1, 4096, &cfg->snapshot_max, err)) < 0 ||
            (r = env_size("DEMESNE_SNAPSHOT_DISK_MAX", 10LL << 30, 0, 1LL << 50, &cfg->snapshot_disk_max, err)) < 0 ||
            (r = env_size("DEMESNE_ACTIVITY_DAYS", 14, 0, 36500, &cfg->activity_days, err)) < 0)
                return r;
        r = env_decimal("DEMESNE_AGENT_MAX_USD", 10.0, 0.0, 1e6, "2.50; 0 = no cap", &cfg->agent_max_usd, err);
        if (r < 0)
                return r;
        return env_decimal("DEMESNE_TREE_MAX_USD", 50.0, 0.0, 1e6, "20; 0 = no cap", &cfg->tree_max_usd, err);
}

/* An IPv4 address (network order) from name, or fallback when unset. */
static int env_ipv4(const char *name, const char *fallback, uint32_t *ret, struct dm_error *err)
{
        const char *v = getenv(name) && *getenv(name) ? getenv(name) : fallback;
        struct in_addr a;

        if (inet_pton(AF_INET, v, &a) != 1)
                return dm_error_set(err, -EINVAL, "%s: '%s' is not an IPv4 address (e.g. 127.0.0.1)", name, v);
        *ret = a.s_addr;
        return 0;
}

static char *dup_env_or(const char *name, const char *fallback)
{
        const char *v = getenv(name);
        return strdup(v && *v ? v : fallback);
}

/* A copy of a variable that is set and not empty, else NULL; *oom when the
 * copy failed. */
static char *dup_env(const char *name, bool *oom)
{
        const char *v = getenv(name);
        char *c;

        if (!v || !*v)
                return NULL;
        c = strdup(v);
        if (!c)
                *oom = true;
        return c;
}

static struct dm_process_settings process_settings;
static pthread_once_t process_once = PTHREAD_ONCE_INIT;

static void process_settings_read(void)
{
        const char *v;

        v = getenv("DEMESNE_IMAGE_REPO");
        process_settings.image_repo = v && *v && strlen(v) <= 160 ? v : "localhost/demesne";
        v = getenv("DEMESNE_IMAGES_DIR");
        process_settings.images_dir = v && *v ? v : NULL;
        v = getenv("DEMESNE_EGRESS_PACKAGE_HOSTS");
        process_settings.egress_package_hosts = v && *v ? v : NULL;
}

/* The environment's own strings: nothing in the server changes these. */
const struct dm_process_settings *dm_process_settings(void)
{
        pthread_once(&process_once, process_settings_read);
        return &process_settings;
}

/* The host's vendor credentials, for netpolicy/vendor-cred.c. */
static int vendor_env_read(struct dm_vendor_env *ret)
{
        bool oom = false;

        ret->anthropic_api_key = dup_env("ANTHROPIC_API_KEY", &oom);
        ret->claude_oauth_token = dup_env("CLAUDE_CODE_OAUTH_TOKEN", &oom);
        ret->openai_api_key = dup_env("OPENAI_API_KEY", &oom);
        ret->home = dup_env("HOME", &oom);
        return oom ? -ENOMEM : 0;
}

#define ENGINE_VAR(name, field)                             \
        {                                                   \
                name, offsetof(struct dm_engine_env, field) \
        }
static const struct {
        const char *name;
        size_t off;
} engine_vars[] = {
        ENGINE_VAR("DOCKER_HOST", docker_host),
        ENGINE_VAR("CONTAINER_HOST", container_host),
        ENGINE_VAR("XDG_RUNTIME_DIR", xdg_runtime_dir),
        ENGINE_VAR("PATH", path),
        ENGINE_VAR("TMPDIR", tmpdir),
        ENGINE_VAR("DOCKER_TLS_VERIFY", docker_tls_verify),
        ENGINE_VAR("DOCKER_CERT_PATH", docker_cert_path),
        ENGINE_VAR("HOME", home),
        ENGINE_VAR("OPEN_SANDBOX_DOMAIN", osb_domain),
        ENGINE_VAR("OPEN_SANDBOX_PROTOCOL", osb_protocol),
        ENGINE_VAR("OPEN_SANDBOX_API_KEY", osb_api_key),
        ENGINE_VAR("OPEN_SANDBOX_USE_SERVER_PROXY", osb_use_server_proxy),
        ENGINE_VAR("DEMESNE_OPENSANDBOX_POOL_REF", osb_pool_ref),
};

int dm_engine_env_read(struct dm_engine_env *ret)
{
        memset(ret, 0, sizeof(*ret));
        for (size_t i = 0; i < sizeof(engine_vars) / sizeof(engine_vars[0]); i++) {
                bool oom = false;
                char *v = dup_env(engine_vars[i].name, &oom);

                if (oom) {
                        dm_engine_env_release(ret);
                        return -ENOMEM;
                }
                *(char **)((char *)ret + engine_vars[i].off) = v;
        }
        return 0;
}

void dm_engine_env_release(struct dm_engine_env *env)
{
        if (!env)
                return;
        for (size_t i = 0; i < sizeof(engine_vars) / sizeof(engine_vars[0]); i++) {
                char **v = (char **)((char *)env + engine_vars[i].off);

                if (*v)
                        explicit_bzero(*v, strlen(*v)); /* OPEN_SANDBOX_API_KEY */
                free(*v);
                *v = NULL;
        }
}

/* The engine's and the host's switches: 1 or 0, anything else an error. */
static int host_flags(struct dm_config *cfg, struct dm_error *err)
{
        const char *v = getenv("DEMESNE_START_PODMAN");

        cfg->may_start_podman = !(v && strcmp(v, "0") == 0);
        v = getenv("DEMESNE_ALLOW_HOST_ROOT");
        if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
                return dm_error_set(err, -EINVAL, "DEMESNE_ALLOW_HOST_ROOT='%s' must be 1 (allow) or 0 (refuse)", v);
        cfg->allow_host_root = v && strcmp(v, "1") == 0;
        v = getenv("DEMESNE_EGRESS_NETNS");
        if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
                return dm_error_set(err, -EINVAL,
                                    "DEMESNE_EGRESS_NETNS='%s' must be 1 (listeners in the sandbox's "
                                    "namespace) or 0 (a veth pair when root)",
                                    v);
        cfg->egress_in_netns = v && strcmp(v, "1") == 0;
        v = getenv("DEMESNE_ELICIT");
        if (v && *v && strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
                return dm_error_set(err, -EINVAL, "DEMESNE_ELICIT='%s' must be on (ask the client) or off", v);
        cfg->elicit_off = v && strcmp(v, "off") == 0;
        return 0;
}

int dm_config_load(struct dm_config *cfg, struct dm_error *err)
{
        char path[PATH_MAX];
        const char *xdg = getenv("XDG_RUNTIME_DIR");
        const char *start;
        int r;

        memset(cfg, 0, sizeof(*cfg));
        snprintf(path, sizeof(path), "%s/.demesne/out", home_dir());
        cfg->output_root = dup_env_or("DEMESNE_OUTPUT_ROOT", path);
        if (geteuid() == 0)
                snprintf(path, sizeof(path), "/run/demesne");
        else if (xdg && *xdg == '/')
                snprintf(path, sizeof(path), "%s/demesne", xdg);
        else
                snprintf(path, sizeof(path), "%s/.demesne/run", home_dir());
        cfg->state_dir = dup_env_or("DEMESNE_STATE_DIR", path);
        cfg->allowed_paths = dup_env_or("DEMESNE_ALLOWED_PATHS", "");
        cfg->allow_credential_paths = dup_env_or("DEMESNE_ALLOW_CREDENTIAL_PATHS", "");
        cfg->home = strdup(home_dir());
        cfg->engine_host = getenv("DEMESNE_ENGINE_HOST") ? strdup(getenv("DEMESNE_ENGINE_HOST")) : NULL;
        /* serve --http always wants a token; without these it makes one. */
        cfg->http_token = getenv("DEMESNE_HTTP_TOKEN") && *getenv("DEMESNE_HTTP_TOKEN")
                                  ? strdup(getenv("DEMESNE_HTTP_TOKEN"))
                                  : NULL;
        cfg->http_token_file = getenv("DEMESNE_HTTP_TOKEN_FILE") && *getenv("DEMESNE_HTTP_TOKEN_FILE")
                                       ? strdup(getenv("DEMESNE_HTTP_TOKEN_FILE"))
                                       : NULL;
        cfg->sandbox_subnet = getenv("DEMESNE_SANDBOX_SUBNET") && *getenv("DEMESNE_SANDBOX_SUBNET")
                                      ? strdup(getenv("DEMESNE_SANDBOX_SUBNET"))
                                      : NULL;
        cfg->skills_dir = getenv("DEMESNE_SKILLS_DIR") && *getenv("DEMESNE_SKILLS_DIR")
                                  ? strdup(getenv("DEMESNE_SKILLS_DIR"))
                                  : NULL;
        cfg->ui_dir = getenv("DEMESNE_UI_DIR") && *getenv("DEMESNE_UI_DIR") ? strdup(getenv("DEMESNE_UI_DIR")) : NULL;
        start = getenv("DEMESNE_IMAGES_AUTOBUILD");
        cfg->images_autobuild = !(start && strcmp(start, "0") == 0);
        start = getenv("DEMESNE_ALLOW_CALLER_EGRESS");
        cfg->allow_caller_egress = start && strcmp(start, "1") == 0;
        cfg->allowed_paths_given = getenv("DEMESNE_ALLOWED_PATHS") != NULL;
        cfg->output_root_given = getenv("DEMESNE_OUTPUT_ROOT") && *getenv("DEMESNE_OUTPUT_ROOT");
        {
                bool oom = false;

                cfg->proxy_hosts = dup_env("DEMESNE_PROXY_HOSTS", &oom);
                cfg->vendor_upstream[0] = dup_env("DEMESNE_VENDOR_UPSTREAM_ANTHROPIC", &oom);
                cfg->vendor_upstream[1] = dup_env("DEMESNE_VENDOR_UPSTREAM_OPENAI", &oom);
                cfg->backend = dup_env("DEMESNE_BACKEND", &oom);
                cfg->opensandbox_egress = dup_env("DEMESNE_OPENSANDBOX_EGRESS", &oom);
                cfg->remote_listen = dup_env("DEMESNE_REMOTE_LISTEN", &oom);
                cfg->remote_tls_cert = dup_env("DEMESNE_REMOTE_TLS_CERT", &oom);
                cfg->remote_tls_key = dup_env("DEMESNE_REMOTE_TLS_KEY", &oom);
                cfg->remote_tls_ca = dup_env("DEMESNE_REMOTE_TLS_CA", &oom);
                cfg->claude_credentials = dup_env("DEMESNE_CLAUDE_CREDENTIALS", &oom);
                cfg->codex_auth = dup_env("DEMESNE_CODEX_AUTH", &oom);
                cfg->prices = dup_env("DEMESNE_PRICES", &oom);
                cfg->host_mcp = dup_env("DEMESNE_HOST_MCP", &oom);
                if (oom) {
                        dm_config_release(cfg);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
        }
        /* A secret: not handed down to the processes the server starts. */
        unsetenv("DEMESNE_HTTP_TOKEN");
        if (!cfg->output_root || !cfg->state_dir || !cfg->allowed_paths || !cfg->allow_credential_paths || !cfg->home) {
                dm_config_release(cfg);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        if (cfg->output_root[0] != '/' || cfg->state_dir[0] != '/') {
                r = dm_error_set(err, -EINVAL, "DEMESNE_OUTPUT_ROOT and DEMESNE_STATE_DIR must be absolute paths");
                dm_config_release(cfg);
                return r;
        }
        r = shim_settings(cfg, err);
        if (r < 0) {
                dm_config_release(cfg);
                return r;
        }
        r = host_flags(cfg, err);
        if (r < 0) {
                dm_config_release(cfg);
                return r;
        }

        if ((r = env_size("DEMESNE_MEMORY", 2LL << 30, 6LL << 20, INT64_MAX / 2, &cfg->memory_bytes, err)) < 0 ||
            (r = env_size("DEMESNE_PIDS_LIMIT", 512, 16, 1 << 22, &cfg->pids_limit, err)) < 0 ||
            (r = env_size("DEMESNE_NOFILE", 4096, 64, 1 << 20, &cfg->nofile, err)) < 0 ||
            (r = env_size("DEMESNE_NPROC", 4096, 64, 1 << 22, &cfg->nproc, err)) < 0 ||
            (r = env_size("DEMESNE_POOL", 2, 0, 16, &cfg->pool_size, err)) < 0 ||
            (r = env_size("DEMESNE_MAX_MESSAGE", 4 << 20, 4096, 1LL << 30, &cfg->max_message, err)) < 0 ||
            (r = env_size("DEMESNE_OUTPUT_CAP", 64 << 10, 256, 64 << 20, &cfg->output_cap, err)) < 0 ||
            (r = env_size("DEMESNE_TRANSFER_MAX", 1LL << 30, 1, INT64_MAX / 2, &cfg->transfer_max, err)) < 0 ||
            (r = env_size("DEMESNE_SANDBOX_SWEEP_SECONDS", 60, 1, 86400, &cfg->sweep_s, err)) < 0 ||
            (r = env_size("DEMESNE_TASK_AFTER_MS", 1000, 0, 3600000, &cfg->task_after_ms, err)) < 0 ||
            (r = env_size("DEMESNE_ELICIT_TIMEOUT_MS", 120000, 100, 3600000, &cfg->elicit_timeout_ms, err)) < 0 ||
            (r = env_size("DEMESNE_MAX_DEPTH", 3, 1, 8, &cfg->max_depth, err)) < 0 ||
            (r = env_size("DEMESNE_MAX_CHILDREN", 8, 1, 256, &cfg->max_children, err)) < 0 ||
            (r = env_size("DEMESNE_MAX_TREE", 32, 1, 1024, &cfg->max_tree, err)) < 0 ||
            (r = env_ipv4("DEMESNE_EXPOSE_ADDR", "127.0.0.1", &cfg->expose_addr, err)) < 0 ||
            (r = dm_blocked_settings_parse(cfg->sandbox_subnet, getenv("DEMESNE_EGRESS_ALLOW_PRIVATE"), &cfg->blocked,
                                           err)) < 0 ||
            (r = load_limits(cfg, err)) < 0) {
                dm_config_release(cfg);
                return r;
        }
        if (dm_engine_env_read(&cfg->engine_env) < 0 || vendor_env_read(&cfg->vendor_env) < 0) {
                dm_config_release(cfg);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        /* OpenSandbox's sandboxes live on its network, not in a pool of ours. */
        cfg->blocked.no_pool = dm_backend_is_opensandbox(cfg->backend, &cfg->engine_env);
        cfg->engine_response_max = 16 << 20;
        cfg->max_timeout_s = 172800;
        cfg->default_timeout_s = 3600;
        return 0;
}

void dm_config_release(struct dm_config *cfg)
{
        free(cfg->output_root);
        free(cfg->state_dir);
        free(cfg->allowed_paths);
        free(cfg->allow_credential_paths);
        free(cfg->home);
        free(cfg->engine_host);
        free(cfg->shim_path);
        free(cfg->sandbox_subnet);
        free(cfg->skills_dir);
        free(cfg->ui_dir);
        if (cfg->http_token)
                explicit_bzero(cfg->http_token, strlen(cfg->http_token));
        free(cfg->http_token);
        free(cfg->http_token_file);
        free(cfg->proxy_hosts);
        free(cfg->vendor_upstream[0]);
        free(cfg->vendor_upstream[1]);
        free(cfg->backend);
        free(cfg->opensandbox_egress);
        free(cfg->remote_listen);
        free(cfg->remote_tls_cert);
        free(cfg->remote_tls_key);
        free(cfg->remote_tls_ca);
        free(cfg->claude_credentials);
        free(cfg->codex_auth);
        free(cfg->prices);
        free(cfg->host_mcp);
        dm_engine_env_release(&cfg->engine_env);
        dm_vendor_env_release(&cfg->vendor_env);
        memset(cfg, 0, sizeof(*cfg));
}
