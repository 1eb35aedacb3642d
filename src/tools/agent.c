/* SPDX-License-Identifier: MIT */
/* sandbox_agent and sandbox_research: a prompt handed to Claude Code or
 * Codex in a sandbox (src/core/agent.c), in the foreground or as a job. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/netpolicy.h"
#include "netpolicy/policy.h"
#include "netpolicy/vendor.h"
#include "src/core/claim.h"
#include "src/core/agent.h"
#include "src/core/jobs.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"

#define MAX_INPUTS 64

/* The models each provider's schema lists: the short names and current full
 * ids. Any claude-*, gpt-*, o<digit>* or codex-* id is accepted too. */
static const char *const anthropic_models[] = {
        "sonnet", "opus", "haiku", "claude-sonnet-4-5", "claude-opus-4-5", "claude-haiku-4-5", "claude-opus-4-1", NULL
};
static const char *const openai_models[] = { "gpt-5.5", "gpt-5", "gpt-5-codex", "gpt-5-mini",
                                             "gpt-4.1", "o3",    "o4-mini",     NULL };

#define COMMON_ARGS(prompt_text)                                                                                    \
        { .name = "prompt", .type = DM_ARG_STRING, .required = true, .max = 1 << 20, .description = prompt_text },  \
                { .name = "model",                                                                                  \
                  .type = DM_ARG_STRING,                                                                            \
                  .max = 128,                                                                                       \
                  .description =                                                                                    \
                          "Claude Code: sonnet, opus, haiku or a full claude-* id; Codex: gpt-*, o* or codex-* "    \
                          "ids. Default: the first provider with credentials on the host (Claude Code, then "       \
                          "Codex), with its own default model." },                                                  \
                { .name = "preamble",                                                                               \
                  .type = DM_ARG_STRING,                                                                            \
                  .max = 64 << 10,                                                                                  \
                  .description = "Replaces the opening paragraph of the agent's instructions file." },              \
                { .name = "output_path",                                                                            \
                  .type = DM_ARG_STRING,                                                                            \
                  .max = 1024,                                                                                      \
                  .description =                                                                                    \
                          "Where the agent must write its deliverable, inside /out (e.g. report.md); the result "   \
                          "says whether the file exists (output_exists)." },                                        \
                { .name = "output_format",                                                                          \
                  .type = DM_ARG_STRING,                                                                            \
                  .max = 256,                                                                                       \
                  .description = "The deliverable's format (markdown, json, csv...), told to the agent." },         \
                { .name = "success_criteria",                                                                       \
                  .type = DM_ARG_STRING_ARRAY,                                                                      \
                  .max = 32,                                                                                        \
                  .has_default = true,                                                                              \
                  .description = "What must hold when the agent is done; written into its instructions as the "     \
                                 "definition of done." },                                                           \
                { .name = "max_usd",                                                                                \
                  .type = DM_ARG_NUMBER,                                                                            \
                  .min = 0,                                                                                         \
                  .max = 1000000,                                                                                   \
                  .description = "The run's cap on model spend in USD (default: the server's, "                     \
                                 "DEMESNE_AGENT_MAX_USD). Above the server's, the person at the client is asked "   \
                                 "first (elicitation) and without a yes the call is refused; from inside a nested " \
                                 "sandbox, never more than its tree has left." },                                   \
                { .name = "timeout_seconds",                                                                        \
                  .type = DM_ARG_INT,                                                                               \
                  .min = 1,                                                                                         \
                  .max = 172800,                                                                                    \
                  .has_default = true,                                                                              \
                  .def_int = 3600,                                                                                  \
                  .description = "Stop the agent after this many seconds (timed_out: true)." },                     \
                { .name = "background",                                                                             \
                  .type = DM_ARG_BOOL,                                                                              \
                  .has_default = true,                                                                              \
                  .def_bool = false,                                                                                \
                  .description = "Return {job_id, status: running} at once; follow with sandbox_status, "           \
                                 "sandbox_wait, sandbox_cancel." },                                                 \
        {                                                                                                           \
                .name = "nested", .type = DM_ARG_BOOL, .has_default = true, .def_bool = true,                       \
                .description = "Give the agent demesne's own tools (its CLI is configured for them): it may make "  \
                               "child sandboxes, runs and agents, which it alone sees and which end with it. "      \
                               "Not given: on where this server can (an engine with the sandbox's network on this " \
                               "host, demesne-shim, under DEMESNE_MAX_DEPTH)."                                      \
        }

