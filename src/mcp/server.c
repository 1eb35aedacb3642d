/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/mcp/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/mcp/jsonrpc.h"
#include "src/mcp/server-internal.h"
#include "src/mcp/registry.h"
#include "src/mcp/skills.h"
#include "src/basic/buf.h"
#include "src/basic/cancel.h"
#include "src/basic/log.h"
#include "src/basic/principal.h"
#include "src/basic/timeutil.h"

#define TOOLS_PAGE_SIZE 20
/* A page's JSON text at most: far above 20 tools' (34 KB in 2026-12). */
#define TOOLS_PAGE_MAX (16u << 20)

static const char *const legacy_versions[] = { "2025-11-25", "2025-06-18", NULL };

/* ---- sending ------------------------------------------------------------ */

void dm_mcp_send_msg(struct dm_mcp_session *s, json_object *msg)
{
        s->send(s->transport, msg);
        json_object_put(msg);
}

static void add_result_type(json_object *result, bool modern)
{
        /* A CreateTaskResult comes with its own ("task"). */
        if (modern && result && json_object_is_type(result, json_type_object) &&
            !json_object_object_get_ex(result, "resultType", NULL))
                json_object_object_add(result, "resultType", json_object_new_string("complete"));
}

void dm_mcp_reply(struct dm_mcp_session *s, json_object *id, json_object *result, bool modern)
{
        add_result_type(result, modern);
        dm_mcp_send_msg(s, dm_rpc_result(id, result));
}

void dm_mcp_reply_error(struct dm_mcp_session *s, json_object *id, int code, const char *message, json_object *data)
{
        dm_mcp_send_msg(s, dm_rpc_error(id, code, message, data));
}

void dm_mcp_session_send_error(struct dm_mcp_session *s, int code, const char *message)
{
        dm_mcp_reply_error(s, NULL, code, message, NULL);
}

/* Forwards server log records to sessions that asked for them (logging/setLevel). */
static void log_hook(enum dm_log_level level, const char *line, void *userdata)
{
        struct dm_mcp_server *srv = userdata;
        struct dm_mcp_session *targets[16];
        int n = 0;

        pthread_mutex_lock(&srv->lock);
        for (struct dm_mcp_session *s = srv->private_logs ? NULL : srv->sessions; s && n < 16; s = s->next)
                /* A nested sandbox's session: never (a record may speak of
                 * anything outside its subtree). */
                if (s->log_enabled && level >= s->log_level && !s->closing && !dm_principal_depth(s->principal)) {
                        /* HTTP frees sessions while the server runs: the
                         * reference keeps this one until the send is done. */
                        s->refs++;
                        targets[n++] = s;
                }
        pthread_mutex_unlock(&srv->lock);
        for (int i = 0; i < n; i++) {
                json_object *p = json_object_new_object();
                json_object_object_add(p, "level", json_object_new_string(dm_log_level_name(level)));
                json_object_object_add(p, "logger", json_object_new_string("demesne"));
                json_object_object_add(p, "data", json_object_new_string(line));
                dm_mcp_send_msg(targets[i], dm_rpc_notification("notifications/message", p));
        }
        if (n) {
                pthread_mutex_lock(&srv->lock);
                for (int i = 0; i < n; i++)
                        targets[i]->refs--;
                pthread_cond_broadcast(&srv->idle);
                pthread_mutex_unlock(&srv->lock);
        }
}

/* ---- server and sessions ------------------------------------------------ */

struct dm_mcp_server *dm_mcp_server_new(void *app, struct dm_registry *registry, const char *skills_dir)
{
        struct dm_mcp_server *srv = calloc(1, sizeof(*srv));
        int h;

        if (!srv)
                return NULL;
        srv->app = app;
        srv->registry = registry;
        {
                struct dm_error err = { 0 };
                const char *dir = dm_skills_dir(skills_dir);

                /* Skills are an extra: a failure to read them is logged and
                 * the server goes on without. */
                if (dm_skills_load(dir, &srv->skills, &err) < 0)
                        log_warning("skills: %s", err.msg);
                else if (dm_skills_count(srv->skills))
                        log_info("skills: serving %zu from '%s'", dm_skills_count(srv->skills), dir);
        }
        pthread_mutex_init(&srv->lock, NULL);
        pthread_cond_init(&srv->idle, NULL);
        dm_mcp_ask_init(srv);
        /* Each server its own sink: two servers in one process each get
         * the records. Without one (all slots taken) the server still
         * serves; its clients get no notifications/message. */
        h = dm_log_hook_add(log_hook, srv);
        if (h < 0)
                log_warning("log records will not reach this server's clients: %s", strerror(-h));
        else
                srv->log_handle = h;
        return srv;
}

