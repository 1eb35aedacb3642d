/* SPDX-License-Identifier: MIT */
/* Nested sandboxes: a sandbox made with nested: true gets demesne's own
 * tools over Streamable HTTP at 127.0.0.1:3130 inside its own network
 * namespace (DEMESNE_MCP_URL), behind a bearer token of its own
 * (DEMESNE_MCP_TOKEN). The listening socket is made in the sandbox's
 * namespace (netpolicy/netns.h), so it is reachable from that sandbox only,
 * in every egress mode, rootful and rootless; the server serves it from its
 * own threads (src/mcp/http.c, dm_mcphttp_start).
 *
 * The endpoint's calls act for the principal "<maker>/<sandbox id>"
 * (src/basic/principal.h): they see and control only what they made and
 * what their children made. The rules for such callers are checked here:
 * egress no wider than the sandbox's own, no caller allow entries, no host
 * paths, the depth. The caps on live children and the whole tree are the
 * core's claim's (src/core/claim.h), which counts and reserves in one step.
 * Destroying a nested sandbox stops its endpoint, and the core's cascade
 * (src/core/cascade.h) closes its subtree to new work, cancels and waits
 * for what runs there, and destroys its subtree's sandboxes. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netpolicy/netns.h"
#include "src/basic/log.h"
#include "src/basic/principal.h"
#include "src/core/agent.h"
#include "src/core/cascade.h"
#include "src/core/egress.h"
#include "src/core/launch.h"
#include "src/core/sandbox.h"
#include "src/mcp/http-front.h"
#include "src/mcp/http-token.h"
#include "src/mcp/http.h"
#include "src/tools/server-internal.h"
#include "src/tools/tools.h"

#define NESTED_ADDR "127.0.0.1"
#define NESTED_PORT 3130

struct endpoint {
        char id[DM_SANDBOX_ID_LEN];       /* the sandbox it serves */
        char principal[DM_PRINCIPAL_MAX]; /* what its calls act for: "<maker>/<id>" */
        enum dm_egress egress;            /* the sandbox's own: its children's is no wider */
        int pid;                          /* the container's PID 1 whose network namespace it listens in; 0:
                                             a remote sandbox's, behind the remote listener */
        /* Made again by this server (reopen): commands get this token, not
         * the one the container was made with. */
        bool reopened;
        char token[65];
        uint64_t host_session; /* the host's MCP session that made it (asked for the tree); 0: none */
        struct dm_mcphttp *http;
        struct endpoint *next;
};

struct dm_nested {
        pthread_mutex_t lock;
        pthread_mutex_t reopen_lock; /* one reopen at a time: a second finds the first's */
        struct endpoint *head;
        struct dm_mcp_server *srv;       /* what the endpoints serve */
        struct dm_mcphttp_front *remote; /* DEMESNE_REMOTE_LISTEN's listener; NULL: none */
};

static const char *const egress_names[] = { "none", "package-managers", "open" };

/* The endpoint whose calls act for principal, unlinked when take. */
/* This server's endpoints, NULL before the tools server is open. */
static struct dm_nested *nested_of(const struct dm_context *ctx)
{
        return ctx->tools ? ctx->tools->nested : NULL;
}

/* The remote listener, NULL without DEMESNE_REMOTE_LISTEN. */
static struct dm_mcphttp_front *remote_of(const struct dm_context *ctx)
{
        struct dm_nested *n = nested_of(ctx);

        return n ? n->remote : NULL;
}

static struct endpoint *find_locked(struct dm_nested *n, const char *principal, const char *id, bool take)
{
        for (struct endpoint **p = &n->head; *p; p = &(*p)->next) {
                struct endpoint *e = *p;

                if ((principal && strcmp(e->principal, principal) == 0) || (id && strcmp(e->id, id) == 0)) {
                        if (take)
                                *p = e->next;
                        return e;
                }
        }
        return NULL;
}

