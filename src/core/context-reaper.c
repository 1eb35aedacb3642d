/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/context-internal.h"
#include "src/core/admission.h"
#include "src/core/context.h"
#include "src/core/idmap.h"
#include "src/core/ownership.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "src/basic/log.h"
#include "src/basic/timeutil.h"

struct dm_reap_item {
        char *id;
        char *scratch;
        char *output;
        struct dm_slot *slot; /* a reference, dropped once the container is gone */
        struct dm_reap_item *next;
};

struct dm_reaper {
        struct dm_context *ctx;
        pthread_mutex_t lock; /* guards all below; never held while taking ctx->lock */
        pthread_cond_t cond;  /* the queue, a pending task, or busy changed */
        struct dm_reap_item *head;
        bool stop;
        pthread_t thread;
        bool started;
        int busy;             /* items and tasks under way */
        bool orphans_pending; /* sweep dead servers' containers */
        bool warm_pending;    /* open the engine */
        /* Calls in flight (runs and sandbox execs): background work (the
         * removals, the pool's refills) waits for a quiet moment rather
         * than take the CPU from them. */
        int calls;
        int64_t calls_end_ms;      /* when calls last fell below DM_QUIET_CALLS */
        int flushing;              /* dm_context_reap_flush is waiting: no yielding */
        pthread_cond_t quiet_cond; /* CLOCK_MONOTONIC; calls changed, or a stop */
};

/* The engine if it is open (the reaper never opens it but when asked to). */
static struct dm_backend *engine(struct dm_context *ctx)
{
        struct dm_backend *b;

        pthread_mutex_lock(&ctx->lock);
        b = ctx->backend;
        pthread_mutex_unlock(&ctx->lock);
        return b;
}

/* A run's scratch tree, with the inputs mounted in it (src/core/idmap.c). */
static int remove_scratch_tree(const char *dir)
{
        char stage[PATH_MAX];

        if ((size_t)snprintf(stage, sizeof(stage), "%s/in", dir) < sizeof(stage))
                dm_idmap_remove(stage);
        return dm_remove_tree(dir);
}

/* The run's scratch tree (/workspace and the shim's socket) under the
 * state directory, when its server died before removing it. */
static void remove_scratch(struct dm_context *ctx, const char *run)
{
        char dir[PATH_MAX];

        if (!run || strncmp(run, "run-", 4) != 0 || strchr(run, '/') || strstr(run, ".."))
                return;
        if ((size_t)snprintf(dir, sizeof(dir), "%s/work/%s", ctx->cfg.state_dir, run) < sizeof(dir) &&
            remove_scratch_tree(dir) < 0 && errno != ENOENT)
                log_warning("remove scratch directory '%s': %s", dir, strerror(errno));
}

/* A dead server's run: its output goes back to the owner all the same. */
static void give_back_run(struct dm_context *ctx, const char *run)
{
        char dir[PATH_MAX];

        if (run && strncmp(run, "run-", 4) == 0 && !strchr(run, '/') &&
            (size_t)snprintf(dir, sizeof(dir), "%s/%s", ctx->cfg.output_root, run) < sizeof(dir))
                dm_owner_return(ctx->cfg.output_root, dir);
}

static bool remove_empty_run(struct dm_context *ctx, const char *run)
{
        char dir[PATH_MAX];

        return run && strncmp(run, "run-", 4) == 0 && !strchr(run, '/') &&
               (size_t)snprintf(dir, sizeof(dir), "%s/%s", ctx->cfg.output_root, run) < sizeof(dir) && rmdir(dir) == 0;
}

/* Removes the script containers of servers that are gone (killed, crashed).
 * Persistent sandboxes are left for whoever adopts them; a live server's
 * containers are never touched. */
