/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_BUDGET_H
#define DM_CORE_BUDGET_H

/* Model spend reserved per agent start, against a tree's cap
 * (DEMESNE_TREE_MAX_USD). One struct dm_budget per server; one reservation
 * (a struct dm_budget_hold) per live agent run of a tree.
 *
 * The policy: a start reserves min(agent cap, left), where
 *   left = tree cap - what the tree's runs without a reservation spent
 *          - every reservation the tree's live runs hold,
 * computed and taken under the budget's one lock; nothing left (left <= 0)
 * refuses the start, and so does less than one model request has cost in
 * the tree (dm_budget_hold_estimate): such a run could only be stopped
 * before its first request. The run's vendor proxy is capped at its reservation,
 * so the tree cap holds on the sum of reservations, however many runs start
 * at once: four concurrent agents under a $1 tree cap reserve $1 between
 * them, never $4. A run that holds a reservation counts as its whole
 * reservation (what it spent is inside it); when the run ends its final
 * usage goes to the ledger first and then the reservation is released, so
 * the tree's figure moves from "reserved" to "spent" with no moment where
 * it is neither. An agent run of a host caller is the top of the tree its
 * nested endpoint makes: it reserves its own share first
 * (dm_budget_reserve_root), so the tree cap holds on its spend and its
 * children's together. A server that dies loses its reservations with it; its
 * runs' last figures are in the ledger (src/core/ledger.h), which is where
 * the next server reads them from.
 *
 * Thread-safe. Holds must be released before the budget is freed. */

#include <stdbool.h>

#include "src/basic/error.h"

struct dm_budget;
struct dm_budget_hold;

/* NULL on ENOMEM. */
struct dm_budget *dm_budget_new(void);
/* NULL is fine. Every hold must have been released. */
void dm_budget_free(struct dm_budget *b);

/* Tells which run ids hold a reservation of the tree being reserved in;
 * only valid inside the spent callback. */
struct dm_budget_held;
bool dm_budget_is_held(const struct dm_budget_held *h, const char *run_id);

struct dm_budget_ask {
        const char *tree; /* the tree's key: its top principal ("local/sbx-..."); required */
        double tree_cap;  /* DEMESNE_TREE_MAX_USD: > 0 */
        double agent_cap; /* DEMESNE_AGENT_MAX_USD; 0: none */
        /* The run's own cap (a call's max_usd), > 0: exactly this much is
         * reserved, and less left refuses the start (-EDQUOT) rather than
         * giving it less than it asked; 0: min(agent_cap, left). Never more
         * than the tree has left: the tree cap is the ceiling. */
        double want;
        /* The tree's spend by runs that hold no reservation, as the ledger
         * says (run ids for which dm_budget_is_held is true are left out):
         * called under the budget's lock, so no start or release of this
         * budget runs meanwhile. 0, or a negative errno with err set (the
         * start is refused with it). */
        int (*spent)(void *userdata, const struct dm_budget_held *held, double *ret_spent, struct dm_error *err);
        void *userdata;
};

/* Reserves the start's share (see the policy above). -EDQUOT naming
 * DEMESNE_TREE_MAX_USD when nothing is left, -EINVAL for a bad ask,
 * -ENOMEM, or the spent callback's error. *ret is written on success only;
 * release it with dm_budget_release on every path out of the run. */
int dm_budget_reserve(struct dm_budget *b, const struct dm_budget_ask *ask, struct dm_budget_hold **ret,
                      struct dm_error *err);
/* The top run of a tree that does not exist yet (an agent run of a host
 * caller: what it makes through its nested endpoint is its tree):
 * reserves min(want, tree_cap) when want > 0, else min(agent_cap,
 * tree_cap) (agent_cap 0: tree_cap), with no check (nothing else is in
 * the tree). Its tree is named when its run is (dm_budget_hold_bind_tree);
 * until then it is in none. -EINVAL for a bad cap, -ENOMEM. */
int dm_budget_reserve_root(struct dm_budget *b, double tree_cap, double agent_cap, double want,
                           struct dm_budget_hold **ret, struct dm_error *err);
/* The reserved amount in USD: the run's spending cap. */
double dm_budget_hold_amount(const struct dm_budget_hold *h);
/* The run the reservation is for, once its id is known (before its vendor
 * proxy starts): from then on the ledger's figures of that run are not
 * counted beside the reservation. -ENOMEM; NULL h is a no-op. */
int dm_budget_hold_bind(struct dm_budget_hold *h, const char *run_id);
/* The same for a top run's reservation (dm_budget_reserve_root), which
 * also gets its tree's key (the principal its run's children act for). */
int dm_budget_hold_bind_tree(struct dm_budget_hold *h, const char *run_id, const char *tree);
/* What one model request of this tree's runs cost so far, at most (the
 * largest per-model average a run that ended here noted), or 0 when none
 * did: the run's proxy starts with it as its estimate of a request in
 * flight, so that the first request of a run with little reserved is not
 * let through to pass the cap. Remembered for the server's life. */
double dm_budget_hold_estimate(const struct dm_budget_hold *h);
/* The run's requests cost per_request_usd each on average (a figure that
 * is not finite and positive is ignored). NULL h is a no-op. */
void dm_budget_hold_note(struct dm_budget_hold *h, double per_request_usd);
/* Returns the reservation (its run's spend is in the ledger by then).
 * NULL is fine. */
void dm_budget_release(struct dm_budget_hold *h);

/* What the tree's live runs hold in total, and how many holds (tests,
 * logs). */
double dm_budget_reserved(struct dm_budget *b, const char *tree, unsigned *ret_holds);

#endif
