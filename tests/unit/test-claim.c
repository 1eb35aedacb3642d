/* SPDX-License-Identifier: MIT */
/* Admission inside the core's claim (src/core/claim.h): dm_run and
 * dm_sandbox_create take the caller's slot before anything of theirs is
 * made and give it back on every path out, against a backend that fails
 * at the step a case picks (as tests/unit/test-launch.c's); a cap refuses
 * before the engine is asked for anything; a background job's reservation
 * is borrowed by its run and stays its owner's; a cascade (src/core/
 * cascade.h) refuses new claims, cancels a reservation's run, and destroys
 * the subtree's sandboxes. The tree's spend is reserved by the claim
 * after the slot and given back on the same paths, after the run's last
 * figures (before_release); N reservations are taken at once or not at
 * all, also under concurrency, and a sandbox made with one takes it. A
 * server object (dm_server_init) over a temporary output root; no engine:
 * the context's backend is the fake. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netpolicy/policy.h"
#include "src/basic/cancel.h"
#include "src/core/admission.h"
#include "src/core/budget.h"
#include "src/core/cascade.h"
#include "src/core/claim.h"
#include "src/core/runner.h"
#include "src/core/sandbox.h"
#include "src/core/server.h"
#include "src/core/spend.h"
#include "tests/tap.h"
#include "tests/unit/fake-engine.h"

#define P "local/sbx-aaaaaaaaaaaa" /* a nested caller: its children are capped */
#define Q P "/sbx-bbbbbbbbbbbb"    /* one below it, in its tree */

static struct dm_context ctx;
static struct dm_backend backend = { .ops = &ops };
static char out_root[64];

/* The output root's directories (its link count): a refused claim must
 * not have made one. */
static int outputs(void)
{
        struct stat st;

        return stat(out_root, &st) == 0 ? (int)st.st_nlink : -1;
}

/* The sandboxes' output directories in the output root: a failed create
 * must leave none. */
static int sandbox_outputs(void)
{
        DIR *d = opendir(out_root);
        struct dirent *de;
        int n = 0;

        while (d && (de = readdir(d)))
                n += strncmp(de->d_name, "sbx-", 4) == 0;
        if (d)
                closedir(d);
        return n;
}

static void reset(enum step fail)
{
        memset(&fk, 0, sizeof(fk));
        fk.fail = fail;
        fk.kind = DM_USERNS_ROOTLESS;
}

/* A run of principal (with reserved, borrowed) that fails at fail. */
static int run(const char *principal, enum step fail, struct dm_slot *reserved, struct dm_cancel *cancel,
               int64_t timeout_s, const char *image, struct dm_error *err)
{
        struct dm_run_result res;
        struct dm_run_request req = {
                .image = image,
                .command = "true",
                .timeout_s = timeout_s,
                .principal = principal,
                .reserved = reserved,
                .cancel = cancel,
        };
        int r;

        reset(fail);
        memset(err, 0, sizeof(*err));
        r = dm_run(&ctx, &req, &res, err);
        dm_run_result_release(&res);
        /* A container the run made is removed in the background, and its
         * slot's reference with it. */
        dm_context_reap_flush(&ctx);
        return r;
}

static int create_reserved(const char *principal, enum step fail, struct dm_slot *reserved, struct dm_sandbox *sb,
                           struct dm_error *err)
{
        struct dm_sandbox_create req = {
                .image = "base", .egress = "none", .principal = principal, .reserved = reserved
        };
        struct dm_policy *policy = NULL;
        int r;

        reset(fail);
        memset(err, 0, sizeof(*err));
        /* The policy is required: the server keeps a copy of it. */
        r = dm_policy_parse("none", NULL, 0, &policy, err);
        if (r < 0)
                return r;
        req.policy = policy;
        r = dm_sandbox_create(&ctx, &req, sb, err);
        dm_policy_free(policy);
        return r;
}

static int create(const char *principal, enum step fail, struct dm_sandbox *sb, struct dm_error *err)
{
        return create_reserved(principal, fail, NULL, sb, err);
}

static size_t held(const char *principal)
{
        return dm_admission_count(ctx.admission, principal, false);
}

