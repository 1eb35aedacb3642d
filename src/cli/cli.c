/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/cli/cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netpolicy/link.h"
#include "netpolicy/policy.h"
#include "src/core/context.h"
#include "src/core/server.h"
#include "src/cli/doctor.h"
#include "src/cli/ui.h"
#include "src/core/control.h"
#include "src/core/egress.h"
#include "src/core/images.h"
#include "src/core/launch.h"
#include "src/basic/cancel.h"
#include "src/mcp/http-guard.h"
#include "src/mcp/http.h"
#include "src/mcp/server.h"
#include "src/mcp/stdio.h"
#include "src/mcp/registry.h"
#include "src/core/runner.h"
#include "src/core/sandbox.h"
#include "src/core/shimhost.h"
#include "src/tools/tools.h"
#include "src/basic/log.h"

/* Blocked in every thread so they arrive through sigwait/signalfd, where the
 * clean-up can run as ordinary code. Must happen before any thread starts. */
static void block_signals(sigset_t *mask)
{
        sigemptyset(mask);
        sigaddset(mask, SIGTERM);
        sigaddset(mask, SIGINT);
        sigaddset(mask, SIGHUP);
        pthread_sigmask(SIG_BLOCK, mask, NULL);
}

static int set_log_file(const char *cmd, const char *path)
{
        int r = dm_log_open_file(path);

        if (r < 0) {
                fprintf(stderr, "demesne %s: --log-file '%s': %s\n", cmd, path,
                        r == -ELOOP                    ? "is a symlink (not followed)"
                        : r == -EINVAL || r == -EISDIR ? "not a regular file"
                                                       : strerror(-r));
                return -1;
        }
        return 0;
}

static int set_log_level(const char *name)
{
        enum dm_log_level l;

        if (dm_log_level_parse(name, &l) < 0) {
                fprintf(stderr, "demesne: unknown log level '%s' (debug, info, warning, error)\n", name);
                return -1;
        }
        dm_log_set_level(l);
        return 0;
}

/* ---- serve ------------------------------------------------------------------ */

static const char serve_usage[] =
        "Usage: demesne serve [--log-level LEVEL] [--log-file PATH] [--http [ADDR:]PORT [HTTP OPTIONS]]\n"
        "\n"
        "Speaks MCP (JSON-RPC 2.0) in both protocol eras: 2025-06-18/2025-11-25\n"
        "(initialize) and 2026-07-28 (per-request _meta). Without --http, on stdin/stdout,\n"
        "one message per line; with --http, as Streamable HTTP at http://ADDR:PORT/mcp,\n"
        "and the activity view at /ui/ (its one-time login URL printed on stdout).\n"
        "Logs go to stderr, or with --log-file to that file (MCP clients often hide a\n"
        "server's stderr); stdout carries JSON-RPC only. Ends on stdin EOF (stdio), SIGTERM or SIGINT after "
        "cancelling\n"
        "every call and removing every container it made.\n"
        "\n"
        "  --log-level LEVEL          debug, info (default), warning or error\n"
        "  --log-file PATH            append the log to PATH (created 0600; a symlink\n"
        "                             is refused) instead of writing it to stderr\n"
        "  --http [ADDR:]PORT         serve over HTTP; ADDR is an IP address (default\n"
        "                             127.0.0.1, IPv6 as [::1]); port 0 takes a free port\n"
        "                             (the log says which)\n"
        "\n"
        "HTTP options:\n"
        "  --token-file FILE          clients send 'Authorization: Bearer TOKEN', TOKEN\n"
        "                             being a line of FILE (mode 600, 16+ characters);\n"
        "                             'NAME TOKEN' lines give several tokens, one\n"
        "                             principal each: it reads back only what its own\n"
        "                             calls made (run outputs served as MCP resources)\n"
        "                             and sees only its own sessions; without FILE (or\n"
        "                             DEMESNE_HTTP_TOKEN_FILE, DEMESNE_HTTP_TOKEN) the\n"
        "                             server makes one and logs the 0600 file it is in\n"
        "  --allowed-host NAME        accept this Host name too (repeatable; '*' = any);\n"
        "                             localhost, 127.0.0.1, [::1] and ADDR always are\n"
        "  --allowed-origin ORIGIN    let web pages from ORIGIN in, e.g.\n"
        "                             https://app.example (repeatable; '*' = any); pages\n"
        "                             served from an accepted host always may\n"
        "  --max-sessions N           sessions at once (64), then 503\n"
        "  --max-streams N            calls and GET streams in flight (64), then 429\n"
        "  --max-session-streams N    ... of one session (16)\n"
        "  --max-connections N        TCP connections (512); more are closed at once,\n"
        "                             and so are one address's past half of them\n"
        "  --max-connections-per-ip N calls at once from one client address (64);\n"
        "                             more wait their turn (up to --request-timeout,\n"
        "                             then 503 with Retry-After)\n"
        "  --session-idle-timeout S   end a session unused for S seconds (1800)\n"
        "  --request-timeout S        close a connection that has not sent a whole\n"
        "                             request within S seconds (30)\n";

