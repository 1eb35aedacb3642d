/* SPDX-License-Identifier: MIT */
/* The end of a nested subtree (src/core/cascade.h): the admission table
 * closes it, the jobs and the sandboxes under it go. */
#include "config.h"
#include "src/core/cascade.h"

#include <errno.h>
#include <stdlib.h>

#include "src/core/admission.h"
#include "src/core/jobs.h"
#include "src/core/sandbox.h"
#include "src/core/snapshot.h"
#include "src/basic/log.h"

#define JOBS_MAX 64    /* jobs cancelled at once; those after wait for their slot's cancel */
#define LIST_MAX 1024  /* ids read for a cascade: DEMESNE_MAX_TREE is at most this */
#define DRAIN_MS 60000 /* a cascade waits this long for what runs below to end */

void dm_cascade_close(struct dm_context *ctx, const char *principal)
{
        dm_admission_close(ctx->admission, principal);
}

size_t dm_cascade_end(struct dm_context *ctx, const char *principal, const char *id)
{
        char job_ids[JOBS_MAX][32];
        char(*ids)[DM_SANDBOX_ID_LEN];
        struct dm_error err = { 0 };
        size_t n;

        /* What is in flight (a create, a run, a job at any level below) is
         * cancelled and waited for, so that the records listed next are
         * all there will be. */
        n = ctx->jobs ? dm_jobs_running(ctx->jobs, principal, false, job_ids, JOBS_MAX) : 0;
        for (size_t i = 0; i < n && i < JOBS_MAX; i++) {
                enum dm_job_status st;

                dm_jobs_cancel(ctx->jobs, job_ids[i], 10000, &st);
        }
        if (dm_admission_drain(ctx->admission, principal, DRAIN_MS) < 0)
                log_warning("%s: work below it still runs after %d s; its sandboxes are destroyed anyway", id,
                            DRAIN_MS / 1000);
        ids = calloc(LIST_MAX, sizeof(*ids));
        n = ids ? dm_sandbox_ids(ctx, principal, false, ids, LIST_MAX) : 0;
        for (size_t i = 0; i < n && i < LIST_MAX; i++) {
                if (dm_sandbox_destroy(ctx, ids[i], &err) < 0 && err.code != -ENOENT)
                        log_warning("sandbox %s (below %s): %s", ids[i], id, err.msg);
                dm_error_clear(&err);
        }
        free(ids);
        /* Its snapshots too: what it kept for itself (src/core/snapshot.h). */
        dm_snapshot_delete_tree(ctx, principal);
        dm_admission_reopen(ctx->admission, principal);
        return n;
}
