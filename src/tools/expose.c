/* SPDX-License-Identifier: MIT */
/* sandbox_expose and the table of open previews (see expose.h): who may
 * open one (the sandbox's owner, as for sandbox_exec), how many (
 * DM_PREVIEWS_PER_SANDBOX each), and their end: the sandbox's destroy (a
 * call or the TTL reaper, through ctx->after_sandbox_destroy) and the
 * server's (dm_tools_previews_free). A preview lives in the server that
 * opened it; a later server of the same output root has none. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "src/basic/log.h"
#include "src/basic/principal.h"
#include "src/core/activity.h"
#include "src/core/sandbox.h"
#include "src/tools/args.h"
#include "src/tools/expose.h"
#include "src/tools/server-internal.h"
#include "src/tools/tools.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define DM_PREVIEWS_PER_SANDBOX 8

struct entry {
        char id[DM_SANDBOX_ID_LEN];
        char principal[DM_PRINCIPAL_MAX]; /* the sandbox's owner */
        uint16_t port;
        char url[64]; /* without the code */
        struct dm_preview *p;
        struct entry *next;
};

struct dm_previews {
        pthread_mutex_t open_lock; /* one open at a time: the cap counts what is open */
        pthread_mutex_t lock;      /* head */
        struct entry *head;
};

static struct dm_previews *previews_of(const struct dm_context *ctx)
{
        return ctx->tools ? ctx->tools->previews : NULL;
}

/* The run journal's "preview" line (src/core/activity.h): the page links a
 * sandbox to its open previews. url NULL: closed. */
static void journal(const struct dm_context *ctx, const char *id, uint16_t port, const char *url)
{
        dm_activity_record(ctx->cfg.state_dir, ctx->cfg.activity_days,
                           &(struct dm_activity_event){ .event = "preview", .id = id, .port = port, .url = url });
}

static const struct dm_arg_spec expose_args[] = {
        { .name = "sandbox_id",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 64,
          .description = "The id sandbox_create returned." },
        { .name = "port",
          .type = DM_ARG_INT,
          .required = true,
          .min = 1,
          .max = 65535,
          .description = "The TCP port the app listens on inside the sandbox (on 127.0.0.1 or any address)." },
};

static const char expose_schema[] =
        "{\"type\":\"object\",\"properties\":{\"url\":{\"type\":\"string\",\"description\":\"open it once: its "
        "one-time code sets the preview's cookie\"},\"port\":{\"type\":\"integer\"},\"sandbox_id\":{\"type\":"
        "\"string\"},\"expires_with_sandbox\":{\"type\":\"boolean\"}},\"required\":[\"url\",\"port\","
        "\"expires_with_sandbox\"]}";

/* Under lock: the open preview of (id, port), with a new code in url, or
 * none; how many id has (one whose sandbox process ended, after an engine
 * restart, say, is unlinked into *ret_stale and not counted). */
static struct entry *renew_locked(struct dm_previews *v, const char *id, uint16_t port, char *url, size_t size,
                                  size_t *ret_count, struct entry **ret_stale)
{
        char code[DM_PREVIEW_CODE_LEN + 1];
        struct entry *hit = NULL;

        *ret_count = 0;
        *ret_stale = NULL;
        for (struct entry **p = &v->head; *p;) {
                struct entry *e = *p;

                if (strcmp(e->id, id) != 0) {
                        p = &e->next;
                        continue;
                }
                if (e->port == port && !dm_preview_alive(e->p)) {
                        *p = e->next;
                        *ret_stale = e;
                        continue;
                }
                (*ret_count)++;
                if (e->port == port && dm_preview_new_code(e->p, code) == 0) {
                        hit = e;
                        snprintf(url, size, "%s?demesne_code=%s", e->url, code);
                        explicit_bzero(code, sizeof(code));
                }
                p = &e->next;
        }
        return hit;
}

/* Opens (or, for a port already open, gives a new code for) sb's preview of
 * port, in the namespace of pid or at the server's endpoint ep: the URL
 * with the code in url. */