static int push(const char ***v, size_t *n, const char *s);

static int parse_count(const char *opt, const char *arg, unsigned *ret)
{
        char *end;
        unsigned long v;

        errno = 0;
        v = strtoul(arg, &end, 10);
        if (errno || *end || arg[0] == '-' || v < 1 || v > 1000000) {
                fprintf(stderr, "demesne serve: %s wants a number from 1 to 1000000, not '%s'\n", opt, arg);
                return -1;
        }
        *ret = (unsigned)v;
        return 0;
}

/* serve's options into *http (its allowed hosts and origins malloc'd into
 * *hosts and *origins, NULL-terminated, for the caller to free): 0 to
 * serve, 1 when --help was answered, -1 on a usage error (said on stderr). */
static int serve_options(int argc, char **argv, struct dm_mcphttp_options *ret_http, const char ***hosts,
                         const char ***origins)
{
        enum {
                O_TOKEN = 256,
                O_HOST,
                O_ORIGIN,
                O_SESSIONS,
                O_STREAMS,
                O_SESSION_STREAMS,
                O_CONNS,
                O_CONNS_IP,
                O_IDLE,
                O_REQUEST_TIMEOUT
        };
        static const struct option opts[] = {
                { "log-level", required_argument, NULL, 'l' },
                { "log-file", required_argument, NULL, 'L' },
                { "http", required_argument, NULL, 'H' },
                { "token-file", required_argument, NULL, O_TOKEN },
                { "allowed-host", required_argument, NULL, O_HOST },
                { "allowed-origin", required_argument, NULL, O_ORIGIN },
                { "max-sessions", required_argument, NULL, O_SESSIONS },
                { "max-streams", required_argument, NULL, O_STREAMS },
                { "max-session-streams", required_argument, NULL, O_SESSION_STREAMS },
                { "max-connections", required_argument, NULL, O_CONNS },
                { "max-connections-per-ip", required_argument, NULL, O_CONNS_IP },
                { "session-idle-timeout", required_argument, NULL, O_IDLE },
                { "request-timeout", required_argument, NULL, O_REQUEST_TIMEOUT },
                { "help", no_argument, NULL, 'h' },
                { 0 },
        };
        struct dm_mcphttp_options http;
        size_t n_hosts = 0, n_origins = 0;
        bool http_only_option = false;
        struct dm_error err = { 0 };
        int c, r = 0;

        dm_mcphttp_options_init(&http);
        while (r == 0 && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
                http_only_option |= c >= O_TOKEN;
                switch (c) {
                case 'l': r = set_log_level(optarg); break;
                case 'L': r = set_log_file("serve", optarg); break;
                case 'H': http.listen = optarg; break;
                case O_TOKEN: http.token_file = optarg; break;
                case O_HOST: r = push(hosts, &n_hosts, optarg); break;
                case O_ORIGIN: r = push(origins, &n_origins, optarg); break;
                case O_SESSIONS: r = parse_count("--max-sessions", optarg, &http.max_sessions); break;
                case O_STREAMS: r = parse_count("--max-streams", optarg, &http.max_streams); break;
                case O_SESSION_STREAMS:
                        r = parse_count("--max-session-streams", optarg, &http.max_session_streams);
                        break;
                case O_CONNS: r = parse_count("--max-connections", optarg, &http.max_connections); break;
                case O_CONNS_IP:
                        r = parse_count("--max-connections-per-ip", optarg, &http.max_connections_per_ip);
                        break;
                case O_IDLE: r = parse_count("--session-idle-timeout", optarg, &http.session_idle_s); break;
                case O_REQUEST_TIMEOUT: r = parse_count("--request-timeout", optarg, &http.request_timeout_s); break;
                case 'h':
                        fputs(serve_usage, stdout);
                        r = 1;
                        break;
                default:
                        fputs(serve_usage, stderr);
                        r = -1;
                        break;
                }
        }
        if (r == 0 && optind < argc) {
                fprintf(stderr, "demesne serve: unexpected argument '%s'\n", argv[optind]);
                r = -1;
        }
        if (r == 0 && http_only_option && !http.listen) {
                fprintf(stderr, "demesne serve: HTTP options need --http [ADDR:]PORT\n");
                r = -1;
        }
        if (r == 0 && http.listen) {
                struct sockaddr_storage addr;
                socklen_t len;
                /* Caught here, before the engine is touched, as a usage error. */
                if (dm_mcphttp_parse_listen(http.listen, &addr, &len, &err) < 0) {
                        fprintf(stderr, "demesne serve: %s\n", err.msg);
                        r = -1;
                }
        }
        http.allowed_hosts = *hosts;
        http.allowed_origins = *origins;
        *ret_http = http;
        return r;
}