static void remove_orphans(struct dm_context *ctx, struct dm_backend *b)
{
        struct dm_error err = { 0 };
        char **ids = NULL;
        size_t n = 0, removed = 0;

        if (b->ops->list(b, DM_LABEL_OWNER, &ids, &n, &err) < 0) {
                log_warning("looking for containers of dead servers: %s", err.msg);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                struct dm_container_info info = { 0 };
                const char *owner = NULL, *kind = NULL, *run = NULL;
                bool other_root = false, pooled = false;

                if (b->ops->inspect(b, ids[i], &info, &err) == 0) {
                        for (size_t k = 0; info.labels && info.labels[k]; k++) {
                                if (strncmp(info.labels[k], DM_LABEL_OWNER "=", sizeof(DM_LABEL_OWNER)) == 0)
                                        owner = info.labels[k] + sizeof(DM_LABEL_OWNER);
                                else if (strncmp(info.labels[k], DM_LABEL_KIND "=", sizeof(DM_LABEL_KIND)) == 0)
                                        kind = info.labels[k] + sizeof(DM_LABEL_KIND);
                                else if (strncmp(info.labels[k], DM_LABEL_RUN "=", sizeof(DM_LABEL_RUN)) == 0)
                                        run = info.labels[k] + sizeof(DM_LABEL_RUN);
                                else if (strncmp(info.labels[k], DM_LABEL_ROOT "=", sizeof(DM_LABEL_ROOT)) == 0)
                                        other_root = strcmp(info.labels[k], ctx->root_label) != 0;
                                else if (strncmp(info.labels[k], DM_LABEL_POOL "=", sizeof(DM_LABEL_POOL)) == 0)
                                        pooled = true;
                        }
                        /* One-off runs (scripts and agents) belong to their
                         * server; persistent sandboxes outlive it. Runs of
                         * another output root are its servers' to sweep
                         * (those without the label predate it: anyone's). */
                        if (owner && kind && (strcmp(kind, "script") == 0 || strcmp(kind, "agent") == 0) &&
                            !other_root && strcmp(owner, ctx->owner) != 0 && !dm_owner_alive(owner, ctx->owner)) {
                                if (b->ops->destroy(b, ids[i], &err) == 0) {
                                        removed++;
                                        remove_scratch(ctx, run);
                                        /* A warm container no run took left an
                                         * empty output directory: it goes. */
                                        if (!pooled || !remove_empty_run(ctx, run))
                                                give_back_run(ctx, run);
                                } else
                                        log_warning("remove container '%.12s' of a dead server: %s", ids[i], err.msg);
                        }
                        dm_container_info_release(&info);
                }
                free(ids[i]);
        }
        free(ids);
        if (removed)
                log_info("removed %zu container(s) left by servers that are gone", removed);
        /* What else a dead server leaves (src/core/server.c says what). */
        if (ctx->after_orphan_sweep)
                ctx->after_orphan_sweep(ctx);
}

/* With r->lock held. */
static void wait_quiet_locked(struct dm_reaper *r, const bool *stop)
{
        int64_t deadline = dm_now_ms() + DM_QUIET_MAX_MS;

        for (;;) {
                int64_t now = dm_now_ms(), wake = deadline;
                struct timespec ts;

                if ((stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) || r->stop || r->flushing || now >= deadline)
                        return;
                if (r->calls < DM_QUIET_CALLS) {
                        int64_t quiet_at = r->calls_end_ms + DM_QUIET_GRACE_MS;

                        if (now >= quiet_at)
                                return;
                        if (quiet_at < wake)
                                wake = quiet_at;
                }
                dm_monotonic_after(wake - now, &ts);
                pthread_cond_timedwait(&r->quiet_cond, &r->lock, &ts);
        }
}

void dm_context_wait_quiet(struct dm_context *ctx, const bool *stop)
{
        struct dm_reaper *r = ctx->reaper;

        pthread_mutex_lock(&r->lock);
        wait_quiet_locked(r, stop);
        pthread_mutex_unlock(&r->lock);
}

