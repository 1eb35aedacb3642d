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

#include "src/basic/error.h"

#define DM_ACTIVITY_DIR "activity"
#define DM_ACTIVITY_LINE_MAX 16384        /* bytes of one line, the newline included */
#define DM_ACTIVITY_COMMAND_MAX 2048      /* bytes of a command or prompt kept (then "truncated") */
#define DM_ACTIVITY_FILE_MAX (64ll << 20) /* bytes of one journal before the next one begins */
#define DM_ACTIVITY_READ_FILES 1000       /* journals a reader reads, newest first */
#define DM_ACTIVITY_READ_RUNS 100000      /* runs a reader keeps */
#define DM_ACTIVITY_ID_MAX 128            /* an id: [A-Za-z0-9._-], 1..128 */

/* One event of a run, sandbox, job or agent run. Strings are borrowed; NULL
 * leaves the field out. */
struct dm_activity_event {
        const char *event;     /* "start" or "end" (required) */
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
 * journal}. An empty array when there is no journal yet. NULL and err
 * filled on a read error of the directory itself. */
json_object *dm_activity_read(const char *state_dir, struct dm_activity_stats *ret_stats, struct dm_error *err);

/* The same from one buffer (a journal's text), into runs (an object keyed
 * by id); for the reader and the unit tests. */
void dm_activity_parse(const char *text, size_t len, const char *journal, json_object *runs,
                       struct dm_activity_stats *stats);

#endif
