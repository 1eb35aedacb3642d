/* SPDX-License-Identifier: MIT */
/* The tools server: the registry, the MCP server serving it, nested
 * sandboxes' endpoints and the host tool proxy, made in one place and
 * ended in one teardown. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "src/core/jobs.h"
#include "src/tools/server-internal.h"
#include "src/tools/tools.h"

/* ctx->after_sandbox_destroy: its nested endpoint and its previews end. */
static void after_sandbox_destroy(struct dm_context *ctx, const char *id)
{
        dm_tools_nested_end(ctx, id);
        dm_tools_previews_end(ctx, id);
}

int dm_tools_server_open(struct dm_context *ctx, struct dm_tools_server **ret, struct dm_error *err)
{
        struct dm_tools_server *t = calloc(1, sizeof(*t));
        int r;

        *ret = NULL;
        if (!t)
                return dm_error_set(err, -ENOMEM, "out of memory");
        t->ctx = ctx;
        t->registry = dm_registry_new();
        if (!t->registry) {
                free(t);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        dm_tools_configure(ctx, t->registry);
        /* A malformed host servers file stops the server here, as a bad
         * variable does; a host server that fails only loses its tools. */
        r = dm_tools_hostmcp_open(ctx, t->registry, &t->hostmcp, err);
        if (r < 0) {
                dm_registry_free(t->registry);
                free(t);
                return r;
        }
        t->mcp = dm_tools_mcp_new(ctx, t->registry);
        r = t->mcp ? dm_tools_nested_new(ctx, t->mcp, &t->nested, err) : dm_error_set(err, -ENOMEM, "out of memory");
        t->previews = dm_tools_previews_new();
        if (r >= 0 && !t->previews)
                r = dm_error_set(err, -ENOMEM, "out of memory");
        if (r < 0) {
                dm_tools_previews_free(t->previews);
                dm_tools_nested_free(ctx, t->nested);
                dm_mcp_server_free(t->mcp);
                dm_tools_hostmcp_close(t->hostmcp);
                dm_registry_free(t->registry);
                free(t);
                return r;
        }
        ctx->after_sandbox_destroy = after_sandbox_destroy;
        ctx->tools = t;
        *ret = t;
        return 0;
}

struct dm_mcp_server *dm_tools_server_mcp(const struct dm_tools_server *t)
{
        return t->mcp;
}

void dm_tools_server_close(struct dm_tools_server *t)
{
        struct dm_nested *n;

        if (!t)
                return;
        /* Nested sandboxes' endpoints stop first (their calls are
         * cancelled); jobs end before the MCP server goes: their last act
         * is a notification. */
        n = t->nested;
        dm_tools_nested_free(t->ctx, n);
        t->nested = NULL;
        /* After the reaper stopped (nested_free) and the transport ended:
         * nothing destroys a sandbox any more. */
        dm_tools_previews_free(t->previews);
        t->previews = NULL;
        dm_jobs_shutdown(t->ctx->jobs);
        dm_mcp_server_free(t->mcp);
        /* The registry's copies of the host tools point into the proxy:
         * it goes after the server whose calls use them, before the
         * registry. */
        dm_tools_hostmcp_close(t->hostmcp);
        dm_registry_free(t->registry);
        t->ctx->tools = NULL;
        free(t);
}