void dm_mcp_server_set_resources(struct dm_mcp_server *srv, const struct dm_mcp_resource_ops *ops, void *data)
{
        srv->res_ops = ops;
        srv->res_data = data;
}

void dm_mcp_server_set_tasks(struct dm_mcp_server *srv, const struct dm_mcp_task_ops *ops, void *data)
{
        srv->task_ops = ops;
        srv->task_data = data;
}

void dm_mcp_server_set_private_logs(struct dm_mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        srv->private_logs = true;
        pthread_mutex_unlock(&srv->lock);
}

struct dm_mcp_session *dm_mcp_session_new(struct dm_mcp_server *srv, dm_mcp_send_fn send, void *transport)
{
        struct dm_mcp_session *s = calloc(1, sizeof(*s));

        if (!s)
                return NULL;
        s->srv = srv;
        s->send = send;
        s->transport = transport;
        snprintf(s->principal, sizeof(s->principal), "local");
        pthread_mutex_lock(&srv->lock);
        s->id = ++srv->next_session_id;
        s->next = srv->sessions;
        srv->sessions = s;
        pthread_mutex_unlock(&srv->lock);
        return s;
}

void dm_mcp_session_set_principal(struct dm_mcp_session *s, const char *principal)
{
        snprintf(s->principal, sizeof(s->principal), "%s", principal && principal[0] ? principal : "local");
}

static void cancel_calls_locked(struct dm_mcp_session *s)
{
        for (struct dm_call *c = s->calls; c; c = c->next)
                dm_cancel_fire(&c->cancel);
        /* A call waiting for an answer stops waiting. */
        pthread_cond_broadcast(&s->srv->asked);
}

void dm_mcp_session_free(struct dm_mcp_session *s)
{
        struct dm_mcp_server *srv;

        if (!s)
                return;
        srv = s->srv;
        pthread_mutex_lock(&srv->lock);
        s->closing = true;
        cancel_calls_locked(s);
        while (s->n_calls > 0 || s->refs > 0)
                pthread_cond_wait(&srv->idle, &srv->lock);
        for (struct dm_mcp_session **pp = &srv->sessions; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        break;
                }
        pthread_mutex_unlock(&srv->lock);
        free(s);
}

void dm_mcp_server_shutdown(struct dm_mcp_server *srv)
{
        pthread_mutex_lock(&srv->lock);
        for (struct dm_mcp_session *s = srv->sessions; s; s = s->next) {
                s->closing = true;
                cancel_calls_locked(s);
        }
        for (;;) {
                int busy = 0;
                for (struct dm_mcp_session *s = srv->sessions; s; s = s->next)
                        busy += s->n_calls;
                if (!busy)
                        break;
                pthread_cond_wait(&srv->idle, &srv->lock);
        }
        pthread_mutex_unlock(&srv->lock);
}

void dm_mcp_server_free(struct dm_mcp_server *srv)
{
        if (!srv)
                return;
        if (srv->log_handle > 0)
                dm_log_hook_remove(srv->log_handle);
        dm_mcp_server_shutdown(srv);
        while (srv->sessions)
                dm_mcp_session_free(srv->sessions);
        pthread_mutex_destroy(&srv->lock);
        pthread_cond_destroy(&srv->idle);
        dm_mcp_ask_release(srv);
        dm_skills_free(srv->skills);
        free(srv);
}

/* ---- the call API for tools ---------------------------------------------- */

void *dm_call_app(struct dm_call *call)
{
        return call->session->srv->app;
}
struct dm_cancel *dm_call_cancel(struct dm_call *call)
{
        return &call->cancel;
}

