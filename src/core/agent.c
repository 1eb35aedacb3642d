/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/agent.h"
#include "src/core/activity.h"
#include "src/core/budget.h"
#include "src/core/ownership.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/core/children.h"
#include "src/core/egress.h"
#include "src/core/images.h"
#include "src/core/ledger.h"
#include "src/core/runner.h"
#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/paths.h"

/* Where the run's own files (instructions, prompt, launcher) are mounted,
 * read-only. */
#define AGENT_DIR "/opt/demesne-agent"
/* A transcript line longer than this is not looked into for the answer. */
#define LINE_MAX_BYTES (16u << 20)

static const char default_preamble[] =
        "You are working non-interactively inside a disposable Linux sandbox that demesne started for this "
        "one task. Nobody will answer questions or approve anything: decide, act, check your work, and finish. "
        "Everything outside /out is thrown away when you stop.";

int dm_agent_provider_of(const char *model, enum dm_vendor *ret, struct dm_error *err)
{
        /* It goes into the launcher and Codex's config: letters, digits,
         * '.', '_', '-' only. */
        size_t len = strspn(model, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-");

        if (model[len] || len == 0 || len > 128)
                return dm_error_set(err, -EINVAL,
                                    "model '%.64s' is not a model name: use letters, digits, '.', '_' and '-' only",
                                    model);
        if (!strcmp(model, "sonnet") || !strcmp(model, "opus") || !strcmp(model, "haiku") ||
            !strncmp(model, "claude-", 7)) {
                *ret = DM_VENDOR_ANTHROPIC;
                return 0;
        }
        if (!strncmp(model, "gpt-", 4) || !strncmp(model, "codex-", 6) ||
            (model[0] == 'o' && model[1] >= '0' && model[1] <= '9')) {
                *ret = DM_VENDOR_OPENAI;
                return 0;
        }
        return dm_error_set(err, -EINVAL,
                            "unknown model '%s': use sonnet, opus, haiku or a claude-* id (Claude Code), or a gpt-*, "
                            "o* or codex-* id (Codex)",
                            model);
}

const char *dm_agent_login_file(const struct dm_config *cfg, enum dm_vendor provider)
{
        return provider == DM_VENDOR_ANTHROPIC ? cfg->claude_credentials : cfg->codex_auth;
}

const char *dm_agent_unavailable(const struct dm_config *cfg, enum dm_vendor provider)
{
        return dm_vendor_unavailable(provider, &cfg->vendor_env, dm_agent_login_file(cfg, provider));
}

/* The host's credential for provider, from what the settings read. */
static int cred_load(const struct dm_config *cfg, enum dm_vendor provider, struct dm_vendor_cred *ret,
                     struct dm_error *err)
{
        return dm_vendor_cred_load(provider, &cfg->vendor_env, dm_agent_login_file(cfg, provider), ret, err);
}

int dm_agent_pick_provider(const struct dm_config *cfg, const char *model, enum dm_vendor *ret, struct dm_error *err)
{
        const char *why;
        int r;

        if (model) {
                r = dm_agent_provider_of(model, ret, err);
                if (r < 0)
                        return r;
                why = dm_agent_unavailable(cfg, *ret);
                if (why)
                        return dm_error_set(err, -ENOENT, "model '%s' needs %s credentials on the host: %s", model,
                                            *ret == DM_VENDOR_ANTHROPIC ? "Anthropic (Claude Code)" : "OpenAI (Codex)",
                                            why);
                return 0;
        }
        if (!dm_agent_unavailable(cfg, DM_VENDOR_ANTHROPIC)) {
                *ret = DM_VENDOR_ANTHROPIC;
                return 0;
        }
        if (!dm_agent_unavailable(cfg, DM_VENDOR_OPENAI)) {
                *ret = DM_VENDOR_OPENAI;
                return 0;
        }
        return dm_error_set(err, -ENOENT, "no agent provider has credentials on the host: Claude Code: %s; Codex: %s",
                            dm_agent_unavailable(cfg, DM_VENDOR_ANTHROPIC),
                            dm_agent_unavailable(cfg, DM_VENDOR_OPENAI));
}

/* ---- the files the agent gets ----------------------------------------------- */

static int write_file(const char *path, const char *data, size_t len, struct dm_error *err)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);

        if (fd < 0 || dm_write_all(fd, data, len) < 0)
                return dm_error_set(err, -errno, "cannot write '%s': %s", path, strerror(errno));
        return 0;
}

static const char *egress_words(const struct dm_policy *p)
{
        switch (p ? p->mode : DM_EGRESS_NONE) {
        case DM_EGRESS_OPEN: return "open: you can reach the internet (not the host)";
        case DM_EGRESS_PACKAGE_MANAGERS:
                return "package registries only (npm, PyPI, Debian, Go), through the proxy in HTTP_PROXY";
        default: return "none: only your model's API is reachable; nothing can be downloaded";
        }
}

static void list_inputs(struct dm_buf *b, const char *const *paths)
{
        for (size_t i = 0; paths && paths[i]; i++) {
                const char *base = strrchr(paths[i], '/');

                dm_buf_printf(b, "  - /in/%s\n", base && base[1] ? base + 1 : paths[i]);
        }
}