/* The egress and the host session of the endpoint whose calls act for
 * principal: none and 0 when it is gone. */
static void endpoint_facts(struct dm_context *ctx, const char *principal, enum dm_egress *ret_egress,
                           uint64_t *ret_session)
{
        struct dm_nested *n = nested_of(ctx);
        struct endpoint *e;

        *ret_egress = DM_EGRESS_NONE;
        *ret_session = 0;
        if (!n)
                return;
        pthread_mutex_lock(&n->lock);
        e = find_locked(n, principal, NULL, false);
        if (e) {
                *ret_egress = e->egress;
                *ret_session = e->host_session;
        }
        pthread_mutex_unlock(&n->lock);
}

/* The egress of the nested sandbox (or run) principal calls from. */
static enum dm_egress own_egress(struct dm_context *ctx, const char *principal)
{
        enum dm_egress mine;
        uint64_t session;

        endpoint_facts(ctx, principal, &mine, &session);
        return mine;
}

int dm_tools_nested_check(struct dm_call *call, const struct dm_tools_nested_ask *ask, struct dm_error *err)
{
        struct dm_context *ctx = dm_call_context(call);
        const char *principal = dm_call_principal(call);
        unsigned depth = dm_principal_depth(principal);
        struct dm_backend *b;

        if (ask->nested && (int64_t)depth + 1 > ctx->cfg.max_depth)
                return dm_error_set(err, -EPERM,
                                    "nested: true would make a sandbox %u levels deep, past the limit of %lld "
                                    "(DEMESNE_MAX_DEPTH)",
                                    depth + 1, (long long)ctx->cfg.max_depth);
        if (ask->nested && dm_context_backend(ctx, &b, err) < 0)
                return err->code;
        if (ask->nested && !dm_backend_can(b, DM_CAP_HOST_NETNS) && !remote_of(ctx))
                return dm_error_set(err, -EOPNOTSUPP,
                                    "nested: true on this engine (OpenSandbox, no network namespace on this host) "
                                    "needs a listener its sandboxes reach: set DEMESNE_REMOTE_LISTEN=ADDR:PORT (an "
                                    "address of this host the sandboxes route to; TLS with DEMESNE_REMOTE_TLS_CERT "
                                    "and DEMESNE_REMOTE_TLS_KEY unless it is loopback)");
        if (depth == 0)
                return 0;

        /* A call from inside a nested sandbox. */
        if (ask->has_allow)
                return dm_error_set(err, -EPERM,
                                    "'allow' entries are refused from inside a sandbox: a child's egress is never "
                                    "wider than its parent's");
        if (ask->has_host_paths)
                return dm_error_set(err, -EPERM,
                                    "host paths are refused from inside a sandbox (files, directories, src): put "
                                    "what the child needs in it with sandbox_upload's content, or have it fetch it");
        if (ask->egress) {
                enum dm_egress mine = own_egress(ctx, principal);

                if (*ask->egress > mine)
                        return dm_error_set(err, -EPERM,
                                            "egress '%s' is wider than this sandbox's own ('%s'): a child gets no "
                                            "more network than its parent",
                                            egress_names[*ask->egress], egress_names[mine]);
        }
        /* The caps are the core's claim's (src/core/claim.h): counted and
         * reserved in one step where the container is claimed. */
        return 0;
}

uint64_t dm_tools_nested_host_session(struct dm_call *call)
{
        char root[DM_PRINCIPAL_MAX];
        enum dm_egress egress;
        uint64_t session;

        if (!dm_principal_depth(dm_call_principal(call)))
                return 0;
        /* The tree's top was made by a host caller: its session. */
        dm_principal_root(dm_call_principal(call), root, sizeof(root));
        endpoint_facts(dm_call_context(call), root, &egress, &session);
        return session;
}

