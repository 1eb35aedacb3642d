/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_CLAIM_H
#define DM_CORE_CLAIM_H

/* The claim and the release of the core's one lifecycle: a run (dm_run,
 * and the agent runs that go through it) and a persistent sandbox
 * (dm_sandbox_create) both start with dm_claim and end with dm_release.
 *
 * dm_claim takes, in this order, each step only when the one before it
 * held: the caller's admission slot (src/core/admission.h: its own, or a
 * reservation made ahead), the tree's spend when the request asks for it
 * (src/core/budget.h: an agent run; after the slot, so that a call the cap
 * refuses holds none of it), the image, the checked host inputs, the
 * backend, the shim's mode and the image on the engine. dm_claim_outdir
 * then makes the output directory of the id the caller gives (a run's, a
 * sandbox's); the container comes from a warm pool entry or from the one
 * launch sequence (src/core/launch.h), which the caller asks for with the
 * claim's mounts, backend and image.
 *
 * dm_release gives back on every path out what the claim still holds:
 * the staged inputs, the output directory (to its owner, or removed when
 * empty after a failed create), the children's copies into the parent's
 * output, the spend, and the slot (a run's container keeps a reference of
 * its own until the reaper removed it). A persistent sandbox's claim is
 * kept (dm_claim_keep): its slot goes to its record until
 * dm_sandbox_destroy, which releases it by the sandbox's id.
 *
 * The caps come from the server's settings (DEMESNE_MAX_CHILDREN,
 * DEMESNE_MAX_TREE, DEMESNE_TREE_MAX_USD); the tools layer never counts or
 * reserves spend. Refusals have codes of their own, so that a caller shows
 * them as the sentence they are (what to change), not as a failure of the
 * work: -EUSERS for a cap (the message names it and its variable),
 * -ESHUTDOWN when the caller's tree is being destroyed (a cascade); the
 * tree's spend is such a cap: -EUSERS naming DEMESNE_TREE_MAX_USD. */

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/core/context.h"
#include "src/core/inputs.h"
#include "src/basic/cancel.h"
#include "src/basic/error.h"

struct dm_slot;
struct dm_budget_hold;
struct dm_image_info;
struct dm_image_build_watch;
struct dm_activity_event;

/* Whether r (a claim's, or a run's or create's that made one) is a cap's
 * (admission or the tree's spend) or a cascade's refusal. */
static inline bool dm_claim_refused(int r)
{
        return r == -EUSERS || r == -ESHUTDOWN;
}

/* Reserves ahead, for the container a background job (or an agent call)
 * of principal will make: 0 with the reservation in *ret (NULL for a host
 * caller, or on a server without an admission table), or a refusal.
 * Nothing cancels it until a run claims with it (the cascade cancels a job
 * itself). Its owner hands it to the run (dm_run_request.reserved,
 * dm_agent_request.reserved, dm_sandbox_create.reserved: borrowed) and
 * gives it back with dm_claim_release once the run has ended, or when it
 * never starts (a sandbox that was made took it: see dm_sandbox_create). */
int dm_claim_reserve(struct dm_context *ctx, const char *principal, struct dm_slot **ret, struct dm_error *err);

/* n reservations at once, all or none (one step under the admission
 * lock: concurrent claims see all of them or none): ret[0..n) each as
 * dm_claim_reserve's, or a refusal (counting the n) and none held. */
int dm_claim_reserve_n(struct dm_context *ctx, const char *principal, size_t n, struct dm_slot **ret,
                       struct dm_error *err);

/* The claim's admission alone: with reserved (borrowed, may be NULL), the
 * claim uses it, cancel becomes the cancel a cascade fires, and *ret is
 * reserved, which stays its owner's: -ECANCELED when its tree was closed
 * meanwhile. Without, a slot is reserved now as dm_claim_reserve does,
 * with cancel (may be NULL; it must outlive the slot), and *ret is the
 * caller's to give back (dm_claim_release) or to bind to a sandbox's
 * record (dm_admission_bind). */
int dm_claim_admit(struct dm_context *ctx, const char *principal, struct dm_slot *reserved, struct dm_cancel *cancel,
                   struct dm_slot **ret, struct dm_error *err);

/* Gives a slot or a reservation back (NULL: nothing): its cancel is
 * forgotten; it no longer counts once no container holds it either. */
void dm_claim_release(struct dm_slot *s);

/* Whether principal's tree has any spend left (DEMESNE_TREE_MAX_USD), or,
 * want_usd > 0 (a call's max_usd), that much: 0, or -EUSERS naming the
 * variable; holds nothing (a background agent call, refused now rather
 * than as a job that fails; a nested caller's max_usd, refused before its
 * host's client could be asked to raise a run cap the tree cannot pay). */
int dm_claim_spend_left(struct dm_context *ctx, const char *principal, double want_usd, struct dm_error *err);

/* What a claim is asked for. */
struct dm_claim_request {
        const char *principal;    /* who asks (NULL: "local"; a host caller takes no slot) */
        struct dm_slot *reserved; /* borrowed: a reservation made ahead; NULL: a slot now */
        struct dm_cancel *cancel; /* fired by a cascade over principal's tree; may be NULL */
        bool spend;               /* reserve the tree's spend after the slot (an agent run) */
        double spend_usd;         /* > 0: exactly this much of it (the run's max_usd; dm_spend_reserve) */
        /* The run has a nested endpoint: a host caller's is then the top of
         * a tree, and reserves its own share of it (dm_spend_reserve). */
        bool spend_root;
        const char *image; /* NULL: DM_IMAGE_DEFAULT */
        /* An engine image to start from instead of image's (a snapshot's,
         * src/core/snapshot.h), never built here; image still names the
         * demesne image it was made from. NULL: image's own. */
        const char *image_ref;
        const char *const *files; /* host inputs, checked and staged -> /in/<basename> */
        const char *const *dirs;
        const char *const *granted; /* paths the person allowed outside the roots (dm_inputs_add) */
        size_t n_extra;             /* room in mounts for the caller's own (/out, /workspace, extra mounts) */
        /* Where a build of an image the engine lacks reports (and what
         * cancels it); NULL: never built here. */
        const struct dm_image_build_watch *watch;
        /* What the run journal says of it (src/core/activity.h; borrowed,
         * must outlive the claim): kind, command, egress, parent, job. The
         * claim adds id, principal, image, output directory and times. */
        const struct dm_activity_event *activity;
};

