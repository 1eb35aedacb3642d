/* SPDX-License-Identifier: MIT */
/* Admission of a nested tree's containers (src/core/admission.h): one
 * mutex over the live slots, so that a count and the reservation that
 * follows it are one step; concurrent claims see each other's slots. */
#include "config.h"
#include "src/core/admission.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "src/basic/cancel.h"
#include "src/basic/log.h"
#include "src/basic/principal.h"
#include "src/basic/timeutil.h"

struct dm_slot {
        struct dm_admission *a;
        char principal[DM_PRINCIPAL_MAX];
        int refs;                       /* the owner's and the reap queue's; guarded by a->lock */
        struct dm_cancel *cancel;       /* the owner's, fired by a cascade */
        bool owned;                     /* the owner has not released it yet */
        char key[DM_ADMISSION_KEY_LEN]; /* bound: the sandbox whose record holds it */
        struct dm_slot *prev, *next;
};

struct closed {
        char principal[DM_PRINCIPAL_MAX];
        int n; /* cascades of it under way (a run's end and a destroy may overlap) */
        struct closed *next;
};

struct dm_admission {
        pthread_mutex_t lock;
        pthread_cond_t changed; /* CLOCK_MONOTONIC; a slot went */
        struct dm_slot *slots;
        struct closed *closed;
        size_t n_slots;
        dm_admission_records_fn records;
        void *userdata;
};

int dm_admission_new(dm_admission_records_fn records, void *userdata, struct dm_admission **ret)
{
        struct dm_admission *a = calloc(1, sizeof(*a));
        pthread_condattr_t attr;

        *ret = NULL;
        if (!a)
                return -ENOMEM;
        pthread_mutex_init(&a->lock, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&a->changed, &attr);
        pthread_condattr_destroy(&attr);
        a->records = records;
        a->userdata = userdata;
        *ret = a;
        return 0;
}

void dm_admission_free(struct dm_admission *a)
{
        if (!a)
                return;
        pthread_mutex_lock(&a->lock);
        if (a->slots) {
                log_error("admission: %zu slot%s still held at release (first: '%s'); the table is kept", a->n_slots,
                          a->n_slots == 1 ? "" : "s", a->slots->principal);
                pthread_mutex_unlock(&a->lock);
                return;
        }
        while (a->closed) {
                struct closed *c = a->closed;

                a->closed = c->next;
                free(c);
        }
        pthread_mutex_unlock(&a->lock);
        pthread_cond_destroy(&a->changed);
        pthread_mutex_destroy(&a->lock);
        free(a);
}

static size_t count_locked(struct dm_admission *a, const char *principal, bool exact)
{
        size_t n = 0;

        for (struct dm_slot *s = a->slots; s; s = s->next)
                n += exact ? strcmp(s->principal, principal) == 0 : dm_principal_covers(principal, s->principal);
        return n;
}

#define RECORDS_MAX 1024 /* DEMESNE_MAX_TREE is at most this */

/* Records under principal whose id no bound slot holds. */
static size_t records_locked(struct dm_admission *a, const char *principal, bool exact,
                             char (*ids)[DM_ADMISSION_KEY_LEN])
{
        size_t n, extra = 0;

        if (!a->records || !ids)
                return 0;
        n = a->records(a->userdata, principal, exact, ids, RECORDS_MAX);
        for (size_t i = 0; i < n; i++) {
                bool bound = false;

                if (i >= RECORDS_MAX) {
                        extra += n - i; /* not listed: counted */
                        break;
                }
                for (struct dm_slot *s = a->slots; s && !bound; s = s->next)
                        bound = s->key[0] && strcmp(s->key, ids[i]) == 0;
                extra += !bound;
        }
        return extra;
}

static bool closed_locked(struct dm_admission *a, const char *principal)
{
        for (struct closed *c = a->closed; c; c = c->next)
                if (dm_principal_covers(c->principal, principal))
                        return true;
        return false;
}

int dm_admission_claim(struct dm_admission *a, const char *principal, const struct dm_admission_caps *caps,
                       struct dm_cancel *cancel, struct dm_slot **ret, struct dm_error *err)
{
        return dm_admission_claim_n(a, principal, caps, 1, cancel, ret, err);
}

/* Refuses want more slots for principal (lock held): 0, or the cap's or
 * the cascade's sentence. */