/* CLAUDE.md / AGENTS.md: preamble, environment, definition of done, task. */
static int write_instructions(const char *path, const struct dm_agent_request *req, struct dm_error *err)
{
        struct dm_buf b;
        bool any_in = (req->files && req->files[0]) || (req->dirs && req->dirs[0]);
        int r;

        dm_buf_init(&b, 8u << 20);
        dm_buf_printf(&b, "# Instructions from demesne\n\n%s\n\n## Environment\n\n",
                      req->preamble && *req->preamble ? req->preamble : default_preamble);
        if (any_in) {
                dm_buf_printf(&b, "- Inputs, read-only, under /in:\n");
                list_inputs(&b, req->files);
                list_inputs(&b, req->dirs);
        } else
                dm_buf_printf(&b, "- There are no input files (/in is empty).\n");
        dm_buf_printf(&b,
                      "- /out is your working directory and the output directory: every file you write there is "
                      "kept on the host after you finish. Write nothing you do not mean to hand over.\n"
                      "- /workspace is scratch space, thrown away afterwards.\n"
                      "- Network: %s.\n"
                      "- You run as root in a container with no capabilities; you cannot install system packages "
                      "without network.\n\n",
                      egress_words(req->policy));
        dm_buf_printf(&b, "## Definition of done\n\nYou are done when all of these hold:\n\n");
        for (size_t i = 0; req->success_criteria && req->success_criteria[i]; i++)
                dm_buf_printf(&b, "- %s\n", req->success_criteria[i]);
        if (req->output_path)
                dm_buf_printf(&b, "- The deliverable is written to /out/%s%s%s%s.\n", req->output_path,
                              req->output_format ? " (format: " : "", req->output_format ? req->output_format : "",
                              req->output_format ? ")" : "");
        dm_buf_printf(&b, "- Your final message states the answer or outcome in a few sentences%s.\n\n",
                      req->research ? ", with the sources you used" : "");
        dm_buf_printf(&b, "## Task\n\n%s\n", req->prompt);
        r = b.data ? write_file(path, b.data, b.len, err) : dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_release(&b);
        return r;
}

/* The launcher, run with bash in the sandbox: instructions where the CLI
 * reads them, then the CLI in its JSON streaming mode with permission prompts
 * off (the sandbox is the boundary), the prompt on stdin. */
static int write_launcher(const char *path, enum dm_vendor provider, const char *model, struct dm_error *err)
{
        struct dm_buf b;
        int r;

        dm_buf_init(&b, 1u << 20);
        dm_buf_printf(&b, "# Written by demesne for one agent run.\nset -eu\nexport HOME=${HOME:-/root}\n");
        if (provider == DM_VENDOR_ANTHROPIC) {
                /* IS_SANDBOX: Claude Code refuses to skip permissions as root
                 * anywhere else. */
                dm_buf_printf(&b,
                              "mkdir -p \"$HOME/.claude\"\n"
                              "cp " AGENT_DIR "/instructions.md \"$HOME/.claude/CLAUDE.md\"\n"
                              "export IS_SANDBOX=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 "
                              "DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 "
                              "CLAUDE_CODE_MAX_RETRIES=${CLAUDE_CODE_MAX_RETRIES:-3} ENABLE_TOOL_SEARCH=false\n"
                              /* The nested endpoint, when the run has one:
                               * its tools as mcp__demesne__*, loaded at
                               * once (no tool search), allowed like every
                               * tool here. */
                              "set --\n"
                              "if [ -n \"${DEMESNE_MCP_URL:-}\" ]; then\n"
                              "  printf '{\"mcpServers\":{\"demesne\":{\"type\":\"http\",\"url\":\"%%s\","
                              "\"headers\":{\"Authorization\":\"Bearer %%s\"}}}}\\n' \"$DEMESNE_MCP_URL\" "
                              "\"$DEMESNE_MCP_TOKEN\" > \"$HOME/.claude/demesne-mcp.json\"\n"
                              "  set -- --mcp-config \"$HOME/.claude/demesne-mcp.json\"\n"
                              "fi\n"
                              "exec claude -p --output-format stream-json --verbose --dangerously-skip-permissions%s%s "
                              "\"$@\" < " AGENT_DIR "/prompt.txt\n",
                              model ? " --model " : "", model ? model : "");
        } else {
                dm_buf_printf(&b,
                              "export CODEX_HOME=\"$HOME/.codex\"\n"
                              "mkdir -p \"$CODEX_HOME\"\n"
                              /* Behind the remote listener: its CA with
                               * the image's roots, for Codex and what it
                               * runs. */
                              "if [ -n \"${DEMESNE_VENDOR_CA_FILE:-}\" ]; then\n"
                              "  { cat /etc/ssl/certs/ca-certificates.crt 2>/dev/null || true; "
                              "cat \"$DEMESNE_VENDOR_CA_FILE\"; } > \"$CODEX_HOME/ca.pem\"\n"
                              "  export SSL_CERT_FILE=\"$CODEX_HOME/ca.pem\" "
                              "CODEX_CA_CERTIFICATE=\"$CODEX_HOME/ca.pem\"\n"
                              "fi\n"
                              "cp " AGENT_DIR "/instructions.md \"$CODEX_HOME/AGENTS.md\"\n"
                              "cat > \"$CODEX_HOME/config.toml\" <<EOF\n"
                              "model_provider = \"demesne\"\n"
                              "%s%s%s"
                              "[features]\n"
                              "plugins = false\n"
                              /* Plain JSON bodies: below open egress the
                               * vendor proxy reads each request and refuses
                               * a compressed one (Codex compresses with a
                               * ChatGPT login). */
                              "enable_request_compression = false\n"
                              "[model_providers.demesne]\n"
                              "name = \"demesne vendor proxy\"\n"
                              "base_url = \"$OPENAI_BASE_URL\"\n"
                              "env_key = \"DEMESNE_VENDOR_TOKEN\"\n"
                              "wire_api = \"responses\"\n"
                              "EOF\n"
                              /* The nested endpoint, when the run has one:
                               * Streamable HTTP, the token from the
                               * environment; a child agent may take the
                               * run's whole time. */
                              "if [ -n \"${DEMESNE_MCP_URL:-}\" ]; then\n"
                              "cat >> \"$CODEX_HOME/config.toml\" <<EOF\n"
                              "[mcp_servers.demesne]\n"
                              "url = \"$DEMESNE_MCP_URL\"\n"
                              "bearer_token_env_var = \"DEMESNE_MCP_TOKEN\"\n"
                              "startup_timeout_sec = 30\n"
                              "tool_timeout_sec = 172800\n"
                              "EOF\n"
                              "fi\n"
                              "exec codex exec --json --dangerously-bypass-approvals-and-sandbox "
                              "--skip-git-repo-check -C /out - < " AGENT_DIR "/prompt.txt\n",
                              model ? "model = \"" : "", model ? model : "", model ? "\"\n" : "");
        }
        r = b.data ? write_file(path, b.data, b.len, err) : dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_release(&b);
        return r;
}

