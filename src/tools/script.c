/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/netpolicy.h"
#include "src/images.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/runner.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "src/util/cleanup.h"
#include "src/util/log.h"
#include "src/util/utf8.h"

#define MAX_INPUTS 64
#define MAX_ENV 256

static const struct dm_arg_spec script_args[] = {
        { .name = "command", .type = DM_ARG_STRING, .required = true, .max = 1 << 20,
          .description = "Shell command run with bash -c inside the sandbox; its working directory is /out." },
        { .name = "image", .type = DM_ARG_STRING, .enum_values = dm_image_names, .enum_aliases = dm_image_aliases,
          .has_default = true, .def_str = "python",
          .description = "Container image: base, python (default; alias anaconda), node, go, browser, media, "
                         "twine, webgamedev." },
        { .name = "egress", .type = DM_ARG_STRING, .enum_values = dm_egress_names, .has_default = true,
          .def_str = "none",
          .description = "Network egress: none (loopback only). package-managers and open arrive with the "
                         "egress policy and are refused for now." },
        { .name = "allow", .type = DM_ARG_STRING_ARRAY, .max = 64, .has_default = true,
          .description = "Extra egress entries (host, *.host, host:port, CIDR, CIDR:port); refused unless the "
                         "server permits caller-supplied entries." },
        { .name = "files", .type = DM_ARG_STRING_ARRAY, .max = MAX_INPUTS, .has_default = true,
          .description = "Absolute host files, mounted read-only at /in/<basename>; must lie inside "
                         "DEMESNE_ALLOWED_PATHS." },
        { .name = "directories", .type = DM_ARG_STRING_ARRAY, .max = MAX_INPUTS, .has_default = true,
          .description = "Absolute host directories, mounted read-only at /in/<basename>; must lie inside "
                         "DEMESNE_ALLOWED_PATHS." },
        { .name = "env", .type = DM_ARG_STRING_MAP, .max = MAX_ENV, .has_default = true,
          .description = "Extra environment variables for the command." },
        { .name = "timeout_seconds", .type = DM_ARG_INT, .min = 1, .max = 172800, .has_default = true,
          .def_int = 3600,
          .description = "Kill the command (and everything it started) after this many seconds; the result "
                         "then says timed_out: true." },
        { .name = "background", .type = DM_ARG_BOOL, .has_default = true, .def_bool = false,
          .description = "Return a job id at once instead of waiting (arrives with background jobs; refused for "
                         "now)." },
};
#define N_ARGS (sizeof(script_args) / sizeof(script_args[0]))

static const char output_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"exit_code\":{\"type\":\"integer\",\"description\":\"the command's exit status; 128+N when killed by signal N\"},"
        "\"stdout\":{\"type\":\"string\",\"description\":\"standard output, at most 64 KiB (head and tail kept)\"},"
        "\"stderr\":{\"type\":\"string\",\"description\":\"standard error, at most 64 KiB (head and tail kept)\"},"
        "\"stdout_truncated\":{\"type\":\"boolean\"},"
        "\"stderr_truncated\":{\"type\":\"boolean\"},"
        "\"timed_out\":{\"type\":\"boolean\"},"
        "\"duration_ms\":{\"type\":\"integer\"},"
        "\"output_dir\":{\"type\":\"string\",\"description\":\"host directory holding /out, stdout.log and stderr.log\"},"
        "\"run_id\":{\"type\":\"string\"}},"
        "\"required\":[\"exit_code\",\"stdout\",\"stderr\",\"stdout_truncated\",\"stderr_truncated\","
        "\"timed_out\",\"duration_ms\",\"output_dir\",\"run_id\"]}";

static json_object *text_field(const char *s, size_t len)
{
        size_t clean_len;
        char *clean = dm_utf8_sanitize(s, len, &clean_len);
        json_object *o = clean ? json_object_new_string_len(clean, (int)clean_len) : json_object_new_string("");

        free(clean);
        return o;
}

struct progress_ctx {
        struct dm_call *call;
};

static void on_progress(void *userdata, int64_t elapsed_ms, uint64_t output_bytes)
{
        struct progress_ctx *p = userdata;
        char msg[128];

        snprintf(msg, sizeof(msg), "running for %lld s, %llu bytes of output", (long long)(elapsed_ms / 1000),
                 (unsigned long long)output_bytes);
        dm_call_progress(p->call, (double)elapsed_ms / 1000.0, 0, msg);
}

