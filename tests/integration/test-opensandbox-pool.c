/* SPDX-License-Identifier: MIT */
/* The warm pool on OpenSandbox (src/core/pool.h), through `demesne serve`
 * against the protocol fixture (tests/fixtures/opensandbox/server.mjs,
 * whose sandboxes are real Podman containers): with DEMESNE_POOL=2 idle
 * sandboxes are made ahead; a sandbox_script with the default egress takes
 * one (the fixture records no create for its call) and gives the result a
 * cold run gives; the pool refills behind it; a run that does not fit
 * (another egress, host inputs) makes its own; several at once past the
 * pool's size all run; entries the server removed while they waited are
 * found at the claim and the run makes its own; doctor says what the pool
 * keeps; a server whose creates for the pool are refused says why once and
 * still runs scripts cold; nothing is left at exit, and a killed server's
 * entries go with the next server's sweep. DEMESNE_OPENSANDBOX_POOL_REF
 * (OpenSandbox's own pools, extensions.poolRef) is sent and its refusals
 * are said. */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/integration/opensandbox-fixture.h"
#include "tests/integration/stdio-client.h"
#include "tests/integration/engine-env.h"

#define MAX_RUNS 8

static struct os_fixture fx;
static struct dm_backend *engine;
static int next_id = 1;
static const char *key = "test-key-7c1e";

static json_object *call(struct child *ch, const char *tool, const char *args)
{
        int id = next_id++;

        send_call(ch, id, tool, args);
        return recv_response(ch, id, 180000, NULL);
}

/* `demesne serve` on the fixture, its stderr into log (NULL: the test's). */
static struct child *serve(const char *pool, const char *log)
{
        static char d[128], k[128], p[64];
        const char *env[] = { "DEMESNE_BACKEND=opensandbox", "DEMESNE_SHIM=off", d, k, p, NULL };
        struct child *ch = calloc(1, sizeof(*ch));
        int saved = -1, fd = -1, r;

        snprintf(d, sizeof(d), "OPEN_SANDBOX_DOMAIN=%s", fx.domain);
        snprintf(k, sizeof(k), "OPEN_SANDBOX_API_KEY=%s", key);
        snprintf(p, sizeof(p), "DEMESNE_POOL=%s", pool);
        if (!ch)
                return NULL;
        if (log) {
                fflush(stderr);
                saved = dup(2);
                fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                if (fd >= 0)
                        dup2(fd, 2);
        }
        r = spawn(ch, env);
        if (log) {
                dup2(saved, 2);
                close(saved);
                if (fd >= 0)
                        close(fd);
        }
        if (r < 0) {
                free(ch);
                return NULL;
        }
        return ch;
}

static int64_t stat_of(const char *name)
{
        json_object *st = os_fixture_stats(&fx);
        int64_t v = int_at(st, name);

        json_object_put(st);
        return v;
}

/* sandbox_list's pool: how many entries are ready (-1: no pool). */
static int pool_ready(struct child *ch, char *why, size_t size)
{
        json_object *m = call(ch, "sandbox_list", "{}"), *pool = path(m, "result", "structuredContent", "pool");
        int n = pool ? (int)int_at(pool, "ready") : -1;

        if (why)
                snprintf(why, size, "%s", pool ? str_at(pool, "why_not_ready") : "");
        json_object_put(m);
        return n;
}

/* Waits (a liveness bound: sandboxes are real containers on a busy
 * machine) for the pool to hold want ready entries. */
static int await_ready(struct child *ch, int want)
{
        int64_t t0 = dm_now_ms();
        int n;

        while ((n = pool_ready(ch, NULL, 0)) != want && dm_now_ms() - t0 < slack_ms(90000))
                usleep(100 * 1000);
        return n;
}

/* The run ids of the fixture's sandboxes of server pid that are pool
 * entries (their metadata are the container's labels). */
static int pool_runs(pid_t pid, char runs[MAX_RUNS][64])
{
        return pool_runs_of(engine, pid, runs, MAX_RUNS);
}

/* The creates the fixture recorded from the i-th on: how many, and how
 * many of them were the pool's; whether one was for run. */
