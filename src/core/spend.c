/* SPDX-License-Identifier: MIT */
/* A nested tree's spend and its reservation (src/core/spend.h). */
#include "config.h"
#include "src/core/spend.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "src/core/budget.h"
#include "src/core/ledger.h"
#include "src/basic/log.h"
#include "src/basic/principal.h"

struct tree_spend {
        struct dm_context *ctx;
        const char *root; /* the tree's top principal */
};

/* dm_budget_ask's spent: the tree (the top nested sandbox or run and all
 * below it, as the host's caller who made it sees it in the ledger), less
 * the runs that hold a reservation (counted whole by the budget). The
 * ledger's figures only: nothing a sandbox can write. */
static int tree_spent(void *userdata, const struct dm_budget_held *held, double *ret_spent, struct dm_error *err)
{
        struct tree_spend *t = userdata;
        char host[DM_PRINCIPAL_MAX];
        struct dm_ledger_scope scope = { .run_id = dm_principal_leaf(t->root) };
        struct dm_error lerr = { 0 };
        const char *slash = strchr(t->root, DM_PRINCIPAL_SEP);
        json_object *rep, *rows = NULL;

        (void)err;
        *ret_spent = 0;
        snprintf(host, sizeof(host), "%.*s", slash ? (int)(slash - t->root) : (int)strlen(t->root), t->root);
        rep = dm_ledger_report(t->ctx->cfg.output_root, t->ctx->owner, host, &scope, &lerr);
        if (!rep && lerr.code != -ENOENT)
                log_warning("tree %s: its spend is unknown (%s); counted as none", t->root, lerr.msg);
        if (rep)
                json_object_object_get_ex(rep, "runs", &rows);
        for (size_t i = 0; rows && i < json_object_array_length(rows); i++) {
                json_object *row = json_object_array_get_idx(rows, i), *id = NULL, *cost = NULL;

                if (!json_object_object_get_ex(row, "cost_usd", &cost) ||
                    (json_object_object_get_ex(row, "run_id", &id) &&
                     dm_budget_is_held(held, json_object_get_string(id))))
                        continue;
                *ret_spent += json_object_get_double(cost);
        }
        json_object_put(rep);
        return 0;
}

int dm_spend_reserve(struct dm_context *ctx, const char *principal, double want_usd, bool top,
                     struct dm_budget_hold **ret, struct dm_error *err)
{
        char root[DM_PRINCIPAL_MAX];
        struct tree_spend t = { .ctx = ctx, .root = root };
        struct dm_budget_ask ask = {
                .tree = root,
                .tree_cap = ctx->cfg.tree_max_usd,
                .agent_cap = ctx->cfg.agent_max_usd,
                .want = want_usd,
                .spent = tree_spent,
                .userdata = &t,
        };
        int r;

        *ret = NULL;
        if (ctx->cfg.tree_max_usd <= 0 || (!top && dm_principal_depth(principal ? principal : "") == 0))
                return 0;
        if (!ctx->budget)
                return dm_error_set(err, -ENOMEM, "out of memory");
        /* A host caller's run with an endpoint: the top of the tree it
         * makes, named when the run is (dm_claim_outdir). */
        if (dm_principal_depth(principal ? principal : "") == 0)
                return dm_budget_reserve_root(ctx->budget, ctx->cfg.tree_max_usd, ctx->cfg.agent_max_usd, want_usd, ret,
                                              err);
        dm_principal_root(principal, root, sizeof(root));
        r = dm_budget_reserve(ctx->budget, &ask, ret, err);
        if (r < 0)
                return r;
        log_debug("tree %s: an agent run reserves $%.4f of DEMESNE_TREE_MAX_USD=%g", root, dm_budget_hold_amount(*ret),
                  ctx->cfg.tree_max_usd);
        return 0;
}

int dm_spend_bind(struct dm_budget_hold *h, const char *principal, const char *run_id)
{
        char tree[DM_PRINCIPAL_MAX];

        if (!h || !run_id)
                return 0;
        if (dm_principal_depth(principal ? principal : "") > 0)
                return dm_budget_hold_bind(h, run_id);
        if ((size_t)snprintf(tree, sizeof(tree), "%s%c%s", principal && principal[0] ? principal : "local",
                             DM_PRINCIPAL_SEP, run_id) >= sizeof(tree))
                return -ENAMETOOLONG;
        return dm_budget_hold_bind_tree(h, run_id, tree);
}
