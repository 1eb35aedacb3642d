/* SPDX-License-Identifier: MIT */
/* sandbox_status, sandbox_wait and sandbox_cancel: following and stopping
 * background jobs, whatever tool started them. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/core/claim.h"
#include "src/core/jobs.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "src/basic/utf8.h"

#define WAIT_DEFAULT_S 30
#define WAIT_MAX_S 120
/* sandbox_cancel answers when the command is killed and its container
 * removed, or after this long (a slow engine) with the job marked
 * cancelled all the same. */
#define CANCEL_WAIT_MS 10000

static const struct dm_arg_spec status_args[] = {
        { .name = "job_id",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 64,
          .description = "The job_id a call with background: true returned." },
        { .name = "include_stdout_tail",
          .type = DM_ARG_BOOL,
          .has_default = true,
          .description = "Also return the last 4 KiB of the job's standard output so far." },
};

static const struct dm_arg_spec wait_args[] = {
        { .name = "job_id",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 64,
          .description = "The job_id a call with background: true returned." },
        { .name = "timeout_seconds",
          .type = DM_ARG_INT,
          .min = 0,
          .max = WAIT_MAX_S,
          .has_default = true,
          .def_int = WAIT_DEFAULT_S,
          .description = "How long to wait for the job to end before answering that it still runs." },
};

