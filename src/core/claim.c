/* SPDX-License-Identifier: MIT */
/* The claim and the release of the core's lifecycle (src/core/claim.h):
 * the caps from the server's settings, the table and the budget from the
 * server object. */
#include "config.h"
#include "src/core/claim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/core/activity.h"
#include "src/core/admission.h"
#include "src/core/budget.h"
#include "src/core/children.h"
#include "src/core/images.h"
#include "src/core/launch.h"
#include "src/core/ownership.h"
#include "src/core/pool.h"
#include "src/core/spend.h"
#include "src/basic/log.h"
#include "src/basic/principal.h"

static const struct dm_admission_caps *caps_of(const struct dm_context *ctx, struct dm_admission_caps *caps)
{
        caps->max_children = ctx->cfg.max_children;
        caps->max_tree = ctx->cfg.max_tree;
        return caps;
}

static bool capped(const struct dm_context *ctx, const char *principal)
{
        /* The host's callers are not capped; a one-off run has no table. */
        return ctx->admission && dm_principal_depth(principal ? principal : "") > 0;
}

int dm_claim_reserve(struct dm_context *ctx, const char *principal, struct dm_slot **ret, struct dm_error *err)
{
        return dm_claim_reserve_n(ctx, principal, 1, ret, err);
}

int dm_claim_reserve_n(struct dm_context *ctx, const char *principal, size_t n, struct dm_slot **ret,
                       struct dm_error *err)
{
        struct dm_admission_caps caps;

        for (size_t i = 0; i < n; i++)
                ret[i] = NULL;
        if (!capped(ctx, principal))
                return 0;
        return dm_admission_claim_n(ctx->admission, principal, caps_of(ctx, &caps), n, NULL, ret, err);
}

int dm_claim_admit(struct dm_context *ctx, const char *principal, struct dm_slot *reserved, struct dm_cancel *cancel,
                   struct dm_slot **ret, struct dm_error *err)
{
        struct dm_admission_caps caps;

        *ret = reserved;
        if (!reserved)
                return capped(ctx, principal)
                               ? dm_admission_claim(ctx->admission, principal, caps_of(ctx, &caps), cancel, ret, err)
                               : 0;
        /* Closed between the job's call and its start: it ends here. */
        if (dm_admission_set_cancel(reserved, cancel) < 0)
                return dm_error_set(err, -ECANCELED, "cancelled: the sandbox this job comes from is being destroyed");
        return 0;
}

void dm_claim_release(struct dm_slot *s)
{
        dm_admission_release(s);
}

/* The tree's spend, refused as the cap it is (-EUSERS, dm_claim_refused):
 * the sentence names DEMESNE_TREE_MAX_USD. */
static int spend_reserve(struct dm_context *ctx, const char *principal, double want_usd, bool root,
                         struct dm_budget_hold **ret, struct dm_error *err)
{
        int r = dm_spend_reserve(ctx, principal, want_usd, root, ret, err);

        if (r == -EDQUOT)
                r = err->code = -EUSERS;
        return r;
}

int dm_claim_spend_left(struct dm_context *ctx, const char *principal, double want_usd, struct dm_error *err)
{
        struct dm_budget_hold *h = NULL;
        int r = spend_reserve(ctx, principal, want_usd, false, &h, err);

        dm_budget_release(h);
        return r;
}

