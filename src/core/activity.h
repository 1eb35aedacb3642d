/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_ACTIVITY_H
#define DM_CORE_ACTIVITY_H

/* The run journal, which `demesne ui` reads (docs/reference/activity-api.md):
 * every claim and every release of the one lifecycle (src/core/claim.h) is
 * one JSON line appended to this server's own journal,
 * <state dir>/activity/<pid>-<start ms>.jsonl (0600, in a 0700 directory no
 * sandbox mounts). Each line is one write() on an O_APPEND fd: lines never
 * interleave, and a crash leaves at most one cut last line, which readers
 * skip. A journal past DM_ACTIVITY_FILE_MAX is closed and a new one begun;
 * journals not written for DEMESNE_ACTIVITY_DAYS days are removed when a
 * server opens its own.
 *
 * The journal is a record for the person, never an input of accounting or
 * of a cap (the ledger is, src/core/ledger.h): a reader checks every line
 * and skips what it cannot trust (counted, never a crash). */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netpolicy/egress-tally.h"
#include "src/basic/error.h"

#define DM_ACTIVITY_DIR "activity"
#define DM_ACTIVITY_LINE_MAX 16384        /* bytes of one line, the newline included */
#define DM_ACTIVITY_COMMAND_MAX 2048      /* bytes of a command or prompt kept (then "truncated") */
#define DM_ACTIVITY_FILE_MAX (64ll << 20) /* bytes of one journal before the next one begins */
#define DM_ACTIVITY_READ_FILES 1000       /* journals a reader reads, newest first */
#define DM_ACTIVITY_READ_RUNS 100000      /* runs a reader keeps */
#define DM_ACTIVITY_ID_MAX 128            /* an id: [A-Za-z0-9._-], 1..128 */

#define DM_ACTIVITY_EGRESS_MAX 256  /* egress entries a reader keeps per run (then one "*" per decision) */
#define DM_ACTIVITY_PREVIEWS_MAX 16 /* open previews a reader keeps per sandbox */

/* One event of a run, sandbox, job or agent run. Strings are borrowed; NULL
 * leaves the field out. */
struct dm_activity_event {
        /* required: "start", "end", "egress" (entries: what the host's
         * proxies decided for the run since its last egress line), "usage"
         * (the run's tokens and cost, from the ledger's figures) or
         * "preview" (a sandbox's preview opened or closed) */
        const char *event;
        const char *id;        /* required: the run's or sandbox's id */
        const char *kind;      /* "run", "sandbox", "job", "agent" */
        const char *parent_id; /* the run whose sandbox asked for it (the nested tree) */
        const char *job_id;    /* the background job it belongs to */
        const char *principal; /* who asked; NULL: "local" */
        const char *image;
        const char *egress;  /* the egress mode: none, package, allow, open, vendor */
        const char *command; /* the command or prompt; cut at DM_ACTIVITY_COMMAND_MAX */
        const char *status;  /* running, succeeded, failed, cancelled, timed_out, destroyed */
        const char *output_dir;
        int64_t time_ms; /* wall clock (ms since the epoch); 0: now */
        bool has_exit;
        int exit_code;
        json_object *entries; /* "egress": netpolicy/egress-tally.h's array (borrowed) */
        /* "usage": the vendor proxy's counts (never a file a sandbox wrote) */
        int64_t input_tokens, output_tokens;
        double cost_usd;
        /* "preview": a sandbox_expose preview of port opened (url, without
         * its code) or closed (url NULL) */
        int port;
        const char *url;
};

/* Whether id may name a run in the journal and the API: [A-Za-z0-9._-],
 * 1..DM_ACTIVITY_ID_MAX, not "." or "..". */
bool dm_activity_id_valid(const char *id);

/* The event as one line (JSON, '\n'-terminated), malloc'd in *ret; the
 * command is cut at a UTF-8 boundary and marked "command_truncated".
 * -EINVAL for a missing or bad id or event, -ENOMEM. */
int dm_activity_format(const struct dm_activity_event *ev, char **ret, size_t *ret_len);

/* Appends ev to fd in one write() (fd opened O_APPEND). 0 or -errno. */
int dm_activity_append(int fd, const struct dm_activity_event *ev);

/* This process's journal under state_dir (made on first use, then kept
 * open until exit; keep_days 0: nothing is removed): ev appended. Never
 * fails a run: an error is logged once per cause and the event dropped. */
void dm_activity_record(const char *state_dir, int64_t keep_days, const struct dm_activity_event *ev);

/* Removes journals under dir (an activity directory's fd) last written
 * more than keep_days ago, except skip (a name, may be NULL). How many
 * went. */
size_t dm_activity_prune(int dirfd, int64_t keep_days, const char *skip);

/* The egress record of one run (id) for this process's journal: the
 * tally the run's proxies count into, whose flushes (every
 * DM_EGRESS_TALLY_INTERVAL_MS while decisions come, and at free) are
 * "egress" lines. NULL on ENOMEM or a bad id (nothing is recorded). */
struct dm_activity_egress;
struct dm_activity_egress *dm_activity_egress_new(const char *state_dir, int64_t keep_days, const char *id);
/* Its tally, for netpolicy's proxies' confs; NULL for a NULL a. */
struct dm_egress_tally *dm_activity_egress_tally(struct dm_activity_egress *a);
/* The last flush, then frees; call once no proxy counts into it. NULL is
 * fine. */
void dm_activity_egress_free(struct dm_activity_egress *a);

/* activity-egress.c's part of the journal's lines: whether event is one
 * of the five; the "egress", "usage" and "preview" fields of ev into o; such
 * a line o (checked, false: skipped) merged into run. */
bool dm_activity_event_known(const char *event);
void dm_activity_format_extra(const struct dm_activity_event *ev, json_object *o);
bool dm_activity_take_extra(const char *event, json_object *o, json_object *run);

/* What a reader skipped. */
struct dm_activity_stats {
        size_t files;     /* journals read */
        size_t lines;     /* lines taken */
        size_t skipped;   /* lines skipped: not JSON, not an object, bad id or event, too long */
        size_t truncated; /* journals whose last line lacked its newline (a write cut short) */
};

/* The runs of every journal under state_dir/activity, merged by id (an
 * "end" line completes its "start"), as a JSON array, newest start first:
 * {id, kind, parent_id, job_id, principal, image, egress, command,
 * command_truncated, status, start_ms, end_ms, exit_code, output_dir,
 * journal, egress_decisions (the "egress" lines' entries summed per host,
 * port, decision and rule; at most DM_ACTIVITY_EGRESS_MAX), usage
 * {own {input_tokens, output_tokens, cost_usd}} (the last "usage" line),
 * previews [{port, url}] (those opened and not closed; none after "end")}. An empty array when there is no journal yet. NULL and err
 * filled on a read error of the directory itself. */
json_object *dm_activity_read(const char *state_dir, struct dm_activity_stats *ret_stats, struct dm_error *err);

/* The same from one buffer (a journal's text), into runs (an object keyed
 * by id); for the reader and the unit tests. */
void dm_activity_parse(const char *text, size_t len, const char *journal, json_object *runs,
                       struct dm_activity_stats *stats);

#endif
