/* SPDX-License-Identifier: MIT */
/* The warm pool (src/core/pool.h) through `demesne serve` over stdio against the
 * real engine: the pool fills; a sandbox_script takes one of its containers
 * (never used before), with its environment, /out and egress attached at
 * the claim; the pool fills again; a run with host inputs makes its own;
 * nothing is left at exit, nor after a kill -9 once the next server sweeps. */
#include "config.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/integration/stdio-client.h"
#include "tests/integration/engine-env.h"

#define MAX_RUNS 8

static struct child *c;
static int next_id = 1;
static struct dm_backend *b;

static json_object *call(const char *tool, const char *args)
{
        int id = next_id++;

        send_call(c, id, tool, args);
        return recv_response(c, id, 180000, NULL);
}

/* The run ids of the warm containers of server pid, from their labels. */
static int pool_runs(pid_t pid, char runs[MAX_RUNS][64])
{
        return pool_runs_of(b, pid, runs, MAX_RUNS);
}

/* Waits up to 90 s (a first start of the image on a busy machine) for the
 * server's pool to hold want containers. */
static int await_pool(pid_t pid, int want, char runs[MAX_RUNS][64])
{
        int64_t t0 = dm_now_ms();
        int n;

        while ((n = pool_runs(pid, runs)) != want && dm_now_ms() - t0 < 90000)
                usleep(200 * 1000);
        return n;
}

/* A run's container goes after its result: until then it still carries
 * the pool's label. */
