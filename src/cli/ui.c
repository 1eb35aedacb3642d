/* SPDX-License-Identifier: MIT */
/* `demesne ui`: the command, who may look (login code, session cookie,
 * bearer token, Host and Origin), and the page's own files. The API is in
 * ui-api.c. */
#include "config.h"
#include "src/cli/ui.h"

#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/core/settings.h"
#include "src/mcp/http-guard.h"
#include "src/mcp/http-token.h"
#include "src/mcp/http.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/paths.h"
#include "src/basic/uri.h"

#define COOKIE "demesne_ui"
#define MAX_SESSIONS 32 /* browsers logged in at once; the oldest goes first */

static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                          "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct ui {
        struct ui_paths paths;
        const char *ui_dir;
        struct dm_mcphttp_tokens tokens;
        char *token_path;
        struct stat token_st;
        char bind_host[64];
        const char *hosts[5];
        char origins[4][96];
        pthread_mutex_t lock;
        char code[33]; /* the one-time login code; "" once used */
        char sessions[MAX_SESSIONS][65];
        size_t next_session;
        bool embedded; /* in serve --http: Host checked there, Origin is http://<Host> */
};

enum MHD_Result dm_ui_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r)
{
        enum MHD_Result ret;

        if (!r)
                return MHD_NO;
        MHD_add_response_header(r, "Content-Security-Policy", csp);
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
        MHD_add_response_header(r, "X-Frame-Options", "DENY");
        MHD_add_response_header(r, "Cross-Origin-Resource-Policy", "same-origin");
        MHD_add_response_header(r, "Cache-Control", "no-store");
        ret = MHD_queue_response(c, status, r);
        MHD_destroy_response(r);
        return ret;
}

enum MHD_Result dm_ui_json(struct MHD_Connection *c, unsigned status, json_object *v)
{
        const char *text = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
        enum MHD_Result ret;

        if (r)
                MHD_add_response_header(r, "Content-Type", "application/json");
        ret = dm_ui_queue(c, status, r);
        json_object_put(v);
        return ret;
}

enum MHD_Result dm_ui_error(struct MHD_Connection *c, unsigned status, const char *msg)
{
        json_object *o = json_object_new_object();

        json_object_object_add(o, "error", json_object_new_string(msg));
        return dm_ui_json(c, status, o);
}

/* ---- who may look ---------------------------------------------------------------------- */

static bool secret_in(const char *given, char (*set)[65], size_t n)
{
        bool hit = false;

        for (size_t i = 0; i < n; i++)
                hit |= set[i][0] && dm_mcphttp_secret_equal(given, strlen(given), set[i], strlen(set[i]));
        return hit;
}

static bool authorised(struct ui *u, struct MHD_Connection *c)
{
        const char *cookie = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, COOKIE);
        const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        bool hit = false;

        if (auth && dm_mcphttp_bearer_match(auth, &u->tokens))
                return true;
        if (cookie && strlen(cookie) == 64) {
                pthread_mutex_lock(&u->lock);
                hit = secret_in(cookie, u->sessions, MAX_SESSIONS);
                pthread_mutex_unlock(&u->lock);
        }
        return hit;
}

/* GET /ui/login?code=C: the code works once; it becomes a session. */
static enum MHD_Result login(struct ui *u, struct MHD_Connection *c)
{
        const char *code = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "code");
        char secret[65], cookie[160];
        struct MHD_Response *r;
        bool hit;

        pthread_mutex_lock(&u->lock);
        hit = code && u->code[0] && dm_mcphttp_secret_equal(code, strlen(code), u->code, strlen(u->code));
        if (hit && dm_mcphttp_token_generate(secret) == 0) {
                explicit_bzero(u->code, sizeof(u->code));
                snprintf(u->sessions[u->next_session], sizeof(u->sessions[0]), "%s", secret);
                u->next_session = (u->next_session + 1) % MAX_SESSIONS;
        } else {
                hit = false;
        }
        pthread_mutex_unlock(&u->lock);
        if (!hit)
                return dm_ui_error(c, MHD_HTTP_UNAUTHORIZED,
                                   "this login code is wrong or was used already: start `demesne ui` again for a new "
                                   "one, or send the bearer token");
        snprintf(cookie, sizeof(cookie), COOKIE "=%s; HttpOnly; SameSite=Strict; Path=/ui/", secret);
        explicit_bzero(secret, sizeof(secret));
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Set-Cookie", cookie);
        MHD_add_response_header(r, "Location", "/ui/");
        explicit_bzero(cookie, sizeof(cookie));
        log_info("ui: a browser logged in with the code");
        return dm_ui_queue(c, MHD_HTTP_SEE_OTHER, r);
}