const char *dm_tools_nested_egress_default(struct dm_call *call)
{
        struct dm_context *ctx = dm_call_context(call);
        const char *principal = dm_call_principal(call), *def = dm_egress_default(ctx);
        enum dm_egress cap;

        if (dm_principal_depth(principal) == 0)
                return def;
        cap = own_egress(ctx, principal);
        for (int i = DM_EGRESS_NONE; i < (int)cap; i++)
                if (strcmp(def, egress_names[i]) == 0)
                        return def;
        return egress_names[cap];
}

/* Appends DEMESNE_MCP_URL (the remote listener's for a remote sandbox,
 * else the one in its own network namespace) and DEMESNE_MCP_TOKEN
 * (token's) to the malloc'd env array. */
static int env_append(const struct dm_context *ctx, bool remote, const char *token, char ***env)
{
        struct dm_mcphttp_front *f = remote ? remote_of(ctx) : NULL;
        const char *ca = f ? dm_mcphttp_front_ca(f) : NULL;
        size_t n = 0;
        char **grown;
        int r;

        while (*env && (*env)[n])
                n++;
        grown = realloc(*env, (n + 4) * sizeof(*grown));
        if (!grown)
                return -ENOMEM;
        *env = grown;
        memset(grown + n, 0, 4 * sizeof(*grown));
        r = f ? asprintf(&grown[n], "DEMESNE_MCP_URL=%s/mcp", dm_mcphttp_front_url(f))
              : asprintf(&grown[n], "DEMESNE_MCP_URL=http://" NESTED_ADDR ":%d/mcp", NESTED_PORT);
        if (r < 0) {
                grown[n] = NULL;
                return -ENOMEM;
        }
        if (asprintf(&grown[n + 1], "DEMESNE_MCP_TOKEN=%s", token) < 0) {
                grown[n + 1] = NULL;
                return -ENOMEM;
        }
        /* What verifies the listener's certificate, for the sandbox's
         * clients (DEMESNE_REMOTE_TLS_CA). */
        if (ca && asprintf(&grown[n + 2], "DEMESNE_MCP_CA_CERT=%s", ca) < 0) {
                grown[n + 2] = NULL;
                return -ENOMEM;
        }
        return 0;
}

/* Whether the sandboxes of ctx's backend are remote (no network namespace
 * on this host): their endpoint is behind the remote listener. */
static bool is_remote(struct dm_context *ctx)
{
        struct dm_error err = { 0 };
        struct dm_backend *b;

        return dm_context_backend(ctx, &b, &err) == 0 && !dm_backend_can(b, DM_CAP_HOST_NETNS);
}

const char *dm_tools_nested_reach(struct dm_context *ctx)
{
        return remote_of(ctx) && is_remote(ctx) ? dm_mcphttp_front_host(remote_of(ctx)) : NULL;
}

static int relay_add(void *userdata, const char *token, const struct sockaddr_in *to, struct dm_error *err)
{
        return dm_mcphttp_front_add_relay(userdata, token, to, err);
}

static void relay_remove(void *userdata, const char *token)
{
        dm_mcphttp_front_remove_relay(userdata, token);
}

bool dm_tools_nested_agent_remote(struct dm_context *ctx, struct dm_agent_remote *ret)
{
        struct dm_mcphttp_front *f = remote_of(ctx);

        if (!f || !is_remote(ctx))
                return false;
        *ret = (struct dm_agent_remote){
                .url = dm_mcphttp_front_url(f),
                .host = dm_mcphttp_front_host(f),
                .ca = dm_mcphttp_front_ca(f),
                .add = relay_add,
                .remove = relay_remove,
                .userdata = f,
        };
        return true;
}

int dm_tools_nested_env(struct dm_context *ctx, char token[65], char ***env)
{
        if (dm_mcphttp_token_generate(token) < 0)
                return -EIO;
        return env_append(ctx, is_remote(ctx), token, env);
}

/* Serves the endpoint of sandbox or run id, whose PID 1 is pid, behind
 * token, for "<maker>/<id>". */
