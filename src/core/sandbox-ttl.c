/* SPDX-License-Identifier: MIT */
/* The TTL reaper: a thread of the server that destroys expired persistent
 * sandboxes every ttl_interval_s (DEMESNE_SANDBOX_SWEEP_SECONDS), through
 * dm_sandbox_reap_expired, and expired snapshots (dm_snapshot_reap_expired),
 * until dm_sandbox_reaper_stop. */
#include "config.h"
#include "src/core/sandbox.h"
#include "src/core/sandbox-internal.h"

#include <pthread.h>
#include <time.h>

#include "src/core/context.h"
#include "src/core/snapshot.h"

static void *reaper_main(void *arg)
{
        struct dm_context *ctx = arg;

        pthread_mutex_lock(&ctx->sandboxes->ttl_lock);
        while (!ctx->sandboxes->ttl_stop) {
                struct timespec ts;

                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += ctx->sandboxes->ttl_interval_s;
                pthread_cond_timedwait(&ctx->sandboxes->ttl_cond, &ctx->sandboxes->ttl_lock, &ts);
                if (ctx->sandboxes->ttl_stop)
                        break;
                pthread_mutex_unlock(&ctx->sandboxes->ttl_lock);
                dm_sandbox_reap_expired(ctx);
                dm_snapshot_reap_expired(ctx);
                pthread_mutex_lock(&ctx->sandboxes->ttl_lock);
        }
        pthread_mutex_unlock(&ctx->sandboxes->ttl_lock);
        return NULL;
}

int dm_sandbox_reaper_start(struct dm_context *ctx, int interval_s)
{
        int r;

        pthread_mutex_lock(&ctx->sandboxes->ttl_lock);
        ctx->sandboxes->ttl_interval_s = interval_s > 0 ? interval_s : 60;
        ctx->sandboxes->ttl_stop = false;
        r = ctx->sandboxes->ttl_running ? 0 : pthread_create(&ctx->sandboxes->ttl_thread, NULL, reaper_main, ctx);
        if (r == 0)
                ctx->sandboxes->ttl_running = true;
        pthread_mutex_unlock(&ctx->sandboxes->ttl_lock);
        return -r;
}

void dm_sandbox_reaper_stop(struct dm_context *ctx)
{
        pthread_mutex_lock(&ctx->sandboxes->ttl_lock);
        if (!ctx->sandboxes->ttl_running) {
                pthread_mutex_unlock(&ctx->sandboxes->ttl_lock);
                return;
        }
        ctx->sandboxes->ttl_stop = true;
        pthread_cond_broadcast(&ctx->sandboxes->ttl_cond);
        pthread_mutex_unlock(&ctx->sandboxes->ttl_lock);
        pthread_join(ctx->sandboxes->ttl_thread, NULL);
        ctx->sandboxes->ttl_running = false;
}
