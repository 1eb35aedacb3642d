/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/policy.h"
#include "src/core/claim.h"
#include "src/core/images.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/core/jobs.h"
#include "src/core/runner.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/utf8.h"

#define MAX_INPUTS 64
#define MAX_ENV 256

static const struct dm_arg_spec script_args[] = {
        { .name = "command",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 1 << 20,
          .description = "Shell command run with bash -c inside the sandbox; its working directory is /out." },
        { .name = "image",
          .type = DM_ARG_STRING,
          .role = DM_ARG_ROLE_IMAGE,
          .enum_values = dm_image_names,
          .enum_aliases = dm_image_aliases,
          .has_default = true,
          .def_str = DM_IMAGE_DEFAULT,
          .description = "Container image: base, python (default; alias anaconda, which is the same image: pip, "
                         "no conda), node, go, browser, media, twine, webgamedev." },
        { .name = "egress",
          .type = DM_ARG_STRING,
          .role = DM_ARG_ROLE_EGRESS,
          .has_default = true,
          .description = "Network egress." },
        { .name = "allow",
          .type = DM_ARG_STRING_ARRAY,
          .role = DM_ARG_ROLE_ALLOW,
          .max = 64,
          .has_default = true,
          .description = "Extra egress entries (host, *.host, host:port, CIDR, CIDR:port); an address entry "
                         "overlapping a blocked range (loopback, link-local, metadata, the sandbox pool, private "
                         "ranges) is refused." },
        { .name = "files",
          .type = DM_ARG_STRING_ARRAY,
          .role = DM_ARG_ROLE_HOST_PATH,
          .max = MAX_INPUTS,
          .has_default = true,
          .description = "Absolute host files, mounted read-only at /in/<basename>." },
        { .name = "directories",
          .type = DM_ARG_STRING_ARRAY,
          .role = DM_ARG_ROLE_HOST_PATH,
          .max = MAX_INPUTS,
          .has_default = true,
          .description = "Absolute host directories, mounted read-only at /in/<basename>." },
        { .name = "env",
          .type = DM_ARG_STRING_MAP,
          .max = MAX_ENV,
          .has_default = true,
          .description = "Extra environment variables for the command." },
        { .name = "timeout_seconds",
          .type = DM_ARG_INT,
          .min = 1,
          .max = 172800,
          .has_default = true,
          .def_int = 3600,
          .description = "Kill the command (and everything it started) after this many seconds; the result "
                         "then says timed_out: true." },
        { .name = "background",
          .type = DM_ARG_BOOL,
          .has_default = true,
          .def_bool = false,
          .description = "Return {job_id, status: running} at once instead of waiting; follow the job with "
                         "sandbox_status, sandbox_wait and sandbox_cancel. A notifications/message says when it "
                         "ends." },
        { .name = "nested",
          .type = DM_ARG_BOOL,
          .has_default = true,
          .def_bool = false,
          .description = "Give the command demesne's own tools: an MCP endpoint inside the sandbox at "
                         "DEMESNE_MCP_URL, with DEMESNE_MCP_TOKEN, that sees and controls only what it makes; "
                         "what it made ends with the run." },
};
#define N_ARGS (sizeof(script_args) / sizeof(script_args[0]))

static const char output_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"exit_code\":{\"type\":\"integer\",\"description\":\"the command's exit status; 128+N when killed by signal "
        "N\"},"
        "\"stdout\":{\"type\":\"string\",\"description\":\"standard output, at most 64 KiB (head and tail kept)\"},"
        "\"stderr\":{\"type\":\"string\",\"description\":\"standard error, at most 64 KiB (head and tail kept)\"},"
        "\"stdout_truncated\":{\"type\":\"boolean\"},"
        "\"stderr_truncated\":{\"type\":\"boolean\"},"
        "\"timed_out\":{\"type\":\"boolean\"},"
        "\"duration_ms\":{\"type\":\"integer\"},"
        "\"output_dir\":{\"type\":\"string\",\"description\":\"host directory holding /out, stdout.log and "
        "stderr.log\"},"
        "\"run_id\":{\"type\":\"string\"},"
        "\"job_id\":{\"type\":\"string\",\"description\":\"with background: true, the job to follow\"},"
        "\"status\":{\"type\":\"string\",\"enum\":[\"running\"]}},"
        "\"anyOf\":[{\"required\":[\"exit_code\",\"stdout\",\"stderr\",\"stdout_truncated\",\"stderr_truncated\","
        "\"timed_out\",\"duration_ms\",\"output_dir\",\"run_id\"]},{\"required\":[\"job_id\",\"status\"]}]}";