/* The activity view at /ui/ beside /mcp (src/cli/ui.h). */
static int ui_call(void *data, struct MHD_Connection *c, const char *url, const char *method, size_t *upload_size,
                   void **con_cls, bool bearer_ok)
{
        return dm_ui_handle(data, c, url, method, upload_size, con_cls, bearer_ok);
}

static void ui_ready(void *data, const char *host, unsigned port)
{
        if (host)
                dm_ui_embed_print(data, host, port);
        else
                dm_ui_api_stop();
}

static int serve_http(struct dm_context *ctx, struct dm_mcp_server *srv, struct dm_mcphttp_options *http,
                      struct dm_error *err)
{
        struct ui_paths paths = { .state_dir = ctx->cfg.state_dir, .output_root = ctx->cfg.output_root, .ctx = ctx };
        struct ui *ui = NULL;
        int r;

        http->max_message = (size_t)ctx->cfg.max_message;
        http->state_dir = ctx->cfg.state_dir;
        if (!http->token_file)
                http->token_file = ctx->cfg.http_token_file;
        if (!http->token_file)
                http->token = ctx->cfg.http_token;
        r = dm_ui_embed_new(&paths, ctx->cfg.ui_dir, &ui, err);
        if (r < 0)
                return r;
        http->ui = ui_call;
        http->ui_ready = ui_ready;
        http->ui_data = ui;
        log_info("output root '%s'", ctx->cfg.output_root);
        r = dm_mcp_http_serve(srv, http, err);
        dm_ui_free(ui);
        return r;
}

int dm_cli_serve(int argc, char **argv)
{
        struct dm_mcphttp_options http;
        const char **hosts = NULL, **origins = NULL;
        struct dm_context ctx;
        struct dm_tools_server *tools;
        struct dm_mcp_server *srv;
        struct dm_control *control = NULL;
        struct dm_error err = { 0 };
        sigset_t mask;
        bool served = false;
        int r, rc = 1;

        r = serve_options(argc, argv, &http, &hosts, &origins);
        if (r != 0) {
                free(hosts);
                free(origins);
                return r > 0 ? 0 : 2;
        }

        block_signals(&mask);
        if (dm_server_init(&ctx, &err) < 0) {
                log_error("%s", err.msg);
                goto out_args;
        }
        if (dm_tools_server_open(&ctx, &tools, &err) < 0) {
                log_error("%s", err.msg);
                goto out_server;
        }
        srv = dm_tools_server_mcp(tools);
        dm_server_start(&ctx, true, true);
        /* The activity view's cancel and destroy (src/core/control.h): a
         * server without it still serves, the view says it cannot act. */
        if (dm_control_start(&ctx, ctx.cfg.state_dir, &control, &err) < 0)
                log_warning("no control socket: %s", err.msg);
        if (http.listen) {
                r = serve_http(&ctx, srv, &http, &err);
                if (r < 0)
                        log_error("%s", err.msg);
        } else {
                log_info("serving MCP on stdio (output root '%s')", ctx.cfg.output_root);
                r = dm_mcp_stdio_serve(srv, STDIN_FILENO, STDOUT_FILENO, (size_t)ctx.cfg.max_message);
        }
        rc = r < 0 ? 1 : 0;
        served = true;
        dm_control_stop(control);
        dm_tools_server_close(tools);
out_server:
        dm_server_release(&ctx);
out_args:
        free(hosts);
        free(origins);
        if (served)
                log_info("stopped");
        return rc;
}

/* ---- run -------------------------------------------------------------------- */

static const char run_usage[] =
        "Usage: demesne run [OPTIONS] -- COMMAND [ARG...]\n"
        "\n"
        "Runs COMMAND (no shell; use `-- bash -c '...'` for one) in a fresh sandbox the\n"
        "way sandbox_script does, streams its output, and exits with its exit code\n"
        "(124 when it timed out).\n"
        "\n"
        "  -i, --image NAME     base, python (default), ...\n"
        "  -f, --file PATH      mount a host file read-only at /in/<basename> (repeatable)\n"
        "  -d, --dir PATH       mount a host directory read-only at /in/<basename> (repeatable)\n"
        "  -e, --env KEY=VALUE  set a variable for the command (repeatable)\n"
        "  -t, --timeout SECS   kill the command after SECS seconds (default 3600)\n"
        "      --egress MODE    none (the default: loopback only), package-managers (the\n"
        "                       package registries through the logging egress proxy) or open\n"
        "      --allow ENTRY    let the sandbox reach ENTRY too: host, *.host, host:port,\n"
        "                       CIDR or CIDR:port (repeatable; with --egress none, only these)\n"
        "  -q, --quiet          do not print where the output directory is\n"
        "      --log-file PATH  append demesne's own log lines there (created 0600, no\n"
        "                       symlink) instead of mixing them into the command's stderr\n"
        "\n"
        "Paths you name are mounted even when DEMESNE_ALLOWED_PATHS is unset; when it is\n"
        "set, they must lie inside it, as for MCP clients. --egress open and --allow need\n"
        "no DEMESNE_ALLOW_CALLER_EGRESS: the person at the terminal is the operator.\n";

