/* SPDX-License-Identifier: MIT */
/* What a caller's env can reach, and the engine-exec fallback, attacked
 * through `demesne serve` on real Podman:
 * - LD_* and GLIBC_TUNABLES in `env` are refused by every tool that takes
 *   env, by name, and nothing is made;
 * - a cold run's env reaches its command but not PID 1 (demesne-shim),
 *   read from the host's /proc while the run waits;
 * - a sandbox renames /run and plants a program at /run/demesne-shim, the
 *   path the engine-exec fallback started; a second live server (which
 *   takes that fallback) runs nothing, with an error that says why, and
 *   the planted program never runs. Each case checks nothing is left. */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/integration/stdio-client.h"

static struct child *cur;
static int next_id = 1;

static json_object *call(const char *tool, const char *args)
{
        return call_tool(cur, &next_id, tool, args);
}

static char *exec_out(const char *sb, const char *cmd)
{
        return sandbox_exec_stdout(call, sb, cmd);
}

static long entries(const char *dir)
{
        DIR *d = opendir(dir);
        struct dirent *e;
        long n = 0;

        if (!d)
                return 0;
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        return n;
}

static void refused_env(struct dm_backend *b, const char *sb)
{
        static const struct {
                const char *tool, *name, *args;
        } cases[] = {
                { "sandbox_script", "LD_PRELOAD",
                  "{\"command\":\"true\",\"env\":{\"A\":\"1\",\"LD_PRELOAD\":\"/x.so\"}}" },
                { "sandbox_script", "GLIBC_TUNABLES",
                  "{\"command\":\"true\",\"env\":{\"GLIBC_TUNABLES\":\"glibc.malloc.check=3\"}}" },
                { "sandbox_create", "GLIBC_TUNABLES",
                  "{\"image\":\"base\",\"env\":{\"GLIBC_TUNABLES\":\"glibc.malloc.mxfast=0\"}}" },
                { "sandbox_create", "LD_LIBRARY_PATH", "{\"image\":\"base\",\"env\":{\"LD_LIBRARY_PATH\":\"/tmp\"}}" },
                { "sandbox_exec", "LD_AUDIT", NULL },
        };
        char outroot[PATH_MAX], args[512];
        long before;

        snprintf(outroot, sizeof(outroot), "%s/out", test_root);
        before = entries(outroot);
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *a = cases[i].args;
                char want[128];
                json_object *m;

                if (!a) {
                        snprintf(args, sizeof(args),
                                 "{\"sandbox_id\":\"%s\",\"command\":\"touch /workspace/audited\","
                                 "\"env\":{\"LD_AUDIT\":\"/x.so\"}}",
                                 sb);
                        a = args;
                }
                snprintf(want, sizeof(want), "'env' key '%s' is refused", cases[i].name);
                m = call(cases[i].tool, a);
                ok(result_error_says(m, want), "%s: env %s is refused by name", cases[i].tool, cases[i].name);
                json_object_put(m);
        }
        is_int(entries(outroot), before, "no output directory was made for a refused call");
        is_int(containers_of(b, cur->pid), 0, "no container was made for a refused call");
        {
                char *s = exec_out(sb, "test -e /workspace/audited && echo ran || echo not-run");
                is_str(s, "not-run\n", "the refused sandbox_exec ran nothing");
                free(s);
        }
}

/* The container of this server's one running script run: its run id and
 * the host pid of its PID 1. */
static bool running_run(struct dm_backend *b, pid_t server, char *run_id, size_t len, int *ret_pid)
{
        struct dm_error err = { 0 };
        char **ids = NULL;
        size_t n = 0;
        bool found = false;

        if (b->ops->list(b, "demesne.run", &ids, &n, &err) < 0)
                return false;
        for (size_t i = 0; i < n; i++) {
                struct dm_container_info info = { 0 };
                const char *run;

                if (!found && b->ops->inspect(b, ids[i], &info, &err) == 0) {
                        if (owned_by(&info, server, &run) && run && info.running && info.pid > 0) {
                                snprintf(run_id, len, "%s", run);
                                *ret_pid = info.pid;
                                found = true;
                        }
                        dm_container_info_release(&info);
                }
                free(ids[i]);
        }
        free(ids);
        return found;
}

/* PID 1's environment as the host's /proc has it, NULs made newlines. */
static char *environ_of(int pid)
{
        char p[64], *s = NULL;
        size_t len = 0;
        FILE *f;
        int c;

        snprintf(p, sizeof(p), "/proc/%d/environ", pid);
        f = fopen(p, "re");
        if (!f)
                return strdup("");
        {
                FILE *o = open_memstream(&s, &len);
                while ((c = fgetc(f)) != EOF)
                        fputc(c ? c : '\n', o);
                fclose(o);
        }
        fclose(f);
        return s;
}