static int open_endpoint(struct dm_context *ctx, const char *maker, const char *id, int pid, const char *token,
                         enum dm_egress egress, bool reopened, uint64_t host_session, struct dm_error *err)
{
        struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(NESTED_PORT) };
        const char *remote_hosts[2] = { NULL, NULL };
        struct dm_mcphttp_options o;
        struct dm_nested *n = nested_of(ctx);
        struct endpoint *e;
        int fd = -1, r;

        if (!n || !n->srv)
                return dm_error_set(err, -EINVAL, "nested sandboxes need the MCP server (demesne serve)");
        e = calloc(1, sizeof(*e));
        if (!e)
                return dm_error_set(err, -ENOMEM, "out of memory");
        snprintf(e->id, sizeof(e->id), "%s", id);
        e->egress = egress;
        e->pid = pid;
        e->reopened = reopened;
        e->host_session = host_session;
        if (reopened || pid == 0)
                snprintf(e->token, sizeof(e->token), "%s", token);
        if ((size_t)snprintf(e->principal, sizeof(e->principal), "%s%c%s", maker && maker[0] ? maker : "local",
                             DM_PRINCIPAL_SEP, id) >= sizeof(e->principal)) {
                free(e);
                return dm_error_set(err, -ENAMETOOLONG, "the caller's principal is too long to nest under");
        }
        dm_mcphttp_options_init(&o);
        if (pid == 0) {
                /* A remote sandbox: behind the remote listener, which hands
                 * it the connections that carry its token. */
                if (!n->remote) {
                        free(e);
                        return dm_error_set(err, -EOPNOTSUPP, "no remote listener (DEMESNE_REMOTE_LISTEN)");
                }
                remote_hosts[0] = dm_mcphttp_front_host(n->remote);
                o.adopt_only = true;
                o.allowed_hosts = remote_hosts;
        } else {
                inet_pton(AF_INET, NESTED_ADDR, &addr.sin_addr);
                r = dm_netns_listen(pid, &addr, 1, NULL, 0, &fd, err);
                if (r < 0) {
                        free(e);
                        return dm_error_wrap(err, "make the MCP endpoint in '%s'", id);
                }
                o.use_listen_fd = true;
                o.listen_fd = fd;
        }
        o.token = token;
        o.principal = e->principal;
        o.max_message = (size_t)ctx->cfg.max_message;
        o.max_sessions = 8;
        o.max_streams = 16;
        o.max_connections = 32;
        o.max_connections_per_ip = 32;
        r = dm_mcphttp_start(n->srv, &o, &e->http, err);
        if (r >= 0 && pid == 0 && (r = dm_mcphttp_front_add(n->remote, token, e->http, err)) < 0)
                dm_mcphttp_stop(e->http);
        if (r < 0) {
                explicit_bzero(e->token, sizeof(e->token));
                free(e);
                return dm_error_wrap(err, "serve the MCP endpoint of '%s'", id);
        }
        pthread_mutex_lock(&n->lock);
        e->next = n->head;
        n->head = e;
        pthread_mutex_unlock(&n->lock);
        if (pid == 0)
                log_info("%s: its MCP endpoint is %s/mcp (the remote listener), for principal '%s'", id,
                         dm_mcphttp_front_url(n->remote), e->principal);
        else
                log_info("%s: its MCP endpoint is http://" NESTED_ADDR ":%d/mcp inside it, for principal '%s'", id,
                         NESTED_PORT, e->principal);
        return 0;
}

int dm_tools_nested_open(struct dm_call *call, const struct dm_sandbox *sb, const char *token, enum dm_egress egress,
                         struct dm_error *err)
{
        struct dm_context *ctx = dm_call_context(call);
        int pid = 0, r = is_remote(ctx) ? 0 : dm_sandbox_pid(ctx, sb, &pid, err);