/* POST /ui/api/v1/logout: the cookie's session ends. */
static enum MHD_Result logout(struct ui *u, struct MHD_Connection *c)
{
        const char *cookie = MHD_lookup_connection_value(c, MHD_COOKIE_KIND, COOKIE);
        struct MHD_Response *r;

        pthread_mutex_lock(&u->lock);
        for (size_t i = 0; cookie && i < MAX_SESSIONS; i++)
                if (u->sessions[i][0] && strcmp(cookie, u->sessions[i]) == 0)
                        explicit_bzero(u->sessions[i], sizeof(u->sessions[i]));
        pthread_mutex_unlock(&u->lock);
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        MHD_add_response_header(r, "Set-Cookie", COOKIE "=; HttpOnly; SameSite=Strict; Path=/ui/; Max-Age=0");
        return dm_ui_queue(c, MHD_HTTP_NO_CONTENT, r);
}

/* Host must name this server (DNS rebinding); an Origin, when sent, must
 * be the page's own; a state-changing request must send it. */
static const char *refused(struct ui *u, struct MHD_Connection *c, bool changes)
{
        const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
        const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
        bool own = false;

        if (!host || (!u->embedded && !dm_mcphttp_host_allowed(host, u->hosts)))
                return "the Host header does not name this server";
        for (size_t i = 0; origin && i < DM_ARRAY_SIZE(u->origins); i++)
                own |= u->origins[i][0] && strcmp(origin, u->origins[i]) == 0;
        if (u->embedded && origin)
                own = strncmp(origin, "http://", 7) == 0 && strcmp(origin + 7, host) == 0;
        if (origin && !own)
                return "a request from another origin is refused";
        if (changes && !origin)
                return "a request that changes something must carry the page's Origin";
        return NULL;
}

/* ---- the page's files ------------------------------------------------------------------ */

static enum MHD_Result page_file(struct ui *u, struct MHD_Connection *c, const char *name)
{
        static const char *const files[] = { "index.html", "app.js", "app.css" };
        _cleanup_close_ int dfd = dm_io_open_dir(u->ui_dir);
        _cleanup_free_ char *text = NULL;
        struct MHD_Response *r;
        size_t len;

        for (size_t i = 0; i < DM_ARRAY_SIZE(files); i++) {
                char type[64];

                if (strcmp(name, files[i]) != 0)
                        continue;
                if (dfd < 0 || dm_io_read_capped(dfd, name, 1 << 20, &text, &len) < 0)
                        return dm_ui_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "the page's files are not installed");
                r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_COPY);
                snprintf(type, sizeof(type), "%s; charset=utf-8", dm_mime_type(name));
                if (r)
                        MHD_add_response_header(r, "Content-Type", type);
                return dm_ui_queue(c, MHD_HTTP_OK, r);
        }
        return dm_ui_error(c, MHD_HTTP_NOT_FOUND, "no such page");
}

enum MHD_Result dm_ui_handle(struct ui *u, struct MHD_Connection *c, const char *url, const char *method,
                             size_t *upload_size, void **con_cls, bool bearer_ok)
{
        static int started;
        bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        bool changes = strcmp(method, "POST") == 0 || strcmp(method, "DELETE") == 0;
        const char *why;
        enum MHD_Result ret;

        if (!*con_cls) {
                *con_cls = &started;
                return MHD_YES;
        }
        if (*upload_size) {
                *upload_size = 0; /* no endpoint reads a body */
                return MHD_YES;
        }
        if (!get && !changes)
                return dm_ui_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
        if ((why = refused(u, c, changes)))
                return dm_ui_error(c, MHD_HTTP_FORBIDDEN, why);
        if (get && strcmp(url, "/ui/login") == 0)
                return login(u, c);
        if (!bearer_ok && !authorised(u, c))
                return dm_ui_error(c, MHD_HTTP_UNAUTHORIZED,
                                   "log in with the URL `demesne ui` printed, or send 'Authorization: Bearer TOKEN'");
        if (changes && strcmp(method, "POST") == 0 && strcmp(url, "/ui/api/v1/logout") == 0)
                return logout(u, c);
        if (strncmp(url, "/ui/api/v1/", 11) == 0 && dm_ui_api(&u->paths, c, method, url + 11, &ret))
                return ret;
        if (changes)
                return dm_ui_error(c, MHD_HTTP_NOT_FOUND, "nothing to change here");
        if (strcmp(url, "/ui/") == 0)
                return page_file(u, c, "index.html");
        if (strncmp(url, "/ui/", 4) == 0 && !strchr(url + 4, '/'))
                return page_file(u, c, url + 4);
        return dm_ui_error(c, MHD_HTTP_NOT_FOUND, "no such page");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size, void **con_cls)
{
        (void)version;
        (void)upload_data;
        return dm_ui_handle(cls, c, url, method, upload_size, con_cls, false);
}

