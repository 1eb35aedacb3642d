/* SPDX-License-Identifier: MIT */
/* Admission (src/core/admission.h): caps counted and reserved in one step,
 * racing threads get exactly the cap, every way out returns the slot, a
 * cascade closes a subtree, cancels what it holds and waits for it. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "src/basic/cancel.h"
#include "src/core/admission.h"
#include "tests/tap.h"

#define A "local/sbx-aaaaaaaaaaaa"
#define B A "/sbx-bbbbbbbbbbbb"
#define C B "/sbx-cccccccccccc"
#define Z "local/sbx-zzzzzzzzzzzz"

static const struct dm_admission_caps caps = { .max_children = 3, .max_tree = 5 };

/* Records of persistent sandboxes made by B: the first *n of these ids
 * (adopted from an earlier server, or this server's, bound to a slot). */
static const char *const record_ids[] = { "sbx-000000000001", "sbx-000000000002", "sbx-000000000003" };

static size_t records(void *userdata, const char *principal, bool exact, char (*ids)[DM_ADMISSION_KEY_LEN], size_t max)
{
        size_t *n = userdata;

        if (exact ? strcmp(principal, B) != 0 : strncmp(B, principal, strlen(principal)) != 0)
                return 0;
        for (size_t i = 0; i < *n && i < max; i++)
                snprintf(ids[i], DM_ADMISSION_KEY_LEN, "%s", record_ids[i]);
        return *n;
}

struct racer {
        struct dm_admission *a;
        const char *principal;
        pthread_barrier_t *start, *hold;
        struct dm_slot *slot;
        int r;
};

static void *race(void *arg)
{
        struct racer *x = arg;
        struct dm_error err = { 0 };

        pthread_barrier_wait(x->start);
        x->r = dm_admission_claim(x->a, x->principal, &caps, NULL, &x->slot, &err);
        /* Every racer holds what it got until all have tried. */
        pthread_barrier_wait(x->hold);
        return NULL;
}

/* n threads claim at once, for the principals given in turn; answers how
 * many got a slot, and releases them. */
static int race_for(struct dm_admission *a, const char *const *principals, size_t n_principals, int n)
{
        pthread_barrier_t start, hold;
        struct racer x[32];
        pthread_t t[32];
        int got = 0;

        pthread_barrier_init(&start, NULL, (unsigned)n);
        pthread_barrier_init(&hold, NULL, (unsigned)n);
        for (int i = 0; i < n; i++) {
                x[i] = (struct racer){
                        .a = a, .principal = principals[i % n_principals], .start = &start, .hold = &hold
                };
                pthread_create(&t[i], NULL, race, &x[i]);
        }
        for (int i = 0; i < n; i++) {
                pthread_join(t[i], NULL);
                if (x[i].r == 0 && x[i].slot)
                        got++;
                else if (x[i].r != -EUSERS)
                        ok(0, "a refused racer got -EUSERS (got %d)", x[i].r);
                dm_admission_release(x[i].slot);
        }
        pthread_barrier_destroy(&start);
        pthread_barrier_destroy(&hold);
        return got;
}

static void *release_later(void *arg)
{
        usleep(100 * 1000);
        dm_admission_release(arg);
        return NULL;
}