void dm_call_progress(struct dm_call *call, double progress, double total, const char *message)
{
        json_object *p;

        progress += call->progress_base;
        if (!call->progress_token || progress <= call->last_progress)
                return;
        call->last_progress = progress;
        p = json_object_new_object();
        json_object_object_add(p, "progressToken", json_object_get(call->progress_token));
        json_object_object_add(p, "progress", json_object_new_double(progress));
        if (total > 0)
                json_object_object_add(p, "total", json_object_new_double(total));
        if (message)
                json_object_object_add(p, "message", json_object_new_string(message));
        dm_mcp_send_msg(call->session, dm_rpc_notification("notifications/progress", p));
}

void dm_call_note(struct dm_call *call, const char *message)
{
        int64_t now = dm_now_ms();

        if (!call->progress_token || (call->last_note_ms && now - call->last_note_ms < 500))
                return;
        call->last_note_ms = now;
        call->progress_base = call->last_progress + 1;
        dm_call_progress(call, 0, 0, message);
}

/* ---- era handling --------------------------------------------------------- */

json_object *dm_mcp_get_meta(json_object *params)
{
        json_object *meta;

        if (params && json_object_object_get_ex(params, "_meta", &meta) && json_object_is_type(meta, json_type_object))
                return meta;
        return NULL;
}

static json_object *supported_versions(void)
{
        json_object *a = json_object_new_array();

        json_object_array_add(a, json_object_new_string(DM_MCP_MODERN_VERSION));
        for (int i = 0; legacy_versions[i]; i++)
                json_object_array_add(a, json_object_new_string(legacy_versions[i]));
        return a;
}

/* 1 = a modern request (checked), 0 = legacy, -1 = answered with an error. */
static int classify_era(struct dm_mcp_session *s, struct dm_rpc_msg *m)
{
        json_object *meta = dm_mcp_get_meta(m->params), *v, *caps;
        const char *version;

        if (!meta || !json_object_object_get_ex(meta, META_VERSION, &v))
                return 0;
        if (!json_object_is_type(v, json_type_string)) {
                if (m->kind == DM_RPC_REQUEST)
                        dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS, "_meta." META_VERSION " must be a string",
                                           NULL);
                return -1;
        }
        version = json_object_get_string(v);
        if (strcmp(version, DM_MCP_MODERN_VERSION) != 0) {
                if (m->kind == DM_RPC_REQUEST) {
                        json_object *data = json_object_new_object();
                        json_object_object_add(data, "supported", supported_versions());
                        json_object_object_add(data, "requested", json_object_new_string(version));
                        dm_mcp_reply_error(s, m->id, DM_RPC_UNSUPPORTED_PROTOCOL_VERSION,
                                           "Unsupported protocol version", data);
                }
                return -1;
        }
        if (m->kind == DM_RPC_REQUEST &&
            (!json_object_object_get_ex(meta, META_CAPS, &caps) || !json_object_is_type(caps, json_type_object))) {
                dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS,
                                   "a 2026-07-28 request must carry _meta." META_CAPS " (an object)", NULL);
                return -1;
        }
        return 1;
}

/* ---- methods ---------------------------------------------------------------- */

static json_object *server_info(void)
{
        json_object *info = json_object_new_object();

        json_object_object_add(info, "name", json_object_new_string("demesne"));
        json_object_object_add(info, "title", json_object_new_string("demesne sandboxes"));
        json_object_object_add(info, "version", json_object_new_string(PACKAGE_VERSION));
        return info;
}

/* modern: the tasks extension is served on 2026-07-28 only (see
 * dm_mcp_request_declares_tasks). */
static json_object *server_capabilities(const struct dm_mcp_server *srv, bool modern)
{
        json_object *caps = json_object_new_object(), *tools = json_object_new_object();

        json_object_object_add(tools, "listChanged", json_object_new_boolean(0));
        json_object_object_add(caps, "tools", tools);
        json_object_object_add(caps, "logging", json_object_new_object());
        /* Run outputs, for clients that cannot read the server's disk
         * (src/core/resources.h); no subscriptions, the set changes with runs. */
        json_object_object_add(caps, "resources", json_object_new_object());
        /* Skills (SEP-2640) and tasks (SEP-2663), with no optional feature:
         * empty objects; never a capabilities.tasks slot (the v1 tasks). */
        if (dm_skills_count(srv->skills) || (srv->task_ops && modern)) {
                json_object *ext = json_object_new_object();
                if (dm_skills_count(srv->skills))
                        json_object_object_add(ext, DM_SKILLS_EXTENSION, json_object_new_object());
                if (srv->task_ops && modern)
                        json_object_object_add(ext, DM_MCP_TASKS_EXTENSION, json_object_new_object());
                json_object_object_add(caps, "extensions", ext);
        }
        return caps;
}