static void runs(void)
{
        struct dm_error err;
        struct dm_slot *s[3] = { NULL };
        int r, before;

        r = run(P, NONE, NULL, NULL, 0, "base", &err);
        ok(r == -EINVAL && held(P) == 0, "a bad timeout: refused, and the slot back (%d %s)", r, err.msg);
        r = run(P, NONE, NULL, NULL, 10, "no-such-image", &err);
        ok(r < 0 && held(P) == 0 && !fk.calls[0], "an unknown image: nothing made, the slot back (%s)", err.msg);
        r = run(P, CREATE, NULL, NULL, 10, "base", &err);
        ok(r == -EIO && strstr(err.msg, "engine refused create"), "a refused create fails the run (%s)", err.msg);
        is_int((int)held(P), 0, "and its slot is back");
        r = run(P, ATTACH, NULL, NULL, 10, "base", &err);
        ok(r == -EIO && fk.destroyed == 1 && held(P) == 0, "a failed attach: container removed, slot back (%s)",
           fk.calls);
        r = run(P, START, NULL, NULL, 10, "base", &err);
        ok(r == -EIO && fk.destroyed == 1 && held(P) == 0, "a failed start: container removed, slot back (%s)",
           fk.calls);
        r = run(Q, CREATE, NULL, NULL, 10, "base", &err);
        ok(r == -EIO && held(P) == 0, "one level down, the same (%d)", r);

        /* The cap (DEMESNE_MAX_CHILDREN=2): two reservations hold it. */
        ok(dm_claim_reserve(&ctx, P, &s[0], &err) == 0 && s[0], "a job's reservation");
        ok(dm_claim_reserve(&ctx, P, &s[1], &err) == 0 && s[1], "a second");
        r = dm_claim_reserve(&ctx, P, &s[2], &err);
        ok(r == -EUSERS && dm_claim_refused(r) && !s[2] && strstr(err.msg, "DEMESNE_MAX_CHILDREN=2"),
           "a third is refused, naming the cap (%s)", err.msg);
        before = outputs();
        r = run(P, NONE, NULL, NULL, 10, "base", &err);
        ok(r == -EUSERS && strstr(err.msg, "DEMESNE_MAX_CHILDREN=2"), "a run past the cap is refused (%s)", err.msg);
        ok(!fk.calls[0] && outputs() == before, "before the engine is asked or an output directory made (%s)",
           fk.calls);
        r = run(P, CREATE, s[0], NULL, 10, "base", &err);
        ok(r == -EIO && !strstr(err.msg, "DEMESNE_MAX"), "a run with a reservation claims with it (%s)", err.msg);
        is_int((int)held(P), 2, "which stays its owner's after the run");
        dm_claim_release(s[0]);
        dm_claim_release(s[1]);
        is_int((int)held(P), 0, "the owner gives it back");

        /* Host callers are not capped and hold nothing. */
        ok(dm_claim_reserve(&ctx, "local", &s[0], &err) == 0 && !s[0], "a host caller reserves nothing");
        r = run(NULL, CREATE, NULL, NULL, 10, "base", &err);
        ok(r == -EIO && held("local") == 0, "and its run holds nothing");
}

static void sandboxes(struct dm_sandbox *sb)
{
        struct dm_error err;
        struct dm_slot *s[2] = { NULL };
        int r, before;

        r = create(P, CREATE, sb, &err);
        ok(r == -EIO && held(P) == 0, "a refused create: no sandbox, the slot back (%s)", err.msg);
        is_int(sandbox_outputs(), 0, "and no output directory left");
        r = create(P, START, sb, &err);
        ok(r == -EIO && fk.destroyed == 1 && held(P) == 0, "a failed start: container removed, slot back (%s)",
           fk.calls);

        ok(dm_claim_reserve(&ctx, P, &s[0], &err) == 0 && dm_claim_reserve(&ctx, P, &s[1], &err) == 0,
           "two reservations hold the cap");
        before = outputs();
        r = create(P, NONE, sb, &err);
        ok(r == -EUSERS && dm_claim_refused(r) && strstr(err.msg, "DEMESNE_MAX_CHILDREN=2"),
           "a create past the cap is refused as it is (%s)", err.msg);
        ok(!fk.calls[0] && outputs() == before, "before the engine is asked or a directory made (%s)", fk.calls);
        dm_claim_release(s[1]);

        r = create(P, NONE, sb, &err);
        ok(r == 0 && sb->id[0], "with room for one, a sandbox is made (%s)", r < 0 ? err.msg : sb->id);
        is_int((int)held(P), 2, "its slot counts, bound to it");
        r = dm_claim_reserve(&ctx, P, &s[1], &err);
        ok(r == -EUSERS && strstr(err.msg, "has 2 live children"), "its record and its slot count once (%s)", err.msg);
        dm_claim_release(s[0]);
}

