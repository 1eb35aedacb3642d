/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/cli/doctor.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netpolicy/vendor.h"
#include "src/basic/curl-api.h"
#include "src/core/agent.h"
#include "src/core/egress.h"
#include "src/core/images.h"
#include "src/core/launch.h"
#include "src/basic/cleanup.h"

void dm_doctor_account(void)
{
        uid_t uid = geteuid();
        struct passwd *pw = getpwuid(uid);

        printf("account: %s (uid %u, %s)\n", pw && pw->pw_name ? pw->pw_name : "?", (unsigned)uid,
               uid == 0 ? "root" : "not root");
}

void dm_doctor_engine_mode(struct dm_backend *b)
{
        struct dm_userns u = { 0 };
        struct dm_error err = { 0 };
        const char *mode;

        if (!b) {
                puts("engine mode: unknown (no engine answered; see below)");
                return;
        }
        if (!strcmp(b->ops->name, "opensandbox")) {
                puts("engine mode: OpenSandbox (sandboxes run on the OpenSandbox server)");
                return;
        }
        if (!b->ops->userns || b->ops->userns(b, &u, &err) < 0) {
                printf("engine mode: %s (%s)\n", b->ops->name, err.msg[0] ? err.msg : "user ids not known");
                return;
        }
        switch (u.kind) {
        case DM_USERNS_PER_CONTAINER: mode = "rootful Podman"; break;
        case DM_USERNS_ROOTLESS: mode = strstr(u.detail, "dockerd") ? "rootless dockerd" : "rootless Podman"; break;
        case DM_USERNS_DAEMON: mode = "dockerd with userns-remap"; break;
        default: mode = "dockerd without userns-remap"; break;
        }
        printf("engine mode: %s\n", mode);
}

/* Whether `prog` is an executable on path (PATH as the settings read it). */
static bool on_path(const char *search, const char *prog)
{
        char buf[PATH_MAX];

        for (const char *p = search ? search : "/usr/bin:/bin"; p && *p;) {
                const char *end = strchr(p, ':');
                size_t len = end ? (size_t)(end - p) : strlen(p);

                if (len && snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, p, prog) < (int)sizeof(buf) &&
                    access(buf, X_OK) == 0)
                        return true;
                p = end ? end + 1 : NULL;
        }
        return false;
}

/* Whether this user has a subordinate id range in `file` (/etc/subuid):
 * mmdebstrap's unshare mode, the one a normal user's build of base uses,
 * maps it with newuidmap. */
static bool has_subids(const char *file)
{
        struct passwd *pw = getpwuid(geteuid());
        char line[512], uid[32];
        FILE *f = fopen(file, "re");
        bool found = false;

        if (!f)
                return false;
        snprintf(uid, sizeof(uid), "%u", (unsigned)geteuid());
        while (!found && fgets(line, sizeof(line), f)) {
                size_t len = strcspn(line, ":");
                found = (pw && strlen(pw->pw_name) == len && !strncmp(line, pw->pw_name, len)) ||
                        (strlen(uid) == len && !strncmp(line, uid, len));
        }
        fclose(f);
        return found;
}

/* NULL when build.sh can build img here, else what is missing. state_of
 * gives the other images' states (for the parent, base). */
static const char *why_unbuildable(const struct dm_image_info *img, const char *engine, const char *base_state,
                                   const char *search, char *buf, size_t size)
{
        const char *dir = dm_images_dir();
        char path[PATH_MAX];
        struct stat st;

        snprintf(path, sizeof(path), "%s/build.sh", dir ? dir : "");
        if (!dir || access(path, X_OK) < 0) {
                snprintf(buf, size, "the build script '%s' is missing (set DEMESNE_IMAGES_DIR)", path);
                return buf;
        }
        snprintf(path, sizeof(path), "%s/lib.sh", dir);
        if (access(path, R_OK) < 0) {
                snprintf(buf, size, "'%s' is missing beside build.sh (set DEMESNE_IMAGES_DIR)", path);
                return buf;
        }
        if (engine && *engine && !on_path(search, engine)) {
                snprintf(buf, size, "build.sh drives the engine's CLI, and '%s' is not on PATH", engine);
                return buf;
        }
        if (!strcmp(img->name, "base")) {
                if (!on_path(search, "mmdebstrap"))
                        return "mmdebstrap is not on PATH (Debian: apt-get install mmdebstrap)";
                if (geteuid() != 0 && (!on_path(search, "unshare") || !on_path(search, "newuidmap")))
                        return "a normal user's mmdebstrap needs unshare and newuidmap (Debian: apt-get install "
                               "util-linux uidmap)";
                if (geteuid() != 0 && !has_subids("/etc/subuid"))
                        return "this user has no range in /etc/subuid, which mmdebstrap's unshare mode maps "
                               "(usermod --add-subuids / --add-subgids)";
        } else if (base_state && !strcmp(base_state, "missing") &&
                   why_unbuildable(&dm_images[0], engine, NULL, search, buf, size)) {
                char why[PATH_MAX + 64];

                snprintf(why, sizeof(why), "it is built on base, which is missing and cannot be built: %s", buf);
                snprintf(buf, size, "%s", why);
                return buf;
        }
        snprintf(path, sizeof(path), "%s/%s/npm/package.json", dir, img->name);
        if (stat(path, &st) == 0 && !on_path(search, "npm"))
                return "npm is not on PATH (Debian: apt-get install npm)";
        return NULL;
}