static int check_locked(struct dm_admission *a, const char *principal, const char *root, size_t want,
                        const struct dm_admission_caps *caps, char (*ids)[DM_ADMISSION_KEY_LEN], struct dm_error *err)
{
        size_t n;

        if (closed_locked(a, principal))
                return dm_error_set(err, -ESHUTDOWN,
                                    "the sandbox this call comes from (or one above it) is being destroyed: nothing "
                                    "new starts in its tree");
        n = count_locked(a, principal, true) + records_locked(a, principal, true, ids);
        if ((int64_t)(n + want) > caps->max_children)
                return dm_error_set(err, -EUSERS,
                                    "this sandbox has %zu live children (sandboxes, runs and background jobs)%s, the "
                                    "limit (DEMESNE_MAX_CHILDREN=%lld): destroy or wait for some first",
                                    n, want > 1 ? " and asks for more at once" : "", (long long)caps->max_children);
        n = count_locked(a, root, false) + records_locked(a, root, false, ids);
        if ((int64_t)(n + want) > caps->max_tree)
                return dm_error_set(err, -EUSERS,
                                    "this tree of sandboxes has %zu live sandboxes, runs and background jobs%s, the "
                                    "limit (DEMESNE_MAX_TREE=%lld)",
                                    n, want > 1 ? " and this call asks for more at once" : "",
                                    (long long)caps->max_tree);
        return 0;
}

int dm_admission_claim_n(struct dm_admission *a, const char *principal, const struct dm_admission_caps *caps,
                         size_t want, struct dm_cancel *cancel, struct dm_slot **ret, struct dm_error *err)
{
        char root[DM_PRINCIPAL_MAX], (*ids)[DM_ADMISSION_KEY_LEN] = NULL;
        struct dm_slot **s;
        size_t made = 0;
        int r = 0;

        for (size_t i = 0; i < want; i++)
                ret[i] = NULL;
        /* The host's callers: no cap, no lock. */
        if (dm_principal_depth(principal) == 0 || want == 0)
                return 0;
        if (strlen(principal) >= DM_PRINCIPAL_MAX)
                return dm_error_set(err, -ENAMETOOLONG, "the caller's principal is too long");
        if (want > RECORDS_MAX)
                return dm_error_set(err, -EINVAL, "at most %d slots at once", RECORDS_MAX);
        s = calloc(want, sizeof(*s));
        for (; s && made < want && (s[made] = calloc(1, sizeof(**s))); made++)
                ;
        if (a->records)
                ids = calloc(RECORDS_MAX, sizeof(*ids));
        if (!s || made < want || (a->records && !ids)) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto out;
        }
        dm_principal_root(principal, root, sizeof(root));

        /* All of them under one lock, or none: a concurrent claim sees
         * either every slot of this one or none of them. */
        pthread_mutex_lock(&a->lock);
        r = check_locked(a, principal, root, want, caps, ids, err);
        for (size_t i = 0; r >= 0 && i < want; i++) {
                struct dm_slot *x = s[i];

                x->a = a;
                memcpy(x->principal, principal, strlen(principal) + 1);
                x->refs = 1;
                x->owned = true;
                x->cancel = cancel;
                x->next = a->slots;
                if (a->slots)
                        a->slots->prev = x;
                a->slots = x;
                a->n_slots++;
                ret[i] = x;
                s[i] = NULL;
        }
        pthread_mutex_unlock(&a->lock);
out:
        for (size_t i = 0; s && i < made; i++)
                free(s[i]);
        free(s);
        free(ids);
        return r;
}

int dm_admission_set_cancel(struct dm_slot *s, struct dm_cancel *cancel)
{
        bool closed;

        if (!s)
                return 0;
        pthread_mutex_lock(&s->a->lock);
        s->cancel = cancel;
        /* Closed before the owner had a cancel to give: it ends at once. */
        closed = closed_locked(s->a, s->principal);
        if (cancel && closed)
                dm_cancel_fire(cancel);
        pthread_mutex_unlock(&s->a->lock);
        return closed ? -ECANCELED : 0;
}

struct dm_slot *dm_slot_ref(struct dm_slot *s)
{
        if (!s)
                return NULL;
        pthread_mutex_lock(&s->a->lock);
        s->refs++;
        pthread_mutex_unlock(&s->a->lock);
        return s;
}