static void cold_env(struct dm_backend *b)
{
        char run_id[128] = "", go[PATH_MAX + 160], *env1 = NULL;
        int pid = 0, id = next_id++, fd;
        int64_t deadline = dm_now_ms() + 120000;
        json_object *m;

        send_call(cur, id, "sandbox_script",
                  "{\"command\":\"echo \\\"v=$DM_EXECENV_PROBE\\\"; while [ ! -e /out/go ]; do sleep 0.1; done\","
                  "\"env\":{\"DM_EXECENV_PROBE\":\"seen-by-the-command\"},\"timeout_seconds\":300}");
        while (!running_run(b, cur->pid, run_id, sizeof(run_id), &pid) && dm_now_ms() < deadline)
                usleep(200 * 1000);
        ok(pid > 0, "the cold run's container is running (%s)", run_id);
        if (pid > 0) {
                env1 = environ_of(pid);
                ok(strstr(env1, "PATH=") != NULL, "PID 1's environment is read from the host");
                ok(!strstr(env1, "DM_EXECENV_PROBE"), "PID 1 (demesne-shim) does not have the caller's env");
                if (strstr(env1, "DM_EXECENV_PROBE"))
                        diag("PID 1's environment: %s", env1);
                free(env1);
                snprintf(go, sizeof(go), "%s/out/%s/go", test_root, run_id);
                fd = open(go, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
                ok(fd >= 0, "the run is let go");
                if (fd >= 0)
                        close(fd);
        }
        m = recv_response(cur, id, 300000, NULL);
        is_str(str_at(structured(m), "stdout"), "v=seen-by-the-command\n", "the command has the caller's env");
        json_object_put(m);
}

static void planted_shim(const char *sb, struct child *second)
{
        static const char *const env[] = { "DEMESNE_SANDBOX_SWEEP_SECONDS=1", NULL };
        char args[512], *s;
        json_object *m;

        /* What the sandbox can do to the old fallback's path: rename /run
         * (vfs and other drivers allow it; overlayfs without redirect_dir
         * refuses a directory of the image with EXDEV) and put its own
         * program at /run/demesne-shim. Either way the fallback must not
         * run anything. */
        s = exec_out(sb, "python3 -c 'import os\\n"
                         "try:\\n os.rename(\\\"/run\\\", \\\"/run.x\\\"); os.mkdir(\\\"/run\\\")\\n"
                         "except OSError as e: print(\\\"rename refused:\\\", e.strerror)' ; "
                         "printf '#!/bin/sh\\\\necho PLANTED > /workspace/planted\\\\n' > /run/demesne-shim "
                         "2>/dev/null && chmod 755 /run/demesne-shim && echo planted at /run/demesne-shim; "
                         "printf '#!/bin/sh\\\\necho PLANTED > /workspace/planted\\\\n' > /workspace/demesne-shim && "
                         "chmod 755 /workspace/demesne-shim && echo planted in /workspace");
        ok(strstr(s, "planted in /workspace") != NULL, "the sandbox plants its program where it can: %s", s);
        free(s);

        spawn(second, env);
        cur = second;
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"echo ran > /workspace/ran\"}", sb);
        m = call("sandbox_exec", args);
        ok(result_error_says(m, "another live demesne server holds this sandbox's demesne-shim"),
           "a second live server runs nothing through the engine's exec API, and says why");
        json_object_put(m);
        is_int(finish(second, 20000), 0, "the second server exits");
        cur = NULL;
}

int main(void)
{
        struct dm_backend *b;
        struct child *a = calloc(1, sizeof(*a)), *second = calloc(1, sizeof(*second));
        const char *env[] = { "DEMESNE_SANDBOX_SWEEP_SECONDS=1", "DEMESNE_POOL=0", NULL };
        char args[256], sb[64], label[128], cmd[PATH_MAX + 64];
        json_object *m;
        char *s;

        b = serve_start("execenv", a, env);
        cur = a;
        m = call("sandbox_create", "{\"image\":\"python\"}");
        ok(!result_is_error(m), "sandbox_create");
        snprintf(sb, sizeof(sb), "%s", str_at(structured(m), "sandbox_id"));
        json_object_put(m);

        refused_env(b, sb);
        cold_env(b);
        planted_shim(sb, second);

        cur = a;
        s = exec_out(sb, "ls /workspace/planted /workspace/ran 2>&1 | grep -c 'No such file'");
        is_str(s, "2\n", "neither the planted program nor the command ran");
        free(s);
        s = exec_out(sb, "sed -n 's/^Seccomp_filters:[[:space:]]*//p' /proc/self/status");
        is_str(s, "3\n", "through its own server the sandbox's commands run under demesne's filters");
        free(s);

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sb);
        m = call("sandbox_destroy", args);
        ok(!result_is_error(m), "sandbox_destroy");
        json_object_put(m);
        snprintf(label, sizeof(label), "demesne.sandbox=%s", sb);
        is_int(count_label(b, label), 0, "no container of the sandbox is left");
        is_int(containers_of(b, a->pid), 0, "no container of the run is left");
        is_int(finish(a, 20000), 0, "the server exits");
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s/state/work' 2>/dev/null)\"", test_root);
        ok(system(cmd) == 0, "no scratch directory is left");
        dm_backend_free(b);
        free(a);
        free(second);
        return done_testing();
}
