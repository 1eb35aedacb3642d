/* SPDX-License-Identifier: MIT */
#ifndef DM_RUNNER_H
#define DM_RUNNER_H

/* Runs one command in a fresh, hardened container and removes it: the core
 * of sandbox_script and of `demesne run`. Output streams to stdout.log and
 * stderr.log in the run's host output directory and to capped head+tail
 * copies for the result. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "netpolicy/link.h"
#include "netpolicy/policy.h"
#include "src/core/context.h"
#include "src/core/inputs.h"
#include "src/basic/cancel.h"

struct dm_budget_hold;

struct dm_run_request {
        const char *image;        /* caller's name, e.g. "python" */
        const char *command;      /* run with bash -c; or: */
        const char *const *argv;  /* run as is when command is NULL */
        const char *const *files; /* resolved host files -> /in/<basename> */
        const char *const *dirs;  /* resolved host directories -> /in/<basename> */
        /* Resolved paths outside DEMESNE_ALLOWED_PATHS the person allowed
         * for this call alone (dm_inputs_add); NULL: none. */
        const char *const *granted;
        const char *const *env; /* "K=V" */
        int64_t timeout_s;
        const struct dm_policy *policy; /* egress; NULL = none */
        struct dm_cancel *cancel;       /* may be NULL */
        /* A background job's admission reservation (dm_claim_reserve,
         * src/core/claim.h), borrowed, or NULL: the run's claim then takes
         * a slot of its own for principal, released on every path out.
         * Either way the container's removal holds a reference until it
         * is gone, and a cascade over principal's tree fires cancel. */
        struct dm_slot *reserved;

        /* Optional: every chunk of output as it arrives (the CLI prints it). */
        int (*on_output)(void *userdata, int stream, const char *data, size_t len);
        /* Optional: called about once a second while the command runs. */
        void (*on_progress)(void *userdata, int64_t elapsed_ms, uint64_t output_bytes);
        /* Optional: a line of news before the command starts (an image
         * being built on first use). */
        void (*on_message)(void *userdata, const char *message);
        void *userdata;

        /* Agent runs. kind labels the container (default "script").
         * mounts are extra bind mounts. vendor_port makes the sandbox's
         * network even for the policy none, with TCP to that port on the
         * host-side address let through; once it exists, on_network is
         * called with the addresses (before the command starts) to start
         * what listens there, and may return environment entries
         * ("K=V", malloc'd, NULL-terminated; freed by the runner) that the
         * command gets on top of the egress proxy's. Needs the shim. */
        const char *kind;
        const struct dm_mount *mounts;
        size_t n_mounts;
        uint16_t vendor_port;
        int (*on_network)(void *userdata, const struct dm_netlink *net, const char *output_dir, char ***ret_env,
                          struct dm_error *err);
        void *network_userdata; /* on_network's */
        /* Optional: a limit outside the runner (the vendor proxy's spending
         * cap) fires it to end the command; dm_run then fails with
         * -ECONNABORTED "stopped by a limit" and the caller says which. */
        struct dm_cancel *limit;

        /* For the run ledger (src/core/ledger.h): who asked (an MCP
         * principal; NULL: "local"), the background job that runs it, the
         * run whose sandbox asked for it. All may be NULL. */
        const char *principal;
        const char *job_id;
        const char *parent_run_id;
        const char *ledger_kind; /* the ledger's kind when not kind ("research") */
        /* The caller writes to the output directory after dm_run (an
         * agent's transcript, usage.json): when dm_run answers 0 or
         * -ECANCELED, it copies a nested principal's run into the parent's
         * output itself (dm_children_collect); otherwise dm_run does. */
        bool collect_later;

        /* An agent run's share of its tree's spend (DEMESNE_TREE_MAX_USD):
         * non-NULL asks the claim to reserve it after the slot
         * (src/core/claim.h), and *spend is the hold (NULL at the top level
         * without spend_root, or without the cap) for the hooks (on_network reads its amount)
         * from the claim until the release, which gives it back after
         * before_release and sets *spend to NULL again. */
        struct dm_budget_hold **spend;
        double spend_usd; /* > 0: the run's own cap, reserved whole (dm_claim_request's) */
        bool spend_root;  /* the run has a nested endpoint (dm_claim_request's) */
        /* Optional: called once the command has ended and the ledger has
         * the run's end, before the spend goes back: the caller's last
         * figures (an agent's usage) go to the ledger here. */
        void (*before_release)(void *userdata);
        void *release_userdata;

        /* Optional, with demesne-shim only: called once the container runs
         * and its network is in place, before the command starts, with the
         * run's id and the host pid of its PID 1 (for its namespaces); may
         * return environment entries for the command as on_network does.
         * A failure ends the run with that error. */
        int (*on_started)(void *userdata, const char *run_id, int pid, char ***ret_env, struct dm_error *err);
        void *started_userdata;
        /* On a backend without a network namespace here (OpenSandbox),
         * on_started is called with pid 0 before the command's exec, and
         * the container's egress lets it reach this address besides (the
         * remote listener, src/mcp/http-front.h); such a run takes no warm
         * container (whose policy was sent without it). NULL: none. */
        const char *reach;
};

struct dm_run_result {
        char *run_id;     /* owned */
        char *output_dir; /* owned */
        int exit_code;    /* 128+N when killed by signal N */
        bool timed_out;
        bool cancelled;
        int64_t duration_ms;
        char *stdout_text; /* owned, may hold NUL bytes */
        size_t stdout_len;
        bool stdout_truncated;
        char *stderr_text;
        size_t stderr_len;
        bool stderr_truncated;
        uint64_t stdout_bytes; /* whole stream size */
        uint64_t stderr_bytes;
};

/* Claims (admission first: src/core/claim.h, then a warm container or the
 * one launch sequence), runs and releases: validates inputs, makes the
 * output directory, creates, runs and removes the container. 0 when the
 * command ran (whatever its exit code, timeout included); -ECANCELED when
 * cancelled (result still filled); -EDQUOT when the disk cap stopped it
 * (src/core/limits.h; the output directory stays); an admission refusal
 * (dm_claim_refused) before anything is made; else an error. */
int dm_run(struct dm_context *ctx, const struct dm_run_request *req, struct dm_run_result *ret, struct dm_error *err);
void dm_run_result_release(struct dm_run_result *res);

#endif
