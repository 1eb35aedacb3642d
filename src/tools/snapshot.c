/* SPDX-License-Identifier: MIT */
/* Snapshots and pausing: sandbox_snapshot, sandbox_pause, sandbox_resume,
 * and what sandbox_create {snapshot_id} needs before and after its create
 * (src/tools/sandbox.c calls it). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/basic/log.h"
#include "src/core/resources.h"
#include "src/core/sandbox.h"
#include "src/core/snapshot.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const struct dm_arg_spec snapshot_args[] = {
        { .name = "sandbox_id",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 64,
          .description = "The sandbox to take: its root file system and /workspace (not /out)." },
        { .name = "name",
          .type = DM_ARG_STRING,
          .max = 1024, /* checked to 64 by the core, with a sentence */
          .description = "A name for people (sandbox_list shows it): up to 64 letters, digits, spaces, '.', '_' "
                         "or '-'." },
};

static const struct dm_arg_spec pause_args[] = {
        { .name = "sandbox_id",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 64,
          .description = "The id sandbox_create returned." },
};

static const char snapshot_schema[] =
        "{\"type\":\"object\",\"properties\":{\"snapshot_id\":{\"type\":\"string\"},\"size_bytes\":{\"type\":"
        "\"integer\"},\"created_at\":{\"type\":\"string\"},\"expires_at\":{\"type\":\"string\"},\"name\":{\"type\":"
        "\"string\"},\"source\":{\"type\":\"string\"}},\"required\":[\"snapshot_id\",\"size_bytes\",\"created_at\"]}";
static const char pause_schema[] =
        "{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":\"string\"},\"status\":{\"type\":\"string\","
        "\"enum\":[\"paused\",\"running\"]}},\"required\":[\"sandbox_id\",\"status\"]}";