/* ---- the run ------------------------------------------------------------------ */

/* The tree's budget remembers what a request cost: the largest per-model
 * average of the run. */
static void note_request_cost(struct dm_budget_hold *h, const struct dm_vendor_usage *u)
{
        double most = 0;

        for (size_t i = 0; i < u->n_models; i++) {
                const struct dm_vendor_tokens *t = &u->models[i].tokens;

                if (t->requests > 0 && t->cost_usd / (double)t->requests > most)
                        most = t->cost_usd / (double)t->requests;
        }
        dm_budget_hold_note(h, most);
}

/* The proxy's final counts into the run's ledger entry (the run is the
 * output directory that holds usage_path), and what a request cost into
 * the tree's budget (h; may be NULL). */
static void ledger_usage(const struct dm_config *cfg, const char *usage_path, const struct dm_vendor_usage *usage,
                         struct dm_budget_hold *h)
{
        const char *output_root = cfg->output_root;
        char dir[PATH_MAX];
        char *slash;
        const char *run_id;
        json_object *o;
        struct dm_error err = { 0 };

        note_request_cost(h, usage);
        snprintf(dir, sizeof(dir), "%s", usage_path);
        if (!(slash = strrchr(dir, '/')))
                return;
        *slash = '\0';
        if (!(run_id = dm_path_basename(dir)) || !(o = dm_vendor_usage_json(usage)))
                return;
        if (dm_ledger_set_usage(output_root, run_id, o, &err) < 0)
                log_warning("run %s: %s", run_id, err.msg);
        json_object_put(o);
        /* The same figures into the run journal, for `demesne ui`. */
        dm_activity_record(cfg->state_dir, cfg->activity_days,
                           &(struct dm_activity_event){ .event = "usage",
                                                        .id = run_id,
                                                        .input_tokens = (int64_t)usage->total.input,
                                                        .output_tokens = (int64_t)usage->total.output,
                                                        .cost_usd = usage->total.cost_usd });
}

struct run_state {
        const struct dm_config *cfg;
        const struct dm_agent_request *req;
        enum dm_vendor provider;
        struct dm_vendor_cred cred;
        char token[65];
        struct dm_vendor_proxy *proxy;
        char usage_path[PATH_MAX];
        char live_path[PATH_MAX]; /* the ledger's copy of the figures, which accounting reads */
        double max_usd;           /* DEMESNE_AGENT_MAX_USD, or the run's reservation of the tree's */
        const char *cap_name;     /* which of the two, for the message */
        struct dm_cancel limit;   /* fired by the proxy at the spending cap: ends the run */
        /* The run's share of its tree's spend, which its claim reserved
         * (dm_run_request.spend): from the claim to the release. */
        struct dm_budget_hold *spend;
        struct dm_vendor_usage usage; /* the proxy's last figures, taken before the spend goes back */
        bool usage_taken;
        struct dm_activity_egress *journal; /* the vendor proxy's decisions, for the run journal */
        bool routed;                        /* behind the remote listener (req->remote) */
};

static void on_cap(void *userdata)
{
        struct run_state *st = userdata;

        dm_cancel_fire(&st->limit);
}