static const struct dm_arg_spec agent_args[] = {
        COMMON_ARGS("The task for the coding agent (Claude Code or Codex) running inside the sandbox."),
        { .name = "egress",
          .type = DM_ARG_STRING,
          .role = DM_ARG_ROLE_EGRESS,
          .has_default = true,
          .def_str = "none",
          .description = "The sandbox's network besides the model API." },
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
};
static const struct dm_arg_spec research_args[] = {
        COMMON_ARGS("The research question; the agent has open internet access and no host inputs."),
};
#define N_AGENT (sizeof(agent_args) / sizeof(agent_args[0]))
#define N_RESEARCH (sizeof(research_args) / sizeof(research_args[0]))

static const char output_schema[] =
        "{\"type\":\"object\",\"properties\":{"
        "\"exit_code\":{\"type\":\"integer\"},"
        "\"result\":{\"type\":\"string\",\"description\":\"the agent's final answer\"},"
        "\"output_dir\":{\"type\":\"string\",\"description\":\"host directory of /out, with transcript.jsonl and "
        "usage.json\"},"
        "\"run_id\":{\"type\":\"string\"},"
        "\"cost_usd\":{\"type\":\"number\",\"description\":\"indicative, from demesne's price table\"},"
        "\"max_usd\":{\"type\":\"number\",\"description\":\"the run's cap on model spend, 0: none\"},"
        "\"usage\":{\"type\":\"object\",\"properties\":{\"input_tokens\":{\"type\":\"integer\"},"
        "\"output_tokens\":{\"type\":\"integer\"},\"cache_read_tokens\":{\"type\":\"integer\"},"
        "\"cache_write_tokens\":{\"type\":\"integer\"},\"per_model\":{\"type\":\"object\"}}},"
        "\"stderr\":{\"type\":\"string\"},"
        "\"output_exists\":{\"type\":\"boolean\"},"
        "\"timed_out\":{\"type\":\"boolean\"},"
        "\"duration_ms\":{\"type\":\"integer\"},"
        "\"provider\":{\"type\":\"string\"},"
        "\"model\":{\"type\":\"string\"},"
        "\"job_id\":{\"type\":\"string\"},"
        "\"status\":{\"type\":\"string\",\"enum\":[\"running\"]}},"
        "\"anyOf\":[{\"required\":[\"exit_code\",\"result\",\"output_dir\",\"run_id\",\"cost_usd\",\"usage\","
        "\"stderr\"]},{\"required\":[\"job_id\",\"status\"]}]}";

/* An agent's progress counts bytes of its event stream. */
#define AGENT_SINK(c, j)                                                                \
        {                                                                               \
                .call = (c), .job = (j), .doing = "agent running", .bytes_of = "events" \
        }

struct agent_call {
        bool research;
        const struct dm_args_table *t; /* the server's table for the tool */
        json_object *args;
        struct dm_tools_sink sink;      /* the foreground call or the background job */
        const struct dm_policy *policy; /* the call's, parsed once (call_common) */
        struct dm_slot *reserved;       /* a job's admission reservation (src/core/claim.h); NULL: the run's claim */
        char **granted;                 /* host paths the person allowed (dm_tools_call_paths); borrowed in a job */
        bool usd_allowed;               /* max_usd above the server's cap, allowed (dm_tools_call_spend) */
};

static json_object *result_json(const struct dm_agent_result *res)
{
        json_object *o = json_object_new_object();

        json_object_object_add(o, "exit_code", json_object_new_int(res->exit_code));
        json_object_object_add(o, "result", dm_tools_text_field(res->result, strlen(res->result)));
        json_object_object_add(o, "output_dir", json_object_new_string(res->output_dir));
        json_object_object_add(o, "run_id", json_object_new_string(res->run_id));
        json_object_object_add(o, "cost_usd", json_object_new_double(res->cost_usd));
        json_object_object_add(o, "max_usd", json_object_new_double(res->max_usd));
        json_object_object_add(o, "usage", json_object_get(res->usage));
        json_object_object_add(o, "stderr", dm_tools_text_field(res->stderr_text, res->stderr_len));
        json_object_object_add(o, "output_exists", json_object_new_boolean(res->output_exists));
        json_object_object_add(o, "timed_out", json_object_new_boolean(res->timed_out));
        json_object_object_add(o, "duration_ms", json_object_new_int64(res->duration_ms));
        json_object_object_add(o, "provider", json_object_new_string(res->provider));
        json_object_object_add(o, "model", json_object_new_string(res->model));
        return o;
}