        if (r < 0)
                return dm_error_wrap(err, "make the MCP endpoint in sandbox '%s'", sb->id);
        return open_endpoint(ctx, dm_call_principal(call), sb->id, pid, token, egress, false, dm_call_session_id(call),
                             err);
}

int dm_tools_nested_run_started(void *userdata, const char *run_id, int pid, char ***ret_env, struct dm_error *err)
{
        struct dm_tools_nested_run *n = userdata;
        int r;

        /* The token first: the endpoint is served behind it. */
        *ret_env = NULL;
        if (dm_mcphttp_token_generate(n->token) < 0 || env_append(n->ctx, pid == 0, n->token, ret_env) < 0)
                r = dm_error_set(err, -ENOMEM, "out of memory");
        else
                r = open_endpoint(n->ctx, n->maker, run_id, pid, n->token, n->egress, false, n->session, err);
        if (r < 0) {
                for (size_t i = 0; *ret_env && (*ret_env)[i]; i++)
                        free((*ret_env)[i]);
                free(*ret_env);
                *ret_env = NULL;
                return r;
        }
        snprintf(n->run_id, sizeof(n->run_id), "%s", run_id);
        return 0;
}

void dm_tools_nested_run_end(struct dm_tools_nested_run *n)
{
        /* What the run's calls made ends with it. */
        if (n->run_id[0])
                dm_tools_nested_end(n->ctx, n->run_id);
        explicit_bzero(n->token, sizeof(n->token));
}

bool dm_tools_nested_possible(struct dm_call *call)
{
        struct dm_context *ctx = dm_call_context(call);
        struct dm_error err = { 0 };
        struct dm_nested *n = nested_of(ctx);
        struct dm_backend *b;

        return n && n->srv && (int64_t)dm_principal_depth(dm_call_principal(call)) + 1 <= ctx->cfg.max_depth &&
               dm_context_backend(ctx, &b, &err) == 0 &&
               (dm_backend_can(b, DM_CAP_HOST_NETNS) ? dm_launch_use_shim(ctx, b) : n->remote != NULL);
}

/* Stops e's endpoint (its calls cancelled and waited for) and frees it. */
static void stop_endpoint(struct dm_nested *n, struct endpoint *e)
{
        if (n->remote && e->pid == 0)
                dm_mcphttp_front_remove(n->remote, e->http);
        dm_mcphttp_stop(e->http);
        explicit_bzero(e->token, sizeof(e->token));
        free(e);
}

/* A sandbox was destroyed, or a run ended: its subtree is closed to new
 * claims, its endpoint stops (its calls are cancelled and waited for), then
 * what its calls made goes: what holds a slot in the subtree (runs, jobs,
 * creates at any level) is cancelled and waited for, and its sandboxes are
 * destroyed (each of those may end a subtree of its own the same way). */
void dm_tools_nested_end(struct dm_context *ctx, const char *id)
{
        struct dm_nested *nested = nested_of(ctx);
        char principal[DM_PRINCIPAL_MAX];
        struct endpoint *e;
        size_t n;

        if (!nested)
                return;
        pthread_mutex_lock(&nested->lock);
        e = find_locked(nested, NULL, id, true);
        pthread_mutex_unlock(&nested->lock);
        if (!e)
                return;
        snprintf(principal, sizeof(principal), "%s", e->principal);
        /* Nothing new starts below it, and what is in flight is cancelled,
         * before its calls stop (src/core/cascade.h). */
        dm_cascade_close(ctx, principal);
        stop_endpoint(nested, e);
        n = dm_cascade_end(ctx, principal, id);
        log_info("%s: its MCP endpoint stopped, %zu sandbox%s below it destroyed", id, n, n == 1 ? "" : "es");
}

/* ctx->before_sandbox_exec: a nested sandbox that this server reaches in a
 * network namespace where it serves no endpoint (taken over from an earlier
 * server, whose endpoint went with it) gets one, behind a new token that
 * its commands are given from then on; the old token opens nothing. */
