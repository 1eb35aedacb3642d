/* SPDX-License-Identifier: MIT */
#ifndef DM_AGENT_H
#define DM_AGENT_H

/* A coding agent (Claude Code or Codex) run to completion in a sandbox of
 * its provider's image: sandbox_agent and sandbox_research.
 *
 * The agent's CLI talks to the vendor proxy (netpolicy/vendor.c) on the host
 * side of the sandbox's network, with a random per-run token as its key; the
 * proxy holds the host's real credential, which never enters the container.
 * The run's output directory gets transcript.jsonl (the CLI's JSON event
 * stream), usage.json (the proxy's token counts) and whatever the agent
 * writes to /out.
 *
 * On a backend whose sandboxes have no network namespace on this host
 * (OpenSandbox) the proxy listens on this host's loopback instead, and the
 * sandbox reaches it through the remote listener (src/mcp/http-front.h),
 * which routes each connection by the run's token: dm_agent_remote. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "netpolicy/policy.h"
#include "netpolicy/vendor.h"
#include "src/core/context.h"
#include "src/basic/cancel.h"
#include "src/basic/error.h"

/* The provider a model name belongs to: sonnet, opus, haiku and claude-*
 * are Anthropic's (Claude Code); gpt-*, o<digit>* and codex-* are OpenAI's
 * (Codex). -EINVAL with a message otherwise. */
int dm_agent_provider_of(const char *model, enum dm_vendor *ret, struct dm_error *err);

/* The login file the settings name for provider (DEMESNE_CLAUDE_CREDENTIALS,
 * DEMESNE_CODEX_AUTH), NULL for the default; and dm_vendor_unavailable
 * with it. */
const char *dm_agent_login_file(const struct dm_config *cfg, enum dm_vendor provider);
const char *dm_agent_unavailable(const struct dm_config *cfg, enum dm_vendor provider);

/* The provider for a run: model's, which must have a credential; with no
 * model, the first with a credential (Anthropic, then OpenAI). -ENOENT with
 * what is missing for each when none has one. */
int dm_agent_pick_provider(const struct dm_config *cfg, const char *model, enum dm_vendor *ret, struct dm_error *err);

/* The remote listener as an agent run on a remote backend needs it (the
 * tools layer's, src/tools/nested.c): its address, and routes by token to
 * a proxy listening at an address of this host. */
struct dm_agent_remote {
        const char *url;  /* "https://ADDR:PORT" (http:// on loopback without TLS) */
        const char *host; /* ADDR: what the sandbox's egress lets through */
        const char *ca;   /* the CA's PEM text the sandbox verifies it with; NULL: none */
        int (*add)(void *userdata, const char *token, const struct sockaddr_in *to, struct dm_error *err);
        void (*remove)(void *userdata, const char *token);
        void *userdata;
};

struct dm_agent_request {
        const char *prompt;
        const char *model;                   /* NULL: the provider's default */
        const char *preamble;                /* NULL: the built-in one */
        const char *const *success_criteria; /* NULL-terminated; may be NULL */
        const char *output_path;             /* where the agent must write its deliverable, or NULL */
        const char *output_format;           /* e.g. "markdown", "json"; or NULL */
        const char *const *files;            /* host inputs -> /in */
        const char *const *dirs;
        const char *const *granted;     /* as dm_run_request's */
        const struct dm_policy *policy; /* egress of the sandbox; the vendor proxy is always reachable */
        bool research;                  /* sandbox_research: says so in the instructions */
        int64_t timeout_s;
        struct dm_cancel *cancel;
        /* A job's admission reservation, may be NULL (dm_run_request's).
         * The run's share of its tree's DEMESNE_TREE_MAX_USD, when it is
         * made from inside one, is reserved by its claim after the slot
         * (src/core/claim.h); the run's cap is that share (never more
         * than DEMESNE_AGENT_MAX_USD), given back once its usage is in the
         * ledger. */
        struct dm_slot *reserved;
        /* The call's max_usd: > 0, the run's cap on model spend instead of
         * DEMESNE_AGENT_MAX_USD (from inside a tree, reserved whole of the
         * tree's, never more than it has left). Above DEMESNE_AGENT_MAX_USD
         * only when max_usd_allowed (the person at the host's client said
         * so for this call: src/tools/request.c); otherwise refused as
         * dm_agent_cap_check says. */
        double max_usd;
        bool max_usd_allowed;
        int (*on_output)(void *userdata, int stream, const char *data, size_t len);
        void (*on_progress)(void *userdata, int64_t elapsed_ms, uint64_t output_bytes);
        void (*on_message)(void *userdata, const char *message);
        void *userdata;
        /* For the run ledger (src/core/runner.h): may be NULL. */
        const char *principal;
        const char *job_id;
        const char *parent_run_id;
        /* Called once the container runs, before the CLI starts
         * (dm_run_request's on_started): the nested endpoint's hook. */
        int (*on_started)(void *userdata, const char *run_id, int pid, char ***ret_env, struct dm_error *err);
        void *started_userdata;
        /* The run has a nested endpoint (on_started is its hook): a host
         * caller's run is then the top of a tree, and reserves its own
         * share of DEMESNE_TREE_MAX_USD before its children do. */
        bool nested;
        /* Needed on a backend without a network namespace here
         * (OpenSandbox), where the run is refused without it; NULL
         * elsewhere. Borrowed for the run. */
        const struct dm_agent_remote *remote;
};

struct dm_agent_result {
        char *run_id, *output_dir; /* owned */
        int exit_code;
        bool timed_out, cancelled;
        int64_t duration_ms;
        char *result;      /* the agent's final answer (owned; may be "") */
        char *stderr_text; /* owned */
        size_t stderr_len;
        bool stderr_truncated;
        const char *provider; /* "anthropic" / "openai" */
        const char *model;    /* as asked, or the provider's default */
        double cost_usd;
        double max_usd;     /* the run's cap on model spend (0: none) */
        json_object *usage; /* owned: {input_tokens, output_tokens, cache_read_tokens,
                                                 * cache_write_tokens, per_model{}} */
        bool output_exists; /* output_path was given and the file is there */
};

/* Whether a call's max_usd (0: none given) is within this server's cap
 * on one run (DEMESNE_AGENT_MAX_USD; 0 there: no cap): 0, or -EPERM with
 * the refusal, which names the variable. */
int dm_agent_cap_check(const struct dm_config *cfg, double max_usd, struct dm_error *err);

int dm_agent_run(struct dm_context *ctx, const struct dm_agent_request *req, struct dm_agent_result *res,
                 struct dm_error *err);
void dm_agent_result_release(struct dm_agent_result *res);

/* Removes the run files (instructions, launcher) that servers which are
 * gone left under <output root>/.agents; a live server's are left alone. */
void dm_agent_sweep(struct dm_context *ctx);

#endif
