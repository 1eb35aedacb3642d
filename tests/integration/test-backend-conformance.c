/* SPDX-License-Identifier: MIT */
/* One conformance suite for every backend: sandbox_script, persistent
 * sandboxes, file transfer, background jobs and cancellation, written once
 * against the MCP tools through `demesne serve`, and run against
 *   - the engine this process finds (Podman's service under `make check`,
 *     the private dockerd under tests/run-dockerd.sh), then
 *   - the OpenSandbox protocol fixture (tests/fixtures/opensandbox/), which
 *     this test starts, with DEMESNE_BACKEND=opensandbox.
 * DEMESNE_CONFORMANCE_BACKENDS (a list of "engine" and "opensandbox",
 * default both) narrows that. What a backend cannot do, it declares
 * (DM_CAP_* in backends/backend.h, read here from a backend opened in the
 * server's environment), and the case then asserts the tool's clear error
 * instead of the behaviour: nothing is skipped. Every pass ends with a
 * check, by label, that no container of its servers or sandboxes is left. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "src/basic/base64.h"
#include "src/basic/cleanup.h"
#include "tests/integration/opensandbox-fixture.h"
#include "tests/integration/stdio-client.h"
#include "tests/integration/engine-env.h"

#define API_KEY "conformance-key-81c3"
#define BIG_LEN (256 * 1024)

struct target {
        char name[64]; /* "podman", "docker", "opensandbox fixture": prefixes every test line */
        unsigned caps; /* DM_CAP_* as the backend declares them */
};

static struct child *c;
static int next_id = 1;
static const struct target *t;
static struct dm_backend *engine; /* where every backend's containers live: for the label checks */
static pid_t servers[8];
static size_t n_servers;
static char allowed[1024];

