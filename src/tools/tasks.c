/* SPDX-License-Identifier: MIT */
/* The tasks extension (SEP-2663, io.modelcontextprotocol/tasks) over the
 * background jobs: a task is a job, started as background: true starts one
 * (the same admission, the same owner), and its id is the job's. So
 * sandbox_status, sandbox_wait and sandbox_cancel see tasks, and tasks/get
 * and tasks/cancel see jobs of the same principal. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "src/core/jobs.h"
#include "src/core/ledger.h"
#include "src/mcp/jsonrpc.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/tools/tools.h"
#include "src/basic/timeutil.h"

/* How often a client should ask: a sandbox's work takes seconds at least. */
#define POLL_INTERVAL_MS 2000

/* The tools whose work can run as a job (an argument background). The rest
 * answer in the call, whatever the client declared. */
static const char *const task_tools[] = { "sandbox_script", "sandbox_agent", "sandbox_research", "sandbox_exec" };

static bool supports(void *data, const struct dm_tool *tool)
{
        (void)data;
        for (size_t i = 0; i < sizeof(task_tools) / sizeof(task_tools[0]); i++)
                if (strcmp(tool->name, task_tools[i]) == 0)
                        return true;
        return false;
}

static int unknown_task(const char *id, struct dm_error *err)
{
        /* Word for word the same for another principal's task. */
        return dm_error_set(err, -ENOENT,
                            "unknown task '%.64s': task ids come from tools/call answers with resultType \"task\"; "
                            "finished tasks are kept one hour, and a restarted server knows none of its "
                            "predecessor's",
                            id);
}

static json_object *iso_time(int64_t ms)
{
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        char buf[40], out[48];

        gmtime_r(&t, &tm);
        strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(out, sizeof(out), "%s.%03dZ", buf, (int)(ms % 1000));
        return json_object_new_string(out);
}

static const char *task_status(const char *job_status)
{
        if (strcmp(job_status, "running") == 0)
                return "working";
        if (strcmp(job_status, "cancelled") == 0)
                return "cancelled";
        return "completed"; /* succeeded, failed, timed_out; failed may become "failed" below */
}

#define NO_RESULT "the job ended without a result" /* src/core/jobs.c's word for it */

/* What the call would have answered in the foreground, from the job's final
 * result (taken), so that a client sees the same whether or not the call
 * became a task: a command that ran is a result (its exit code, whatever it
 * is, with isError false); work demesne could not do (the engine did not
 * answer, a cap) is the foreground's isError result, with the same text.
 * With call, the run's output files are linked as the foreground links
 * them. */
static json_object *foreground_answer(struct dm_call *call, json_object *final)
{
        json_object *v, *r;

        if (json_object_object_get_ex(final, "error", &v) && !json_object_object_get_ex(final, "exit_code", NULL)) {
                /* The job's error is "<tool> failed: <why>", dm_tools_error's text. */
                r = dm_tool_result_error("%s", json_object_get_string(v));
                json_object_put(final);
                return r;
        }
        /* The job's id and status are the task's (sandbox_wait adds them;
         * a client checks structuredContent against the outputSchema). */
        json_object_object_del(final, "job_id");
        json_object_object_del(final, "status");
        return call ? dm_tools_result_with_links(call, final) : dm_tool_result_ok(final);
}

/* The terminal part of a task: the foreground answer (completed). Neither
 * a command's failure nor demesne's is a JSON-RPC error; "failed" is left
 * for a job that ended with no result and no word, which a foreground call
 * would have had to answer with an internal error (-32603). */
static void add_outcome(struct dm_jobs *jobs, const char *id, const char *job_status, json_object *o)
{
        json_object *final, *v, *error;
        bool running;
        char msg[160];

        final = dm_jobs_wait(jobs, id, 0, NULL, &running);
        if (!final)
                return;
        snprintf(msg, sizeof(msg), "the job ended: %s", job_status);
        json_object_object_add(o, "statusMessage", json_object_new_string(msg));
        if (json_object_object_get_ex(final, "error", &v) && strcmp(json_object_get_string(v), NO_RESULT) == 0) {
                error = json_object_new_object();
                json_object_object_add(error, "code", json_object_new_int(DM_RPC_INTERNAL_ERROR));
                json_object_object_add(error, "message", json_object_new_string(NO_RESULT));
                json_object_object_add(o, "status", json_object_new_string("failed"));
                json_object_object_add(o, "error", error);
                json_object_put(final);
                return;
        }
        json_object_object_add(o, "result", foreground_answer(NULL, final));
}