struct run_signals {
        sigset_t mask;
        struct dm_cancel *cancel;
};

static void *run_signal_thread(void *arg)
{
        struct run_signals *rs = arg;
        int sig;

        if (sigwait(&rs->mask, &sig) == 0 && sig != SIGUSR1) {
                fprintf(stderr, "demesne: signal %d: stopping the command\n", sig);
                dm_cancel_fire(rs->cancel);
        }
        return NULL;
}

static int write_through(void *userdata, int stream, const char *data, size_t len)
{
        FILE *f = stream == 2 ? stderr : stdout;

        (void)userdata;
        fwrite(data, 1, len, f);
        fflush(f);
        return 0;
}

static int push(const char ***v, size_t *n, const char *s)
{
        const char **grown = realloc(*v, (*n + 2) * sizeof(**v));

        if (!grown)
                return -ENOMEM;
        grown[(*n)++] = s;
        grown[*n] = NULL;
        *v = grown;
        return 0;
}

/* demesne run's options. */
struct run_opts {
        const char **files, **dirs, **env, **allow;
        size_t n_files, n_dirs, n_env, n_allow;
        const char *image, *egress;
        long timeout;
        bool quiet;
};

static void run_opts_free(struct run_opts *o)
{
        free(o->files);
        free(o->dirs);
        free(o->env);
        free(o->allow);
}

/* -1: go on with the command at argv[optind]; else the exit code. */
static int run_parse(int argc, char **argv, struct run_opts *o)
{
        static const struct option opts[] = {
                { "image", required_argument, NULL, 'i' },
                { "file", required_argument, NULL, 'f' },
                { "dir", required_argument, NULL, 'd' },
                { "env", required_argument, NULL, 'e' },
                { "timeout", required_argument, NULL, 't' },
                { "egress", required_argument, NULL, 'E' },
                { "allow", required_argument, NULL, 'A' },
                { "quiet", no_argument, NULL, 'q' },
                { "log-file", required_argument, NULL, 'L' },
                { "help", no_argument, NULL, 'h' },
                { 0 },
        };
        char *end;
        int c;

        while ((c = getopt_long(argc, argv, "+i:f:d:e:t:qh", opts, NULL)) != -1) {
                switch (c) {
                case 'i': o->image = optarg; break;
                case 'f':
                        if (push(&o->files, &o->n_files, optarg) < 0)
                                return 1;
                        break;
                case 'd':
                        if (push(&o->dirs, &o->n_dirs, optarg) < 0)
                                return 1;
                        break;
                case 'e':
                        if (!strchr(optarg, '=') || optarg[0] == '=') {
                                fprintf(stderr, "demesne run: --env wants KEY=VALUE, not '%s'\n", optarg);
                                return 2;
                        }
                        if (push(&o->env, &o->n_env, optarg) < 0)
                                return 1;
                        break;
                case 't':
                        errno = 0;
                        o->timeout = strtol(optarg, &end, 10);
                        if (errno || *end || o->timeout < 1 || o->timeout > 172800) {
                                fprintf(stderr, "demesne run: --timeout wants seconds from 1 to 172800, not '%s'\n",
                                        optarg);
                                return 2;
                        }
                        break;
                case 'E': o->egress = optarg; break;
                case 'A':
                        if (push(&o->allow, &o->n_allow, optarg) < 0)
                                return 1;
                        break;
                case 'q': o->quiet = true; break;
                case 'L':
                        if (set_log_file("run", optarg) < 0)
                                return 2;
                        break;
                case 'h': fputs(run_usage, stdout); return 0;
                default: fputs(run_usage, stderr); return 2;
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "demesne run: no command given\n\n%s", run_usage);
                return 2;
        }
        return -1;
}

/* The command in a sandbox of a server made for it, with ^C as its
 * cancel; the exit code as the manual says (125 demesne's error, 124
 * timed out, 130 cancelled, else the command's). */