static int creates_since(size_t from, int *ret_pool, const char *run, bool *ret_for_run)
{
        json_object *st = os_fixture_stats(&fx), *cr = NULL;
        int n = 0;

        *ret_pool = 0;
        if (ret_for_run)
                *ret_for_run = false;
        if (st && json_object_object_get_ex(st, "creates", &cr))
                for (size_t i = from; i < json_object_array_length(cr); i++) {
                        json_object *e = json_object_array_get_idx(cr, i);

                        n++;
                        *ret_pool += str_at(e, "pool")[0] != '\0';
                        if (run && ret_for_run && strcmp(str_at(e, "run"), run) == 0)
                                *ret_for_run = true;
                }
        json_object_put(st);
        return n;
}

static bool among(const char *run, char runs[MAX_RUNS][64], int n)
{
        for (int i = 0; i < n; i++)
                if (strcmp(runs[i], run) == 0)
                        return true;
        return false;
}

static const char *run_of(json_object *m)
{
        const char *id = str_at(structured(m), "run_id");

        return id ? id : "";
}

static bool file_says(const char *dir, const char *name, const char *want)
{
        char p[PATH_MAX + 64], line[128] = "";
        FILE *f;
        bool yes;

        snprintf(p, sizeof(p), "%s/%s", dir ? dir : "", name);
        f = fopen(p, "r");
        yes = f && fgets(line, sizeof(line), f) && strcmp(line, want) == 0;
        if (f)
                fclose(f);
        return yes;
}

/* How many lines of the file hold what. */
static int lines_with(const char *file, const char *what)
{
        char line[4096];
        FILE *f = fopen(file, "r");
        int n = 0;

        while (f && fgets(line, sizeof(line), f))
                n += strstr(line, what) != NULL;
        if (f)
                fclose(f);
        return n;
}

static int fixture_post(const char *path)
{
        char cmd[512];

        snprintf(cmd, sizeof(cmd), "curl -sf -X POST -H 'OPEN-SANDBOX-API-KEY: %s' 'http://%s%s' >/dev/null", key,
                 fx.domain, path);
        return system(cmd);
}

/* Ends a server (NULL: none was started) and checks it exited cleanly. */
static void stop(struct child *c)
{
        if (c) {
                is_int(finish(c, 60000), 0, "that server exits cleanly");
                free(c);
        }
}

#define SCRIPT "echo warm-or-cold; echo err >&2; echo made > /out/f.txt; exit 3"

/* The same command's result, warm or cold. */
static void same_result(json_object *m, const char *what)
{
        json_object *s = structured(m);

        is_str(str_at(s, "stdout"), "warm-or-cold\n", "%s: stdout", what);
        is_str(str_at(s, "stderr"), "err\n", "%s: stderr", what);
        is_int(int_at(s, "exit_code"), 3, "%s: exit code", what);
        ok(file_says(str_at(s, "output_dir"), "f.txt", "made\n"), "%s: /out is the host output directory", what);
}

