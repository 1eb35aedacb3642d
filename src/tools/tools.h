/* SPDX-License-Identifier: MIT */
#ifndef DM_TOOLS_TOOLS_H
#define DM_TOOLS_TOOLS_H

/* Each tool family registers its tools into the MCP registry it is given. */

#include <stdbool.h>
#include <stdint.h>

#include "netpolicy/netpolicy.h"
#include "src/core/context.h"
#include "src/core/jobs.h"
#include "src/core/sandbox.h"
#include "src/basic/cancel.h"
#include "src/basic/error.h"

#include "src/mcp/registry.h"
#include "src/mcp/server.h"

/* The context every tool works in: the application the MCP server was made
 * with (dm_tools_mcp_new). */
static inline struct dm_context *dm_call_context(struct dm_call *call)
{
        return dm_call_app(call);
}

/* dm_policy_parse's flags for a caller's egress and allow entries on this
 * server (DEMESNE_ALLOW_CALLER_EGRESS). */
static inline unsigned dm_tools_caller_flags(struct dm_call *call)
{
        return dm_call_context(call)->cfg.allow_caller_egress ? DM_POLICY_CALLER_ALLOWED : 0;
}

/* ---- a call's egress policy, parsed once (request.c) ---- */

struct dm_args_table;
struct dm_policy;
/* The egress a call asks for: its egress argument, or, when it gives none,
 * the default for the caller (dm_tools_nested_egress_default). */
const char *dm_tools_call_egress(struct dm_call *call, const struct dm_args_table *t, json_object *args);
/* The call's one parse of mode (NULL: none) and its allow entries into
 * *ret_policy (for dm_policy_free), under the server's caller flags, or as
 * permitted when server_chosen (sandbox_research's open egress is the
 * tool's, not the caller's). Its nested rules, its run and its background
 * job all use this one. dm_policy_parse's errors, word for word. */
int dm_tools_call_policy(struct dm_call *call, json_object *args, const char *mode, bool server_chosen,
                         struct dm_policy **ret_policy, struct dm_error *err);
/* What a background run works from: the server's table for the tool and
 * the call's parsed policy. */
struct dm_tools_run_arg {
        const struct dm_args_table *t;
        struct dm_policy *policy;
        char **granted;   /* dm_tools_call_paths's, owned (freed with the arg) */
        bool usd_allowed; /* dm_tools_call_spend's answer */
};
/* The call's host paths (its files and directories arguments) that lie
 * outside DEMESNE_ALLOWED_PATHS and are refused for that alone
 * (dm_path_outside_only: never one in the state directory, the output
 * root or a credential folder), asked of the person at the client in one
 * question naming the tool, the caller, each path as it resolves now
 * (the target a symlink names) and that it is mounted read-only. 0 with
 * *ret_granted NULL when there is nothing to ask, or with the resolved
 * paths allowed for this call (free with dm_args_strv_free) for the claim
 * (dm_run_request.granted); any other answer is the refusal word for word
 * (-EACCES, as the claim would give it), now rather than in a job. A
 * nested caller's paths are never asked (they are refused by the nested
 * rules before this). */
int dm_tools_call_paths(struct dm_call *call, json_object *args, char ***ret_granted, struct dm_error *err);
/* The same for sandbox_upload's src, a host file copied to dst in the
 * sandbox: asked as the call's one path, *ret_granted for
 * dm_transfer_upload. */
int dm_tools_call_upload_src(struct dm_call *call, const char *src, const char *dst, char ***ret_granted,
                             struct dm_error *err);
/* An agent call's max_usd (0: not given): within DEMESNE_AGENT_MAX_USD,
 * 0; above it, asked of the person at the host's client (a nested
 * caller's question goes to the client that made its tree, naming it),
 * naming the tool, the caller and both figures: allowed, 0 with
 * *ret_allowed true (for this call's run alone: dm_agent_request's
 * max_usd_allowed); any other answer the refusal word for word
 * (dm_agent_cap_check's). From inside a tree a max_usd past what the tree
 * has left (DEMESNE_TREE_MAX_USD) is refused first, never asked: the
 * person can raise a run's cap, never the tree's. tree: the run will have
 * a nested endpoint (a host caller's run is then the top of a tree, whose
 * limit still holds on it: the question says so, as for a nested caller). */