/* A test line, named after the backend under test. */
#define check(cond, ...) ok_named((cond), __VA_ARGS__)
static __attribute__((format(printf, 2, 3))) int ok_named(int cond, const char *fmt, ...)
{
        char what[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        return ok(cond, "[%s] %s", t->name, what);
}
#define check_str(got, want, ...)                                            \
        do {                                                                 \
                const char *_g = (got), *_w = (want);                        \
                if (!check(_g && strcmp(_g, _w) == 0, __VA_ARGS__))          \
                        diag("got '%s', want '%s'", _g ? _g : "(null)", _w); \
        } while (0)
#define check_int(got, want, ...)                                        \
        do {                                                             \
                long long _g = (long long)(got), _w = (long long)(want); \
                if (!check(_g == _w, __VA_ARGS__))                       \
                        diag("got %lld, want %lld", _g, _w);             \
        } while (0)

static json_object *call_timeout(const char *tool, const char *args, int timeout_ms, json_object *notes)
{
        int id = next_id++;

        send_call(c, id, tool, args);
        return recv_response(c, id, timeout_ms, notes);
}

static json_object *call(const char *tool, const char *args)
{
        return call_timeout(tool, args, 120000, NULL);
}

static bool bool_at(json_object *o, const char *key)
{
        return json_object_get_boolean(path(o, key, NULL, NULL));
}

static void start_server(void)
{
        if (spawn(c, NULL) < 0) {
                printf("Bail out! cannot start $DEMESNE serve\n");
                exit(1);
        }
        if (n_servers < sizeof(servers) / sizeof(servers[0]))
                servers[n_servers++] = c->pid;
}

/* The stdout of one sandbox_exec, "<error>" when the call failed. */
static char *exec_out(const char *sb, const char *cmd)
{
        return sandbox_exec_stdout(call, sb, cmd);
}

static char *read_text(const char *file, size_t *ret_len)
{
        FILE *f = fopen(file, "r");
        char *buf = calloc(1, BIG_LEN + 2);
        size_t n = f && buf ? fread(buf, 1, BIG_LEN + 1, f) : 0;

        if (f)
                fclose(f);
        if (ret_len)
                *ret_len = n;
        return buf;
}

static long sandbox_containers(const char *sb)
{
        char label[96];

        snprintf(label, sizeof(label), "demesne.sandbox=%s", sb);
        return count_label(engine, label);
}

/* Polls until the server with pid has n containers (or 15 s pass). */
static long await_containers(pid_t pid, long n)
{
        int64_t t0 = dm_now_ms();
        long got;

        while ((got = containers_of(engine, pid)) != n && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        return got;
}

/* A command that holds its container until release_holds() (or at most 15
 * s): a job the test must see running waits for the test, not for a sleep. */
#define HOLD "i=0; while [ ! -e /tmp/go ] && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done"

static int sink_drop(void *userdata, int stream, const char *data, size_t len)
{
        (void)userdata, (void)stream, (void)data, (void)len;
        return 0;
}

/* Ends the holds of the server's running commands: /tmp/go in each of its
 * containers, written through the engine (every backend's containers are
 * there, the fixture's too). */
static void release_holds(pid_t pid)
{
        static const char *const argv[] = { "touch", "/tmp/go", NULL };
        const struct dm_exec_spec es = { .argv = argv };
        const struct dm_stream_sink sink = { .on_data = sink_drop };
        struct dm_error err = { 0 };
        char **ids = NULL, needle[32];
        size_t n = 0;

        snprintf(needle, sizeof(needle), "-%d-", (int)pid);
        if (engine->ops->list(engine, "demesne.owner", &ids, &n, &err) < 0)
                diag("release: list: %s", err.msg);
        for (size_t i = 0; i < n; i++) {
                struct dm_container_info info = { 0 };
                bool ours = false;

                if (engine->ops->inspect(engine, ids[i], &info, &err) == 0)
                        for (size_t k = 0; info.labels && info.labels[k]; k++)
                                ours |= strncmp(info.labels[k], "demesne.owner=", 14) == 0 &&
                                        strstr(info.labels[k], needle) && info.running;
                if (ours) {
                        struct dm_stream *st = NULL;
                        char *exec_id = NULL;

                        if (engine->ops->exec(engine, ids[i], &es, &st, &exec_id, &err) < 0 ||
                            dm_stream_pump(st, &sink, -1, dm_now_ms() + slack_ms(60000), &err) < 0)
                                diag("release %s: %s", ids[i], err.msg);
                        dm_stream_free(st);
                        free(exec_id);
                }
                dm_container_info_release(&info);
                free(ids[i]);
        }
        free(ids);
}

/* ---- sandbox_script ---------------------------------------------------------- */

static void script_cases(void)
{
        char args[PATH_MAX + 1024], p[PATH_MAX + 64];
        json_object *m;
        char *s;
        int64_t t0;

        snprintf(args, sizeof(args),
                 "{\"image\":\"base\",\"egress\":\"none\",\"files\":[\"%s/input.txt\"],\"env\":{\"GREETING\":\"hi\"},"
                 "\"command\":\"echo hello; echo oops >&2; cat /in/input.txt; echo \\\"$GREETING\\\" $(pwd); "
                 "(echo x > /in/input.txt) 2>/dev/null || echo in-is-read-only; echo made > /out/f.txt; exit 7\"}",
                 allowed);
        m = call("sandbox_script", args);
        check(!result_is_error(m), "sandbox_script runs");
        check_str(str_at(structured(m), "stdout"), "hello\nline one\nline 'two'\nhi /out\nin-is-read-only\n",
                  "script: stdout, /in input (read-only), env, working directory /out");
        check_str(str_at(structured(m), "stderr"), "oops\n", "script: stderr apart");
        check_int(int_at(structured(m), "exit_code"), 7, "script: exit code");
        check(!bool_at(structured(m), "timed_out") && int_at(structured(m), "duration_ms") >= 0 &&
                      strncmp(str_at(structured(m), "run_id"), "", 1) != 0,
              "script: timed_out false, duration_ms, run_id");
        snprintf(p, sizeof(p), "%s/f.txt", str_at(structured(m), "output_dir"));
        s = read_text(p, NULL);
        check_str(s, "made\n", "script: /out is the host output directory");
        free(s);
        snprintf(p, sizeof(p), "%s/stdout.log", str_at(structured(m), "output_dir"));
        s = read_text(p, NULL);
        check(strncmp(s, "hello\n", 6) == 0, "script: the whole stdout is in stdout.log");
        free(s);
        json_object_put(m);

        m = call("sandbox_script", "{\"image\":\"base\",\"egress\":\"none\",\"command\":\"true\"}");
        check(!result_is_error(m) && int_at(structured(m), "exit_code") == 0, "script: exit 0");
        json_object_put(m);

        t0 = dm_now_ms();
        m = call("sandbox_script", "{\"image\":\"base\",\"egress\":\"none\",\"command\":\"echo start; sleep 3600\","
                                   "\"timeout_seconds\":2}");
        check(!result_is_error(m) && bool_at(structured(m), "timed_out"), "script: timed_out after timeout_seconds");
        /* Against a command left to run its hour; how soon is bench/'s. */
        check(dm_now_ms() - t0 < slack_ms(120000), "script: the timeout ends it, not the command (%lld ms)",
              (long long)(dm_now_ms() - t0));
        check_str(str_at(structured(m), "stdout"), "start\n", "script: output before the timeout is kept");
        json_object_put(m);
}

/* ---- persistent sandboxes and files ------------------------------------------------ */

static void file_cases(const char *sb)
{
        char args[PATH_MAX + 1024], p[PATH_MAX + 64];
        json_object *m;
        char *s, *want, *got;
        size_t n;

        snprintf(args, sizeof(args),
                 "{\"sandbox_id\":\"%s\",\"src\":\"%s/input.txt\",\"dst\":\"/workspace/sub/d.txt\"}", sb, allowed);
        m = call("sandbox_upload", args);
        check(!result_is_error(m), "upload: a text file into a directory that does not exist yet");
        check_int(int_at(structured(m), "bytes"), 20, "upload: bytes");
        check_str(str_at(structured(m), "sandbox_path"), "/workspace/sub/d.txt", "upload: sandbox_path");
        json_object_put(m);
        s = exec_out(sb, "sed -n 2p /workspace/sub/d.txt; cp /workspace/sub/d.txt /workspace/back.txt");
        check_str(s, "line 'two'\n", "upload: the file is there, byte for byte");
        free(s);

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"%s/big.bin\",\"dst\":\"/workspace/big.bin\"}",
                 sb, allowed);
        m = call("sandbox_upload", args);
        check_int(int_at(structured(m), "bytes"), BIG_LEN, "upload: 256 KiB of every byte value");
        json_object_put(m);
        s = exec_out(sb, "wc -c < /workspace/big.bin; od -An -tu1 -N4 -j255 /workspace/big.bin | tr -s ' '");
        check_str(s, "262144\n 255 0 1 2\n", "upload: binary content intact");
        free(s);

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/back.txt\"}", sb);
        m = call("sandbox_download", args);
        check(!result_is_error(m), "download: a text file");
        check_int(int_at(structured(m), "bytes"), 20, "download: bytes");
        check(strstr(str_at(structured(m), "host_path"), "/downloads/") != NULL,
              "download: host_path under downloads/");
        s = read_text(str_at(structured(m), "host_path"), NULL);
        check_str(s, "line one\nline 'two'\n", "download: the bytes match");
        free(s);
        json_object_put(m);

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/big.bin\"}", sb);
        m = call("sandbox_download", args);
        snprintf(p, sizeof(p), "%s/big.bin", allowed);
        want = read_text(p, NULL);
        got = read_text(str_at(structured(m), "host_path"), &n);
        check(!result_is_error(m) && n == BIG_LEN && memcmp(want, got, BIG_LEN) == 0,
              "download: binary round trip (%zu bytes)", n);
        free(want);
        free(got);
        json_object_put(m);

        /* A name that is not ASCII (libarchive in the C locale could not
         * read it) and holds a glob to Podman's archive API ('[1]', '?'). */
        snprintf(args, sizeof(args),
                 "{\"sandbox_id\":\"%s\",\"content\":\"aGkK\",\"dst\":\"/workspace/\u00fc \u00e9[1]?.txt\"}", sb);
        m = call("sandbox_upload", args);
        check(!result_is_error(m) && int_at(structured(m), "bytes") == 3,
              "upload: a file named 'ü é[1]?.txt' (not ASCII, a glob to Podman)");
        json_object_put(m);
        free(exec_out(sb, "echo other > '/workspace/\xc3\xbc \xc3\xa9"
                          "1?.txt'"));
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/\u00fc \u00e9[1]?.txt\"}", sb);
        m = call("sandbox_download", args);
        s = result_is_error(m) ? NULL : read_text(str_at(structured(m), "host_path"), NULL);
        if (!s)
                diag("sandbox_download: %s", json_object_to_json_string(m));
        check_str(s, "hi\n", "download: 'ü é[1]?.txt' by its own name, not a file its glob would match too");
        free(s);
        json_object_put(m);

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/nope\"}", sb);
        m = call("sandbox_download", args);
        check(result_error_says(m, "does not exist"), "download: a missing file is a clear error");
        json_object_put(m);

        /* Without a disk in common: the bytes in the call and in the result. */
        {
                char *enc, *big_args, *dec = NULL;
                size_t dec_len = 0;

                snprintf(p, sizeof(p), "%s/big.bin", allowed);
                want = read_text(p, &n);
                enc = dm_base64_encode(want, n);
                big_args = malloc(strlen(enc) + 256);
                sprintf(big_args, "{\"sandbox_id\":\"%s\",\"content\":\"%s\",\"dst\":\"/workspace/c/sent.bin\"}", sb,
                        enc);
                m = call("sandbox_upload", big_args);
                check(!result_is_error(m) && int_at(structured(m), "bytes") == BIG_LEN,
                      "upload content: 256 KiB of every byte value, base64, no host path");
                json_object_put(m);
                s = exec_out(sb, "cmp /workspace/c/sent.bin /workspace/big.bin && echo same");
                check_str(s, "same\n", "upload content: the file in the sandbox is byte for byte the one sent");
                free(s);
                snprintf(args, sizeof(args),
                         "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/c/sent.bin\",\"return_content\":true}", sb);
                m = call("sandbox_download", args);
                check(!result_is_error(m) && !strcmp(str_at(structured(m), "content_encoding"), "base64") &&
                              dm_base64_decode(str_at(structured(m), "content"),
                                               strlen(str_at(structured(m), "content")), &dec, &dec_len) == 0 &&
                              dec_len == n && memcmp(dec, want, n) == 0,
                      "download return_content: the same bytes back in the result");
                json_object_put(m);
                free(dec);
                sprintf(big_args, "{\"sandbox_id\":\"%s\",\"content\":\"not base64!\",\"dst\":\"/workspace/x\"}", sb);
                m = call("sandbox_upload", big_args);
                check(result_error_says(m, "not base64"), "upload content: bad base64 is a clear error");
                json_object_put(m);
                sprintf(big_args,
                        "{\"sandbox_id\":\"%s\",\"content\":\"aGk=\",\"src\":\"%s/big.bin\",\"dst\":\"/workspace/x\"}",
                        sb, allowed);
                m = call("sandbox_upload", big_args);
                check(result_error_says(m, "either 'src'"), "upload: src and content together is a clear error");
                json_object_put(m);
                free(big_args);
                free(enc);
                free(want);
        }
}