/* ---- inside serve --http ---------------------------------------------------------------- */

int dm_ui_embed_new(const struct ui_paths *p, const char *ui_dir, struct ui **ret, struct dm_error *err)
{
        struct ui *u = calloc(1, sizeof(*u));
        int r;

        if (!u)
                return dm_error_set(err, -ENOMEM, "out of memory");
        u->paths = *p;
        u->ui_dir = ui_dir ? ui_dir : DM_PKGDATADIR "/ui";
        u->embedded = true;
        pthread_mutex_init(&u->lock, NULL);
        if ((r = dm_mcphttp_random_id(u->code)) < 0) {
                free(u);
                return dm_error_set(err, r, "cannot make a login code: %s", strerror(-r));
        }
        *ret = u;
        return 0;
}

void dm_ui_embed_print(struct ui *u, const char *host, unsigned port)
{
        printf("demesne serve: the activity view: open http://%s:%u/ui/login?code=%s\n", host, port, u->code);
        fflush(stdout);
}

void dm_ui_free(struct ui *u)
{
        if (!u)
                return;
        explicit_bzero(u, sizeof(*u));
        free(u);
}

/* Paths are matched as sent: an id is plain [A-Za-z0-9._-], and a file
 * path is unescaped by the API itself, which refuses %00. */
static size_t keep_escaped(void *cls, struct MHD_Connection *c, char *s)
{
        (void)cls;
        (void)c;
        return strlen(s);
}

/* ---- the command ----------------------------------------------------------------------- */

static const char ui_usage[] =
        "Usage: demesne ui [--listen [ADDR:]PORT] [--allow-remote] [--ui-dir DIR]\n"
        "\n"
        "Serves the activity view: every run, sandbox, job and agent run of this user's\n"
        "demesne servers (their journals in the state directory), live, in a browser.\n"
        "It prints a URL with a one-time login code; the bearer token (DEMESNE_HTTP_TOKEN,\n"
        "DEMESNE_HTTP_TOKEN_FILE, or one made and written to the state directory) works too.\n"
        "\n"
        "Options:\n"
        "  --listen [ADDR:]PORT  where to listen (default 127.0.0.1:8765; port 0: any free one)\n"
        "  --allow-remote        listen on an address that is not loopback: the page shows every\n"
        "                        command and output, and plain HTTP carries the cookie and token\n"
        "                        in clear; put TLS in front of it\n"
        "  --ui-dir DIR          the page's files (default: DEMESNE_UI_DIR, else the installed ones)\n"
        "  -h, --help            this text\n"
        "\n"
        "See docs/reference/ui.md and docs/reference/activity-api.md.\n";

static int ui_token(struct ui *u, const struct dm_config *cfg, unsigned port, struct dm_error *err)
{
        char made[65], name[128];
        int r;

        if (cfg->http_token_file)
                return dm_mcphttp_read_tokens(cfg->http_token_file, &u->tokens, err);
        if (cfg->http_token)
                return dm_mcphttp_tokens_add(&u->tokens, "token", cfg->http_token, "DEMESNE_HTTP_TOKEN", 0, err);
        if ((r = dm_mcphttp_token_generate(made)) < 0)
                return dm_error_set(err, r, "cannot make a token: getrandom: %s", strerror(-r));
        r = dm_mcphttp_tokens_add(&u->tokens, "token", made, "a made token", 0, err);
        explicit_bzero(made, sizeof(made));
        snprintf(name, sizeof(name), "ui-%s-%u.token", u->bind_host, port);
        if (r >= 0 && (r = dm_mcphttp_token_write(cfg->state_dir, name, u->tokens.v[0].secret, &u->token_path,
                                                  &u->token_st, err)) >= 0)
                log_info("ui: bearer token in '%s'", u->token_path);
        return r;
}

static int ui_listen(struct ui *u, const char *spec, bool remote, unsigned *ret_port, struct dm_error *err)
{
        struct sockaddr_storage addr;
        socklen_t len;
        int r;

        r = dm_mcphttp_parse_listen(spec, &addr, &len, err);
        if (r < 0)
                return r;
        if (dm_mcphttp_addr_is_wildcard((struct sockaddr *)&addr))
                return dm_error_set(err, -EINVAL, "--listen %s: name one address, not every one", spec);
        if (!dm_mcphttp_addr_is_loopback((struct sockaddr *)&addr) && !remote)
                return dm_error_set(err, -EPERM,
                                    "--listen %s is not loopback: the page shows every command and its output, and "
                                    "plain HTTP carries the login cookie and token in clear; add --allow-remote if "
                                    "you mean it (with TLS in front)",
                                    spec);
        dm_mcphttp_addr_host((struct sockaddr *)&addr, u->bind_host, sizeof(u->bind_host));
        return dm_mcphttp_open_listener(&addr, len, spec, ret_port, err);
}