/* The state column of `build.sh --list` for name ("built", "stale: why",
 * "missing"), copied into state; false when the list lacks it. */
static bool list_state(const char *list, const char *name, char *state, size_t size, char *tag, size_t tag_size)
{
        for (const char *l = list; l && *l;) {
                const char *end = strchr(l, '\n');
                size_t len = end ? (size_t)(end - l) : strlen(l);
                char line[1024], *f[5] = { 0 }, *save = NULL;
                int n = 0;

                snprintf(line, sizeof(line), "%.*s", (int)(len < sizeof(line) ? len : sizeof(line) - 1), l);
                for (char *x = strtok_r(line, "\t", &save); x && n < 5; x = strtok_r(NULL, "\t", &save))
                        f[n++] = x;
                if (n >= 4 && !strcmp(f[0], name)) {
                        snprintf(state, size, "%s", f[3]);
                        snprintf(tag, tag_size, "%s", f[2]);
                        return true;
                }
                l = end ? end + 1 : NULL;
        }
        return false;
}

void dm_doctor_images(struct dm_backend *b, const struct dm_config *cfg, struct dm_doctor_tally *t)
{
        bool autobuild_off = !cfg->images_autobuild;
        struct dm_error err = { 0 };
        char why_buf[PATH_MAX + 256], engine[16] = "", host[PATH_MAX] = "", base_state[256] = "";
        char state[256], tag[64];
        _cleanup_free_ char *list = NULL;

        /* build.sh --list compares each image's inputs-hash tag with what
         * this user's engine store holds: built, stale (and why) or missing. */
        dm_image_engine(b, engine, host, sizeof(host));
        if (dm_images_list(engine[0] ? engine : NULL, host[0] ? host : NULL, &list, &err) < 0) {
                printf("note    images: cannot compare them with their inputs (%s); checking presence only\n", err.msg);
                dm_error_clear(&err);
        }
        list_state(list, "base", base_state, sizeof(base_state), tag, sizeof(tag));
        for (size_t i = 0; i < dm_images_count; i++) {
                const struct dm_image_info *img = &dm_images[i];
                bool exists = false;
                const char *why;

                if (!img->buildable)
                        continue;
                err.msg[0] = '\0';
                tag[0] = '\0';
                if (!list_state(list, img->name, state, sizeof(state), tag, sizeof(tag))) {
                        if (b->ops->image_exists(b, dm_image_ref(img), &exists, &err) < 0) {
                                printf("PROBLEM image %s: %s\n        fix: demesne images build %s\n", img->name,
                                       err.msg, img->name);
                                t->problems++;
                                continue;
                        }
                        snprintf(state, sizeof(state), "%s", exists ? "built" : "missing");
                }
                if (!strcmp(state, "built")) {
                        printf("ok      image %s: built and current%s%s (in this user's engine store)\n", img->name,
                               tag[0] ? ", inputs tag " : "", tag);
                } else if (!strncmp(state, "stale", 5)) {
                        /* Calls use :latest as it is; only a build refreshes it. */
                        printf("note    image %s: built but %s; calls use it as it is (refresh: demesne images "
                               "build %s)\n",
                               img->name, state, img->name);
                } else if ((why = why_unbuildable(img, engine, base_state, cfg->engine_env.path, why_buf,
                                                  sizeof(why_buf))) != NULL) {
                        printf("PROBLEM image %s: missing in this user's engine store, and it cannot be built "
                               "here: %s\n",
                               img->name, why);
                        t->problems++;
                } else if (autobuild_off) {
                        printf("PROBLEM image %s: missing, and DEMESNE_IMAGES_AUTOBUILD=0\n        fix: demesne "
                               "images build %s\n",
                               img->name, img->name);
                        t->problems++;
                } else {
                        /* Not a problem: the first call that names it builds it. */
                        printf("note    image %s: missing in this user's engine store, buildable here (built on "
                               "first use, minutes; or now with `demesne images build %s`)\n",
                               img->name, img->name);
                }
        }
}

