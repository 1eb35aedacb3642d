/* SPDX-License-Identifier: MIT */
/* Persistent sandboxes: sandbox_create, sandbox_exec, sandbox_upload,
 * sandbox_download, sandbox_destroy, sandbox_list. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/policy.h"
#include "src/core/claim.h"
#include "src/core/egress.h"
#include "src/core/images.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/core/resources.h"
#include "src/core/pool.h"
#include "src/core/sandbox.h"
#include "src/core/settings.h"
#include "src/core/snapshot.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "src/core/transfer.h"
#include "src/basic/base64.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"
#include "src/basic/utf8.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define ID_ARG                                                                            \
        {                                                                                 \
                .name = "sandbox_id", .type = DM_ARG_STRING, .required = true, .max = 64, \
                .description = "The id sandbox_create returned."                          \
        }

static const struct dm_arg_spec create_args[] = {
        { .name = "image",
          .type = DM_ARG_STRING,
          .role = DM_ARG_ROLE_IMAGE,
          .enum_values = dm_image_names,
          .enum_aliases = dm_image_aliases,
          .has_default = true,
          .def_str = DM_IMAGE_DEFAULT,
          .description = "Container image (as for sandbox_script)." },
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
          .description = "Extra egress entries (as for sandbox_script)." },
        { .name = "files",
          .type = DM_ARG_STRING_ARRAY,
          .role = DM_ARG_ROLE_HOST_PATH,
          .max = 64,
          .has_default = true,
          .description = "Absolute host files, read-only at /in/<basename>." },
        { .name = "directories",
          .type = DM_ARG_STRING_ARRAY,
          .role = DM_ARG_ROLE_HOST_PATH,
          .max = 64,
          .has_default = true,
          .description = "Absolute host directories, read-only at /in/<basename>." },
        { .name = "env",
          .type = DM_ARG_STRING_MAP,
          .max = 256,
          .has_default = true,
          .description = "Environment variables for every command in the sandbox." },
        { .name = "ttl_seconds",
          .type = DM_ARG_INT,
          .min = 1,
          .max = 30 * 86400,
          .has_default = true,
          .def_int = DM_SANDBOX_TTL_DEFAULT,
          .description = "Destroy the sandbox after this long without a sandbox_exec (each exec restarts the clock)." },
        { .name = "nested",
          .type = DM_ARG_BOOL,
          .has_default = true,
          .def_bool = false,
          .description = "Give the sandbox demesne's own tools: an MCP endpoint inside it at DEMESNE_MCP_URL, "
                         "with DEMESNE_MCP_TOKEN, that sees and controls only what it makes. Its children's egress "
                         "is never wider than its own; destroying it ends them." },
        { .name = "snapshot_id",
          .type = DM_ARG_STRING,
          .max = 64,
          .description = "Start from a snapshot (sandbox_snapshot): its root file system and /workspace, its "
                         "image; its egress unless egress is given, which may only be as narrow or narrower." },
};

static const struct dm_arg_spec exec_args[] = {
        ID_ARG,
        { .name = "command",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 1 << 20,
          .description = "Shell command run with bash -c." },
        { .name = "env",
          .type = DM_ARG_STRING_MAP,
          .max = 256,
          .has_default = true,
          .description = "Extra environment variables for this command." },
        { .name = "timeout_seconds",
          .type = DM_ARG_INT,
          .min = 1,
          .max = 172800,
          .has_default = true,
          .def_int = 3600,
          .description = "Kill the command and everything it started after this many seconds." },
        { .name = "workdir",
          .type = DM_ARG_STRING,
          .has_default = true,
          .def_str = "/out",
          .max = 4096,
          .description = "Absolute working directory inside the sandbox." },
        { .name = "stdin",
          .type = DM_ARG_STRING,
          .max = 16 << 20,
          .has_default = true,
          .description = "Text given to the command on standard input (then end of file)." },
        { .name = "background",
          .type = DM_ARG_BOOL,
          .has_default = true,
          .description = "Answer at once with a job_id; follow the command with sandbox_status, sandbox_wait "
                         "and sandbox_cancel." },
};

static const struct dm_arg_spec upload_args[] = {
        ID_ARG,
        { .name = "src",
          .type = DM_ARG_STRING,
          .role = DM_ARG_ROLE_HOST_PATH,
          .max = 4096,
          .description = "Absolute host path of a regular file (or give content instead)." },
        { .name = "content",
          .type = DM_ARG_STRING,
          .max = 1LL << 40, /* the message size caps it */
          .description = "The file's bytes, base64 (RFC 4648, padded), instead of src: for a client that "
                         "shares no disk with the server. Up to the server's message size." },
        { .name = "dst",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 4096,
          .description = "Absolute path of the file inside the sandbox; its folder is made if missing." },
};