static char *env_entry(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *env_entry(const char *fmt, ...)
{
        va_list ap;
        char *s = NULL;

        va_start(ap, fmt);
        if (vasprintf(&s, fmt, ap) < 0)
                s = NULL;
        va_end(ap);
        return s;
}

/* Starts the run's vendor proxy (its output directory output_dir), bound
 * to bind, or serving listen_fd when > 0. */
static int proxy_start(struct run_state *st, const char *output_dir, const struct sockaddr_in *bind, int listen_fd,
                       struct dm_error *err)
{
        char log_path[PATH_MAX];
        /* DEMESNE_VENDOR_UPSTREAM_ANTHROPIC, _OPENAI (tests: a fixture). */
        const char *up = st->cfg->vendor_upstream[st->provider == DM_VENDOR_ANTHROPIC ? 0 : 1];
        int r;

        snprintf(st->usage_path, sizeof(st->usage_path), "%s/usage.json", output_dir);
        snprintf(log_path, sizeof(log_path), "%s/vendor.log", output_dir);
        /* The run's id is its output directory's name (its claim bound its
         * reservation to it): the live figures go to the ledger, where no
         * sandbox writes. */
        r = dm_ledger_live_path(st->cfg->output_root, dm_path_basename(output_dir), st->live_path,
                                sizeof(st->live_path), err);
        if (r < 0)
                return dm_error_wrap(err, "the run's live usage");
        /* The run's cap: DEMESNE_AGENT_MAX_USD, or less when that is what
         * its claim could reserve of its tree's. */
        if (st->spend && (st->max_usd <= 0 || dm_budget_hold_amount(st->spend) < st->max_usd)) {
                st->max_usd = dm_budget_hold_amount(st->spend);
                st->cap_name = "DEMESNE_TREE_MAX_USD, what was left of this tree's";
        }
        if (!st->journal)
                st->journal = dm_activity_egress_new(st->cfg->state_dir, st->cfg->activity_days,
                                                     dm_path_basename(output_dir));
        struct dm_vendor_conf conf = {
                .provider = st->provider,
                .bind = *bind,
                .listen_fd = listen_fd,
                .upstream = up,
                .token = st->token,
                .cred = st->cred,
                .usage_path = st->usage_path,
                .live_path = st->live_path,
                .log_path = log_path,
                .prices_path = st->cfg->prices, /* DEMESNE_PRICES; NULL: the installed table */
                .max_usd = st->max_usd,
                .cap_name = st->cap_name,
                /* What a request of this tree cost before: a small
                 * reservation is not passed by its first request. */
                .estimate_usd = dm_budget_hold_estimate(st->spend),
                .on_cap = on_cap,
                .cap_userdata = st,
                /* Below open, no server-side tool, MCP connector or URL
                 * fetch through the model API either. */
                .vendor_network = st->req->policy && st->req->policy->mode == DM_EGRESS_OPEN,
                .tally = dm_activity_egress_tally(st->journal),
        };
        r = dm_vendor_start(&conf, &st->proxy, err);
        return r < 0 ? dm_error_wrap(err, "start the vendor proxy") : 0;
}

static void env_free(char **env)
{
        for (size_t i = 0; env && env[i]; i++)
                free(env[i]);
        free(env);
}

/* The CLI's variables for the proxy at base (no trailing slash) on host,
 * followed by more's entries (taken; may be NULL). ca_file: the file in the
 * sandbox that verifies base's certificate, or NULL. */
static int proxy_env(const struct run_state *st, const char *base, const char *host, const char *ca_file, char **more,
                     char ***ret_env, struct dm_error *err)
{
        size_t n = 0, n_more = 0;
        char **env;

        while (more && more[n_more])
                n_more++;
        env = calloc(8 + n_more, sizeof(*env));
        if (!env) {
                env_free(more);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        if (st->provider == DM_VENDOR_ANTHROPIC) {
                env[n++] = env_entry("ANTHROPIC_BASE_URL=%s", base);
                env[n++] = env_entry("ANTHROPIC_API_KEY=%s", st->token);
        } else {
                env[n++] = env_entry("OPENAI_BASE_URL=%s/v1", base);
                env[n++] = env_entry("DEMESNE_VENDOR_TOKEN=%s", st->token);
        }
        /* Straight to the vendor proxy, never through the egress proxy. */
        env[n++] = env_entry("NO_PROXY=localhost,127.0.0.1,%s", host);
        env[n++] = env_entry("no_proxy=localhost,127.0.0.1,%s", host);
        /* Claude Code (Node) adds it to its roots; the launcher makes a
         * bundle of it for Codex (SSL_CERT_FILE, CODEX_CA_CERTIFICATE). */
        if (ca_file) {
                env[n++] = env_entry("NODE_EXTRA_CA_CERTS=%s", ca_file);
                env[n++] = env_entry("DEMESNE_VENDOR_CA_FILE=%s", ca_file);
        }
        for (size_t i = 0; i < n_more; i++)
                env[n++] = more[i];
        free(more);
        for (size_t i = 0; i < n; i++)
                if (!env[i]) {
                        for (size_t j = 0; j < n; j++)
                                free(env[j]);
                        free(env);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
        *ret_env = env;
        return 0;
}

/* The sandbox's network exists: the vendor proxy goes on its host side (or,
 * rootless, on its own loopback: net->vendor_fd). */
static int on_network(void *userdata, const struct dm_netlink *net, const char *output_dir, char ***ret_env,
                      struct dm_error *err)
{
        struct run_state *st = userdata;
        struct sockaddr_in bind = { .sin_family = AF_INET,
                                    .sin_port = htons(DM_EGRESS_VENDOR_PORT),
                                    .sin_addr.s_addr = net->host_addr };
        char ip[INET_ADDRSTRLEN], base[64];
        int r;

        r = proxy_start(st, output_dir, &bind, net->vendor_fd, err);
        if (r < 0)
                return r;
        inet_ntop(AF_INET, &net->host_addr, ip, sizeof(ip));
        snprintf(base, sizeof(base), "http://%s:%d", ip, DM_EGRESS_VENDOR_PORT);
        return proxy_env(st, base, ip, NULL, NULL, ret_env, err);
}

/* A remote sandbox (OpenSandbox) runs, its command not yet: the vendor
 * proxy goes on this host's loopback, routed by the run's token behind
 * the remote listener, and the CLI is pointed at the listener; then the
 * caller's own hook (the nested endpoint's), its variables after ours. */
static int remote_started(void *userdata, const char *run_id, int pid, char ***ret_env, struct dm_error *err)
{
        struct run_state *st = userdata;
        const struct dm_agent_remote *rm = st->req->remote;
        struct sockaddr_in lo = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) }, at;
        char outdir[PATH_MAX], **more = NULL;
        int r;

        *ret_env = NULL;
        snprintf(outdir, sizeof(outdir), "%s/%s", st->cfg->output_root, run_id);
        r = proxy_start(st, outdir, &lo, 0, err);
        if (r < 0)
                return r;
        dm_vendor_address(st->proxy, &at);
        r = rm->add(rm->userdata, st->token, &at, err);
        if (r < 0)
                return dm_error_wrap(err, "route the vendor proxy behind the remote listener");
        st->routed = true;
        if (st->req->on_started && (r = st->req->on_started(st->req->started_userdata, run_id, pid, &more, err)) < 0)
                return r;
        return proxy_env(st, rm->url, rm->host, rm->ca ? AGENT_DIR "/ca.pem" : NULL, more, ret_env, err);
}

/* dm_run_request.before_release: the proxy's figures into the ledger, and
 * what a request cost into the tree's budget, before the run's claim gives
 * its spend back (stopping the proxy later writes usage.json once more). */
static void take_usage(void *userdata)
{
        struct run_state *st = userdata;

        if (!st->proxy || st->usage_taken)
                return;
        dm_vendor_usage(st->proxy, &st->usage);
        ledger_usage(st->cfg, st->usage_path, &st->usage, st->spend);
        st->usage_taken = true;
}

/* Bytes of transcript looked through for the answer: a sandbox can make
 * its stdout.log as large (or sparse) as it likes. */
#define TRANSCRIPT_MAX_BYTES (1ull << 30)

struct answer_scan {
        enum dm_vendor provider;
        char *answer;
};

static int answer_line(void *userdata, char *line, size_t len)
{
        struct answer_scan *a = userdata;
        json_object *o, *v, *item;
        const char *type;

        if (len == 0 || line[0] != '{')
                return 0;
        o = json_tokener_parse(line);
        if (!o)
                return 0;
        type = json_object_object_get_ex(o, "type", &v) ? json_object_get_string(v) : "";
        if (a->provider == DM_VENDOR_ANTHROPIC && !strcmp(type, "result") &&
            json_object_object_get_ex(o, "result", &v) && json_object_is_type(v, json_type_string)) {
                free(a->answer);
                a->answer = strdup(json_object_get_string(v));
        } else if (a->provider == DM_VENDOR_OPENAI && !strcmp(type, "item.completed") &&
                   json_object_object_get_ex(o, "item", &item) && json_object_object_get_ex(item, "type", &v) &&
                   !strcmp(json_object_get_string(v), "agent_message") && json_object_object_get_ex(item, "text", &v)) {
                free(a->answer);
                a->answer = strdup(json_object_get_string(v));
        }
        json_object_put(o);
        return 0;
}

/* The last answer in the transcript: Claude Code's {"type":"result",
 * "result":...} line, or Codex's last item.completed agent_message. fd is
 * stdout.log as dm_io_open_beneath opened it; lines and total are capped. */
static char *final_answer(int fd, enum dm_vendor provider)
{
        struct answer_scan a = { .provider = provider };

        if (fd >= 0)
                dm_io_for_each_line(fd, LINE_MAX_BYTES, TRANSCRIPT_MAX_BYTES, answer_line, &a);
        return a.answer ? a.answer : strdup("");
}

/* The run's stdout.log, opened beneath the output directory (no link, no
 * FIFO, a regular file), and transcript.jsonl made a second name of that
 * very file: linked from the fd under a fresh name, then renamed over
 * whatever the sandbox put there (never followed). -errno when stdout.log
 * is not the server's file any more. */
static int open_transcript(int dirfd, const char *outdir)
{
        int fd = dm_io_open_beneath(dirfd, "stdout.log", O_RDONLY, 0);
        char tmp[64], proc[64];
        unsigned char rnd[6];

        if (fd < 0) {
                log_warning("%s/stdout.log: %s: no answer or transcript taken from it", outdir, dm_io_strerror(fd));
                return fd;
        }
        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                return fd;
        snprintf(tmp, sizeof(tmp), ".transcript.%02x%02x%02x%02x%02x%02x.tmp", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5]);
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
        if (linkat(AT_FDCWD, proc, dirfd, tmp, AT_SYMLINK_FOLLOW) < 0 ||
            renameat(dirfd, tmp, dirfd, "transcript.jsonl") < 0) {
                log_warning("cannot link %s/stdout.log to transcript.jsonl: %s", outdir, strerror(errno));
                unlinkat(dirfd, tmp, 0);
        }
        return fd;
}

