/* SPDX-License-Identifier: MIT */
/* The shim's guarantees on persistent sandboxes through `demesne serve`:
 * working directories under /proc are refused on both exec paths, a
 * command posing as the shim gets no commands, a second live server runs
 * nothing (no engine-exec fallback), the engine's exec API (a sandbox made
 * with DEMESNE_SHIM=off) kills a timed-out command's group through a
 * pidfd, and such a sandbox runs nothing once the shim is back on. The attacks that need no server are in
 * test-seccomp.sh. Each case checks that nothing is left behind. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/shim-probes.h"
#include "tests/integration/stdio-client.h"

static struct child *cur;
static int next_id = 1;

static json_object *call(const char *tool, const char *args)
{
        int id = next_id++;
        send_call(cur, id, tool, args);
        return recv_response(cur, id, 120000, NULL);
}

static char *exec_out(const char *sb, const char *cmd)
{
        return sandbox_exec_stdout(call, sb, cmd);
}

static json_object *exec_in(const char *sb, const char *cmd, const char *workdir)
{
        char args[4096];

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"%s\",\"workdir\":\"%s\"}", sb, cmd, workdir);
        return call("sandbox_exec", args);
}

static void create(char *sb, size_t len)
{
        json_object *m = call("sandbox_create", "{\"image\":\"python\"}");

        ok(!result_is_error(m), "sandbox_create");
        snprintf(sb, len, "%s", str_at(structured(m), "sandbox_id"));
        json_object_put(m);
}

static void destroy(struct dm_backend *b, const char *sb)
{
        char args[256], label[128];
        json_object *m;

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sb);
        m = call("sandbox_destroy", args);
        ok(!result_is_error(m), "sandbox_destroy %s", sb);
        json_object_put(m);
        snprintf(label, sizeof(label), "demesne.sandbox=%s", sb);
        is_int(count_label(b, label), 0, "no container of %s is left", sb);
}

static void workdirs(const char *sb)
{
        static const char *const refused[] = { "/proc/self/fd/3", "/proc", "//proc/1/cwd", "/out/../proc/self/cwd" };
        json_object *m;
        char *s;

        for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                m = exec_in(sb, "pwd", refused[i]);
                ok(result_error_says(m, "which is refused: a path there can lead outside the sandbox"),
                   "workdir '%s' is refused", refused[i]);
                json_object_put(m);
        }
        /* A symlink the sandbox made passes the text check: the shim sees
         * where it landed (procfs) and refuses it there. */
        s = exec_out(sb, "ln -sfn /proc/self /workspace/p && echo made");
        is_str(s, "made\n", "a symlink to /proc/self made in the sandbox");
        free(s);
        m = exec_in(sb, "pwd", "/workspace/p/fd");
        ok(result_error_says(m, "which is refused: it can lead outside the sandbox"),
           "workdir through a symlink into /proc is refused by the shim where it landed");
        json_object_put(m);
        m = exec_in(sb, "pwd", "/workspace");
        is_str(str_at(structured(m), "stdout"), "/workspace\n", "an ordinary workdir still works");
        json_object_put(m);
}

static void impostor(const char *sb)
{
        char cmd[2048], *s;
        int good = 0;

        /* In its own session, so it outlives the exec that starts it. */
        snprintf(cmd, sizeof(cmd),
                 "cat > /workspace/imp.py <<'EOF'\n%sEOF\nsetsid -f python3 /workspace/imp.py "
                 "> /workspace/imp.txt 2>&1; echo started",
                 probe_impostor);
        {
                char args[8192];
                json_object *m, *a = json_object_new_string(cmd);

                snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":%s}", sb,
                         json_object_to_json_string(a));
                json_object_put(a);
                m = call("sandbox_exec", args);
                is_str(str_at(structured(m), "stdout"), "started\n", "a command that poses as the shim starts");
                json_object_put(m);
        }
        /* Execs take connections from the socket's queue, the impostor's
         * among them, until it has its answer. */
        for (int i = 0; i < 40; i++) {
                s = exec_out(sb, "cat /workspace/imp.txt");
                good += strcmp(s, "<error>") != 0;
                if (strstr(s, "closed") || strstr(s, "got") || strstr(s, "waited")) {
                        free(s);
                        break;
                }
                free(s);
                usleep(200 * 1000);
        }
        s = exec_out(sb, "cat /workspace/imp.txt");
        /* Dropped when an exec takes it from the queue ("closed"), or left
         * there while execs use the shim's pooled connections ("waited", or
         * nothing yet while its connect waits for room in the backlog):
         * what must never happen is an answer ("got"). */
        ok(!strstr(s, "got") && (strstr(s, "closed") || strstr(s, "waited") || !strstr(s, "connected")),
           "the forged HELLO is never given a command: '%s'", s);
        free(s);
        ok(good > 0, "commands meanwhile ran through the real shim (%d)", good);
        s = exec_out(sb, "pgrep -c -f [i]mp.py || true");
        is_str(s, "0\n", "the impostor is gone");
        free(s);
}

