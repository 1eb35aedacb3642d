/* SPDX-License-Identifier: MIT */
#ifndef DM_SANDBOX_H
#define DM_SANDBOX_H

/* Persistent sandboxes: a container that lives across calls until it is
 * destroyed or its TTL runs out, and outlives the server that made it. Its
 * record is a small JSON file under <output root>/.sandboxes/, written
 * atomically, so any later server of the same user and output root adopts
 * it: exec, upload, download, destroy, list and the TTL reaper all work
 * from the record and the engine, never from memory alone. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "netpolicy/policy.h"
#include "src/core/context.h"
#include "src/basic/cancel.h"
#include "src/basic/principal.h"

struct dm_slot;

#define DM_SANDBOX_TTL_DEFAULT 172800
#define DM_SANDBOX_ID_LEN 32

struct dm_sandbox {
        char id[DM_SANDBOX_ID_LEN]; /* "sbx-<12 hex>", also the container's name */
        char container[80];
        char image[32];
        char egress[32];
        char output_dir[4096];
        char workspace[4096];
        char shim_dir[4096];         /* "" when the sandbox runs without demesne-shim */
        char allow[64 * 262];        /* the caller's allow entries, comma-separated */
        char net_ifname[16];         /* the veth's host side; "" without a network */
        uint32_t net_host, net_peer; /* its /30: the proxy, and the sandbox (network order) */
        int64_t created_at;          /* unix seconds */
        int64_t expires_at;
        int64_t ttl_s;                    /* what each exec pushes expires_at out by */
        char principal[DM_PRINCIPAL_MAX]; /* who made it (the MCP caller's principal): it and those
                                             above it (dm_principal_covers) may use it */
        char server[96];                  /* the owner (ctx->owner) of the server that made it, for a nested
                            principal's; "" otherwise */
        bool nested;                      /* made with nested: true: it has an MCP endpoint (src/tools/nested.c) */
        bool paused;                      /* frozen by dm_sandbox_pause until dm_sandbox_resume */
};

struct dm_sandbox_create {
        const char *image;
        const char *egress;
        const char *const *allow;
        const struct dm_policy *policy; /* parsed from egress and allow (required): the server keeps a copy */
        const char *const *files;
        const char *const *dirs;
        const char *const *granted; /* as dm_run_request's */
        const char *const *env;
        int64_t ttl_s;
        const char *principal; /* the sandbox's owner; NULL = "local" */
        /* An admission reservation of principal's made ahead
         * (dm_claim_reserve, dm_claim_reserve_n: N sandboxes at once, all
         * or none), or NULL: a slot is claimed now. A sandbox that is made
         * takes it (bound to its record: its owner must not release it);
         * when the create fails, it stays its owner's. */
        struct dm_slot *reserved;
        bool nested; /* recorded: the sandbox has an MCP endpoint (ctx->before_sandbox_exec) */
        /* An address the sandbox must reach whatever its egress (a remote
         * one's nested endpoint, DEMESNE_REMOTE_LISTEN's); NULL: none. */
        const char *reach;
        /* Optional: an engine image to start from instead of image's (a
         * snapshot's, src/core/snapshot.h); image still names the demesne
         * image it was made from. Never built on first use. */
        const char *image_ref;
        /* Optional: news before the container starts (an image built on
         * first use), and a cancel that stops such a build. */
        void (*on_message)(void *userdata, const char *message);
        void *userdata;
        struct dm_cancel *cancel;
};

int dm_sandbox_create(struct dm_context *ctx, const struct dm_sandbox_create *req, struct dm_sandbox *ret,
                      struct dm_error *err);

/* The egress mode of the policy this server keeps for sandbox sb (the
 * create's, or its record's parsed once at adoption); none when it cannot
 * be had (a damaged record, no memory). */
enum dm_egress dm_sandbox_egress(struct dm_context *ctx, const struct dm_sandbox *sb);

/* Whether principal made sandbox id, from its record alone (no engine
 * call, no adoption): 0, or -ENOENT with exactly the message an unknown id
 * gets. */
int dm_sandbox_check_owner(struct dm_context *ctx, const char *id, const char *principal, struct dm_error *err);

/* Looks a sandbox up by id, from one read of its record: -ENOENT (with a
 * message) when there is no record, when principal (NULL: anyone's) did
 * not make it (the same message: another principal cannot learn that it
 * exists), or when its container is gone (the record is then removed). */
int dm_sandbox_get(struct dm_context *ctx, const char *id, const char *principal, struct dm_sandbox *ret,
                   struct dm_error *err);

/* The ids of the sandboxes principal made (exact) or that a principal
 * below it made too (src/basic/principal.h), from their records alone:
 * at most max into ids; returns how many there are. */
size_t dm_sandbox_ids(struct dm_context *ctx, const char *principal, bool exact, char (*ids)[DM_SANDBOX_ID_LEN],
                      size_t max);

/* The host pid of the sandbox's PID 1 (for its namespaces): an engine
 * inspect. -ESRCH when it is not running. */
