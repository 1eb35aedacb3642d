/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/doctor.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netpolicy/vendor.h"
#include "src/egress.h"
#include "src/images.h"
#include "src/launch.h"

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

/* Whether `prog` is an executable on PATH. */
static bool on_path(const char *prog)
{
        const char *path = getenv("PATH");
        char buf[PATH_MAX];

        for (const char *p = path ? path : "/usr/bin:/bin"; p && *p;) {
                const char *end = strchr(p, ':');
                size_t len = end ? (size_t)(end - p) : strlen(p);

                if (len && snprintf(buf, sizeof(buf), "%.*s/%s", (int)len, p, prog) < (int)sizeof(buf) &&
                    access(buf, X_OK) == 0)
                        return true;
                p = end ? end + 1 : NULL;
        }
        return false;
}

/* NULL when build.sh can build img here, else what is missing. */
static const char *why_unbuildable(const struct dm_image_info *img, char *buf, size_t size)
{
        const char *dir = dm_images_dir();
        char path[PATH_MAX];
        struct stat st;

        snprintf(path, sizeof(path), "%s/build.sh", dir ? dir : "");
        if (!dir || access(path, X_OK) < 0) {
                snprintf(buf, size, "the build script '%s' is missing (set DEMESNE_IMAGES_DIR)", path);
                return buf;
        }
        if (!strcmp(img->name, "base") && !on_path("mmdebstrap"))
                return "mmdebstrap is not on PATH (Debian: apt-get install mmdebstrap)";
        snprintf(path, sizeof(path), "%s/%s/npm/package.json", dir, img->name);
        if (stat(path, &st) == 0 && !on_path("npm"))
                return "npm is not on PATH (Debian: apt-get install npm)";
        return NULL;
}

void dm_doctor_images(struct dm_backend *b, bool autobuild_off, struct dm_doctor_tally *t)
{
        struct dm_error err = { 0 };
        char why_buf[PATH_MAX + 64];

        for (size_t i = 0; i < dm_images_count; i++) {
                const struct dm_image_info *img = &dm_images[i];
                bool exists = false;
                const char *why;

                if (!img->buildable)
                        continue;
                err.msg[0] = '\0';
                if (b->ops->image_exists(b, dm_image_ref(img), &exists, &err) < 0) {
                        printf("PROBLEM image %s: %s\n        fix: demesne images build %s\n", img->name, err.msg,
                               img->name);
                        t->problems++;
                } else if (exists) {
                        printf("ok      image %s: %s (in this user's engine store)\n", img->name, dm_image_ref(img));
                } else if (autobuild_off) {
                        printf("PROBLEM image %s: not built, and DEMESNE_IMAGES_AUTOBUILD=0\n        fix: demesne "
                               "images build %s\n",
                               img->name, img->name);
                        t->problems++;
                } else if ((why = why_unbuildable(img, why_buf, sizeof(why_buf))) != NULL) {
                        printf("PROBLEM image %s: not built, and it cannot be built here: %s\n", img->name, why);
                        t->problems++;
                } else {
                        /* Not a problem: the first call that names it builds it. */
                        printf("note    image %s: not built in this user's engine store yet (built on first use, "
                               "or now with `demesne images build %s`)\n",
                               img->name, img->name);
                }
        }
}

static void feature(struct dm_doctor_tally *t, bool good, const char *what, const char *detail)
{
        printf("%s %s: %s\n", good ? "feature" : "unavail", what, detail);
        t->unavailable += !good;
}

void dm_doctor_features(struct dm_context *ctx, struct dm_backend *b, struct dm_doctor_tally *t)
{
        const char *why_a = dm_vendor_unavailable(DM_VENDOR_ANTHROPIC);
        const char *why_o = dm_vendor_unavailable(DM_VENDOR_OPENAI);
        const char *egress = dm_egress_default(ctx);

        const char *no_net = NULL;
        char detail[1024], creds[512];

        /* dm_egress_default is what the server decides; its reasons, spelled out. */
        if (!strcmp(egress, "none"))
                no_net = geteuid() != 0 ? "demesne does not run as root (rootless egress is not there yet)"
                         : !b           ? "no engine"
                         : !(b->ops->caps & DM_CAP_HOST_NETNS) ? "the backend's containers are not on this host"
                                                               : "demesne-shim is off (DEMESNE_SHIM=off)";
        if (no_net) {
                snprintf(detail, sizeof(detail), "unavailable, egress is none: %s", no_net);
                feature(t, false, "egress package-managers, allowlist, open (and sandbox_research)", detail);
        } else {
                feature(t, true, "egress package-managers, allowlist, open (and sandbox_research)",
                        "available; default egress is package-managers");
        }
        if (why_a && why_o)
                snprintf(creds, sizeof(creds), "no vendor credential: Claude Code: %s; Codex: %s", why_a, why_o);
        else
                snprintf(creds, sizeof(creds), "%s%s%s", why_a ? "" : "Claude Code (Anthropic)",
                         !why_a && !why_o ? " and " : "", why_o ? "" : "Codex (OpenAI)");
        /* An agent reaches its vendor through a proxy on the sandbox's veth,
         * which dm_egress_start_vendor makes under the same conditions. */
        if (no_net) {
                snprintf(detail, sizeof(detail), "unavailable, the vendor proxy needs egress: %s (%s%s)", no_net,
                         why_a && why_o ? "" : "credential found: ", creds);
                feature(t, false, "agent tools (sandbox_agent, sandbox_research)", detail);
        } else if (why_a && why_o) {
                snprintf(detail, sizeof(detail), "unavailable, %s", creds);
                feature(t, false, "agent tools (sandbox_agent, sandbox_research)", detail);
        } else {
                snprintf(detail, sizeof(detail), "available with %s", creds);
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
                feature(t, dm_launch_use_shim(ctx, b), "seccomp filter (demesne-shim)",
                        dm_launch_use_shim(ctx, b) ? "on" : "off: the engine's default seccomp profile only");
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
static bool print_env(const char *open, bool json, const char *const names[2], const char *const vals[2])
{
        bool any = false;

        for (int i = 0; i < 2; i++)
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
        const char *allowed = getenv("DEMESNE_ALLOWED_PATHS"), *out = getenv("DEMESNE_OUTPUT_ROOT");
        const char *names[2] = { "DEMESNE_ALLOWED_PATHS", "DEMESNE_OUTPUT_ROOT" };
        const char *vals[2] = { allowed && *allowed ? allowed : NULL, out && *out ? out : NULL };
        (void)ctx;
        if (n <= 0)
                snprintf(self, sizeof(self), "demesne");
        else
                self[n] = '\0';
        puts("\nclient configuration (logs: add --log-file PATH after `serve` to keep them; clients often hide "
             "stderr)");
        puts("\n# Claude Code:");
        printf("claude mcp add demesne");
        for (int i = 0; i < 2; i++)
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