static void handle_initialize(struct dm_mcp_session *s, struct dm_rpc_msg *m)
{
        json_object *v, *result, *caps;
        const char *want = NULL, *chosen = DM_MCP_LATEST_LEGACY_VERSION;

        if (m->params && json_object_object_get_ex(m->params, "protocolVersion", &v) &&
            json_object_is_type(v, json_type_string))
                want = json_object_get_string(v);
        if (!want) {
                dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS,
                                   "initialize needs params.protocolVersion (a string)", NULL);
                return;
        }
        for (int i = 0; legacy_versions[i]; i++)
                if (strcmp(want, legacy_versions[i]) == 0)
                        chosen = legacy_versions[i];

        caps = NULL;
        if (json_object_object_get_ex(m->params, "capabilities", &caps) && !json_object_is_type(caps, json_type_object))
                caps = NULL;
        pthread_mutex_lock(&s->srv->lock);
        snprintf(s->version, sizeof(s->version), "%s", chosen);
        s->initialized = true;
        s->can_elicit = dm_mcp_caps_elicit_form(caps);
        pthread_mutex_unlock(&s->srv->lock);

        result = json_object_new_object();
        json_object_object_add(result, "protocolVersion", json_object_new_string(chosen));
        json_object_object_add(result, "capabilities", server_capabilities(s->srv, false));
        json_object_object_add(result, "serverInfo", server_info());
        json_object_object_add(result, "instructions", dm_registry_instructions(s->srv->registry));
        dm_mcp_reply(s, m->id, result, false);
}

/* The tool list is fixed for the life of a server process but depends on
 * its configuration (later: which agent credentials are present), so a
 * client may cache it briefly, privately. Required on modern tools/list. */
#define LIST_TTL_MS 60000

static void add_cache_hints_ttl(json_object *result, int ttl_ms)
{
        json_object_object_add(result, "ttlMs", json_object_new_int(ttl_ms));
        json_object_object_add(result, "cacheScope", json_object_new_string("private"));
}

static void add_cache_hints(json_object *result)
{
        add_cache_hints_ttl(result, LIST_TTL_MS);
}

static void handle_discover(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern)
{
        json_object *result = json_object_new_object();

        json_object *meta = json_object_new_object();

        /* 2026-07-28 moved the server's identity into _meta; clients read it
         * there and ignore a top-level serverInfo. */
        json_object_object_add(meta, "io.modelcontextprotocol/serverInfo", server_info());
        json_object_object_add(result, "supportedVersions", supported_versions());
        json_object_object_add(result, "capabilities", server_capabilities(s->srv, true));
        json_object_object_add(result, "instructions", dm_registry_instructions(s->srv->registry));
        add_cache_hints(result);
        json_object_object_add(result, "_meta", meta);
        dm_mcp_reply(s, m->id, result, true);
        (void)modern;
}

/* A page of tools as a json array that prints as the registry's texts,
 * joined: the descriptions are printed once for the server's life, not
 * copied and printed again by every tools/list (issue 35: the deep copies,
 * the printing and the frees were most of a call's CPU). The array has no
 * elements of its own: it is only ever printed, by dm_rpc_serialize. NULL
 * when memory ran out. *ret_next: the entry after the page. */
static json_object *tools_page(struct dm_registry *reg, const char *principal, size_t start, size_t n, size_t *ret_next)
{
        struct dm_buf b;
        json_object *tools;
        size_t i = start, shown = 0, len;
        const char *text;
        int r;

        dm_buf_init(&b, TOOLS_PAGE_MAX);
        r = dm_buf_append(&b, "[", 1);
        /* The cursor counts registry entries, seen or not: a page holds up
         * to TOOLS_PAGE_SIZE of the tools this principal may see. */
        for (; r == 0 && i < n && shown < TOOLS_PAGE_SIZE; i++) {
                const struct dm_tool *t = dm_registry_at(reg, i);
                if (!dm_registry_visible(t, principal))
                        continue;
                text = dm_registry_describe_text(reg, t, &len);
                if (!text || (shown && dm_buf_append(&b, ",", 1) < 0))
                        r = -ENOMEM;
                else
                        r = dm_buf_append(&b, text, len);
                shown++;
        }
        while (i < n && !dm_registry_visible(dm_registry_at(reg, i), principal))
                i++;
        if (r == 0)
                r = dm_buf_append(&b, "]", 1);
        tools = r == 0 ? json_object_new_array() : NULL;
        if (!tools) {
                dm_buf_release(&b);
                return NULL;
        }
        json_object_set_serializer(tools, json_object_userdata_to_json_string, dm_buf_steal(&b),
                                   json_object_free_userdata);
        *ret_next = i;
        return tools;
}