static int expose(struct dm_context *ctx, struct dm_previews *v, const struct dm_sandbox *sb, int pid,
                  const struct dm_endpoint *ep, uint16_t port, char *url, size_t size, struct dm_error *err)
{
        struct sockaddr_in bind = { .sin_family = AF_INET, .sin_addr.s_addr = ctx->cfg.expose_addr }, a;
        char code[DM_PREVIEW_CODE_LEN + 1], what[64], host[INET_ADDRSTRLEN];
        struct entry *e, *stale;
        size_t count;
        int r;

        pthread_mutex_lock(&v->lock);
        e = renew_locked(v, sb->id, port, url, size, &count, &stale);
        pthread_mutex_unlock(&v->lock);
        if (stale) {
                dm_preview_close(stale->p);
                journal(ctx, stale->id, stale->port, NULL);
                free(stale);
        }
        if (e)
                return 0;
        if (count >= DM_PREVIEWS_PER_SANDBOX)
                return dm_error_set(err, -EMFILE,
                                    "sandbox '%s' has %d open previews, the most it may have: expose a port already "
                                    "open again (a new code), or sandbox_destroy it to close them",
                                    sb->id, DM_PREVIEWS_PER_SANDBOX);
        e = calloc(1, sizeof(*e));
        if (!e)
                return dm_error_set(err, -ENOMEM, "out of memory");
        snprintf(what, sizeof(what), "sandbox %s: preview of port %u", sb->id, port);
        r = dm_preview_open(&bind, pid, ep, port, what, &e->p, code, err);
        if (r < 0) {
                free(e);
                return r;
        }
        snprintf(e->id, sizeof(e->id), "%s", sb->id);
        snprintf(e->principal, sizeof(e->principal), "%s", sb->principal);
        e->port = port;
        dm_preview_address(e->p, &a);
        inet_ntop(AF_INET, &a.sin_addr, host, sizeof(host));
        snprintf(e->url, sizeof(e->url), "http://%s:%u/", host, ntohs(a.sin_port));
        snprintf(url, size, "%s?demesne_code=%s", e->url, code);
        pthread_mutex_lock(&v->lock);
        e->next = v->head;
        v->head = e;
        pthread_mutex_unlock(&v->lock);
        log_info("%s: served at %s", what, e->url);
        journal(ctx, sb->id, port, e->url);
        return 0;
}

