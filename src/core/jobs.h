/* SPDX-License-Identifier: MIT */
#ifndef DM_JOBS_H
#define DM_JOBS_H

/* Background jobs: a registry in memory, one thread per running job, a
 * cancel tree (cancelling a job cancels every job it spawned), and the
 * finished ones kept DM_JOB_KEEP_MS, then dropped. Each job's work is a
 * function that returns the tool result a foreground call would have. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#include "src/basic/cancel.h"

#define DM_JOB_KEEP_MS (3600 * 1000)
#define DM_JOB_MAX 1024  /* running + finished; the oldest finished go first */
#define DM_JOB_TAIL 4096 /* bytes of stdout kept for sandbox_status */

enum dm_job_status {
        DM_JOB_RUNNING,
        DM_JOB_SUCCEEDED,
        DM_JOB_FAILED,
        DM_JOB_CANCELLED,
        DM_JOB_TIMED_OUT,
};

struct dm_job;
struct dm_jobs;

/* The work of a job, run on its own thread. It returns what the final
 * result shows (owned by the job afterwards) and sets *ret_status; on a
 * failure of demesne itself it returns NULL and fills error. */
typedef json_object *(*dm_job_fn)(struct dm_job *job, void *userdata, enum dm_job_status *ret_status, char *error,
                                  size_t error_len);
/* Called once when a job ends (from the job's thread), e.g. to notify the
 * client. has_exit tells whether the result carried an exit_code. */
typedef void (*dm_job_done_fn)(struct dm_job *job, enum dm_job_status status, bool has_exit, int exit_code,
                               void *userdata);

struct dm_jobs *dm_jobs_new(void);
/* Cancels every running job and waits for all their threads. */
void dm_jobs_shutdown(struct dm_jobs *jobs);
void dm_jobs_free(struct dm_jobs *jobs);

/* Starts fn on a new thread. parent_id may be NULL. userdata is freed with
 * free_userdata (may be NULL) when the job ends. -EAGAIN when DM_JOB_MAX
 * jobs are running. On success *ret_id (caller's buffer of 32) holds the id. */
int dm_jobs_start(struct dm_jobs *jobs, const char *tool, const char *parent_id, dm_job_fn fn, dm_job_done_fn done,
                  void *userdata, void (*free_userdata)(void *), char ret_id[32]);
/* The same, for owner (an MCP principal; NULL = none): dm_jobs_owned and
 * dm_jobs_list tell its jobs from others'. */
int dm_jobs_start_owned(struct dm_jobs *jobs, const char *owner, const char *tool, const char *parent_id, dm_job_fn fn,
                        dm_job_done_fn done, void *userdata, void (*free_userdata)(void *), char ret_id[32]);
/* Whether the job exists and owner, or a principal below it
 * (dm_principal_covers), started it. */
bool dm_jobs_owned(struct dm_jobs *jobs, const char *id, const char *owner);

/* For the job's own work: its cancel signal, and a place to report output. */
struct dm_cancel *dm_job_cancel_signal(struct dm_job *job);
void dm_job_add_output(struct dm_job *job, int stream, const char *data, size_t len);
const char *dm_job_id(const struct dm_job *job);
const char *dm_job_tool(const struct dm_job *job);
/* Who started it (dm_jobs_start_owned), or "" for nobody in particular. */
const char *dm_job_owner(const struct dm_job *job);

/* A snapshot of a job as sandbox_status shows it: a new object with job_id,
 * tool, status, elapsed_seconds, exit_code (when known), error (when
 * failed), stdout_tail (when asked). NULL when no such job. */
json_object *dm_jobs_status(struct dm_jobs *jobs, const char *id, bool include_tail);

/* When the job started and when its status last changed (its end, or its
 * start while it runs), in wall-clock ms since the epoch: for the tasks
 * extension's createdAt and lastUpdatedAt. -ENOENT when no such job. */
int dm_jobs_times(struct dm_jobs *jobs, const char *id, int64_t *ret_created_ms, int64_t *ret_updated_ms);

/* Waits up to timeout_ms for the job to end. Returns a new reference to its
 * final result (the tool's structured result with job_id and status added),
 * or NULL with *ret_running set when it still runs, or NULL with
 * *ret_running false when there is no such job. cancel (may be NULL) ends
 * the wait early. The result is a deep copy: the caller may change it. */
json_object *dm_jobs_wait(struct dm_jobs *jobs, const char *id, int64_t timeout_ms, struct dm_cancel *cancel,
                          bool *ret_running);

/* Cancels the job and every job below it in the tree, and waits up to
 * wait_ms for their threads to end (command killed, container removed).
 * Whatever still runs then is marked cancelled at once, with a stand-in
 * result that the thread's own replaces when it ends: after the call every
 * view of those jobs (status, wait, list) is terminal. Idempotent: a job
 * that already ended keeps its status. -ENOENT when no such job; else the
 * job's status after the call in *ret_status. */
int dm_jobs_cancel(struct dm_jobs *jobs, const char *id, int64_t wait_ms, enum dm_job_status *ret_status);

/* The running jobs owner started (exact), or that a principal below it
 * started too: at most max ids, returns how many there are. */
size_t dm_jobs_running(struct dm_jobs *jobs, const char *owner, bool exact, char (*ids)[32], size_t max);

/* The jobs of owner (NULL: all), as sandbox_list shows them:
 * [{job_id, tool, status, elapsed_seconds}]. */
json_object *dm_jobs_list(struct dm_jobs *jobs, const char *owner);

const char *dm_job_status_name(enum dm_job_status s);

#endif
