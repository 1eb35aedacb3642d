/* SPDX-License-Identifier: MIT */
#ifndef DM_CONTEXT_H
#define DM_CONTEXT_H

/* What one server process owns: its settings, its engine connection (opened
 * on first use, so tools/list works with no engine), its owner label, and
 * the queue of containers waiting to be removed after their result was sent.
 *
 * This file knows none of the parts that keep state here (pool, egress,
 * sandboxes' shims, the TTL reaper): src/core/server.h starts and releases
 * the whole in order. */

#include <pthread.h>
#include <stdbool.h>

#include "backends/backend.h"
#include "src/core/jobs.h"
#include "src/core/settings.h"
#include "src/basic/paths.h"

#define DM_LABEL_OWNER "demesne.owner"
/* Which output root a one-off run's server served: a server sweeps up only
 * after dead servers of its own output root (its predecessors). */
#define DM_LABEL_ROOT "demesne.root"
#define DM_LABEL_RUN "demesne.run"
#define DM_LABEL_KIND "demesne.kind"
/* A warm container no run has claimed yet (src/core/pool.h). */
#define DM_LABEL_POOL "demesne.pool"

struct dm_reaper;
struct dm_sandboxes;
struct dm_egress_host;
struct dm_pool;
struct dm_resources;
struct dm_proxy;
struct dm_nested;
struct dm_budget;
struct dm_hostmcp;
struct dm_sandbox;
struct dm_admission;
struct dm_slot;

struct dm_context {
        struct dm_config cfg;
        struct dm_allowed_roots roots;
        struct dm_jobs *jobs;           /* background jobs of this server */
        struct dm_resources *resources; /* who made which output directory (src/core/resources.c) */
        struct dm_budget *budget;       /* agent runs' reservations of their trees' spend (src/core/budget.h) */
        char owner[96];                 /* boot id + pid + start time */
        char owner_label[128];          /* "demesne.owner=<owner>" */
        char root_label[64];            /* "demesne.root=<hash of the output root>" */

        pthread_mutex_t lock; /* guards backend */
        struct dm_backend *backend;
        /* The removal queue, the orphan sweep and the quiet gate: the
         * reaper's own (src/core/context-internal.h). */
        struct dm_reaper *reaper;

        /* The egress state this host has for all its sandboxes: the proxy,
         * the source NAT (src/core/egress.h); made and freed by the server
         * object. */
        struct dm_egress_host *egress;

        struct dm_pool *pool; /* warm containers (src/core/pool.c), `serve` only; NULL = none */

        /* Persistent sandboxes' state in this server: the shim sockets it
         * holds, destroys under way, the TTL reaper (src/core/sandbox.h);
         * made and freed by the server object. */
        struct dm_sandboxes *sandboxes;

        /* Called by the orphan sweep after it removed dead servers'
         * containers: the rest they left (agents' files, input stages). */
        void (*after_orphan_sweep)(struct dm_context *ctx);
        /* Called after a persistent sandbox is destroyed (by a call, or by
         * the TTL reaper), with no lock held: what was made for it above
         * the core ends too (its nested MCP endpoint, its children). */
        void (*after_sandbox_destroy)(struct dm_context *ctx, const char *id);
        /* Called before each command in a nested sandbox (one made with
         * nested: true), with the container's PID 1 as this server reached
         * it: the tools layer opens the sandbox's endpoint when this server
         * has none in that network namespace (a sandbox taken over from an
         * earlier server, or restarted by the engine), and may give the
         * command variables (*ret_env, a malloc'd NULL-terminated array of
         * malloc'd strings, freed by the caller). A failure is logged; the
         * command runs. */
        void (*before_sandbox_exec)(struct dm_context *ctx, const struct dm_sandbox *sb, int pid, char ***ret_env);
        /* The tools layer's server (src/tools/server.c): its registry,
         * nested sandboxes' MCP endpoints and the host tool proxy; opaque
         * here, NULL when no tools server serves this context. */
        struct dm_tools_server *tools;
        /* Nested trees' live containers (src/core/admission.h), made and
         * freed by the server object; NULL: no caps (a one-off run). */
        struct dm_admission *admission;
};

/* Loads the config, resolves the allowed roots, computes the owner.
 * Servers use dm_server_init (src/core/server.h), which calls it. */
int dm_context_init(struct dm_context *ctx, struct dm_error *err);
/* Ends the jobs, waits for the reap queue, stops the reaper, removes every
 * container this process owns, and closes the engine (stopping any engine
 * service it started). Safe to call once; dm_server_release calls it last. */
void dm_context_release(struct dm_context *ctx);
/* Waits for the reap queue, stops the reaper and removes every container
 * this process owns; the engine stays open. Safe to call twice. */
void dm_context_drain(struct dm_context *ctx);

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
/* The same, and then drops slot (a reference to an admission slot, may be
 * NULL): the container no longer counts once it is gone. */
void dm_context_reap_slot(struct dm_context *ctx, char *container_id, char *scratch_dir, char *output_dir,
                          struct dm_slot *slot);

/* Opens the engine in the background and then removes what dead servers
 * left, so a server cleans up at start without making its first answer
 * wait. An engine that is not there yet is only a warning. (dm_server_start
 * does this, and starts the pool and the TTL reaper.) */
void dm_context_warm_up(struct dm_context *ctx);

/* A run or a sandbox exec begins or ends (every begin has its end). */
void dm_context_busy(struct dm_context *ctx, bool begin);
/* Background work yields to calls that share the machine: returns once
 * fewer than DM_QUIET_CALLS runs or execs have been in flight for
 * DM_QUIET_GRACE_MS, after DM_QUIET_MAX_MS at most (so a steady stream of
 * concurrent calls delays it, never starves it), or at once when *stop
 * (read atomically; may be NULL) is set and dm_context_quiet_wake called.
 * One call at a time does not hold it back: on a machine of two cores it
 * and the background work get one each, and sequential callers need the
 * pool refilled for their next call. */
#define DM_QUIET_CALLS 2
#define DM_QUIET_GRACE_MS 30
#define DM_QUIET_MAX_MS 1000
void dm_context_wait_quiet(struct dm_context *ctx, const bool *stop);
void dm_context_quiet_wake(struct dm_context *ctx);

/* Waits until the reap queue is empty. */
void dm_context_reap_flush(struct dm_context *ctx);

/* Removes every container labelled with this process's owner. */
int dm_context_sweep(struct dm_context *ctx, struct dm_error *err);

/* Whether the server named by an owner label value still runs: same boot,
 * and a process with that pid and start time. my_owner is this server's. */
bool dm_owner_alive(const char *owner, const char *my_owner);

/* A new run id, the name of its output directory:
 * "run-20261202T130501-1a2b3c", sortable, unique enough for one user. */
int dm_run_id_new(char *buf, size_t len);

/* Removes a host directory tree without following symlinks. */
int dm_remove_tree(const char *path);

#endif
