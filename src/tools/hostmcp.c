/* SPDX-License-Identifier: MIT */
/* The host tool proxy: the operator's host MCP servers (DEMESNE_HOST_MCP),
 * each started or reached once at start, offer nested callers the tools
 * that are both on the operator's list and annotated readOnlyHint by the
 * server, as host__<server>__<tool>. The host's own clients have those
 * servers already; a sandbox gets only their read-only part, and only
 * through demesne, which logs every call with the caller's run id, checks
 * its arguments against the tool's inputSchema before they leave, and
 * gives each tree of nested sandboxes its own share of each server. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/basic/log.h"
#include "src/basic/principal.h"
#include "src/mcp/client.h"
#include "src/mcp/registry.h"
#include "src/tools/tools.h"

#define PREFIX "host__"
#define SEP "__"
/* Calls one tree of nested sandboxes may have in flight or waiting at one
 * host server: the others keep their turns whatever one tree does. */
#define TREE_CALLS 4

/* A tree's calls in flight or waiting for one server. */
struct tree_share {
        char root[DM_PRINCIPAL_MAX];
        unsigned n;
};

struct host_server {
        const struct dm_mcpclient_spec *spec;
        struct dm_mcpclient *client; /* NULL: it could not be started; its tools are left out */
        size_t n_offered;
        char why[DM_ERROR_MSG_MAX]; /* why it offers nothing, when client is NULL */
        pthread_mutex_t lock;       /* guards shares */
        struct tree_share *shares;  /* the trees with a call in flight or waiting, n_shares of them */
        size_t n_shares;
};

struct host_tool {
        struct host_server *server;
        char *name;          /* the server's own name for it */
        json_object *schema; /* its inputSchema: read by calls on any thread, never changed */
};

struct dm_hostmcp {
        struct dm_mcpclient_config cfg;
        struct host_server *servers; /* cfg.n */
        struct host_tool *tools;     /* registered: their addresses are the registry's data */
        size_t n_tools;
};

static size_t count(char **strv)
{
        size_t n = 0;

        while (strv[n])
                n++;
        return n;
}

static bool hint(json_object *tool, const char *name, bool dflt)
{
        json_object *ann, *v;

        if (!json_object_object_get_ex(tool, "annotations", &ann) || !json_object_is_type(ann, json_type_object) ||
            !json_object_object_get_ex(ann, name, &v) || !json_object_is_type(v, json_type_boolean))
                return dflt;
        return json_object_get_boolean(v);
}

static const char *string_member(json_object *o, const char *name)
{
        json_object *v;

        return json_object_object_get_ex(o, name, &v) && json_object_is_type(v, json_type_string)
                       ? json_object_get_string(v)
                       : NULL;
}

static json_object *host_call(struct dm_call *call, json_object *args);

/* Which of the server's tools to offer (listed, read-only, well named, a
 * schema), each added to the registry; the rest are logged with why. */
