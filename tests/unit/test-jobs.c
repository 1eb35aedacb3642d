/* SPDX-License-Identifier: MIT */
/* The job registry on its own: lifecycle, the cancel tree, waits, shutdown. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "src/core/jobs.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"

static atomic_int done_calls;

/* Runs until cancelled, or returns exit code *userdata at once when >= 0. */
static json_object *work(struct dm_job *job, void *userdata, enum dm_job_status *ret_status, char *error, size_t len)
{
        int code = *(int *)userdata;
        json_object *o;

        if (code == -2) {
                snprintf(error, len, "it broke");
                *ret_status = DM_JOB_FAILED;
                return NULL;
        }
        if (code == -3) {
                /* Winds down slowly after a cancel (a slow engine), then
                 * has a result of its own. */
                struct pollfd p = { .fd = dm_job_cancel_signal(job)->fd, .events = POLLIN };
                poll(&p, 1, 30000);
                usleep(800 * 1000);
                *ret_status = DM_JOB_CANCELLED;
                o = json_object_new_object();
                json_object_object_add(o, "exit_code", json_object_new_int(137));
                return o;
        }
        if (code < 0) {
                struct pollfd p = { .fd = dm_job_cancel_signal(job)->fd, .events = POLLIN };
                poll(&p, 1, 30000);
                *ret_status = DM_JOB_CANCELLED;
                return NULL;
        }
        dm_job_add_output(job, 1, "hello\n", 6);
        o = json_object_new_object();
        json_object_object_add(o, "exit_code", json_object_new_int(code));
        *ret_status = code == 0 ? DM_JOB_SUCCEEDED : DM_JOB_FAILED;
        return o;
}

static void done(struct dm_job *job, enum dm_job_status status, bool has_exit, int exit_code, void *userdata)
{
        (void)job, (void)status, (void)has_exit, (void)exit_code, (void)userdata;
        atomic_fetch_add(&done_calls, 1);
}

static const char *status_of(struct dm_jobs *jobs, const char *id)
{
        static char buf[32];
        json_object *st = dm_jobs_status(jobs, id, false), *v;

        snprintf(buf, sizeof(buf), "%s",
                 st && json_object_object_get_ex(st, "status", &v) ? json_object_get_string(v) : "none");
        json_object_put(st);
        return buf;
}

