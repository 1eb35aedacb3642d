/* SPDX-License-Identifier: MIT */
/* Model spend reserved per agent start (src/core/budget.h): the share a
 * start gets, refusals once nothing is left, held runs counted once, every
 * release giving back; and many threads starting at once against a small
 * tree cap, each spending all it reserved, never past the cap. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/core/budget.h"
#include "tests/tap.h"

/* A ledger in memory: what each ended (or live) run spent. */
#define RUNS_MAX 4096
struct fake_ledger {
        pthread_mutex_t lock;
        char ids[RUNS_MAX][16];
        double spent[RUNS_MAX];
        size_t n;
        int calls;
        int fail; /* the spent callback fails with this */
};

static int ledger_spent(void *userdata, const struct dm_budget_held *held, double *ret, struct dm_error *err)
{
        struct fake_ledger *l = userdata;
        double sum = 0;

        if (l->fail)
                return dm_error_set(err, l->fail, "the ledger cannot be read");
        pthread_mutex_lock(&l->lock);
        l->calls++;
        for (size_t i = 0; i < l->n; i++)
                if (!dm_budget_is_held(held, l->ids[i]))
                        sum += l->spent[i];
        pthread_mutex_unlock(&l->lock);
        *ret = sum;
        return 0;
}

/* A run spends: its figures grow in the ledger (the proxy's live file). */
static size_t ledger_add(struct fake_ledger *l, const char *id, double spent)
{
        size_t i;

        pthread_mutex_lock(&l->lock);
        i = l->n < RUNS_MAX ? l->n++ : RUNS_MAX - 1;
        snprintf(l->ids[i], sizeof(l->ids[i]), "%s", id);
        l->spent[i] = spent;
        pthread_mutex_unlock(&l->lock);
        return i;
}

static struct dm_budget_ask ask_for(const char *tree, double tree_cap, double agent_cap, struct fake_ledger *l)
{
        return (struct dm_budget_ask){
                .tree = tree, .tree_cap = tree_cap, .agent_cap = agent_cap, .spent = ledger_spent, .userdata = l
        };
}

/* A start reserves want, then ends at once. */
static void share_after_release(struct dm_budget *b, const struct dm_budget_ask *a, double want, const char *what)
{
        struct dm_budget_hold *h = NULL;
        struct dm_error err = { 0 };

        ok(dm_budget_reserve(b, a, &h, &err) == 0, "a start after a release");
        ok(fabs(dm_budget_hold_amount(h) - want) < 1e-9, "%s ($%g)", what, dm_budget_hold_amount(h));
        dm_budget_release(h);
}