const char dm_tools_args[] = "invalid arguments";

json_object *dm_tools_error(const char *what, const struct dm_error *err)
{
        const char *msg = err && err->msg[0] ? err->msg : "unknown error";

        if (what == DM_TOOLS_ARGS)
                return dm_tool_result_error("invalid arguments: %s", msg);
        if (what)
                return dm_tool_result_error("%s failed: %s", what, msg);
        return dm_tool_result_error("%s", msg);
}

json_object *dm_tools_text_field(const char *s, size_t len)
{
        size_t clean_len;
        char *clean = dm_utf8_sanitize(s, len, &clean_len);
        json_object *o = clean ? json_object_new_string_len(clean, (int)clean_len) : json_object_new_string("");

        free(clean);
        return o;
}

json_object *dm_tools_exec_result(int exit_code, const char *out, size_t out_len, bool out_truncated, const char *err,
                                  size_t err_len, bool err_truncated, bool timed_out, int64_t duration_ms)
{
        json_object *o = json_object_new_object();

        json_object_object_add(o, "exit_code", json_object_new_int(exit_code));
        json_object_object_add(o, "stdout", dm_tools_text_field(out, out_len));
        json_object_object_add(o, "stderr", dm_tools_text_field(err, err_len));
        json_object_object_add(o, "stdout_truncated", json_object_new_boolean(out_truncated));
        json_object_object_add(o, "stderr_truncated", json_object_new_boolean(err_truncated));
        json_object_object_add(o, "timed_out", json_object_new_boolean(timed_out));
        json_object_object_add(o, "duration_ms", json_object_new_int64(duration_ms));
        return o;
}

/* Where a run reports to: the call (progress) in the foreground, the job
 * (output tail, byte count) in the background. */
/* Runs the (already checked) arguments; returns the structured result, or
 * NULL with *ret_r set (-ECANCELED for a cancel) and err filled. */
static json_object *run_script(struct dm_context *ctx, const struct dm_args_table *t, json_object *args,
                               const struct dm_policy *policy, char *const *granted, struct dm_slot *reserved,
                               struct dm_cancel *cancel, struct dm_tools_sink *sink, int *ret_r, struct dm_error *err)
{
        struct dm_run_result res;
        _cleanup_free_ const char **files = dm_args_strv(args, "files"), **dirs = dm_args_strv(args, "directories");
        char **env = dm_args_env(args, "env");
        json_object *out;
        int r;

        if (!files || !dirs || !env) {
                dm_args_strv_free(env);
                *ret_r = dm_error_set(err, -ENOMEM, "out of memory");
                return NULL;
        }
        struct dm_run_request req = {
                .image = dm_args_str(t->specs, t->n, args, "image"),
                .command = dm_args_str(t->specs, t->n, args, "command"),
                .files = files,
                .dirs = dirs,
                .granted = (const char *const *)granted,
                .env = (const char *const *)env,
                .timeout_s = dm_args_int(t->specs, t->n, args, "timeout_seconds"),
                .policy = policy,
                .cancel = cancel,
                .reserved = reserved,
                .on_output = dm_tools_sink_output,
                .on_progress = dm_tools_sink_progress,
                .on_message = dm_tools_sink_message,
                .userdata = sink,
                .principal = sink->call ? dm_call_principal(sink->call) : dm_job_owner(sink->job),
                .job_id = sink->job ? dm_job_id(sink->job) : NULL,
        };
        struct dm_tools_nested_run nested = { .ctx = ctx,
                                              .maker = req.principal,
                                              .egress = policy->mode,
                                              .session = sink->call ? dm_call_session_id(sink->call) : 0 };

        if (dm_args_bool(t->specs, t->n, args, "nested")) {
                req.on_started = dm_tools_nested_run_started;
                req.started_userdata = &nested;
                req.reach = dm_tools_nested_reach(ctx);
        }
        r = dm_run(ctx, &req, &res, err);
        dm_tools_nested_run_end(&nested);
        dm_args_strv_free(env);
        *ret_r = r;
        if (r == -ECANCELED) {
                log_info("sandbox_script %s cancelled; container removed", res.run_id ? res.run_id : "");
                dm_run_result_release(&res);
                return NULL;
        }
        if (r < 0)
                return NULL;

        out = dm_tools_exec_result(res.exit_code, res.stdout_text, res.stdout_len, res.stdout_truncated,
                                   res.stderr_text, res.stderr_len, res.stderr_truncated, res.timed_out,
                                   res.duration_ms);
        json_object_object_add(out, "output_dir", json_object_new_string(res.output_dir));
        json_object_object_add(out, "run_id", json_object_new_string(res.run_id));
        dm_run_result_release(&res);
        return out;
}