static void sandbox_cases(void)
{
        char args[4096], sb[64];
        json_object *m;
        char *s;
        int64_t t0;

        m = call("sandbox_create", "{\"image\":\"base\",\"egress\":\"none\",\"env\":{\"GREETING\":\"hi there\"}}");
        check(!result_is_error(m), "sandbox_create");
        snprintf(sb, sizeof(sb), "%s", str_at(structured(m), "sandbox_id"));
        check(strncmp(sb, "sbx-", 4) == 0 && *str_at(structured(m), "expires_at") &&
                      *str_at(structured(m), "output_dir") == '/',
              "create: sandbox_id %s, expires_at, output_dir", sb);
        json_object_put(m);

        snprintf(args, sizeof(args),
                 "{\"sandbox_id\":\"%s\",\"command\":\"echo \\\"$GREETING $X\\\"; pwd; "
                 "echo kept > /workspace/s\",\"workdir\":\"/tmp\",\"env\":{\"X\":\"it's\"}}",
                 sb);
        m = call("sandbox_exec", args);
        check_str(str_at(structured(m), "stdout"), "hi there it's\n/tmp\n", "exec: create's env, exec's env, workdir");
        json_object_put(m);
        s = exec_out(sb, "cat /workspace/s");
        check_str(s, "kept\n", "exec: state persists across execs");
        free(s);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"echo out; echo err >&2; exit 7\"}", sb);
        m = call("sandbox_exec", args);
        check(int_at(structured(m), "exit_code") == 7 && !strcmp(str_at(structured(m), "stdout"), "out\n") &&
                      !strcmp(str_at(structured(m), "stderr"), "err\n"),
              "exec: exit code, stdout and stderr apart");
        json_object_put(m);

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"tr a-z A-Z\",\"stdin\":\"abc\\n\"}", sb);
        m = call("sandbox_exec", args);
        if (t->caps & DM_CAP_EXEC_STDIN)
                check_str(str_at(structured(m), "stdout"), "ABC\n", "exec: stdin reaches the command");
        else
                check(result_error_says(m, "cannot pass stdin") && result_error_says(m, "sandbox_upload"),
                      "exec: stdin refused with a clear error naming the way around it (no DM_CAP_EXEC_STDIN)");
        json_object_put(m);

        t0 = dm_now_ms();
        snprintf(args, sizeof(args),
                 "{\"sandbox_id\":\"%s\",\"command\":\"echo begun; sleep 301 & sleep 301\","
                 "\"timeout_seconds\":1}",
                 sb);
        m = call("sandbox_exec", args);
        check(bool_at(structured(m), "timed_out"), "exec: timed_out after timeout_seconds");
        check_str(str_at(structured(m), "stdout"), "begun\n", "exec: output before the timeout is kept");
        check(dm_now_ms() - t0 < slack_ms(60000), "exec: the timeout ends it, not the command's 301 s (%lld ms)",
              (long long)(dm_now_ms() - t0));
        json_object_put(m);
        s = exec_out(
                sb,
                "for i in $(seq 50); do n=$(pgrep -c -f '^sleep 301'); [ $n = 0 ] && break; sleep 0.1; done; echo $n");
        check_str(s, "0\n", "exec: the timeout ended what the command started too");
        free(s);

        file_cases(sb);

        m = call("sandbox_list", "{}");
        check(strstr(json_object_to_json_string(structured(m)), sb) != NULL, "sandbox_list shows the sandbox");
        json_object_put(m);

        /* A persistent sandbox outlives its server; the next one adopts it. */
        check_int(finish(c, 20000), 0, "the server exits with a sandbox alive");
        check_int(sandbox_containers(sb), 1, "the sandbox outlives the server");
        start_server();
        s = exec_out(sb, "cat /workspace/s");
        check_str(s, "kept\n", "a new server adopts it, state intact");
        free(s);

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sb);
        m = call("sandbox_destroy", args);
        check(!result_is_error(m) && bool_at(structured(m), "destroyed"), "sandbox_destroy");
        json_object_put(m);
        check_int(sandbox_containers(sb), 0, "destroy removes its container");
        m = call("sandbox_destroy", args);
        check(result_error_says(m, "unknown sandbox"), "destroy twice: unknown sandbox");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"true\"}", sb);
        m = call("sandbox_exec", args);
        check(result_error_says(m, "unknown sandbox"), "exec after destroy: unknown sandbox");
        json_object_put(m);
}

