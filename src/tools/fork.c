/* SPDX-License-Identifier: MIT */
/* sandbox_fork: one snapshot of a persistent sandbox, then count sandboxes
 * from it, started side by side, all or none.
 *
 * The order is what makes "all or none" hold: the count admission slots
 * are reserved first, in one step (dm_claim_reserve_n), so a fork past a
 * cap is refused before anything is made; then the snapshot; then each
 * fork is sandbox_create {snapshot_id} with its reservation, on a thread
 * of its own. When one fails, the ones made are destroyed, the unused
 * reservations given back and the snapshot deleted (no fork was kept).
 * Until the answer, the snapshot's record names this server (held): a
 * server killed midway leaves an orphan, and the next server's sweep
 * removes it and every sandbox made from it (src/core/snapshot.h). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/core/claim.h"
#include "src/core/sandbox.h"
#include "src/core/snapshot.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define FORK_MAX 8
#define TTL_MAX (30 * 86400) /* sandbox_create's ttl_seconds maximum */

static const struct dm_arg_spec fork_args[] = {
        { .name = "sandbox_id",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 64,
          .description = "The sandbox to fork (sandbox_create returned it): its root file system and /workspace "
                         "as they are now, not /out and not its processes." },
        { .name = "count",
          .type = DM_ARG_INT,
          .required = true,
          .min = 1,
          .max = FORK_MAX,
          .description = "How many sandboxes to start from it, 1 to 8." },
};

static const char fork_schema[] =
        "{\"type\":\"object\",\"properties\":{\"snapshot_id\":{\"type\":\"string\"},\"sandbox_ids\":{\"type\":"
        "\"array\",\"items\":{\"type\":\"string\"}},\"sandboxes\":{\"type\":\"array\",\"items\":{\"type\":"
        "\"object\"},\"description\":\"each fork as sandbox_create answers: sandbox_id, output_dir, "
        "expires_at\"}},\"required\":[\"snapshot_id\",\"sandbox_ids\"]}";

/* One fork, made on a thread of its own. */
struct fork_one {
        struct dm_call *call;
        const struct dm_args_table *create;
        const char *snapshot_id;
        int64_t ttl_s;
        struct dm_slot *slot; /* its reservation: NULL once the sandbox took it */
        pthread_t thread;
        bool threaded;
        int r;
        const char *what;
        struct dm_error err;
        struct dm_sandbox sb;
};

static void *fork_main(void *arg)
{
        struct fork_one *f = arg;
        json_object *args = json_object_new_object();

        f->r = -ENOMEM;
        if (!args) {
                f->what = NULL;
                dm_error_set(&f->err, -ENOMEM, "out of memory");
                return NULL;
        }
        /* Egress, allow and image are the snapshot's: the source's. */
        json_object_object_add(args, "snapshot_id", json_object_new_string(f->snapshot_id));
        json_object_object_add(args, "ttl_seconds", json_object_new_int64(f->ttl_s));
        f->r = dm_tools_sandbox_make(f->call, f->create, args, &f->slot, true, &f->sb, &f->what, &f->err);
        json_object_put(args);
        return NULL;
}

/* Starts every fork side by side (one that gets no thread runs here) and
 * waits for all. The index of the first that failed (a cap's refusal
 * first: it says what to change), or n when all were made. */
static size_t forks_run(struct fork_one *f, size_t n)
{
        size_t failed = n;

        for (size_t i = 0; i < n; i++)
                f[i].threaded = pthread_create(&f[i].thread, NULL, fork_main, &f[i]) == 0;
        for (size_t i = 0; i < n; i++) {
                if (f[i].threaded)
                        pthread_join(f[i].thread, NULL);
                else
                        fork_main(&f[i]);
        }
        for (size_t i = 0; i < n; i++)
                if (f[i].r < 0 && (failed == n || (dm_claim_refused(f[i].r) && !dm_claim_refused(f[failed].r))))
                        failed = i;
        return failed;
}

/* A fork failed: nothing of the call stays. The forks made go (each gives
 * its slot back), the reservations no fork took go back, and the
 * snapshot goes, since no fork was kept. */
static void forks_undo(struct dm_call *call, struct fork_one *f, size_t n, const char *snapshot_id)
{
        struct dm_context *ctx = dm_call_context(call);
        struct dm_error e2 = { 0 };

        for (size_t i = 0; i < n; i++) {
                /* NULL when its sandbox took it (and gives it back). */
                dm_claim_release(f[i].slot);
                if (f[i].r >= 0 && dm_sandbox_destroy(ctx, f[i].sb.id, &e2) < 0)
                        log_warning("fork %s: %s", f[i].sb.id, e2.msg);
        }
        if (dm_snapshot_delete(ctx, dm_call_principal(call), snapshot_id, &e2) < 0)
                log_warning("snapshot %s: %s", snapshot_id, e2.msg);
}

