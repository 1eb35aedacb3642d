/* SPDX-License-Identifier: MIT */
/* The admission step of a claim (src/core/claim.h): the caps from the
 * server's settings, the table from the server object. */
#include "config.h"
#include "src/core/claim.h"

#include "src/core/admission.h"
#include "src/basic/principal.h"

static int reserve(struct dm_context *ctx, const char *principal, struct dm_cancel *cancel, struct dm_slot **ret,
                   struct dm_error *err)
{
        *ret = NULL;
        /* The host's callers are not capped; a one-off run has no table. */
        if (!ctx->admission || dm_principal_depth(principal ? principal : "") == 0)
                return 0;
        return dm_admission_claim(
                ctx->admission, principal,
                &(struct dm_admission_caps){ .max_children = ctx->cfg.max_children, .max_tree = ctx->cfg.max_tree },
                cancel, ret, err);
}

int dm_claim_reserve(struct dm_context *ctx, const char *principal, struct dm_slot **ret, struct dm_error *err)
{
        return reserve(ctx, principal, NULL, ret, err);
}

int dm_claim_admit(struct dm_context *ctx, const char *principal, struct dm_slot *reserved, struct dm_cancel *cancel,
                   struct dm_slot **ret, struct dm_error *err)
{
        if (!reserved)
                return reserve(ctx, principal, cancel, ret, err);
        *ret = reserved;
        /* Closed between the job's call and its start: it ends here. */
        if (dm_admission_set_cancel(reserved, cancel) < 0)
                return dm_error_set(err, -ECANCELED, "cancelled: the sandbox this job comes from is being destroyed");
        return 0;
}

void dm_claim_release(struct dm_slot *s)
{
        dm_admission_release(s);
}