static void cascade(const struct dm_sandbox *sb)
{
        struct dm_error err;
        struct dm_cancel cancel;
        struct dm_slot *s = NULL;
        int r;
        size_t n;

        ok(dm_cancel_init(&cancel) == 0, "a cancel");
        ok(dm_claim_reserve(&ctx, Q, &s, &err) == 0 && s, "a job below reserves");
        dm_cascade_close(&ctx, P);
        r = run(Q, NONE, NULL, NULL, 10, "base", &err);
        ok(r == -ESHUTDOWN && dm_claim_refused(r) && strstr(err.msg, "being destroyed") && !fk.calls[0],
           "a closed tree refuses a new run before anything is made (%s)", err.msg);
        r = create(P, NONE, &(struct dm_sandbox){ 0 }, &err);
        ok(r == -ESHUTDOWN && !fk.calls[0], "and a new sandbox (%s)", err.msg);
        r = run(Q, NONE, s, &cancel, 10, "base", &err);
        ok(r == -ECANCELED && !fk.calls[0], "the job's run is cancelled before anything is made (%d %s)", r, err.msg);
        ok(dm_cancel_fired(&cancel), "through its cancel");
        dm_claim_release(s);
        reset(NONE);
        n = dm_cascade_end(&ctx, P, "sbx-aaaaaaaaaaaa");
        ok(n == 1 && fk.destroyed == 1, "the end destroys its sandbox (%zu, %s)", n, fk.calls);
        is_int((int)held(P), 0, "whose slot is back");
        ok(dm_sandbox_check_owner(&ctx, sb->id, P, &err) == -ENOENT, "and whose record is gone");
        r = create(P, CREATE, &(struct dm_sandbox){ 0 }, &err);
        ok(r == -EIO && held(P) == 0, "reopened: a claim is admitted again (%s)", err.msg);
        dm_cancel_release(&cancel);
}

/* ---- the tree's spend, inside the claim -------------------------------------------- */

#define TREE "local/sbx-aaaaaaaaaaaa" /* P's and Q's tree */

struct spend_seen {
        struct dm_budget_hold **hold;
        double amount, reserved; /* at before_release */
        bool called;
};

static void seen_before_release(void *userdata)
{
        struct spend_seen *s = userdata;

        s->called = true;
        s->amount = dm_budget_hold_amount(*s->hold);
        s->reserved = dm_budget_reserved(ctx.budget, TREE, NULL);
}

/* An agent-like run of principal that asks its claim for spend. */
static int spend_run(const char *principal, enum step fail, const char *image, struct spend_seen *seen,
                     struct dm_error *err)
{
        struct dm_budget_hold *hold = NULL;
        struct dm_run_result res;
        struct dm_run_request req = {
                .image = image,
                .command = "true",
                .timeout_s = 10,
                .principal = principal,
                .spend = &hold,
                .before_release = seen_before_release,
                .release_userdata = seen,
        };
        int r;

        memset(seen, 0, sizeof(*seen));
        seen->hold = &hold;
        reset(fail);
        memset(err, 0, sizeof(*err));
        r = dm_run(&ctx, &req, &res, err);
        dm_run_result_release(&res);
        dm_context_reap_flush(&ctx);
        ok(hold == NULL, "the run's hold is given back with it (%s)", principal);
        return r;
}