static void handle_tools_list(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern)
{
        json_object *v, *result, *tools;
        size_t start = 0, next, n = dm_registry_count(s->srv->registry);

        if (m->params && json_object_object_get_ex(m->params, "cursor", &v) && v) {
                const char *cur = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
                char *end = NULL;
                unsigned long off = cur && strncmp(cur, "t:", 2) == 0 ? strtoul(cur + 2, &end, 10) : 0;

                if (!cur || !end || *end || end == cur + 2 || off > n) {
                        dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS,
                                           "invalid cursor: pass the nextCursor of a previous tools/list", NULL);
                        return;
                }
                start = off;
        }
        tools = tools_page(s->srv->registry, s->principal, start, n, &next);
        if (!tools) {
                dm_mcp_reply_error(s, m->id, DM_RPC_INTERNAL_ERROR, "out of memory", NULL);
                return;
        }
        result = json_object_new_object();
        json_object_object_add(result, "tools", tools);
        if (next < n) {
                char cur[32];
                snprintf(cur, sizeof(cur), "t:%zu", next);
                json_object_object_add(result, "nextCursor", json_object_new_string(cur));
        }
        if (modern)
                add_cache_hints(result);
        dm_mcp_reply(s, m->id, result, modern);
}

static void handle_set_level(struct dm_mcp_session *s, struct dm_rpc_msg *m)
{
        json_object *v;
        enum dm_log_level level;

        if (!m->params || !json_object_object_get_ex(m->params, "level", &v) ||
            !json_object_is_type(v, json_type_string) || dm_log_level_parse(json_object_get_string(v), &level) < 0) {
                dm_mcp_reply_error(
                        s, m->id, DM_RPC_INVALID_PARAMS,
                        "logging/setLevel needs params.level: debug, info, notice, warning, error, critical, "
                        "alert or emergency",
                        NULL);
                return;
        }
        pthread_mutex_lock(&s->srv->lock);
        s->log_enabled = true;
        s->log_level = level;
        pthread_mutex_unlock(&s->srv->lock);
        dm_mcp_reply(s, m->id, json_object_new_object(), false);
}

/* ---- resources: run outputs (src/core/resources.h) -------------------------------- */

static void handle_resources_list(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern)
{
        json_object *result = json_object_new_object();

        /* One page: the list is capped (DM_RESOURCE_LIST_MAX), newest runs
         * first; a cursor from elsewhere gets the same first page. */
        json_object *list = dm_skills_resources(s->srv->skills), *mine;

        /* The skills' manifests (public), then the caller's run outputs. */
        mine = s->srv->res_ops ? s->srv->res_ops->list(s->srv->res_data, s->principal) : NULL;
        for (size_t i = 0; mine && i < json_object_array_length(mine); i++)
                json_object_array_add(list, json_object_get(json_object_array_get_idx(mine, i)));
        json_object_put(mine);
        json_object_object_add(result, "resources", list);
        /* Every run adds files: stale at once. */
        if (modern)
                add_cache_hints_ttl(result, 0);
        dm_mcp_reply(s, m->id, result, modern);
}

static void handle_resource_templates(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern)
{
        json_object *result = json_object_new_object();

        json_object_object_add(result, "resourceTemplates",
                               s->srv->res_ops ? s->srv->res_ops->templates(s->srv->res_data)
                                               : json_object_new_array());
        if (modern)
                add_cache_hints(result);
        dm_mcp_reply(s, m->id, result, modern);
}