static json_object *usage_json(const struct dm_vendor_usage *u)
{
        json_object *o = json_object_new_object(), *per = json_object_new_object();

        json_object_object_add(o, "input_tokens", json_object_new_int64((int64_t)u->total.input));
        json_object_object_add(o, "output_tokens", json_object_new_int64((int64_t)u->total.output));
        json_object_object_add(o, "cache_read_tokens", json_object_new_int64((int64_t)u->total.cache_read));
        json_object_object_add(o, "cache_write_tokens", json_object_new_int64((int64_t)u->total.cache_write));
        for (size_t i = 0; i < u->n_models; i++) {
                const struct dm_vendor_model_usage *m = &u->models[i];
                json_object *e = json_object_new_object();

                json_object_object_add(e, "input_tokens", json_object_new_int64((int64_t)m->tokens.input));
                json_object_object_add(e, "output_tokens", json_object_new_int64((int64_t)m->tokens.output));
                json_object_object_add(e, "cache_read_tokens", json_object_new_int64((int64_t)m->tokens.cache_read));
                json_object_object_add(e, "cache_write_tokens", json_object_new_int64((int64_t)m->tokens.cache_write));
                json_object_object_add(e, "requests", json_object_new_int64((int64_t)m->tokens.requests));
                json_object_object_add(e, "cost_usd", json_object_new_double(m->tokens.cost_usd));
                json_object_object_add(e, "priced", json_object_new_boolean(m->priced));
                json_object_object_add(per, m->model, e);
        }
        json_object_object_add(o, "per_model", per);
        return o;
}