static void spend(void)
{
        static const enum step fails[] = { CREATE, ATTACH, START };
        static const char *const names[] = { "create", "attach", "start" };
        struct spend_seen seen;
        struct dm_error err;
        struct dm_slot *s[2] = { NULL };
        struct dm_budget_hold *all = NULL;
        int r, before;

        /* Every error path after the claim gives the spend back, with the
         * slot, and the run saw its share (DEMESNE_AGENT_MAX_USD=0.25)
         * before it went. */
        for (size_t i = 0; i < sizeof(fails) / sizeof(fails[0]); i++) {
                r = spend_run(Q, fails[i], "base", &seen, &err);
                ok(r == -EIO && seen.called && seen.amount == 0.25 && seen.reserved == 0.25,
                   "a failed %s: the run held its share until its release ($%g of $%g reserved)", names[i], seen.amount,
                   seen.reserved);
                ok(dm_budget_reserved(ctx.budget, TREE, NULL) == 0 && held(P) == 0,
                   "and gave it back with its slot (%s)", names[i]);
        }
        r = spend_run(Q, NONE, "no-such-image", &seen, &err);
        ok(r < 0 && !seen.called && dm_budget_reserved(ctx.budget, TREE, NULL) == 0 && held(P) == 0,
           "an unknown image: the claim fails whole, spend and slot back (%s)", err.msg);
        r = spend_run("local", CREATE, "base", &seen, &err);
        ok(r == -EIO && seen.called && seen.amount == 0, "a host caller's run reserves no spend");

        /* The slot before the spend: with both gone, the cap answers. */
        ok(dm_claim_reserve(&ctx, P, &s[0], &err) == 0 && dm_claim_reserve(&ctx, P, &s[1], &err) == 0,
           "two reservations hold the cap");
        {
                struct dm_budget_hold *rest[3] = { NULL };

                ok(dm_spend_reserve(&ctx, P, 0, false, &all, &err) == 0 && all, "a hold of the tree's spend");
                for (size_t i = 0; i < 3; i++)
                        dm_spend_reserve(&ctx, P, 0, false, &rest[i], &err);
                is_int((int)(dm_budget_reserved(ctx.budget, TREE, NULL) * 100), 100, "the tree's $1 all held");
                r = spend_run(P, NONE, "base", &seen, &err);
                ok(r == -EUSERS && strstr(err.msg, "DEMESNE_MAX_CHILDREN"),
                   "a run past both caps is refused by its slot's: the slot comes first (%s)", err.msg);
                dm_claim_release(s[0]);
                dm_claim_release(s[1]);
                /* A slot free, no spend: refused by the spend, after the
                 * slot, which it gives back. */
                before = outputs();
                r = spend_run(P, NONE, "base", &seen, &err);
                ok(r == -EUSERS && dm_claim_refused(r) && strstr(err.msg, "DEMESNE_TREE_MAX_USD=1") && held(P) == 0 &&
                           !fk.calls[0] && outputs() == before,
                   "a tree with no spend left: refused before anything is made, the slot back (%s)", err.msg);
                ok(dm_claim_spend_left(&ctx, Q, 0, &err) == -EUSERS && strstr(err.msg, "DEMESNE_TREE_MAX_USD"),
                   "and a background call is told so now");
                for (size_t i = 0; i < 3; i++)
                        dm_budget_release(rest[i]);
        }
        dm_budget_release(all);
        ok(dm_claim_spend_left(&ctx, Q, 0, &err) == 0 && dm_budget_reserved(ctx.budget, TREE, NULL) == 0,
           "spend left again, nothing held by the check");
}

/* ---- N reservations at once, and a sandbox made with one ----------------------------- */

struct racer {
        pthread_barrier_t *start;
        size_t want;
        struct dm_slot *got[2];
        int r;
};

static void *race(void *userdata)
{
        struct racer *x = userdata;
        struct dm_error err = { 0 };

        pthread_barrier_wait(x->start);
        x->r = dm_claim_reserve_n(&ctx, P, x->want, x->got, &err);
        return NULL;
}

