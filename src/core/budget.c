/* SPDX-License-Identifier: MIT */
/* Model spend reserved per agent start (src/core/budget.h). */
#include "config.h"
#include "src/core/budget.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct dm_budget_hold {
        struct dm_budget *b;
        char *tree;   /* owned; NULL: a top run's, until bound */
        char *run_id; /* owned; NULL until bound */
        double amount;
        double estimate; /* the tree's costliest request so far, at the start */
        struct dm_budget_hold *next;
};

/* What a tree's requests cost, noted by its runs as they end. */
struct note {
        char *tree;
        double per_request;
        struct note *next;
};
#define NOTES_MAX 4096 /* trees remembered; later ones start with no estimate */

struct dm_budget {
        pthread_mutex_t lock; /* holds, notes, and every reservation's check-and-take */
        struct dm_budget_hold *holds;
        struct note *notes;
        size_t n_notes;
};

static struct note *note_of(struct dm_budget *b, const char *tree)
{
        for (struct note *n = b->notes; n; n = n->next)
                if (strcmp(n->tree, tree) == 0)
                        return n;
        return NULL;
}

/* The view of one tree's holds the spent callback gets. */
struct dm_budget_held {
        const struct dm_budget *b;
        const char *tree;
};

struct dm_budget *dm_budget_new(void)
{
        struct dm_budget *b = calloc(1, sizeof(*b));

        if (b)
                pthread_mutex_init(&b->lock, NULL);
        return b;
}

void dm_budget_free(struct dm_budget *b)
{
        if (!b)
                return;
        /* A hold still here is a leak of its owner's; its memory goes. */
        while (b->holds) {
                struct dm_budget_hold *h = b->holds;

                b->holds = h->next;
                free(h->tree);
                free(h->run_id);
                free(h);
        }
        while (b->notes) {
                struct note *n = b->notes;

                b->notes = n->next;
                free(n->tree);
                free(n);
        }
        pthread_mutex_destroy(&b->lock);
        free(b);
}

bool dm_budget_is_held(const struct dm_budget_held *held, const char *run_id)
{
        if (!held || !run_id)
                return false;
        for (const struct dm_budget_hold *h = held->b->holds; h; h = h->next)
                if (h->run_id && h->tree && strcmp(h->tree, held->tree) == 0 && strcmp(h->run_id, run_id) == 0)
                        return true;
        return false;
}

static double reserved_locked(const struct dm_budget *b, const char *tree, unsigned *ret_holds)
{
        double sum = 0;
        unsigned n = 0;

        for (const struct dm_budget_hold *h = b->holds; h; h = h->next)
                if (h->tree && strcmp(h->tree, tree) == 0) {
                        sum += h->amount;
                        n++;
                }
        if (ret_holds)
                *ret_holds = n;
        return sum;
}

int dm_budget_reserve(struct dm_budget *b, const struct dm_budget_ask *ask, struct dm_budget_hold **ret,
                      struct dm_error *err)
{
        struct dm_budget_held held = { b, ask ? ask->tree : NULL };
        struct dm_budget_hold *h;
        struct note *n;
        double spent = 0, reserved, left, amount;
        int r;

        if (!b || !ask || !ask->tree || !ask->tree[0] || !ask->spent || !isfinite(ask->tree_cap) ||
            ask->tree_cap <= 0 || !isfinite(ask->agent_cap) || ask->agent_cap < 0 || !isfinite(ask->want) ||
            ask->want < 0)
                return dm_error_set(err, -EINVAL, "a budget reservation needs a tree, a tree cap and its spend");
        h = calloc(1, sizeof(*h));
        if (!h || !(h->tree = strdup(ask->tree))) {
                free(h);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        pthread_mutex_lock(&b->lock);
        r = ask->spent(ask->userdata, &held, &spent, err);
        /* The ledger is written by demesne only, but a figure that is not a
         * spend (NaN, negative) must not open the budget. */
        if (r >= 0 && (!isfinite(spent) || spent < 0))
                spent = ask->tree_cap;
        reserved = reserved_locked(b, ask->tree, NULL);
        left = ask->tree_cap - spent - reserved;
        n = note_of(b, ask->tree);
        /* Less than one request has cost in this tree is nothing: the run
         * would be stopped before its first request. */
        if (r >= 0 && (left <= 0 || (n && left < n->per_request)))
                r = dm_error_set(err, -EDQUOT,
                                 "this tree of sandboxes has spent $%.4f on model use and its live agent runs hold "
                                 "$%.4f more, its limit (DEMESNE_TREE_MAX_USD=%g): no more agent runs in it%s",
                                 spent, reserved, ask->tree_cap,
                                 left > 0 ? " (what is left is less than one model request has cost in it)" : "");
        if (r >= 0 && ask->want > left)
                r = dm_error_set(err, -EDQUOT,
                                 "this tree of sandboxes has $%.4f left of its limit on model use "
                                 "(DEMESNE_TREE_MAX_USD=%g: $%.4f spent, $%.4f held by its live agent runs), less "
                                 "than the run's max_usd of $%g",
                                 left, ask->tree_cap, spent, reserved, ask->want);
        if (r >= 0) {
                if (ask->want > 0)
                        amount = ask->want;
                else
                        amount = ask->agent_cap > 0 && ask->agent_cap < left ? ask->agent_cap : left;

                h->b = b;
                h->amount = amount;
                h->estimate = n ? n->per_request : 0;
                h->next = b->holds;
                b->holds = h;
        }
        pthread_mutex_unlock(&b->lock);
        if (r < 0) {
                free(h->tree);
                free(h);
                return r;
        }
        *ret = h;
        return 0;
}

int dm_budget_reserve_root(struct dm_budget *b, double tree_cap, double agent_cap, double want,
                           struct dm_budget_hold **ret, struct dm_error *err)
{
        struct dm_budget_hold *h;
        double amount = want > 0 ? want : agent_cap > 0 ? agent_cap : tree_cap;

