/* SPDX-License-Identifier: MIT */
/* The shim's warm shell (src/shim/warm.c) through `demesne serve` and a
 * persistent sandbox on the real engine: a sandbox_exec that fits runs in
 * the bash the shim started ahead of time, and shows what `bash -c CMD`
 * would (compared with the cold path, which a request with stdin takes);
 * then the attacks: kill -9 -1, pkill bash, fd 3 closed and read, exec,
 * a child left in the background, back to back and 6 at once, the pids cap
 * 1 over, a command past the warm size, bytes that are not text, NUL,
 * exit 300, set -e, and a request of another shape twice in a row. The
 * server runs with DEMESNE_PIDS_LIMIT=16, the smallest it allows. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/stdio-client.h"

#define PIDS 16

static struct child *c;
static int next_id = 1;
static char sb[64];

struct res {
        char *out, *err;
        int exit_code;
        bool error, timed_out;
};

static void res_free(struct res *r)
{
        free(r->out);
        free(r->err);
}

/* sandbox_exec of cmd in workdir (NULL: the default), with timeout_s
 * (0: the default); cold forces the cold path (a request with stdin);
 * env_json, when set, is the request's "env" object. */
static struct res exec_at(const char *cmd, const char *workdir, int timeout_s, bool cold, const char *env_json)
{
        json_object *a = json_object_new_object(), *m;
        struct res r = { 0 };

        json_object_object_add(a, "sandbox_id", json_object_new_string(sb));
        json_object_object_add(a, "command", json_object_new_string(cmd));
        if (cold)
                json_object_object_add(a, "stdin", json_object_new_string("\n"));
        if (env_json)
                json_object_object_add(a, "env", json_tokener_parse(env_json));
        if (workdir)
                json_object_object_add(a, "workdir", json_object_new_string(workdir));
        if (timeout_s)
                json_object_object_add(a, "timeout_seconds", json_object_new_int(timeout_s));
        m = call_tool(c, &next_id, "sandbox_exec", json_object_to_json_string(a));
        json_object_put(a);
        r.error = result_is_error(m);
        if (r.error)
                diag("sandbox_exec '%.60s': %s", cmd, m ? json_object_to_json_string(m) : "no response");
        r.out = strdup(str_at(structured(m), "stdout"));
        r.err = strdup(str_at(structured(m), "stderr"));
        r.exit_code = (int)int_at(structured(m), "exit_code");
        r.timed_out = json_object_get_boolean(path(structured(m), "timed_out", NULL, NULL));
        json_object_put(m);
        return r;
}

static struct res exec3(const char *cmd, bool cold, const char *env_json)
{
        return exec_at(cmd, NULL, 0, cold, env_json);
}

/* Whether the next fitting command runs in the warm shell: its bash's
 * command line is the bootstrap (spelled so that this command's own text
 * does not match). */
static bool warm_hit(const char *env_json)
{
        struct res r = exec3("x=BASH_EXECUTION; grep -c \"$x\"_STRING /proc/$$/cmdline || true", false, env_json);
        bool yes = strcmp(r.out, "1\n") == 0;

        res_free(&r);
        return yes;
}

/* cmd warm and cold: stdout, stderr and exit code must be the same. */
static void same(const char *cmd, const char *what)
{
        struct res w, k;

        ok(warm_hit(NULL), "%s: the warm shell is there", what);
        w = exec3(cmd, false, NULL);
        k = exec3(cmd, true, NULL);
        ok(!w.error && !k.error && strcmp(w.out, k.out) == 0 && strcmp(w.err, k.err) == 0 && w.exit_code == k.exit_code,
           "%s: as bash -c shows it (exit %d)", what, w.exit_code);
        if (strcmp(w.out, k.out) != 0 || strcmp(w.err, k.err) != 0)
                diag("warm '%s' / '%s', cold '%s' / '%s'", w.out, w.err, k.out, k.err);
        res_free(&w);
        res_free(&k);
}

