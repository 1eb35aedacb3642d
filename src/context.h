/* SPDX-License-Identifier: MIT */
#ifndef DM_CONTEXT_H
#define DM_CONTEXT_H

/* What one server process owns: its settings, its engine connection (opened
 * on first use, so tools/list works with no engine), its owner label, and
 * the queue of containers waiting to be removed after their result was sent. */

#include <pthread.h>
#include <stdbool.h>

#include "backends/backend.h"
#include "src/jobs.h"
#include "src/settings.h"
#include "src/util/paths.h"

#define DM_LABEL_OWNER "demesne.owner"
/* Which output root a one-off run's server served: a server sweeps up only
 * after dead servers of its own output root (its predecessors). */
#define DM_LABEL_ROOT "demesne.root"
#define DM_LABEL_RUN "demesne.run"
#define DM_LABEL_KIND "demesne.kind"

struct dm_reap_item;
struct dm_sandbox_shim;
struct dm_pool;
struct dm_resources;
struct dm_proxy;

struct dm_context {
        struct dm_config cfg;
        struct dm_allowed_roots roots;
        struct dm_jobs *jobs;           /* background jobs of this server */
        struct dm_resources *resources; /* who made which output directory (src/resources.c) */
        char owner[96];                 /* boot id + pid + start time */
        char owner_label[128];          /* "demesne.owner=<owner>" */
        char root_label[64];            /* "demesne.root=<hash of the output root>" */

        pthread_mutex_t lock; /* guards backend and the reap queue */
        struct dm_backend *backend;
        pthread_cond_t reap_cond;
        struct dm_reap_item *reap_head;
        bool reap_stop;
        pthread_t reaper;
        bool reaper_started;
        int reap_busy;
        bool orphans_pending; /* the reaper sweeps dead servers' containers */
        bool warm_pending;    /* the reaper opens the engine */

        pthread_mutex_t egress_lock; /* guards proxy */
        struct dm_proxy *proxy;      /* the egress proxy, made on first use (src/egress.c) */
        bool nat_done;               /* the pool's source NAT is in place */

        struct dm_pool *pool; /* warm containers (src/pool.c), `serve` only; NULL = none */

        pthread_mutex_t shim_lock;     /* guards shims */
        pthread_cond_t shim_changed;   /* an adoption of a shim ended (src/sandbox.c) */
        struct dm_sandbox_shim *shims; /* persistent sandboxes' shim sockets (src/sandbox.c) */
};

/* Loads the config, resolves the allowed roots, computes the owner. */
int dm_context_init(struct dm_context *ctx, struct dm_error *err);
/* Removes every container this process owns, stops the reaper and any
 * engine service it started. Safe to call once. */
void dm_context_release(struct dm_context *ctx);

/* The engine, opened (or reopened after it went away) on demand. The
 * returned pointer stays valid until dm_context_release. */
int dm_context_backend(struct dm_context *ctx, struct dm_backend **ret, struct dm_error *err);

/* Queues a container (and, optionally, a host scratch directory the server
 * made for it) for removal in the background. Takes ownership of both strings. */
void dm_context_reap(struct dm_context *ctx, char *container_id, char *scratch_dir);
/* The same, and then gives output_dir (may be NULL; taken) back to the
 * output root's owner (dm_owner_give_back): what the container's last
 * processes wrote too. */
void dm_context_reap_output(struct dm_context *ctx, char *container_id, char *scratch_dir, char *output_dir);

/* Opens the engine in the background and then removes what dead servers
 * left, so a server cleans up at start without making its first answer
 * wait. An engine that is not there yet is only a warning. */
void dm_context_warm_up(struct dm_context *ctx);

/* Waits until the reap queue is empty. */
void dm_context_reap_flush(struct dm_context *ctx);

/* Removes every container labelled with this process's owner. */
int dm_context_sweep(struct dm_context *ctx, struct dm_error *err);

/* Whether the server named by an owner label value still runs: same boot,
 * and a process with that pid and start time. my_owner is this server's. */
bool dm_owner_alive(const char *owner, const char *my_owner);

/* Removes a host directory tree without following symlinks. */
int dm_remove_tree(const char *path);

#endif