/* Runs the (checked) call; NULL with *ret_r (-ECANCELED for a cancel) and
 * err on failure. */
static json_object *run_agent(struct dm_context *ctx, struct agent_call *a, struct dm_cancel *cancel, int *ret_r,
                              struct dm_error *err)
{
        const struct dm_arg_spec *specs = a->t->specs;
        size_t n = a->t->n;
        _cleanup_free_ const char **files = a->research ? calloc(1, sizeof(char *)) : dm_args_strv(a->args, "files");
        _cleanup_free_ const char **dirs =
                a->research ? calloc(1, sizeof(char *)) : dm_args_strv(a->args, "directories");
        _cleanup_free_ const char **criteria = dm_args_strv(a->args, "success_criteria");
        struct dm_agent_result res;
        struct dm_tools_nested_run nested = { .ctx = ctx };
        struct dm_agent_remote remote;
        json_object *out;
        int r;

        if (!files || !dirs || !criteria) {
                *ret_r = dm_error_set(err, -ENOMEM, "out of memory");
                return NULL;
        }
        struct dm_agent_request req = {
                .prompt = dm_args_str(specs, n, a->args, "prompt"),
                .model = dm_args_str(specs, n, a->args, "model"),
                .preamble = dm_args_str(specs, n, a->args, "preamble"),
                .success_criteria = criteria,
                .output_path = dm_args_str(specs, n, a->args, "output_path"),
                .output_format = dm_args_str(specs, n, a->args, "output_format"),
                .files = files,
                .dirs = dirs,
                .granted = (const char *const *)a->granted,
                .policy = a->policy,
                .research = a->research,
                .timeout_s = dm_args_int(specs, n, a->args, "timeout_seconds"),
                .cancel = cancel,
                .reserved = a->reserved,
                .max_usd = dm_args_number(a->args, "max_usd"),
                .max_usd_allowed = a->usd_allowed,
                .on_output = dm_tools_sink_output,
                .on_progress = dm_tools_sink_progress,
                .on_message = dm_tools_sink_message,
                .userdata = &a->sink,
                .principal = a->sink.call ? dm_call_principal(a->sink.call) : dm_job_owner(a->sink.job),
                .job_id = a->sink.job ? dm_job_id(a->sink.job) : NULL,
        };
        if (dm_args_bool(specs, n, a->args, "nested")) {
                nested.maker = req.principal;
                nested.egress = a->policy->mode;
                req.on_started = dm_tools_nested_run_started;
                req.started_userdata = &nested;
                req.nested = true;
        }
        /* OpenSandbox: the vendor proxy behind the remote listener. */
        if (dm_tools_nested_agent_remote(ctx, &remote))
                req.remote = &remote;
        r = dm_agent_run(ctx, &req, &res, err);
        dm_tools_nested_run_end(&nested);
        *ret_r = r;
        if (r < 0)
                return NULL;
        if (res.cancelled) {
                *ret_r = -ECANCELED;
                dm_agent_result_release(&res);
                return NULL;
        }
        out = result_json(&res);
        dm_agent_result_release(&res);
        return out;
}

/* ---- background ------------------------------------------------------------ */

/* arg: the call's table (its registry outlives the jobs) and policy. */
static json_object *agent_work(struct dm_context *ctx, json_object *args, void *arg, struct dm_job *job,
                               struct dm_slot *reserved, struct dm_cancel *cancel, int *ret_r, struct dm_error *err)
{
        const struct dm_tools_run_arg *ra = arg;
        struct agent_call a = {
                .t = ra->t,
                .args = args,
                .sink = AGENT_SINK(NULL, job),
                .policy = ra->policy,
                .reserved = reserved,
                .granted = ra->granted,
                .usd_allowed = ra->usd_allowed,
        };

        return run_agent(ctx, &a, cancel, ret_r, err);
}

static json_object *research_work(struct dm_context *ctx, json_object *args, void *arg, struct dm_job *job,
                                  struct dm_slot *reserved, struct dm_cancel *cancel, int *ret_r, struct dm_error *err)
{
        const struct dm_tools_run_arg *ra = arg;
        struct agent_call a = { .research = true,
                                .t = ra->t,
                                .args = args,
                                .sink = AGENT_SINK(NULL, job),
                                .policy = ra->policy,
                                .reserved = reserved,
                                .usd_allowed = ra->usd_allowed };

        return run_agent(ctx, &a, cancel, ret_r, err);
}

/* ---- the tools ----------------------------------------------------------------- */