static void feature(struct dm_doctor_tally *t, bool good, const char *what, const char *detail)
{
        printf("%s %s: %s\n", good ? "feature" : "unavail", what, detail);
        t->unavailable += !good;
}

/* The limits as they reach a sandbox: the engine's cgroups, the shim's
 * rlimits, or (a backend without a namespace here: OpenSandbox) what its
 * API carries, which has no pids limit. */
static void doctor_limits(struct dm_context *ctx, struct dm_backend *b, struct dm_doctor_tally *t)
{
        char why[512], detail[1024];
        bool cg = dm_launch_engine_limits(ctx, why, sizeof(why));

        if (!dm_backend_can(b, DM_CAP_HOST_NETNS)) {
                feature(t, true, "memory limit (DEMESNE_MEMORY)",
                        "sent to the server as resourceLimits.memory, applied by its runtime");
                feature(t, true, "CPU limit (DEMESNE_CPUS)",
                        "sent to the server as resourceLimits.cpu, applied by its runtime");
                feature(t, false, "pids limit (DEMESNE_PIDS_LIMIT)",
                        "not sent: the backend's API has no pids limit (only its runtime's own applies)");
                return;
        }
        if (cg)
                snprintf(detail, sizeof(detail), "applied per sandbox by the engine (cgroups)");
        else if (dm_launch_use_shim(ctx, b))
                snprintf(detail, sizeof(detail),
                         "not per sandbox: %s. demesne-shim applies what it can instead: memory per process "
                         "(RLIMIT_DATA at DEMESNE_MEMORY: a sandbox of several processes can use more), and "
                         "the sandbox's process count (past DEMESNE_PIDS_LIMIT it kills every process of "
                         "the sandbox)",
                         why);
        else
                snprintf(detail, sizeof(detail),
                         "none: %s, and demesne-shim (which would apply them "
                         "per process) is off",
                         why);
        feature(t, cg, "memory and pids limits (DEMESNE_MEMORY, DEMESNE_PIDS_LIMIT)", detail);
        /* A CFS quota needs a cgroup; no rlimit stands in for it. */
        snprintf(detail, sizeof(detail),
                 "not applied: %s; no rlimit stands in for a CPU quota: commands run at nice 10, so the host "
                 "comes first, but a sandbox can use every idle CPU",
                 why);
        feature(t, cg, "CPU limit (DEMESNE_CPUS)", cg ? "applied per sandbox by the engine (CFS quota)" : detail);
}

/* nested: true on a backend whose sandboxes are elsewhere: through the
 * remote listener (DEMESNE_REMOTE_LISTEN), which needs TLS off loopback. */
static void doctor_remote(struct dm_context *ctx, struct dm_doctor_tally *t)
{
        const struct dm_config *cfg = &ctx->cfg;
        bool tls = cfg->remote_tls_cert && cfg->remote_tls_key;
        bool loopback = cfg->remote_listen && (strncmp(cfg->remote_listen, "127.", 4) == 0 ||
                                               strncmp(cfg->remote_listen, "localhost:", 10) == 0 ||
                                               strncmp(cfg->remote_listen, "[::1]:", 6) == 0);
        char detail[1024];

        if (!cfg->remote_listen) {
                feature(t, false, "nested sandboxes (nested: true)",
                        "refused: the sandboxes are not on this host, and no listener they reach is set "
                        "(DEMESNE_REMOTE_LISTEN=ADDR:PORT, TLS with DEMESNE_REMOTE_TLS_CERT and _KEY)");
                return;
        }
        if (!tls && !loopback) {
                snprintf(detail, sizeof(detail),
                         "DEMESNE_REMOTE_LISTEN=%.200s is not loopback and has no TLS: set DEMESNE_REMOTE_TLS_CERT "
                         "and DEMESNE_REMOTE_TLS_KEY (the server does not start without them)",
                         cfg->remote_listen);
                feature(t, false, "nested sandboxes (nested: true)", detail);
                t->problems++;
                return;
        }
        snprintf(detail, sizeof(detail),
                 "through the remote listener %s://%.200s/mcp (DEMESNE_REMOTE_LISTEN), each sandbox behind its own "
                 "token%s; the cluster must route its sandboxes to that address, and their network policy allows it",
                 tls ? "https" : "http", cfg->remote_listen,
                 tls ? (cfg->remote_tls_ca ? ", its CA given to them as DEMESNE_MCP_CA_CERT"
                                           : "; no DEMESNE_REMOTE_TLS_CA: their clients must trust the certificate")
                     : "");
        feature(t, true, "nested sandboxes (nested: true)", detail);
}