int main(void)
{
        struct dm_backend *b;
        struct child *a = calloc(1, sizeof(*a)), *second = calloc(1, sizeof(*second));
        const char *env[] = { "DEMESNE_SANDBOX_SWEEP_SECONDS=1", NULL };
        const char *env_off[] = { "DEMESNE_SANDBOX_SWEEP_SECONDS=1", "DEMESNE_SHIM=off", NULL };
        char cmd[PATH_MAX + 128], args[512], sb[64], sb_off[64];
        json_object *m;
        char *s;

        b = serve_start("seccomp", a, env);
        cur = a;
        create(sb, sizeof(sb));
        workdirs(sb);
        impostor(sb);
        /* A run (the pool warm by now: its containers are a run's) has
         * demesne's two filters and no engine profile, PID 1 and command. */
        m = call("sandbox_script", "{\"command\":\"grep -h Seccomp_filters /proc/1/status /proc/self/status\"}");
        is_str(str_at(structured(m), "stdout"), "Seccomp_filters:\t2\nSeccomp_filters:\t2\n",
               "a run's PID 1 and command: demesne's 2 filters, no engine profile");
        json_object_put(m);

        /* A second live server: the first holds the shim's socket, and the
         * engine's exec API could start the shim only by a path the
         * sandbox can change, so it runs nothing (the planted-program
         * attack on that path is in test-execenv). */
        spawn(second, env);
        cur = second;
        m = exec_in(sb, "echo ran", "/out");
        ok(result_error_says(m, "another live demesne server holds this sandbox's demesne-shim"),
           "a second live server refuses the engine-exec fallback");
        json_object_put(m);
        is_int(finish(second, 20000), 0, "the second server exits");

        /* A sandbox made while the shim was off has no filter to offer: once
         * the shim is on again, it runs nothing. */
        cur = a;
        is_int(finish(a, 20000), 0, "the first server exits");
        spawn(a, env_off);
        create(sb_off, sizeof(sb_off));
        s = exec_out(sb_off, "echo unfiltered");
        is_str(s, "unfiltered\n", "with DEMESNE_SHIM=off a sandbox runs commands");
        free(s);
        /* Its commands go through the engine's exec API. */
        m = exec_in(sb_off, "pwd", "/proc/self/fd/7");
        ok(result_error_says(m, "which is refused: a path there can lead outside the sandbox"),
           "the engine-exec path refuses a /proc workdir before the runtime resolves it");
        json_object_put(m);
        snprintf(args, sizeof(args),
                 "{\"sandbox_id\":\"%s\",\"command\":\"sleep 301 & sleep 302\",\"timeout_seconds\":1}", sb_off);
        m = call("sandbox_exec", args);
        ok(json_object_get_boolean(path(structured(m), "timed_out", NULL, NULL)),
           "a timeout on the engine-exec path: timed_out");
        json_object_put(m);
        s = exec_out(sb_off, "pgrep -c -f '^sleep 30[12]' || true");
        is_str(s, "0\n", "the group was killed through its pidfd: nothing of it is left");
        free(s);
        is_int(finish(a, 20000), 0, "the DEMESNE_SHIM=off server exits");
        spawn(a, env);
        s = exec_out(sb_off, "echo should-not-run");
        is_str(s, "<error>", "with the shim on again, that sandbox's commands are refused");
        free(s);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"true\"}", sb_off);
        m = call("sandbox_exec", args);
        ok(result_error_says(m, "was created without demesne-shim"), "and the error says why and names DEMESNE_SHIM");
        json_object_put(m);

        destroy(b, sb_off);
        destroy(b, sb);
        is_int(finish(a, 20000), 0, "the server exits");
        snprintf(cmd, sizeof(cmd), "pgrep -f '^sleep 30[12]' >/dev/null");
        ok(system(cmd) != 0, "no process of the sandboxes is left on the host");
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s/state/work' 2>/dev/null)\"", test_root);
        ok(system(cmd) == 0, "no scratch directory is left");
        dm_backend_free(b);
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_root);
        if (system(cmd) != 0)
                diag("could not remove %s", test_root);
        free(a);
        free(second);
        return done_testing();
}