static void offer(struct dm_hostmcp *h, struct dm_registry *reg, struct host_server *hs, json_object *tools)
{
        const struct dm_mcpclient_spec *spec = hs->spec;

        for (char **want = spec->tools; *want; want++) {
                json_object *tool = NULL, *in, *out, *ann;
                char full[sizeof(PREFIX) + 2 * DM_MCPCLIENT_NAME_MAX + sizeof(SEP)];
                struct host_tool *ht;
                struct dm_tool t = { 0 };
                int r;

                for (size_t i = 0; i < json_object_array_length(tools) && !tool; i++) {
                        const char *n = string_member(json_object_array_get_idx(tools, i), "name");
                        if (n && strcmp(n, *want) == 0)
                                tool = json_object_array_get_idx(tools, i);
                }
                if (!tool) {
                        log_warning("host mcp '%s': no tool '%s' (listed in the file): left out", spec->name, *want);
                        continue;
                }
                if (!hint(tool, "readOnlyHint", false)) {
                        log_warning("host mcp '%s': tool '%s' is not annotated readOnlyHint: left out", spec->name,
                                    *want);
                        continue;
                }
                if (!json_object_object_get_ex(tool, "inputSchema", &in) ||
                    !json_object_is_type(in, json_type_object)) {
                        log_warning("host mcp '%s': tool '%s' has no inputSchema object: left out", spec->name, *want);
                        continue;
                }
                snprintf(full, sizeof(full), PREFIX "%s" SEP "%s", spec->name, *want);
                ht = &h->tools[h->n_tools];
                ht->server = hs;
                ht->name = strdup(*want);
                if (!ht->name)
                        continue;
                ht->schema = json_object_get(in);
                t.name = full;
                t.title = string_member(tool, "title");
                if (!t.title && json_object_object_get_ex(tool, "annotations", &ann))
                        t.title = string_member(ann, "title");
                t.description = string_member(tool, "description");
                if (!t.description)
                        t.description = "";
                t.input_schema = json_object_to_json_string_ext(in, JSON_C_TO_STRING_PLAIN);
                t.output_schema = json_object_object_get_ex(tool, "outputSchema", &out) &&
                                                  json_object_is_type(out, json_type_object)
                                          ? json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN)
                                          : NULL;
                t.read_only = true;
                t.idempotent = hint(tool, "idempotentHint", false);
                t.open_world = hint(tool, "openWorldHint", true);
                t.nested_only = true;
                t.handler = host_call;
                t.data = ht;
                r = dm_registry_add_copy(reg, &t);
                if (r < 0) {
                        log_error("host mcp '%s': tool '%s' left out: %s", spec->name, *want,
                                  r == -EEXIST   ? "its name is taken"
                                  : r == -ENOSPC ? "the tool registry is full"
                                                 : strerror(-r));
                        free(ht->name);
                        json_object_put(ht->schema);
                        continue;
                }
                h->n_tools++;
                hs->n_offered++;
        }
}

/* Starts or reaches one server and offers its tools; a server that fails
 * is logged and offers nothing. */
static void connect_server(struct dm_hostmcp *h, struct dm_registry *reg, struct host_server *hs)
{
        struct dm_error err = { 0 };
        json_object *tools = NULL;

        if (dm_mcpclient_open(hs->spec, &hs->client, &err) < 0 ||
            dm_mcpclient_list_tools(hs->client, &tools, &err) < 0) {
                snprintf(hs->why, sizeof(hs->why), "%s", err.msg);
                log_error("host mcp '%s': %s; its tools are left out", hs->spec->name, err.msg);
                dm_mcpclient_free(hs->client);
                hs->client = NULL;
                return;
        }
        offer(h, reg, hs, tools);
        json_object_put(tools);
        log_info("host mcp '%s': %zu of %zu listed tools offered to nested sandboxes", hs->spec->name, hs->n_offered,
                 count(hs->spec->tools));
}

/* The tree a nested principal belongs to: its first sandbox
 * ("local/sbx-1" of "local/sbx-1/sbx-2"), whose descendants share it. */
static void tree_root(const char *principal, char root[DM_PRINCIPAL_MAX])
{
        const char *first = strchr(principal, DM_PRINCIPAL_SEP);
        const char *end = first ? strchr(first + 1, DM_PRINCIPAL_SEP) : NULL;
        size_t n = end ? (size_t)(end - principal) : strlen(principal);

        if (n >= DM_PRINCIPAL_MAX)
                n = DM_PRINCIPAL_MAX - 1;
        memcpy(root, principal, n);
        root[n] = '\0';
}

/* Takes one of the tree's TREE_CALLS places at the server, in
 * the same step as the check: -EAGAIN when it has none left. */