/* output_path must stay inside /out: relative, or absolute under /out. */
static int check_output_path(const char *p, const char **ret_rel, struct dm_error *err)
{
        const char *rel = p;

        if (!strncmp(rel, "/out/", 5))
                rel += 5;
        if (!*rel || rel[0] == '/' || strlen(rel) > 1024)
                return dm_error_set(err, -EINVAL, "output_path '%s' must be a path inside /out (e.g. report.md)", p);
        for (const char *s = rel; *s;) {
                size_t len = strcspn(s, "/");

                if ((len == 2 && !strncmp(s, "..", 2)) || (len == 1 && s[0] == '.'))
                        return dm_error_set(err, -EINVAL, "output_path '%s' must not contain '.' or '..'", p);
                s += len;
                s += *s == '/';
        }
        *ret_rel = rel;
        return 0;
}

/* The run's own files in dir, mounted read-only at AGENT_DIR: its owner
 * (whose it is, for the sweep after a crash: dm_agent_sweep), the
 * instructions, the prompt and the launcher. */
static int write_run_files(struct dm_context *ctx, const char *dir, const struct dm_agent_request *req,
                           enum dm_vendor provider, struct dm_error *err)
{
        char path[PATH_MAX];
        int r;

        snprintf(path, sizeof(path), "%s/owner", dir);
        r = write_file(path, ctx->owner, strlen(ctx->owner), err);
        snprintf(path, sizeof(path), "%s/instructions.md", dir);
        if (r >= 0)
                r = write_instructions(path, req, err);
        if (r >= 0) {
                snprintf(path, sizeof(path), "%s/prompt.txt", dir);
                r = write_file(path, req->prompt, strlen(req->prompt), err);
        }
        if (r >= 0) {
                snprintf(path, sizeof(path), "%s/run.sh", dir);
                r = write_launcher(path, provider, req->model, err);
        }
        /* What verifies the remote listener's certificate in the sandbox. */
        if (r >= 0 && req->remote && req->remote->ca) {
                snprintf(path, sizeof(path), "%s/ca.pem", dir);
                r = write_file(path, req->remote->ca, strlen(req->remote->ca), err);
        }
        return r;
}

/* The run's own files (settings, prompt, run.sh), next to the output
 * directories: dir is made (*made set) and filled. */
static int agent_files(struct dm_context *ctx, const struct run_state *st, char *dir, size_t size, bool *made,
                       struct dm_error *err)
{
        unsigned char rnd[6];
        int r;

        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                return dm_error_set(err, -EIO, "no randomness for the run's files");
        snprintf(dir, size, "%s/.agents", ctx->cfg.output_root);
        r = dm_mkdir_p(dir, 0700, err);
        if (r < 0)
                return r;
        snprintf(dir, size, "%s/.agents/%02x%02x%02x%02x%02x%02x", ctx->cfg.output_root, rnd[0], rnd[1], rnd[2], rnd[3],
                 rnd[4], rnd[5]);
        if (mkdir(dir, 0755) < 0)
                return dm_error_set(err, -errno, "cannot create '%s': %s", dir, strerror(errno));
        *made = true;
        return write_run_files(ctx, dir, st->req, st->provider, err);
}