static void warm_and_cold(struct child *c)
{
        char runs[MAX_RUNS][64], allowed[PATH_MAX], input[PATH_MAX + 16], args[PATH_MAX + 256];
        int64_t created;
        json_object *m;
        bool for_run;
        int n;

        is_int(await_ready(c, 2), 2, "DEMESNE_POOL=2: two idle sandboxes on the server");
        n = pool_runs(c->pid, runs);
        is_int(n, 2, "the fixture holds two sandboxes of the pool, with its labels");
        created = stat_of("created");

        /* The default egress fits: no create for this call (the pool's
         * refill may start before its answer). */
        m = call(c, "sandbox_script", "{\"command\":\"" SCRIPT "\"}");
        ok(m && !result_is_error(m), "sandbox_script with the default egress");
        ok(among(run_of(m), runs, n), "it ran in a pool entry (%s)", run_of(m));
        {
                int pool, all = creates_since((size_t)created, &pool, run_of(m), &for_run);

                ok(all == pool && !for_run, "the call made no create of its own (%d since, %d the pool's)", all, pool);
        }
        same_result(m, "warm");
        json_object_put(m);

        /* The pool refills behind it. */
        is_int(await_ready(c, 2), 2, "the pool refilled");
        is_int(stat_of("created"), created + 1, "with one create");

        /* Another egress than the entries' does not fit: cold. */
        n = pool_runs(c->pid, runs);
        created = stat_of("created");
        m = call(c, "sandbox_script", "{\"command\":\"" SCRIPT "\",\"egress\":\"package-managers\"}");
        if (!ok(m && !result_is_error(m), "sandbox_script with egress package-managers"))
                diag("%s", m ? json_object_to_json_string(m) : "no answer");
        ok(!among(run_of(m), runs, n), "it did not take a pool entry");
        {
                int pool, all = creates_since((size_t)created, &pool, run_of(m), &for_run);

                ok(all == 1 && pool == 0 && for_run, "it made its own sandbox (%d creates, %d the pool's)", all, pool);
        }
        same_result(m, "cold");
        json_object_put(m);
        is_int(pool_ready(c, NULL, 0), 2, "the pool kept its two");

        /* Host inputs are mounted at create: cold. */
        snprintf(allowed, sizeof(allowed), "%s/allowed", test_root);
        snprintf(input, sizeof(input), "%s/in.txt", allowed);
        {
                FILE *f = fopen(input, "w");

                if (f) {
                        fputs("input\n", f);
                        fclose(f);
                }
        }
        created = stat_of("created");
        snprintf(args, sizeof(args), "{\"command\":\"cat /in/in.txt\",\"files\":[\"%s\"]}", input);
        m = call(c, "sandbox_script", args);
        is_str(str_at(structured(m), "stdout"), "input\n", "a run with host inputs reads them");
        ok(!among(run_of(m), runs, n), "in a sandbox of its own");
        {
                int pool, all = creates_since((size_t)created, &pool, run_of(m), &for_run);

                ok(all == 1 && pool == 0 && for_run, "made for it (%d creates, %d the pool's)", all, pool);
        }
        json_object_put(m);

        /* Several at once, more than the pool holds: each gets a sandbox,
         * two of them warm. */
        n = pool_runs(c->pid, runs);
        created = stat_of("created");
        for (int i = 0; i < 4; i++)
                send_call(c, next_id + i, "sandbox_script", "{\"command\":\"echo $((6*7))\"}");
        {
                int64_t t0 = dm_now_ms();
                int warm = 0, fine = 0, got = 0;
                json_object *id;

                /* The answers come in any order. */
                while (got < 4 && (m = recv_msg(c, (int)slack_ms(180000))) && dm_now_ms() - t0 < slack_ms(180000)) {
                        if (json_object_object_get_ex(m, "id", &id) && json_object_get_int(id) >= next_id &&
                            json_object_get_int(id) < next_id + 4) {
                                got++;
                                fine += !result_is_error(m) && strcmp(str_at(structured(m), "stdout"), "42\n") == 0;
                                warm += among(run_of(m), runs, n);
                        }
                        json_object_put(m);
                }
                next_id += 4;
                is_int(fine, 4, "four at once: each answered 42");
                ok(warm >= 1 && warm <= 2, "at most the pool's two were warm (%d)", warm);
        }
        is_int(await_ready(c, 2), 2, "and the pool refilled after them");

        /* The server removed the idle entries (their TTL, an operator):
         * the claim finds out, and the run makes its own. */
        n = pool_runs(c->pid, runs);
        ok(fixture_post("/fixture/expire?metadata=demesne.pool%3Dpython") == 0,
           "the fixture expired the idle sandboxes");
        created = stat_of("created");
        m = call(c, "sandbox_script", "{\"command\":\"" SCRIPT "\"}");
        ok(m && !result_is_error(m), "sandbox_script after the server removed the pool's sandboxes");
        ok(!among(run_of(m), runs, n), "not in a removed one");
        {
                int pool, all = creates_since((size_t)created, &pool, run_of(m), &for_run);

                ok(for_run, "it made its own sandbox (%d creates, %d the pool's)", all, pool);
        }
        same_result(m, "after the expiry");
        json_object_put(m);
        is_int(await_ready(c, 2), 2, "the pool made two new ones");
}

/* doctor's line for the pool on this backend. */
static void doctor_says(void)
{
        char cmd[PATH_MAX + 512], out[16384] = "";
        size_t len = 0;
        FILE *f;

        snprintf(cmd, sizeof(cmd),
                 "DEMESNE_BACKEND=opensandbox DEMESNE_SHIM=off OPEN_SANDBOX_DOMAIN=%s OPEN_SANDBOX_API_KEY=%s "
                 "DEMESNE_POOL=3 DEMESNE_OPENSANDBOX_POOL_REF=warm-python '%s' doctor 2>&1",
                 fx.domain, key, getenv("DEMESNE"));
        f = popen(cmd, "r");
        while (f && len < sizeof(out) - 1 && fgets(out + len, (int)(sizeof(out) - len), f))
                len = strlen(out);
        if (f)
                pclose(f);
        if (!ok(strstr(out, "3 idle python sandbox(es) on the server") && strstr(out, "default egress (none)"),
                "doctor: the pool keeps idle sandboxes on the server, with the default egress"))
                diag("%s", out);
        ok(strstr(out, "\"DEMESNE_OPENSANDBOX_POOL_REF\": \"warm-python\"") != NULL,
           "doctor's client configuration carries DEMESNE_OPENSANDBOX_POOL_REF");
}

