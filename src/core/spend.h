/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_SPEND_H
#define DM_CORE_SPEND_H

/* A nested tree's model spend, for the claim (src/core/claim.h): what the
 * tree spent, from the run ledger only (src/core/ledger.h: the vendor
 * proxy's figures, which the server writes; nothing a sandbox writes), and
 * an agent run's share of DEMESNE_TREE_MAX_USD reserved against it
 * (src/core/budget.h). */

#include "src/core/context.h"
#include "src/basic/error.h"

struct dm_budget_hold;

/* From inside a nested tree, reserves a run's share of the tree's
 * DEMESNE_TREE_MAX_USD in *ret (min of DEMESNE_AGENT_MAX_USD and what
 * neither the tree's spend in the ledger nor its live runs' reservations
 * take), for the caller to give back (dm_budget_release) once the run's
 * last figures are in the ledger. -EDQUOT naming the variable when nothing
 * is left. want_usd > 0 (a call's max_usd): exactly that much, -EDQUOT
 * when less is left. A host caller's run with a nested endpoint (top) is
 * the top of its own tree: it reserves min(its cap, DEMESNE_TREE_MAX_USD)
 * of it, and its tree is named when its run is (dm_spend_bind). *ret is
 * NULL with no cap, and for a host caller's run without top. */
int dm_spend_reserve(struct dm_context *ctx, const char *principal, double want_usd, bool top,
                     struct dm_budget_hold **ret, struct dm_error *err);

/* Binds the reservation (NULL: none) to its run, once the run's id is
 * known: a host caller's run (principal at depth 0, NULL: "local") also
 * names its tree, "<principal>/<run_id>", the principal its children act
 * for. -ENOMEM. */
int dm_spend_bind(struct dm_budget_hold *h, const char *principal, const char *run_id);

#endif