static void test_shares(void)
{
        struct fake_ledger l = { .lock = PTHREAD_MUTEX_INITIALIZER };
        struct dm_budget *b = dm_budget_new();
        struct dm_budget_hold *h1 = NULL, *h2 = NULL, *h3 = NULL, *h4 = NULL, *other = NULL;
        struct dm_budget_ask a = ask_for("local/sbx-a", 1.0, 0.3, &l);
        struct dm_error err = { 0 };
        unsigned holds = 9;

        ok(b != NULL, "a budget");
        ok(dm_budget_reserve(b, &a, &h1, &err) == 0, "a start reserves");
        ok(dm_budget_hold_amount(h1) == 0.3, "the agent cap when the tree has more ($%g)", dm_budget_hold_amount(h1));
        ok(dm_budget_reserve(b, &a, &h2, &err) == 0 && dm_budget_hold_amount(h2) == 0.3, "a second one too");
        ok(dm_budget_reserve(b, &a, &h3, &err) == 0 && dm_budget_hold_amount(h3) == 0.3, "a third one too");
        ok(dm_budget_reserve(b, &a, &h4, &err) == 0, "a fourth reserves");
        ok(fabs(dm_budget_hold_amount(h4) - 0.1) < 1e-9, "what is left ($%g)", dm_budget_hold_amount(h4));
        {
                struct dm_budget_hold *h5 = NULL;

                ok(dm_budget_reserve(b, &a, &h5, &err) == -EDQUOT && h5 == NULL,
                   "a fifth is refused while four hold it all");
                ok(strstr(err.msg, "DEMESNE_TREE_MAX_USD=1") && strstr(err.msg, "this tree of sandboxes has spent") &&
                           strstr(err.msg, "no more agent runs in it"),
                   "naming the variable: %s", err.msg);
        }
        ok(fabs(dm_budget_reserved(b, "local/sbx-a", &holds) - 1.0) < 1e-9 && holds == 4, "four holds, $1 in all");
        {
                struct dm_budget_ask o = ask_for("local/sbx-b", 1.0, 0.3, &l);

                ok(dm_budget_reserve(b, &o, &other, &err) == 0 && dm_budget_hold_amount(other) == 0.3,
                   "another tree has its own budget");
        }

        /* h1's run spends 0.25 and ends: its figures in the ledger, then its
         * reservation back. While it is bound and held, its ledger figures
         * are not counted beside it. */
        ok(dm_budget_hold_bind(h1, "run-1") == 0, "bound to its run");
        ledger_add(&l, "run-1", 0.25);
        {
                struct dm_budget_hold *h5 = NULL;

                ok(dm_budget_reserve(b, &a, &h5, &err) == -EDQUOT, "its spend is inside its reservation: still full");
        }
        dm_budget_release(h1);
        share_after_release(b, &a, 0.05, "released less what it spent: $0.05 comes back");
        /* A run that failed before it spent anything: all of it back. */
        dm_budget_release(h2);
        share_after_release(b, &a, 0.3, "a run that spent nothing gives it all back");
        dm_budget_release(h3);
        dm_budget_release(h4);
        ok(dm_budget_reserved(b, "local/sbx-a", &holds) == 0 && holds == 0, "every release gave back: none held");

        /* What a request cost, noted as runs end, is the next start's
         * estimate; per tree, the largest, nonsense ignored. */
        {
                struct dm_budget_hold *x = NULL, *y = NULL;

                ok(dm_budget_reserve(b, &a, &x, &err) == 0 && dm_budget_hold_estimate(x) == 0,
                   "no run noted anything yet: no estimate");
                dm_budget_hold_note(x, 0.004);
                dm_budget_hold_note(x, 0.002);
                dm_budget_hold_note(x, NAN);
                dm_budget_hold_note(x, -1);
                dm_budget_hold_note(NULL, 1);
                dm_budget_release(x);
                ok(dm_budget_reserve(b, &a, &y, &err) == 0, "a start after");
                ok(dm_budget_hold_estimate(y) == 0.004, "it starts with the largest noted ($%g)",
                   dm_budget_hold_estimate(y));
                dm_budget_release(y);
                y = NULL;
                /* Spend all but $0.003 of the tree: less than a request. */
                ledger_add(&l, "run-big", 1.0 - 0.25 - 0.003);
                {
                        struct dm_budget_hold *z = NULL;

                        ok(dm_budget_reserve(b, &a, &z, &err) == -EDQUOT && z == NULL,
                           "what is left is less than one request has cost: refused");
                        ok(strstr(err.msg, "less than one model request") != NULL, "saying so: %s", err.msg);
                }
                dm_budget_release(y);
                ok(dm_budget_reserve(
                           b,
                           &(struct dm_budget_ask){
                                   .tree = "local/sbx-z", .tree_cap = 1, .spent = ledger_spent, .userdata = &l },
                           &y, &err) == 0 &&
                           dm_budget_hold_estimate(y) == 0,
                   "another tree has none");
                dm_budget_release(y);
        }
        dm_budget_release(other);
        dm_budget_release(NULL);

        /* No agent cap: a start may take what is left, and the next one is
         * refused: the tree cap holds on the sum either way. */
        {
                struct fake_ledger l2 = { .lock = PTHREAD_MUTEX_INITIALIZER };
                struct dm_budget_ask n = ask_for("local/sbx-c", 0.5, 0, &l2);
                struct dm_budget_hold *x = NULL, *y = NULL;

                ok(dm_budget_reserve(b, &n, &x, &err) == 0 && dm_budget_hold_amount(x) == 0.5,
                   "no agent cap: what is left");
                ok(dm_budget_reserve(b, &n, &y, &err) == -EDQUOT, "and then nothing");
                dm_budget_release(x);
        }
        /* Bad asks and a failing ledger. */
        {
                struct dm_budget_ask bad = ask_for("local/sbx-d", NAN, 0, &l);
                struct dm_budget_hold *x = NULL;

                ok(dm_budget_reserve(b, &bad, &x, &err) == -EINVAL, "a cap that is no number: EINVAL");
                bad = ask_for("local/sbx-d", -1, 0, &l);
                ok(dm_budget_reserve(b, &bad, &x, &err) == -EINVAL, "a negative cap: EINVAL");
                bad = ask_for(NULL, 1, 0, &l);
                ok(dm_budget_reserve(b, &bad, &x, &err) == -EINVAL, "no tree: EINVAL");
                l.fail = -EIO;
                bad = ask_for("local/sbx-d", 1, 0, &l);
                ok(dm_budget_reserve(b, &bad, &x, &err) == -EIO && x == NULL, "the ledger's error refuses the start");
                l.fail = 0;
        }
        /* A ledger that says NaN or a negative spend does not open it. */
        {
                struct fake_ledger l3 = { .lock = PTHREAD_MUTEX_INITIALIZER };
                struct dm_budget_ask n = ask_for("local/sbx-e", 1, 0, &l3);
                struct dm_budget_hold *x = NULL;

                ledger_add(&l3, "run-n", NAN);
                ok(dm_budget_reserve(b, &n, &x, &err) == -EDQUOT, "a NaN spend counts as all of it");
                l3.spent[0] = -5;
                ok(dm_budget_reserve(b, &n, &x, &err) == -EDQUOT, "a negative spend counts as all of it");
        }
        dm_budget_free(b);
}