static int run_command(const struct run_opts *o, const char *const *command, struct dm_policy *policy)
{
        struct dm_context ctx;
        struct dm_error err = { 0 };
        struct dm_run_result res;
        struct dm_cancel cancel;
        struct run_signals rs;
        pthread_t sig_thread;
        int r, code;

        block_signals(&rs.mask);
        sigaddset(&rs.mask, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &rs.mask, NULL);
        if (dm_server_init(&ctx, &err) < 0) {
                log_error("%s", err.msg);
                return 1;
        }
        if (ctx.roots.n == 0 && !ctx.cfg.allowed_paths_given) {
                /* The person at the terminal names the paths: no allowlist
                 * needed. The refusals (output root, state dir, credential
                 * folders) stay. */
                struct dm_allowed_roots all = { 0 };

                if (dm_allowed_roots_parse("/", &all, &err) == 0) {
                        ctx.roots.roots = all.roots;
                        ctx.roots.n = all.n;
                }
        }
        dm_cancel_init(&cancel);
        rs.cancel = &cancel;
        pthread_create(&sig_thread, NULL, run_signal_thread, &rs);

        r = dm_run(&ctx,
                   &(struct dm_run_request){
                           .image = o->image,
                           .argv = command,
                           .files = o->files,
                           .dirs = o->dirs,
                           .env = o->env,
                           .timeout_s = o->timeout,
                           .policy = policy,
                           .cancel = &cancel,
                           .on_output = write_through,
                   },
                   &res, &err);
        if (r < 0 && r != -ECANCELED) {
                fprintf(stderr, "demesne run: %s\n", err.msg);
                code = 125;
        } else if (res.cancelled) {
                code = 130;
        } else if (res.timed_out) {
                fprintf(stderr, "demesne run: timed out after %ld s; the command was killed\n", o->timeout);
                code = 124;
        } else {
                code = res.exit_code;
        }
        if (r >= 0 && !o->quiet)
                fprintf(stderr, "demesne: output in %s\n", res.output_dir);
        if (r >= 0 || r == -ECANCELED)
                dm_run_result_release(&res);

        pthread_kill(sig_thread, SIGUSR1);
        pthread_join(sig_thread, NULL);
        dm_cancel_release(&cancel);
        dm_server_release(&ctx);
        return code;
}

int dm_cli_run(int argc, char **argv)
{
        struct run_opts o = { .image = "python", .egress = "none", .timeout = 3600 };
        struct dm_policy *policy = NULL;
        struct dm_error err = { 0 };
        int code = run_parse(argc, argv, &o);

        if (code >= 0) {
                run_opts_free(&o);
                return code;
        }
        /* Checked before anything starts: a bad mode or entry is a usage
         * error. The terminal's user may open the network or name entries
         * (DM_POLICY_CALLER_ALLOWED), as they may name any path. */
        if (dm_policy_parse(o.egress, o.allow, DM_POLICY_CALLER_ALLOWED, &policy, &err) < 0) {
                fprintf(stderr, "demesne run: %s\n", err.msg);
                code = 2;
        } else {
                code = run_command(&o, (const char *const *)(argv + optind), policy);
        }
        dm_policy_free(policy);
        run_opts_free(&o);
        return code;
}

/* ---- doctor ------------------------------------------------------------------ */

static int problems;

static void check(bool good, const char *what, const char *detail, const char *fix)
{
        printf("%s %s%s%s\n", good ? "ok     " : "PROBLEM", what, detail && *detail ? ": " : "", detail ? detail : "");
        if (!good) {
                problems++;
                if (fix)
                        printf("        fix: %s\n", fix);
        }
}

static void check_dir(const char *what, const char *path, unsigned mode)
{
        struct dm_error err = { 0 };
        char msg[2 * DM_ERROR_MSG_MAX];
        bool good = dm_mkdir_p(path, mode, &err) >= 0 && access(path, W_OK) == 0;

        snprintf(msg, sizeof(msg), "'%s'%s%s", path, good ? "" : " - ",
                 good         ? ""
                 : err.msg[0] ? err.msg
                              : strerror(errno));
        check(good, what, msg, "make it writable, or point the variable elsewhere");
}

/* Which seccomp mode is in force: demesne-shim's filter, or (DEMESNE_SHIM=off)
 * the engine's default profile alone. */
static void check_shim(struct dm_context *ctx)
{
        const char *bin = dm_shim_binary_find(ctx->cfg.shim_path);
        char detail[PATH_MAX + 200];
        struct dm_backend *b = NULL;
        struct dm_error err = { 0 };
        /* A backend whose sandboxes are elsewhere (OpenSandbox) keeps their
         * network itself: the shim's absence costs no egress mode there. */
        bool here = dm_context_backend(ctx, &b, &err) < 0 || dm_backend_can(b, DM_CAP_HOST_NETNS);

        if (ctx->cfg.shim_off) {
                check(true, "seccomp (DEMESNE_SHIM=off)",
                      here ? "demesne-shim is off: commands run under the engine's default seccomp profile only, "
                             "without demesne's filter (user namespaces, io_uring, setuid modes stay as the engine "
                             "allows); egress other than none is unavailable"
                           : "demesne-shim is off: commands run under the backend's own runtime and seccomp "
                             "profile, without demesne's filter; egress is as the 'egress modes' line says",
                      NULL);
                return;
        }
        /* The backend cannot host the shim: every call would be refused. */
        dm_error_clear(&err);
        if (b && dm_launch_shim_mode(ctx, b, &err) == -ENOTSUP) {
                check(false, "seccomp (demesne-shim)", err.msg,
                      "set DEMESNE_SHIM=off (in the client's configuration too), accepting the backend's own "
                      "seccomp profile");
                return;
        }
        if (!bin || access(bin, X_OK) < 0) {
                dm_error_clear(&err);
                dm_shim_binary_missing(bin, &err);
                check(false, "seccomp (demesne-shim)", err.msg,
                      "reinstall demesne or set DEMESNE_SHIM_PATH; DEMESNE_SHIM=off runs commands under the "
                      "engine's default profile only");
                return;
        }
        snprintf(detail, sizeof(detail),
                 "on: every command runs under demesne-shim's seccomp filter ('%s'), "
                 "in place of the engine's default profile for runs, on top of it for sandboxes",
                 bin);
        check(true, "seccomp (demesne-shim)", detail, NULL);
}

