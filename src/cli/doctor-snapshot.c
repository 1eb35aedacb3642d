/* SPDX-License-Identifier: MIT */
/* `demesne doctor`'s lines on snapshots and pausing: the engine is asked
 * for real (a small container of the base image is paused, resumed and
 * committed, then removed with its image), and CRIU, which memory
 * snapshots would need, is asked `criu check` (reported, never needed). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/cli/doctor.h"
#include "src/core/images.h"
#include "src/core/launch.h"
#include "src/core/snapshot.h"

static void line(struct dm_doctor_tally *t, bool good, const char *what, const char *detail)
{
        printf("%s %s: %s\n", good ? "feature" : "unavail", what, detail);
        t->unavailable += !good;
}

/* A started probe container (its id in *ret), labelled as a run of this
 * doctor, so that a sweep removes it should the doctor die. */
static int probe_start(struct dm_context *ctx, struct dm_backend *b, char **ret, struct dm_error *err)
{
        static const char *const argv[] = { "sleep", "300", NULL };
        const struct dm_image_info *img;
        struct dm_launch_ids ids;
        char owner[160];
        const char *labels[] = { owner, "demesne.kind=script", ctx->root_label, NULL };
        struct dm_container_spec spec = { .argv = argv, .labels = labels };
        int r = dm_image_lookup("base", &img, err);

        snprintf(owner, sizeof(owner), "demesne.owner=%s", ctx->owner);
        spec.image = r < 0 ? NULL : dm_image_ref(img);
        dm_launch_harden(ctx, &spec);
        if (r >= 0)
                r = dm_launch_userns(ctx, b, &spec, &ids, err);
        if (r >= 0)
                r = b->ops->create(b, &spec, ret, err);
        if (r >= 0 && (r = b->ops->start(b, *ret, err)) < 0) {
                struct dm_error e2 = { 0 };

                b->ops->destroy(b, *ret, &e2);
                free(*ret);
                *ret = NULL;
        }
        return r;
}

static void engine_lines(struct dm_context *ctx, struct dm_backend *b, struct dm_doctor_tally *t)
{
        struct dm_error err = { 0 }, e2 = { 0 };
        char *id = NULL, *image = NULL, tag[64], ref[128], detail[1024];
        const char *labels[] = { ctx->root_label, NULL };
        int r;

        if (!b->ops->pause || !b->ops->commit) {
                snprintf(detail, sizeof(detail), "the %s backend %s", b->ops->name,
                         b->ops->pause ? "pauses, but cannot take snapshots (no commit)" : "has neither");
                line(t, b->ops->pause != NULL, "pause (sandbox_pause)", b->ops->pause ? "yes" : detail);
                line(t, false, "snapshots (sandbox_snapshot)", detail);
                return;
        }
        if (probe_start(ctx, b, &id, &err) < 0) {
                snprintf(detail, sizeof(detail), "not checked: no probe container (%.900s)", err.msg);
                line(t, false, "pause and snapshots", detail);
                return;
        }
        r = b->ops->pause(b, id, &err);
        if (r >= 0)
                r = b->ops->unpause(b, id, &err);
        line(t, r >= 0, "pause (sandbox_pause, sandbox_resume)", r >= 0 ? "works on this engine" : err.msg);
        dm_error_clear(&err);
        snprintf(tag, sizeof(tag), "doctor-%d", (int)getpid());
        snprintf(ref, sizeof(ref), "%s:%s", DM_SNAPSHOT_REPO, tag);
        r = b->ops->commit(b, id, &(struct dm_commit_spec){ .repo = DM_SNAPSHOT_REPO, .tag = tag, .labels = labels },
                           &image, &err);
        line(t, r >= 0, "snapshots (sandbox_snapshot: the engine's commit)",
             r >= 0 ? "the engine commits a container's file system" : err.msg);
        if (r >= 0 && b->ops->image_remove(b, ref, &e2) < 0)
                fprintf(stderr, "demesne: warning: remove probe image '%s': %s\n", ref, e2.msg);
        free(image);
        b->ops->destroy(b, id, &e2);
        free(id);
}

/* The first line `criu check` prints, and whether it passed. */
static void criu_line(struct dm_doctor_tally *t)
{
        char out[512] = "", detail[768];
        FILE *p = popen("criu check 2>&1", "re");
        int status;

        if (!p) {
                line(t, false, "memory snapshots (CRIU)", "not offered: criu cannot be run");
                return;
        }
        if (!fgets(out, sizeof(out), p))
                out[0] = '\0';
        while (fgetc(p) != EOF)
                ;
        status = pclose(p);
        out[strcspn(out, "\n")] = '\0';
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                snprintf(detail, sizeof(detail), "not offered: criu is not installed (nothing needs it yet)");
        else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                snprintf(detail, sizeof(detail), "not offered yet; `criu check` passes here (%.300s)", out);
        else
                snprintf(detail, sizeof(detail),
                         "not offered: `criu check` fails here (%.300s); snapshots keep file "
                         "systems only",
                         out);
        /* Reported, not counted: no tool advertises memory snapshots. */
        printf("note    memory snapshots (CRIU): %s\n", detail);
        (void)t;
}

void dm_doctor_snapshots(struct dm_context *ctx, struct dm_backend *b, struct dm_doctor_tally *t)
{
        if (b)
                engine_lines(ctx, b, t);
        criu_line(t);
}
