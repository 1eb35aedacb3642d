/* SPDX-License-Identifier: MIT */
#ifndef DM_SNAPSHOT_H
#define DM_SNAPSHOT_H

/* Snapshots: a persistent sandbox's file system as it was, an owned object
 * a new sandbox starts from (sandbox_create {snapshot_id}).
 *
 * What one holds: the container's root file system, committed by the
 * engine as an image (localhost/demesne-snapshot:<id>, labelled with its
 * owner, source sandbox, image, egress, creation time and output root),
 * and /workspace, a host bind mount the commit does not see, kept as the
 * engine's own tar of it (GET archive: ids as the container sees them) in
 * the snapshot's directory, <output root>/.snapshots/<id>/, owned by the
 * server and never unpacked on the host: a new sandbox gets it back
 * through the engine (PUT archive), which maps its ids into the new
 * container. /out is the host's and is not taken. Memory is not taken
 * (CRIU does not work on these hosts).
 *
 * The record (record.json beside the tar) is what ownership, listing, the
 * TTL and the cap read; it lives in the output root, as sandboxes' records
 * do, because a snapshot outlives the server that took it.
 *
 * Ownership is a sandbox's: a principal sees and uses the snapshots it
 * or those below it took (dm_principal_covers); another's id gets exactly
 * an unknown id's message. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "src/basic/error.h"
#include "src/basic/principal.h"
#include "src/core/context.h"

#define DM_SNAPSHOT_ID_LEN 24
#define DM_SNAPSHOT_NAME_MAX 64
#define DM_SNAPSHOT_TTL_DEFAULT (7 * 86400)
#define DM_SNAPSHOT_MAX_DEFAULT 16
#define DM_SNAPSHOT_REPO "localhost/demesne-snapshot"

struct dm_snapshot {
        char id[DM_SNAPSHOT_ID_LEN];         /* "snap-<12 hex>", also the image's tag */
        char name[DM_SNAPSHOT_NAME_MAX + 1]; /* the caller's, may be "" */
        char source[32];                     /* the sandbox it was taken from */
        char image[32];                      /* the demesne image that sandbox was made from ("python") */
        char image_ref[128];                 /* the committed image */
        char egress[32];                     /* the source's egress mode and allow entries */
        char allow[64 * 262];
        char principal[DM_PRINCIPAL_MAX];
        char server[96];    /* the server (ctx->owner) taking it, while it is being taken */
        bool ready;         /* taken whole; false while the commit runs */
        bool has_workspace; /* workspace.tar beside the record */
        int64_t size_bytes; /* the commit's own layer and the workspace tar */
        int64_t created_at, expires_at;
};

/* Takes a snapshot of sandbox_id (the caller's own: another principal's
 * is unknown) named name (NULL or "": none; at most 64 of [A-Za-z0-9 ._-],
 * else -EINVAL). Refused with -EDQUOT naming DEMESNE_SNAPSHOT_MAX when
 * principal holds that many already (counted and reserved under one lock:
 * concurrent takes cannot pass it together), or naming
 * DEMESNE_SNAPSHOT_DISK_MAX when principal's snapshots' sizes reach it
 * (before the commit) or this one's would pass it (after: it is removed,
 * not kept), -EOPNOTSUPP on a backend
 * without commit. The sandbox keeps running; the engine pauses it for the
 * commit alone. On failure nothing is left: no image, no directory. */
int dm_snapshot_take(struct dm_context *ctx, const char *principal, const char *sandbox_id, const char *name,
                     struct dm_snapshot *ret, struct dm_error *err);

/* As dm_snapshot_take, for sandbox_fork: the record keeps this server's
 * name (ctx->owner) until dm_snapshot_unhold, so that a server killed
 * while its forks are being made leaves an orphan the next server's sweep
 * removes, forks and all (dm_snapshot_sweep). */
int dm_snapshot_take_held(struct dm_context *ctx, const char *principal, const char *sandbox_id, const char *name,
                          struct dm_snapshot *ret, struct dm_error *err);
/* The fork answered: s is its caller's, kept like any other. */
int dm_snapshot_unhold(struct dm_context *ctx, struct dm_snapshot *s, struct dm_error *err);

/* The snapshot id, when principal may use it (ready, not expired):
 * -ENOENT with an unknown id's message otherwise. */
int dm_snapshot_get(struct dm_context *ctx, const char *principal, const char *id, struct dm_snapshot *ret,
                    struct dm_error *err);

/* Puts snapshot snap's workspace into the running container of a new
 * sandbox (its /workspace, through the engine). */
int dm_snapshot_seed(struct dm_context *ctx, const struct dm_snapshot *snap, const char *container,
                     struct dm_error *err);

/* Deletes principal's snapshot id: its record, its directory and its image
 * (an image a live sandbox still runs from stays until the sweep finds it
 * unused). -ENOENT as dm_snapshot_get. */
int dm_snapshot_delete(struct dm_context *ctx, const char *principal, const char *id, struct dm_error *err);

/* principal's snapshots (and those below it) as sandbox_list shows them. */
json_object *dm_snapshot_list(struct dm_context *ctx, const char *principal);
json_object *dm_snapshot_describe(const struct dm_snapshot *s);

/* Deletes every snapshot whose TTL has run out, and removes the images of
 * deleted ones that no container uses any longer; returns how many
 * snapshots went. */
int dm_snapshot_reap_expired(struct dm_context *ctx);

/* What a dead server left: orphaned snapshots (the record names a server,
 * one taking it or forking from it, that is gone), with the sandboxes a
 * fork made from them, and images of this output root whose record is
 * gone. Returns how many went. */
int dm_snapshot_sweep(struct dm_context *ctx);

/* A nested subtree ended (src/core/cascade.h): the snapshots principal
 * and those below it took go with it, images and all (a sandbox the host
 * still runs from one keeps its image until the sweep finds it unused).
 * Nothing for a host caller's principal. Returns how many. */
size_t dm_snapshot_delete_tree(struct dm_context *ctx, const char *principal);

/* How many snapshots principal and those below it hold, and their sizes
 * summed (the usage report). */
void dm_snapshot_usage(struct dm_context *ctx, const char *principal, size_t *ret_count, int64_t *ret_bytes);

#endif