static int share_take(struct host_server *hs, const char *root)
{
        struct tree_share *s = NULL, *grown;
        int r = 0;

        pthread_mutex_lock(&hs->lock);
        for (size_t i = 0; i < hs->n_shares && !s; i++)
                if (strcmp(hs->shares[i].root, root) == 0)
                        s = &hs->shares[i];
        if (s && s->n >= TREE_CALLS) {
                r = -EAGAIN;
        } else if (s) {
                s->n++;
        } else if ((grown = realloc(hs->shares, (hs->n_shares + 1) * sizeof(*grown)))) {
                hs->shares = grown;
                s = &hs->shares[hs->n_shares++];
                snprintf(s->root, sizeof(s->root), "%s", root);
                s->n = 1;
        } else {
                r = -ENOMEM;
        }
        pthread_mutex_unlock(&hs->lock);
        return r;
}

static void share_give(struct host_server *hs, const char *root)
{
        pthread_mutex_lock(&hs->lock);
        for (size_t i = 0; i < hs->n_shares; i++)
                if (strcmp(hs->shares[i].root, root) == 0) {
                        if (--hs->shares[i].n == 0)
                                hs->shares[i] = hs->shares[--hs->n_shares];
                        break;
                }
        pthread_mutex_unlock(&hs->lock);
}

/* The server's words may echo the caller's arguments: one line in the
 * log, whatever they hold. */
static void log_outcome(const char *run, const char *server, const char *tool, const char *what, const char *msg)
{
        char line[DM_ERROR_MSG_MAX];
        size_t i = 0;

        for (; msg && msg[i] && i < sizeof(line) - 1; i++)
                line[i] = (unsigned char)msg[i] < 0x20 || msg[i] == 0x7f ? ' ' : msg[i];
        line[i] = '\0';
        log_info("host tool call: run '%s', server '%s', tool '%s': %s%s%s", run, server, tool, what, msg ? ": " : "",
                 line);
}

/* The call, once it may go: 0 and *ret_result, or an error in err. */
static int send_call(struct host_tool *ht, struct dm_call *call, json_object *args, json_object **ret_result,
                     struct dm_error *err)
{
        json_object *params = json_object_new_object(), *result = NULL, *content;
        int r;

        json_object_object_add(params, "name", json_object_new_string(ht->name));
        json_object_object_add(params, "arguments", args ? json_object_get(args) : json_object_new_object());
        r = dm_mcpclient_request(ht->server->client, "tools/call", params, dm_call_cancel(call), &result, err);
        json_object_put(params);
        if (r == 0 && (!json_object_object_get_ex(result, "content", &content) ||
                       !json_object_is_type(content, json_type_array))) {
                json_object_put(result);
                return dm_error_set(err, -EPROTO, "host MCP server '%s' answered tools/call without a content array",
                                    ht->server->spec->name);
        }
        if (r == 0)
                *ret_result = result;
        return r;
}

static json_object *host_call(struct dm_call *call, json_object *args)
{
        const struct dm_tool *t = dm_call_tool(call);
        struct host_tool *ht = t->data;
        const char *principal = dm_call_principal(call);
        const char *run = dm_principal_leaf(principal);
        const char *server = ht->server->spec->name;
        char root[DM_PRINCIPAL_MAX];
        json_object *result = NULL, *e;
        struct dm_error err = { 0 };
        int r;

        /* tools/call checked it; a second lock on the door costs nothing. */
        if (dm_principal_depth(principal) < 1 || !run)
                return dm_tool_result_error("'%s' is offered only inside nested sandboxes", t->name);
        if (!ht->server->client) {
                log_outcome(run, server, ht->name, "refused, the server is not running", NULL);
                return dm_tool_result_error("host MCP server '%s' is not running: %s", server, ht->server->why);
        }
        /* The server runs on the host: what its schema rules out does not
         * reach it, whether or not it checks for itself. */
        if (dm_mcpclient_check_args(ht->schema, args, &err) < 0) {
                log_outcome(run, server, ht->name, "refused, arguments against its inputSchema", err.msg);
                return dm_tool_result_error("%s: %s (nothing was sent to the server)", t->name, err.msg);
        }
        tree_root(principal, root);
        r = share_take(ht->server, root);
        if (r < 0) {
                log_outcome(run, server, ht->name,
                            r == -EAGAIN ? "refused, its tree has its share of calls in flight" : "out of memory",
                            NULL);
                return r == -EAGAIN ? dm_tool_result_error("host MCP server '%s' is busy with %d calls of this "
                                                           "sandbox tree already (at most %d each, EAGAIN): try "
                                                           "again when one of them has ended",
                                                           server, TREE_CALLS, TREE_CALLS)
                                    : dm_tool_result_error("out of memory");
        }
        r = send_call(ht, call, args, &result, &err);
        share_give(ht->server, root);
        if (r == -ECANCELED) {
                log_outcome(run, server, ht->name, "cancelled", NULL);
                return NULL;
        }
        if (r == -EREMOTEIO) {
                log_outcome(run, server, ht->name, "the server refused it", err.msg);
                return dm_tool_result_error("%s", err.msg);
        }
        if (r < 0) {
                log_outcome(run, server, ht->name, "failed", err.msg);
                return dm_tool_result_error("%s failed: %s", t->name, err.msg);
        }
        log_outcome(run, server, ht->name,
                    json_object_object_get_ex(result, "isError", &e) && json_object_get_boolean(e) ? "isError" : "ok",
                    NULL);
        return result;
}