static void unref_locked(struct dm_slot *s)
{
        struct dm_admission *a = s->a;

        if (--s->refs > 0)
                return;
        if (s->prev)
                s->prev->next = s->next;
        else
                a->slots = s->next;
        if (s->next)
                s->next->prev = s->prev;
        a->n_slots--;
        pthread_cond_broadcast(&a->changed);
        free(s);
}

void dm_slot_unref(struct dm_slot *s)
{
        struct dm_admission *a;

        if (!s)
                return;
        a = s->a;
        pthread_mutex_lock(&a->lock);
        unref_locked(s);
        pthread_mutex_unlock(&a->lock);
}

void dm_admission_release(struct dm_slot *s)
{
        struct dm_admission *a;

        if (!s)
                return;
        a = s->a;
        pthread_mutex_lock(&a->lock);
        s->cancel = NULL;
        s->owned = false;
        pthread_cond_broadcast(&a->changed);
        unref_locked(s);
        pthread_mutex_unlock(&a->lock);
}

void dm_admission_bind(struct dm_slot *s, const char *key)
{
        if (!s)
                return;
        pthread_mutex_lock(&s->a->lock);
        snprintf(s->key, sizeof(s->key), "%s", key);
        s->cancel = NULL;
        s->owned = false;
        pthread_cond_broadcast(&s->a->changed);
        pthread_mutex_unlock(&s->a->lock);
}

void dm_admission_release_key(struct dm_admission *a, const char *key)
{
        if (!a || !key || !key[0])
                return;
        pthread_mutex_lock(&a->lock);
        for (struct dm_slot *s = a->slots; s; s = s->next)
                if (strcmp(s->key, key) == 0) {
                        s->key[0] = '\0';
                        unref_locked(s);
                        break;
                }
        pthread_mutex_unlock(&a->lock);
}

size_t dm_admission_count(struct dm_admission *a, const char *principal, bool exact)
{
        size_t n;

        pthread_mutex_lock(&a->lock);
        n = count_locked(a, principal, exact);
        pthread_mutex_unlock(&a->lock);
        return n;
}

void dm_admission_close(struct dm_admission *a, const char *principal)
{
        struct closed *c;

        if (!a || !principal || !principal[0])
                return;
        pthread_mutex_lock(&a->lock);
        for (c = a->closed; c; c = c->next)
                if (strcmp(c->principal, principal) == 0)
                        break;
        if (c)
                c->n++;
        else if ((c = calloc(1, sizeof(*c)))) {
                snprintf(c->principal, sizeof(c->principal), "%s", principal);
                c->n = 1;
                c->next = a->closed;
                a->closed = c;
        } else
                log_warning("admission: out of memory to close '%s'; its in-flight work is still cancelled", principal);
        for (struct dm_slot *s = a->slots; s; s = s->next)
                if (s->cancel && dm_principal_covers(principal, s->principal))
                        dm_cancel_fire(s->cancel);
        pthread_mutex_unlock(&a->lock);
}

static size_t owned_locked(struct dm_admission *a, const char *principal)
{
        size_t n = 0;

        for (struct dm_slot *s = a->slots; s; s = s->next)
                n += s->owned && dm_principal_covers(principal, s->principal);
        return n;
}

int dm_admission_drain(struct dm_admission *a, const char *principal, int64_t timeout_ms)
{
        struct timespec until;
        int r = 0;

        if (!a)
                return 0;
        dm_monotonic_after(timeout_ms, &until);
        pthread_mutex_lock(&a->lock);
        while (owned_locked(a, principal) > 0)
                if (pthread_cond_timedwait(&a->changed, &a->lock, &until) == ETIMEDOUT) {
                        r = owned_locked(a, principal) > 0 ? -ETIMEDOUT : 0;
                        break;
                }
        pthread_mutex_unlock(&a->lock);
        return r;
}

void dm_admission_reopen(struct dm_admission *a, const char *principal)
{
        if (!a || !principal)
                return;
        pthread_mutex_lock(&a->lock);
        for (struct closed **p = &a->closed; *p; p = &(*p)->next) {
                struct closed *c = *p;

                if (strcmp(c->principal, principal) == 0) {
                        if (--c->n == 0) {
                                *p = c->next;
                                free(c);
                        }
                        break;
                }
        }
        pthread_mutex_unlock(&a->lock);
}