static void test_same(void)
{
        /* A pipeline: bash forks env in both paths; alone, bash -c execs
         * it in place (see the reference page for the lists where SHLVL
         * still differs). */
        same("env | sort", "the environment, SHLVL, PWD and _ included");
        same("env", "a program bash -c execs in place: the environment, SHLVL 0 and _ included");
        same("printenv SHLVL PWD", "the same with arguments");
        same("/usr/bin/printenv SHLVL", "the same by its path");
        same("set | grep -v '^PIPESTATUS='", "every shell variable (none of the bootstrap's)");
        same("echo \"$0|$_|$#|$-|$BASH_EXECUTION_STRING|$LINENO\"", "$0, $_, $#, $-, BASH_EXECUTION_STRING, LINENO");
        same("ls /proc/self/fd; ls /proc/$$/fd; true", "descriptors: 0-2 only, fd 3 and 4 closed");
        /* What a command inherits (its own status: the mask bash restores
         * for its children), and bash's ignored signals. Not bash's own
         * SigBlk: read while bash forks a pipeline, it holds SIGCHLD and at
         * moments SIGINT and SIGTERM too: under load the warm and the cold
         * run read it at different moments (dockerd, 4 tests at once). */
        same("trap -p; ulimit -a; grep -E '^(Sig(Blk|Ign)|NoNewPrivs|Seccomp)' /proc/self/status; "
             "grep '^SigIgn' /proc/$$/status; ps -o ni= $$",
             "signal dispositions, limits, filter and nice value");
        same("echo $(( $(ps -o pgid= $$) == $$ ))", "its own process group");
        same("exit 300", "exit 300");
        same("set -e; false; echo not reached", "set -e");
        same("exec 3<&-; echo closed", "exec 3<&-");
        same("cat <&3", "reading fd 3");
        same("cat <&4; read -r x <&3", "reading fd 4");
        same("exec sh -c 'exit 3'", "exec");
        same("printf '%s' \"caf\xc3\xa9 \x01\x7f\" | od -An -tx1", "bytes that are not text");
        same("nosuchcommand", "a missing command");
        same("kill -TERM $$", "a signal to itself");
}

/* Six at once into one sandbox: one finds the warm shell, the others go cold. */
static void test_at_once(void)
{
        int good = 0, answers = 0;

        for (int i = 0; i < 6; i++) {
                char args[256];

                snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"sleep 0.3; echo at-once%d\"}", sb,
                         i);
                send_call(c, 5000 + i, "sandbox_exec", args);
        }
        /* The answers in any order: each stdout says which call it was. */
        good = 0;
        while (answers < 6) {
                json_object *m = recv_msg(c, 120000);
                int id = m && path(m, "id", NULL, NULL) ? json_object_get_int(path(m, "id", NULL, NULL)) : -1, i = -1;

                if (!m)
                        break;
                answers += id >= 5000 && id < 5006;
                good += id >= 5000 && !result_is_error(m) &&
                        sscanf(str_at(structured(m), "stdout"), "at-once%d", &i) == 1 && id == 5000 + i;
                json_object_put(m);
        }
        is_int(good, 6, "6 at once, each its own output");
}