/* ---- background jobs ---------------------------------------------------------------- */

/* A notifications/message about job_id among the collected notifications. */
static char *start_job(const char *command, int timeout_s)
{
        char args[1024];
        json_object *m;
        char *job;

        snprintf(args, sizeof(args), "{\"image\":\"base\",\"egress\":\"none\",\"background\":true,\"command\":\"%s\"%s",
                 command, timeout_s ? ",\"timeout_seconds\":" : "}");
        if (timeout_s)
                snprintf(args + strlen(args), sizeof(args) - strlen(args), "%d}", timeout_s);
        m = call_timeout("sandbox_script", args, 10000, NULL);
        job = strdup(str_at(structured(m), "job_id"));
        json_object_put(m);
        return job;
}

static void job_cases(void)
{
        char args[512], *job;
        json_object *m, *notes;
        int64_t t0;

        /* A job that prints, waits and fails. That the call answers before
         * the job ends is its status, running; how fast is bench/'s. It
         * waits until the test has seen it running (or 15 s). */
        m = call_timeout("sandbox_script",
                         "{\"image\":\"base\",\"egress\":\"none\",\"background\":true,"
                         "\"command\":\"echo start; " HOLD "; echo end; exit 4\"}",
                         10000, NULL);
        check_str(str_at(structured(m), "status"), "running", "job: status running");
        job = strdup(str_at(structured(m), "job_id"));
        check(strncmp(job, "job-", 4) == 0, "job: id %s", job);
        json_object_put(m);

        snprintf(args, sizeof(args), "{\"job_id\":\"%s\",\"include_stdout_tail\":true}", job);
        t0 = dm_now_ms();
        do {
                m = call_timeout("sandbox_status", args, 5000, NULL);
                if (strcmp(str_at(structured(m), "stdout_tail"), "") != 0 ||
                    strcmp(str_at(structured(m), "status"), "running") != 0 || dm_now_ms() - t0 > slack_ms(60000))
                        break;
                json_object_put(m);
                usleep(200 * 1000);
        } while (true);
        check_str(str_at(structured(m), "status"), "running", "job: sandbox_status says running");
        check_str(str_at(structured(m), "stdout_tail"), "start\n", "job: sandbox_status has the output so far");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\",\"timeout_seconds\":0}", job);
        m = call_timeout("sandbox_wait", args, 5000, NULL);
        check(!strcmp(str_at(structured(m), "status"), "running") &&
                      strstr(str_at(structured(m), "message"), "call sandbox_wait again"),
              "job: sandbox_wait 0 s says still running, call again");
        json_object_put(m);
        release_holds(c->pid);

        notes = json_object_new_array();
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", job);
        m = call_timeout("sandbox_wait", args, 60000, notes);
        check_str(str_at(structured(m), "status"), "failed", "job: sandbox_wait gives the end, failed (exit 4)");
        check(int_at(structured(m), "exit_code") == 4 && !strcmp(str_at(structured(m), "stdout"), "start\nend\n"),
              "job: the final result has exit_code and the whole stdout");
        json_object_put(m);
        m = job_end_message(notes, job);
        check(m && !strcmp(json_object_get_string(path(m, "params", "data", "status")) ?: "", "failed"),
              "job: a notifications/message says it failed");
        json_object_put(notes);
        free(job);

        job = start_job("sleep 30", 1);
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", job);
        m = call_timeout("sandbox_wait", args, 60000, NULL);
        if (!check(!strcmp(str_at(structured(m), "status"), "timed_out") && bool_at(structured(m), "timed_out"),
                   "job: timeout_seconds ends it timed_out"))
                diag("sandbox_wait: %s", m ? json_object_to_json_string(m) : "nothing");
        json_object_put(m);
        free(job);

        /* sandbox_cancel: the command and its container go. */
        job = start_job("sleep 60", 0);
        check_int(await_containers(c->pid, 1), 1, "job: its container runs");
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", job);
        m = call_timeout("sandbox_cancel", args, 15000, NULL);
        check_str(str_at(structured(m), "status"), "cancelled", "job: sandbox_cancel says cancelled");
        json_object_put(m);
        /* Right away, not eventually: every view is terminal once the
         * cancel has answered, and a cancel is not an error. */
        m = call_timeout("sandbox_status", args, 15000, NULL);
        check(!strcmp(str_at(structured(m), "status"), "cancelled") &&
                      !json_object_object_get_ex(structured(m), "error", NULL),
              "job: sandbox_status right after says cancelled, with no error");
        if (!m || strcmp(str_at(structured(m), "status"), "cancelled"))
                diag("sandbox_status: %s", m ? json_object_to_json_string(m) : "nothing");
        json_object_put(m);
        m = call_timeout("sandbox_wait", args, 30000, NULL);
        check_str(str_at(structured(m), "status"), "cancelled", "job: it ends cancelled");
        json_object_put(m);
        m = call_timeout("sandbox_cancel", args, 15000, NULL);
        check(!result_is_error(m) && !strcmp(str_at(structured(m), "status"), "cancelled"),
              "job: cancel again is idempotent");
        json_object_put(m);
        check_int(await_containers(c->pid, 0), 0, "job: the cancelled job's container is removed");
        free(job);
}