/* The CLI in its image, through the runner, with the run's files at
 * AGENT_DIR and the vendor proxy as its only network. */
static int agent_launch(struct dm_context *ctx, struct run_state *st, const char *dir, struct dm_run_result *run,
                        struct dm_error *err)
{
        const struct dm_agent_request *req = st->req;
        struct dm_mount mount = { .host = dir, .target = AGENT_DIR, .readonly = true };
        static const char *const argv[] = { "/bin/bash", AGENT_DIR "/run.sh", NULL };
        struct dm_backend *b;
        bool remote;
        int r;

        r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                return r;
        remote = !dm_backend_can(b, DM_CAP_HOST_NETNS);
        if (remote && !req->remote)
                return dm_error_set(err, -EOPNOTSUPP,
                                    "agent runs on this engine (OpenSandbox, no network namespace on this host) need "
                                    "a listener their sandboxes reach, for the vendor proxy: set "
                                    "DEMESNE_REMOTE_LISTEN=ADDR:PORT (an address of this host the sandboxes route "
                                    "to; TLS with DEMESNE_REMOTE_TLS_CERT and DEMESNE_REMOTE_TLS_KEY unless it is "
                                    "loopback)");
        struct dm_run_request rreq = {
                .image = st->provider == DM_VENDOR_ANTHROPIC ? "claude-code" : "codex",
                .argv = argv,
                .files = req->files,
                .dirs = req->dirs,
                .granted = req->granted,
                .timeout_s = req->timeout_s,
                .policy = req->policy,
                .cancel = req->cancel,
                .reserved = req->reserved,
                .on_output = req->on_output,
                .on_progress = req->on_progress,
                .on_message = req->on_message,
                .userdata = req->userdata,
                .kind = "agent",
                .mounts = &mount,
                .n_mounts = 1,
                .vendor_port = DM_EGRESS_VENDOR_PORT,
                .on_network = on_network,
                .network_userdata = st,
                .limit = &st->limit,
                .principal = req->principal,
                .job_id = req->job_id,
                .parent_run_id = req->parent_run_id,
                .ledger_kind = req->research ? "research" : "agent",
                .on_started = req->on_started,
                .started_userdata = req->started_userdata,
                .collect_later = true,
                .spend = &st->spend,
                .spend_usd = st->req->max_usd,
                .spend_root = req->nested,
                .before_release = take_usage,
                .release_userdata = st,
        };
        /* Remote: no network here to put the proxy in; it is reached
         * through the remote listener, which the sandbox's egress lets
         * through, and set up just before the CLI starts. */
        if (remote) {
                rreq.vendor_port = 0;
                rreq.on_network = NULL;
                rreq.on_started = remote_started;
                rreq.started_userdata = st;
                rreq.reach = req->remote->host;
        }
        return dm_run(ctx, &rreq, run, err);
}

/* The proxy stops (which writes usage.json a last time; its figures are
 * in the ledger already: take_usage); r becomes the cap's sentence when
 * the cap ended the run. */
static int agent_spent(struct run_state *st, int r, struct dm_error *err)
{
        double spent = 0;

        if (!st->proxy)
                return r;
        take_usage(st);
        /* Whether the proxy's refusal ended the CLI or the runner stopped
         * it, the run fails with the cap's sentence. */
        if (dm_vendor_cap_reached(st->proxy, &spent) && r != -ECANCELED)
                r = dm_error_set(err, -EDQUOT,
                                 "spending cap of $%.6g reached (%s): the agent was stopped after $%.4f of model "
                                 "use; usage in '%s'",
                                 st->max_usd, st->cap_name, spent, st->usage_path);
        if (st->routed)
                st->req->remote->remove(st->req->remote->userdata, st->token);
        st->routed = false;
        dm_vendor_stop(st->proxy);
        st->proxy = NULL;
        return r;
}

/* The result from the run: its figures, the CLI's final answer from its
 * event stream, whether output_path exists. */
static int agent_result(struct dm_context *ctx, const struct run_state *st, struct dm_run_result *run,
                        const struct dm_vendor_usage *usage, const char *out_rel, struct dm_agent_result *res,
                        struct dm_error *err)
{
        _cleanup_close_ int outfd = -1;

        res->run_id = TAKE_PTR(run->run_id);
        res->output_dir = TAKE_PTR(run->output_dir);
        res->exit_code = run->exit_code;
        res->timed_out = run->timed_out;
        res->cancelled = run->cancelled;
        res->duration_ms = run->duration_ms;
        res->stderr_text = TAKE_PTR(run->stderr_text);
        res->stderr_len = run->stderr_len;
        res->stderr_truncated = run->stderr_truncated;
        /* The CLI's event stream is the transcript. stdout.log, not
         * transcript.jsonl, is read: the server made that name. */
        outfd = dm_io_open_dir(res->output_dir);
        if (outfd >= 0) {
                _cleanup_close_ int fd = open_transcript(outfd, res->output_dir);

                res->result = final_answer(fd, st->provider);
        } else {
                res->result = strdup("");
        }
        res->usage = usage_json(usage);
        res->cost_usd = usage->total.cost_usd;
        res->max_usd = st->max_usd;
        /* What the server wrote after the run (transcript.jsonl, usage.json,
         * vendor.log) goes to the owner too. */
        dm_owner_return(ctx->cfg.output_root, res->output_dir);
        if (out_rel && outfd >= 0) {
                /* Through no link at any level of the relative path. */
                int fd = dm_io_open_beneath(outfd, out_rel, O_PATH, 0);

                res->output_exists = fd >= 0;
                if (fd >= 0)
                        close(fd);
        }
        return !res->result || !res->usage ? dm_error_set(err, -ENOMEM, "out of memory") : 0;
}