static void handle_resources_read(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern)
{
        struct dm_error err = { 0 };
        json_object *v, *contents = NULL, *result, *data;
        int r;

        if (!m->params || !json_object_object_get_ex(m->params, "uri", &v) ||
            !json_object_is_type(v, json_type_string)) {
                dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS, "resources/read needs params.uri (a string)", NULL);
                return;
        }
        contents = dm_skills_read(s->srv->skills, json_object_get_string(v));
        if (contents) {
                result = json_object_new_object();
                json_object_object_add(result, "contents", contents);
                if (modern)
                        add_cache_hints(result); /* read once at start: fixed for the server's life */
                dm_mcp_reply(s, m->id, result, modern);
                return;
        }
        if (s->srv->res_ops)
                r = s->srv->res_ops->read(s->srv->res_data, s->principal, json_object_get_string(v), &contents, &err);
        else
                r = dm_error_set(&err, -ENOENT, "no resource '%.200s'", json_object_get_string(v));
        if (r < 0) {
                data = json_object_new_object();
                json_object_object_add(data, "uri", json_object_new_string(json_object_get_string(v)));
                /* Not found: -32002 on the legacy eras; 2026-07-28 took
                 * -32602 (Invalid Params, SEP-2164). */
                dm_mcp_reply_error(s, m->id,
                                   r == -ENOENT && !modern ? DM_RPC_RESOURCE_NOT_FOUND
                                   : r == -ENOMEM          ? DM_RPC_INTERNAL_ERROR
                                                           : DM_RPC_INVALID_PARAMS,
                                   err.msg, data);
                return;
        }
        result = json_object_new_object();
        json_object_object_add(result, "contents", contents);
        /* A running sandbox may still be writing the file. */
        if (modern)
                add_cache_hints_ttl(result, 0);
        dm_mcp_reply(s, m->id, result, modern);
}

/* ---- skills (SEP-2640, src/mcp/skills.h) ------------------------------------------ */

static void handle_skills_list(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern)
{
        json_object *result = json_object_new_object();

        /* One page: a handful of skills. */
        json_object_object_add(result, "skills", dm_skills_list(s->srv->skills));
        if (modern)
                add_cache_hints(result);
        dm_mcp_reply(s, m->id, result, modern);
}

static void handle_skills_get(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern)
{
        json_object *v, *entry, *result, *data;
        char msg[300];

        if (!m->params || !json_object_object_get_ex(m->params, "uri", &v) ||
            !json_object_is_type(v, json_type_string)) {
                dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS, "skills/get needs params.uri (a string)", NULL);
                return;
        }
        entry = dm_skills_get(s->srv->skills, json_object_get_string(v));
        if (!entry) {
                snprintf(msg, sizeof(msg), "no skill at '%.200s': skills/list names them", json_object_get_string(v));
                data = json_object_new_object();
                json_object_object_add(data, "uri", json_object_new_string(json_object_get_string(v)));
                dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS, msg, data);
                return;
        }
        result = json_object_new_object();
        json_object_object_add(result, "skill", entry);
        if (modern)
                add_cache_hints(result);
        dm_mcp_reply(s, m->id, result, modern);
}

static void *call_main(void *arg)
{
        struct dm_call *c = arg;
        struct dm_mcp_session *s = c->session;
        struct dm_mcp_server *srv = s->srv;
        json_object *args = NULL, *result;

        json_object_object_get_ex(c->params, "arguments", &args);
        result = c->task ? srv->task_ops->call(srv->task_data, c, args) : c->tool->handler(c, args);
        result = dm_mcp_ask_result(c, result);
        /* A cancelled request gets no response (notifications/cancelled). */
        if (result && !dm_cancel_fired(&c->cancel))
                dm_mcp_reply(s, c->id, result, c->modern);
        else
                json_object_put(result);

        pthread_mutex_lock(&srv->lock);
        for (struct dm_call **pp = &s->calls; *pp; pp = &(*pp)->next)
                if (*pp == c) {
                        *pp = c->next;
                        break;
                }
        s->n_calls--;
        pthread_cond_broadcast(&srv->idle);
        pthread_mutex_unlock(&srv->lock);

        dm_cancel_release(&c->cancel);
        json_object_put(c->id);
        json_object_put(c->progress_token);
        json_object_put(c->params);
        json_object_put(c->input_required);
        free(c);
        return NULL;
}

