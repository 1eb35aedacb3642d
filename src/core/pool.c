/* SPDX-License-Identifier: MIT */
/* The warm pool (src/core/pool.h): one filler thread per pool, entries made the
 * way src/core/runner.c makes a cold run's container. */
#include "config.h"
#include "src/core/pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "netpolicy/policy.h"
#include "src/core/egress.h"
#include "src/core/images.h"
#include "src/core/ownership.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

#define POOL_MAX 16
#define RETRY_MAX_MS 30000
/* A remote entry's TTL while it waits (the server may grant less: its
 * maximum); renewed when half of what was granted is left. */
#define POOL_IDLE_TTL_S 3600

struct dm_pool {
        struct dm_context *ctx;
        char image[32];
        int size;
        pthread_mutex_t lock;
        pthread_cond_t changed; /* CLOCK_MONOTONIC */
        pthread_t thread;
        struct dm_pool_entry *ready[POOL_MAX]; /* oldest first */
        int n_ready;
        bool stop;
        int fails;
        int64_t retry_at; /* monotonic ms; 0 = now */
        char last_error[1024];
};

void dm_pool_entry_free(struct dm_pool_entry *e)
{
        if (!e)
                return;
        dm_shimhost_free(e->host);
        free(e->container);
        free(e);
}

/* An entry no run will have: its container, scratch tree and (still
 * empty) output directory go. Inline: at exit, or when making it failed. */
static void entry_remove(struct dm_context *ctx, struct dm_pool_entry *e)
{
        struct dm_error err = { 0 };
        struct dm_backend *b = NULL;

        if (!e)
                return;
        dm_shimhost_free(e->host);
        e->host = NULL;
        if (e->container && dm_context_backend(ctx, &b, &err) == 0 && b->ops->destroy(b, e->container, &err) < 0)
                log_warning("pool: remove container '%.12s': %s", e->container, err.msg);
        if (e->scratch[0] && dm_remove_tree(e->scratch) < 0 && errno != ENOENT)
                log_warning("pool: remove '%s': %s", e->scratch, strerror(errno));
        if (e->outdir[0] && rmdir(e->outdir) < 0 && errno != ENOENT) {
                /* Not empty after all: it stays, given back to its owner. */
                dm_owner_return(ctx->cfg.output_root, e->outdir);
                log_warning("pool: output directory '%s' was not empty; left in place", e->outdir);
        }
        dm_pool_entry_free(e);
}

/* What the server granted a remote entry (its expiresAt), read once. */
static void remote_expiry(struct dm_backend *b, struct dm_pool_entry *e)
{
        struct dm_container_info info = { 0 };
        struct dm_error err = { 0 };
        int64_t now = dm_wall_ms() / 1000;

        e->expires_unix = now + POOL_IDLE_TTL_S;
        e->granted_s = POOL_IDLE_TTL_S;
        if (b->ops->inspect(b, e->container, &info, &err) < 0) {
                log_debug("pool: %s: %s", e->run_id, err.msg);
                return;
        }
        if (info.expires_unix > now)
                e->expires_unix = info.expires_unix;
        dm_container_info_release(&info);
        /* OpenSandbox's minimum is 60 s. */
        e->granted_s = e->expires_unix - now < 60 ? 60 : e->expires_unix - now;
}

/* Pushes a remote entry's expiry to until (or leaves a later one): 0 when
 * the sandbox is still there. */
static int remote_renew(struct dm_context *ctx, const char *container, int64_t until, struct dm_error *err)
{
        struct dm_backend *b = NULL;
        int r = dm_context_backend(ctx, &b, err);

        return r < 0 ? r : b->ops->renew(b, container, until, err);
}

/* The entry's own run id, output directory (empty, 0700) and scratch tree
 * with its /workspace: a cold run's, made before anyone asks. */