static json_object *forks_result(const struct dm_snapshot *snap, const struct fork_one *f, size_t n)
{
        json_object *out = json_object_new_object(), *ids = json_object_new_array(), *all = json_object_new_array();

        for (size_t i = 0; i < n; i++) {
                json_object_array_add(ids, json_object_new_string(f[i].sb.id));
                json_object_array_add(all, dm_sandbox_describe(&f[i].sb));
        }
        json_object_object_add(out, "snapshot_id", json_object_new_string(snap->id));
        json_object_object_add(out, "sandbox_ids", ids);
        json_object_object_add(out, "sandboxes", all);
        return out;
}

static json_object *fork_call(struct dm_call *call, json_object *args)
{
        struct dm_context *ctx = dm_call_context(call);
        const char *principal = dm_call_principal(call), *id;
        const struct dm_args_table *create = dm_call_tool(call)->data;
        struct dm_slot *slots[FORK_MAX];
        _cleanup_free_ struct fork_one *f = NULL;
        struct dm_error err = { 0 };
        struct dm_sandbox src;
        struct dm_snapshot snap;
        char name[DM_SNAPSHOT_NAME_MAX + 1];
        size_t n, failed;
        json_object *out;

        if (dm_args_check(fork_args, N(fork_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        id = dm_args_str(fork_args, N(fork_args), args, "sandbox_id");
        n = (size_t)dm_args_int(fork_args, N(fork_args), args, "count");
        /* Another's sandbox is an unknown id, before anything is reserved. */
        if (dm_sandbox_get(ctx, id, principal, &src, &err) < 0)
                return dm_tools_error(NULL, &err);
        /* All n slots, or a refusal and nothing made. */
        if (dm_claim_reserve_n(ctx, principal, n, slots, &err) < 0)
                return dm_tools_error(NULL, &err);
        snprintf(name, sizeof(name), "fork of %s", src.id);
        /* Each holds a sandbox's record: the heap, not a worker's stack. */
        f = calloc(n, sizeof(*f));
        if (!f)
                dm_error_set(&err, -ENOMEM, "out of memory");
        if (!f || dm_snapshot_take_held(ctx, principal, src.id, name, &snap, &err) < 0) {
                for (size_t i = 0; i < n; i++)
                        dm_claim_release(slots[i]);
                return dm_tools_error(err.code == -EINVAL ? DM_TOOLS_ARGS : NULL, &err);
        }
        for (size_t i = 0; i < n; i++)
                f[i] = (struct fork_one){ .call = call,
                                          .create = create,
                                          .snapshot_id = snap.id,
                                          .ttl_s = src.ttl_s > 0 && src.ttl_s <= TTL_MAX ? src.ttl_s
                                                                                         : DM_SANDBOX_TTL_DEFAULT,
                                          .slot = slots[i] };
        failed = forks_run(f, n);
        if (failed < n) {
                err = f[failed].err;
                forks_undo(call, f, n, snap.id);
                dm_error_wrap(&err, "fork %zu of %zu", failed + 1, n);
                return dm_tools_error(f[failed].what ? "sandbox_fork" : NULL, &err);
        }
        /* Answered from here on: the snapshot is the caller's. Until now a
         * server killed midway left an orphan the next one sweeps. */
        if (dm_snapshot_unhold(ctx, &snap, &err) < 0) {
                forks_undo(call, f, n, snap.id);
                return dm_tools_error(NULL, &err);
        }
        out = forks_result(&snap, f, n);
        return out ? dm_tool_result_ok(out) : NULL;
}

static const struct dm_tool fork_tool = {
        .name = "sandbox_fork",
        .title = "Fork a persistent sandbox into several",
        .description = "Snapshot the sandbox once (root file system and /workspace; not /out, not its processes) "
                       "and start count (1 to 8) new sandboxes from that snapshot side by side: each has the "
                       "source's image and egress, its own /out and its own TTL (the source's ttl), and is yours "
                       "like any sandbox_create's. Every fork counts against the caps on live sandboxes "
                       "(DEMESNE_MAX_CHILDREN, DEMESNE_MAX_TREE): a fork past a cap is refused whole, and a fork "
                       "that fails midway leaves nothing (no sandbox, no snapshot). The snapshot stays (listed, "
                       "deleted with sandbox_destroy {snapshot_id} or after its TTL).",
        .output_schema = fork_schema,
        .handler = fork_call,
};

void dm_tools_fork_register(struct dm_registry *reg, const struct dm_args_table *create)
{
        struct dm_tool t = fork_tool;

        t.input_schema = dm_registry_own(reg, dm_args_schema(fork_args, N(fork_args)));
        t.data = (void *)create;
        dm_registry_add(reg, &t, 1);
}