        if (!b || !isfinite(tree_cap) || tree_cap <= 0 || !isfinite(agent_cap) || agent_cap < 0 || !isfinite(want) ||
            want < 0)
                return dm_error_set(err, -EINVAL, "a top run's reservation needs a tree cap");
        h = calloc(1, sizeof(*h));
        if (!h)
                return dm_error_set(err, -ENOMEM, "out of memory");
        h->b = b;
        h->amount = amount < tree_cap ? amount : tree_cap;
        pthread_mutex_lock(&b->lock);
        h->next = b->holds;
        b->holds = h;
        pthread_mutex_unlock(&b->lock);
        *ret = h;
        return 0;
}

double dm_budget_hold_amount(const struct dm_budget_hold *h)
{
        return h ? h->amount : 0;
}

int dm_budget_hold_bind_tree(struct dm_budget_hold *h, const char *run_id, const char *tree)
{
        char *id, *t = NULL;

        if (!h || !run_id)
                return 0;
        if (!(id = strdup(run_id)) || (tree && !(t = strdup(tree)))) {
                free(id);
                return -ENOMEM;
        }
        pthread_mutex_lock(&h->b->lock);
        free(h->run_id);
        h->run_id = id;
        if (t) {
                free(h->tree);
                h->tree = t;
        }
        pthread_mutex_unlock(&h->b->lock);
        return 0;
}

int dm_budget_hold_bind(struct dm_budget_hold *h, const char *run_id)
{
        return dm_budget_hold_bind_tree(h, run_id, NULL);
}

double dm_budget_hold_estimate(const struct dm_budget_hold *h)
{
        return h ? h->estimate : 0;
}

/* The tree's note, made when there is none (NULL past NOTES_MAX or on
 * ENOMEM). Under the lock. */
static struct note *note_make(struct dm_budget *b, const char *tree)
{
        struct note *n = note_of(b, tree);

        if (n || b->n_notes >= NOTES_MAX || !(n = calloc(1, sizeof(*n))))
                return n;
        if (!(n->tree = strdup(tree))) {
                free(n);
                return NULL;
        }
        n->next = b->notes;
        b->notes = n;
        b->n_notes++;
        return n;
}

void dm_budget_hold_note(struct dm_budget_hold *h, double per_request_usd)
{
        struct note *n;

        if (!h || !h->tree || !isfinite(per_request_usd) || per_request_usd <= 0)
                return;
        pthread_mutex_lock(&h->b->lock);
        n = note_make(h->b, h->tree);
        if (n && per_request_usd > n->per_request)
                n->per_request = per_request_usd;
        pthread_mutex_unlock(&h->b->lock);
}

void dm_budget_release(struct dm_budget_hold *h)
{
        struct dm_budget *b;

        if (!h)
                return;
        b = h->b;
        pthread_mutex_lock(&b->lock);
        for (struct dm_budget_hold **p = &b->holds; *p; p = &(*p)->next)
                if (*p == h) {
                        *p = h->next;
                        break;
                }
        pthread_mutex_unlock(&b->lock);
        free(h->tree);
        free(h->run_id);
        free(h);
}

double dm_budget_reserved(struct dm_budget *b, const char *tree, unsigned *ret_holds)
{
        double sum;

        if (!b || !tree) {
                if (ret_holds)
                        *ret_holds = 0;
                return 0;
        }
        pthread_mutex_lock(&b->lock);
        sum = reserved_locked(b, tree, ret_holds);
        pthread_mutex_unlock(&b->lock);
        return sum;
}
