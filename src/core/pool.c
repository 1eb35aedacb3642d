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

#include "src/core/images.h"
#include "src/core/ownership.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

#define POOL_MAX 16
#define RETRY_MAX_MS 30000

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

/* The same container a cold run of the image gets (src/core/runner.c), without
 * a command yet: demesne-shim waits for one. -ENOENT when the image is not
 * built (the pool never builds one). */
static int entry_make(struct dm_pool *p, struct dm_pool_entry **ret, struct dm_error *err)
{
        struct dm_context *ctx = p->ctx;
        const struct dm_image_info *img;
        struct dm_pool_entry *e;
        struct dm_backend *b;
        struct dm_mount mounts[4];
        struct dm_launch l;
        char label_owner[160], label_run[128], label_kind[64], label_pool[64], shimdir[PATH_MAX + 16];
        const char *labels[6];
        size_t n = 0;
        bool exists = false;
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
        if (r == 0 || !dm_backend_can(b, DM_CAP_ATTACH))
                return dm_error_set(err, -ENOTSUP, "the pool needs demesne-shim and a local engine");
        r = b->ops->image_exists(b, dm_image_ref(img), &exists, err);
        if (r < 0)
                return r;
        if (!exists)
                return dm_error_set(err, -ENOENT, "image '%s' is not built yet", p->image);

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
                goto fail;
        }
        snprintf(e->scratch, sizeof(e->scratch), "%s/work/%s", ctx->cfg.state_dir, e->run_id);
        snprintf(e->workspace, sizeof(e->workspace), "%s/workspace", e->scratch);
        snprintf(shimdir, sizeof(shimdir), "%s/shim", e->scratch);
        if ((r = dm_mkdir_p(e->scratch, 0700, err)) < 0 || (r = dm_mkdir_p(e->workspace, 0700, err)) < 0)
                goto fail;

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
        /* Claimed by runs only, whose command goes through the shim. */
        spec.own_seccomp = true;
        r = dm_launch_container(ctx, b,
                                &(struct dm_launch_request){
                                        .img = img,
                                        .spec = &spec,
                                        .mounts = mounts,
                                        .n_mounts = &n,
                                        .shim_dir = shimdir,
                                        .lend = (const char *const[]){ e->outdir, e->workspace, NULL },
                                        /* no watch: the pool never builds an image */
                                },
                                &l, err);
        if (r < 0)
                goto fail;
        e->container = l.container;
        e->host = l.host;
        e->launched = l.launched;
        *ret = e;
        return 0;
fail:
        entry_remove(ctx, e);
        return r;
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
                        if (p->n_ready >= p->size)
                                pthread_cond_wait(&p->changed, &p->lock);
                        else
                                wait_until(p, p->retry_at);
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
                        /* Not for this server at all (no shim, a remote
                         * backend): said once, and the pool stays empty. */
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

struct dm_pool_entry *dm_pool_claim(struct dm_pool *p, const char *image)
{
        struct dm_pool_entry *e = NULL, *dead[POOL_MAX];
        int n_dead = 0;

        if (!p || strcmp(image, p->image) != 0)
                return NULL;
        pthread_mutex_lock(&p->lock);
        while (!p->stop && p->n_ready > 0 && !e) {
                struct dm_pool_entry *x = p->ready[0];

                memmove(p->ready, p->ready + 1, (size_t)(p->n_ready - 1) * sizeof(*p->ready));
                p->n_ready--;
                /* An engine restart stops warm containers too: a shim
                 * that closed its connections is no longer there. */
                if (dm_shimhost_ready(x->host))
                        e = x;
                else
                        dead[n_dead++] = x;
        }
        /* A miss (or a claim) makes the filler try now, whatever its pause. */
        p->retry_at = 0;
        pthread_cond_broadcast(&p->changed);
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < n_dead; i++) {
                log_info("pool: %s's container is gone (an engine restart?): not used", dead[i]->run_id);
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