/* The egress modes the backend accepts with this configuration, as the
 * schemas list them (dm_egress_offer): a PROBLEM when it accepts none. */
static void doctor_egress(struct dm_context *ctx, const char *def, struct dm_doctor_tally *t)
{
        struct dm_egress_offer o;
        bool caller = ctx->cfg.allow_caller_egress;
        char modes[256] = "", detail[1024];
        size_t len = 0;

        dm_egress_offer(ctx, &o);
        if (o.none)
                len += (size_t)snprintf(modes + len, sizeof(modes) - len, "%snone%s", len ? ", " : "",
                                        o.none_reaches_dns ? " (the name servers still answer)" : "");
        if (o.package_managers)
                len += (size_t)snprintf(modes + len, sizeof(modes) - len, "%spackage-managers", len ? ", " : "");
        if (o.allow && caller)
                len += (size_t)snprintf(modes + len, sizeof(modes) - len, "%sallow lists", len ? ", " : "");
        if (o.open && caller)
                len += (size_t)snprintf(modes + len, sizeof(modes) - len, "%sopen", len ? ", " : "");
        if (!len) {
                printf("PROBLEM egress: no mode can be had, so every sandbox call is refused: %s%s\n",
                       o.why                 ? o.why
                       : (o.open || o.allow) ? "the only modes the backend holds ('open', allow lists) are off"
                                             : "no egress",
                       (o.open || o.allow) && !caller ? " (DEMESNE_ALLOW_CALLER_EGRESS is unset)" : "");
                if (o.fix || ((o.open || o.allow) && !caller))
                        printf("        fix: %s\n", o.fix ? o.fix : "set DEMESNE_ALLOW_CALLER_EGRESS=1");
                t->problems++;
                return;
        }
        snprintf(detail, sizeof(detail), "%s; default egress is %s%s%s%s", modes, def,
                 (o.open || o.allow) && !caller ? "; 'open' and 'allow' need DEMESNE_ALLOW_CALLER_EGRESS=1" : "",
                 o.why ? "; only these: " : "", o.why ? o.why : "");
        feature(t, !o.why, "egress modes", detail);
        if (o.why && o.fix)
                printf("        fix: %s\n", o.fix);
}