int dm_tools_call_spend(struct dm_call *call, double max_usd, bool tree, bool *ret_allowed, struct dm_error *err);
/* Takes policy (freed when out of memory: NULL then). */
struct dm_tools_run_arg *dm_tools_run_arg_new(const struct dm_args_table *t, struct dm_policy *policy);
/* Frees the arg and its policy; accepts NULL (a dm_tools_start_background
 * arg_free). */
void dm_tools_run_arg_free(void *arg);

/* The MCP server for ctx, serving registry's tools (borrowed: it must
 * outlive the server): tools see ctx through dm_call_context; the run
 * outputs ctx's principals claimed are served as resources after the
 * skills. NULL when out of memory. A server uses dm_tools_server_open,
 * which makes one; alone it serves a registry of the caller's (the fuzz
 * target's stand-ins). */
struct dm_mcp_server *dm_tools_mcp_new(struct dm_context *ctx, struct dm_registry *registry);

/* ---- the tools server (server.c) ---- */

/* What the tools layer keeps for a server: the registry (every family,
 * configured from ctx, then the host tool proxy's tools), the MCP server
 * that serves it, nested sandboxes' endpoints and the host tool proxy.
 * ctx->tools points at it while it is open. */
struct dm_tools_server;
/* Opens it for ctx (after dm_server_init). A malformed DEMESNE_HOST_MCP
 * file is an error naming it; nothing is left made on an error. */
int dm_tools_server_open(struct dm_context *ctx, struct dm_tools_server **ret, struct dm_error *err);
/* The MCP server to serve on a transport. */
struct dm_mcp_server *dm_tools_server_mcp(const struct dm_tools_server *t);
/* The one teardown, after the transport has ended and before
 * dm_server_release: the nested endpoints stop (their calls are
 * cancelled), background jobs end (their last act is a notification), the
 * MCP server is freed, then the host tool proxy's sessions end and the
 * registry goes. NULL: nothing. */
void dm_tools_server_close(struct dm_tools_server *t);

/* Each family adds its tools to reg. What it builds from the facts f (the
 * schemas, descriptions, and the argument tables its handlers check calls
 * against, which a tool finds as its data) is reg's own, freed with it; f
 * is only read while registering. */
struct dm_args_facts;
void dm_tools_script_register(struct dm_registry *reg, const struct dm_args_facts *f);
void dm_tools_jobs_register(struct dm_registry *reg);
void dm_tools_sandbox_register(struct dm_registry *reg, const struct dm_args_facts *f);
void dm_tools_agent_register(struct dm_registry *reg, const struct dm_args_facts *f);
void dm_tools_report_register(struct dm_registry *reg);
void dm_tools_snapshot_register(struct dm_registry *reg);
/* sandbox_expose (expose.c). */
void dm_tools_expose_register(struct dm_registry *reg);

/* src/tools/sandbox.c: sandbox_create's work on args (checked here
 * against t, create's table), for sandbox_create and for each fork of
 * sandbox_fork: 0 with the new sandbox in *ret (and its output claimed
 * for the caller), or an error with nothing of it left and *ret_what the
 * dm_tools_error attribution. reserved (may be NULL): a reservation of
 * the caller's made ahead (dm_sandbox_create.reserved); once a sandbox is
 * made it takes it and *reserved becomes NULL (a step after the create
 * that fails destroys the sandbox, which gives it back): the caller gives
 * back only what is still there. quiet: no news of an image build to the
 * call (a fork's threads share it). */
struct dm_slot;
int dm_tools_sandbox_make(struct dm_call *call, const struct dm_args_table *t, json_object *args,
                          struct dm_slot **reserved, bool quiet, struct dm_sandbox *ret, const char **ret_what,
                          struct dm_error *err);
/* src/tools/fork.c: sandbox_fork, which makes its forks through create's
 * table (create). */
void dm_tools_fork_register(struct dm_registry *reg, const struct dm_args_table *create);

/* src/tools/snapshot.c, for sandbox_create {snapshot_id}: resolves the
 * call's snapshot_id (the caller's own: another's is unknown) into *ret and
 * sets the call's image and, when it names none, its egress and allow to
 * the snapshot's (a wider egress or an allow entry not in the snapshot's:
 * -EPERM with a sentence). 1 when there is one, 0 when the call names none. */
