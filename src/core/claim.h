/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_CLAIM_H
#define DM_CORE_CLAIM_H

/* Admission inside the core's claim: a run (dm_run, and the agent runs
 * that go through it) and a persistent sandbox (dm_sandbox_create) take
 * the caller's admission slot (src/core/admission.h) first, before any
 * output directory, image build or launch of theirs, and give it back on
 * every path out (a run's container keeps a reference of its own until
 * the reaper removed it; a sandbox's slot goes to its record). The caps
 * come from the server's settings (DEMESNE_MAX_CHILDREN, DEMESNE_MAX_TREE);
 * the tools layer never counts or reserves. Two calls reserve ahead
 * (dm_claim_reserve) and their run claims with the reservation: a
 * background job's, refused before the job exists, and a foreground agent
 * run's, whose tree's spend (src/core/budget.h) is reserved after its
 * slot, so that a call the cap refuses holds none of it.
 *
 * Refusals have codes of their own, so that a caller shows them as the
 * sentence they are (what to change), not as a failure of the work:
 * -EUSERS for a cap (the message names it and its variable), -ESHUTDOWN
 * when the caller's tree is being destroyed (a cascade). */

#include <errno.h>
#include <stdbool.h>

#include "src/core/context.h"
#include "src/basic/cancel.h"
#include "src/basic/error.h"

struct dm_slot;

/* Whether r (a claim's, or a run's or create's that made one) is an
 * admission refusal. */
static inline bool dm_claim_refused(int r)
{
        return r == -EUSERS || r == -ESHUTDOWN;
}

/* Reserves ahead, for the container a background job (or an agent call)
 * of principal will make: 0 with the reservation in *ret (NULL for a host
 * caller, or on a server without an admission table), or a refusal.
 * Nothing cancels it until a run claims with it (the cascade cancels a job
 * itself). Its owner hands it to the run (dm_run_request.reserved,
 * dm_agent_request.reserved: borrowed) and gives it back with
 * dm_claim_release once the run has ended, or when it never starts. */
int dm_claim_reserve(struct dm_context *ctx, const char *principal, struct dm_slot **ret, struct dm_error *err);

/* The claim's admission (runner.c, sandbox.c): with reserved (borrowed,
 * may be NULL), the claim uses it, cancel becomes the cancel a cascade
 * fires, and *ret is reserved, which stays its owner's: -ECANCELED when
 * its tree was closed meanwhile. Without, a slot is reserved now as
 * dm_claim_reserve does, with cancel (may be NULL; it must outlive the
 * slot), and *ret is the caller's to give back (dm_claim_release) or to
 * bind to a sandbox's record (dm_admission_bind). */
int dm_claim_admit(struct dm_context *ctx, const char *principal, struct dm_slot *reserved, struct dm_cancel *cancel,
                   struct dm_slot **ret, struct dm_error *err);

/* Gives a slot or a reservation back (NULL: nothing): its cancel is
 * forgotten; it no longer counts once no container holds it either. */
void dm_claim_release(struct dm_slot *s);

#endif