/* ---- notifications/cancelled ------------------------------------------------------- */

static void send_cancelled(int id)
{
        char line[256];

        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":%d}}", id);
        send_line(c, line);
}

static void cancel_cases(void)
{
        char args[1024], sb[64];
        json_object *m;
        int id;
        char *s;
        int64_t t0;

        /* A foreground script: no response, the server goes on, the container goes. */
        id = next_id++;
        send_call(c, id, "sandbox_script", "{\"image\":\"base\",\"egress\":\"none\",\"command\":\"sleep 60\"}");
        check_int(await_containers(c->pid, 1), 1, "cancel: the script's container runs");
        usleep(500 * 1000);
        send_cancelled(id);
        t0 = dm_now_ms();
        /* A server still held by the script would answer after its 60 s. */
        m = call_timeout("sandbox_status", "{\"job_id\":\"job-nonexistent\"}", 30000, NULL);
        check(m && dm_now_ms() - t0 < 30000,
              "cancel: the server answers after a cancel, before the script would end (%lld ms)",
              (long long)(dm_now_ms() - t0));
        json_object_put(m);
        m = recv_response(c, id, 1500, NULL);
        check(m == NULL, "cancel: the cancelled script gets no response");
        json_object_put(m);
        check_int(await_containers(c->pid, 0), 0, "cancel: the script's container is removed");

        /* An exec in a persistent sandbox: its command ends, the sandbox stays. */
        m = call("sandbox_create", "{\"image\":\"base\",\"egress\":\"none\"}");
        snprintf(sb, sizeof(sb), "%s", str_at(structured(m), "sandbox_id"));
        json_object_put(m);
        id = next_id++;
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"sleep 302 & sleep 302\"}", sb);
        send_call(c, id, "sandbox_exec", args);
        s = exec_out(
                sb,
                "for i in $(seq 100); do n=$(pgrep -c -f '^sleep 302'); [ $n = 2 ] && break; sleep 0.1; done; echo $n");
        check_str(s, "2\n", "cancel: the exec's command runs");
        free(s);
        send_cancelled(id);
        m = recv_response(c, id, 1500, NULL);
        check(m == NULL, "cancel: the cancelled exec gets no response");
        json_object_put(m);
        s = exec_out(
                sb,
                "for i in $(seq 100); do n=$(pgrep -c -f '^sleep 302'); [ $n = 0 ] && break; sleep 0.1; done; echo $n");
        check_str(s, "0\n", "cancel: the exec's command and what it started are gone; the sandbox answers");
        free(s);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sb);
        m = call("sandbox_destroy", args);
        check(!result_is_error(m) && sandbox_containers(sb) == 0, "cancel: the sandbox is destroyed");
        if (result_is_error(m))
                diag("sandbox_destroy answered %s", m ? json_object_to_json_string(m) : "nothing");
        json_object_put(m);
}