/* Whether a sandbox's root is the host's root, and why. */
static void check_userns(struct dm_context *ctx, struct dm_backend *b)
{
        static const char what[] = "sandboxes in a user namespace";
        struct dm_container_spec spec = { 0 };
        struct dm_launch_ids ids;
        struct dm_userns u = { 0 };
        struct dm_error err = { 0 };
        char detail[sizeof(u.detail) + 64];

        if (!b->ops->userns) {
                check(true, what, "not this machine's concern: the backend runs them elsewhere", NULL);
                return;
        }
        if (b->ops->userns(b, &u, &err) < 0 || dm_launch_userns(ctx, b, &spec, &ids, &err) < 0) {
                check(false, what, err.msg, NULL);
                return;
        }
        snprintf(detail, sizeof(detail), "%s: %s%s", u.kind == DM_USERNS_HOST_ROOT ? "no" : "yes", u.detail,
                 u.kind == DM_USERNS_HOST_ROOT ? " (allowed by DEMESNE_ALLOW_HOST_ROOT=1)" : "");
        check(true, what, detail, NULL);
}

/* The privileges, the egress package hosts and the sandboxes' subnet. */
static void doctor_network(struct dm_context *ctx)
{
        const char *pool_s = ctx->cfg.sandbox_subnet;
        struct dm_backend *nb = NULL;
        struct dm_error err = { 0 };
        struct dm_cidr pool;
        char hosts[2048] = "", detail[2300];
        size_t len = 0;
        /* A backend without a network namespace here (OpenSandbox) has no veth. */
        bool no_netns = dm_context_backend(ctx, &nb, &err) >= 0 && !dm_backend_can(nb, DM_CAP_HOST_NETNS);

        dm_error_clear(&err);
        check(true, geteuid() == 0 ? "privileges: running as root" : "privileges: rootless",
              geteuid() == 0
                      ? (no_netns ? "limits and egress are the backend's own, enforced by its server"
                                  : "memory and pids limits, and egress policies (a veth per sandbox), are available")
                      : "running as a normal user: egress policies and the vendor proxy use listeners in "
                        "each sandbox's own network namespace (no veth); see the 'feature'/'unavail' lines "
                        "for limits and agents",
              NULL);
        for (const char *const *h = dm_egress_package_hosts(); *h && len < sizeof(hosts) - 1; h++)
                len += (size_t)snprintf(hosts + len, sizeof(hosts) - len, "%s%s", len ? ", " : "", *h);
        check(true, "egress package-managers hosts (with each image's label demesne.package-hosts)", hosts, NULL);
        if (dm_cidr_parse(pool_s && *pool_s ? pool_s : DM_NETLINK_POOL_DEFAULT, &pool, &err) < 0 ||
            (geteuid() == 0 && dm_netlink_pool_check(&pool, &err) < 0)) {
                check(false, "sandbox subnet (DEMESNE_SANDBOX_SUBNET)", err.msg,
                      "choose a private range the host does not route");
        } else {
                snprintf(detail, sizeof(detail), "%s, no overlap with the host's routes",
                         pool_s && *pool_s ? pool_s : DM_NETLINK_POOL_DEFAULT);
                check(true, "sandbox subnet (DEMESNE_SANDBOX_SUBNET)", detail, NULL);
        }
}

/* The engine: what it is, its user namespaces, what this backend lacks,
 * the images. *ret_b NULL when there is none; -1 when it does not answer. */