static void test_attacks(void)
{
        struct res r;
        char *big;
        int good = 0;

        /* Every process but the shim (PID 1) and the caller itself: there
         * is no other in the warm path (kill says ESRCH), the idle warm
         * shell in the cold one. */
        ok(warm_hit(NULL), "kill -9 -1: the warm shell is there");
        r = exec3("kill -9 -1; echo survived", false, NULL);
        ok(!r.error && strcmp(r.out, "survived\n") == 0 && r.exit_code == 0, "kill -9 -1 in the warm shell");
        res_free(&r);
        r = exec3("kill -9 -1; echo survived", true, NULL);
        ok(!r.error && strcmp(r.out, "survived\n") == 0 && r.exit_code == 0, "kill -9 -1 beside it, cold");
        res_free(&r);
        r = exec3("echo next", false, NULL);
        is_str(r.out, "next\n", "the next command runs");
        res_free(&r);
        ok(warm_hit(NULL), "and a warm shell is back after it");

        r = exec3("pkill bash; echo survived", false, NULL);
        ok(!r.error && !strstr(r.out, "survived"), "pkill bash ends the command (exit %d)", r.exit_code);
        res_free(&r);
        r = exec3("echo next", false, NULL);
        is_str(r.out, "next\n", "the next command runs after pkill bash");
        res_free(&r);

        /* The group goes with the command, warm or cold. */
        r = exec3("sleep 302 & echo started", false, NULL);
        is_str(r.out, "started\n", "a child left in the background");
        res_free(&r);
        r = exec3("pgrep -c -f '^sleep 302' || true", false, NULL);
        is_str(r.out, "0\n", "is gone with the command's group");
        res_free(&r);

        /* Back to back: each finds the warm shell or the cold path, and its own output. */
        for (int i = 0; i < 10; i++) {
                char cmd[64], want[32];

                snprintf(cmd, sizeof(cmd), "echo back%d", i);
                snprintf(want, sizeof(want), "back%d\n", i);
                r = exec3(cmd, false, NULL);
                good += !r.error && strcmp(r.out, want) == 0;
                res_free(&r);
        }
        is_int(good, 10, "10 commands back to back");

        /* Past the warm shell's size: cold, and the same. */
        big = malloc(100 * 1024 + 64);
        memset(big, ' ', 100 * 1024);
        strcpy(big + 100 * 1024, "echo big");
        r = exec3(big, false, NULL);
        is_str(r.out, "big\n", "a 100 KiB command runs (cold)");
        res_free(&r);
        free(big);

        /* NUL: refused before the shim, as it was. */
        {
                char args[256];
                json_object *m;

                snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"echo a\\u0000b\"}", sb);
                m = call_tool(c, &next_id, "sandbox_exec", args);
                ok(result_is_error(m) || strcmp(str_at(structured(m), "stdout"), "a\n") != 0,
                   "a NUL in the command is not cut there: %s", m ? json_object_to_json_string(m) : "none");
                json_object_put(m);
        }
        ok(warm_hit(NULL), "the warm shell still serves");

        /* Another command stops the idle warm shell, or stops it and fills
         * its fd 3 through /proc: the next command still runs, and the shim
         * is not held up (the token write does not block). */
        static const struct {
                const char *then, *said, *what;
        } harm[] = {
                { "echo stopped", "stopped\n", "a command stops the idle warm shell" },
                { "python3 -c 'import os,sys\nfd=os.open(sys.argv[1],os.O_WRONLY|os.O_NONBLOCK)\n"
                  "try:\n  while True: os.write(fd,b\"x\"*4096)\nexcept BlockingIOError: print(\"full\")' $w/fd/3",
                  "full\n", "a command stops it and fills its fd 3" },
        };
        for (size_t i = 0; i < sizeof(harm) / sizeof(*harm); i++) {
                char cmd[1024];

                snprintf(cmd, sizeof(cmd),
                         "for p in /proc/[0-9]*; do case $(readlink $p/fd/4) in *demesne-shim-command*) w=$p;; esac; "
                         "done; kill -STOP ${w#/proc/}; %s",
                         harm[i].then);
                r = exec3(cmd, true, NULL);
                is_str(r.out, harm[i].said, "%s", harm[i].what);
                res_free(&r);
                r = exec3("echo after", false, NULL);
                is_str(r.out, "after\n", "the next command runs all the same");
                res_free(&r);
        }
        ok(warm_hit(NULL) || warm_hit(NULL), "and a warm shell serves again");
}

static void test_pids(void)
{
        /* shim + this bash + 14 sleeps = the cap: in the warm shell the
         * command has what bash -c has... */
        const char *fits = "for i in $(seq 14); do sleep 2 & done 2>&1; wait; echo done";
        /* Over the cap for the engine's pids cgroup (which counts the shim)
         * and for the shim's own count (which does not): a fork fails, or
         * the shim stops the command (rootless Podman on cgroup v1). */
        const char *over = "for i in $(seq 16); do sleep 2 & done 2>&1; wait; echo done";
        struct res r;

        ok(warm_hit(NULL), "pids: the warm shell is there");
        r = exec3(fits, false, NULL);
        ok(!r.error && strcmp(r.out, "done\n") == 0, "warm, the cap exactly: every fork succeeds ('%s')", r.out);
        res_free(&r);
        ok(warm_hit(NULL), "pids: the warm shell is back");
        r = exec3(over, false, NULL);
        ok(!r.error && (strstr(r.out, "fork") != NULL || r.exit_code >= 128),
           "warm, over the cap: a fork fails or the shim stops it (exit %d, '%.80s')", r.exit_code, r.out);
        res_free(&r);
        /* ...and a cold command beside an idle warm shell has one fewer. */
        r = exec3("for i in $(seq 13); do sleep 2 & done 2>&1; wait; echo done", true, NULL);
        ok(!r.error && strcmp(r.out, "done\n") == 0, "cold beside the idle warm shell: 1 fewer ('%s')", r.out);
        res_free(&r);
}