static const struct dm_arg_spec download_args[] = {
        ID_ARG,
        { .name = "src",
          .type = DM_ARG_STRING,
          .required = true,
          .max = 4096,
          .description = "Path of a regular file inside the sandbox (links resolved inside the sandbox)." },
        { .name = "return_content",
          .type = DM_ARG_BOOL,
          .has_default = true,
          .def_bool = false,
          .description = "Also return the file's bytes in the result, base64 (content), for a client that "
                         "shares no disk with the server; files up to 1 MiB." },
};

static const struct dm_arg_spec destroy_args[] = {
        { .name = "sandbox_id",
          .type = DM_ARG_STRING,
          .max = 64,
          .description = "The sandbox to destroy (or give snapshot_id)." },
        { .name = "snapshot_id",
          .type = DM_ARG_STRING,
          .max = 64,
          .description = "The snapshot to delete (sandbox_snapshot returned it) instead of a sandbox." },
};

static const struct dm_arg_spec list_args[] = { { 0 } };

static const char create_schema[] =
        "{\"type\":\"object\",\"properties\":{\"sandbox_id\":{\"type\":\"string\"},\"output_dir\":{\"type\":\"string\"}"
        ","
        "\"expires_at\":{\"type\":\"string\"},\"image\":{\"type\":\"string\"},\"egress\":{\"type\":\"string\"},"
        "\"created_at\":{\"type\":\"string\"}},\"required\":[\"sandbox_id\",\"output_dir\",\"expires_at\"]}";
static const char exec_schema[] =
        "{\"type\":\"object\",\"properties\":{\"exit_code\":{\"type\":\"integer\"},\"stdout\":{\"type\":\"string\"},"
        "\"stderr\":{\"type\":\"string\"},\"stdout_truncated\":{\"type\":\"boolean\"},"
        "\"stderr_truncated\":{\"type\":\"boolean\"},\"timed_out\":{\"type\":\"boolean\"},"
        "\"duration_ms\":{\"type\":\"integer\"},"
        "\"job_id\":{\"type\":\"string\",\"description\":\"with background: true, the job to follow\"},"
        "\"status\":{\"type\":\"string\",\"enum\":[\"running\"]}},"
        "\"anyOf\":[{\"required\":[\"exit_code\",\"stdout\",\"stderr\",\"stdout_truncated\",\"stderr_truncated\","
        "\"timed_out\",\"duration_ms\"]},{\"required\":[\"job_id\",\"status\"]}]}";
static const char list_schema[] =
        "{\"type\":\"object\",\"properties\":{\"sandboxes\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}},"
        "\"jobs\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}},"
        "\"snapshots\":{\"type\":\"array\",\"items\":{\"type\":\"object\"}},"
        "\"previews\":{\"type\":\"array\",\"items\":{\"type\":\"object\"},\"description\":\"open "
        "sandbox_expose previews: sandbox_id, port, url (without its code)\"},"
        "\"pool\":{\"type\":\"object\",\"description\":\"warm containers kept for sandbox_script: image, size, "
        "ready\"}},\"required\":[\"sandboxes\",\"jobs\"]}";

static void create_message(void *userdata, const char *message)
{
        dm_call_note(userdata, message);
}

int dm_tools_sandbox_make(struct dm_call *call, const struct dm_args_table *t, json_object *args,
                          struct dm_slot **reserved, bool quiet, struct dm_sandbox *ret, const char **ret_what,
                          struct dm_error *err)
{
        struct dm_policy *policy = NULL;
        const char *egress;
        _cleanup_free_ const char **allow = NULL, **files = NULL, **dirs = NULL;
        char **env = NULL, **granted = NULL, token[65] = "";
        enum dm_egress mode;
        struct dm_snapshot snap;
        bool nested;
        int r, from_snap;