static json_object *expose_call(struct dm_call *call, json_object *args)
{
        struct dm_context *ctx = dm_call_context(call);
        struct dm_previews *v = previews_of(ctx);
        struct dm_error err = { 0 };
        struct dm_backend *b;
        struct dm_sandbox sb, again;
        struct dm_endpoint ep = { 0 };
        char url[160];
        uint16_t port;
        int pid, r;
        json_object *out;

        if (dm_args_check(expose_args, N(expose_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        port = (uint16_t)dm_args_int(expose_args, N(expose_args), args, "port");
        if (!v) {
                dm_error_set(&err, -EINVAL, "sandbox_expose needs the MCP server (demesne serve)");
                return dm_tools_error(NULL, &err);
        }
        if (dm_sandbox_get(ctx, dm_args_str(expose_args, N(expose_args), args, "sandbox_id"), dm_call_principal(call),
                           &sb, &err) < 0 ||
            dm_sandbox_check_awake(&sb, &err) < 0)
                return dm_tools_error(NULL, &err);
        if (dm_context_backend(ctx, &b, &err) < 0)
                return dm_tools_error("sandbox_expose", &err);
        if (!dm_backend_can(b, DM_CAP_HOST_NETNS) && !b->ops->endpoint) {
                dm_error_set(&err, -EOPNOTSUPP,
                             "sandbox_expose needs the sandbox's network namespace on this host or the server's "
                             "endpoint of the port, and this engine gives neither");
                return dm_tools_error(NULL, &err);
        }
        /* OpenSandbox: the server's endpoint of the port (its endpoint API). */
        if (!dm_backend_can(b, DM_CAP_HOST_NETNS)) {
                pid = 0;
                if ((r = b->ops->endpoint(b, sb.container, port, &ep, &err)) < 0)
                        return dm_tools_error("sandbox_expose", &err);
        } else if ((r = dm_sandbox_pid(ctx, &sb, &pid, &err)) < 0) {
                if (r == -ESRCH)
                        dm_error_set(&err, r, "sandbox '%s' is not running, so nothing of it can be exposed", sb.id);
                return dm_tools_error(r == -ESRCH ? NULL : "sandbox_expose", &err);
        }
        pthread_mutex_lock(&v->open_lock);
        r = expose(ctx, v, &sb, pid, ep.url ? &ep : NULL, port, url, sizeof(url), &err);
        pthread_mutex_unlock(&v->open_lock);
        dm_endpoint_release(&ep);
        if (r < 0)
                return dm_tools_error(r == -EMFILE ? NULL : "sandbox_expose", &err);
        /* Destroyed while it opened: the hook ran before the preview was in the table. */
        if (dm_sandbox_get(ctx, sb.id, NULL, &again, &err) < 0) {
                dm_tools_previews_end(ctx, sb.id);
                return dm_tools_error(NULL, &err);
        }
        out = json_object_new_object();
        json_object_object_add(out, "url", json_object_new_string(url));
        json_object_object_add(out, "port", json_object_new_int(port));
        json_object_object_add(out, "sandbox_id", json_object_new_string(sb.id));
        json_object_object_add(out, "expires_with_sandbox", json_object_new_boolean(1));
        explicit_bzero(url, sizeof(url));
        return dm_tool_result_ok(out);
}

void dm_tools_previews_end(struct dm_context *ctx, const char *id)
{
        struct dm_previews *v = previews_of(ctx);
        struct entry *gone = NULL;

        if (!v)
                return;
        pthread_mutex_lock(&v->lock);
        for (struct entry **p = &v->head; *p;) {
                struct entry *e = *p;

                if (strcmp(e->id, id) == 0) {
                        *p = e->next;
                        e->next = gone;
                        gone = e;
                } else
                        p = &e->next;
        }
        pthread_mutex_unlock(&v->lock);
        while (gone) {
                struct entry *e = gone;

                gone = e->next;
                dm_preview_close(e->p);
                journal(ctx, e->id, e->port, NULL);
                log_info("sandbox %s: preview of port %u closed", e->id, e->port);
                free(e);
        }
}

json_object *dm_tools_previews_list(struct dm_context *ctx, const char *principal)
{
        struct dm_previews *v = previews_of(ctx);
        json_object *a = json_object_new_array();

        if (!v)
                return a;
        pthread_mutex_lock(&v->lock);
        for (struct entry *e = v->head; e; e = e->next) {
                json_object *o;

                if (!dm_principal_covers(principal ? principal : "local", e->principal) || !dm_preview_alive(e->p))
                        continue;
                o = json_object_new_object();
                json_object_object_add(o, "sandbox_id", json_object_new_string(e->id));
                json_object_object_add(o, "port", json_object_new_int(e->port));
                json_object_object_add(o, "url", json_object_new_string(e->url));
                json_object_array_add(a, o);
        }
        pthread_mutex_unlock(&v->lock);
        return a;
}

struct dm_previews *dm_tools_previews_new(void)
{
        struct dm_previews *v = calloc(1, sizeof(*v));

        if (!v)
                return NULL;
        pthread_mutex_init(&v->open_lock, NULL);
        pthread_mutex_init(&v->lock, NULL);
        return v;
}

void dm_tools_previews_free(struct dm_previews *v)
{
        if (!v)
                return;
        while (v->head) {
                struct entry *e = v->head;

                v->head = e->next;
                dm_preview_close(e->p);
                free(e);
        }
        pthread_mutex_destroy(&v->lock);
        pthread_mutex_destroy(&v->open_lock);
        free(v);
}

static const struct dm_tool expose_tools[] = {
        { .name = "sandbox_expose",
          .title = "Preview a port of a sandbox",
          .description = "Serve a TCP port of a persistent sandbox (a web app, a dev server) on a host loopback "
                         "port, HTTP and WebSocket passed through, at every egress mode. Returns a URL whose "
                         "one-time code signs a browser in (a cookie for that preview); anything else gets 401. "
                         "The preview closes when the sandbox is destroyed or expires; sandbox_list shows open "
                         "ones. Exposing an open port again gives a new code.",
          .output_schema = expose_schema,
          .handler = expose_call },
};

void dm_tools_expose_register(struct dm_registry *reg)
{
        struct dm_tool t[N(expose_tools)];

        memcpy(t, expose_tools, sizeof(t));
        t[0].input_schema = dm_registry_own(reg, dm_args_schema(expose_args, N(expose_args)));
        dm_registry_add(reg, t, N(t));
}