/* The task as tasks/get shows it (detailed) or as a CreateTaskResult has it. */
static int task_view(struct dm_context *ctx, const char *principal, const char *id, bool detailed, json_object **ret,
                     struct dm_error *err)
{
        json_object *st, *v, *o;
        int64_t created, updated, now = dm_wall_ms();
        const char *job_status;

        if (!dm_jobs_owned(ctx->jobs, id, principal) || dm_jobs_times(ctx->jobs, id, &created, &updated) < 0 ||
            !(st = dm_jobs_status(ctx->jobs, id, false)))
                return unknown_task(id, err);
        json_object_object_get_ex(st, "status", &v);
        job_status = json_object_get_string(v);
        o = json_object_new_object();
        json_object_object_add(o, "taskId", json_object_new_string(id));
        json_object_object_add(o, "status", json_object_new_string(task_status(job_status)));
        json_object_object_add(o, "createdAt", iso_time(created));
        json_object_object_add(o, "lastUpdatedAt", iso_time(updated));
        /* A job is kept DM_JOB_KEEP_MS after it ends: from creation, at
         * least that long past now (while it runs) or past its end. */
        json_object_object_add(
                o, "ttlMs",
                json_object_new_int64((strcmp(job_status, "running") == 0 ? now : updated) - created + DM_JOB_KEEP_MS));
        json_object_object_add(o, "pollIntervalMs", json_object_new_int(POLL_INTERVAL_MS));
        if (strcmp(job_status, "running") == 0)
                json_object_object_add(o, "statusMessage",
                                       json_object_new_string("running (sandbox_status shows its output so far)"));
        else if (strcmp(job_status, "cancelled") == 0)
                json_object_object_add(o, "statusMessage", json_object_new_string("cancelled"));
        else if (detailed)
                add_outcome(ctx->jobs, id, job_status, o);
        json_object_put(st);
        *ret = o;
        return 0;
}