        *ret_what = DM_TOOLS_ARGS;
        if ((r = dm_args_check(t->specs, t->n, args, err)) < 0)
                return r;
        /* Before the egress is read: a snapshot's is the default. */
        from_snap = dm_tools_snapshot_resolve(call, args, &snap, err);
        if (from_snap < 0) {
                *ret_what = from_snap == -EINVAL ? DM_TOOLS_ARGS : NULL;
                return from_snap;
        }
        *ret_what = NULL;
        allow = dm_args_strv(args, "allow");
        egress = dm_tools_call_egress(call, t, args);
        /* Parsed once: the nested rules, the container and its record (which
         * keeps a copy for every later exec) use this one. */
        if ((r = dm_tools_call_policy(call, args, egress, false, &policy, err)) < 0)
                return r;

        files = dm_args_strv(args, "files");
        dirs = dm_args_strv(args, "directories");
        nested = dm_args_bool(t->specs, t->n, args, "nested");
        struct dm_tools_nested_ask ask = {
                .nested = nested,
                .egress = &policy->mode,
                .has_allow = allow && allow[0],
                .has_host_paths = (files && files[0]) || (dirs && dirs[0]),
        };
        if ((r = dm_tools_nested_check(call, &ask, err)) < 0 ||
            (r = dm_tools_call_paths(call, args, &granted, err)) < 0) {
                dm_policy_free(policy);
                return r;
        }
        env = dm_args_env(args, "env");
        if (nested && env && dm_tools_nested_env(dm_call_context(call), token, &env) < 0) {
                dm_args_strv_free(env);
                dm_args_strv_free(granted);
                dm_policy_free(policy);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        struct dm_sandbox_create req = {
                .image = dm_args_str(t->specs, t->n, args, "image"),
                .egress = egress,
                .allow = allow,
                .policy = policy,
                .files = files,
                .dirs = dirs,
                .granted = (const char *const *)granted,
                .env = (const char *const *)env,
                .ttl_s = dm_args_int(t->specs, t->n, args, "ttl_seconds"),
                .principal = dm_call_principal(call),
                .reserved = reserved ? *reserved : NULL,
                .nested = nested,
                .reach = nested ? dm_tools_nested_reach(dm_call_context(call)) : NULL,
                .image_ref = from_snap ? snap.image_ref : NULL,
                .on_message = quiet ? NULL : create_message,
                .userdata = call,
                .cancel = dm_call_cancel(call),
        };
        /* Its claim takes the admission slot (src/core/claim.h). */
        r = dm_sandbox_create(dm_call_context(call), &req, ret, err);
        dm_args_strv_free(env);
        dm_args_strv_free(granted);
        mode = policy->mode;
        dm_policy_free(policy);
        if (r < 0) {
                *ret_what = dm_claim_refused(r) ? NULL : "sandbox_create";
                return r;
        }
        /* The sandbox took it: its destroy gives it back, whatever follows. */
        if (reserved)
                *reserved = NULL;
        *ret_what = "sandbox_create";
        if (from_snap && (r = dm_tools_snapshot_seed(call, &snap, ret, err)) < 0)
                return r;
        if (nested && (r = dm_tools_nested_open(call, ret, token, mode, err)) < 0) {
                struct dm_error e2 = { 0 };

                explicit_bzero(token, sizeof(token));
                if (dm_sandbox_destroy(dm_call_context(call), ret->id, &e2) < 0)
                        log_warning("sandbox %s: %s", ret->id, e2.msg);
                return r;
        }
        explicit_bzero(token, sizeof(token));
        dm_resources_claim(dm_call_context(call)->resources, ret->id, dm_call_principal(call));
        return 0;
}

static json_object *create_call(struct dm_call *call, json_object *args)
{
        struct dm_error err = { 0 };
        struct dm_sandbox sb;
        const char *what;

        if (dm_tools_sandbox_make(call, dm_call_tool(call)->data, args, NULL, false, &sb, &what, &err) < 0)
                return dm_tools_error(what, &err);
        return dm_tool_result_ok(dm_sandbox_describe(&sb));
}

/* The caller's own sandbox: another principal's answers as an unknown id.
 * Its output directory is claimed for the caller again (a server started
 * since it was made knows its files only from here). */
static int get_own_as(struct dm_context *ctx, const char *principal, const char *id, struct dm_sandbox *sb,
                      struct dm_error *err)
{
        int r = dm_sandbox_get(ctx, id, principal, sb, err);