int main(void)
{
        struct dm_jobs *jobs = dm_jobs_new();
        static int zero = 0, three = 3, forever = -1, broken = -2;
        char a[32], b[32], c[32], d[32], e[32];
        enum dm_job_status st;
        json_object *r, *v, *list;
        bool running;

        is_int(dm_jobs_start(jobs, "t", NULL, work, done, &zero, NULL, a), 0, "start a job");
        r = dm_jobs_wait(jobs, a, 5000, NULL, &running);
        ok(r && json_object_object_get_ex(r, "status", &v) && strcmp(json_object_get_string(v), "succeeded") == 0,
           "wait gives the final result with status succeeded");
        ok(r && json_object_object_get_ex(r, "job_id", &v) && strcmp(json_object_get_string(v), a) == 0,
           "and the job id");
        json_object_put(r);
        r = dm_jobs_status(jobs, a, true);
        ok(r && json_object_object_get_ex(r, "stdout_tail", &v) && strcmp(json_object_get_string(v), "hello\n") == 0,
           "status keeps the output tail");
        json_object_put(r);

        dm_jobs_start(jobs, "t", NULL, work, done, &three, NULL, b);
        r = dm_jobs_wait(jobs, b, 5000, NULL, &running);
        is_str(status_of(jobs, b), "failed", "exit 3: failed");
        json_object_put(r);
        dm_jobs_start(jobs, "t", NULL, work, done, &broken, NULL, b);
        r = dm_jobs_wait(jobs, b, 5000, NULL, &running);
        ok(r && json_object_object_get_ex(r, "error", &v) && strcmp(json_object_get_string(v), "it broke") == 0,
           "a failed job keeps its error text");
        json_object_put(r);

        /* The cancel tree: a <- c <- d, and e on its own. */
        dm_jobs_start(jobs, "parent", NULL, work, done, &forever, NULL, c);
        dm_jobs_start(jobs, "child", c, work, done, &forever, NULL, d);
        char g[32];
        dm_jobs_start(jobs, "grandchild", d, work, done, &forever, NULL, g);
        dm_jobs_start(jobs, "other", NULL, work, done, &forever, NULL, e);
        int64_t t0 = dm_now_ms();
        r = dm_jobs_wait(jobs, c, 300, NULL, &running);
        ok(!r && running, "wait on a running job times out with running");
        ok(dm_now_ms() - t0 >= 250, "after the timeout");
        is_int(dm_jobs_cancel(jobs, c, 5000, &st), 0, "cancel the parent");
        is_int(st, DM_JOB_CANCELLED, "cancel answers cancelled");
        const char *tree[] = { c, d, g };
        /* No wait first: the cancel waited for the tree to end. */
        for (int i = 0; i < 3; i++)
                is_str(status_of(jobs, tree[i]), "cancelled", "cancel tree: job %d of 3 cancelled when cancel returns",
                       i + 1);
        for (int i = 0; i < 3; i++) {
                r = dm_jobs_wait(jobs, tree[i], 0, NULL, &running);
                ok(r && !running &&
                           strcmp(json_object_get_string(json_object_object_get(r, "status")), "cancelled") == 0 &&
                           !json_object_object_get_ex(r, "error", NULL),
                   "cancel tree: job %d's final result says cancelled, with no error", i + 1);
                json_object_put(r);
        }
        is_str(status_of(jobs, e), "running", "a job outside the tree keeps running");
        {
                /* The tasks extension's createdAt and lastUpdatedAt: wall clock,
                 * the start while it runs, the end once it ended. */
                int64_t created, updated, wall = dm_wall_ms();
                ok(dm_jobs_times(jobs, e, &created, &updated) == 0 && created == updated && created <= wall &&
                           created > wall - 600000,
                   "times of a running job: its start, in wall-clock ms");
                ok(dm_jobs_times(jobs, a, &created, &updated) == 0 && updated >= created,
                   "times of an ended job: its end, not before its start");
                is_int(dm_jobs_times(jobs, "job-nope", &created, &updated), -ENOENT,
                       "times of an unknown job: -ENOENT");
        }
        is_int(dm_jobs_cancel(jobs, c, 5000, &st), 0, "cancel again: no error");
        is_int(st, DM_JOB_CANCELLED, "and the status stays cancelled");
        is_int(dm_jobs_cancel(jobs, a, 5000, &st), 0, "cancel an ended job: no error");
        is_int(st, DM_JOB_SUCCEEDED, "and its status does not change");
        is_int(dm_jobs_cancel(jobs, "job-nope", 5000, &st), -ENOENT, "cancel an unknown job: -ENOENT");
        ok(dm_jobs_status(jobs, "job-nope", false) == NULL, "status of an unknown job: NULL");
        r = dm_jobs_wait(jobs, "job-nope", 10, NULL, &running);
        ok(!r && !running, "wait on an unknown job: NULL, not running");

        /* A job slower to wind down than the cancel waits: cancelled at
         * once in every view, then its own result replaces the stand-in. */
        static int slow = -3;
        char h[32];
        dm_jobs_start(jobs, "slow", NULL, work, done, &slow, NULL, h);
        is_int(dm_jobs_cancel(jobs, h, 100, &st), 0, "cancel a job that winds down slowly");
        is_int(st, DM_JOB_CANCELLED, "it answers cancelled after the wait given, before the job has ended");
        is_str(status_of(jobs, h), "cancelled", "its status says cancelled at once");
        r = dm_jobs_wait(jobs, h, 0, NULL, &running);
        ok(r && !running && !json_object_object_get_ex(r, "exit_code", NULL),
           "sandbox_wait answers at once with the stand-in result");
        json_object_put(r);
        list = dm_jobs_list(jobs, NULL);
        bool listed_cancelled = false;
        for (size_t i = 0; i < json_object_array_length(list); i++) {
                json_object *o = json_object_array_get_idx(list, i);
                if (strcmp(json_object_get_string(json_object_object_get(o, "job_id")), h) == 0)
                        listed_cancelled =
                                strcmp(json_object_get_string(json_object_object_get(o, "status")), "cancelled") == 0;
        }
        ok(listed_cancelled, "sandbox_list says cancelled too");
        json_object_put(list);
        /* Until its thread ends (0.8 s, longer under valgrind on a busy
         * machine): then its own result replaces the stand-in. */
        t0 = dm_now_ms();
        r = NULL;
        while (dm_now_ms() - t0 < 30000) {
                r = dm_jobs_wait(jobs, h, 0, NULL, &running);
                if (r && json_object_object_get_ex(r, "exit_code", NULL))
                        break;
                json_object_put(r);
                r = NULL;
                usleep(50 * 1000);
        }
        ok(r && json_object_object_get_ex(r, "exit_code", &v) && json_object_get_int(v) == 137 &&
                   strcmp(status_of(jobs, h), "cancelled") == 0,
           "when its thread ends, its own result replaces the stand-in, still cancelled");
        json_object_put(r);

        /* A child that ended on its own, with a grandchild still running:
         * cancelling the parent reaches the grandchild through it. */
        char p1[32], p2[32], p3[32];
        dm_jobs_start(jobs, "parent", NULL, work, done, &forever, NULL, p1);
        dm_jobs_start(jobs, "child", p1, work, done, &zero, NULL, p2);
        dm_jobs_start(jobs, "grandchild", p2, work, done, &forever, NULL, p3);
        r = dm_jobs_wait(jobs, p2, 5000, NULL, &running);
        ok(r && !running, "the child ends on its own");
        json_object_put(r);
        is_int(dm_jobs_cancel(jobs, p1, 5000, &st), 0, "cancel the parent of an ended child");
        is_str(status_of(jobs, p3), "cancelled", "the running grandchild is cancelled when cancel returns");
        is_str(status_of(jobs, p2), "succeeded", "the ended child keeps its status");

        list = dm_jobs_list(jobs, NULL);
        is_int(json_object_array_length(list), 11, "list shows every job (11 started)");
        json_object_put(list);

        /* Owners: a job knows who started it; a list for an owner shows its
         * jobs alone. */
        char own[32];
        is_int(dm_jobs_start_owned(jobs, "alice", "t", NULL, work, done, &zero, NULL, own), 0, "start a job for alice");
        r = dm_jobs_wait(jobs, own, 5000, NULL, &running);
        json_object_put(r);
        ok(dm_jobs_owned(jobs, own, "alice") && !dm_jobs_owned(jobs, own, "bob") && !dm_jobs_owned(jobs, a, "alice"),
           "alice owns her job, bob does not, and alice no job started without an owner");
        ok(!dm_jobs_owned(jobs, "job-nope", "alice"), "an unknown job is nobody's");
        list = dm_jobs_list(jobs, "alice");
        ok(json_object_array_length(list) == 1 &&
                   strcmp(json_object_get_string(json_object_object_get(json_object_array_get_idx(list, 0), "job_id")),
                          own) == 0,
           "alice's list shows her one job");
        json_object_put(list);
        list = dm_jobs_list(jobs, "bob");
        is_int(json_object_array_length(list), 0, "bob's list is empty");
        json_object_put(list);

        /* A waiter's own cancel ends the wait early. */
        struct dm_cancel wc;
        dm_cancel_init(&wc);
        dm_cancel_fire(&wc);
        t0 = dm_now_ms();
        /* Not cancelled, the wait would last its 60 s. */
        r = dm_jobs_wait(jobs, e, 60000, &wc, &running);
        ok(!r && running && dm_now_ms() - t0 < slack_ms(10000), "a cancelled wait returns before its timeout (%lld ms)",
           (long long)(dm_now_ms() - t0));
        dm_cancel_release(&wc);

        /* Shutdown cancels what runs and waits for every thread. */
        dm_jobs_shutdown(jobs);
        is_str(status_of(jobs, e), "cancelled", "shutdown cancels running jobs");
        is_int(dm_jobs_start(jobs, "t", NULL, work, done, &zero, NULL, a), -ESHUTDOWN, "no new jobs after shutdown");
        is_int(atomic_load(&done_calls), 12, "the done callback ran once per job");
        dm_jobs_free(jobs);
        return done_testing();
}