/* ---- background ------------------------------------------------------------ */

static json_object *script_work(struct dm_context *ctx, json_object *args, void *arg, struct dm_job *job,
                                struct dm_slot *reserved, struct dm_cancel *cancel, int *ret_r, struct dm_error *err)
{
        struct dm_tools_sink sink = { .job = job };
        const struct dm_tools_run_arg *a = arg; /* the call's: its table and its parsed policy */

        return run_script(ctx, a->t, args, a->policy, a->granted, reserved, cancel, &sink, ret_r, err);
}

/* ---- the tool -------------------------------------------------------------------- */

static json_object *script_call(struct dm_call *call, json_object *args)
{
        const struct dm_args_table *t = dm_call_tool(call)->data;
        struct dm_error err = { 0 };
        struct dm_tools_sink sink = { .call = call };
        struct dm_policy *policy = NULL;
        struct dm_tools_run_arg *job_arg;
        char **granted = NULL;
        json_object *out;
        int r;

        if (dm_args_check(t->specs, t->n, args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        /* Parsed once, here: the nested rules, the run and a background job
         * all use this policy. Not named: package-managers where this
         * server can do it, and from inside a nested sandbox no wider than
         * its own egress. */
        if (dm_tools_call_policy(call, args, dm_tools_call_egress(call, t, args), false, &policy, &err) < 0)
                return dm_tools_error(NULL, &err);
        {
                _cleanup_free_ const char **files = dm_args_strv(args, "files"),
                                          **dirs = dm_args_strv(args, "directories"),
                                          **allow = dm_args_strv(args, "allow");
                struct dm_tools_nested_ask ask = {
                        .nested = dm_args_bool(t->specs, t->n, args, "nested"),
                        .egress = &policy->mode,
                        .has_allow = allow && allow[0],
                        .has_host_paths = (files && files[0]) || (dirs && dirs[0]),
                };

                if (dm_tools_nested_check(call, &ask, &err) < 0 ||
                    dm_tools_call_paths(call, args, &granted, &err) < 0) {
                        dm_policy_free(policy);
                        return dm_tools_error(NULL, &err);
                }
        }
        /* The run's claim takes the admission slot (src/core/claim.h); a
         * job's is reserved when it starts, so that a cap refuses this
         * call. The policy goes with the job. */
        if (dm_args_bool(t->specs, t->n, args, "background")) {
                job_arg = dm_tools_run_arg_new(t, policy);
                if (!job_arg) { /* it freed the policy */
                        dm_args_strv_free(granted);
                        dm_error_set(&err, -ENOMEM, "out of memory");
                        return dm_tools_error(NULL, &err);
                }
                job_arg->granted = granted;
                return dm_tools_start_background(call, "sandbox_script", args, script_work, job_arg,
                                                 dm_tools_run_arg_free);
        }

        out = run_script(dm_call_context(call), t, args, policy, granted, NULL, dm_call_cancel(call), &sink, &r, &err);
        dm_policy_free(policy);
        dm_args_strv_free(granted);
        if (r == -ECANCELED)
                return NULL;
        if (!out)
                return dm_tools_error(dm_claim_refused(r) ? NULL : "sandbox_script", &err);
        dm_tools_claim_outputs(dm_call_context(call), dm_call_principal(call), out);
        return dm_tools_result_with_links(call, out);
}

static const struct dm_tool script_tools[] = {
        {
                .name = "sandbox_script",
                .title = "Run a shell command in a fresh sandbox",
                .description =
                        "Run a shell command (bash -c) in a new, disposable Linux container and return its exit "
                        "code, stdout and stderr. Host files/directories you list are mounted read-only under "
                        "/in; the working directory /out is a host output directory that stays after the run "
                        "(output_dir in the result, with stdout.log and stderr.log). /workspace is scratch space. "
                        "The egress parameter says this server's default network. The container is removed "
                        "afterwards; for work over a minute or two pass background: true.",
                .output_schema = output_schema,
                .read_only = false,
                .destructive = false,
                .idempotent = false,
                .open_world = false,
                .handler = script_call,
        },
};

void dm_tools_script_register(struct dm_registry *reg, const struct dm_args_facts *f)
{
        struct dm_tool t = script_tools[0];
        struct dm_args_table *args = dm_registry_own(reg, dm_args_tailor(f, script_args, N_ARGS, true));

        if (!args) {
                log_error("out of memory: sandbox_script left out");
                return;
        }
        t.input_schema = dm_registry_own(reg, dm_args_schema(args->specs, args->n));
        t.data = args;
        dm_registry_add(reg, &t, 1);
}