/* ---- many starts at once ---------------------------------------------------- */

#define THREADS 16
#define ROUNDS 200
#define TREE_CAP 0.05
#define AGENT_CAP 0.004

struct race {
        struct dm_budget *b;
        struct fake_ledger *l;
        int id;
        int started, refused;
};

static void *racer(void *arg)
{
        struct race *r = arg;
        struct dm_budget_ask a = ask_for("local/sbx-race", TREE_CAP, AGENT_CAP, r->l);

        for (int i = 0; i < ROUNDS; i++) {
                struct dm_budget_hold *h = NULL;
                struct dm_error err = { 0 };
                char id[16];
                size_t slot;

                if (dm_budget_reserve(r->b, &a, &h, &err) < 0) {
                        r->refused += err.code == -EDQUOT;
                        continue;
                }
                r->started++;
                snprintf(id, sizeof(id), "r%d-%d", r->id, i);
                dm_budget_hold_bind(h, id);
                /* The worst run: it spends every cent it reserved, in
                 * steps the ledger sees while it is live. */
                slot = ledger_add(r->l, id, 0);
                for (int k = 1; k <= 4; k++) {
                        pthread_mutex_lock(&r->l->lock);
                        r->l->spent[slot] = dm_budget_hold_amount(h) * k / 4;
                        pthread_mutex_unlock(&r->l->lock);
                }
                dm_budget_release(h);
        }
        return NULL;
}

static void test_race(void)
{
        struct fake_ledger *l = calloc(1, sizeof(*l));
        struct dm_budget *b = dm_budget_new();
        struct race r[THREADS];
        pthread_t t[THREADS];
        int started = 0, refused = 0;
        double total = 0;

        if (!l || !b) {
                ok(false, "out of memory");
                return;
        }
        pthread_mutex_init(&l->lock, NULL);
        for (int i = 0; i < THREADS; i++) {
                r[i] = (struct race){ .b = b, .l = l, .id = i };
                pthread_create(&t[i], NULL, racer, &r[i]);
        }
        for (int i = 0; i < THREADS; i++) {
                pthread_join(t[i], NULL);
                started += r[i].started;
                refused += r[i].refused;
        }
        for (size_t i = 0; i < l->n; i++)
                total += l->spent[i];
        ok(total <= TREE_CAP + 1e-9,
           "%d threads x %d starts, each spending all it reserved: $%.6f spent, never past "
           "the $%g cap",
           THREADS, ROUNDS, total, TREE_CAP);
        ok(total >= TREE_CAP - 1e-9, "and the whole cap was usable ($%.6f)", total);
        ok(started > 0 && refused > 0 && started + refused == THREADS * ROUNDS,
           "%d starts went, %d were refused with EDQUOT", started, refused);
        ok(dm_budget_reserved(b, "local/sbx-race", NULL) == 0, "nothing left reserved");
        dm_budget_free(b);
        pthread_mutex_destroy(&l->lock);
        free(l);
}

/* A run's own cap (a call's max_usd): reserved whole, above the agent cap
 * too, but never past what the tree has left: less left refuses it. */