struct dm_snapshot;
struct dm_sandbox;
int dm_tools_snapshot_resolve(struct dm_call *call, json_object *args, struct dm_snapshot *ret, struct dm_error *err);
/* The snapshot's /workspace into the new sandbox sb; on failure sb is
 * destroyed (nothing left). */
int dm_tools_snapshot_seed(struct dm_call *call, const struct dm_snapshot *snap, const struct dm_sandbox *sb,
                           struct dm_error *err);

/* The one way a failed call becomes a tool result (isError: true, one
 * line, TOOLS.md), by whose the failure is:
 *   DM_TOOLS_ARGS   the arguments: "invalid arguments: <message>"
 *   a tool's name   the work itself: "<tool> failed: <message>"
 *   NULL            a refusal, whose message says what to change: as is */
extern const char dm_tools_args[];
#define DM_TOOLS_ARGS dm_tools_args
/* Where a run's output and progress go (sink.c): a foreground call gets
 * progress notifications ("DOING for N s, B bytes of BYTES_OF") and the
 * run's log notes, a background job the output. The three functions take
 * a struct dm_tools_sink as their userdata. */
struct dm_tools_sink {
        struct dm_call *call; /* foreground, or NULL */
        struct dm_job *job;   /* background, or NULL */
        const char *doing;    /* NULL = "running" */
        const char *bytes_of; /* NULL = "output" */
};
void dm_tools_sink_progress(void *userdata, int64_t elapsed_ms, uint64_t output_bytes);
void dm_tools_sink_message(void *userdata, const char *message);
int dm_tools_sink_output(void *userdata, int stream, const char *data, size_t len);

json_object *dm_tools_error(const char *what, const struct dm_error *err);

/* A command's output as a result string: invalid UTF-8 replaced (U+FFFD). */
json_object *dm_tools_text_field(const char *s, size_t len);
/* The fields sandbox_script and sandbox_exec results share (TOOLS.md). */
json_object *dm_tools_exec_result(int exit_code, const char *out, size_t out_len, bool out_truncated, const char *err,
                                  size_t err_len, bool err_truncated, bool timed_out, int64_t duration_ms);

/* Output files as resources (src/core/resources.h). A result whose run_id names
 * an output directory: claim it for principal (the call's, or the call
 * that started the job), so that principal alone may read its files. */
void dm_tools_claim_outputs(struct dm_context *ctx, const char *principal, json_object *out);
/* dm_tool_result_ok(out), plus a resource_link item per output file of
 * out's run_id (at most DM_RESOURCE_LINKS_MAX, then a note) when the call's
 * principal owns that run. Takes out. */
json_object *dm_tools_result_with_links(struct dm_call *call, json_object *out);
/* Adds one resource_link item for path below the output directory dir to
 * the CallToolResult result, when the call's principal owns dir. */
void dm_tools_link_file(struct dm_call *call, json_object *result, const char *dir, const char *path, int64_t size);

/* The tasks extension over the background jobs (tasks.c): data is the
 * dm_context. sandbox_script, sandbox_agent and sandbox_research support
 * tasks; a call that runs past DEMESNE_TASK_AFTER_MS answers as a task. */
struct dm_mcp_task_ops;
extern const struct dm_mcp_task_ops dm_tools_task_ops;

/* Tells the session that started a background job that it ended: a
 * notifications/message at level notice, logger demesne.jobs, whose data
 * holds job_id, tool, status and exit_code. */
void dm_tools_job_notify_end(struct dm_job *job, struct dm_mcp_server *srv, uint64_t session, enum dm_job_status status,
                             bool has_exit, int exit_code);

/* A tool's work as a background job: returns the structured result, or
 * NULL with *ret_r set (-ECANCELED for a cancel) and err filled. job
 * collects the output tail; cancel fires when the job is cancelled;
 * reserved is the admission reservation its call made (src/core/claim.h,
 * may be NULL), borrowed, for its run's request (dm_run_request.reserved). */