#include "tests/integration/conformance-nested.h"

/* ---- one pass per backend ---------------------------------------------------------- */

/* Opens the backend `demesne serve` will open in this environment, for
 * what it declares; names it after the engine ("podman", "docker"). */
static int declare(struct target *tg, const char *fallback_name)
{
        /* As the server's settings give it (src/core/settings.c), read
         * now: each pass sets its own variables. */
        struct dm_engine_env env;
        struct dm_engine_config ec = { .env = dm_engine_env_read(&env) == 0 ? &env : NULL,
                                       .may_start_podman = false,
                                       .response_max = 16 << 20,
                                       .backend = getenv("DEMESNE_BACKEND"),
                                       .opensandbox_egress = getenv("DEMESNE_OPENSANDBOX_EGRESS") };
        struct dm_error err = { 0 };
        struct dm_backend *b = NULL;
        char *desc = NULL;

        int r = dm_backend_open(&ec, &b, &err);

        /* The backend keeps copies of what it needs. */
        if (ec.env)
                dm_engine_env_release(&env);
        if (r < 0) {
                printf("Bail out! %s\n", err.msg);
                return -1;
        }
        tg->caps = b->ops->caps;
        if (fallback_name)
                snprintf(tg->name, sizeof(tg->name), "%s", fallback_name);
        else if (b->ops->describe(b, &desc, &err) == 0)
                sscanf(desc, "%63s", tg->name);
        else
                snprintf(tg->name, sizeof(tg->name), "%s", b->ops->name);
        free(desc);
        dm_backend_free(b);
        return 0;
}