static json_object *call_common(struct dm_call *call, json_object *args, bool research)
{
        const char *tool = research ? "sandbox_research" : "sandbox_agent";
        struct dm_error err = { 0 };
        const struct dm_args_table *t = dm_call_tool(call)->data;
        struct agent_call a = { .research = research, .t = t, .args = args, .sink = AGENT_SINK(call, NULL) };
        enum dm_vendor provider;
        struct dm_policy *policy = NULL;
        const char *model;
        size_t n = t->n;
        const struct dm_arg_spec *specs = t->specs;
        json_object *out;
        int r;

        if (dm_args_check(specs, n, args, &err) < 0)
                return dm_tools_error(DM_TOOLS_ARGS, &err);
        /* nested not given: on where it can be. Written into the arguments,
         * so a background job runs with the same. */
        if (!json_object_object_get_ex(args, "nested", NULL))
                json_object_object_add(args, "nested", json_object_new_boolean(dm_tools_nested_possible(call)));
        /* Before any job starts: a bad model or no credentials is the
         * caller's to fix now. */
        model = dm_args_str(specs, n, args, "model");
        if (dm_agent_pick_provider(&dm_call_context(call)->cfg, model, &provider, &err) < 0)
                return dm_tools_error(NULL, &err);
        /* Parsed once, here, for the nested rules, the run and a job.
         * research: always open (the tool's choice, not the caller's), and
         * from inside a nested sandbox only where that sandbox's own is.
         * Otherwise as asked; open only where the server allows caller
         * egress, as for sandbox_script. */
        if (dm_tools_call_policy(call, args, research ? "open" : dm_args_str(specs, n, args, "egress"), research,
                                 &policy, &err) < 0)
                return dm_tools_error(NULL, &err);
        a.policy = policy;
        {
                _cleanup_free_ const char **files = research ? NULL : dm_args_strv(args, "files"),
                                          **dirs = research ? NULL : dm_args_strv(args, "directories");
                struct dm_tools_nested_ask ask = {
                        .nested = dm_args_bool(specs, n, args, "nested"),
                        .egress = &policy->mode,
                        .has_host_paths = (files && files[0]) || (dirs && dirs[0]),
                };

                if (dm_tools_nested_check(call, &ask, &err) < 0 ||
                    (!research && dm_tools_call_paths(call, args, &a.granted, &err) < 0) ||
                    dm_tools_call_spend(call, dm_args_number(args, "max_usd"), ask.nested, &a.usd_allowed, &err) < 0) {
                        dm_args_strv_free(a.granted);
                        dm_policy_free(policy);
                        return dm_tools_error(NULL, &err);
                }
        }
        /* The run's claim takes its slot, then its share of the tree's
         * spend (src/core/claim.h). A background call: a tree that has
         * spent its DEMESNE_TREE_MAX_USD is refused now, not as a job that
         * fails; its slot is reserved when the job is made. */
        if (dm_args_bool(specs, n, args, "background")) {
                struct dm_tools_run_arg *job_arg;

                if (dm_claim_spend_left(dm_call_context(call), dm_call_principal(call), dm_args_number(args, "max_usd"),
                                        &err) < 0) {
                        dm_args_strv_free(a.granted);
                        dm_policy_free(policy);
                        return dm_tools_error(NULL, &err);
                }
                job_arg = dm_tools_run_arg_new(t, policy); /* the policy goes with it */
                if (!job_arg) {
                        dm_args_strv_free(a.granted);
                        dm_error_set(&err, -ENOMEM, "out of memory");
                        return dm_tools_error(NULL, &err);
                }
                job_arg->granted = a.granted;
                job_arg->usd_allowed = a.usd_allowed;
                return dm_tools_start_background(call, tool, args, research ? research_work : agent_work, job_arg,
                                                 dm_tools_run_arg_free);
        }
        out = run_agent(dm_call_context(call), &a, dm_call_cancel(call), &r, &err);
        dm_policy_free(policy);
        dm_args_strv_free(a.granted);
        if (r == -ECANCELED)
                return NULL;
        if (!out)
                return dm_tools_error(dm_claim_refused(r) ? NULL : tool, &err);
        dm_tools_claim_outputs(dm_call_context(call), dm_call_principal(call), out);
        return dm_tools_result_with_links(call, out);
}

static json_object *agent_call(struct dm_call *call, json_object *args)
{
        return call_common(call, args, false);
}

static json_object *research_call(struct dm_call *call, json_object *args)
{
        return call_common(call, args, true);
}

