/* SPDX-License-Identifier: MIT */
/* sandbox_usage_report: what runs cost and how long they took, from the run
 * ledger (src/core/ledger.h), rolled up over a run's whole tree. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/basic/cleanup.h"
#include "src/basic/timeutil.h"
#include "src/core/ledger.h"
#include "src/core/snapshot.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"

static const struct dm_arg_spec report_args[] = {
        { .name = "job_id",
          .type = DM_ARG_STRING,
          .max = 64,
          .description = "Report on the run a background job made (a job_id from background: true), with every "
                         "run below it." },
        { .name = "run_id",
          .type = DM_ARG_STRING,
          .max = 64,
          .description = "Report on one run (a run_id or sandbox_id from an earlier result), with every run "
                         "below it." },
        { .name = "output_dir",
          .type = DM_ARG_STRING,
          .max = 4096,
          .description = "Report on the run whose output directory this is (an output_dir from an earlier "
                         "result)." },
        { .name = "since",
          .type = DM_ARG_STRING,
          .max = 64,
          .description = "Report on every run of yours that began at or after this time: RFC 3339, e.g. "
                         "2026-12-04T09:00:00Z, or a date (midnight UTC)." },
};
#define N_ARGS (sizeof(report_args) / sizeof(report_args[0]))

static const char tokens_props[] = "\"input_tokens\":{\"type\":\"integer\"},"
                                   "\"output_tokens\":{\"type\":\"integer\"},"
                                   "\"cache_read_tokens\":{\"type\":\"integer\"},"
                                   "\"cache_write_tokens\":{\"type\":\"integer\"},"
                                   "\"cost_usd\":{\"type\":\"number\"}";

static char *output_schema(void)
{
        char *s = NULL;

        if (asprintf(&s,
                     "{\"type\":\"object\",\"properties\":{"
                     "\"scope\":{\"type\":\"object\"},"
                     "\"cost_usd\":{\"type\":\"number\",\"description\":\"indicative: the vendor proxy's "
                     "prices\"},"
                     "\"usage\":{\"type\":\"object\",\"properties\":{%s,"
                     "\"per_model\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"object\","
                     "\"properties\":{%s}}}}},"
                     "\"wall_seconds\":{\"type\":\"number\",\"description\":\"first start to last end\"},"
                     "\"sandbox_seconds\":{\"type\":\"number\",\"description\":\"the runs' wall times "
                     "summed\"},"
                     "\"sandbox_count\":{\"type\":\"integer\"},"
                     "\"by_kind\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}},"
                     "\"snapshots\":{\"type\":\"object\",\"description\":\"the storage your snapshots (and "
                     "those below you) hold now, whatever the scope\",\"properties\":{\"count\":{\"type\":"
                     "\"integer\"},\"size_bytes\":{\"type\":\"integer\"},\"disk_max\":{\"type\":\"integer\","
                     "\"description\":\"DEMESNE_SNAPSHOT_DISK_MAX, per principal; 0: no cap\"}}},"
                     "\"runs\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{"
                     "\"run_id\":{\"type\":\"string\"},\"parent_run_id\":{\"type\":\"string\"},"
                     "\"depth\":{\"type\":\"integer\"},"
                     "\"kind\":{\"type\":\"string\",\"enum\":[\"script\",\"agent\",\"research\",\"sandbox\"]},"
                     "\"image\":{\"type\":\"string\"},\"job_id\":{\"type\":\"string\"},"
                     "\"status\":{\"type\":\"string\"},\"exit_code\":{\"type\":\"integer\"},"
                     "\"started_at\":{\"type\":\"string\"},\"ended_at\":{\"type\":\"string\"},"
                     "\"wall_seconds\":{\"type\":\"number\"},%s,"
                     "\"usage_final\":{\"type\":\"boolean\"},\"output_dir\":{\"type\":\"string\"}},"
                     "\"required\":[\"run_id\",\"kind\",\"status\",\"started_at\",\"wall_seconds\",\"cost_usd\"]}}},"
                     "\"required\":[\"scope\",\"cost_usd\",\"usage\",\"wall_seconds\",\"sandbox_count\",\"runs\"]}",
                     tokens_props, tokens_props, tokens_props) < 0)
                return NULL;
        return s;
}

/* Snapshot storage is not a run's: it is the caller's now, beside any
 * scope, in the JSON and as the table's last line. */