/* POST /v1/sandboxes with body straight to the fixture (no demesne): its
 * status, and the answer in out. */
static int fixture_create(const char *body, char *out, size_t size)
{
        char cmd[1024];
        size_t len = 0;
        int status = 0;
        FILE *f;

        snprintf(cmd, sizeof(cmd),
                 "curl -s -w '\\n%%{http_code}' -X POST -H 'OPEN-SANDBOX-API-KEY: %s' -H 'Content-Type: "
                 "application/json' -d '%s' 'http://%s/v1/sandboxes'",
                 key, body, fx.domain);
        out[0] = '\0';
        f = popen(cmd, "r");
        if (!f)
                return -1;
        len = fread(out, 1, size - 1, f);
        out[len] = '\0';
        pclose(f);
        if (strrchr(out, '\n'))
                sscanf(strrchr(out, '\n') + 1, "%d", &status);
        return status;
}

/* DEMESNE_OPENSANDBOX_POOL_REF: demesne's creates carry extensions.poolRef
 * as sandbox-lifecycle.yml has it, and the server's refusals are said
 * with the setting's name: the Docker runtime has no pools, and the
 * BatchSandbox provider's pool mode takes no volumes (every sandbox of
 * demesne's has /out and /workspace). The fixture follows the server:
 * a create from a pool without volumes runs, snapshotId beside a poolRef
 * is refused (422). A name that is no Kubernetes name is refused first. */
static void pool_ref(void)
{
        char out[8192], body[512];
        int64_t created = stat_of("created");
        json_object *m, *st;
        struct child *c;
        int status;

        setenv("DEMESNE_OPENSANDBOX_POOL_REF", "warm-python", 1);
        c = serve("0", NULL);
        m = c ? call(c, "sandbox_script", "{\"command\":\"true\"}") : NULL;
        if (!ok(result_error_says(m, "SANDBOX::UNSUPPORTED_POOL_REF") &&
                        result_error_says(m, "from pool 'warm-python' (DEMESNE_OPENSANDBOX_POOL_REF)"),
                "poolRef on a Docker runtime: the server's refusal, naming the setting"))
                diag("%s", m ? json_object_to_json_string(m) : "no answer");
        json_object_put(m);
        st = os_fixture_stats(&fx);
        m = path(st, "pool_refs", NULL, NULL);
        ok(m && json_object_array_length(m) >= 1 &&
                   strcmp(json_object_get_string(json_object_array_get_idx(m, 0)), "warm-python") == 0,
           "the create carried extensions.poolRef 'warm-python'");
        json_object_put(st);

        ok(fixture_post("/fixture/pools?pools=warm-python=localhost/demesne/python:latest") == 0,
           "the fixture answers as the BatchSandbox provider with a pool 'warm-python'");
        m = c ? call(c, "sandbox_script", "{\"command\":\"true\"}") : NULL;
        if (!ok(result_error_says(m, "pool mode takes no volumes") &&
                        result_error_says(m, "unset DEMESNE_OPENSANDBOX_POOL_REF") &&
                        result_error_says(m, "Pool mode does not support volumes"),
                "pool mode with /out and /workspace: refused, saying why and what to do"))
                diag("%s", m ? json_object_to_json_string(m) : "no answer");
        json_object_put(m);
        is_int(stat_of("created"), created, "no sandbox was made for either");
        stop(c);

        /* The fixture as the spec has pool mode: no image, entrypoint or
         * resourceLimits needed; snapshotId must not come with poolRef. */
        status = fixture_create("{\"extensions\":{\"poolRef\":\"warm-python\"},\"snapshotId\":\"s1\"}", out,
                                sizeof(out));
        ok(status == 422 && strstr(out, "snapshotId cannot be used together with poolRef."),
           "the fixture: snapshotId with poolRef is a 422 (%d %.200s)", status, out);
        snprintf(body, sizeof(body), "{\"extensions\":{\"poolRef\":\"warm-python\"},\"metadata\":{\"t\":\"poolref\"}}");
        status = fixture_create(body, out, sizeof(out));
        ok(status == 202 && strstr(out, "\"Pending\""), "the fixture: a create from the pool alone is taken (%d)",
           status);
        {
                int64_t t0 = dm_now_ms();
                char cmd[512];
                int running = 0;

                /* Running once its container started: then it is ours to remove. */
                snprintf(cmd, sizeof(cmd),
                         "curl -s -H 'OPEN-SANDBOX-API-KEY: %s' 'http://%s/v1/sandboxes?metadata=t%%3Dpoolref&state="
                         "Running' | grep -q '\"image\":{\"uri\":\"localhost/demesne/python:latest\"}'",
                         key, fx.domain);
                while (!(running = system(cmd) == 0) && dm_now_ms() - t0 < slack_ms(60000))
                        usleep(100 * 1000);
                ok(running && count_label(engine, "t=poolref") == 1, "and runs a container of the pool's image");
        }
        fixture_post("/fixture/expire?metadata=t%3Dpoolref");
        fixture_post("/fixture/pools?pools=");
        unsetenv("DEMESNE_OPENSANDBOX_POOL_REF");

        setenv("DEMESNE_OPENSANDBOX_POOL_REF", "Warm_Python", 1);
        c = serve("0", NULL);
        m = c ? call(c, "sandbox_script", "{\"command\":\"true\"}") : NULL;
        ok(result_error_says(m, "DEMESNE_OPENSANDBOX_POOL_REF 'Warm_Python'"),
           "a pool name that is no Kubernetes name is refused, named");
        json_object_put(m);
        stop(c);
        unsetenv("DEMESNE_OPENSANDBOX_POOL_REF");
}