        /* Exec, upload and download may each run a command in it. */
        if (r >= 0)
                r = dm_sandbox_check_awake(sb, err);
        if (r < 0)
                return r;
        dm_resources_claim(ctx->resources, sb->id, principal);
        return 0;
}

static int get_own(struct dm_call *call, const char *id, struct dm_sandbox *sb, struct dm_error *err)
{
        return get_own_as(dm_call_context(call), dm_call_principal(call), id, sb, err);
}

/* The command of a checked exec call, in the foreground (sink->call) or as a
 * job (sink->job): the result, or NULL with *ret_r (-ECANCELED) and err,
 * and *ret_what the dm_tools_error attribution (NULL: a refusal). */
static json_object *exec_run(struct dm_context *ctx, const char *principal, json_object *args,
                             struct dm_tools_sink *sink, struct dm_cancel *cancel, int *ret_r, const char **ret_what,
                             struct dm_error *err)
{
        struct dm_sandbox sb;
        struct dm_sandbox_exec_result res;
        const char *in;
        json_object *out, *v;
        char **env;
        int r;

        if ((r = get_own_as(ctx, principal, dm_args_str(exec_args, N(exec_args), args, "sandbox_id"), &sb, err)) < 0)
                goto fail;
        /* A long command must not let the sandbox expire under it: the
         * clock restarts now when this command could outlast it (after the
         * command it restarts anyway; one record write, one renew on
         * OpenSandbox, in the common case). */
        if (sb.expires_at - dm_wall_ms() / 1000 < dm_args_int(exec_args, N(exec_args), args, "timeout_seconds") + 60 &&
            (r = dm_sandbox_touch(ctx, &sb, err)) < 0)
                goto fail;
        in = dm_args_str(exec_args, N(exec_args), args, "stdin");
        env = dm_args_env(args, "env");
        struct dm_sandbox_exec req = {
                .command = dm_args_str(exec_args, N(exec_args), args, "command"),
                .env = (const char *const *)env,
                .workdir = dm_args_str(exec_args, N(exec_args), args, "workdir"),
                .stdin_data = in,
                .stdin_len =
                        in && json_object_object_get_ex(args, "stdin", &v) ? (size_t)json_object_get_string_len(v) : 0,
                .timeout_s = dm_args_int(exec_args, N(exec_args), args, "timeout_seconds"),
                .cancel = cancel,
                .on_progress = dm_tools_sink_progress,
                .userdata = sink,
        };
        r = dm_sandbox_exec(ctx, &sb, &req, &res, err);
        dm_args_strv_free(env);
        *ret_what = "sandbox_exec";
        if (r < 0) {
                if (r == -ECANCELED)
                        dm_sandbox_exec_result_release(&res);
                goto fail;
        }
        dm_sandbox_touch(ctx, &sb, err);
        out = dm_tools_exec_result(res.exit_code, res.stdout_text, res.stdout_len, res.stdout_truncated,
                                   res.stderr_text, res.stderr_len, res.stderr_truncated, res.timed_out,
                                   res.duration_ms);
        dm_sandbox_exec_result_release(&res);
        return out;
fail:
        *ret_r = r;
        return NULL;
}

static json_object *exec_work(struct dm_context *ctx, json_object *args, void *arg, struct dm_job *job,
                              struct dm_slot *reserved, struct dm_cancel *cancel, int *ret_r, struct dm_error *err)
{
        struct dm_tools_sink sink = { .job = job };
        const char *what = NULL;