static void ui_names(struct ui *u, unsigned port)
{
        bool lo = strcmp(u->bind_host, "127.0.0.1") == 0 || strcmp(u->bind_host, "[::1]") == 0;

        u->hosts[0] = u->bind_host;
        u->hosts[1] = lo ? "localhost" : NULL;
        u->hosts[2] = lo ? "127.0.0.1" : NULL;
        u->hosts[3] = lo ? "[::1]" : NULL;
        for (size_t i = 0; i < 4; i++)
                if (u->hosts[i])
                        snprintf(u->origins[i], sizeof(u->origins[i]), "http://%s:%u", u->hosts[i], port);
}

static int ui_serve(struct ui *u, int fd, unsigned port)
{
        struct MHD_Daemon *d;
        sigset_t mask;
        int sig;

        d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
                                     MHD_USE_ITC | MHD_USE_ERROR_LOG,
                             0, NULL, NULL, on_request, u, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
                             64u, MHD_OPTION_PER_IP_CONNECTION_LIMIT, 48u, MHD_OPTION_CONNECTION_TIMEOUT, 60u,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 << 10), MHD_OPTION_UNESCAPE_CALLBACK,
                             keep_escaped, NULL, MHD_OPTION_END);
        if (!d) {
                log_error("ui: libmicrohttpd could not start");
                return 1;
        }
        printf("demesne ui: open http://%s:%u/ui/login?code=%s\n", u->bind_host, port, u->code);
        fflush(stdout);
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        sigwait(&mask, &sig);
        log_info("ui: signal %d, stopping", sig);
        dm_ui_api_stop();
        MHD_stop_daemon(d);
        return 0;
}

int dm_cli_ui(int argc, char **argv)
{
        static const struct option opts[] = { { "listen", required_argument, NULL, 'l' },
                                              { "allow-remote", no_argument, NULL, 'R' },
                                              { "ui-dir", required_argument, NULL, 'u' },
                                              { "help", no_argument, NULL, 'h' },
                                              { 0 } };
        static const char default_dir[] = DM_PKGDATADIR "/ui";
        const char *listen = "127.0.0.1:8765";
        struct ui u = { .ui_dir = default_dir, .lock = PTHREAD_MUTEX_INITIALIZER };
        struct dm_config cfg = { 0 };
        struct dm_error err = { 0 };
        bool remote = false;
        unsigned port = 0;
        sigset_t mask;
        int c, r, fd = -1;

        while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1)
                switch (c) {
                case 'l': listen = optarg; break;
                case 'R': remote = true; break;
                case 'u': u.ui_dir = optarg; break;
                case 'h': fputs(ui_usage, stdout); return 0;
                default: fputs(ui_usage, stderr); return 2;
                }
        if (optind < argc) {
                fprintf(stderr, "demesne ui: unexpected argument '%s'\n\n%s", argv[optind], ui_usage);
                return 2;
        }
        /* Every thread MHD starts inherits the mask: the signals come to sigwait. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);
        r = dm_config_load(&cfg, &err);
        if (r >= 0 && cfg.ui_dir && u.ui_dir == default_dir)
                u.ui_dir = cfg.ui_dir;
        if (r >= 0)
                r = dm_mkdir_p(cfg.state_dir, 0700, &err);
        if (r >= 0)
                r = fd = ui_listen(&u, listen, remote, &port, &err);
        if (r >= 0)
                r = ui_token(&u, &cfg, port, &err);
        if (r >= 0 && (r = dm_mcphttp_random_id(u.code)) < 0)
                dm_error_set(&err, r, "cannot make a login code: %s", strerror(-r));
        if (r < 0) {
                log_error("ui: %s", err.msg);
                if (fd >= 0)
                        close(fd);
                r = 1;
        } else {
                u.paths = (struct ui_paths){ .state_dir = cfg.state_dir, .output_root = cfg.output_root };
                ui_names(&u, port);
                r = ui_serve(&u, fd, port);
        }
        if (u.token_path)
                dm_mcphttp_token_remove(u.token_path, &u.token_st);
        free(u.token_path);
        dm_mcphttp_tokens_release(&u.tokens);
        explicit_bzero(u.sessions, sizeof(u.sessions));
        dm_config_release(&cfg);
        return r;
}