static void test_want(void)
{
        struct fake_ledger l = { .lock = PTHREAD_MUTEX_INITIALIZER };
        struct dm_budget *b = dm_budget_new();
        struct dm_budget_hold *h1 = NULL, *h2 = NULL, *h3 = NULL;
        struct dm_budget_ask a = ask_for("local/sbx-w", 1.0, 0.3, &l);
        struct dm_error err = { 0 };

        a.want = 0.7;
        ok(dm_budget_reserve(b, &a, &h1, &err) == 0 && fabs(dm_budget_hold_amount(h1) - 0.7) < 1e-9,
           "a run's max_usd is reserved whole, above the agent cap");
        a.want = 0.5;
        ok(dm_budget_reserve(b, &a, &h2, &err) == -EDQUOT && h2 == NULL && strstr(err.msg, "DEMESNE_TREE_MAX_USD=1") &&
                   strstr(err.msg, "max_usd of $0.5"),
           "more than the tree has left is refused, never cut to fit: %s", err.msg);
        a.want = 0.3;
        ok(dm_budget_reserve(b, &a, &h3, &err) == 0 && fabs(dm_budget_hold_amount(h3) - 0.3) < 1e-9,
           "what is left, asked exactly, is reserved");
        a.want = -1;
        ok(dm_budget_reserve(b, &a, &h2, &err) == -EINVAL && h2 == NULL, "a negative max_usd is a bad ask");
        dm_budget_release(h1);
        dm_budget_release(h3);
        ok(dm_budget_reserved(b, "local/sbx-w", NULL) == 0, "both given back");
        dm_budget_free(b);
        pthread_mutex_destroy(&l.lock);
}

/* A host's agent run is the top of its tree: its reservation, named with
 * the tree when its run is, counts against what its children reserve, so
 * the tree cap holds on the top run's spend and its children's together. */
static void test_root(void)
{
        struct fake_ledger l = { .lock = PTHREAD_MUTEX_INITIALIZER };
        struct dm_budget *b = dm_budget_new();
        struct dm_budget_hold *top = NULL, *other = NULL, *c1 = NULL, *c2 = NULL;
        struct dm_budget_ask a = ask_for("local/run-top", 0.025, 0.015, &l);
        struct dm_error err = { 0 };
        unsigned holds = 0;

        ok(dm_budget_reserve_root(b, 0.025, 0.015, 0, &top, &err) == 0 &&
                   fabs(dm_budget_hold_amount(top) - 0.015) < 1e-9,
           "a top run reserves its own cap when the tree's is larger");
        ok(dm_budget_reserved(b, "local/run-top", &holds) == 0 && holds == 0, "in no tree until its run is named");
        ok(dm_budget_hold_bind_tree(top, "run-top", "local/run-top") == 0 &&
                   fabs(dm_budget_reserved(b, "local/run-top", &holds) - 0.015) < 1e-9 && holds == 1,
           "then in its tree");
        ok(dm_budget_reserve_root(b, 0.025, 0.015, 0, &other, &err) == 0 &&
                   fabs(dm_budget_hold_amount(other) - 0.015) < 1e-9,
           "another top run, another tree: its own cap whole");
        ledger_add(&l, "run-top", 0.009); /* the top run's live figures: inside its hold */
        ok(dm_budget_reserve(b, &a, &c1, &err) == 0 && fabs(dm_budget_hold_amount(c1) - 0.01) < 1e-9,
           "a child gets what the top run's hold leaves ($%g)", dm_budget_hold_amount(c1));
        dm_budget_hold_bind(c1, "run-c1");
        ledger_add(&l, "run-c1", 0.00918);
        dm_budget_hold_note(c1, 0.00459);
        dm_budget_release(c1);
        ok(dm_budget_reserve(b, &a, &c2, &err) == -EDQUOT && c2 == NULL &&
                   strstr(err.msg, "less than one model request"),
           "once the child spent it, the next is refused: %s", err.msg);
        ok(dm_budget_reserve_root(b, 0.02, 10, 0, &c2, &err) == 0 && fabs(dm_budget_hold_amount(c2) - 0.02) < 1e-9,
           "a top run's cap is never above the tree's");
        dm_budget_release(c2);
        ok(dm_budget_reserve_root(b, 0.02, 0.015, 0.5, &c2, &err) == 0 && fabs(dm_budget_hold_amount(c2) - 0.02) < 1e-9,
           "nor is its max_usd");
        dm_budget_release(c2);
        c2 = NULL;
        ok(dm_budget_reserve_root(b, 0, 0.015, 0, &c2, &err) == -EINVAL && c2 == NULL, "no tree cap: EINVAL");
        dm_budget_release(top);
        dm_budget_release(other);
        ok(dm_budget_reserved(b, "local/run-top", NULL) == 0, "all given back");
        dm_budget_free(b);
        pthread_mutex_destroy(&l.lock);
}

int main(void)
{
        test_shares();
        test_want();
        test_root();
        test_race();
        return done_testing();
}