void dm_context_quiet_wake(struct dm_context *ctx)
{
        struct dm_reaper *r = ctx->reaper;

        pthread_mutex_lock(&r->lock);
        pthread_cond_broadcast(&r->quiet_cond);
        pthread_mutex_unlock(&r->lock);
}

void dm_context_busy(struct dm_context *ctx, bool begin)
{
        struct dm_reaper *r = ctx->reaper;

        pthread_mutex_lock(&r->lock);
        if (begin)
                r->calls++;
        else if (r->calls > 0) {
                if (r->calls-- == DM_QUIET_CALLS)
                        r->calls_end_ms = dm_now_ms(); /* calls no longer share the machine */
        }
        pthread_cond_broadcast(&r->quiet_cond);
        pthread_mutex_unlock(&r->lock);
}

/* Opening the engine queues the sweep for dead owners (dm_context_backend). */
static void open_engine(struct dm_context *ctx)
{
        struct dm_error err = { 0 };
        struct dm_backend *b;

        if (dm_context_backend(ctx, &b, &err) < 0)
                log_warning("no container engine yet (%s); calls will say so until one answers", err.msg);
        else if (b->ops->userns) {
                /* Asked once per engine (GET /info, ~0.2 s on Podman): not
                 * on the first call's time. */
                struct dm_userns u;

                if (b->ops->userns(b, &u, &err) < 0)
                        log_warning("%s", err.msg);
        }
}

static void reap_now(struct dm_context *ctx, char *id, char *scratch, char *output, struct dm_slot *slot)
{
        struct dm_backend *b = engine(ctx);
        struct dm_error err = { 0 };

        if (id && b && b->ops->destroy(b, id, &err) < 0)
                log_warning("remove container '%.12s': %s", id, err.msg);
        if (scratch && remove_scratch_tree(scratch) < 0)
                log_warning("remove scratch directory '%s': %s", scratch, strerror(errno));
        if (output)
                dm_owner_return(ctx->cfg.output_root, output);
        dm_slot_unref(slot);
        free(id);
        free(scratch);
        free(output);
}

/* Takes the next piece of work, with r->lock held: false to end. */
enum task { TASK_NONE, TASK_WARM, TASK_ORPHANS, TASK_ITEM };
static enum task next_task(struct dm_reaper *r, struct dm_reap_item **ret)
{
        for (;;) {
                while (!r->head && !r->stop && !r->orphans_pending && !r->warm_pending)
                        pthread_cond_wait(&r->cond, &r->lock);
                if (r->warm_pending && !r->stop) {
                        r->warm_pending = false;
                        return TASK_WARM;
                }
                if (r->orphans_pending) {
                        r->orphans_pending = false;
                        return TASK_ORPHANS;
                }
                if (!r->head)
                        return TASK_NONE;
                /* A removal is 60 ms or so of the engine's CPU: not while
                 * a call is running (8 at once on 2 cores felt it). */
                wait_quiet_locked(r, NULL);
                if (!r->head)
                        continue;
                *ret = r->head;
                r->head = (*ret)->next;
                return TASK_ITEM;
        }
}

static void *reaper_main(void *arg)
{
        struct dm_reaper *r = arg;
        struct dm_context *ctx = r->ctx;

        pthread_mutex_lock(&r->lock);
        for (;;) {
                struct dm_reap_item *it = NULL;
                enum task t = next_task(r, &it);
                struct dm_backend *b;

                if (t == TASK_NONE)
                        break;
                r->busy++;
                pthread_mutex_unlock(&r->lock);
                switch (t) {
                case TASK_WARM: open_engine(ctx); break;
                case TASK_ORPHANS:
                        if ((b = engine(ctx)))
                                remove_orphans(ctx, b);
                        break;
                case TASK_ITEM:
                        reap_now(ctx, it->id, it->scratch, it->output, it->slot);
                        free(it);
                        break;
                case TASK_NONE: break;
                }
                pthread_mutex_lock(&r->lock);
                r->busy--;
                pthread_cond_broadcast(&r->cond);
        }
        pthread_mutex_unlock(&r->lock);
        return NULL;
}

