/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/jobs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "src/basic/log.h"
#include "src/basic/principal.h"
#include "src/basic/timeutil.h"

#define WAIT_SLICE_MS 200

struct dm_job {
        struct dm_jobs *jobs;
        char id[32];
        char tool[32];
        char parent[32];              /* "" for a top-level job */
        char owner[DM_PRINCIPAL_MAX]; /* who started it (an MCP principal); "" for nobody in particular */
        enum dm_job_status status;
        int64_t t0, t_end;  /* monotonic ms */
        json_object *final; /* the result with job_id and status; NULL while running */
        char error[1024];
        struct dm_cancel cancel;
        char tail[DM_JOB_TAIL];
        size_t tail_len;
        uint64_t output_bytes;
        bool thread_done; /* the thread no longer touches this job */

        dm_job_fn fn;
        dm_job_done_fn done;
        void *userdata;
        void (*free_userdata)(void *);
        struct dm_job *next;
};

struct dm_jobs {
        pthread_mutex_t lock;
        pthread_cond_t changed; /* a job ended or a thread finished; CLOCK_MONOTONIC */
        struct dm_job *head;
        size_t n;
        int threads; /* job threads still running */
        bool shutting_down;
};

const char *dm_job_status_name(enum dm_job_status s)
{
        switch (s) {
        case DM_JOB_RUNNING: return "running";
        case DM_JOB_SUCCEEDED: return "succeeded";
        case DM_JOB_FAILED: return "failed";
        case DM_JOB_CANCELLED: return "cancelled";
        default: return "timed_out";
        }
}

struct dm_jobs *dm_jobs_new(void)
{
        struct dm_jobs *jobs = calloc(1, sizeof(*jobs));
        pthread_condattr_t attr;

        if (!jobs)
                return NULL;
        pthread_mutex_init(&jobs->lock, NULL);
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&jobs->changed, &attr);
        pthread_condattr_destroy(&attr);
        return jobs;
}

static void job_free(struct dm_job *job)
{
        json_object_put(job->final);
        dm_cancel_release(&job->cancel);
        free(job);
}

/* Drops finished jobs older than DM_JOB_KEEP_MS, and the oldest finished
 * ones while the registry is full. Called with the lock held. */
static void purge_locked(struct dm_jobs *jobs, bool make_room)
{
        int64_t now = dm_now_ms();

        for (struct dm_job **pp = &jobs->head; *pp;) {
                struct dm_job *j = *pp;
                if (j->thread_done && now - j->t_end > DM_JOB_KEEP_MS) {
                        *pp = j->next;
                        jobs->n--;
                        job_free(j);
                } else {
                        pp = &j->next;
                }
        }
        while (make_room && jobs->n >= DM_JOB_MAX) {
                struct dm_job **oldest = NULL;
                for (struct dm_job **pp = &jobs->head; *pp; pp = &(*pp)->next)
                        if ((*pp)->thread_done && (!oldest || (*pp)->t_end < (*oldest)->t_end))
                                oldest = pp;
                if (!oldest)
                        break;
                struct dm_job *j = *oldest;
                *oldest = j->next;
                jobs->n--;
                job_free(j);
        }
}

static struct dm_job *find_locked(struct dm_jobs *jobs, const char *id)
{
        for (struct dm_job *j = jobs->head; j; j = j->next)
                if (strcmp(j->id, id) == 0)
                        return j;
        return NULL;
}