static void handle_tools_call(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern)
{
        json_object *v, *meta, *args;
        const struct dm_tool *tool;
        struct dm_call *c;
        pthread_attr_t attr;
        pthread_t th;
        int r;

        if (!m->params || !json_object_object_get_ex(m->params, "name", &v) ||
            !json_object_is_type(v, json_type_string)) {
                dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS, "tools/call needs params.name (a string)", NULL);
                return;
        }
        tool = dm_registry_find(s->srv->registry, json_object_get_string(v));
        if (!dm_registry_visible(tool, s->principal)) {
                char msg[300];
                snprintf(msg, sizeof(msg), "unknown tool '%.200s': tools/list names the tools",
                         json_object_get_string(v));
                dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS, msg, NULL);
                return;
        }
        if (json_object_object_get_ex(m->params, "arguments", &args) && args &&
            !json_object_is_type(args, json_type_object)) {
                dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS, "params.arguments must be an object", NULL);
                return;
        }

        c = calloc(1, sizeof(*c));
        if (!c || dm_cancel_init(&c->cancel) < 0) {
                free(c);
                dm_mcp_reply_error(s, m->id, DM_RPC_INTERNAL_ERROR, "out of resources", NULL);
                return;
        }
        c->session = s;
        c->tool = tool;
        c->modern = modern;
        c->task = dm_mcp_request_declares_tasks(s, m->params, modern) &&
                  s->srv->task_ops->supports(s->srv->task_data, tool);
        /* The call's thread gets copies, never references into the message:
         * json-c's reference counts are not atomic, and this thread frees
         * the message as soon as it returns (ThreadSanitizer saw it). */
        json_object_deep_copy(m->id, &c->id, NULL);
        json_object_deep_copy(m->params, &c->params, NULL);
        meta = dm_mcp_get_meta(m->params);
        if (meta && json_object_object_get_ex(meta, "progressToken", &v) &&
            (json_object_is_type(v, json_type_string) || json_object_is_type(v, json_type_int)))
                json_object_deep_copy(v, &c->progress_token, NULL);
        if (!c->id || !c->params) {
                dm_cancel_release(&c->cancel);
                json_object_put(c->id);
                json_object_put(c->params);
                json_object_put(c->progress_token);
                free(c);
                dm_mcp_reply_error(s, m->id, DM_RPC_INTERNAL_ERROR, "out of memory", NULL);
                return;
        }

        pthread_mutex_lock(&s->srv->lock);
        if (s->closing) {
                pthread_mutex_unlock(&s->srv->lock);
                dm_mcp_reply_error(s, m->id, DM_RPC_INTERNAL_ERROR, "the server is shutting down", NULL);
                goto fail;
        }
        c->next = s->calls;
        s->calls = c;
        s->n_calls++;
        pthread_mutex_unlock(&s->srv->lock);

        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        r = pthread_create(&th, &attr, call_main, c);
        pthread_attr_destroy(&attr);
        if (r == 0)
                return;

        pthread_mutex_lock(&s->srv->lock);
        s->calls = c->next;
        s->n_calls--;
        pthread_cond_broadcast(&s->srv->idle);
        pthread_mutex_unlock(&s->srv->lock);
        dm_mcp_reply_error(s, m->id, DM_RPC_INTERNAL_ERROR, "cannot start a thread for the call", NULL);
fail:
        dm_cancel_release(&c->cancel);
        json_object_put(c->id);
        json_object_put(c->progress_token);
        json_object_put(c->params);
        free(c);
}

static void handle_cancelled(struct dm_mcp_session *s, struct dm_rpc_msg *m)
{
        json_object *rid;

        if (!m->params || !json_object_object_get_ex(m->params, "requestId", &rid))
                return;
        bool found = false;

        pthread_mutex_lock(&s->srv->lock);
        for (struct dm_call *c = s->calls; c; c = c->next)
                if (json_object_equal(c->id, rid)) {
                        dm_cancel_fire(&c->cancel);
                        found = true;
                }
        pthread_cond_broadcast(&s->srv->asked);
        pthread_mutex_unlock(&s->srv->lock);
        /* Logged outside the lock: the log hook takes it to find sessions. */
        if (found)
                log_info("request %s cancelled by the client", json_object_to_json_string(rid));
}

