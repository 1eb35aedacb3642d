/* SPDX-License-Identifier: MIT */
#ifndef DM_POOL_H
#define DM_POOL_H

/* A warm pool: containers of the default image, created and started with
 * demesne-shim connected before anyone asks, so that a sandbox_script
 * skips the engine's create and start (most of a one-off run's time).
 *
 * Each entry is made exactly as a cold run makes its container (the same
 * hardening, limits, user namespace and shim), with its own run id, output
 * directory, /workspace and shim socket; no command has run in it. A claim
 * hands an entry to one run, which then owns it as if it had made it: the
 * run's egress is attached after the claim, its environment goes with its
 * one command, and the container is removed after the run like any other.
 * A run with host inputs, extra mounts, another image or a vendor proxy
 * does not use the pool (its mounts are fixed at create).
 *
 * On a remote backend without attach (OpenSandbox) an entry is a sandbox
 * made as a cold run's is there (idling, no shim: DEMESNE_SHIM=off), ready
 * when its execd answered, with the egress the server sends by default
 * (fixed at create there, so only a run with that egress and no allow
 * entries fits); its TTL is the backend's (renewed while it waits, and at
 * the claim to the run's timeout plus 600 s, as a cold run's).
 *
 * Entries carry the owner's labels and kind "script": a server killed with
 * -9 leaves them to the next server's sweep, and unclaimed ones are removed
 * at exit. `demesne serve` only (DEMESNE_POOL, default 2; 0 = none). */

#include <json-c/json.h>
#include <limits.h>

#include "src/core/context.h"
#include "src/core/launch.h"
#include "src/core/limits.h"
#include "src/core/shimhost.h"

struct dm_pool;
struct dm_policy;

struct dm_pool_entry {
        char run_id[64];
        char image[32];
        char outdir[PATH_MAX];
        char scratch[PATH_MAX];
        char workspace[PATH_MAX + 16];
        char *container; /* the engine's id, owned */
        struct dm_shimhost *host;
        struct dm_launched launched; /* read once, at start: the claim asks the engine nothing */
        bool remote;                 /* no shim, no attach: commands through the backend's exec */
        int egress;                  /* remote: the enum dm_egress it was made with */
        int64_t expires_unix;        /* remote: when the backend removes it by itself */
        int64_t granted_s;           /* remote: the TTL the server granted at create */
};

/* A pool of size warm containers of image, filled by a thread of its own
 * from now on (the first as soon as the engine answers and the image is
 * built; it never builds an image itself). */
int dm_pool_start(struct dm_context *ctx, const char *image, int size, struct dm_pool **ret, struct dm_error *err);

/* An entry of image whose shim is still connected (remote: that policy,
 * may be NULL, fits, and the sandbox is still there, its expiry pushed to
 * ttl_s from now at least), or NULL (none ready, another image, the pool
 * is stopping); the pool makes a new one behind it. The caller owns the
 * entry: dm_pool_entry_free() after it has queued the container for
 * removal. */
struct dm_pool_entry *dm_pool_claim(struct dm_pool *p, const char *image, const struct dm_policy *policy,
                                    int64_t ttl_s);
void dm_pool_entry_free(struct dm_pool_entry *e);

/* {image, size, ready} for doctor and sandbox_list. */
json_object *dm_pool_describe(struct dm_pool *p);

/* Stops the thread and removes every unclaimed entry (container, scratch
 * tree, empty output directory). NULL is fine. */
void dm_pool_stop(struct dm_pool *p);

#endif