static json_object *script_call(struct dm_call *call, json_object *args)
{
        struct dm_context *ctx = dm_call_context(call);
        struct dm_error err = { 0 };
        struct dm_run_result res;
        struct progress_ctx pc = { .call = call };
        enum dm_egress egress;
        _cleanup_free_ const char **files = NULL, **dirs = NULL, **allow = NULL;
        char **env = NULL;
        json_object *out;
        int r;

        if (dm_args_check(script_args, N_ARGS, args, &err) < 0)
                return dm_tool_result_error("invalid arguments: %s", err.msg);
        if (dm_args_bool(script_args, N_ARGS, args, "background"))
                return dm_tool_result_error("background: true is not available yet in this version of demesne: "
                                            "call without it (the call waits for the command)");
        allow = dm_args_strv(args, "allow");
        if (dm_netpolicy_parse(dm_args_str(script_args, N_ARGS, args, "egress"), allow, &egress, &err) < 0)
                return dm_tool_result_error("%s", err.msg);

        files = dm_args_strv(args, "files");
        dirs = dm_args_strv(args, "directories");
        env = dm_args_env(args, "env");
        if (!files || !dirs || !env) {
                dm_args_strv_free(env);
                return dm_tool_result_error("out of memory");
        }

        struct dm_run_request req = {
                .image = dm_args_str(script_args, N_ARGS, args, "image"),
                .command = dm_args_str(script_args, N_ARGS, args, "command"),
                .files = files,
                .dirs = dirs,
                .env = (const char *const *)env,
                .timeout_s = dm_args_int(script_args, N_ARGS, args, "timeout_seconds"),
                .cancel = dm_call_cancel(call),
                .on_progress = on_progress,
                .userdata = &pc,
        };
        r = dm_run(ctx, &req, &res, &err);
        dm_args_strv_free(env);
        if (r == -ECANCELED) {
                log_info("sandbox_script %s cancelled; container removed", res.run_id ? res.run_id : "");
                dm_run_result_release(&res);
                return NULL;
        }
        if (r < 0)
                return dm_tool_result_error("sandbox_script failed: %s", err.msg);

        out = json_object_new_object();
        json_object_object_add(out, "exit_code", json_object_new_int(res.exit_code));
        json_object_object_add(out, "stdout", text_field(res.stdout_text, res.stdout_len));
        json_object_object_add(out, "stderr", text_field(res.stderr_text, res.stderr_len));
        json_object_object_add(out, "stdout_truncated", json_object_new_boolean(res.stdout_truncated));
        json_object_object_add(out, "stderr_truncated", json_object_new_boolean(res.stderr_truncated));
        json_object_object_add(out, "timed_out", json_object_new_boolean(res.timed_out));
        json_object_object_add(out, "duration_ms", json_object_new_int64(res.duration_ms));
        json_object_object_add(out, "output_dir", json_object_new_string(res.output_dir));
        json_object_object_add(out, "run_id", json_object_new_string(res.run_id));
        dm_run_result_release(&res);
        return dm_tool_result_ok(out);
}

static struct dm_tool script_tools[] = {
        {
                .name = "sandbox_script",
                .title = "Run a shell command in a fresh sandbox",
                .description =
                        "Run a shell command (bash -c) in a new, disposable Linux container and return its exit "
                        "code, stdout and stderr. Host files/directories you list are mounted read-only under "
                        "/in; the working directory /out is a host output directory that stays after the run "
                        "(output_dir in the result, with stdout.log and stderr.log). /workspace is scratch space. "
                        "No network access (egress none). The container is removed afterwards.",
                .output_schema = output_schema,
                .read_only = false,
                .destructive = false,
                .idempotent = false,
                .open_world = false,
                .handler = script_call,
        },
};

void dm_tools_script_register(void)
{
        static char *schema;

        if (!schema)
                schema = dm_args_schema(script_args, N_ARGS);
        script_tools[0].input_schema = schema;
        dm_registry_add(script_tools, sizeof(script_tools) / sizeof(script_tools[0]));
}