static json_object *snapshot_call(struct dm_call *call, json_object *args)
{
        struct dm_error err = { 0 };
        struct dm_snapshot s;

        if (dm_args_check(snapshot_args, N(snapshot_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        if (dm_snapshot_take(dm_call_context(call), dm_call_principal(call),
                             dm_args_str(snapshot_args, N(snapshot_args), args, "sandbox_id"),
                             dm_args_str(snapshot_args, N(snapshot_args), args, "name"), &s, &err) < 0)
                return dm_tools_error(err.code == -EINVAL ? DM_TOOLS_ARGS : NULL, &err);
        return dm_tool_result_ok(dm_snapshot_describe(&s));
}

static json_object *pause_call(struct dm_call *call, json_object *args, bool pause)
{
        struct dm_context *ctx = dm_call_context(call);
        struct dm_error err = { 0 };
        struct dm_sandbox sb;
        json_object *out;

        if (dm_args_check(pause_args, N(pause_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        if (dm_sandbox_get(ctx, dm_args_str(pause_args, N(pause_args), args, "sandbox_id"), dm_call_principal(call),
                           &sb, &err) < 0)
                return dm_tools_error(NULL, &err);
        if ((pause ? dm_sandbox_pause(ctx, &sb, &err) : dm_sandbox_resume(ctx, &sb, &err)) < 0)
                return dm_tools_error(NULL, &err);
        out = json_object_new_object();
        json_object_object_add(out, "sandbox_id", json_object_new_string(sb.id));
        json_object_object_add(out, "status", json_object_new_string(pause ? "paused" : "running"));
        return dm_tool_result_ok(out);
}

static json_object *pause_on(struct dm_call *call, json_object *args)
{
        return pause_call(call, args, true);
}

static json_object *resume_on(struct dm_call *call, json_object *args)
{
        return pause_call(call, args, false);
}

/* ---- sandbox_create {snapshot_id} ---------------------------------------------------- */

static int egress_rank(const char *mode)
{
        return !mode || strcmp(mode, "none") == 0 ? 0 : strcmp(mode, "package-managers") == 0 ? 1 : 2;
}

/* Whether entry is one of the comma-separated list. */
static bool listed(const char *list, const char *entry)
{
        size_t n = strlen(entry);

        for (const char *p = list; p && *p;) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);

                if (len == n && strncmp(p, entry, n) == 0)
                        return true;
                p = end ? end + 1 : p + len;
        }
        return false;
}

static json_object *split_allow(const char *list)
{
        json_object *a = json_object_new_array();

        for (const char *p = list; a && p && *p;) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);

                if (len)
                        json_object_array_add(a, json_object_new_string_len(p, (int)len));
                p = end ? end + 1 : p + len;
        }
        return a;
}

/* The egress a sandbox from snap may have: the snapshot's when the call
 * names none, the call's when it is as narrow or narrower. */
static int narrow_egress(const struct dm_snapshot *snap, json_object *args, struct dm_error *err)
{
        json_object *egress = NULL, *allow = NULL;

        if (!json_object_object_get_ex(args, "egress", &egress)) {
                json_object_object_add(args, "egress", json_object_new_string(snap->egress));
                if (!json_object_object_get_ex(args, "allow", &allow))
                        json_object_object_add(args, "allow", split_allow(snap->allow));
        } else if (egress_rank(json_object_get_string(egress)) > egress_rank(snap->egress))
                return dm_error_set(err, -EPERM,
                                    "egress '%s' is wider than snapshot '%s''s ('%s'): a sandbox from a snapshot may "
                                    "have the snapshot's egress or a narrower one",
                                    json_object_get_string(egress), snap->id, snap->egress);
        if (json_object_object_get_ex(args, "allow", &allow) && json_object_is_type(allow, json_type_array))
                for (size_t i = 0; i < json_object_array_length(allow); i++) {
                        const char *e = json_object_get_string(json_object_array_get_idx(allow, i));

                        if (!listed(snap->allow, e))
                                return dm_error_set(err, -EPERM,
                                                    "allow entry '%s' is not in snapshot '%s''s egress: a sandbox "
                                                    "from a snapshot may have the snapshot's egress or a narrower "
                                                    "one",
                                                    e, snap->id);
                }
        return 0;
}

int dm_tools_snapshot_resolve(struct dm_call *call, json_object *args, struct dm_snapshot *ret, struct dm_error *err)
{
        json_object *v = NULL;
        int r;

        if (!json_object_object_get_ex(args, "snapshot_id", &v))
                return 0;
        if (!json_object_is_type(v, json_type_string))
                return dm_error_set(err, -EINVAL, "'snapshot_id' must be a string");
        r = dm_snapshot_get(dm_call_context(call), dm_call_principal(call), json_object_get_string(v), ret, err);
        if (r < 0)
                return r;
        if (json_object_object_get_ex(args, "image", &v) && strcmp(json_object_get_string(v), ret->image) != 0)
                return dm_error_set(err, -EINVAL,
                                    "image '%s' differs from snapshot '%s''s ('%s'): leave image out with "
                                    "snapshot_id",
                                    json_object_get_string(v), ret->id, ret->image);
        json_object_object_add(args, "image", json_object_new_string(ret->image));
        r = narrow_egress(ret, args, err);
        return r < 0 ? r : 1;
}

int dm_tools_snapshot_seed(struct dm_call *call, const struct dm_snapshot *snap, const struct dm_sandbox *sb,
                           struct dm_error *err)
{
        struct dm_context *ctx = dm_call_context(call);
        int r = dm_snapshot_seed(ctx, snap, sb->container, err);

        if (r < 0) {
                struct dm_error e2 = { 0 };

                if (dm_sandbox_destroy(ctx, sb->id, &e2) < 0)
                        log_warning("sandbox %s: %s", sb->id, e2.msg);
        }
        return r;
}

static const struct dm_tool snapshot_tools[] = {
        { .name = "sandbox_snapshot",
          .title = "Snapshot a persistent sandbox",
          .description = "Keep the sandbox's file system as it is now (its root file system and /workspace; not "
                         "/out, which is the host's; not its memory or processes) as a snapshot that "
                         "sandbox_create {snapshot_id} starts new sandboxes from. The sandbox keeps running; the "
                         "engine pauses it only while it copies. A snapshot outlives its sandbox, is yours alone, "
                         "is deleted with sandbox_destroy {snapshot_id} or after DEMESNE_SNAPSHOT_TTL (7 days), and "
                         "each caller may hold DEMESNE_SNAPSHOT_MAX (16).",
          .output_schema = snapshot_schema,
          .handler = snapshot_call },
        { .name = "sandbox_pause",
          .title = "Pause a persistent sandbox",
          .description = "Freeze every process of the sandbox (the engine's pause): it uses no CPU and keeps its "
                         "memory. Its TTL keeps running while it is paused. sandbox_exec into a paused sandbox is "
                         "an error until sandbox_resume. Rootless Podman on cgroup v1 cannot pause (the error says "
                         "so).",
          .output_schema = pause_schema,
          .idempotent = true,
          .handler = pause_on },
        { .name = "sandbox_resume",
          .title = "Resume a paused sandbox",
          .description = "Thaw every process of a sandbox sandbox_pause froze: they go on where they stopped.",
          .output_schema = pause_schema,
          .idempotent = true,
          .handler = resume_on },
};

void dm_tools_snapshot_register(struct dm_registry *reg)
{
        struct dm_tool t[N(snapshot_tools)];

        memcpy(t, snapshot_tools, sizeof(t));
        t[0].input_schema = dm_registry_own(reg, dm_args_schema(snapshot_args, N(snapshot_args)));
        t[1].input_schema = dm_registry_own(reg, dm_args_schema(pause_args, N(pause_args)));
        t[2].input_schema = dm_registry_own(reg, dm_args_schema(pause_args, N(pause_args)));
        dm_registry_add(reg, t, N(t));
}
