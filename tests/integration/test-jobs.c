/* SPDX-License-Identifier: MIT */
/* Background jobs, concurrency and the server's lifecycle around them,
 * through `demesne serve` over stdio against the real engine. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/stdio-client.h"
#include "tests/integration/engine-env.h"

static struct child *c;

static json_object *call(int id, const char *tool, const char *args, int timeout_ms, json_object *notes)
{
        send_call(c, id, tool, args);
        return recv_response(c, id, timeout_ms, notes);
}

static bool is_error(json_object *m)
{
        return m && json_object_get_boolean(path(m, "result", "isError", NULL));
}

static char *job_of(json_object *m)
{
        return strdup(str_at(structured(m), "job_id"));
}

int main(void)
{
        struct dm_backend *b;
        struct dm_error err = { 0 };
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        json_object *m, *notes;
        char args[512], *job;
        int64_t t0;

        test_env_setup("jobs");
        c = calloc(1, sizeof(*c));
        if (dm_backend_open(&ec, &b, &err) < 0 || spawn(c, NULL) < 0) {
                printf("Bail out! %s\n", err.msg[0] ? err.msg : "cannot start $DEMESNE serve");
                return 1;
        }

        /* A job that prints, waits and fails. That the call answers before
         * the job ends is its status, running; how fast is bench/'s. */
        t0 = dm_now_ms();
        m = call(1, "sandbox_script",
                 "{\"command\":\"echo start; " TEST_HOLD(150) "; echo end; exit 4\",\"background\":true}", 10000, NULL);
        is_str(str_at(structured(m), "status"), "running", "status running");
        job = job_of(m);
        ok(strncmp(job, "job-", 4) == 0, "job id: %s", job);
        json_object_put(m);

        /* Until the container has started and printed (slow on a loaded
         * machine; the bound is only against a hang); the command then
         * waits to be released (or 15 s), so it still runs. */
        usleep(1000 * 1000);
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\",\"include_stdout_tail\":true}", job);
        for (int id = 100;; id++) {
                m = call(id, "sandbox_status", args, 5000, NULL);
                if (strcmp(str_at(structured(m), "stdout_tail"), "start\n") == 0 ||
                    strcmp(str_at(structured(m), "status"), "running") != 0 || dm_now_ms() - t0 > slack_ms(60000))
                        break;
                json_object_put(m);
                usleep(200 * 1000);
        }
        is_str(str_at(structured(m), "status"), "running", "sandbox_status: running");
        is_str(str_at(structured(m), "stdout_tail"), "start\n", "sandbox_status: tail of the output so far");
        ok(json_object_get_double(path(structured(m), "elapsed_seconds", NULL, NULL)) >= 1.0, "elapsed_seconds grows");
        json_object_put(m);

        snprintf(args, sizeof(args), "{\"job_id\":\"%s\",\"timeout_seconds\":0}", job);
        m = call(3, "sandbox_wait", args, 5000, NULL);
        is_str(str_at(structured(m), "status"), "running", "sandbox_wait 0 s: still running");
        ok(strstr(str_at(structured(m), "message"), "call sandbox_wait again") != NULL,
           "with the message to call again");
        json_object_put(m);

        test_release();
        notes = json_object_new_array();
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", job);
        m = call(4, "sandbox_wait", args, 60000, notes);
        is_str(str_at(structured(m), "status"), "failed", "sandbox_wait: final status failed (exit 4)");
        is_int(json_object_get_int(path(structured(m), "exit_code", NULL, NULL)), 4, "final result has exit_code 4");
        is_str(str_at(structured(m), "stdout"), "start\nend\n", "final result has the whole stdout");
        ok(*str_at(structured(m), "output_dir") == '/', "final result has output_dir");
        json_object_put(m);
        m = job_end_message(notes, job);
        ok(m != NULL, "notifications/message when the job ended");
        is_str(json_object_get_string(path(m, "params", "data", "status")), "failed", "the message says failed");
        json_object_put(notes);

        m = call(5, "sandbox_status", args, 5000, NULL);
        is_int(json_object_get_int(path(structured(m), "exit_code", NULL, NULL)), 4,
               "sandbox_status after the end has exit_code");
        json_object_put(m);
        free(job);

        /* Success, timeout, cancel. */
        m = call(6, "sandbox_script", "{\"command\":\"true\",\"background\":true}", 10000, NULL);
        job = job_of(m);
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", job);
        m = call(7, "sandbox_wait", args, 30000, NULL);
        is_str(str_at(structured(m), "status"), "succeeded", "exit 0: succeeded");
        json_object_put(m);
        free(job);

        m = call(8, "sandbox_script", "{\"command\":\"sleep 30\",\"timeout_seconds\":1,\"background\":true}", 10000,
                 NULL);
        job = job_of(m);
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", job);
        m = call(9, "sandbox_wait", args, 30000, NULL);
        is_str(str_at(structured(m), "status"), "timed_out", "timeout: timed_out");
        ok(json_object_get_boolean(path(structured(m), "timed_out", NULL, NULL)), "result says timed_out");
        json_object_put(m);
        free(job);

        m = call(10, "sandbox_script", "{\"command\":\"sleep 60\",\"background\":true}", 10000, NULL);
        job = job_of(m);
        json_object_put(m);
        t0 = dm_now_ms();
        while (containers_of(b, c->pid) < 1 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", job);
        m = call(11, "sandbox_cancel", args, 5000, NULL);
        is_str(str_at(structured(m), "status"), "cancelled", "sandbox_cancel: cancelled");
        json_object_put(m);
        m = call(12, "sandbox_wait", args, 15000, NULL);
        is_str(str_at(structured(m), "status"), "cancelled", "the job ends cancelled");
        json_object_put(m);
        m = call(13, "sandbox_cancel", args, 5000, NULL);
        ok(!is_error(m) && strcmp(str_at(structured(m), "status"), "cancelled") == 0, "cancel again: idempotent");
        json_object_put(m);
        t0 = dm_now_ms();
        while (containers_of(b, c->pid) > 0 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        is_int(containers_of(b, c->pid), 0, "the cancelled job's container is removed");
        free(job);

        /* Bad input. */
        m = call(14, "sandbox_status", "{\"job_id\":\"job-nonexistent\"}", 5000, NULL);
        ok(is_error(m) && strstr(json_object_to_json_string(m), "unknown job"), "unknown job id: clear error");
        json_object_put(m);
        m = call(15, "sandbox_wait", "{\"job_id\":\"x\",\"timeout_seconds\":121}", 5000, NULL);
        ok(is_error(m) && strstr(json_object_to_json_string(m), "between 0 and 120"), "wait over 120 s refused");
        json_object_put(m);
        m = call(16, "sandbox_cancel", "{}", 5000, NULL);
        ok(is_error(m) && strstr(json_object_to_json_string(m), "job_id"), "cancel without job_id refused");
        json_object_put(m);

        /* A waiting call can itself be cancelled: no response, and promptly. */
        m = call(17, "sandbox_script", "{\"command\":\"sleep 40\",\"background\":true}", 10000, NULL);
        job = job_of(m);
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\",\"timeout_seconds\":60}", job);
        send_call(c, 18, "sandbox_wait", args);
        usleep(300 * 1000);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":18}}");
        /* A server held by the wait would answer when the job ends (40 s). */
        t0 = dm_now_ms();
        m = call(19, "sandbox_status", "{\"job_id\":\"job-nonexistent\"}", 30000, NULL);
        ok(m && dm_now_ms() - t0 < 30000, "the server answers while a wait is cancelled, before the job ends (%lld ms)",
           (long long)(dm_now_ms() - t0));
        json_object_put(m);
        m = recv_response(c, 18, 1500, NULL);
        ok(m == NULL, "the cancelled wait gets no response");
        free(job);
        json_object_put(m);

        /* 32 calls at once from one client; tools/list is not held up. */
        for (int i = 0; i < 32; i++) {
                snprintf(args, sizeof(args), "{\"command\":\"sleep 1; echo n%d; exit %d\"}", i, i % 7);
                send_call(c, 100 + i, "sandbox_script", args);
        }
        t0 = dm_now_ms();
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}");
        notes = json_object_new_array();
        m = recv_response(c, 99, 25000, notes);
        /* 32 calls of a second each, one after another, would take 32 s
         * or more: an answer inside that shows nothing waits on them. */
        ok(m && dm_now_ms() - t0 < 25000, "tools/list answered while 32 calls run (%lld ms)",
           (long long)(dm_now_ms() - t0));
        json_object_put(m);
        int good = 0;
        json_object *seen[32] = { 0 };
        int64_t deadline = dm_now_ms() + 180000;
        for (size_t i = 0; i < json_object_array_length(notes); i++) {
                json_object *n = json_object_array_get_idx(notes, i), *id;
                if (json_object_object_get_ex(n, "id", &id) && json_object_get_int(id) >= 100)
                        seen[json_object_get_int(id) - 100] = json_object_get(n);
        }
        json_object_put(notes);
        for (int got = 0; got < 32 && dm_now_ms() < deadline;) {
                got = 0;
                for (int i = 0; i < 32; i++)
                        got += seen[i] != NULL;
                if (got == 32)
                        break;
                json_object *n = recv_msg(c, (int)(deadline - dm_now_ms())), *id;
                if (!n)
                        break;
                if (json_object_object_get_ex(n, "id", &id) && json_object_get_int(id) >= 100 &&
                    json_object_get_int(id) < 132)
                        seen[json_object_get_int(id) - 100] = n;
                else
                        json_object_put(n);
        }
        for (int i = 0; i < 32; i++) {
                char want[16];
                snprintf(want, sizeof(want), "n%d\n", i);
                if (seen[i] && !is_error(seen[i]) &&
                    json_object_get_int(path(structured(seen[i]), "exit_code", NULL, NULL)) == i % 7 &&
                    strcmp(str_at(structured(seen[i]), "stdout"), want) == 0)
                        good++;
                json_object_put(seen[i]);
        }
        is_int(good, 32, "32 concurrent calls all succeed with their own output and exit code");

        /* stdin EOF with a background job running: cancelled, removed, and
         * the server exits without waiting for the job. The job would run an
         * hour; the bound is only that the exit comes long before that. */
        m = call(200, "sandbox_script", "{\"command\":\"sleep 3600\",\"background\":true}", 10000, NULL);
        json_object_put(m);
        t0 = dm_now_ms();
        while (containers_of(b, c->pid) < 1 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        pid_t pid = c->pid;
        t0 = dm_now_ms();
        is_int(finish(c, 120000), 0, "stdin EOF with a running job: clean exit");
        ok(dm_now_ms() - t0 < slack_ms(120000), "without waiting for the job's hour (%lld ms)",
           (long long)(dm_now_ms() - t0));
        is_int(containers_of(b, pid), 0, "the job's container is removed");

        /* Two servers side by side: the second leaves the first's containers alone. */
        struct child *a = calloc(1, sizeof(*a));
        spawn(a, NULL);
        send_line(a, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                     "\"arguments\":{\"command\":\"" TEST_HOLD(150) "; echo a-done\"}," MODERN_META "}}");
        t0 = dm_now_ms();
        while (containers_of(b, a->pid) < 1 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        spawn(c, NULL);
        m = call(1, "sandbox_script", "{\"command\":\"echo b-done\"}", 60000, NULL);
        is_str(str_at(structured(m), "stdout"), "b-done\n", "second server runs its own call");
        json_object_put(m);
        usleep(500 * 1000); /* the second server's sweep for dead owners has run by now */
        is_int(containers_of(b, a->pid), 1, "the first server's running container is untouched");
        test_release();
        m = recv_response(a, 1, 60000, NULL);
        is_str(str_at(structured(m), "stdout"), "a-done\n", "the first server's call completes normally");
        json_object_put(m);
        is_int(finish(a, 15000), 0, "first server exits cleanly");
        is_int(finish(c, 15000), 0, "second server exits cleanly");
        free(a);

        dm_backend_free(b);
        free(c);
        dm_remove_tree(test_root);
        return done_testing();
}