static int doctor_engine(struct dm_context *ctx, struct dm_backend **ret_b, struct dm_doctor_tally *tally)
{
        static const struct {
                unsigned cap;
                const char *what;
        } lacks[] = {
                { DM_CAP_SHIM, "demesne-shim (commands go through the backend's exec; no demesne seccomp filter)" },
                { DM_CAP_ATTACH, "attach (sandbox_script runs as one exec in an idle sandbox)" },
                { DM_CAP_EXEC_STDIN, "stdin for commands (sandbox_exec refuses 'stdin': upload the input)" },
                { DM_CAP_HOST_NETNS, "a network namespace on this host (egress is none or the backend's own)" },
                { DM_CAP_IMAGES, "an image store demesne can ask (images are pulled by the server at create)" },
        };
        struct dm_error err = { 0 };
        struct dm_backend *b;
        char missing[1024] = "", *desc = NULL;
        size_t len = 0;

        *ret_b = NULL;
        if (dm_context_backend(ctx, &b, &err) < 0) {
                check(false, "container engine", err.msg,
                      "install Podman (apt-get install podman runc), or start one and set DOCKER_HOST");
                return 0;
        }
        if (b->ops->describe(b, &desc, &err) < 0) {
                check(false, "container engine", err.msg, "check the server's address and credentials");
                return -1;
        }
        *ret_b = b;
        check(true, "container engine", desc, NULL);
        free(desc);
        check_userns(ctx, b);
        for (size_t i = 0; i < sizeof(lacks) / sizeof(lacks[0]); i++)
                if (!(b->ops->caps & lacks[i].cap))
                        len += (size_t)snprintf(missing + len, len < sizeof(missing) ? sizeof(missing) - len : 0,
                                                "%s%s", len ? "; " : "", lacks[i].what);
        if (len)
                check(true, "what this backend lacks", missing, NULL);
        if (b->ops->caps & DM_CAP_IMAGES)
                dm_doctor_images(b, &ctx->cfg, tally);
        return 0;
}

/* The host tool proxy: each server started as serve would, its offer
 * counted, and stopped again (with a registry of its own for the tools
 * the servers offer, freed after the proxy is released). */
static void doctor_hostmcp(struct dm_context *ctx)
{
        struct dm_registry *reg = dm_registry_new();
        struct dm_hostmcp *h = NULL;
        struct dm_error err = { 0 };

        if (!reg)
                check(false, "host tool proxy", "out of memory", NULL);
        else if (dm_tools_hostmcp_open(ctx, reg, &h, &err) < 0) {
                check(false, "host tool proxy", err.msg, "fix the file DEMESNE_HOST_MCP names");
        } else {
                dm_tools_hostmcp_report(ctx, h, &problems);
                dm_tools_hostmcp_close(h);
        }
        dm_registry_free(reg);
}

int dm_cli_doctor(int argc, char **argv)
{
        struct dm_context ctx;
        struct dm_error err = { 0 };
        struct dm_backend *b = NULL;
        struct dm_doctor_tally tally = { 0 };
        sigset_t mask;

        if (argc > 1 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
                puts("Usage: demesne doctor\n\nNames the account and the engine mode, checks the container engine,\n"
                     "the images (built in this user's store, or buildable), the directories and the\n"
                     "privileges demesne needs, says how to fix each problem and which features\n"
                     "cannot work here and why ('unavail' lines), and ends with the client\n"
                     "configuration to paste (Claude Code, .mcp.json, Codex). Exit 0 when there is\n"
                     "no problem; log lines go to stderr.");
                return 0;
        }
        block_signals(&mask);
        dm_doctor_account();
        if (dm_server_init(&ctx, &err) < 0) {
                check(false, "configuration", err.msg, "fix the environment variable it names");
                return 1;
        }
        if (dm_context_backend(&ctx, &b, &err) < 0)
                b = NULL;
        dm_doctor_engine_mode(b);
        dm_error_clear(&err);
        check(true, "version", PACKAGE_VERSION, NULL);
        doctor_network(&ctx);
        check_dir("output root (DEMESNE_OUTPUT_ROOT)", ctx.cfg.output_root, 0700);
        check_dir("state directory (DEMESNE_STATE_DIR)", ctx.cfg.state_dir, 0755);
        check(true, "allowed host paths (DEMESNE_ALLOWED_PATHS)",
              ctx.roots.n ? ctx.cfg.allowed_paths : "none: MCP callers cannot mount host files", NULL);
        check_shim(&ctx);
        if (doctor_engine(&ctx, &b, &tally) < 0) {
                dm_server_release(&ctx);
                printf("some checks failed\n");
                return 1;
        }
        dm_doctor_features(&ctx, b, &tally);
        dm_doctor_snapshots(&ctx, b, &tally);
        doctor_hostmcp(&ctx);
        problems += tally.problems;
        dm_doctor_client_config(&ctx);
        dm_server_release(&ctx);
        if (!problems && tally.unavailable) {
                printf("\nno problems, but %d feature%s the tools advertise cannot work here (the 'unavail' lines)\n",
                       tally.unavailable, tally.unavailable == 1 ? "" : "s");
                return 0;
        }
        printf("\n%s\n", problems ? "some checks failed" : "all checks passed");
        return problems ? 1 : 0;
}

