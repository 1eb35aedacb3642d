/* SPDX-License-Identifier: MIT */
/* The tasks extension's side of the MCP server (SEP-2663): who may use it,
 * and its methods. The tasks themselves are the application's
 * (dm_mcp_task_ops, src/tools/tasks.c). */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "src/mcp/server-internal.h"

/* Whether caps (client capabilities) has extensions[tasks] as an object. */
static bool caps_have_tasks(json_object *caps)
{
        json_object *ext, *t;

        return caps && json_object_object_get_ex(caps, "extensions", &ext) &&
               json_object_object_get_ex(ext, DM_MCP_TASKS_EXTENSION, &t) && json_object_is_type(t, json_type_object);
}

/* Whether this request may get a CreateTaskResult and use tasks/ methods:
 * a 2026-07-28 request whose own _meta declares the extension (SEP-2663:
 * "regardless of prior declarations"). Never on the legacy eras: their
 * results have no resultType to tell a task from a CallToolResult, and
 * clients that declare the extension at initialize (the Inspector 2.12)
 * read a CreateTaskResult there as a CallToolResult without content. */
bool dm_mcp_request_declares_tasks(struct dm_mcp_session *s, json_object *params, bool modern)
{
        json_object *meta = dm_mcp_get_meta(params), *caps = NULL;

        return s->srv->task_ops && modern && meta && json_object_object_get_ex(meta, META_CAPS, &caps) &&
               caps_have_tasks(caps);
}

/* tasks/get, tasks/update, tasks/cancel (SEP-2663). */
void dm_mcp_handle_tasks(struct dm_mcp_session *s, struct dm_rpc_msg *m, bool modern)
{
        const struct dm_mcp_task_ops *ops = s->srv->task_ops;
        struct dm_error err = { 0 };
        json_object *v, *result = NULL, *data;
        const char *id;
        int r;

        if (!dm_mcp_request_declares_tasks(s, m->params, modern)) {
                data = json_object_new_object();
                json_object *req = json_object_new_object(), *ext = json_object_new_object();
                json_object_object_add(ext, DM_MCP_TASKS_EXTENSION, json_object_new_object());
                json_object_object_add(req, "extensions", ext);
                json_object_object_add(data, "requiredCapabilities", req);
                dm_mcp_reply_error(s, m->id, DM_RPC_MISSING_CLIENT_CAPABILITY,
                                   "Missing required client capability: declare the extension " DM_MCP_TASKS_EXTENSION
                                   " in _meta." META_CAPS ".extensions to use tasks",
                                   data);
                return;
        }
        if (!m->params || !json_object_object_get_ex(m->params, "taskId", &v) ||
            !json_object_is_type(v, json_type_string)) {
                dm_mcp_reply_error(s, m->id, DM_RPC_INVALID_PARAMS, "tasks/ methods need params.taskId (a string)",
                                   NULL);
                return;
        }
        id = json_object_get_string(v);
        if (strcmp(m->method, "tasks/get") == 0)
                r = ops->get(s->srv->task_data, s->principal, id, &result, &err);
        else if (strcmp(m->method, "tasks/cancel") == 0)
                r = ops->cancel(s->srv->task_data, s->principal, id, &err);
        else
                /* tasks/update: no demesne task ever waits for input (yet);
                 * responses to keys never issued are ignored, as the
                 * extension says: the ack, once the task is known. */
                r = ops->get(s->srv->task_data, s->principal, id, &result, &err);
        if (r < 0) {
                dm_mcp_reply_error(s, m->id, r == -ENOENT ? DM_RPC_INVALID_PARAMS : DM_RPC_INTERNAL_ERROR, err.msg,
                                   NULL);
                return;
        }
        if (strcmp(m->method, "tasks/get") != 0) {
                json_object_put(result);
                result = json_object_new_object();
        }
        /* Every answer here is the method's standard result shape. */
        json_object_object_add(result, "resultType", json_object_new_string("complete"));
        dm_mcp_reply(s, m->id, result, modern);
}
