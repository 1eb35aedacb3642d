/* SPDX-License-Identifier: MIT */
/* Pausing and resuming a persistent sandbox: the engine's pause (the cgroup
 * freezer), and the record saying so, so that an exec finds out before it
 * reaches a frozen shim. */
#include "config.h"
#include "src/core/sandbox.h"

#include <errno.h>

#include "src/basic/log.h"
#include "src/core/sandbox-internal.h"

static int set_paused(struct dm_context *ctx, struct dm_sandbox *sb, bool pause, struct dm_error *err)
{
        const char *verb = pause ? "pause" : "resume";
        struct dm_backend *b;
        int r = dm_context_backend(ctx, &b, err);

        if (r < 0)
                return dm_error_wrap(err, "%s sandbox '%s'", verb, sb->id);
        if (!(pause ? b->ops->pause : b->ops->unpause))
                return dm_error_set(err, -EOPNOTSUPP, "the %s backend cannot %s sandboxes", b->ops->name, verb);
        r = pause ? b->ops->pause(b, sb->container, err) : b->ops->unpause(b, sb->container, err);
        if (r < 0)
                return dm_error_wrap(err, "%s sandbox '%s'", verb, sb->id);
        sb->paused = pause;
        r = dm_sandbox_record_write(ctx, sb, err);
        if (r < 0) {
                struct dm_error e2 = { 0 };

                /* The record could not say so: leave the sandbox as it says. */
                if ((pause ? b->ops->unpause(b, sb->container, &e2) : b->ops->pause(b, sb->container, &e2)) < 0)
                        log_warning("sandbox %s: %s", sb->id, e2.msg);
                sb->paused = !pause;
                return r;
        }
        log_info("sandbox %s %s", sb->id, pause ? "paused" : "resumed");
        return 0;
}

int dm_sandbox_check_awake(const struct dm_sandbox *sb, struct dm_error *err)
{
        if (!sb->paused)
                return 0;
        return dm_error_set(err, -EAGAIN, "sandbox '%s' is paused: sandbox_resume it first", sb->id);
}

int dm_sandbox_pause(struct dm_context *ctx, struct dm_sandbox *sb, struct dm_error *err)
{
        return set_paused(ctx, sb, true, err);
}

int dm_sandbox_resume(struct dm_context *ctx, struct dm_sandbox *sb, struct dm_error *err)
{
        return set_paused(ctx, sb, false, err);
}