void dm_mcp_session_handle(struct dm_mcp_session *s, const char *data, size_t len)
{
        struct dm_rpc_msg m;
        int era;
        bool modern;

        dm_rpc_parse(data, len, &m);
        switch (m.kind) {
        case DM_RPC_INVALID: dm_mcp_reply_error(s, m.id, m.error_code, m.error_message, NULL); goto out;
        case DM_RPC_RESPONSE:
                /* An answer to a question (server-ask.c), or a stray: logged. */
                dm_mcp_ask_answer(s, &m);
                goto out;
        default: break;
        }

        era = classify_era(s, &m);
        if (era < 0)
                goto out;
        modern = era == 1;

        if (m.kind == DM_RPC_NOTIFICATION) {
                if (strcmp(m.method, "notifications/cancelled") == 0)
                        handle_cancelled(s, &m);
                /* notifications/initialized and others need nothing. */
                goto out;
        }

        if (strcmp(m.method, "tools/call") == 0)
                handle_tools_call(s, &m, modern);
        else if (strcmp(m.method, "tools/list") == 0)
                handle_tools_list(s, &m, modern);
        else if (strcmp(m.method, "server/discover") == 0)
                handle_discover(s, &m, modern);
        else if (strcmp(m.method, "resources/list") == 0)
                handle_resources_list(s, &m, modern);
        else if (strcmp(m.method, "resources/templates/list") == 0)
                handle_resource_templates(s, &m, modern);
        else if (strcmp(m.method, "resources/read") == 0)
                handle_resources_read(s, &m, modern);
        else if (s->srv->task_ops && modern &&
                 (strcmp(m.method, "tasks/get") == 0 || strcmp(m.method, "tasks/update") == 0 ||
                  strcmp(m.method, "tasks/cancel") == 0))
                dm_mcp_handle_tasks(s, &m, modern);
        else if (strcmp(m.method, "skills/list") == 0 && dm_skills_count(s->srv->skills))
                handle_skills_list(s, &m, modern);
        else if (strcmp(m.method, "skills/get") == 0 && dm_skills_count(s->srv->skills))
                handle_skills_get(s, &m, modern);
        else if (!modern && strcmp(m.method, "initialize") == 0)
                handle_initialize(s, &m);
        else if (!modern && strcmp(m.method, "ping") == 0)
                dm_mcp_reply(s, m.id, json_object_new_object(), false);
        else if (!modern && strcmp(m.method, "logging/setLevel") == 0)
                handle_set_level(s, &m);
        else {
                char msg[300];
                snprintf(msg, sizeof(msg), "method not found: '%.200s'%s", m.method,
                         modern && (strcmp(m.method, "ping") == 0 || strcmp(m.method, "initialize") == 0)
                                 ? " (not part of protocol " DM_MCP_MODERN_VERSION ")"
                                 : "");
                dm_mcp_reply_error(s, m.id, DM_RPC_METHOD_NOT_FOUND, msg, NULL);
        }
out:
        dm_rpc_msg_release(&m);
}

/* ---- notifications to a session, from outside a call ---------------------- */

struct dm_mcp_server *dm_call_server(struct dm_call *call)
{
        return call->session->srv;
}
uint64_t dm_call_session_id(struct dm_call *call)
{
        return call->session->id;
}
const struct dm_tool *dm_call_tool(struct dm_call *call)
{
        return call->tool;
}

const char *dm_call_principal(struct dm_call *call)
{
        return call->session->principal;
}

int dm_mcp_server_notify(struct dm_mcp_server *srv, uint64_t session_id, enum dm_log_level level, const char *method,
                         json_object *params)
{
        struct dm_mcp_session *target = NULL;

        pthread_mutex_lock(&srv->lock);
        for (struct dm_mcp_session *s = srv->sessions; s; s = s->next)
                if (s->id == session_id && !s->closing) {
                        /* A client that chose a log level gets what is at or above it. */
                        if (!s->log_enabled || level >= s->log_level) {
                                target = s;
                                s->refs++;
                        }
                        break;
                }
        pthread_mutex_unlock(&srv->lock);
        if (!target) {
                json_object_put(params);
                return -ENOENT;
        }
        dm_mcp_send_msg(target, dm_rpc_notification(method, params));
        pthread_mutex_lock(&srv->lock);
        target->refs--;
        pthread_cond_broadcast(&srv->idle);
        pthread_mutex_unlock(&srv->lock);
        return 0;
}