int dm_sandbox_pid(struct dm_context *ctx, const struct dm_sandbox *sb, int *ret_pid, struct dm_error *err);

/* Something other than a command wrote to the sandbox (an upload): the
 * next command's disk watch measures what it holds anew. */
void dm_sandbox_usage_changed(struct dm_context *ctx, const char *id);

/* Pushes expires_at to now + the TTL it was created with: in the record
 * when the one there has fallen behind by more than a tenth of the TTL
 * (the reaper allows as much), and on a backend that expires sandboxes
 * itself every time. */
int dm_sandbox_touch(struct dm_context *ctx, struct dm_sandbox *sb, struct dm_error *err);

struct dm_sandbox_exec {
        const char *command;
        const char *const *env;
        const char *workdir;    /* default /out */
        const char *stdin_data; /* may be NULL */
        size_t stdin_len;
        int64_t timeout_s;
        struct dm_cancel *cancel;
        /* Optional: called about once a second while the command runs. */
        void (*on_progress)(void *userdata, int64_t elapsed_ms, uint64_t output_bytes);
        void *userdata;
};

struct dm_sandbox_exec_result {
        int exit_code;
        bool timed_out;
        int64_t duration_ms;
        char *stdout_text, *stderr_text;
        size_t stdout_len, stderr_len;
        bool stdout_truncated, stderr_truncated;
};

/* Runs a command in the sandbox (src/core/exec.h). 0 when it ran, a
 * timeout included (timed_out set); -ECANCELED when cancelled, with the
 * result so far filled as for 0 (release it either way); -EDQUOT when the
 * disk cap stopped it; else an error and no result. */
int dm_sandbox_exec(struct dm_context *ctx, const struct dm_sandbox *sb, const struct dm_sandbox_exec *req,
                    struct dm_sandbox_exec_result *ret, struct dm_error *err);
void dm_sandbox_exec_result_release(struct dm_sandbox_exec_result *r);

/* Freezes every process of the sandbox (the engine's pause) and thaws
 * them; recorded, so that an exec into a paused sandbox is refused with a
 * clear error rather than waiting for its timeout. The TTL keeps running
 * while it is paused. Pausing a paused one (or resuming a running one) is
 * not an error. -EOPNOTSUPP when the engine cannot (its sentence says why). */
int dm_sandbox_pause(struct dm_context *ctx, struct dm_sandbox *sb, struct dm_error *err);
/* -EAGAIN, "sandbox '…' is paused: sandbox_resume it first", when sb is
 * paused: what exec, upload and download answer (each may run a command
 * through the frozen shim). */
int dm_sandbox_check_awake(const struct dm_sandbox *sb, struct dm_error *err);
int dm_sandbox_resume(struct dm_context *ctx, struct dm_sandbox *sb, struct dm_error *err);

/* Removes the container, the record and the workspace; the output
 * directory stays. -ENOENT for an unknown (or already destroyed) id. */
int dm_sandbox_destroy(struct dm_context *ctx, const char *id, struct dm_error *err);

/* One sandbox as sandbox_list and sandbox_create show it. */
json_object *dm_sandbox_describe(const struct dm_sandbox *sb);

/* Every live sandbox of this output root, as sandbox_list shows them: those
 * of principal, or every one when it is NULL. */
json_object *dm_sandbox_list(struct dm_context *ctx, const char *principal);

/* Destroys every sandbox whose TTL has run out; returns how many. */
int dm_sandbox_reap_expired(struct dm_context *ctx);

/* Destroys every sandbox that a nested principal made in a server that is
 * gone (killed, crashed, or stopped): its MCP endpoint went with that
 * server, and so does its tree. The top nested sandbox, which the host's
 * caller made, stays (adopted as any other). Deepest first, so each child's
 * output is copied into its parent's (src/core/children.h). Returns how
 * many. */
int dm_sandbox_sweep_nested(struct dm_context *ctx);

/* A thread that calls dm_sandbox_reap_expired every interval_s seconds
 * until dm_sandbox_reaper_stop. */
int dm_sandbox_reaper_start(struct dm_context *ctx, int interval_s);
void dm_sandbox_reaper_stop(struct dm_context *ctx);

/* Lets go of the shim sockets this server holds (at exit): the sandboxes'
 * shims reconnect to the next server that execs in them. */
void dm_sandbox_shims_release(struct dm_context *ctx);

/* The directory holding the records: <output root>/.sandboxes. */
int dm_sandbox_dir(struct dm_context *ctx, char *buf, size_t len, struct dm_error *err);

/* The persistent sandboxes' state a server holds (ctx->sandboxes):
 * made by dm_server_init, freed by dm_server_release after
 * dm_sandbox_reaper_stop and dm_sandbox_shims_release. NULL: no memory. */
struct dm_sandboxes *dm_sandboxes_new(void);
void dm_sandboxes_free(struct dm_sandboxes *s);

#endif
