/* SPDX-License-Identifier: MIT */
#ifndef DM_SANDBOX_INTERNAL_H
#define DM_SANDBOX_INTERNAL_H

/* What sandbox.c, its records (sandbox-record.c) and the shim sockets it
 * holds (sandbox-shim.c) share. */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "src/core/launch.h"
#include "src/core/limits.h"
#include "src/core/sandbox.h"
#include "src/core/shimhost.h"

/* ctx->sandboxes. */
struct dm_sandboxes {
        pthread_mutex_t shim_lock;     /* guards shims */
        pthread_cond_t shim_changed;   /* an adoption of a shim ended */
        struct dm_sandbox_shim *shims; /* the shim sockets this server holds (sandbox-shim.c) */
        /* Sandboxes whose destroy is under way: a stopped container is
         * not started again while it is removed. */
        pthread_mutex_t destroy_lock;
        struct dm_destroying *destroying;
        pthread_mutex_t ttl_lock; /* guards the TTL reaper's fields (sandbox-ttl.c) */
        pthread_cond_t ttl_cond;
        pthread_t ttl_thread;
        bool ttl_running, ttl_stop;
        int ttl_interval_s;
        pthread_mutex_t policy_lock;        /* guards policies */
        struct dm_sandbox_policy *policies; /* sandbox-record.c */
};

/* "sbx-" and 12 lowercase hex digits. */
bool dm_sandbox_valid_id(const char *id);
/* Writes sb's record (whole, then renamed over the old one). */
int dm_sandbox_record_write(struct dm_context *ctx, const struct dm_sandbox *sb, struct dm_error *err);
/* Reads sandbox id's record: -ENOENT for an unknown or malformed id (the
 * message says what ids look like), -EIO for a damaged record. */
int dm_sandbox_record_read(struct dm_context *ctx, const char *id, struct dm_sandbox *sb, struct dm_error *err);
/* The sandbox is gone: its record, its kept policy (below), and the
 * admission slot bound to it. */
void dm_sandbox_record_remove(struct dm_context *ctx, const char *id);
/* Each sandbox's parsed egress policy, as this server keeps it beside the
 * record: the one it was made with (kept at create), or, for a sandbox an
 * earlier server made, parsed from its record once, at adoption. Never
 * parsed again while this server lives, whatever the file says later;
 * dropped with the record (dm_sandbox_record_remove). */
/* Keeps a copy of p as sandbox id's (its create): -ENOMEM. */
int dm_sandbox_policy_keep(struct dm_context *ctx, const char *id, const struct dm_policy *p, struct dm_error *err);
/* A copy of sandbox sb's kept policy, for the caller to free
 * (dm_policy_free); none kept: parsed from sb's egress and allow and kept
 * (dm_policy_parse's errors, with the record's name). */
int dm_sandbox_policy_get(struct dm_context *ctx, const struct dm_sandbox *sb, struct dm_policy **ret,
                          struct dm_error *err);
/* Drops sandbox id's kept policy, if any. */
void dm_sandbox_policy_forget(struct dm_context *ctx, const char *id);
/* Frees every kept policy (dm_sandboxes_free). */
void dm_sandbox_policies_free(struct dm_sandboxes *s);
/* A record's string member key into dst (len bytes; "" when missing or
 * not a string), and its integer member (0 when missing): for the records
 * of sandboxes and of snapshots (src/core/snapshot.c). */
void dm_record_copy_str(json_object *o, const char *key, char *dst, size_t len);
int64_t dm_record_int(json_object *o, const char *key);
/* Calls fn for each record in the directory (none made when missing). */
void dm_sandbox_record_each(struct dm_context *ctx, void (*fn)(struct dm_context *, const char *, void *), void *ud);

/* One per sandbox this server has talked to through its shim. An exec
 * holds a reference; destroy unlinks the entry and the last reference
 * frees the socket. */
struct dm_sandbox_shim {
        struct dm_sandbox_shim *next;
        char id[DM_SANDBOX_ID_LEN];
        struct dm_shimhost *host;
        struct dm_egress_run *egress; /* the proxy listener of a sandbox with a network */
        int refs;
        struct dm_limits_target target; /* for the disk watch: read once, not per exec */
        int64_t disk_used;              /* what it held at the last command's end; -1: unknown */
        /* Being taken over from an earlier server (about a second, up to
         * DM_SHIM_READY_MS): host is NULL, and other execs into this sandbox
         * wait on ctx->shim_changed. Only the adopting thread changes it. */
        bool adopting;
};

/* The sandbox's network for this server (at create, or at adoption), by
 * policy (the create's, or the kept one: never re-read from the record):
 * the proxy listener on the pair that lives with the container, or the
 * whole network when the container was restarted. Updates sb. */
int dm_sandbox_net(struct dm_context *ctx, struct dm_sandbox *sb, const struct dm_policy *policy,
                   const struct dm_launched *l, struct dm_egress_run **ret, struct dm_error *err);
/* A new sandbox's shim into the list (host and *egress taken). */
void dm_sandbox_shim_keep(struct dm_context *ctx, const char *id, struct dm_shimhost *host,
                          struct dm_egress_run **egress, const struct dm_limits_target *target);
/* The sandbox's entry with a reference for the caller: this server's, or
 * its shim taken over from an earlier server (-EBUSY: another live server
 * holds it). */
int dm_sandbox_shim_get(struct dm_context *ctx, struct dm_backend *b, const struct dm_sandbox *sb,
                        struct dm_sandbox_shim **ret, struct dm_error *err);
/* Drops a reference; the last one closes the socket and the proxy. */
void dm_sandbox_shim_put(struct dm_context *ctx, struct dm_sandbox_shim *e);
/* Drops the list's reference to sandbox id's entry (not one being adopted). */
void dm_sandbox_shim_forget(struct dm_context *ctx, const char *id);

/* The disk watch's target of sandbox id, when this server holds its shim. */
bool dm_sandbox_shim_target(struct dm_context *ctx, const char *id, struct dm_limits_target *ret, int64_t *ret_used);
/* What the sandbox holds, as its last command's disk watch measured it at
 * the end (-1: not known; the next command's watch measures at start). */
void dm_sandbox_shim_note_usage(struct dm_context *ctx, const char *id, int64_t used);
/* Whether this server holds sandbox id's shim, connected. */
bool dm_sandbox_shim_ready(struct dm_context *ctx, const char *id);

#endif