static const struct dm_tool agent_tools[] = {
        {
                .name = "sandbox_agent",
                .title = "Hand a task to a coding agent in a sandbox",
                .output_schema = output_schema,
                .read_only = false,
                .destructive = false,
                .idempotent = false,
                .open_world = true,
                .handler = agent_call,
        },
        {
                .name = "sandbox_research",
                .title = "Hand a research question to an agent with internet access",
                .output_schema = output_schema,
                .read_only = false,
                .destructive = false,
                .idempotent = false,
                .open_world = true,
                .handler = research_call,
        },
};

/* The descriptions and the model enum depend on which credentials the host
 * has, read once when the server starts. */
static char *describe(const struct dm_args_facts *f, const char *what, const char *why_anthropic,
                      const char *why_openai)
{
        struct dm_buf b;

        dm_buf_init(&b, 8192);
        dm_buf_printf(&b,
                      "%s The agent's CLI reaches its model API only through demesne's vendor proxy, which "
                      "holds the host's credential: the key never enters the container. The result has the "
                      "agent's final answer (result), its output directory (transcript.jsonl, usage.json and "
                      "its files) and cost_usd (indicative).",
                      what);
        if (why_anthropic)
                dm_buf_printf(&b, " Claude Code is unavailable: %s.", why_anthropic);
        if (why_openai)
                dm_buf_printf(&b, " Codex is unavailable: %s.", why_openai);
        /* The CLI reaches the vendor proxy over the sandbox's network, or
         * from a remote sandbox through the remote listener. */
        if (f->agents_why)
                dm_buf_printf(&b, " Unavailable on this server: %s.", f->agents_why);
        return b.data;
}

/* The schema lists the models this host can run (models, NULL: any); the
 * table keeps no model enum: any id of an available provider passes the
 * check (call_common). */
static char *schema_listing(const struct dm_args_table *t, const char *const *models)
{
        struct dm_arg_spec specs[N_AGENT > N_RESEARCH ? N_AGENT : N_RESEARCH];

        memcpy(specs, t->specs, t->n * sizeof(specs[0]));
        for (size_t i = 0; i < t->n; i++)
                if (!strcmp(specs[i].name, "model"))
                        specs[i].enum_values = models;
        return dm_args_schema(specs, t->n);
}

void dm_tools_agent_register(struct dm_registry *reg, const struct dm_args_facts *f)
{
        struct dm_tool t[sizeof(agent_tools) / sizeof(agent_tools[0])];
        /* Only while the schemas are built. */
        const char *available_models[16];
        const char *why_a = dm_vendor_unavailable(DM_VENDOR_ANTHROPIC, f->vendor_env, f->login_files[0]),
                   *why_o = dm_vendor_unavailable(DM_VENDOR_OPENAI, f->vendor_env, f->login_files[1]);
        /* research has no server-dependent parameter: its copy is the
         * template's, so that both handlers find their table alike. */
        struct dm_args_table *agent = dm_registry_own(reg, dm_args_tailor(f, agent_args, N_AGENT, false)),
                             *research = dm_registry_own(reg, dm_args_tailor(f, research_args, N_RESEARCH, false));
        size_t k = 0;

        if (!agent || !research) {
                log_error("out of memory: the agent tools left out");
                return;
        }
        if (!why_a)
                for (size_t i = 0; anthropic_models[i]; i++)
                        available_models[k++] = anthropic_models[i];
        if (!why_o)
                for (size_t i = 0; openai_models[i]; i++)
                        available_models[k++] = openai_models[i];
        available_models[k] = NULL;
        memcpy(t, agent_tools, sizeof(t));
        t[0].input_schema = dm_registry_own(reg, schema_listing(agent, k ? available_models : NULL));
        t[0].data = agent;
        t[1].input_schema = dm_registry_own(reg, schema_listing(research, k ? available_models : NULL));
        t[1].data = research;
        t[0].description = dm_registry_own(
                reg,
                describe(f,
                         "Hand a task to a coding agent (Claude Code or Codex) that runs it to completion, with no "
                         "permission prompts, in a disposable container: host files/directories read-only under "
                         "/in, its output in /out, egress none unless asked.",
                         why_a, why_o));
        t[1].description = dm_registry_own(
                reg, describe(f,
                              "Hand a research question to an agent (Claude Code or Codex) in a disposable container "
                              "with open internet access and no host inputs.",
                              why_a, why_o));
        dm_registry_add(reg, t, sizeof(t) / sizeof(t[0]));
}