static void add_snapshots(struct dm_context *ctx, const char *principal, json_object *report, char **ret_table)
{
        json_object *o = json_object_new_object();
        _cleanup_free_ char *table = dm_ledger_table(report);
        size_t n;
        int64_t bytes;

        dm_snapshot_usage(ctx, principal, &n, &bytes);
        json_object_object_add(o, "count", json_object_new_int64((int64_t)n));
        json_object_object_add(o, "size_bytes", json_object_new_int64(bytes));
        json_object_object_add(o, "disk_max", json_object_new_int64(ctx->cfg.snapshot_disk_max));
        json_object_object_add(report, "snapshots", o);
        if (table && asprintf(ret_table, "%ssnapshots: %zu, %lld bytes (DEMESNE_SNAPSHOT_DISK_MAX %lld)\n", table, n,
                              (long long)bytes, (long long)ctx->cfg.snapshot_disk_max) < 0)
                *ret_table = NULL;
}

static json_object *report_call(struct dm_call *call, json_object *args)
{
        struct dm_context *ctx = dm_call_context(call);
        struct dm_error err = { 0 };
        struct dm_ledger_scope scope = {
                .job_id = dm_args_str(report_args, N_ARGS, args, "job_id"),
                .run_id = dm_args_str(report_args, N_ARGS, args, "run_id"),
                .output_dir = dm_args_str(report_args, N_ARGS, args, "output_dir"),
        };
        const char *since;
        _cleanup_free_ char *table = NULL;
        json_object *report, *result, *content;
        int given;

        if (dm_args_check(report_args, N_ARGS, args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        since = dm_args_str(report_args, N_ARGS, args, "since");
        given = !!scope.job_id + !!scope.run_id + !!scope.output_dir + !!since;
        if (given != 1) {
                dm_error_set(&err, -EINVAL, "give exactly one of job_id, run_id, output_dir or since (%d given)",
                             given);
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        }
        if (since) {
                if (dm_time_parse(since, &scope.since) < 0) {
                        dm_error_set(&err, -EINVAL,
                                     "since '%.64s' is not a time: use RFC 3339, e.g. 2026-12-04T09:00:00Z, or a "
                                     "date, 2026-12-04",
                                     since);
                        return dm_tools_error(DM_TOOLS_ARGS, &err);
                }
                scope.has_since = true;
        }
        /* The ledger holds only what the call's principal made: another
         * principal's job, run or directory answers as an unknown one. */
        report = dm_ledger_report(ctx->cfg.output_root, ctx->owner, dm_call_principal(call), &scope, &err);
        if (!report)
                return dm_tools_error(NULL, &err);
        add_snapshots(ctx, dm_call_principal(call), report, &table);
        result = dm_tool_result_ok(report);
        /* The table first, for a reader; the JSON after it, for a parser. */
        if (table && json_object_object_get_ex(result, "content", &content)) {
                json_object *blocks = json_object_new_array(), *block = json_object_new_object();

                json_object_object_add(block, "type", json_object_new_string("text"));
                json_object_object_add(block, "text", json_object_new_string(table));
                json_object_array_add(blocks, block);
                for (size_t i = 0; i < json_object_array_length(content); i++)
                        json_object_array_add(blocks, json_object_get(json_object_array_get_idx(content, i)));
                json_object_object_add(result, "content", blocks);
        }
        return result;
}

static const struct dm_tool report_tools[] = {
        {
                .name = "sandbox_usage_report",
                .title = "Usage report: cost, tokens and time of runs",
                .description = "What runs cost and how long they took: model cost, tokens by type and by model, "
                               "wall time and sandbox count for one job, one run or output directory (with every "
                               "run below it), or every run of yours since a time; one row per run, and a table "
                               "in the text; and the storage your snapshots hold now (count, bytes, the disk cap). "
                               "Give exactly "
                               "one of job_id, run_id, output_dir or since.",
                .read_only = true,
                .idempotent = true,
                .handler = report_call,
        },
};

void dm_tools_report_register(struct dm_registry *reg)
{
        struct dm_tool t = report_tools[0];

        t.input_schema = dm_registry_own(reg, dm_args_schema(report_args, N_ARGS));
        t.output_schema = dm_registry_own(reg, output_schema());
        dm_registry_add(reg, &t, 1);
}