static int entry_new(struct dm_pool *p, struct dm_pool_entry **ret, struct dm_error *err)
{
        struct dm_context *ctx = p->ctx;
        struct dm_pool_entry *e;
        int r;

        e = calloc(1, sizeof(*e));
        if (!e)
                return dm_error_set(err, -ENOMEM, "out of memory");
        snprintf(e->image, sizeof(e->image), "%s", p->image);
        if (dm_run_id_new(e->run_id, sizeof(e->run_id)) < 0) {
                free(e);
                return dm_error_set(err, -EIO, "cannot make a run id");
        }
        r = dm_mkdir_p(ctx->cfg.output_root, 0700, err);
        if (r < 0) {
                free(e);
                return r;
        }
        snprintf(e->outdir, sizeof(e->outdir), "%s/%s", ctx->cfg.output_root, e->run_id);
        if (mkdir(e->outdir, 0700) < 0) {
                r = dm_error_set(err, -errno, "cannot create '%s': %s", e->outdir, strerror(errno));
                e->outdir[0] = '\0';
                entry_remove(ctx, e);
                return r;
        }
        snprintf(e->scratch, sizeof(e->scratch), "%s/work/%s", ctx->cfg.state_dir, e->run_id);
        snprintf(e->workspace, sizeof(e->workspace), "%s/workspace", e->scratch);
        if ((r = dm_mkdir_p(e->scratch, 0700, err)) < 0 || (r = dm_mkdir_p(e->workspace, 0700, err)) < 0) {
                entry_remove(ctx, e);
                return r;
        }
        *ret = e;
        return 0;
}

/* A remote entry's network, as a cold run's with the server's default
 * egress and no allow entries (src/core/runner.c confine()): fixed at
 * create on such a backend. *ret_policy stays the caller's. */
static int remote_network(struct dm_context *ctx, struct dm_backend *b, struct dm_container_spec *spec,
                          struct dm_pool_entry *e, struct dm_policy **ret_policy, struct dm_error *err)
{
        int r = dm_policy_parse(dm_egress_default(ctx), NULL, 0, ret_policy, err);

        if (r < 0)
                return r;
        e->egress = (int)(*ret_policy)->mode;
        if (dm_egress_backend_open(b, *ret_policy)) {
                spec->network_mode = "open";
        } else {
                spec->egress = *ret_policy;
                spec->egress_package_hosts = dm_egress_package_hosts();
        }
        return 0;
}

/* The same container a cold run of the image gets (src/core/runner.c), without
 * a command yet: demesne-shim waits for one; on a remote backend the
 * sandbox idles as a cold run's does until its command comes through exec.
 * -ENOENT when the image is not built (the pool never builds one). */