void dm_doctor_features(struct dm_context *ctx, struct dm_backend *b, struct dm_doctor_tally *t)
{
        const char *why_a = dm_agent_unavailable(&ctx->cfg, DM_VENDOR_ANTHROPIC);
        const char *why_o = dm_agent_unavailable(&ctx->cfg, DM_VENDOR_OPENAI);
        const char *egress = dm_egress_default(ctx);

        const char *no_net = NULL;
        struct dm_error curl_err = { 0 };
        char detail[1024], creds[512];

        /* dm_egress_default is what the server decides, for these reasons. */
        if (!strcmp(egress, "none"))
                no_net = dm_egress_why_none(ctx);
        doctor_egress(ctx, egress, t);
        if (why_a && why_o)
                snprintf(creds, sizeof(creds), "no vendor credential: Claude Code: %s; Codex: %s", why_a, why_o);
        else
                snprintf(creds, sizeof(creds), "%s%s%s", why_a ? "" : "Claude Code (Anthropic)",
                         !why_a && !why_o ? " and " : "", why_o ? "" : "Codex (OpenAI)");
        /* An agent reaches its vendor through a proxy on the sandbox's veth,
         * which dm_egress_start_vendor makes under the same conditions; a
         * remote sandbox through the remote listener. */
        if (b && !dm_backend_can(b, DM_CAP_HOST_NETNS) && !ctx->cfg.remote_listen) {
                snprintf(detail, sizeof(detail),
                         "unavailable on this backend without DEMESNE_REMOTE_LISTEN, through which its sandboxes "
                         "reach the vendor proxy (%s%s)",
                         why_a && why_o ? "" : "credential found: ", creds);
                feature(t, false, "agent tools (sandbox_agent, sandbox_research)", detail);
        } else if (no_net && !(b && !dm_backend_can(b, DM_CAP_HOST_NETNS))) {
                snprintf(detail, sizeof(detail), "unavailable, the vendor proxy needs egress: %s (%s%s)", no_net,
                         why_a && why_o ? "" : "credential found: ", creds);
                feature(t, false, "agent tools (sandbox_agent, sandbox_research)", detail);
        } else if (why_a && why_o) {
                snprintf(detail, sizeof(detail), "unavailable, %s", creds);
                feature(t, false, "agent tools (sandbox_agent, sandbox_research)", detail);
        } else if (dm_curl_api_ready(&curl_err) < 0) {
                /* The vendor proxy reaches the vendor through libcurl, which
                 * a server opens on first use (src/basic/curl-api.h). */
                snprintf(detail, sizeof(detail), "unavailable, the vendor proxy needs libcurl: %.900s", curl_err.msg);
                feature(t, false, "agent tools (sandbox_agent, sandbox_research)", detail);
        } else {
                snprintf(detail, sizeof(detail), "available with %s%s", creds,
                         b && !dm_backend_can(b, DM_CAP_HOST_NETNS) ? ", the vendor proxy through the remote listener"
                                                                    : "");
                feature(t, true, "agent tools (sandbox_agent, sandbox_research)", detail);
        }
        if (b && b->ops->userns) {
                struct dm_userns u = { 0 };
                struct dm_error err = { 0 };

                if (b->ops->userns(b, &u, &err) < 0)
                        feature(t, false, "user namespaces", err.msg);
                else
                        feature(t, u.kind != DM_USERNS_HOST_ROOT, "user namespaces",
                                u.kind == DM_USERNS_HOST_ROOT
                                        ? "no: a sandbox's root is the host's root (DEMESNE_ALLOW_HOST_ROOT=1)"
                                        : u.detail);
        }
        if (b)
                doctor_limits(ctx, b, t);
        if (b && !dm_backend_can(b, DM_CAP_HOST_NETNS))
                doctor_remote(ctx, t);
        if (b)
                feature(t, dm_launch_use_shim(ctx, b), "seccomp filter (demesne-shim)",
                        dm_launch_use_shim(ctx, b) ? "on" : "off: the engine's default seccomp profile only");
        if (b) {
                struct dm_error perr = { 0 };
                bool attach = dm_backend_can(b, DM_CAP_ATTACH), shim = dm_launch_use_shim(ctx, b);
                /* Without attach (OpenSandbox): sandboxes made ahead there,
                 * as its cold runs are, without the shim. */
                bool remote = !attach && dm_backend_can(b, DM_CAP_TTL) && dm_launch_shim_mode(ctx, b, &perr) == 0;
                bool can = (shim && attach) || remote;
                char pool[320];

                if (!ctx->cfg.pool_size)
                        snprintf(pool, sizeof(pool),
                                 "off (DEMESNE_POOL=0): every sandbox_script makes its "
                                 "container");
                else if (!can)
                        snprintf(pool, sizeof(pool),
                                 "unavailable: it needs demesne-shim on a local engine, or OpenSandbox with "
                                 "DEMESNE_SHIM=off");
                else if (remote)
                        snprintf(pool, sizeof(pool),
                                 "demesne serve keeps %lld idle python sandbox(es) on the server for sandbox_script "
                                 "runs without host inputs and with the default egress (%s)",
                                 (long long)ctx->cfg.pool_size, dm_egress_default(ctx));
                else
                        snprintf(pool, sizeof(pool),
                                 "demesne serve keeps %lld started python container(s) for sandbox_script runs "
                                 "without host inputs, once the python image is built",
                                 (long long)ctx->cfg.pool_size);
                feature(t, ctx->cfg.pool_size && can, "warm pool (DEMESNE_POOL)", pool);
        }
}

/* Prints s as the body of a JSON string, which is also a TOML basic string:
 * quotes and backslashes escaped, control characters as \u00XX. */
static void json_str(const char *s)
{
        for (; *s; s++) {
                if ((unsigned char)*s < 0x20 || *s == 0x7f) {
                        printf("\\u%04x", (unsigned char)*s);
                        continue;
                }
                if (*s == '"' || *s == '\\')
                        putchar('\\');
                putchar(*s);
        }
}

/* Single-quoted for a POSIX shell. */
static void sh_str(const char *s)
{
        putchar('\'');
        for (; *s; s++)
                fputs(*s == '\'' ? "'\\''" : (char[]){ *s, 0 }, stdout);
        putchar('\'');
}

