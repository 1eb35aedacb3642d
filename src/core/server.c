/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/server.h"

#include <errno.h>

#include "src/core/admission.h"
#include "src/core/agent.h"
#include "src/core/children.h"
#include "src/core/egress.h"
#include "src/core/images.h"
#include "src/core/inputs.h"
#include "src/core/pool.h"
#include "src/core/sandbox.h"
#include "src/core/snapshot.h"
#include "src/basic/log.h"

static void sweep_rest(struct dm_context *ctx)
{
        dm_agent_sweep(ctx);
        dm_inputs_sweep(ctx);
        /* A dead server's child runs first: their parents may be among
         * the sandboxes that go next. */
        dm_children_collect_interrupted(ctx);
        dm_sandbox_sweep_nested(ctx);
        dm_snapshot_sweep(ctx);
}

/* Admission counts persistent sandboxes by their records: those an
 * earlier server made too. */
static size_t sandbox_records(void *userdata, const char *principal, bool exact, char (*ids)[DM_ADMISSION_KEY_LEN],
                              size_t max)
{
        return dm_sandbox_ids(userdata, principal, exact, ids, max);
}

int dm_server_init(struct dm_context *ctx, struct dm_error *err)
{
        int r = dm_context_init(ctx, err);

        if (r < 0)
                return r;
        ctx->sandboxes = dm_sandboxes_new();
        ctx->egress = dm_egress_host_new();
        r = ctx->sandboxes && ctx->egress ? dm_admission_new(sandbox_records, ctx, &ctx->admission) : -ENOMEM;
        if (r < 0) {
                dm_context_release(ctx);
                dm_sandboxes_free(ctx->sandboxes);
                dm_egress_host_free(ctx->egress);
                ctx->sandboxes = NULL;
                ctx->egress = NULL;
                return dm_error_set(err, r, "out of memory");
        }
        ctx->after_orphan_sweep = sweep_rest;
        return 0;
}

void dm_server_start(struct dm_context *ctx, bool pool, bool ttl_reaper)
{
        struct dm_error err = { 0 };

        dm_context_warm_up(ctx);
        if (pool && ctx->cfg.pool_size > 0 && !ctx->pool &&
            dm_pool_start(ctx, DM_IMAGE_DEFAULT, (int)ctx->cfg.pool_size, &ctx->pool, &err) < 0)
                log_warning("no warm pool: %s", err.msg);
        if (ttl_reaper && dm_sandbox_reaper_start(ctx, (int)ctx->cfg.sweep_s) < 0)
                log_warning("no TTL reaper: persistent sandboxes outlive their TTL until the next server's sweep");
}

void dm_server_release(struct dm_context *ctx)
{
        dm_sandbox_reaper_stop(ctx);
        /* Jobs first: cancelling them queues their containers for removal. */
        dm_jobs_free(ctx->jobs);
        ctx->jobs = NULL;
        /* Then the warm containers no run took. */
        dm_pool_stop(ctx->pool);
        ctx->pool = NULL;
        dm_context_drain(ctx);
        /* Sandboxes outlive the server: their shims reconnect to the next. */
        dm_sandbox_shims_release(ctx);
        dm_egress_shutdown(ctx);
        dm_context_release(ctx);
        /* After the jobs and the reap queue: nothing holds a slot. */
        dm_admission_free(ctx->admission);
        ctx->admission = NULL;
        dm_sandboxes_free(ctx->sandboxes);
        ctx->sandboxes = NULL;
        dm_egress_host_free(ctx->egress);
        ctx->egress = NULL;
}