static void await_gone(const char *run)
{
        char label[96];
        int64_t t0 = dm_now_ms();

        snprintf(label, sizeof(label), "demesne.run=%s", run);
        while (count_label(b, label) > 0 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
}

static bool among(const char *run, char runs[MAX_RUNS][64], int n)
{
        for (int i = 0; i < n; i++)
                if (strcmp(runs[i], run) == 0)
                        return true;
        return false;
}

/* The run directories in the output root. */
static int run_dirs(void)
{
        char root[PATH_MAX];
        DIR *d;
        struct dirent *e;
        int n = 0;

        snprintf(root, sizeof(root), "%s", getenv("DEMESNE_OUTPUT_ROOT"));
        d = opendir(root);
        if (!d)
                return 0;
        while ((e = readdir(d)))
                n += strncmp(e->d_name, "run-", 4) == 0;
        closedir(d);
        return n;
}

static const char *run_of(json_object *m)
{
        const char *dir = str_at(structured(m), "output_dir"), *slash = dir ? strrchr(dir, '/') : NULL;

        return slash ? slash + 1 : "";
}

int main(void)
{
        struct dm_error err = { 0 };
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        const char *env[] = { "DEMESNE_POOL=2", NULL };
        char runs[MAX_RUNS][64], again[MAX_RUNS][64], input[PATH_MAX], args[PATH_MAX + 256];
        json_object *m;
        const char *out;
        int n;

        test_env_setup("pool");
        /* Host inputs are taken from here only. */
        setenv("DEMESNE_ALLOWED_PATHS", test_root, 1);
        c = calloc(1, sizeof(*c));
        if (dm_backend_open(&ec, &b, &err) < 0 || spawn(c, env) < 0) {
                printf("Bail out! %s\n", err.msg[0] ? err.msg : "cannot start $DEMESNE serve");
                return 1;
        }

        /* It fills by itself, and sandbox_list says so. */
        n = await_pool(c->pid, 2, runs);
        is_int(n, 2, "the pool holds two warm python containers");
        /* The engine lists a container before its shim has connected:
         * ready counts only those whose shim has. */
        {
                int64_t t0 = dm_now_ms();

                for (;;) {
                        m = call("sandbox_list", "{}");
                        if (json_object_get_int(path(structured(m), "pool", "ready", NULL)) == 2 ||
                            dm_now_ms() - t0 > 90000)
                                break;
                        json_object_put(m);
                        usleep(200 * 1000);
                }
        }
        ok(json_object_get_int(path(structured(m), "pool", "ready", NULL)) == 2 &&
                   !strcmp(str_at(path(structured(m), "pool", NULL, NULL), "image"), "python"),
           "sandbox_list shows the pool: %s", json_object_to_json_string(path(structured(m), "pool", NULL, NULL)));
        json_object_put(m);

        /* A script takes one: its environment, /out, a container no command
         * ran in, and the default egress attached at the claim. */
        m = call("sandbox_script",
                 "{\"command\":\"echo $GREETING; pwd; ls -A /workspace | wc -l; ls -A /tmp | wc -l; "
                 "ps -e --no-headers -o comm > /tmp/ps; sort /tmp/ps | tr '\\\\n' ' '; echo; "
                 "ls -l /proc/[0-9]*/fd/4 2>/dev/null | grep -c demesne-shim-command; echo made > /out/made.txt; "
                 "[ -n \\\"$HTTP_PROXY\\\" ] && echo proxy\",\"env\":{\"GREETING\":\"hello\"}}");
        ok(m && !result_is_error(m) && json_object_get_int(path(structured(m), "exit_code", NULL, NULL)) == 0,
           "sandbox_script runs");
        ok(among(run_of(m), runs, 2), "in a warm container of the pool (%s)", run_of(m));
        out = str_at(structured(m), "stdout");
        ok(out && strncmp(out, "hello\n/out\n", 11) == 0, "with the caller's environment, in /out: %s", out ? out : "");
        ok(out && strncmp(out, "hello\n/out\n0\n0\n", 15) == 0,
           "/workspace and /tmp are empty: nothing ran there before");
        /* ps writes to a file: in a pipe, the next process may or may not
         * have started when it reads /proc. */
        /* And the shim's idle warm shell (this request, with its own env,
         * did not fit it): one bash that holds the shim's memfd. */
        ok(out && (strstr(out, "\nbash demesne-shim ps \n0\n") || strstr(out, "\nbash bash demesne-shim ps \n1\n")),
           "no process but the shim, its warm shell and the command's own: %s", out ? out : "");
        ok(out && strstr(out, "proxy\n") != NULL, "the default egress (package-managers) is attached: HTTP_PROXY set");
        {
                char f[PATH_MAX + 16];
                struct stat st;

                snprintf(f, sizeof(f), "%s/made.txt", str_at(structured(m), "output_dir"));
                ok(stat(f, &st) == 0, "what it wrote is in its output directory on the host");
        }
        await_gone(run_of(m));
        json_object_put(m);

        /* The pool fills again, with a new container. */
        n = await_pool(c->pid, 2, again);
        ok(n == 2 && among(again[0], runs, 2) + among(again[1], runs, 2) == 1, "the pool fills again (%d)", n);

        /* egress none: no proxy, no network. */
        m = call("sandbox_script", "{\"command\":\"echo \\\"[$HTTP_PROXY]\\\"; ls /sys/class/net | tr '\\\\n' ' '\","
                                   "\"egress\":\"none\"}");
        out = str_at(structured(m), "stdout");
        ok(out && strcmp(out, "[]\nlo ") == 0 && among(run_of(m), again, 2),
           "egress none in a warm container: no proxy, lo only (%s)", out ? out : "");
        await_gone(run_of(m));
        json_object_put(m);

        /* Host inputs are mounted at create: that run makes its own. */
        snprintf(input, sizeof(input), "%s/input.txt", test_root);
        {
                FILE *f = fopen(input, "w");

                if (f) {
                        fputs("from the host\n", f);
                        fclose(f);
                }
        }
        await_pool(c->pid, 2, again);
        snprintf(args, sizeof(args), "{\"command\":\"cat /in/input.txt\",\"files\":[\"%s\"]}", input);
        m = call("sandbox_script", args);
        ok(!strcmp(str_at(structured(m), "stdout"), "from the host\n") && !among(run_of(m), again, 2),
           "a run with host inputs makes its own container (%s)", run_of(m));
        if (result_is_error(m))
                diag("%s", json_object_to_json_string(m));
        json_object_put(m);

        /* At exit the warm containers and their empty directories go. */
        await_pool(c->pid, 2, again);
        pid_t first = c->pid;
        is_int(finish(c, 30000), 0, "the server exits");
        is_int(containers_of(b, first), 0, "no container of it is left");
        is_int(run_dirs(), 3, "only the three runs' output directories are left");

        /* Killed with -9: the next server sweeps the warm containers. */
        spawn(c, env);
        n = await_pool(c->pid, 2, runs);
        is_int(n, 2, "a second server fills its pool");
        pid_t killed = c->pid;
        kill(killed, SIGKILL);
        waitpid(killed, NULL, 0);
        is_int(containers_of(b, killed), 2, "killed with -9, it leaves them behind");
        {
                const char *env0[] = { "DEMESNE_POOL=0", NULL };

                spawn(c, env0);
                m = call("sandbox_list", "{}");
                ok(m && !path(structured(m), "pool", NULL, NULL), "DEMESNE_POOL=0: no pool");
                json_object_put(m);
                int64_t t0 = dm_now_ms();
                while (containers_of(b, killed) > 0 && dm_now_ms() - t0 < slack_ms(60000))
                        usleep(250 * 1000);
                is_int(containers_of(b, killed), 0, "the next server removes them");
                t0 = dm_now_ms();
                while (run_dirs() > 3 && dm_now_ms() - t0 < slack_ms(60000))
                        usleep(250 * 1000);
                is_int(run_dirs(), 3, "and their empty output directories");
                is_int(finish(c, 30000), 0, "that server exits");
        }
        return done_testing();
}
