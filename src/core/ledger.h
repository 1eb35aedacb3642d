/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_LEDGER_H
#define DM_CORE_LEDGER_H

/* The run ledger, which sandbox_usage_report sums: one small JSON file per
 * run (a sandbox_script, agent or research run, or a persistent sandbox),
 * <output_root>/.ledger/<run_id>.json. The server writes it when the run
 * begins (status running), when it ends (status, exit code, wall time) and,
 * for agents, once the vendor proxy has stopped (its token counts, the same
 * numbers as the final usage.json). While an agent runs, its vendor proxy
 * rewrites <run_id>.live beside the entry after each response: the live
 * figures, which survive the server's crash and are reported for a run
 * with no final ones. No sandbox mounts the ledger, and nothing under a
 * run's output directory (its /out, usage.json included) is ever read for
 * accounting: what a sandbox writes there changes no report and no cap.
 * Figures read back are checked: a negative, non-finite or absurdly large
 * one (past DM_LEDGER_TOKENS_MAX or DM_LEDGER_USD_MAX) counts as 0.
 *
 * A run's parent_run_id names the run whose sandbox asked for it (nested
 * sandboxes), so a report on a run rolls up its whole tree. Entries survive
 * servers: a report covers every run of this output root that the asking
 * principal started. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/basic/error.h"
#include "src/basic/principal.h"

#define DM_LEDGER_DIR ".ledger"
#define DM_LEDGER_MAX_ENTRIES 100000  /* a report reads at most this many files */
#define DM_LEDGER_LIVE_SUFFIX ".live" /* <run_id>.live: a running agent's usage */
#define DM_LEDGER_TOKENS_MAX 1e12     /* tokens of one kind in one run's figures */
#define DM_LEDGER_USD_MAX 1e6         /* dollars in one run's figures (the caps' own maximum) */

struct dm_ledger_run {
        const char *run_id; /* required */
        const char *kind;   /* "script", "agent", "research", "sandbox" */
        const char *image;
        const char *principal;     /* the MCP principal that asked; NULL: "local" */
        const char *job_id;        /* the background job that made it, or NULL */
        const char *parent_run_id; /* the run whose sandbox asked for it, or NULL */
        const char *output_dir;
};

/* Writes the entry of a run that begins now, made by the server owner
 * (ctx->owner: a run left "running" by a dead server is reported
 * "interrupted"). Errors are returned, not logged: the caller logs and
 * goes on (accounting never fails a run). */
int dm_ledger_begin(const char *output_root, const char *owner, const struct dm_ledger_run *run, struct dm_error *err);
/* The run ended: status (succeeded, failed, cancelled, timed_out),
 * exit_code when has_exit, wall time, the error's sentence or NULL. */
int dm_ledger_end(const char *output_root, const char *run_id, const char *status, bool has_exit, int exit_code,
                  int64_t duration_ms, const char *error, struct dm_error *err);
/* The run's final token counts (borrowed; the shape of usage.json); its
 * live figures are removed once these are written. */
int dm_ledger_set_usage(const char *output_root, const char *run_id, json_object *usage, struct dm_error *err);
/* Where the vendor proxy of run_id writes its live figures (the shape of
 * usage.json), in ret (len bytes): <output_root>/.ledger/<run_id>.live.
 * Makes the ledger directory. -EINVAL for a bad run id, -ENAMETOOLONG. */
int dm_ledger_live_path(const char *output_root, const char *run_id, char *ret, size_t len, struct dm_error *err);

/* What the ledger says of one run or sandbox. */
struct dm_ledger_entry {
        char kind[16];   /* "script", "agent", "research", "sandbox" */
        char status[16]; /* "running" until it ends */
        char principal[DM_PRINCIPAL_MAX];
        char output_dir[4096];
        int64_t started_ms;
};
/* The entry of run_id: -ENOENT when it has none (err says so), or another
 * error. */
int dm_ledger_lookup(const char *output_root, const char *run_id, struct dm_ledger_entry *ret, struct dm_error *err);
/* Calls fn for each entry still "running" whose server is gone (not
 * my_owner, not alive: killed or crashed before the run ended), at most
 * DM_LEDGER_MAX_ENTRIES read. Returns how many fn was called for. */
size_t dm_ledger_interrupted(const char *output_root, const char *my_owner,
                             void (*fn)(void *userdata, const char *run_id, const struct dm_ledger_entry *e),
                             void *userdata);

/* What a report covers: exactly one of job_id, run_id, output_dir, or
 * has_since (every run that began at or after since, seconds since the
 * epoch). A job, run or directory brings its whole tree. */
struct dm_ledger_scope {
        const char *job_id;
        const char *run_id;
        const char *output_dir;
        bool has_since;
        int64_t since;
};

/* The report for principal (NULL: "local"): {scope, cost_usd, usage
 * {input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
 * per_model}, wall_seconds (first start to last end), sandbox_seconds (the
 * runs' wall times summed), sandbox_count, by_kind, runs[] (one row per run,
 * parents before children)}. -ENOENT (err says what) when the scope names
 * no run of principal's; NULL on other errors too. */
json_object *dm_ledger_report(const char *output_root, const char *my_owner, const char *principal,
                              const struct dm_ledger_scope *scope, struct dm_error *err);
/* The report's rows and totals as a fixed-width table, malloc'd. */
char *dm_ledger_table(json_object *report);

#endif