static void test_shape(void)
{
        struct res r;

        /* Another environment: cold twice, then the warm shell is made for it. */
        r = exec3("echo $X", false, "{\"X\":\"one\"}");
        is_str(r.out, "one\n", "a request with its own env");
        res_free(&r);
        ok(warm_hit(NULL), "the warm shell made for the defaults stayed");
        r = exec3("echo $X", false, "{\"X\":\"one\"}");
        res_free(&r);
        r = exec3("echo $X", false, "{\"X\":\"one\"}");
        res_free(&r);
        ok(warm_hit("{\"X\":\"one\"}"), "two in a row: the next warm shell has their env");
        r = exec3("echo \"[$X]\"", false, NULL);
        is_str(r.out, "[]\n", "and a request without it does not see it");
        res_free(&r);
}

/* The warm shell's command is the group's leader: a timeout and a cancel
 * end it and what it started. */
static void test_stop(void)
{
        char args[256];
        struct res r;

        /* After test_shape the warm shell has X's env: two requests
         * without it make the next one theirs. */
        for (int i = 0; i < 3 && !warm_hit(NULL); i++)
                ;
        ok(warm_hit(NULL), "stop: the warm shell is there");
        r = exec_at("sleep 303 & sleep 303", NULL, 1, false, NULL);
        ok(r.timed_out, "a timeout ends the command in the warm shell");
        res_free(&r);
        r = exec3("pgrep -c -f '^sleep 303' || true", false, NULL);
        is_str(r.out, "0\n", "and its background child");
        res_free(&r);

        ok(warm_hit(NULL), "cancel: the warm shell is there");
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"sleep 304 & sleep 304\"}", sb);
        send_call(c, 7000, "sandbox_exec", args);
        usleep(1500 * 1000);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7000}}");
        /* A cancelled request gets no answer (the protocol's rule): the
         * processes' end tells, looked at until a liveness bound. */
        for (int64_t end = dm_now_ms() + slack_ms(60000);; usleep(200 * 1000)) {
                r = exec3("pgrep -c -f '^sleep 304' || true", false, NULL);
                if (strcmp(r.out, "0\n") == 0 || dm_now_ms() > end)
                        break;
                res_free(&r);
        }
        is_str(r.out, "0\n", "a cancel ends the command in the warm shell and its child");
        res_free(&r);
}

/* The working directory: a request for another one twice makes the warm
 * shell's; one removed and made again is another directory, which the warm
 * shell made in the old one does not serve. */
static void test_workdir(void)
{
        struct res r;
        int hits = 0;

        r = exec3("rm -rf /out/wd && mkdir /out/wd", false, NULL);
        res_free(&r);
        for (int i = 0; i < 3; i++) {
                r = exec_at("x=BASH_EXECUTION; grep -c \"$x\"_STRING /proc/$$/cmdline || true", "/out/wd", 0, false,
                            NULL);
                hits += strcmp(r.out, "1\n") == 0;
                res_free(&r);
        }
        ok(hits >= 1, "workdir /out/wd twice: the next warm shell is made there (%d of 3)", hits);
        r = exec3("rm -rf /out/wd && mkdir /out/wd && echo new > /out/wd/f", false, NULL);
        res_free(&r);
        r = exec_at("pwd; cat f", "/out/wd", 0, false, NULL);
        is_str(r.out, "/out/wd\nnew\n", "the directory made again is where the command runs");
        res_free(&r);
        r = exec_at("pwd; cat f", "/out/wd", 0, false, NULL);
        is_str(r.out, "/out/wd\nnew\n", "and the next one too");
        res_free(&r);
}

/* sandbox_script's container (made for the run here: DEMESNE_POOL=0; a
 * pool's is the same) has its shim's first warm shell by the time the
 * command arrives, made for the defaults a run's command asks for. */