/* The variables that are set, as JSON members or TOML inline-table entries
 * (json: quoted keys and ':'); false when none is set. */
#define N_ENV 13

static bool print_env(const char *open, bool json, const char *const names[N_ENV], const char *const vals[N_ENV])
{
        bool any = false;

        for (int i = 0; i < N_ENV; i++)
                if (vals[i]) {
                        fputs(any ? ", " : open, stdout);
                        printf(json ? "\"%s\": \"" : "%s = \"", names[i]);
                        json_str(vals[i]);
                        putchar('"');
                        any = true;
                }
        return any;
}

void dm_doctor_client_config(const struct dm_context *ctx)
{
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        /* What makes the client's server this one: the same engine (and so
         * this user's image store) and the same operator choices. */
        const char *names[N_ENV] = {
                "DOCKER_HOST",
                "DEMESNE_ALLOWED_PATHS",
                "DEMESNE_OUTPUT_ROOT",
                "DEMESNE_ALLOW_CALLER_EGRESS",
                "DEMESNE_HOST_MCP",
                "DEMESNE_BACKEND",
                "DEMESNE_SHIM",
                "DEMESNE_OPENSANDBOX_EGRESS",
                "OPEN_SANDBOX_DOMAIN",
                "OPEN_SANDBOX_PROTOCOL",
                "OPEN_SANDBOX_API_KEY",
                "OPEN_SANDBOX_USE_SERVER_PROXY",
                "DEMESNE_OPENSANDBOX_POOL_REF",
        };
        /* The engine as the environment names it (discovery may have found
         * it otherwise); the rest as the settings read them, when given.
         * OpenSandbox needs its server, its key and DEMESNE_SHIM=off (it
         * cannot host the shim, and refuses every call without). */
        const struct dm_engine_env *e = &ctx->cfg.engine_env;
        bool osb = dm_backend_is_opensandbox(ctx->cfg.backend, e);
        const char *docker_host = e->docker_host;
        const char *vals[N_ENV] = {
                !osb && docker_host && *docker_host ? docker_host : NULL,
                ctx->cfg.allowed_paths[0] ? ctx->cfg.allowed_paths : NULL,
                ctx->cfg.output_root_given ? ctx->cfg.output_root : NULL,
                ctx->cfg.allow_caller_egress ? "1" : NULL,
                ctx->cfg.host_mcp,
                ctx->cfg.backend && *ctx->cfg.backend ? ctx->cfg.backend : NULL,
                ctx->cfg.shim_off || osb ? "off" : NULL,
                osb && ctx->cfg.opensandbox_egress && *ctx->cfg.opensandbox_egress ? ctx->cfg.opensandbox_egress : NULL,
                osb && e->osb_domain && *e->osb_domain ? e->osb_domain : NULL,
                osb && e->osb_protocol && *e->osb_protocol ? e->osb_protocol : NULL,
                osb && e->osb_api_key && *e->osb_api_key ? e->osb_api_key : NULL,
                osb && e->osb_use_server_proxy && *e->osb_use_server_proxy ? e->osb_use_server_proxy : NULL,
                osb && e->osb_pool_ref && *e->osb_pool_ref ? e->osb_pool_ref : NULL,
        };

        if (n <= 0)
                snprintf(self, sizeof(self), "demesne");
        else
                self[n] = '\0';
        puts("\nclient configuration (logs: add --log-file PATH after `serve` to keep them; clients often hide "
             "stderr)");
        puts("\n# Claude Code:");
        printf("claude mcp add demesne");
        for (int i = 0; i < N_ENV; i++)
                if (vals[i]) {
                        printf(" -e %s=", names[i]);
                        sh_str(vals[i]);
                }
        printf(" -- ");
        sh_str(self);
        puts(" serve");
        puts("\n# .mcp.json (Claude Code project scope), ~/.cursor/mcp.json (Cursor):");
        printf("{\"mcpServers\": {\"demesne\": {\"command\": \"");
        json_str(self);
        printf("\", \"args\": [\"serve\"]");
        puts(print_env(", \"env\": {", true, names, vals) ? "}}}}" : "}}}");
        puts("\n# Codex (~/.codex/config.toml):");
        puts("[mcp_servers.demesne]");
        printf("command = \"");
        json_str(self);
        puts("\"\nargs = [\"serve\"]");
        if (print_env("env = { ", false, names, vals))
                puts(" }");
}