static size_t count(const char *const *v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

/* After the slot and the spend: what the container needs, checked before
 * anything is made. No shim, no run, unless the operator turned it off
 * by name. */
static int claim_prepare(struct dm_claimed *c, const struct dm_claim_request *req, struct dm_error *err)
{
        struct dm_context *ctx = c->ctx;
        int r;

        r = dm_image_lookup(req->image ? req->image : DM_IMAGE_DEFAULT, &c->img, err);
        if (r < 0)
                return r;
        c->n_in = count(req->files) + count(req->dirs);
        /* The caller's, and the shim's two. */
        c->mounts = calloc(c->n_in + req->n_extra + 2, sizeof(*c->mounts));
        c->owned = calloc(3 * c->n_in + 1, sizeof(*c->owned));
        if (!c->mounts || !c->owned)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_inputs_add(ctx, req->files, DM_PATH_FILE, req->granted, c->mounts, &c->n_mounts, c->owned, &c->n_owned,
                          &c->stage, err);
        if (r >= 0)
                r = dm_inputs_add(ctx, req->dirs, DM_PATH_DIR, req->granted, c->mounts, &c->n_mounts, c->owned,
                                  &c->n_owned, &c->stage, err);
        if (r >= 0)
                r = dm_context_backend(ctx, &c->b, err);
        if (r >= 0 && (c->shim_mode = dm_launch_shim_mode(ctx, c->b, err)) < 0)
                r = c->shim_mode;
        if (r >= 0 && !req->image_ref)
                r = dm_image_require(c->b, c->img, ctx->cfg.images_autobuild, req->watch, err);
        return r;
}

int dm_claim(struct dm_context *ctx, const struct dm_claim_request *req, struct dm_claimed *c, struct dm_error *err)
{
        int r;

        memset(c, 0, sizeof(*c));
        c->ctx = ctx;
        c->principal = req->principal;
        c->image_ref = req->image_ref;
        c->activity = req->activity;
        c->slot_borrowed = req->reserved != NULL;
        /* Admission first: counted and reserved in one step, before
         * anything else is asked or made. */
        r = dm_claim_admit(ctx, req->principal, req->reserved, req->cancel, &c->slot, err);
        /* The spend after the slot: a call the cap refuses holds none. */
        if (r >= 0 && req->spend)
                r = spend_reserve(ctx, req->principal, req->spend_usd, req->spend_root, &c->spend, err);
        if (r >= 0)
                r = claim_prepare(c, req, err);
        if (r < 0)
                dm_release(c, DM_RELEASE_UNDO);
        return r;
}

/* The run journal's line of this claim (src/core/activity.h). */
static void journal(struct dm_claimed *c, const char *event)
{
        const char *id = strrchr(c->outdir, '/');
        struct dm_activity_event ev = c->activity ? *c->activity : (struct dm_activity_event){ 0 };

        if (!id)
                return;
        ev.event = event;
        ev.id = id + 1;
        ev.principal = c->principal;
        ev.image = c->img ? c->img->name : NULL;
        ev.output_dir = c->outdir;
        ev.status = "running";
        if (strcmp(event, "end") == 0) {
                /* The end line says only what changed. */
                ev = (struct dm_activity_event){ .event = event,
                                                 .id = id + 1,
                                                 .status = c->end_status,
                                                 .has_exit = c->has_exit,
                                                 .exit_code = c->exit_code };
        }
        dm_activity_record(c->ctx->cfg.state_dir, c->ctx->cfg.activity_days, &ev);
        c->journaled = strcmp(event, "start") == 0;
}

int dm_claim_outdir(struct dm_claimed *c, const char *id, struct dm_error *err)
{
        const char *root = c->ctx->cfg.output_root;
        int r;

        r = dm_mkdir_p(root, 0700, err);
        if (r < 0)
                return r;
        if ((size_t)snprintf(c->outdir, sizeof(c->outdir), "%s/%s", root, id) >= sizeof(c->outdir))
                return dm_error_set(err, -ENAMETOOLONG, "output root too long");
        if (mkdir(c->outdir, 0700) < 0)
                return dm_error_set(err, -errno, "cannot create output directory '%s': %s", c->outdir, strerror(errno));
        c->outdir_made = true;
        journal(c, "start");
        if (dm_spend_bind(c->spend, c->principal, id) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        return 0;
}

void dm_claim_adopt_outdir(struct dm_claimed *c, const char *outdir, const char *id)
{
        snprintf(c->outdir, sizeof(c->outdir), "%s", outdir);
        c->outdir_made = true;
        journal(c, "start");
        /* (Out of memory: the run's figures may count beside its share.) */
        if (dm_spend_bind(c->spend, c->principal, id) < 0)
                log_warning("run %s: out of memory to bind its spend", id);
}

struct dm_pool_entry *dm_claim_warm(struct dm_claimed *c, bool fits, const struct dm_policy *policy, int64_t ttl_s)
{
        struct dm_context *ctx = c->ctx;
        struct dm_pool_entry *e;
        /* What a cold run would make: with the shim on a local engine, or
         * without it on a backend that cannot attach (OpenSandbox). */
        bool attach = dm_backend_can(c->b, DM_CAP_ATTACH);

        if (!ctx->pool || (c->shim_mode == 1) != attach || !fits || c->image_ref)
                return NULL;
        if (c->n_in) {
                log_info("run without a warm container: host inputs are mounted at create");
                return NULL;
        }
        e = dm_pool_claim(ctx->pool, c->img->name, policy, ttl_s);
        if (e)
                dm_claim_adopt_outdir(c, e->outdir, e->run_id);
        return e;
}

int dm_claim_launch(struct dm_claimed *c, struct dm_container_spec *spec, const struct dm_claim_launch *l,
                    struct dm_launch *ret, struct dm_error *err)
{
        c->mounts[c->n_mounts++] = (struct dm_mount){ .host = c->outdir, .target = "/out" };
        c->mounts[c->n_mounts++] = (struct dm_mount){ .host = l->workspace, .target = "/workspace" };
        for (size_t i = 0; i < l->n_extra; i++)
                c->mounts[c->n_mounts++] = l->extra[i];
        spec->image = c->image_ref ? c->image_ref : dm_image_ref(c->img);
        spec->mounts = c->mounts;
        spec->n_mounts = c->n_mounts;
        return dm_launch_container(c->ctx, c->b,
                                   &(struct dm_launch_request){
                                           .img = c->img,
                                           .spec = spec,
                                           .mounts = c->mounts,
                                           .n_mounts = &c->n_mounts,
                                           .shim_dir = c->shim_mode == 1 ? l->shim_dir : NULL,
                                           .idmap_stage = l->idmap_stage,
                                           .lend = (const char *const[]){ c->outdir, l->workspace, NULL },
                                           .stage = &c->stage,
                                           .attach = l->attach,
                                           .watch = l->watch,
                                   },
                                   ret, err);
}

void dm_claim_keep(struct dm_claimed *c, const char *key)
{
        dm_admission_bind(c->slot, key);
        c->slot = NULL;
        c->slot_borrowed = false;
}

void dm_release(struct dm_claimed *c, enum dm_release_how how)
{
        struct dm_context *ctx = c->ctx;

        if (!ctx)
                return;
        dm_inputs_unstage(&c->stage);
        for (size_t i = 0; i < c->n_owned; i++)
                free(c->owned[i]);
        free(c->owned);
        c->owned = NULL;
        c->n_owned = 0;
        free(c->mounts);
        c->mounts = NULL;
        c->n_mounts = 0;
        if (c->journaled && how != DM_RELEASE_KEPT) {
                if (!c->end_status)
                        c->end_status = how == DM_RELEASE_UNDO ? "failed" : "succeeded";
                journal(c, "end");
        }
        if (c->outdir_made && how == DM_RELEASE_UNDO && rmdir(c->outdir) == 0)
                c->outdir_made = false;
        /* What it left goes to its owner (again, after the container is
         * gone: the reaper); a nested principal's into its parent's too. */
        if (c->outdir_made && how != DM_RELEASE_KEPT) {
                const char *id = strrchr(c->outdir, '/');

                dm_owner_return(ctx->cfg.output_root, c->outdir);
                if (how != DM_RELEASE_NOCOPY && id && dm_principal_depth(c->principal ? c->principal : "") > 0)
                        dm_children_collect(ctx, id + 1);
        }
        c->outdir_made = false;
        /* The run's last figures are in the ledger by now: the tree's
         * figure moves from reserved to spent with no gap. */
        dm_budget_release(c->spend);
        c->spend = NULL;
        /* A reservation stays its owner's, but the cancel this claim gave
         * it is forgotten: it may not outlive the claim. */
        if (c->slot_borrowed)
                (void)dm_admission_set_cancel(c->slot, NULL);
        else
                dm_claim_release(c->slot);
        c->slot = NULL;
        c->ctx = NULL;
}