static int entry_make(struct dm_pool *p, struct dm_pool_entry **ret, struct dm_error *err)
{
        static const char *const idle_argv[] = { "sleep", "infinity", NULL };
        struct dm_context *ctx = p->ctx;
        const struct dm_image_info *img;
        struct dm_pool_entry *e = NULL;
        struct dm_policy *policy = NULL;
        struct dm_backend *b;
        struct dm_mount mounts[4];
        struct dm_launch l;
        char label_owner[160], label_run[128], label_kind[64], label_pool[64], shimdir[PATH_MAX + 16];
        const char *labels[6];
        size_t n = 0;
        bool exists = false, remote;
        int r;

        r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                return r;
        r = dm_image_lookup(p->image, &img, err);
        if (r < 0)
                return r;
        r = dm_launch_shim_mode(ctx, b, err);
        if (r < 0)
                return r;
        /* Local: the shim, attached. Remote: what a cold run there has,
         * no shim (DEMESNE_SHIM=off) and its own expiry. */
        remote = r == 0 && !dm_backend_can(b, DM_CAP_ATTACH) && dm_backend_can(b, DM_CAP_TTL) && b->ops->renew;
        if (!remote && (r == 0 || !dm_backend_can(b, DM_CAP_ATTACH)))
                return dm_error_set(err, -ENOTSUP,
                                    "the pool needs demesne-shim on a local engine, or a backend "
                                    "with its own expiry (OpenSandbox)");
        if (dm_backend_can(b, DM_CAP_IMAGES) && (r = b->ops->image_exists(b, dm_image_ref(img), &exists, err)) < 0)
                return r;
        if (dm_backend_can(b, DM_CAP_IMAGES) && !exists)
                return dm_error_set(err, -ENOENT, "image '%s' is not built yet", p->image);
        r = entry_new(p, &e, err);
        if (r < 0)
                return r;
        e->remote = remote;
        snprintf(shimdir, sizeof(shimdir), "%s/shim", e->scratch);
        mounts[n++] = (struct dm_mount){ .host = e->outdir, .target = "/out" };
        mounts[n++] = (struct dm_mount){ .host = e->workspace, .target = "/workspace" };
        snprintf(label_owner, sizeof(label_owner), "%s", ctx->owner_label);
        snprintf(label_run, sizeof(label_run), "%s=%s", DM_LABEL_RUN, e->run_id);
        snprintf(label_kind, sizeof(label_kind), "%s=script", DM_LABEL_KIND);
        snprintf(label_pool, sizeof(label_pool), "%s=%s", DM_LABEL_POOL, p->image);
        labels[0] = label_owner;
        labels[1] = label_run;
        labels[2] = label_kind;
        labels[3] = ctx->root_label;
        labels[4] = label_pool;
        labels[5] = NULL;
        struct dm_container_spec spec = {
                .name = e->run_id,
                .image = dm_image_ref(img),
                .workdir = "/out",
                .mounts = mounts,
                .n_mounts = n,
                .labels = labels,
        };
        dm_launch_harden(ctx, &spec);
        if (remote) {
                spec.entrypoint = idle_argv;
                spec.ttl_s = POOL_IDLE_TTL_S;
                r = remote_network(ctx, b, &spec, e, &policy, err);
        } else {
                /* Claimed by runs only, whose command goes through the shim. */
                spec.own_seccomp = true;
        }
        if (r >= 0)
                r = dm_launch_container(ctx, b,
                                        &(struct dm_launch_request){
                                                .img = img,
                                                .spec = &spec,
                                                .mounts = mounts,
                                                .n_mounts = &n,
                                                .shim_dir = remote ? NULL : shimdir,
                                                .lend = (const char *const[]){ e->outdir, e->workspace, NULL },
                                                /* no watch: the pool never builds an image */
                                        },
                                        &l, err);
        dm_policy_free(policy);
        if (r < 0) {
                entry_remove(ctx, e);
                return r;
        }
        e->container = l.container;
        e->host = l.host;
        e->launched = l.launched;
        if (remote)
                remote_expiry(b, e);
        *ret = e;
        return 0;
}

static void wait_until(struct dm_pool *p, int64_t until)
{
        struct timespec ts;
        int64_t left = until - dm_now_ms();

        if (left <= 0)
                return;
        dm_monotonic_after(left, &ts);
        pthread_cond_timedwait(&p->changed, &p->lock, &ts);
}

/* When the next waiting remote entry is due for renewal (monotonic ms;
 * INT64_MAX: none). Under the lock. */
static int64_t next_renewal(struct dm_pool *p)
{
        int64_t next = INT64_MAX, now = dm_now_ms(), wall = dm_wall_ms();

        for (int i = 0; i < p->n_ready; i++) {
                const struct dm_pool_entry *e = p->ready[i];
                int64_t due;

                if (!e->remote)
                        continue;
                due = now + (e->expires_unix - e->granted_s / 2) * 1000 - wall;
                if (due < next)
                        next = due;
        }
        return next;
}

/* Renews the waiting remote entries that are due, each by what the server
 * granted at create; one that is gone leaves the pool (and is made
 * again). Called and returns under the lock, which the calls go without. */
static void renew_idle(struct dm_pool *p)
{
        struct dm_pool_entry *due[POOL_MAX];
        int64_t wall = dm_wall_ms();
        int n = 0;

        for (int i = 0; i < p->n_ready;) {
                struct dm_pool_entry *e = p->ready[i];

                if (e->remote && (e->expires_unix - e->granted_s / 2) * 1000 <= wall) {
                        due[n++] = e;
                        memmove(p->ready + i, p->ready + i + 1, (size_t)(p->n_ready - i - 1) * sizeof(*p->ready));
                        p->n_ready--;
                } else {
                        i++;
                }
        }
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < n; i++) {
                struct dm_error err = { 0 };
                int64_t until = dm_wall_ms() / 1000 + due[i]->granted_s;

                if (remote_renew(p->ctx, due[i]->container, until, &err) < 0) {
                        log_info("pool: %s is not used: %s", due[i]->run_id, err.msg);
                        entry_remove(p->ctx, due[i]);
                        due[i] = NULL;
                } else {
                        due[i]->expires_unix = until;
                }
        }
        pthread_mutex_lock(&p->lock);
        /* Back in, oldest first as before (a claim took none meanwhile:
         * they were out of its reach). */
        for (int i = 0; i < n; i++)
                if (due[i] && p->n_ready < POOL_MAX && !p->stop)
                        p->ready[p->n_ready++] = due[i];
                else if (due[i]) {
                        pthread_mutex_unlock(&p->lock);
                        entry_remove(p->ctx, due[i]);
                        pthread_mutex_lock(&p->lock);
                }
}