static void *job_main(void *arg)
{
        struct dm_job *job = arg;
        struct dm_jobs *jobs = job->jobs;
        enum dm_job_status status = DM_JOB_FAILED;
        char error[1024] = "";
        json_object *result, *final, *v;
        bool has_exit;
        int exit_code = 0;

        result = job->fn(job, job->userdata, &status, error, sizeof(error));
        if (dm_cancel_fired(&job->cancel))
                status = DM_JOB_CANCELLED;
        final = result && json_object_is_type(result, json_type_object) ? result : json_object_new_object();
        if (final != result)
                json_object_put(result);
        json_object_object_add(final, "job_id", json_object_new_string(job->id));
        json_object_object_add(final, "status", json_object_new_string(dm_job_status_name(status)));
        if (!result && !error[0] && status != DM_JOB_CANCELLED)
                snprintf(error, sizeof(error), "the job ended without a result");
        if (error[0])
                json_object_object_add(final, "error", json_object_new_string(error));
        has_exit = json_object_object_get_ex(final, "exit_code", &v);
        if (has_exit)
                exit_code = json_object_get_int(v);

        /* The notification goes out before the result is visible, so a
         * client sees "job ended" no later than sandbox_wait's answer. */
        log_info("job %s (%s) %s", job->id, job->tool, dm_job_status_name(status));
        if (job->done)
                job->done(job, status, has_exit, exit_code, job->userdata);
        if (job->free_userdata)
                job->free_userdata(job->userdata);

        /* From here on, final is shared with readers under the lock. A
         * cancel that did not wait this long left a stand-in result: this
         * one, with what the run printed, replaces it (readers copy under
         * the lock, so the stand-in has no other holder). */
        pthread_mutex_lock(&jobs->lock);
        if (job->status == DM_JOB_RUNNING)
                job->t_end = dm_now_ms();
        job->status = status;
        json_object_put(job->final);
        job->final = final;
        snprintf(job->error, sizeof(job->error), "%s", error);
        job->userdata = NULL;
        job->thread_done = true;
        jobs->threads--;
        pthread_cond_broadcast(&jobs->changed);
        pthread_mutex_unlock(&jobs->lock);
        return NULL;
}

int dm_jobs_start(struct dm_jobs *jobs, const char *tool, const char *parent_id, dm_job_fn fn, dm_job_done_fn done,
                  void *userdata, void (*free_userdata)(void *), char ret_id[32])
{
        return dm_jobs_start_owned(jobs, NULL, tool, parent_id, fn, done, userdata, free_userdata, ret_id);
}

