/* SPDX-License-Identifier: MIT */
/* A run's output files as resource_link items of its tool result, and the
 * claim that lets only the caller's principal read them back. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/core/resources.h"
#include "src/tools/tools.h"

_Static_assert(DM_MCP_PRINCIPAL_MAX <= DM_RESOURCE_PRINCIPAL_MAX, "a session's principal fits a claim");

static json_object *outputs_list(void *data, const char *principal)
{
        struct dm_context *ctx = data;

        return dm_resources_list(ctx->resources, ctx->cfg.output_root, principal);
}

static json_object *outputs_templates(void *data)
{
        (void)data;
        return dm_resources_templates();
}

static int outputs_read(void *data, const char *principal, const char *uri, json_object **ret, struct dm_error *err)
{
        struct dm_context *ctx = data;

        return dm_resources_read(ctx->resources, ctx->cfg.output_root, principal, uri, ret, err);
}

static const struct dm_mcp_resource_ops outputs_ops = {
        .list = outputs_list,
        .templates = outputs_templates,
        .read = outputs_read,
};

struct dm_mcp_server *dm_tools_mcp_new(struct dm_context *ctx, struct dm_registry *registry)
{
        struct dm_mcp_server *srv = dm_mcp_server_new(ctx, registry, ctx ? ctx->cfg.skills_dir : NULL);

        if (srv && ctx) {
                dm_mcp_server_set_resources(srv, &outputs_ops, ctx);
                dm_mcp_server_set_tasks(srv, &dm_tools_task_ops, ctx);
                dm_mcp_server_set_ask_timeout(srv, ctx->cfg.elicit_off ? 0 : (int)ctx->cfg.elicit_timeout_ms);
        }
        return srv;
}

void dm_tools_claim_outputs(struct dm_context *ctx, const char *principal, json_object *out)
{
        json_object *v;

        if (out && json_object_object_get_ex(out, "run_id", &v) && json_object_is_type(v, json_type_string))
                dm_resources_claim(ctx->resources, json_object_get_string(v), principal);
}

json_object *dm_tools_result_with_links(struct dm_call *call, json_object *out)
{
        struct dm_context *ctx = dm_call_context(call);
        json_object *result, *content, *links, *v;
        const char *run;
        size_t omitted = 0;

        if (!out || !json_object_object_get_ex(out, "run_id", &v) || !json_object_is_type(v, json_type_string))
                return dm_tool_result_ok(out);
        run = json_object_get_string(v);
        /* A job's result may be waited on by anyone who knows its id; the
         * links go only to the principal whose call made the run. */
        if (!dm_resources_owned(ctx->resources, run, dm_call_principal(call)))
                return dm_tool_result_ok(out);
        links = dm_resources_links(ctx->cfg.output_root, run, DM_RESOURCE_LINKS_MAX, &omitted);
        result = dm_tool_result_ok(out);
        if (json_object_object_get_ex(result, "content", &content)) {
                for (size_t i = 0; i < json_object_array_length(links); i++)
                        json_object_array_add(content, json_object_get(json_object_array_get_idx(links, i)));
                if (omitted) {
                        char note[200];
                        json_object *t = json_object_new_object();

                        snprintf(note, sizeof(note),
                                 "%zu more output files are not linked here: resources/list names them all", omitted);
                        json_object_object_add(t, "type", json_object_new_string("text"));
                        json_object_object_add(t, "text", json_object_new_string(note));
                        json_object_array_add(content, t);
                }
        }
        json_object_put(links);
        return result;
}

void dm_tools_link_file(struct dm_call *call, json_object *result, const char *dir, const char *path, int64_t size)
{
        json_object *content;

        if (!dm_resources_owned(dm_call_context(call)->resources, dir, dm_call_principal(call)) ||
            !json_object_object_get_ex(result, "content", &content))
                return;
        json_object_array_add(content, dm_resources_describe(dir, path, size, "resource_link"));
}