static const struct dm_arg_spec cancel_args[] = {
        { .name = "job_id",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 64,
          .description = "The job to cancel, with every job and sandbox it started." },
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

static const char status_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"job_id\":{\"type\":\"string\"},"
        "\"tool\":{\"type\":\"string\"},"
        "\"status\":{\"type\":\"string\",\"enum\":[\"running\",\"succeeded\",\"failed\",\"cancelled\",\"timed_out\"]},"
        "\"elapsed_seconds\":{\"type\":\"number\"},"
        "\"output_bytes\":{\"type\":\"integer\"},"
        "\"stdout_tail\":{\"type\":\"string\"},"
        "\"exit_code\":{\"type\":\"integer\"},"
        "\"cost_usd\":{\"type\":\"number\",\"description\":\"agent jobs: the run's cost, indicative\"},"
        "\"error\":{\"type\":\"string\"}},"
        "\"required\":[\"job_id\",\"status\",\"elapsed_seconds\"]}";

/* The final result of whichever tool ran the job, plus job_id and status;
 * or, while it runs, job_id, status running and a message. */
static const char wait_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"job_id\":{\"type\":\"string\"},"
        "\"status\":{\"type\":\"string\",\"enum\":[\"running\",\"succeeded\",\"failed\",\"cancelled\",\"timed_out\"]},"
        "\"message\":{\"type\":\"string\"},"
        "\"error\":{\"type\":\"string\"}},"
        "\"required\":[\"job_id\",\"status\"],\"additionalProperties\":true}";

static const char cancel_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"job_id\":{\"type\":\"string\"},"
        "\"status\":{\"type\":\"string\",\"enum\":[\"running\",\"succeeded\",\"failed\",\"cancelled\",\"timed_out\"]}},"
        "\"required\":[\"job_id\",\"status\"]}";

static json_object *unknown(const char *id)
{
        struct dm_error err;

        dm_error_set(&err, -ENOENT,
                     "unknown job '%.64s': job ids come from calls with background: true, and finished jobs are "
                     "kept one hour",
                     id);
        return dm_tools_error(NULL, &err);
}

static json_object *status_call(struct dm_call *call, json_object *args)
{
        struct dm_error err = { 0 };
        const char *id;
        json_object *st, *tail;

        if (dm_args_check(status_args, N(status_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        id = dm_args_str(status_args, N(status_args), args, "job_id");
        /* Another principal's job answers as an unknown one. */
        if (!dm_jobs_owned(dm_call_context(call)->jobs, id, dm_call_principal(call)))
                return unknown(id);
        st = dm_jobs_status(dm_call_context(call)->jobs, id,
                            dm_args_bool(status_args, N(status_args), args, "include_stdout_tail"));
        if (!st)
                return unknown(id);
        if (json_object_object_get_ex(st, "stdout_tail", &tail)) {
                /* The tail may begin inside a character: make it valid UTF-8. */
                size_t len;
                char *clean =
                        dm_utf8_sanitize(json_object_get_string(tail), (size_t)json_object_get_string_len(tail), &len);
                json_object_object_add(st, "stdout_tail",
                                       json_object_new_string_len(clean ? clean : "", clean ? (int)len : 0));
                free(clean);
        }
        return dm_tool_result_ok(st);
}

static json_object *wait_call(struct dm_call *call, json_object *args)
{
        struct dm_error err = { 0 };
        const char *id;
        json_object *res, *o;
        bool running;

        if (dm_args_check(wait_args, N(wait_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        id = dm_args_str(wait_args, N(wait_args), args, "job_id");
        if (!dm_jobs_owned(dm_call_context(call)->jobs, id, dm_call_principal(call)))
                return unknown(id);
        res = dm_jobs_wait(dm_call_context(call)->jobs, id,
                           dm_args_int(wait_args, N(wait_args), args, "timeout_seconds") * 1000, dm_call_cancel(call),
                           &running);
        if (res)
                return dm_tools_result_with_links(call, res);
        if (!running)
                return unknown(id);
        if (dm_cancel_fired(dm_call_cancel(call)))
                return NULL;
        o = json_object_new_object();
        json_object_object_add(o, "job_id", json_object_new_string(id));
        json_object_object_add(o, "status", json_object_new_string("running"));
        json_object_object_add(o, "message", json_object_new_string("still running; call sandbox_wait again"));
        return dm_tool_result_ok(o);
}

static json_object *cancel_call(struct dm_call *call, json_object *args)
{
        struct dm_error err = { 0 };
        enum dm_job_status status;
        const char *id;
        json_object *o;

        if (dm_args_check(cancel_args, N(cancel_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        id = dm_args_str(cancel_args, N(cancel_args), args, "job_id");
        if (!dm_jobs_owned(dm_call_context(call)->jobs, id, dm_call_principal(call)) ||
            dm_jobs_cancel(dm_call_context(call)->jobs, id, CANCEL_WAIT_MS, &status) < 0)
                return unknown(id);
        o = json_object_new_object();
        json_object_object_add(o, "job_id", json_object_new_string(id));
        json_object_object_add(o, "status", json_object_new_string(dm_job_status_name(status)));
        return dm_tool_result_ok(o);
}

void dm_tools_job_notify_end(struct dm_job *job, struct dm_mcp_server *srv, uint64_t session, enum dm_job_status status,
                             bool has_exit, int exit_code)
{
        json_object *params = json_object_new_object(), *data = json_object_new_object();
        char msg[160];

        snprintf(msg, sizeof(msg), "job %s (%s) %s", dm_job_id(job), dm_job_tool(job), dm_job_status_name(status));
        json_object_object_add(data, "message", json_object_new_string(msg));
        json_object_object_add(data, "job_id", json_object_new_string(dm_job_id(job)));
        json_object_object_add(data, "tool", json_object_new_string(dm_job_tool(job)));
        json_object_object_add(data, "status", json_object_new_string(dm_job_status_name(status)));
        if (has_exit)
                json_object_object_add(data, "exit_code", json_object_new_int(exit_code));
        json_object_object_add(params, "level", json_object_new_string("notice"));
        json_object_object_add(params, "logger", json_object_new_string("demesne.jobs"));
        json_object_object_add(params, "data", data);
        dm_mcp_server_notify(srv, session, DM_LOG_NOTICE, "notifications/message", params);
}

static const struct dm_tool job_tools[] = {
        {
                .name = "sandbox_status",
                .title = "Status of a background job",
                .description = "Where a background job stands: running, succeeded, failed, cancelled or timed_out, "
                               "how long it has run, its exit code and error when it has ended, and optionally the "
                               "tail of its output so far. Does not wait.",
                .output_schema = status_schema,
                .read_only = true,
                .idempotent = true,
        },
        {
                .name = "sandbox_wait",
                .title = "Wait for a background job",
                .description = "Waits up to timeout_seconds (default 30, at most 120) for a background job to end "
                               "and returns its final result (the same fields the tool returns in the foreground, "
                               "plus job_id and status), or status running with a message to call again.",
                .output_schema = wait_schema,
                .read_only = true,
                .idempotent = true,
        },
        {
                .name = "sandbox_cancel",
                .title = "Cancel a background job",
                .description = "Cancels a background job and every job and sandbox it started: the command is "
                               "killed and its container removed. Cancelling a job that already ended changes "
                               "nothing and answers its final status.",
                .output_schema = cancel_schema,
                .destructive = true,
                .idempotent = true,
        },
};

void dm_tools_jobs_register(struct dm_registry *reg)
{
        struct dm_tool t[N(job_tools)];

        memcpy(t, job_tools, sizeof(t));
        t[0].input_schema = dm_registry_own(reg, dm_args_schema(status_args, N(status_args)));
        t[0].handler = status_call;
        t[1].input_schema = dm_registry_own(reg, dm_args_schema(wait_args, N(wait_args)));
        t[1].handler = wait_call;
        t[2].input_schema = dm_registry_own(reg, dm_args_schema(cancel_args, N(cancel_args)));
        t[2].handler = cancel_call;
        dm_registry_add(reg, t, N(t));
}

/* ---- background work of other tools ------------------------------------------ */

struct background {
        struct dm_context *ctx;
        struct dm_mcp_server *srv;
        uint64_t session;
        char principal[DM_MCP_PRINCIPAL_MAX]; /* the starting call's: owns the run's outputs */
        const char *tool;                     /* static */
        json_object *args;                    /* a deep copy: the call's own is freed when it returns */
        dm_tools_job_work work;
        void *arg;
        void (*arg_free)(void *arg);
        struct dm_slot *reserved; /* admission (src/core/claim.h): held until the work ends */
};

static void background_free(void *userdata)
{
        struct background *bg = userdata;

        dm_claim_release(bg->reserved); /* a job that never ran */
        json_object_put(bg->args);
        if (bg->arg_free)
                bg->arg_free(bg->arg);
        free(bg);
}

static json_object *background_run(struct dm_job *job, void *userdata, enum dm_job_status *ret_status, char *error,
                                   size_t error_len)
{
        struct background *bg = userdata;
        struct dm_error err = { 0 };
        json_object *out, *v;
        int r;

        /* Its run claims with the reservation, and a cascade above it
         * cancels the run through it. */
        out = bg->work(bg->ctx, bg->args, bg->arg, job, bg->reserved, dm_job_cancel_signal(job), &r, &err);
        dm_claim_release(bg->reserved);
        bg->reserved = NULL;
        dm_tools_claim_outputs(bg->ctx, bg->principal, out);
        if (!out) {
                *ret_status = r == -ECANCELED ? DM_JOB_CANCELLED : DM_JOB_FAILED;
                if (r != -ECANCELED)
                        snprintf(error, error_len, "%s failed: %s", bg->tool, err.msg);
                return NULL;
        }
        if (json_object_object_get_ex(out, "timed_out", &v) && json_object_get_boolean(v))
                *ret_status = DM_JOB_TIMED_OUT;
        else if (json_object_object_get_ex(out, "exit_code", &v) && json_object_get_int(v) == 0)
                *ret_status = DM_JOB_SUCCEEDED;
        else
                *ret_status = DM_JOB_FAILED;
        return out;
}

static void background_done(struct dm_job *job, enum dm_job_status status, bool has_exit, int exit_code, void *userdata)
{
        struct background *bg = userdata;

        dm_tools_job_notify_end(job, bg->srv, bg->session, status, has_exit, exit_code);
}

json_object *dm_tools_start_background(struct dm_call *call, const char *tool, json_object *args,
                                       dm_tools_job_work work, void *arg, void (*arg_free)(void *arg))
{
        struct dm_context *ctx = dm_call_context(call);
        struct background *bg = calloc(1, sizeof(*bg));
        struct dm_error err = { 0 };
        json_object *out;
        char id[32];
        int r;

        if (!bg || json_object_deep_copy(args, &bg->args, NULL) < 0) {
                if (arg_free)
                        arg_free(arg);
                free(bg);
                dm_error_set(&err, -ENOMEM, "out of memory");
                return dm_tools_error(NULL, &err);
        }
        bg->ctx = ctx;
        bg->srv = dm_call_server(call);
        bg->session = dm_call_session_id(call);
        snprintf(bg->principal, sizeof(bg->principal), "%s", dm_call_principal(call));
        bg->tool = tool;
        bg->work = work;
        bg->arg = arg;
        bg->arg_free = arg_free;
        /* The cap refuses now, as the call's answer. */
        r = dm_claim_reserve(ctx, dm_call_principal(call), &bg->reserved, &err);
        if (r < 0) {
                background_free(bg);
                return dm_tools_error(NULL, &err);
        }
        r = dm_jobs_start_owned(ctx->jobs, bg->principal, tool, NULL, background_run, background_done, bg,
                                background_free, id);
        if (r < 0) {
                background_free(bg);
                dm_error_set(&err, r,
                             r == -EAGAIN ? "too many jobs (%d): wait for some to end or cancel them"
                                          : "cannot start a background job (error %d)",
                             r == -EAGAIN ? DM_JOB_MAX : r);
                return dm_tools_error(NULL, &err);
        }
        out = json_object_new_object();
        json_object_object_add(out, "job_id", json_object_new_string(id));
        json_object_object_add(out, "status", json_object_new_string("running"));
        return dm_tool_result_ok(out);
}