int dm_jobs_start_owned(struct dm_jobs *jobs, const char *owner, const char *tool, const char *parent_id, dm_job_fn fn,
                        dm_job_done_fn done, void *userdata, void (*free_userdata)(void *), char ret_id[32])
{
        struct dm_job *job = calloc(1, sizeof(*job));
        unsigned char rnd[6];
        pthread_attr_t attr;
        pthread_t th;
        int r;

        if (!job)
                return -ENOMEM;
        if (dm_cancel_init(&job->cancel) < 0 || getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
                job_free(job);
                return -EIO;
        }
        job->jobs = jobs;
        snprintf(job->id, sizeof(job->id), "job-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5]);
        snprintf(job->tool, sizeof(job->tool), "%s", tool);
        snprintf(job->parent, sizeof(job->parent), "%s", parent_id ? parent_id : "");
        snprintf(job->owner, sizeof(job->owner), "%s", owner ? owner : "");
        job->status = DM_JOB_RUNNING;
        job->t0 = dm_now_ms();
        job->fn = fn;
        job->done = done;
        job->userdata = userdata;
        job->free_userdata = free_userdata;

        pthread_mutex_lock(&jobs->lock);
        purge_locked(jobs, true);
        if (jobs->shutting_down || jobs->n >= DM_JOB_MAX) {
                r = jobs->shutting_down ? -ESHUTDOWN : -EAGAIN;
                pthread_mutex_unlock(&jobs->lock);
                job_free(job);
                return r;
        }
        job->next = jobs->head;
        jobs->head = job;
        jobs->n++;
        jobs->threads++;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        r = pthread_create(&th, &attr, job_main, job);
        pthread_attr_destroy(&attr);
        if (r != 0) {
                jobs->head = job->next;
                jobs->n--;
                jobs->threads--;
                pthread_mutex_unlock(&jobs->lock);
                job_free(job);
                return -r;
        }
        memcpy(ret_id, job->id, sizeof(job->id));
        pthread_mutex_unlock(&jobs->lock);
        return 0;
}

struct dm_cancel *dm_job_cancel_signal(struct dm_job *job)
{
        return &job->cancel;
}
const char *dm_job_id(const struct dm_job *job)
{
        return job->id;
}
const char *dm_job_owner(const struct dm_job *job)
{
        return job->owner;
}

const char *dm_job_tool(const struct dm_job *job)
{
        return job->tool;
}

void dm_job_add_output(struct dm_job *job, int stream, const char *data, size_t len)
{
        struct dm_jobs *jobs = job->jobs;

        pthread_mutex_lock(&jobs->lock);
        job->output_bytes += len;
        if (stream == 1) {
                if (len >= DM_JOB_TAIL) {
                        memcpy(job->tail, data + len - DM_JOB_TAIL, DM_JOB_TAIL);
                        job->tail_len = DM_JOB_TAIL;
                } else {
                        size_t keep = job->tail_len + len > DM_JOB_TAIL ? DM_JOB_TAIL - len : job->tail_len;
                        memmove(job->tail, job->tail + job->tail_len - keep, keep);
                        memcpy(job->tail + keep, data, len);
                        job->tail_len = keep + len;
                }
        }
        pthread_mutex_unlock(&jobs->lock);
}

static json_object *json_copy(json_object *v)
{
        json_object *copy = NULL;

        return json_object_deep_copy(v, &copy, NULL) == 0 ? copy : NULL;
}

json_object *dm_jobs_status(struct dm_jobs *jobs, const char *id, bool include_tail)
{
        json_object *o = NULL, *v;
        struct dm_job *j;

        pthread_mutex_lock(&jobs->lock);
        purge_locked(jobs, false);
        j = find_locked(jobs, id);
        if (j) {
                int64_t end = j->status == DM_JOB_RUNNING ? dm_now_ms() : j->t_end;

                o = json_object_new_object();
                json_object_object_add(o, "job_id", json_object_new_string(j->id));
                json_object_object_add(o, "tool", json_object_new_string(j->tool));
                json_object_object_add(o, "status", json_object_new_string(dm_job_status_name(j->status)));
                json_object_object_add(o, "elapsed_seconds", json_object_new_double((double)(end - j->t0) / 1000.0));
                json_object_object_add(o, "output_bytes", json_object_new_int64((int64_t)j->output_bytes));
                /* Copies: j->final is shared by every caller, and json-c's
                 * reference counts are not atomic. */
                if (j->final && json_object_object_get_ex(j->final, "exit_code", &v))
                        json_object_object_add(o, "exit_code", json_copy(v));
                /* Agent runs: what the run cost (TOOLS.md). */
                if (j->final && json_object_object_get_ex(j->final, "cost_usd", &v))
                        json_object_object_add(o, "cost_usd", json_copy(v));
                if (j->error[0])
                        json_object_object_add(o, "error", json_object_new_string(j->error));
                if (include_tail) {
                        /* The tail may start inside a UTF-8 sequence; the
                         * caller sanitises before it goes into JSON. */
                        json_object_object_add(o, "stdout_tail", json_object_new_string_len(j->tail, (int)j->tail_len));
                }
        }
        pthread_mutex_unlock(&jobs->lock);
        return o;
}

int dm_jobs_times(struct dm_jobs *jobs, const char *id, int64_t *ret_created_ms, int64_t *ret_updated_ms)
{
        int64_t offset = dm_wall_ms() - dm_now_ms();
        struct dm_job *j;
        int r = -ENOENT;

        pthread_mutex_lock(&jobs->lock);
        j = find_locked(jobs, id);
        if (j) {
                *ret_created_ms = j->t0 + offset;
                *ret_updated_ms = (j->status == DM_JOB_RUNNING ? j->t0 : j->t_end) + offset;
                r = 0;
        }
        pthread_mutex_unlock(&jobs->lock);
        return r;
}

/* Waits on jobs->changed until deadline (monotonic ms), at most one slice,
 * so that the caller looks at its own cancel signal now and then. */
static void wait_changed_locked(struct dm_jobs *jobs, int64_t deadline)
{
        int64_t now = dm_now_ms(), until = deadline;
        struct timespec ts;

        if (now >= deadline)
                return;
        if (until > now + WAIT_SLICE_MS)
                until = now + WAIT_SLICE_MS;
        dm_monotonic_after(until - now, &ts);
        pthread_cond_timedwait(&jobs->changed, &jobs->lock, &ts);
}

json_object *dm_jobs_wait(struct dm_jobs *jobs, const char *id, int64_t timeout_ms, struct dm_cancel *cancel,
                          bool *ret_running)
{
        int64_t deadline = dm_now_ms() + timeout_ms;
        json_object *copy = NULL;
        struct dm_job *j;

        *ret_running = false;
        pthread_mutex_lock(&jobs->lock);
        purge_locked(jobs, false);
        j = find_locked(jobs, id);
        while (j && j->status == DM_JOB_RUNNING && !(cancel && dm_cancel_fired(cancel)) && dm_now_ms() < deadline) {
                wait_changed_locked(jobs, deadline);
                /* The registry may have changed while we slept. */
                j = find_locked(jobs, id);
        }
        if (j && j->status != DM_JOB_RUNNING)
                json_object_deep_copy(j->final, &copy, NULL);
        else if (j)
                *ret_running = true;
        pthread_mutex_unlock(&jobs->lock);
        return copy;
}

/* Calls fn on root and every job below it that still runs. */
static void tree_walk_locked(struct dm_jobs *jobs, struct dm_job *root, int depth,
                             void (*fn)(struct dm_jobs *, struct dm_job *, void *), void *userdata)
{
        if (depth > 64)
                return; /* a cycle cannot happen; a bound costs nothing */
        fn(jobs, root, userdata);
        /* Down through ended jobs too: a child that has ended may have a
         * grandchild still running. */
        for (struct dm_job *j = jobs->head; j; j = j->next)
                if (strcmp(j->parent, root->id) == 0)
                        tree_walk_locked(jobs, j, depth + 1, fn, userdata);
}

static void fire(struct dm_jobs *jobs, struct dm_job *j, void *userdata)
{
        (void)jobs;
        (void)userdata;
        if (j->status == DM_JOB_RUNNING)
                dm_cancel_fire(&j->cancel);
}

static void count_running(struct dm_jobs *jobs, struct dm_job *j, void *userdata)
{
        (void)jobs;
        if (j->status == DM_JOB_RUNNING)
                ++*(int *)userdata;
}

/* A cancelled job whose thread is still winding down: from now on every
 * view says cancelled, with a stand-in result until the thread's own. */
static void mark_cancelled(struct dm_jobs *jobs, struct dm_job *j, void *userdata)
{
        json_object *final;

        (void)userdata;
        if (j->status != DM_JOB_RUNNING)
                return;
        final = json_object_new_object();
        json_object_object_add(final, "job_id", json_object_new_string(j->id));
        json_object_object_add(final, "status", json_object_new_string(dm_job_status_name(DM_JOB_CANCELLED)));
        j->status = DM_JOB_CANCELLED;
        j->t_end = dm_now_ms();
        j->final = final;
        pthread_cond_broadcast(&jobs->changed);
}

int dm_jobs_cancel(struct dm_jobs *jobs, const char *id, int64_t wait_ms, enum dm_job_status *ret_status)
{
        int64_t deadline = dm_now_ms() + wait_ms;
        struct dm_job *j;
        int running = 0;

        pthread_mutex_lock(&jobs->lock);
        j = find_locked(jobs, id);
        if (!j) {
                pthread_mutex_unlock(&jobs->lock);
                return -ENOENT;
        }
        if (j->status == DM_JOB_RUNNING)
                tree_walk_locked(jobs, j, 0, fire, NULL);
        for (;;) {
                running = 0;
                tree_walk_locked(jobs, j, 0, count_running, &running);
                if (!running || dm_now_ms() >= deadline)
                        break;
                wait_changed_locked(jobs, deadline);
                /* Ended jobs are freed only when a caller purges: this one
                 * may have been, by a call made while we slept. */
                j = find_locked(jobs, id);
                if (!j) {
                        pthread_mutex_unlock(&jobs->lock);
                        *ret_status = DM_JOB_CANCELLED;
                        return 0;
                }
        }
        if (running)
                tree_walk_locked(jobs, j, 0, mark_cancelled, NULL);
        *ret_status = j->status;
        pthread_mutex_unlock(&jobs->lock);
        return 0;
}

bool dm_jobs_owned(struct dm_jobs *jobs, const char *id, const char *owner)
{
        struct dm_job *j;
        bool owned;

        pthread_mutex_lock(&jobs->lock);
        j = find_locked(jobs, id);
        owned = j && dm_principal_covers(owner, j->owner);
        pthread_mutex_unlock(&jobs->lock);
        return owned;
}

json_object *dm_jobs_list(struct dm_jobs *jobs, const char *owner)
{
        json_object *a = json_object_new_array();
        int64_t now = dm_now_ms();

        pthread_mutex_lock(&jobs->lock);
        purge_locked(jobs, false);
        for (struct dm_job *j = jobs->head; j; j = j->next) {
                if (owner && !dm_principal_covers(owner, j->owner))
                        continue;
                json_object *o = json_object_new_object();
                int64_t end = j->status == DM_JOB_RUNNING ? now : j->t_end;

                json_object_object_add(o, "job_id", json_object_new_string(j->id));
                json_object_object_add(o, "tool", json_object_new_string(j->tool));
                json_object_object_add(o, "status", json_object_new_string(dm_job_status_name(j->status)));
                json_object_object_add(o, "elapsed_seconds", json_object_new_double((double)(end - j->t0) / 1000.0));
                json_object_array_add(a, o);
        }
        pthread_mutex_unlock(&jobs->lock);
        return a;
}

size_t dm_jobs_running(struct dm_jobs *jobs, const char *owner, bool exact, char (*ids)[32], size_t max)
{
        size_t n = 0;

        if (!owner || !owner[0])
                return 0;
        pthread_mutex_lock(&jobs->lock);
        for (struct dm_job *j = jobs->head; j; j = j->next) {
                if (j->status != DM_JOB_RUNNING ||
                    !(exact ? strcmp(j->owner, owner) == 0 : dm_principal_covers(owner, j->owner)))
                        continue;
                if (n < max)
                        snprintf(ids[n], 32, "%s", j->id);
                n++;
        }
        pthread_mutex_unlock(&jobs->lock);
        return n;
}

void dm_jobs_shutdown(struct dm_jobs *jobs)
{
        pthread_mutex_lock(&jobs->lock);
        jobs->shutting_down = true;
        for (struct dm_job *j = jobs->head; j; j = j->next)
                if (j->status == DM_JOB_RUNNING)
                        dm_cancel_fire(&j->cancel);
        while (jobs->threads > 0)
                pthread_cond_wait(&jobs->changed, &jobs->lock);
        pthread_mutex_unlock(&jobs->lock);
}

void dm_jobs_free(struct dm_jobs *jobs)
{
        if (!jobs)
                return;
        dm_jobs_shutdown(jobs);
        while (jobs->head) {
                struct dm_job *j = jobs->head;
                jobs->head = j->next;
                job_free(j);
        }
        pthread_mutex_destroy(&jobs->lock);
        pthread_cond_destroy(&jobs->changed);
        free(jobs);
}