typedef json_object *(*dm_tools_job_work)(struct dm_context *ctx, json_object *args, void *arg, struct dm_job *job,
                                          struct dm_slot *reserved, struct dm_cancel *cancel, int *ret_r,
                                          struct dm_error *err);
/* (The job's result is claimed for the starting call's principal:
 * dm_tools_claim_outputs.) */

/* Starts work on a deep copy of args as a job of the call's session and
 * answers {job_id, status: "running"}. arg goes to work; arg_free (may be
 * NULL) frees it with the job, whether it ran or not, or at once when no
 * job starts. The job's status comes from the
 * result: timed_out → timed_out, exit_code 0 → succeeded, else failed; a
 * NULL result is failed ("<tool> failed: ...") or cancelled. The work
 * starts one container: the call reserves its admission slot ahead
 * (dm_claim_reserve), so that a cap refuses the call, not the job; the job
 * holds it until its work ends. */
json_object *dm_tools_start_background(struct dm_call *call, const char *tool, json_object *args,
                                       dm_tools_job_work work, void *arg, void (*arg_free)(void *arg));

/* Reads what ctx's server permits (egress default, caller egress, allowed
 * roots, images, login files), writes the initialize instructions into reg
 * and registers every family into reg (dm_tools_register_all), whose
 * schemas say it and whose handlers check calls by it. ctx NULL: nothing
 * permitted. The facts are reg's alone: another registry of the process,
 * configured from another context, keeps its own. */
void dm_tools_configure(struct dm_context *ctx, struct dm_registry *reg);

/* ---- nested sandboxes (nested.c) ---- */

/* What a call asks for, for the rules of nested sandboxes. */
struct dm_tools_nested_ask {
        bool nested;                  /* nested: true */
        const enum dm_egress *egress; /* the egress it asked for, NULL: none asked (a job tool) */
        bool has_allow;               /* caller allow entries */
        bool has_host_paths;          /* files, directories, or an upload's src */
};
/* 0, or a refusal naming the limit and its variable: depth
 * (DEMESNE_MAX_DEPTH) for nested: true; from inside a nested sandbox, an
 * egress wider than its own, allow entries, host paths. (The caps on live
 * children and trees are the core's claim's: src/core/claim.h.) */
int dm_tools_nested_check(struct dm_call *call, const struct dm_tools_nested_ask *ask, struct dm_error *err);
/* The host's MCP session that made the top of a nested caller's tree (the
 * one to ask on its behalf, src/tools/request.c); 0 for a host caller, a
 * tree made by a background job or an agent, or one reopened after a
 * restart. */
uint64_t dm_tools_nested_host_session(struct dm_call *call);
/* The egress a call gets when it names none: dm_egress_default, or less
 * from inside a nested sandbox whose own is less. */
const char *dm_tools_nested_egress_default(struct dm_call *call);
/* Makes a token (token: 64 hex digits and a NUL) and appends
 * DEMESNE_MCP_URL (the remote listener's for a backend without a network
 * namespace here) and DEMESNE_MCP_TOKEN to the malloc'd env array. */
int dm_tools_nested_env(struct dm_context *ctx, char token[65], char ***env);
/* The address a nested sandbox of ctx's backend must reach besides its
 * egress: the remote listener's for a remote backend, else NULL. */
const char *dm_tools_nested_reach(struct dm_context *ctx);
/* The remote listener as an agent run on ctx's backend needs it
 * (src/core/agent.h): false, *ret untouched, when the backend's sandboxes
 * have a network namespace here or there is no DEMESNE_REMOTE_LISTEN. */
struct dm_agent_remote;
bool dm_tools_nested_agent_remote(struct dm_context *ctx, struct dm_agent_remote *ret);
/* Serves the endpoint of sandbox sb (running), behind token, for the
 * principal "<the call's principal>/<sb's id>"; egress is sb's own. */
int dm_tools_nested_open(struct dm_call *call, const struct dm_sandbox *sb, const char *token, enum dm_egress egress,
                         struct dm_error *err);
/* A run with an endpoint (sandbox_script with nested: true, an agent
 * run): give dm_tools_nested_run_started as the run's on_started hook with
 * this as its userdata; it makes the token, opens the endpoint once the
 * container runs and before the command, and gives the command
 * DEMESNE_MCP_URL and DEMESNE_MCP_TOKEN. After the run,
 * dm_tools_nested_run_end ends what the run's calls made and forgets the
 * token. */