int main(void)
{
        struct dm_admission *a;
        struct dm_error err = { 0 };
        struct dm_slot *s[8] = { 0 }, *host = (struct dm_slot *)1, *reap;
        struct dm_cancel cancel;
        size_t n_records = 0;
        pthread_t t;

        ok(dm_admission_new(records, &n_records, &a) == 0, "a table");

        /* The host's callers: no cap, no slot. */
        for (int i = 0; i < 10; i++)
                ok(dm_admission_claim(a, "local", &caps, NULL, &host, &err) == 0 && !host,
                   "host caller %d: admitted, no slot", i);

        /* Children: exactly the cap, then -EUSERS naming it. */
        for (int i = 0; i < 3; i++)
                ok(dm_admission_claim(a, A, &caps, NULL, &s[i], &err) == 0 && s[i], "child %d admitted", i);
        is_int(dm_admission_count(a, A, true), 3, "three slots held");
        is_int(dm_admission_claim(a, A, &caps, NULL, &s[3], &err), -EUSERS, "the fourth child is refused");
        ok(strstr(err.msg, "DEMESNE_MAX_CHILDREN=3") != NULL, "the refusal names the cap: %s", err.msg);
        ok(!s[3], "a refusal gives no slot");
        dm_error_clear(&err);

        /* A launch error, a cancel, a timeout: the owner releases. */
        dm_admission_release(s[0]);
        s[0] = NULL;
        is_int(dm_admission_count(a, A, true), 2, "a released slot is free at once");
        ok(dm_admission_claim(a, A, &caps, NULL, &s[0], &err) == 0 && s[0], "and can be claimed again");

        /* A run's container outlives its call until the reap queue removed
         * it: the queue's reference keeps the slot. */
        reap = dm_slot_ref(s[0]);
        dm_admission_release(s[0]);
        is_int(dm_admission_count(a, A, true), 3, "a slot the reap queue holds still counts");
        is_int(dm_admission_claim(a, A, &caps, NULL, &s[3], &err), -EUSERS, "and still refuses the next");
        dm_error_clear(&err);
        dm_slot_unref(reap);
        is_int(dm_admission_count(a, A, true), 2, "removed: the slot is free");
        dm_admission_release(s[1]);
        dm_admission_release(s[2]);
        is_int(dm_admission_count(a, A, false), 0, "all returned");

        /* The tree: children of A, B and C count together. */
        ok(dm_admission_claim(a, A, &caps, NULL, &s[0], &err) == 0, "tree: A's child");
        ok(dm_admission_claim(a, B, &caps, NULL, &s[1], &err) == 0, "tree: B's child");
        ok(dm_admission_claim(a, B, &caps, NULL, &s[2], &err) == 0, "tree: B's second");
        ok(dm_admission_claim(a, C, &caps, NULL, &s[3], &err) == 0, "tree: C's child");
        ok(dm_admission_claim(a, C, &caps, NULL, &s[4], &err) == 0, "tree: C's second");
        is_int(dm_admission_claim(a, C, &caps, NULL, &s[5], &err), -EUSERS, "the sixth in the tree is refused");
        ok(strstr(err.msg, "DEMESNE_MAX_TREE=5") != NULL, "the refusal names the tree cap: %s", err.msg);
        dm_error_clear(&err);
        ok(dm_admission_claim(a, Z, &caps, NULL, &s[5], &err) == 0 && s[5], "another tree is not held back");
        for (int i = 0; i < 6; i++) {
                dm_admission_release(s[i]);
                s[i] = NULL;
        }

        /* Records (sandboxes made by an earlier server) count. */
        n_records = 2;
        ok(dm_admission_claim(a, B, &caps, NULL, &s[0], &err) == 0, "B with two records: one more child");
        is_int(dm_admission_claim(a, B, &caps, NULL, &s[1], &err), -EUSERS, "and no second");
        ok(strstr(err.msg, "3 live children") != NULL, "records and slots counted: %s", err.msg);
        dm_error_clear(&err);
        ok(dm_admission_claim(a, A, &caps, NULL, &s[1], &err) == 0, "A: the tree had 3, room for 2");
        ok(dm_admission_claim(a, C, &caps, NULL, &s[2], &err) == 0, "C: the fifth of the tree");
        is_int(dm_admission_claim(a, C, &caps, NULL, &s[3], &err), -EUSERS, "C: the tree is full with the records");
        ok(strstr(err.msg, "5 live sandboxes") != NULL, "records and slots counted: %s", err.msg);
        dm_error_clear(&err);
        for (int i = 0; i < 3; i++)
                dm_admission_release(s[i]);
        n_records = 0;

        /* A create: the slot is bound to the sandbox's record once made,
         * counted once while both exist, free when it is destroyed. */
        ok(dm_admission_claim(a, B, &caps, NULL, &s[0], &err) == 0, "a create claims");
        n_records = 1; /* its record is written */
        dm_admission_bind(s[0], record_ids[0]);
        ok(dm_admission_claim(a, B, &caps, NULL, &s[1], &err) == 0 &&
                   dm_admission_claim(a, B, &caps, NULL, &s[2], &err) == 0,
           "a bound slot and its record count once: two more");
        is_int(dm_admission_claim(a, B, &caps, NULL, &s[3], &err), -EUSERS, "then the cap");
        dm_error_clear(&err);
        is_int(dm_admission_drain(a, B, 10), -ETIMEDOUT, "a drain waits for the owned ones");
        dm_admission_release(s[1]);
        dm_admission_release(s[2]);
        is_int(dm_admission_drain(a, B, 10), 0, "not for a bound one");
        n_records = 0; /* destroyed: the record goes, then the slot */
        is_int(dm_admission_count(a, B, true), 1, "bound until its key is released");
        dm_admission_release_key(a, record_ids[0]);
        dm_admission_release_key(a, record_ids[0]);
        is_int(dm_admission_count(a, B, false), 0, "released once, however often asked");

        /* Racing threads get exactly the cap. */
        for (int round = 0; round < 20; round++) {
                const char *one[] = { A };
                const char *three[] = { A, B, C };

                is_int(race_for(a, one, 1, 12), 3, "round %d: 12 racers for a child cap of 3 get 3", round);
                is_int(race_for(a, three, 3, 24), 5, "round %d: 24 racers over three levels, tree cap 5 get 5", round);
                is_int(dm_admission_count(a, A, false), 0, "round %d: every racer's slot returned", round);
        }

        /* A cascade: B's subtree closes, its slots' cancels fire, it is
         * waited for, then it opens again. */
        ok(dm_cancel_init(&cancel) == 0, "a cancel");
        ok(dm_admission_claim(a, C, &caps, &cancel, &s[0], &err) == 0, "C claims with a cancel");
        ok(dm_admission_claim(a, B, &caps, NULL, &s[1], &err) == 0, "B claims without one (a job, not started)");
        ok(dm_admission_claim(a, A, &caps, NULL, &s[2], &err) == 0, "A claims");
        ok(dm_admission_claim(a, C, &caps, NULL, &s[6], &err) == 0, "C runs something that ended");
        reap = dm_slot_ref(s[6]); /* its container waits in the reap queue */
        dm_admission_release(s[6]);
        dm_admission_close(a, B);
        ok(dm_cancel_fired(&cancel), "closing B fires the cancel of a slot under it");
        is_int(dm_admission_claim(a, C, &caps, NULL, &s[3], &err), -ESHUTDOWN, "a claim under B is refused");
        ok(strstr(err.msg, "being destroyed") != NULL, "saying why: %s", err.msg);
        dm_error_clear(&err);
        is_int(dm_admission_claim(a, B, &caps, NULL, &s[3], &err), -ESHUTDOWN, "and from B itself");
        dm_error_clear(&err);
        ok(dm_admission_claim(a, A, &caps, NULL, &s[3], &err) == 0, "A, above B, is not closed");
        {
                struct dm_cancel late;

                dm_cancel_init(&late);
                dm_admission_set_cancel(s[1], &late);
                ok(dm_cancel_fired(&late), "a cancel given after the close fires at once");
                dm_admission_release(s[1]);
                dm_cancel_release(&late);
        }
        is_int(dm_admission_drain(a, B, 50), -ETIMEDOUT, "the drain waits while C's slot is held");
        pthread_create(&t, NULL, release_later, s[0]);
        is_int(dm_admission_drain(a, B, 10000), 0, "and ends once it is released");
        pthread_join(t, NULL);
        is_int(dm_admission_count(a, B, false), 1, "the drain did not wait for the reap queue's reference");
        dm_slot_unref(reap);
        is_int(dm_admission_count(a, B, false), 0, "nothing of B's subtree holds a slot");
        ok(dm_admission_claim(a, C, &caps, NULL, &s[0], &err) == -ESHUTDOWN, "still closed after the drain");
        dm_error_clear(&err);
        dm_admission_close(a, B); /* a second cascade of the same (a run's end, a destroy) */
        dm_admission_reopen(a, B);
        is_int(dm_admission_claim(a, C, &caps, NULL, &s[0], &err), -ESHUTDOWN, "closed until the last reopen");
        dm_error_clear(&err);
        dm_admission_reopen(a, B);
        ok(dm_admission_claim(a, C, &caps, NULL, &s[0], &err) == 0, "reopened: C claims again");
        dm_admission_release(s[0]);
        dm_admission_release(s[2]);
        dm_admission_release(s[3]);
        dm_cancel_release(&cancel);
        is_int(dm_admission_count(a, "local", false), 0, "every slot returned");

        dm_admission_release(NULL);
        dm_slot_unref(dm_slot_ref(NULL));
        dm_admission_free(a);
        done_testing();
}