int dm_tools_hostmcp_open(struct dm_context *ctx, struct dm_registry *reg, struct dm_hostmcp **ret,
                          struct dm_error *err)
{
        struct dm_hostmcp *h;
        size_t n_listed = 0;
        int r;

        *ret = NULL;
        if (!ctx->cfg.host_mcp)
                return 0;
        h = calloc(1, sizeof(*h));
        if (!h)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_mcpclient_config_load(ctx->cfg.host_mcp, &h->cfg, err);
        if (r < 0) {
                free(h);
                return dm_error_wrap(err, "DEMESNE_HOST_MCP");
        }
        for (size_t i = 0; i < h->cfg.n; i++)
                n_listed += count(h->cfg.servers[i].tools);
        h->servers = calloc(h->cfg.n + 1, sizeof(*h->servers));
        h->tools = calloc(n_listed + 1, sizeof(*h->tools));
        if (!h->servers || !h->tools) {
                dm_mcpclient_config_release(&h->cfg);
                free(h->servers);
                free(h->tools);
                free(h);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        *ret = h;
        for (size_t i = 0; i < h->cfg.n; i++) {
                h->servers[i].spec = &h->cfg.servers[i];
                pthread_mutex_init(&h->servers[i].lock, NULL);
                connect_server(h, reg, &h->servers[i]);
        }
        return 0;
}

void dm_tools_hostmcp_close(struct dm_hostmcp *h)
{
        if (!h)
                return;
        /* The registry still points at tools[] until dm_registry_free;
         * calls ended before this (dm_mcp_server_free). */
        for (size_t i = 0; i < h->cfg.n; i++)
                dm_mcpclient_free(h->servers[i].client);
        for (size_t i = 0; i < h->n_tools; i++) {
                free(h->tools[i].name);
                json_object_put(h->tools[i].schema);
        }
        for (size_t i = 0; i < h->cfg.n; i++) {
                free(h->servers[i].shares);
                pthread_mutex_destroy(&h->servers[i].lock);
        }
        dm_mcpclient_config_release(&h->cfg);
        free(h->servers);
        free(h->tools);
        free(h);
}

void dm_tools_hostmcp_report(const struct dm_context *ctx, const struct dm_hostmcp *h, int *problems)
{
        if (!ctx->cfg.host_mcp) {
                puts("note    host tool proxy: off (DEMESNE_HOST_MCP is not set)");
                return;
        }
        if (!h)
                return;
        for (size_t i = 0; i < h->cfg.n; i++) {
                const struct host_server *hs = &h->servers[i];
                if (hs->client) {
                        printf("ok      host mcp '%s': %zu tool%s offered to nested sandboxes\n", hs->spec->name,
                               hs->n_offered, hs->n_offered == 1 ? "" : "s");
                } else {
                        printf("PROBLEM host mcp '%s': %s\n", hs->spec->name, hs->why);
                        (*problems)++;
                }
        }
}