static void write_inputs(void)
{
        char p[PATH_MAX + 32];
        unsigned char *big = malloc(BIG_LEN);
        FILE *f;

        snprintf(allowed, sizeof(allowed), "%s/allowed", test_root);
        mkdir(allowed, 0755);
        setenv("DEMESNE_ALLOWED_PATHS", allowed, 1);
        snprintf(p, sizeof(p), "%s/input.txt", allowed);
        if ((f = fopen(p, "w"))) {
                fputs("line one\nline 'two'\n", f);
                fclose(f);
        }
        for (size_t i = 0; big && i < BIG_LEN; i++)
                big[i] = (unsigned char)i;
        snprintf(p, sizeof(p), "%s/big.bin", allowed);
        if (big && (f = fopen(p, "w"))) {
                fwrite(big, 1, BIG_LEN, f);
                fclose(f);
        }
        free(big);
}

static void run_pass(const struct target *tg, void (*nested)(void))
{
        int64_t t0 = dm_now_ms();

        t = tg;
        n_servers = 0;
        test_env_setup("conformance");
        write_inputs();
        diag("%s: DM_CAP_* 0x%x", t->name, t->caps);
        start_server();
        script_cases();
        sandbox_cases();
        job_cases();
        cancel_cases();
        nested();
        check_int(finish(c, 30000), 0, "the server exits cleanly");
        for (size_t i = 0; i < n_servers; i++)
                check_int(containers_of(engine, servers[i]), 0, "no container of server %d is left", (int)servers[i]);
        diag("%s: %lld s", t->name, (long long)((dm_now_ms() - t0) / 1000));
        /* Kept for a look when something failed (test_root_cleanup says where). */
        if (!tap_failed)
                dm_remove_tree(test_root);
}