struct dm_tools_nested_run {
        struct dm_context *ctx;
        const char *maker;     /* the calling principal */
        enum dm_egress egress; /* the run's own */
        uint64_t session;      /* the calling MCP session, 0: none (a background job) */
        char token[65];
        char run_id[64]; /* set by the hook: what to end after the run */
};
int dm_tools_nested_run_started(void *userdata, const char *run_id, int pid, char ***ret_env, struct dm_error *err);
void dm_tools_nested_run_end(struct dm_tools_nested_run *n);
/* Whether a call may have an endpoint at all: the engine gives the
 * sandbox's network namespace on this host, and one more level stays
 * within DEMESNE_MAX_DEPTH (what a default of nested: true needs). */
bool dm_tools_nested_possible(struct dm_call *call);
/* A nested sandbox was destroyed or a nested run ended: its subtree is
 * closed to new containers (src/core/cascade.h), its endpoint stops, what
 * runs in its subtree (jobs, runs and creates in flight) is cancelled and
 * waited for, and its sandboxes are destroyed. Nothing for an id without an
 * endpoint. */
void dm_tools_nested_end(struct dm_context *ctx, const char *id);

/* ---- open previews (expose.c) ---- */

struct dm_previews;
/* The table of this server's previews, made and freed by the tools server
 * (freeing closes every preview: no listener, thread or fd is left). */
struct dm_previews *dm_tools_previews_new(void);
void dm_tools_previews_free(struct dm_previews *v);
/* Sandbox id has ended: its previews close (ctx->after_sandbox_destroy). */
void dm_tools_previews_end(struct dm_context *ctx, const char *id);
/* The open previews of the sandboxes principal covers, as sandbox_list
 * shows them: [{sandbox_id, port, url}], the URL without a code. */
json_object *dm_tools_previews_list(struct dm_context *ctx, const char *principal);
/* The endpoints' table, serving srv, with ctx's hooks set up
 * (dm_tools_server_open), and the remote listener when
 * DEMESNE_REMOTE_LISTEN asks for one (a bad address, a missing
 * certificate: the error). _free stops every endpoint and the listener and
 * unsets the hooks (before the MCP server is freed). */
int dm_tools_nested_new(struct dm_context *ctx, struct dm_mcp_server *srv, struct dm_nested **ret,
                        struct dm_error *err);
void dm_tools_nested_free(struct dm_context *ctx, struct dm_nested *n);

/* ---- the host tool proxy (hostmcp.c) ---- */

/* Reads the file DEMESNE_HOST_MCP names (nothing when unset): a malformed
 * one is an error naming the file and what is wrong (-EINVAL), for serve
 * to stop on. Then starts or reaches each server and registers, visible to
 * nested callers only, its tools that are on the file's list and annotated
 * readOnlyHint, as host__<server>__<tool>; a server that fails is logged
 * and offers nothing. After dm_tools_configure (tools/list order). */
/* *ret is the proxy, NULL when the variable is unset. */
int dm_tools_hostmcp_open(struct dm_context *ctx, struct dm_registry *reg, struct dm_hostmcp **ret,
                          struct dm_error *err);
/* Ends the servers' sessions (stdio children stopped and reaped, HTTP
 * sessions deleted), after the MCP server is freed and before
 * dm_registry_free (the registry's copies point at them). NULL: nothing. */
void dm_tools_hostmcp_close(struct dm_hostmcp *h);
/* doctor: a line per host server with the tools it offers, or why none;
 * counts the servers that failed in *problems. */
void dm_tools_hostmcp_report(const struct dm_context *ctx, const struct dm_hostmcp *h, int *problems);

/* All families, in the order tools/list shows them. */
static inline void dm_tools_register_all(struct dm_registry *reg, const struct dm_args_facts *f)
{
        dm_tools_script_register(reg, f);
        dm_tools_sandbox_register(reg, f);
        dm_tools_snapshot_register(reg);
        dm_tools_expose_register(reg);
        dm_tools_agent_register(reg, f);
        dm_tools_jobs_register(reg);
        dm_tools_report_register(reg);
}

#endif