        (void)reserved; /* the sandbox exists: nothing is claimed */
        return exec_run(ctx, arg, args, &sink, cancel, ret_r, &what, err);
}

static json_object *exec_call(struct dm_call *call, json_object *args)
{
        struct dm_error err = { 0 };
        struct dm_sandbox sb;
        json_object *out;
        const char *what = NULL;
        char *principal;
        int r = 0;

        if (dm_args_check(exec_args, N(exec_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        if (dm_args_str(exec_args, N(exec_args), args, "workdir")[0] != '/') {
                dm_error_set(&err, -EINVAL, "'workdir' must be an absolute path in the sandbox");
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        }
        if (dm_args_bool(exec_args, N(exec_args), args, "background")) {
                /* An unknown sandbox is refused now, not as a failed job. */
                if (get_own(call, dm_args_str(exec_args, N(exec_args), args, "sandbox_id"), &sb, &err) < 0)
                        return dm_tools_error(NULL, &err);
                principal = strdup(dm_call_principal(call));
                if (!principal)
                        return dm_tool_result_error("out of memory");
                return dm_tools_start_background(call, "sandbox_exec", args, exec_work, principal, free);
        }
        struct dm_tools_sink sink = { .call = call };
        out = exec_run(dm_call_context(call), dm_call_principal(call), args, &sink, dm_call_cancel(call), &r, &what,
                       &err);
        if (!out && r == -ECANCELED)
                return NULL;
        if (!out)
                return dm_tools_error(what, &err);
        return dm_tool_result_ok(out);
}

static json_object *upload_call(struct dm_call *call, json_object *args)
{
        const struct dm_args_table *t = dm_call_tool(call)->data;
        struct dm_context *ctx = dm_call_context(call);
        struct dm_error err = { 0 };
        struct dm_sandbox sb;
        int64_t bytes = 0;
        json_object *out, *v;
        const char *src, *content, *dst;
        _cleanup_free_ char *data = NULL;
        char **granted = NULL;
        size_t len = 0;
        int r;

        if (dm_args_check(t->specs, t->n, args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        src = dm_args_str(t->specs, t->n, args, "src");
        content = dm_args_str(t->specs, t->n, args, "content");
        if (!src == !content) {
                dm_error_set(&err, -EINVAL,
                             "give either 'src' (a host path) or 'content' (the file's bytes, base64), "
                             "not %s",
                             src ? "both" : "neither");
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        }
        if (src) {
                struct dm_tools_nested_ask ask = { .has_host_paths = true };

                if (dm_principal_depth(dm_call_principal(call)) > 0 && dm_tools_nested_check(call, &ask, &err) < 0)
                        return dm_tools_error(NULL, &err);
        }
        if (content && json_object_object_get_ex(args, "content", &v)) {
                r = dm_base64_decode(content, (size_t)json_object_get_string_len(v), &data, &len);
                if (r < 0) {
                        dm_error_set(&err, r,
                                     r == -ENOMEM ? "out of memory"
                                                  : "'content' is not base64 (RFC 4648, standard alphabet, "
                                                    "padded, no line breaks)");
                        return dm_tools_error(r == -ENOMEM ? NULL : DM_TOOLS_ARGS, &err);
                }
        }
        if (get_own(call, dm_args_str(t->specs, t->n, args, "sandbox_id"), &sb, &err) < 0)
                return dm_tools_error(NULL, &err);
        dst = dm_args_str(t->specs, t->n, args, "dst");
        /* A src outside DEMESNE_ALLOWED_PATHS: asked of the person, once
         * the sandbox is known to be the caller's. */
        if (src && dm_tools_call_upload_src(call, src, dst, &granted, &err) < 0)
                return dm_tools_error(NULL, &err);
        r = data ? dm_transfer_upload_bytes(ctx, &sb, data, len, dst, ctx->cfg.transfer_max, &bytes, &err)
                 : dm_transfer_upload(ctx, &sb, src, (const char *const *)granted, dst, ctx->cfg.transfer_max, &bytes,
                                      &err);
        dm_args_strv_free(granted);
        if (r < 0)
                return dm_tools_error("sandbox_upload", &err);
        out = json_object_new_object();
        json_object_object_add(out, "sandbox_path", json_object_new_string(dm_args_str(t->specs, t->n, args, "dst")));
        json_object_object_add(out, "bytes", json_object_new_int64(bytes));
        return dm_tool_result_ok(out);
}

#define RETURN_CONTENT_MAX (1 << 20)

/* The downloaded file's bytes into the result (content, base64), read back
 * beneath the output directory, which the sandbox can write: no link is
 * followed, only a regular file of at most RETURN_CONTENT_MAX is read. */
static void add_content(const char *output_dir, const char *host_path, int64_t bytes, json_object *out)
{
        _cleanup_close_ int dir = -1;
        _cleanup_free_ char *data = NULL, *enc = NULL;
        char rel[PATH_MAX];
        size_t len = 0;
        int r = -EFBIG;

        if (bytes <= RETURN_CONTENT_MAX) {
                snprintf(rel, sizeof(rel), "downloads/%s", strrchr(host_path, '/') + 1);
                dir = dm_io_open_dir(output_dir);
                r = dir < 0 ? dir : dm_io_read_capped(dir, rel, RETURN_CONTENT_MAX, &data, &len);
        }
        if (r >= 0 && !(enc = dm_base64_encode(data, len)))
                r = -ENOMEM;
        if (r < 0) {
                char why[256];

                snprintf(why, sizeof(why), "%s",
                         r == -EFBIG ? "over 1 MiB: read it at host_path, or in pieces with sandbox_exec"
                                     : "the downloaded file could not be read back as a plain file");
                json_object_object_add(out, "content_omitted", json_object_new_string(why));
                return;
        }
        json_object_object_add(out, "content", json_object_new_string_len(enc, (int)strlen(enc)));
        json_object_object_add(out, "content_encoding", json_object_new_string("base64"));
}

static json_object *download_call(struct dm_call *call, json_object *args)
{
        struct dm_context *ctx = dm_call_context(call);
        struct dm_error err = { 0 };
        struct dm_sandbox sb;
        int64_t bytes = 0;
        char *host = NULL;
        json_object *out, *result;

        if (dm_args_check(download_args, N(download_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        if (get_own(call, dm_args_str(download_args, N(download_args), args, "sandbox_id"), &sb, &err) < 0)
                return dm_tools_error(NULL, &err);
        if (dm_transfer_download(ctx, &sb, dm_args_str(download_args, N(download_args), args, "src"),
                                 ctx->cfg.transfer_max, &host, &bytes, &err) < 0)
                return dm_tools_error("sandbox_download", &err);
        out = json_object_new_object();
        json_object_object_add(out, "host_path", json_object_new_string(host));
        json_object_object_add(out, "bytes", json_object_new_int64(bytes));
        if (dm_args_bool(download_args, N(download_args), args, "return_content"))
                add_content(sb.output_dir, host, bytes, out);
        result = dm_tool_result_ok(out);
        {
                char rel[PATH_MAX];

                snprintf(rel, sizeof(rel), "downloads/%s", strrchr(host, '/') + 1);
                dm_tools_link_file(call, result, sb.id, rel, bytes);
        }
        free(host);
        return result;
}

static json_object *destroy_call(struct dm_call *call, json_object *args)
{
        struct dm_error err = { 0 };
        const char *id, *snap;
        json_object *out;

        if (dm_args_check(destroy_args, N(destroy_args), args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        id = dm_args_str(destroy_args, N(destroy_args), args, "sandbox_id");
        snap = dm_args_str(destroy_args, N(destroy_args), args, "snapshot_id");
        if (!id == !snap) {
                dm_error_set(&err, -EINVAL, "give either 'sandbox_id' or 'snapshot_id', not %s",
                             id ? "both" : "neither");
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        }
        if (snap ? dm_snapshot_delete(dm_call_context(call), dm_call_principal(call), snap, &err) < 0
                 : dm_sandbox_check_owner(dm_call_context(call), id, dm_call_principal(call), &err) < 0 ||
                            dm_sandbox_destroy(dm_call_context(call), id, &err) < 0)
                return dm_tools_error(NULL, &err);
        out = json_object_new_object();
        json_object_object_add(out, "destroyed", json_object_new_boolean(1));
        return dm_tool_result_ok(out);
}

static json_object *list_call(struct dm_call *call, json_object *args)
{
        struct dm_context *ctx = dm_call_context(call);
        struct dm_error err = { 0 };
        json_object *out;

        if (dm_args_check(list_args, 0, args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        out = json_object_new_object();
        /* The caller's own: another principal's are not shown. */
        json_object_object_add(out, "sandboxes", dm_sandbox_list(ctx, dm_call_principal(call)));
        json_object_object_add(out, "jobs", dm_jobs_list(ctx->jobs, dm_call_principal(call)));
        json_object_object_add(out, "snapshots", dm_snapshot_list(ctx, dm_call_principal(call)));
        json_object_object_add(out, "previews", dm_tools_previews_list(ctx, dm_call_principal(call)));
        if (ctx->pool)
                json_object_object_add(out, "pool", dm_pool_describe(ctx->pool));
        return dm_tool_result_ok(out);
}

static const struct dm_tool sandbox_tools[] = {
        { .name = "sandbox_create",
          .title = "Create a persistent sandbox",
          .description = "Create a sandbox that lives across calls (until sandbox_destroy, or ttl_seconds without "
                         "a sandbox_exec, 48 h by default) and outlives this server: run commands in it with "
                         "sandbox_exec, move files with sandbox_upload/sandbox_download. /workspace keeps its "
                         "files between commands; /out is the host output directory.",
          .output_schema = create_schema,
          .handler = create_call },
        { .name = "sandbox_exec",
          .title = "Run a command in a persistent sandbox",
          .description = "Run a shell command (bash -c) in a sandbox made by sandbox_create, with optional stdin "
                         "and working directory (default /out). Refreshes the sandbox's TTL.",
          .output_schema = exec_schema,
          .handler = exec_call },
        { .name = "sandbox_upload",
          .title = "Copy a host file into a sandbox",
          .description = "Copy a host file (inside the allowed roots: see src), or bytes the caller sends "
                         "(content, base64), to an absolute path in the sandbox; the folder is made when missing. "
                         "Files up to 1 GiB (DEMESNE_TRANSFER_MAX).",
          .handler = upload_call },
        { .name = "sandbox_download",
          .title = "Copy a file out of a sandbox",
          .description = "Copy a regular file from the sandbox to <output_dir>/downloads/<name> on the host and "
                         "nowhere else; links are resolved inside the sandbox. Files up to 1 GiB. With "
                         "return_content, files up to 1 MiB also come back in the result (content, base64).",
          .handler = download_call },
        { .name = "sandbox_destroy",
          .title = "Destroy a persistent sandbox",
          .description = "Remove the sandbox's container and /workspace (its output directory stays); or, with "
                         "snapshot_id, delete a snapshot.",
          .destructive = true,
          .handler = destroy_call },
        { .name = "sandbox_list",
          .title = "List sandboxes and jobs",
          .description =
                  "The live persistent sandboxes of this output root, the background jobs of this server, and its "
                  "warm pool (containers kept started for sandbox_script) when it has one.",
          .output_schema = list_schema,
          .read_only = true,
          .idempotent = true,
          .handler = list_call },
};

void dm_tools_sandbox_register(struct dm_registry *reg, const struct dm_args_facts *f)
{
        struct dm_tool t[N(sandbox_tools)];
        /* create and upload follow this server's facts. */
        struct dm_args_table *create = dm_registry_own(reg, dm_args_tailor(f, create_args, N(create_args), true)),
                             *upload = dm_registry_own(reg, dm_args_tailor(f, upload_args, N(upload_args), false));

        if (!create || !upload) {
                log_error("out of memory: the sandbox tools left out");
                return;
        }
        memcpy(t, sandbox_tools, sizeof(t));
        t[0].input_schema = dm_registry_own(reg, dm_args_schema(create->specs, create->n));
        t[0].data = create;
        t[1].input_schema = dm_registry_own(reg, dm_args_schema(exec_args, N(exec_args)));
        t[2].input_schema = dm_registry_own(reg, dm_args_schema(upload->specs, upload->n));
        t[2].data = upload;
        t[3].input_schema = dm_registry_own(reg, dm_args_schema(download_args, N(download_args)));
        t[4].input_schema = dm_registry_own(reg, dm_args_schema(destroy_args, N(destroy_args)));
        t[5].input_schema = dm_registry_own(reg, dm_args_schema(list_args, 0));
        dm_registry_add(reg, t, N(t));
        dm_tools_fork_register(reg, create);
}