int main(void)
{
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        struct dm_error err = { 0 };
        char allowed[PATH_MAX], state_file[PATH_MAX], log[PATH_MAX], runs[MAX_RUNS][64], why[1024];
        struct child *c;
        json_object *m;
        pid_t killed;

        test_env_setup("osbpool");
        snprintf(state_file, sizeof(state_file), "%s/fixture-state.json", test_root);
        snprintf(log, sizeof(log), "%s/serve.log", test_root);
        snprintf(allowed, sizeof(allowed), "%s/allowed", test_root);
        /* Where the run with host inputs takes its file from. */
        if (mkdir(allowed, 0755) < 0 || setenv("DEMESNE_ALLOWED_PATHS", allowed, 1) < 0 ||
            dm_backend_open(&ec, &engine, &err) < 0) {
                printf("Bail out! %s %s\n", allowed, err.msg);
                return 1;
        }
        /* A server with [egress] mode "dns+nft": egress none is sent as a
         * networkPolicy the fixture records. */
        setenv("DEMESNE_OPENSANDBOX_EGRESS", "dns+nft", 1);
        if (os_fixture_start(&fx, key, state_file) < 0) {
                printf("Bail out! the OpenSandbox fixture did not start (node missing?)\n");
                return 1;
        }
        c = serve("2", NULL);
        if (!c) {
                printf("Bail out! cannot start $DEMESNE serve\n");
                os_fixture_stop(&fx);
                return 1;
        }
        warm_and_cold(c);
        doctor_says();
        pool_ref();

        /* Server stop: the idle entries are deleted on the server. */
        is_int(finish(c, 60000), 0, "the server exits cleanly");
        free(c);
        is_int(count_label(engine, fx.label), 0, "no sandbox left in the fixture after the server stopped");

        /* A killed server's entries: the next server's sweep removes them. */
        c = serve("2", NULL);
        is_int(c ? await_ready(c, 2) : -1, 2, "a second server filled its pool");
        killed = c ? c->pid : 0;
        if (c) {
                kill(c->pid, SIGKILL);
                finish(c, 10000);
                free(c);
        }
        is_int(pool_runs(killed, runs), 2, "kill -9 left its two idle sandboxes");
        c = serve("0", NULL);
        {
                int64_t t0 = dm_now_ms();

                /* The sweep runs once the backend is opened: a call does it. */
                m = c ? call(c, "sandbox_list", "{}") : NULL;
                json_object_put(m);
                while (pool_runs(killed, runs) > 0 && dm_now_ms() - t0 < slack_ms(60000))
                        usleep(100 * 1000);
                is_int(pool_runs(killed, runs), 0, "the next server's sweep removed them");
        }
        stop(c);

        /* A sidecar in mode "dns" cannot hold the default egress (none):
         * the pool is off, saying why, and runs that can be held go cold. */
        setenv("DEMESNE_OPENSANDBOX_EGRESS", "dns", 1);
        setenv("DEMESNE_ALLOW_CALLER_EGRESS", "1", 1); /* egress open for the script below */
        c = serve("2", NULL);
        unsetenv("DEMESNE_ALLOW_CALLER_EGRESS");
        {
                int64_t t0 = dm_now_ms();
                int n = 0;

                why[0] = '\0';
                while (c && !why[0] && dm_now_ms() - t0 < slack_ms(60000)) {
                        n = pool_ready(c, why, sizeof(why));
                        usleep(100 * 1000);
                }
                ok(n == 0 && strstr(why, "dns+nft"), "egress dns: the pool is off and says why: %s", why);
        }
        m = c ? call(c, "sandbox_script", "{\"command\":\"" SCRIPT "\",\"egress\":\"open\"}") : NULL;
        if (!ok(m && !result_is_error(m), "egress open (the server's network) runs cold meanwhile"))
                diag("%s", m ? json_object_to_json_string(m) : "no answer");
        else
                same_result(m, "cold, pool off");
        json_object_put(m);
        stop(c);
        setenv("DEMESNE_OPENSANDBOX_EGRESS", "dns+nft", 1);

        /* The server refuses the pool's creates: said once, scripts run
         * cold all the same. */
        ok(fixture_post("/fixture/refuse-creates?metadata=demesne.pool%3Dpython") == 0,
           "the fixture refuses creates for the pool");
        c = serve("2", log);
        {
                int64_t t0 = dm_now_ms();

                why[0] = '\0';
                while (c && pool_ready(c, why, sizeof(why)) == 0 && !why[0] && dm_now_ms() - t0 < slack_ms(60000))
                        usleep(100 * 1000);
                ok(strstr(why, "QUOTA_EXCEEDED") != NULL, "sandbox_list says why the pool is empty: %s", why);
                /* Refused again meanwhile (its retries back off from 1 s). */
                t0 = dm_now_ms();
                while (stat_of("create_refused") < 3 && dm_now_ms() - t0 < slack_ms(30000))
                        usleep(100 * 1000);
                ok(stat_of("create_refused") >= 3, "the pool asked again (%lld refusals)",
                   (long long)stat_of("create_refused"));
        }
        m = c ? call(c, "sandbox_script", "{\"command\":\"" SCRIPT "\"}") : NULL;
        ok(m && !result_is_error(m), "sandbox_script runs cold while the pool is refused");
        if (m)
                same_result(m, "cold, pool refused");
        json_object_put(m);
        stop(c);
        is_int(lines_with(log, "pool: no warm python container"), 1, "the log says why once, not per retry");
        is_int(count_label(engine, fx.label), 0, "nothing left in the fixture");

        os_fixture_stop(&fx);

        /* A server whose maximum TTL is its minimum (60 s): an idle entry
         * is renewed while it waits (at half of what was granted), and
         * still serves a run after. */
        snprintf(state_file, sizeof(state_file), "%s/fixture-state-ttl.json", test_root);
        if (os_fixture_start_with(&fx, key, state_file, true, 60) < 0) {
                printf("Bail out! the OpenSandbox fixture did not start again\n");
                return 1;
        }
        c = serve("1", NULL);
        is_int(c ? await_ready(c, 1) : -1, 1, "max TTL 60 s: one idle sandbox");
        {
                int64_t t0 = dm_now_ms();
                int n = pool_runs(c ? c->pid : 0, runs);

                /* Due 30 s after its create: a liveness bound well past it. */
                while (stat_of("renewed") < 1 && dm_now_ms() - t0 < slack_ms(120000))
                        usleep(200 * 1000);
                ok(stat_of("renewed") >= 1, "the idle sandbox's TTL was renewed while it waited");
                m = c ? call(c, "sandbox_script", "{\"command\":\"" SCRIPT "\"}") : NULL;
                ok(m && n == 1 && among(run_of(m), runs, n), "and a run took it after (%s)", run_of(m));
                if (m)
                        same_result(m, "warm after a renewal");
                json_object_put(m);
        }
        stop(c);
        is_int(count_label(engine, fx.label), 0, "nothing left in that fixture");
        os_fixture_stop(&fx);
        dm_backend_free(engine);
        return done_testing();
}