/* What a claim holds, until dm_release. Its fields are read by the core's
 * lifecycle (runner.c, sandbox.c); the caller adds its mounts after the
 * inputs' (mounts[n_mounts++], n_extra of them at most, then the shim's two
 * from the launch). */
struct dm_claimed {
        struct dm_context *ctx;
        const char *principal;        /* the request's (borrowed) */
        struct dm_slot *slot;         /* the claim's, or the reservation it borrowed */
        bool slot_borrowed;           /* then its owner's to give back */
        struct dm_budget_hold *spend; /* NULL: not asked, a host caller, or no DEMESNE_TREE_MAX_USD */
        const struct dm_image_info *img;
        const char *image_ref; /* the request's (borrowed) */
        struct dm_backend *b;
        int shim_mode; /* dm_launch_shim_mode: 1 with the shim, 0 when the operator turned it off */
        struct dm_mount *mounts;
        size_t n_mounts, n_in;
        char **owned; /* the inputs' strings */
        size_t n_owned;
        struct dm_inputs_stage stage;
        char outdir[PATH_MAX]; /* dm_claim_outdir's, or a warm container's (dm_claim_adopt_outdir) */
        bool outdir_made;
        /* The journal's start line is written with the output directory,
         * its end line by dm_release with what the caller set here first
         * (NULL status: "failed" when undone, else "succeeded"). */
        const struct dm_activity_event *activity;
        bool journaled;
        const char *end_status;
        bool has_exit;
        int exit_code;
};

/* The claim up to the container (see above). 0, or an error with nothing
 * held any more (the claim is released: dm_release on it again is a
 * no-op); an admission refusal comes before anything else is asked. */
int dm_claim(struct dm_context *ctx, const struct dm_claim_request *req, struct dm_claimed *ret, struct dm_error *err);

/* The output directory of id: <output root>/<id>, new, 0700 (what a
 * sandbox leaves is its owner's alone, even before it is given back), and
 * the claim's spend bound to the run id from now on (its ledger figures
 * are inside its reservation). */
int dm_claim_outdir(struct dm_claimed *c, const char *id, struct dm_error *err);
/* A warm container's output directory (made by the pool) becomes the
 * claim's. */
void dm_claim_adopt_outdir(struct dm_claimed *c, const char *outdir, const char *id);

/* The container, first choice: a never-used warm container of the pool
 * (src/core/pool.h) when the claim fits one (fits: the caller's kind and
 * mounts allow it; no host inputs, which are mounted at create; the
 * pool's image; the shim and an engine with attach, or neither on a
 * remote backend, where the run's policy must be the entries' egress and
 * ttl_s is the expiry the run needs). Its output directory becomes the
 * claim's; the caller owns the entry (dm_pool_entry_free after its
 * container went to the reaper). NULL: none, launch one. */
struct dm_policy;
struct dm_pool_entry *dm_claim_warm(struct dm_claimed *c, bool fits, const struct dm_policy *policy, int64_t ttl_s);

/* The container, otherwise: through the one launch sequence
 * (src/core/launch.h). spec is the caller's (dm_launch_harden, then its
 * choices: name, argv or entrypoint, env, labels, network, filter, TTL);
 * the claim gives it its image and its mounts (the inputs, /out, /workspace
 * from l->workspace, then l->extra) and lends /out and /workspace to the
 * container's root. On error nothing of the launch is left. */
struct dm_claim_launch {
        const char *workspace;   /* host side of /workspace */
        const char *shim_dir;    /* where the shim's socket goes (with the shim) */
        const char *idmap_stage; /* where idmapped inputs are mounted */
        const struct dm_mount *extra;
        size_t n_extra; /* at most the request's n_extra less 2 */
        bool attach;    /* without the shim: the output through the engine's attach */
        const struct dm_image_build_watch *watch;
};
struct dm_container_spec;
struct dm_launch;
int dm_claim_launch(struct dm_claimed *c, struct dm_container_spec *spec, const struct dm_claim_launch *l,
                    struct dm_launch *ret, struct dm_error *err);

/* A persistent sandbox was made: its slot is bound to its record (key: its
 * id) until dm_sandbox_destroy; a reservation it borrowed is taken too. */
void dm_claim_keep(struct dm_claimed *c, const char *key);

enum dm_release_how {
        DM_RELEASE_END,    /* a run ended: its output to its owner, and into its parent's (nested) */
        DM_RELEASE_NOCOPY, /* the same, but the caller copies into the parent's itself, later */
        DM_RELEASE_UNDO,   /* a create failed: an empty output directory goes */
        DM_RELEASE_KEPT,   /* a sandbox was made (dm_claim_keep): its output stays live */
};

/* Gives back what the claim still holds (see above), on every path out;
 * the spend after the caller wrote the run's last figures to the ledger,
 * the slot last. Idempotent. */
void dm_release(struct dm_claimed *c, enum dm_release_how how);

#endif