static bool wanted(const char *which)
{
        const char *list = getenv("DEMESNE_CONFORMANCE_BACKENDS");

        return !list || !*list || strstr(list, which) != NULL;
}

int main(void)
{
        struct dm_engine_config ec = { .may_start_podman = false, .response_max = 16 << 20 };
        struct dm_error err = { 0 };
        struct target tg = { 0 };
        char state_file[PATH_MAX];
        struct os_fixture fx;

        /* The engine is opened with the backend choice cleared: it is where
         * the containers of every pass are counted. */
        unsetenv("DEMESNE_BACKEND");
        unsetenv("OPEN_SANDBOX_DOMAIN");
        ec.env = test_engine_env();
        c = calloc(1, sizeof(*c));
        if (!c || dm_backend_open(&ec, &engine, &err) < 0) {
                printf("Bail out! %s\n", err.msg);
                return 1;
        }

        if (wanted("engine")) {
                if (declare(&tg, NULL) < 0)
                        return 1;
                run_pass(&tg, engine_nested);
        }

        if (wanted("opensandbox")) {
                snprintf(state_file, sizeof(state_file), "/tmp/dm-conformance-fixture-%d.json", (int)getpid());
                if (os_fixture_start(&fx, API_KEY, state_file) < 0) {
                        printf("Bail out! the OpenSandbox fixture did not start (is node on PATH?)\n");
                        return 1;
                }
                setenv("DEMESNE_BACKEND", "opensandbox", 1);
                /* It cannot host demesne-shim: the operator's opt-out. */
                setenv("DEMESNE_SHIM", "off", 1);
                /* The fixture stands for a server whose sidecar runs in "dns+nft". */
                setenv("DEMESNE_OPENSANDBOX_EGRESS", "dns+nft", 1);
                setenv("OPEN_SANDBOX_DOMAIN", fx.domain, 1);
                setenv("OPEN_SANDBOX_API_KEY", API_KEY, 1);
                if (declare(&tg, "opensandbox fixture") < 0) {
                        os_fixture_stop(&fx);
                        return 1;
                }
                fixture = &fx;
                run_pass(&tg, remote_nested);
                check_int(count_label(engine, fx.label), 0, "no container of the fixture is left");
                os_fixture_stop(&fx);
                unlink(state_file);
        }

        dm_backend_free(engine);
        free(c);
        return done_testing();
}