int dm_reaper_new(struct dm_context *ctx, struct dm_reaper **ret, struct dm_error *err)
{
        struct dm_reaper *r = calloc(1, sizeof(*r));
        pthread_condattr_t ca;
        int e;

        if (!r)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r->ctx = ctx;
        pthread_mutex_init(&r->lock, NULL);
        pthread_cond_init(&r->cond, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&r->quiet_cond, &ca);
        pthread_condattr_destroy(&ca);
        e = pthread_create(&r->thread, NULL, reaper_main, r);
        if (e != 0) {
                dm_reaper_free(r);
                return dm_error_set(err, -e, "cannot start the reaper thread: %s", strerror(e));
        }
        r->started = true;
        *ret = r;
        return 0;
}

void dm_reaper_sweep_orphans(struct dm_reaper *r)
{
        pthread_mutex_lock(&r->lock);
        r->orphans_pending = true;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
}

static void flush(struct dm_reaper *r);

bool dm_reaper_stop(struct dm_reaper *r)
{
        if (!r || !r->started)
                return false;
        flush(r);
        pthread_mutex_lock(&r->lock);
        r->stop = true;
        pthread_cond_broadcast(&r->cond);
        pthread_cond_broadcast(&r->quiet_cond);
        pthread_mutex_unlock(&r->lock);
        pthread_join(r->thread, NULL);
        r->started = false;
        return true;
}

void dm_reaper_free(struct dm_reaper *r)
{
        if (!r)
                return;
        dm_reaper_stop(r);
        pthread_mutex_destroy(&r->lock);
        pthread_cond_destroy(&r->cond);
        pthread_cond_destroy(&r->quiet_cond);
        free(r);
}

void dm_context_reap(struct dm_context *ctx, char *container_id, char *scratch_dir)
{
        dm_context_reap_output(ctx, container_id, scratch_dir, NULL);
}

void dm_context_reap_output(struct dm_context *ctx, char *container_id, char *scratch_dir, char *output_dir)
{
        dm_context_reap_slot(ctx, container_id, scratch_dir, output_dir, NULL);
}

void dm_context_reap_slot(struct dm_context *ctx, char *container_id, char *scratch_dir, char *output_dir,
                          struct dm_slot *slot)
{
        struct dm_reap_item *it = calloc(1, sizeof(*it)), **tail;
        struct dm_reaper *r = ctx->reaper;
        bool queued = false;

        if (it) {
                *it = (struct dm_reap_item){
                        .id = container_id, .scratch = scratch_dir, .output = output_dir, .slot = slot
                };
                pthread_mutex_lock(&r->lock);
                if (!r->stop) {
                        for (tail = &r->head; *tail; tail = &(*tail)->next)
                                ;
                        *tail = it;
                        queued = true;
                        pthread_cond_broadcast(&r->cond);
                }
                pthread_mutex_unlock(&r->lock);
                if (queued)
                        return;
                free(it);
        }
        /* Out of memory, or the reaper has ended: removed here rather
         * than left behind. */
        reap_now(ctx, container_id, scratch_dir, output_dir, slot);
}

void dm_context_warm_up(struct dm_context *ctx)
{
        struct dm_reaper *r = ctx->reaper;

        pthread_mutex_lock(&r->lock);
        r->warm_pending = true;
        pthread_cond_broadcast(&r->cond);
        pthread_mutex_unlock(&r->lock);
}

static void flush(struct dm_reaper *r)
{
        pthread_mutex_lock(&r->lock);
        r->flushing++;
        pthread_cond_broadcast(&r->quiet_cond);
        while (r->head || r->busy)
                pthread_cond_wait(&r->cond, &r->lock);
        r->flushing--;
        pthread_mutex_unlock(&r->lock);
}

void dm_context_reap_flush(struct dm_context *ctx)
{
        flush(ctx->reaper);
}