static void reserve_n(void)
{
        enum { RACERS = 12, ROUNDS = 20 };
        struct dm_error err;
        struct dm_slot *s[3] = { NULL };
        struct dm_sandbox sb[2];
        bool whole = true, capped = true;
        int r;

        r = dm_claim_reserve_n(&ctx, P, 3, s, &err);
        ok(r == -EUSERS && !s[0] && !s[1] && !s[2] && held(P) == 0 && strstr(err.msg, "at once"),
           "three at once past a cap of two: none (%s)", err.msg);
        ok(dm_claim_reserve_n(&ctx, "local", 3, s, &err) == 0 && !s[0] && !s[1] && !s[2],
           "a host caller reserves none");

        /* Racers asking for two and for one: each gets all it asked or
         * none, and never more than the cap between them. */
        for (int round = 0; round < ROUNDS; round++) {
                pthread_barrier_t start;
                pthread_t t[RACERS];
                struct racer x[RACERS];
                size_t granted = 0;

                pthread_barrier_init(&start, NULL, RACERS);
                for (int i = 0; i < RACERS; i++) {
                        x[i] = (struct racer){ .start = &start, .want = i % 2 ? 1 : 2 };
                        pthread_create(&t[i], NULL, race, &x[i]);
                }
                for (int i = 0; i < RACERS; i++)
                        pthread_join(t[i], NULL);
                pthread_barrier_destroy(&start);
                for (int i = 0; i < RACERS; i++) {
                        size_t n = 0;

                        for (size_t k = 0; k < x[i].want; k++)
                                n += x[i].got[k] != NULL;
                        whole &= x[i].r == 0 ? n == x[i].want : n == 0 && x[i].r == -EUSERS;
                        granted += n;
                }
                capped &= granted >= 1 && granted <= 2 && held(P) == granted;
                for (int i = 0; i < RACERS; i++)
                        for (size_t k = 0; k < x[i].want; k++)
                                dm_claim_release(x[i].got[k]);
        }
        ok(whole, "%d rounds of %d racers: each got all it asked for, or none", ROUNDS, RACERS);
        ok(capped && held(P) == 0, "never more than the cap between them, and every slot back");

        /* Two sandboxes on two reservations made at once. */
        ok(dm_claim_reserve_n(&ctx, P, 2, s, &err) == 0 && s[0] && s[1], "two reserved at once");
        r = create_reserved(P, NONE, s[0], &sb[0], &err);
        ok(r == 0 && held(P) == 2, "a sandbox made with one takes it: still two held (%s)", r < 0 ? err.msg : sb[0].id);
        {
                int before = sandbox_outputs();

                r = create_reserved(P, CREATE, s[1], &sb[1], &err);
                ok(r == -EIO && held(P) == 2 && sandbox_outputs() == before,
                   "a failed create leaves its reservation its owner's, and no directory (%s)", err.msg);
        }
        {
                /* The create's cancel is the reservation's only while the
                 * create runs: a cascade after it fires nothing of it. */
                struct dm_cancel cancel;
                struct dm_policy *policy = NULL;
                struct dm_sandbox_create req = {
                        .image = "base", .egress = "none", .principal = P, .reserved = s[1], .cancel = &cancel
                };

                ok(dm_cancel_init(&cancel) == 0 && dm_policy_parse("none", NULL, 0, &policy, &err) == 0,
                   "a cancel and a policy");
                req.policy = policy;
                reset(CREATE);
                r = dm_sandbox_create(&ctx, &req, &sb[1], &err);
                dm_admission_close(ctx.admission, P);
                ok(r == -EIO && !dm_cancel_fired(&cancel), "a failed create's cancel is not left on its reservation");
                dm_admission_reopen(ctx.admission, P);
                dm_policy_free(policy);
                dm_cancel_release(&cancel);
        }
        r = create_reserved(P, NONE, s[1], &sb[1], &err);
        ok(r == 0 && held(P) == 2, "which makes the second with it");
        r = dm_claim_reserve(&ctx, P, &s[2], &err);
        ok(r == -EUSERS, "the cap is full with the two sandboxes");
        ok(dm_sandbox_destroy(&ctx, sb[0].id, &err) == 0 && dm_sandbox_destroy(&ctx, sb[1].id, &err) == 0 &&
                   held(P) == 0,
           "destroyed: their slots are back");
}

int main(void)
{
        struct dm_error err = { 0 };
        char root[] = "/tmp/dm-claim-XXXXXX", state[64];
        struct dm_sandbox sb;

        if (!mkdtemp(root))
                return skip_all("no temporary directory");
        snprintf(out_root, sizeof(out_root), "%s/out", root);
        snprintf(state, sizeof(state), "%s/state", root);
        {
                /* The caps small, so that a few reservations reach them. */
                const char *const env[][2] = {
                        { "DEMESNE_OUTPUT_ROOT", out_root },
                        { "DEMESNE_STATE_DIR", state },
                        { "DEMESNE_ENGINE_HOST", "unix:///nonexistent/dm-claim.sock" },
                        { "DEMESNE_START_PODMAN", "0" },
                        { "DEMESNE_SHIM", "off" },
                        { "DEMESNE_POOL", "0" },
                        { "DEMESNE_MAX_CHILDREN", "2" },
                        { "DEMESNE_MAX_TREE", "8" },
                        { "DEMESNE_TREE_MAX_USD", "1" },
                        { "DEMESNE_AGENT_MAX_USD", "0.25" },
                };

                for (size_t i = 0; i < sizeof(env) / sizeof(env[0]); i++)
                        setenv(env[i][0], env[i][1], 1);
                unsetenv("DEMESNE_ALLOWED_PATHS");
        }
        if (dm_server_init(&ctx, &err) < 0) {
                ok(0, "dm_server_init: %s", err.msg);
                return done_testing();
        }
        ctx.backend = &backend; /* opened: no engine is asked for */
        mkdir(out_root, 0700);

        runs();
        sandboxes(&sb);
        cascade(&sb);
        spend();
        reserve_n();

        dm_context_reap_flush(&ctx);
        ctx.backend = NULL; /* the fake is not the server's to close */
        dm_server_release(&ctx);
        {
                char cmd[128];

                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
                if (system(cmd) != 0)
                        diag("could not remove %s", root);
        }
        return done_testing();
}