int dm_agent_cap_check(const struct dm_config *cfg, double max_usd, struct dm_error *err)
{
        if (max_usd <= 0 || cfg->agent_max_usd <= 0 || max_usd <= cfg->agent_max_usd)
                return 0;
        return dm_error_set(err, -EPERM,
                            "max_usd $%g is above this server's cap on one agent run's model spend "
                            "(DEMESNE_AGENT_MAX_USD=%g): ask for at most that, or its operator can raise it",
                            max_usd, cfg->agent_max_usd);
}

int dm_agent_run(struct dm_context *ctx, const struct dm_agent_request *req, struct dm_agent_result *res,
                 struct dm_error *err)
{
        struct run_state st = { .cfg = &ctx->cfg,
                                .req = req,
                                .max_usd = ctx->cfg.agent_max_usd,
                                .cap_name = "DEMESNE_AGENT_MAX_USD",
                                .limit = { .fd = -1 } };
        struct dm_run_result run = { 0 };
        char dir[PATH_MAX - 64];
        const char *out_rel = NULL;
        bool dir_made = false;
        int r;

        memset(res, 0, sizeof(*res));
        if (req->output_path && check_output_path(req->output_path, &out_rel, err) < 0)
                return -EINVAL;
        if (!req->max_usd_allowed && (r = dm_agent_cap_check(&ctx->cfg, req->max_usd, err)) < 0)
                return r;
        if (req->max_usd > 0) {
                st.max_usd = req->max_usd;
                st.cap_name = req->max_usd_allowed ? "the run's max_usd, allowed by the client's person"
                                                   : "the run's max_usd";
        }
        r = dm_agent_pick_provider(&ctx->cfg, req->model, &st.provider, err);
        if (r < 0)
                return r;
        r = cred_load(&ctx->cfg, st.provider, &st.cred, err);
        if (r < 0)
                return r;
        if (dm_cancel_init(&st.limit) < 0) {
                r = dm_error_set(err, -errno, "cannot make an eventfd: %s", strerror(errno));
                goto out;
        }
        res->provider = dm_vendor_name(st.provider);
        res->model = req->model ? req->model : "default";
        if (dm_vendor_token_new(st.token) < 0) {
                r = dm_error_set(err, -EIO, "no randomness for the run's token");
                goto out;
        }
        r = agent_files(ctx, &st, dir, sizeof(dir), &dir_made, err);
        if (r >= 0)
                r = agent_launch(ctx, &st, dir, &run, err);
        r = agent_spent(&st, r, err);
        if (r >= 0)
                r = agent_result(ctx, &st, &run, &st.usage, out_rel, res, err);
out:
        /* With what the server wrote after the run (collect_later). */
        if (res->run_id || run.run_id)
                dm_children_collect(ctx, res->run_id ? res->run_id : run.run_id);
        dm_vendor_usage_release(&st.usage);
        dm_activity_egress_free(st.journal); /* the proxy has stopped (agent_spent) */
        dm_run_result_release(&run);
        dm_vendor_cred_release(&st.cred);
        dm_cancel_release(&st.limit);
        explicit_bzero(st.token, sizeof(st.token));
        if (dir_made && dm_remove_tree(dir) < 0)
                log_warning("cannot remove '%s'", dir);
        if (r < 0)
                dm_agent_result_release(res);
        return r;
}

void dm_agent_result_release(struct dm_agent_result *res)
{
        free(res->run_id);
        free(res->output_dir);
        free(res->result);
        free(res->stderr_text);
        json_object_put(res->usage);
        memset(res, 0, sizeof(*res));
}

void dm_agent_sweep(struct dm_context *ctx)
{
        char dir[PATH_MAX - 512], path[PATH_MAX];
        DIR *d;
        struct dirent *de;
        size_t removed = 0;

        snprintf(dir, sizeof(dir), "%s/.agents", ctx->cfg.output_root);
        d = opendir(dir);
        if (!d)
                return;
        while ((de = readdir(d))) {
                char owner[128] = "";
                ssize_t n = -1;
                int fd;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s/owner", dir, de->d_name);
                fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0) {
                        n = read(fd, owner, sizeof(owner) - 1);
                        close(fd);
                }
                /* No owner file yet: a live server is making it. */
                if (n <= 0)
                        continue;
                owner[n] = '\0';
                if (!strcmp(owner, ctx->owner) || dm_owner_alive(owner, ctx->owner))
                        continue;
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                if (dm_remove_tree(path) == 0)
                        removed++;
        }
        closedir(d);
        if (removed)
                log_info("removed the files of %zu agent run(s) left by servers that are gone", removed);
}
