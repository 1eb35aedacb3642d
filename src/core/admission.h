/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_ADMISSION_H
#define DM_CORE_ADMISSION_H

/* Admission of a nested tree's containers: the table the core's claim
 * (src/core/claim.h) takes its slot from. Every live container that a
 * nested principal (src/basic/principal.h) asked for holds a slot from
 * before its launch until it is gone. A claim counts, under one mutex, the
 * caller's live slots and reserves one, or refuses naming the cap:
 *
 *   children  slots whose principal is exactly the caller's, and the
 *             persistent sandboxes it made (their records);
 *   tree      slots and records under the caller's tree root (the top
 *             nested sandbox or run: the principal's first two components).
 *
 * A persistent sandbox's slot is claimed by dm_sandbox_create and bound to
 * its record once made (dm_admission_bind), until it is destroyed
 * (dm_admission_release_key); sandboxes an earlier server made hold no
 * slot and are counted by their records (a record whose id a bound slot
 * holds counts once). Runs and jobs hold a slot each: the run's own (or,
 * for a background job, the one its call reserved ahead) until it ends,
 * and a reference of the reap queue's until the container is removed.
 *
 * Host callers (depth 0) are not capped: their claim takes no lock and
 * gives no slot (NULL, which every function here accepts). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/basic/error.h"

struct dm_admission;
struct dm_slot;
struct dm_cancel;

#define DM_ADMISSION_KEY_LEN 32 /* a sandbox id with its NUL (DM_SANDBOX_ID_LEN) */

/* The persistent sandboxes principal made (exact), or made under it
 * (!exact): their records' ids, at most max into ids; returns how many
 * there are. Those whose id a bound slot holds count once. Called with the
 * admission lock held; must not call back into the admission table. */
typedef size_t (*dm_admission_records_fn)(void *userdata, const char *principal, bool exact,
                                          char (*ids)[DM_ADMISSION_KEY_LEN], size_t max);

/* records may be NULL (nothing but slots counts). */
int dm_admission_new(dm_admission_records_fn records, void *userdata, struct dm_admission **ret);
/* After every slot is released (a slot outliving its table is a bug: it
 * is logged and the table leaks rather than be freed under it). */
void dm_admission_free(struct dm_admission *a);

struct dm_admission_caps {
        int64_t max_children; /* DEMESNE_MAX_CHILDREN */
        int64_t max_tree;     /* DEMESNE_MAX_TREE */
};

/* Reserves one slot for principal, or refuses: -EUSERS naming the cap and
 * its variable, -ESHUTDOWN when principal's tree is being destroyed
 * (dm_admission_close): codes no other step of a claim answers, so that
 * the refusal reaches the caller as one (src/core/claim.h). cancel (may be NULL) is fired when a cascade
 * closes the principal's subtree while the slot is held; it must outlive
 * the slot's owner reference (dm_admission_release). *ret is NULL for a
 * host caller. */
int dm_admission_claim(struct dm_admission *a, const char *principal, const struct dm_admission_caps *caps,
                       struct dm_cancel *cancel, struct dm_slot **ret, struct dm_error *err);
/* want slots for principal at once, all or none: every one of them in
 * ret[0..want) (each released on its own), or a refusal as
 * dm_admission_claim's (counting the want) and none taken. The cancel is
 * every slot's. */
int dm_admission_claim_n(struct dm_admission *a, const char *principal, const struct dm_admission_caps *caps,
                         size_t want, struct dm_cancel *cancel, struct dm_slot **ret, struct dm_error *err);
/* The owner's cancel, set once it exists (a background job's run): fired
 * at once, and -ECANCELED, when principal's tree is closed. */
int dm_admission_set_cancel(struct dm_slot *s, struct dm_cancel *cancel);
/* The owner is done with it: its cancel is forgotten and its reference
 * dropped; the slot is free once no other reference holds it. */
void dm_admission_release(struct dm_slot *s);

/* The owner hands the slot to a persistent sandbox's record (key: its
 * id): it counts until dm_admission_release_key, is no longer the owner's
 * and is not waited for by a drain (the cascade destroys the record). */
void dm_admission_bind(struct dm_slot *s, const char *key);
/* The sandbox key is gone (destroyed, by a call, its TTL or a cascade):
 * its slot, if one is bound to it, is free. */
void dm_admission_release_key(struct dm_admission *a, const char *key);

/* Another reference (a container's, until the reap queue removed it);
 * returns s. dm_slot_unref drops it. */
struct dm_slot *dm_slot_ref(struct dm_slot *s);
void dm_slot_unref(struct dm_slot *s);

/* Live slots of principal (exact) or under it, records not counted. */
size_t dm_admission_count(struct dm_admission *a, const char *principal, bool exact);

/* A cascade: principal's subtree (principal and everything under it)
 * gets no new slot until dm_admission_reopen, and the cancel of each slot
 * it holds is fired. */
void dm_admission_close(struct dm_admission *a, const char *principal);
/* Waits until no owner in the subtree holds a slot (what only the reap
 * queue still holds is a container on its way out, and is not waited
 * for: the queue may be the one waiting), timeout_ms at most: 0, or
 * -ETIMEDOUT. */
int dm_admission_drain(struct dm_admission *a, const char *principal, int64_t timeout_ms);
void dm_admission_reopen(struct dm_admission *a, const char *principal);

#endif