static void before_exec(struct dm_context *ctx, const struct dm_sandbox *sb, int pid, char ***ret_env)
{
        struct dm_nested *n = nested_of(ctx);
        struct dm_error err = { 0 };
        struct endpoint *e, *stale = NULL;
        char token[65] = "";
        bool serving = false;

        *ret_env = NULL;
        if (!n || !n->srv)
                return;
        pthread_mutex_lock(&n->reopen_lock);
        pthread_mutex_lock(&n->lock);
        e = find_locked(n, NULL, sb->id, false);
        if (e && e->pid == pid) {
                serving = true;
                if (e->reopened)
                        snprintf(token, sizeof(token), "%s", e->token);
        } else if (e)
                stale = find_locked(n, NULL, sb->id, true);
        pthread_mutex_unlock(&n->lock);
        if (stale) {
                /* Its namespace is gone with the container it listened in;
                 * what its calls made is the same principal's, and stays. */
                stop_endpoint(n, stale);
        }
        if (!serving) {
                /* The policy the server keeps for it, not its record's text. */
                enum dm_egress egress = dm_sandbox_egress(ctx, sb);

                if (dm_mcphttp_token_generate(token) < 0 ||
                    open_endpoint(ctx, sb->principal, sb->id, pid, token, egress, true, 0, &err) < 0) {
                        log_warning("sandbox %s: its MCP endpoint could not be made again: %s", sb->id,
                                    err.msg[0] ? err.msg : "no randomness for a token");
                        token[0] = '\0';
                } else
                        log_info("sandbox %s: its MCP endpoint is served again, behind a new token", sb->id);
        }
        pthread_mutex_unlock(&n->reopen_lock);
        if (token[0] && env_append(ctx, pid == 0, token, ret_env) < 0)
                log_warning("sandbox %s: out of memory for its endpoint's variables", sb->id);
        explicit_bzero(token, sizeof(token));
}

int dm_tools_nested_new(struct dm_context *ctx, struct dm_mcp_server *srv, struct dm_nested **ret, struct dm_error *err)
{
        struct dm_nested *n = calloc(1, sizeof(*n));
        struct dm_mcphttp_front_options fo = {
                .listen = ctx->cfg.remote_listen,
                .tls_cert = ctx->cfg.remote_tls_cert,
                .tls_key = ctx->cfg.remote_tls_key,
                .tls_ca = ctx->cfg.remote_tls_ca,
        };
        int r;

        if (!n)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (ctx->cfg.remote_listen && (r = dm_mcphttp_front_start(&fo, &n->remote, err)) < 0) {
                free(n);
                return r;
        }
        pthread_mutex_init(&n->lock, NULL);
        pthread_mutex_init(&n->reopen_lock, NULL);
        n->srv = srv;
        ctx->after_sandbox_destroy = dm_tools_nested_end;
        ctx->before_sandbox_exec = before_exec;
        *ret = n;
        return 0;
}

void dm_tools_nested_free(struct dm_context *ctx, struct dm_nested *n)
{
        struct endpoint *e;

        if (!n)
                return;
        /* The TTL reaper destroys sandboxes, and so calls the hook: it
         * stops first (dm_server_release would stop it later anyway). The
         * transport has ended, so no call destroys one any more. */
        dm_sandbox_reaper_stop(ctx);
        ctx->after_sandbox_destroy = NULL;
        ctx->before_sandbox_exec = NULL;
        for (;;) {
                pthread_mutex_lock(&n->lock);
                e = n->head;
                if (e)
                        n->head = e->next;
                pthread_mutex_unlock(&n->lock);
                if (!e)
                        break;
                stop_endpoint(n, e);
        }
        dm_mcphttp_front_stop(n->remote);
        pthread_mutex_destroy(&n->reopen_lock);
        pthread_mutex_destroy(&n->lock);
        free(n);
}