static void *fill_main(void *arg)
{
        struct dm_pool *p = arg;

        pthread_mutex_lock(&p->lock);
        for (;;) {
                struct dm_pool_entry *e = NULL;
                struct dm_error err = { 0 };
                int64_t t0;
                int r;

                while (!p->stop && (p->n_ready >= p->size || dm_now_ms() < p->retry_at)) {
                        int64_t renew = next_renewal(p);

                        if (renew <= dm_now_ms())
                                renew_idle(p);
                        else if (p->n_ready >= p->size && renew == INT64_MAX)
                                pthread_cond_wait(&p->changed, &p->lock);
                        else
                                wait_until(p, p->n_ready >= p->size || renew < p->retry_at ? renew : p->retry_at);
                }
                if (p->stop)
                        break;
                pthread_mutex_unlock(&p->lock);
                /* Making a container takes the engine ~100 ms of CPU:
                 * after the calls of the moment, not among them. */
                dm_context_wait_quiet(p->ctx, &p->stop);
                t0 = dm_now_ms();
                r = entry_make(p, &e, &err);
                pthread_mutex_lock(&p->lock);
                if (r >= 0 && !p->stop) {
                        p->ready[p->n_ready++] = e;
                        p->fails = 0;
                        p->last_error[0] = '\0';
                        log_debug("pool: %s ready (%s) in %lld ms", e->run_id, p->image, (long long)(dm_now_ms() - t0));
                } else if (r >= 0) {
                        pthread_mutex_unlock(&p->lock);
                        entry_remove(p->ctx, e);
                        pthread_mutex_lock(&p->lock);
                } else if (r == -ENOTSUP) {
                        /* Not for this server at all (no shim on a local
                         * engine; a remote backend that cannot hold the
                         * default egress): said once, the pool stays empty. */
                        log_info("pool: off: %s", err.msg);
                        snprintf(p->last_error, sizeof(p->last_error), "%s", err.msg);
                        p->size = 0;
                } else {
                        int64_t pause = 1000LL << (p->fails < 5 ? p->fails : 5);

                        /* Said once per cause, then quietly retried. */
                        if (strcmp(p->last_error, err.msg) != 0)
                                log_info("pool: no warm %s container (%s); trying again in the background", p->image,
                                         err.msg);
                        snprintf(p->last_error, sizeof(p->last_error), "%s", err.msg);
                        p->fails++;
                        p->retry_at = dm_now_ms() + (pause > RETRY_MAX_MS ? RETRY_MAX_MS : pause);
                }
                pthread_cond_broadcast(&p->changed);
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

int dm_pool_start(struct dm_context *ctx, const char *image, int size, struct dm_pool **ret, struct dm_error *err)
{
        struct dm_pool *p;
        pthread_condattr_t ca;
        int r;

        if (size < 1 || size > POOL_MAX)
                return dm_error_set(err, -EINVAL, "a pool holds 1 to %d containers", POOL_MAX);
        p = calloc(1, sizeof(*p));
        if (!p)
                return dm_error_set(err, -ENOMEM, "out of memory");
        p->ctx = ctx;
        p->size = size;
        snprintf(p->image, sizeof(p->image), "%s", image);
        pthread_mutex_init(&p->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&p->changed, &ca);
        pthread_condattr_destroy(&ca);
        r = -pthread_create(&p->thread, NULL, fill_main, p);
        if (r < 0) {
                pthread_cond_destroy(&p->changed);
                pthread_mutex_destroy(&p->lock);
                free(p);
                return dm_error_set(err, r, "cannot start the pool's thread: %s", strerror(-r));
        }
        *ret = p;
        return 0;
}

/* Whether a run with policy may have remote entry e: the egress it was
 * made with is fixed (the backend's, at create), so the same mode and no
 * allow entries. */
static bool remote_fits(const struct dm_pool_entry *e, const struct dm_policy *policy)
{
        int mode = policy ? (int)policy->mode : (int)DM_EGRESS_NONE;

        return mode == e->egress && (!policy || (policy->n_cidrs == 0 && policy->n_names == 0));
}

/* Whether e can still serve a run: its shim is connected; a remote
 * sandbox is still there, with ttl_s left at least (one request). */
static bool entry_alive(struct dm_pool *p, struct dm_pool_entry *e, int64_t ttl_s)
{
        struct dm_error err = { 0 };
        int64_t until = dm_wall_ms() / 1000 + ttl_s;

        if (!e->remote)
                return dm_shimhost_ready(e->host);
        if (until < e->expires_unix)
                until = e->expires_unix;
        if (remote_renew(p->ctx, e->container, until, &err) < 0) {
                log_info("pool: %s: %s", e->run_id, err.msg);
                return false;
        }
        e->expires_unix = until;
        return true;
}

struct dm_pool_entry *dm_pool_claim(struct dm_pool *p, const char *image, const struct dm_policy *policy, int64_t ttl_s)
{
        struct dm_pool_entry *e = NULL, *dead[POOL_MAX];
        int n_dead = 0;

        if (!p || strcmp(image, p->image) != 0)
                return NULL;
        pthread_mutex_lock(&p->lock);
        while (!p->stop && p->n_ready > 0 && !e && n_dead < POOL_MAX) {
                struct dm_pool_entry *x = p->ready[0];

                if (x->remote && !remote_fits(x, policy))
                        break; /* all made alike: none fits */
                memmove(p->ready, p->ready + 1, (size_t)(p->n_ready - 1) * sizeof(*p->ready));
                p->n_ready--;
                /* An engine restart stops warm containers too: a shim
                 * that closed its connections is no longer there. A
                 * remote sandbox is asked (without the lock). */
                if (x->remote) {
                        pthread_mutex_unlock(&p->lock);
                        if (entry_alive(p, x, ttl_s))
                                e = x;
                        else
                                dead[n_dead++] = x;
                        pthread_mutex_lock(&p->lock);
                } else if (dm_shimhost_ready(x->host)) {
                        e = x;
                } else {
                        dead[n_dead++] = x;
                }
        }
        /* A miss (or a claim) makes the filler try now, whatever its pause. */
        p->retry_at = 0;
        pthread_cond_broadcast(&p->changed);
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < n_dead; i++) {
                log_info("pool: %s's container is gone (%s): not used", dead[i]->run_id,
                         dead[i]->remote ? "removed by the server" : "an engine restart?");
                entry_remove(p->ctx, dead[i]);
        }
        if (e)
                log_debug("pool: %s claimed", e->run_id);
        return e;
}

json_object *dm_pool_describe(struct dm_pool *p)
{
        json_object *o = json_object_new_object();

        pthread_mutex_lock(&p->lock);
        json_object_object_add(o, "image", json_object_new_string(p->image));
        json_object_object_add(o, "size", json_object_new_int(p->size));
        json_object_object_add(o, "ready", json_object_new_int(p->n_ready));
        if (p->n_ready && p->ready[0]->remote)
                json_object_object_add(o, "egress", json_object_new_string(dm_egress_names[p->ready[0]->egress]));
        if (p->last_error[0])
                json_object_object_add(o, "why_not_ready", json_object_new_string(p->last_error));
        pthread_mutex_unlock(&p->lock);
        return o;
}

void dm_pool_stop(struct dm_pool *p)
{
        if (!p)
                return;
        pthread_mutex_lock(&p->lock);
        __atomic_store_n(&p->stop, true, __ATOMIC_RELEASE); /* read unlocked by dm_context_wait_quiet */
        pthread_cond_broadcast(&p->changed);
        pthread_mutex_unlock(&p->lock);
        dm_context_quiet_wake(p->ctx);
        pthread_join(p->thread, NULL);
        for (int i = 0; i < p->n_ready; i++)
                entry_remove(p->ctx, p->ready[i]);
        if (p->n_ready)
                log_info("pool: removed %d warm container(s)", p->n_ready);
        pthread_cond_destroy(&p->changed);
        pthread_mutex_destroy(&p->lock);
        free(p);
}