static void test_script(void)
{
        json_object *m = call_tool(c, &next_id, "sandbox_script",
                                   "{\"command\":\"x=BASH_EXECUTION; grep -c \\\"$x\\\"_STRING /proc/$$/cmdline; "
                                   "pwd\",\"egress\":\"none\"}");

        ok(!result_is_error(m) && strcmp(str_at(structured(m), "stdout"), "1\n/out\n") == 0,
           "sandbox_script's command runs in the container's warm shell, in /out: '%s'",
           str_at(structured(m), "stdout"));
        json_object_put(m);
}

/* A sandbox made with DEMESNE_SHIM_WARM=0 has none, and its commands do
 * not see the switch. */
static void test_off(void)
{
        char keep[64], args[128];
        json_object *m = call_tool(c, &next_id, "sandbox_create", "{\"env\":{\"DEMESNE_SHIM_WARM\":\"0\"}}");
        struct res r;
        int hits = 0;

        ok(!result_is_error(m), "sandbox_create with DEMESNE_SHIM_WARM=0");
        snprintf(keep, sizeof(keep), "%s", sb);
        snprintf(sb, sizeof(sb), "%s", str_at(structured(m), "sandbox_id"));
        json_object_put(m);
        for (int i = 0; i < 4; i++)
                hits += warm_hit(NULL);
        is_int(hits, 0, "off: no command finds a warm shell");
        r = exec3("echo ${DEMESNE_SHIM_WARM-unset}", false, NULL);
        is_str(r.out, "unset\n", "and the switch is not in the commands' environment");
        res_free(&r);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sb);
        json_object_put(call_tool(c, &next_id, "sandbox_destroy", args));
        snprintf(sb, sizeof(sb), "%s", keep);
}

/* Starts server c with env and makes the sandbox sb in it. */
static struct dm_backend *start_with_sandbox(const char *name, const char *const *env, const char *what)
{
        struct dm_backend *b;
        json_object *m;

        c = calloc(1, sizeof(*c));
        b = serve_start(name, c, env);
        m = call_tool(c, &next_id, "sandbox_create", "{}");
        ok(!result_is_error(m), "%s", what);
        snprintf(sb, sizeof(sb), "%s", str_at(structured(m), "sandbox_id"));
        json_object_put(m);
        return b;
}

/* The operator's switch: a server with DEMESNE_SHIM_WARM=off starts every
 * shim with --no-warm, and no command finds a warm shell. */
static void test_server_off(void)
{
        static const char *const env[] = { "DEMESNE_PIDS_LIMIT=16", "DEMESNE_POOL=0", "DEMESNE_SHIM_WARM=off", NULL };
        struct dm_backend *b =
                start_with_sandbox("warm-shell-off", env, "a server with DEMESNE_SHIM_WARM=off: sandbox_create");
        char args[128];
        int hits = 0;

        for (int i = 0; i < 4; i++)
                hits += warm_hit(NULL);
        is_int(hits, 0, "its commands find no warm shell");
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sb);
        json_object_put(call_tool(c, &next_id, "sandbox_destroy", args));
        ok(finish(c, 60000) == 0, "and it stops cleanly");
        free(c);
        dm_backend_free(b);
}

int main(void)
{
        static const char *const env[] = { "DEMESNE_PIDS_LIMIT=16", "DEMESNE_POOL=0", NULL };
        struct dm_backend *b = start_with_sandbox("warm-shell", env, "sandbox_create");
        json_object *m;
        struct dm_error err = { 0 };

        /* The first warm shell is made for the container's defaults; the
         * sandbox's requests may differ (an egress proxy's env): a few
         * commands make it theirs. */
        for (int i = 0; i < 3 && !warm_hit(NULL); i++)
                ;
        test_same();
        test_attacks();
        test_at_once();
        test_pids();
        test_shape();
        test_stop();
        test_workdir();
        test_off();
        test_script();

        char args[128];
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sb);
        m = call_tool(c, &next_id, "sandbox_destroy", args);
        ok(!result_is_error(m), "sandbox_destroy");
        json_object_put(m);
        ok(finish(c, 60000) == 0, "the server stops cleanly");
        free(c);
        dm_backend_free(b);
        test_server_off();
        (void)err;
        return done_testing();
}