/* ---- images ------------------------------------------------------------------ */

static const char images_usage[] = "Usage: demesne images build [--force] [NAME...|--all]\n"
                                   "       demesne images list\n"
                                   "\n"
                                   "Images are built from Debian packages and npm packages with no container\n"
                                   "registry: base with mmdebstrap, the others on top of it (npm packages are\n"
                                   "fetched on the host against lock files). Each is tagged :latest and with a\n"
                                   "hash of its inputs; an image whose inputs did not change is not rebuilt\n"
                                   "unless --force is given. A tool call that names a missing image builds it.\n"
                                   "\n"
                                   "Images: base python node go browser media twine webgamedev claude-code codex\n"
                                   "`list` shows each image's reference, inputs tag, size and state (built,\n"
                                   "stale: why, or missing).\n";

static struct dm_cancel cli_cancel = { .fd = -1 };

static void cli_cancel_fire(int signo)
{
        (void)signo;
        dm_cancel_fire(&cli_cancel);
}

int dm_cli_images(int argc, char **argv)
{
        struct dm_error err = { 0 };
        struct dm_context ctx;
        char engine[16] = "", host[512] = "";
        sigset_t mask;

        if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
                fputs(images_usage, argc < 2 ? stderr : stdout);
                return argc < 2 ? 2 : 0;
        }
        if (strcmp(argv[1], "build") != 0 && strcmp(argv[1], "list") != 0) {
                fprintf(stderr, "demesne images: unknown subcommand '%s'\n\n%s", argv[1], images_usage);
                return 2;
        }
        /* Build with the engine the server talks to; with no engine up yet,
         * build.sh picks one itself (podman, else docker). */
        block_signals(&mask);
        if (dm_server_init(&ctx, &err) == 0) {
                struct dm_backend *b = NULL;

                if (dm_context_backend(&ctx, &b, &err) == 0)
                        dm_image_engine(b, engine, host, sizeof(host));
                dm_server_release(&ctx);
        }
        /* Ctrl-C stops the build (it runs in its own process group). */
        pthread_sigmask(SIG_UNBLOCK, &mask, NULL);
        if (dm_cancel_init(&cli_cancel) == 0) {
                signal(SIGINT, cli_cancel_fire);
                signal(SIGTERM, cli_cancel_fire);
                signal(SIGHUP, cli_cancel_fire);
        }
        if (strcmp(argv[1], "build") == 0) {
                const char **names = calloc((size_t)argc, sizeof(*names));
                bool force = false, all = false;
                size_t n = 0;
                int r;

                if (!names)
                        return 1;
                for (int i = 2; i < argc; i++) {
                        if (strcmp(argv[i], "--force") == 0)
                                force = true;
                        else if (strcmp(argv[i], "--all") == 0)
                                all = true;
                        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
                                fputs(images_usage, stdout);
                                free(names);
                                return 0;
                        } else if (argv[i][0] == '-') {
                                fprintf(stderr, "demesne images build: unknown option '%s'\n", argv[i]);
                                free(names);
                                return 2;
                        } else
                                names[n++] = argv[i];
                }
                if (!all && n == 0) {
                        fprintf(stderr, "demesne images build: name images or give --all\n");
                        free(names);
                        return 2;
                }
                r = dm_images_build(all ? NULL : names, force, engine[0] ? engine : NULL, host[0] ? host : NULL,
                                    &(struct dm_image_build_watch){ .cancel = &cli_cancel }, &err);
                free(names);
                if (r < 0) {
                        fprintf(stderr, "demesne images build: %s\n", err.msg);
                        return r == -EINVAL || r == -ENOTSUP ? 2 : r == -ECANCELED ? 130 : 1;
                }
        } else {
                char *out = NULL;
                char *line, *save = NULL;

                if (dm_images_list(engine[0] ? engine : NULL, host[0] ? host : NULL, &out, &err) < 0) {
                        fprintf(stderr, "demesne images list: %s\n", err.msg);
                        return 1;
                }
                printf("%-12s %-38s %-13s %9s  %s\n", "NAME", "REFERENCE", "INPUTS TAG", "SIZE", "STATE");
                for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                        char *f[5] = { 0 }, *p = line, size[32] = "-";
                        int k = 0;

                        for (; k < 5 && p; k++) {
                                f[k] = p;
                                p = strchr(p, '\t');
                                if (p)
                                        *p++ = '\0';
                        }
                        if (k < 5 || !f[4])
                                continue;
                        if (strcmp(f[3], "missing") != 0)
                                snprintf(size, sizeof(size), "%.0f MiB", strtod(f[4], NULL) / (1024.0 * 1024.0));
                        printf("%-12s %-38s %-13s %9s  %s\n", f[0], f[1], f[2], size, f[3]);
                }
                free(out);
        }
        return 0;
}