static bool job_id_shaped(const char *id)
{
        if (strncmp(id, "job-", 4) != 0 || strlen(id) != 16)
                return false;
        for (const char *p = id + 4; *p; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
                        return false;
        return true;
}

/* A task of a server that died (kill -9, a crash) is not in memory here,
 * but its run is in the ledger, "interrupted" (running, its server gone):
 * that task failed, and the client is told so rather than "unknown". NULL
 * when the ledger has no such run of principal's. */
static json_object *interrupted_task(struct dm_context *ctx, const char *principal, const char *id)
{
        struct dm_ledger_scope scope = { .job_id = id };
        struct dm_error err = { 0 };
        json_object *report, *runs, *row, *v, *o = NULL, *error;
        char msg[600];

        if (!job_id_shaped(id) ||
            !(report = dm_ledger_report(ctx->cfg.output_root, ctx->owner, principal, &scope, &err)))
                return NULL;
        if (!json_object_object_get_ex(report, "runs", &runs) || !json_object_is_type(runs, json_type_array))
                goto out;
        for (size_t i = 0; i < json_object_array_length(runs); i++) {
                row = json_object_array_get_idx(runs, i);
                if (!json_object_object_get_ex(row, "job_id", &v) || strcmp(json_object_get_string(v), id) != 0 ||
                    !json_object_object_get_ex(row, "status", &v) ||
                    strcmp(json_object_get_string(v), "interrupted") != 0)
                        continue;
                snprintf(msg, sizeof(msg),
                         "the server that ran this task stopped before the task ended (killed or crashed): its run "
                         "'%.40s' was interrupted; what it wrote is in '%.300s'",
                         json_object_object_get_ex(row, "run_id", &v) ? json_object_get_string(v) : "?",
                         json_object_object_get_ex(row, "output_dir", &v) ? json_object_get_string(v) : "?");
                o = json_object_new_object();
                json_object_object_add(o, "taskId", json_object_new_string(id));
                json_object_object_add(o, "status", json_object_new_string("failed"));
                json_object_object_add(o, "statusMessage", json_object_new_string(msg));
                json_object_object_add(o, "createdAt",
                                       json_object_object_get_ex(row, "started_at", &v) ? json_object_get(v)
                                                                                        : iso_time(dm_wall_ms()));
                json_object_object_add(o, "lastUpdatedAt", iso_time(dm_wall_ms()));
                /* The ledger keeps it: no end the server knows of. */
                json_object_object_add(o, "ttlMs", NULL);
                json_object_object_add(o, "pollIntervalMs", json_object_new_int(POLL_INTERVAL_MS));
                error = json_object_new_object();
                json_object_object_add(error, "code", json_object_new_int(DM_RPC_INTERNAL_ERROR));
                json_object_object_add(error, "message", json_object_new_string(msg));
                json_object_object_add(o, "error", error);
                break;
        }
out:
        json_object_put(report);
        return o;
}

static int get(void *data, const char *principal, const char *task_id, json_object **ret, struct dm_error *err)
{
        int r = task_view(data, principal, task_id, true, ret, err);

        if (r == -ENOENT && (*ret = interrupted_task(data, principal, task_id)))
                return 0;
        return r;
}

static int cancel(void *data, const char *principal, const char *task_id, struct dm_error *err)
{
        struct dm_context *ctx = data;
        enum dm_job_status status;

        /* The subtree ends as sandbox_cancel ends it; the ack does not wait
         * for the containers to go (the job's thread removes them). */
        if (!dm_jobs_owned(ctx->jobs, task_id, principal) || dm_jobs_cancel(ctx->jobs, task_id, 0, &status) < 0) {
                /* A dead server's task has ended already: the same ack. */
                json_object *gone = interrupted_task(ctx, principal, task_id);

                json_object_put(gone);
                return gone ? 0 : unknown_task(task_id, err);
        }
        return 0;
}

static bool asks_background(json_object *args)
{
        json_object *v;

        return args && json_object_object_get_ex(args, "background", &v) && json_object_is_type(v, json_type_boolean) &&
               json_object_get_boolean(v);
}

/* The call runs as a background job; it answers as the job's result when
 * the job ends within DEMESNE_TASK_AFTER_MS, as a task otherwise. */
static json_object *call(void *data, struct dm_call *c, json_object *args)
{
        struct dm_context *ctx = data;
        const struct dm_tool *tool = dm_call_tool(c);
        struct dm_error err = { 0 };
        json_object *bg_args = NULL, *res, *sc, *v, *final, *task;
        enum dm_job_status status;
        char id[32];
        bool running;

        /* A caller that asked for a job gets its job id, as before. */
        if (asks_background(args))
                return tool->handler(c, args);
        if (args ? json_object_deep_copy(args, &bg_args, NULL) < 0 : !(bg_args = json_object_new_object()))
                return dm_tool_result_error("out of memory");
        json_object_object_add(bg_args, "background", json_object_new_boolean(1));
        res = tool->handler(c, bg_args);
        json_object_put(bg_args);
        /* Refused before a job started (arguments, admission): as it is. */
        if (!res || (json_object_object_get_ex(res, "isError", &v) && json_object_get_boolean(v)) ||
            !json_object_object_get_ex(res, "structuredContent", &sc) || !json_object_object_get_ex(sc, "job_id", &v) ||
            !json_object_is_type(v, json_type_string))
                return res;
        snprintf(id, sizeof(id), "%s", json_object_get_string(v));
        json_object_put(res);

        /* 0: always a task, even for a job that has already ended. */
        final = ctx->cfg.task_after_ms
                        ? dm_jobs_wait(ctx->jobs, id, ctx->cfg.task_after_ms, dm_call_cancel(c), &running)
                        : NULL;
        if (final) /* ended in time: no task */
                return foreground_answer(c, final);
        if (dm_cancel_fired(dm_call_cancel(c))) {
                dm_jobs_cancel(ctx->jobs, id, 0, &status);
                return NULL;
        }
        if (task_view(ctx, dm_call_principal(c), id, false, &task, &err) < 0)
                return dm_tools_error(NULL, &err);
        json_object_object_add(task, "resultType", json_object_new_string("task"));
        return task;
}

const struct dm_mcp_task_ops dm_tools_task_ops = {
        .supports = supports,
        .call = call,
        .get = get,
        .cancel = cancel,
};
