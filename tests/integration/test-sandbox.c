/* SPDX-License-Identifier: MIT */
/* Persistent sandboxes through `demesne serve` against the real engine:
 * lifecycle, state across execs and across servers, concurrency, file
 * transfer with hostile paths, size caps, timeouts and TTL expiry, the
 * seccomp filter the shim installs, and a fork bomb. */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/integration/shim-probes.h"
#include "tests/integration/stdio-client.h"
#include "tests/integration/engine-env.h"

static struct child *c;
static int next_id = 1;

static json_object *call(const char *tool, const char *args)
{
        int id = next_id++;
        send_call(c, id, tool, args);
        return recv_response(c, id, 120000, NULL);
}

static char *exec_out(const char *sb, const char *cmd)
{
        return sandbox_exec_stdout(call, sb, cmd);
}

static void write_file(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        if (f) {
                fputs(text, f);
                fclose(f);
        }
}

/* The probe's lines "<syscall> <errno>": every one EPERM (1), clone3 ENOSYS
 * (38). Returns how many lines were wrong, and -1 for no lines at all. */
static int probe_failures(const char *out)
{
        int lines = 0, bad = 0;
        char name[64];
        int e, n;

        if (strncmp(out, "arch ", 5) == 0)
                return 0;
        while (sscanf(out, "%63s %d%n", name, &e, &n) == 2) {
                lines++;
                if (e != (strcmp(name, "clone3") == 0 ? 38 : 1)) {
                        diag("%s: errno %d", name, e);
                        bad++;
                }
                out += n;
        }
        return lines ? bad : -1;
}

static long sandbox_containers(struct dm_backend *b, const char *sb)
{
        char label[128];
        snprintf(label, sizeof(label), "demesne.sandbox=%s", sb);
        return count_label(b, label);
}

/* The record of sandbox id, as a live server wrote it, with egress and
 * allow rewritten to what the test says: the file is the server's (under
 * its output root, mode 0600; no sandbox can write it), so this plays
 * someone on the host with the server's rights, or a bug that rewrote it. */
static bool record_rewrite(const char *id, const char *egress, const char *allow)
{
        char path[PATH_MAX];
        json_object *o;
        bool done;

        snprintf(path, sizeof(path), "%s/.sandboxes/%s.json", getenv("DEMESNE_OUTPUT_ROOT"), id);
        o = json_object_from_file(path);
        if (!o)
                return false;
        json_object_object_add(o, "egress", json_object_new_string(egress));
        json_object_object_add(o, "allow", json_object_new_string(allow));
        done = json_object_to_file(path, o) == 0;
        json_object_put(o);
        return done;
}

/* Kills the sandbox's PID 1 (its shim) and waits until the engine says it
 * has stopped: the next call starts it again, as after an engine restart. */
static bool kill_sandbox(struct dm_backend *b, const char *id)
{
        struct dm_container_info info = { 0 };
        struct dm_error e = { 0 };
        bool running = true;
        int64_t t0 = dm_now_ms();

        if (b->ops->kill(b, id, SIGKILL, &e) < 0) {
                diag("kill %s: %s", id, e.msg);
                return false;
        }
        while (running && dm_now_ms() - t0 < slack_ms(30000)) {
                if (b->ops->inspect(b, id, &info, &e) < 0)
                        break;
                running = info.running;
                dm_container_info_release(&info);
                if (running)
                        usleep(100 * 1000);
        }
        return !running;
}

int main(void)
{
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        struct dm_error err = { 0 };
        struct dm_backend *b;
        char allowed[PATH_MAX], p[PATH_MAX + 64], args[8192], sb[64], cmd[PATH_MAX * 2], *s;
        const char *env[] = { "DEMESNE_SANDBOX_SWEEP_SECONDS=1", NULL };
        json_object *m;

        test_env_setup("sandbox");
        snprintf(allowed, sizeof(allowed), "%s/allowed", test_root);
        mkdir(allowed, 0755);
        setenv("DEMESNE_ALLOWED_PATHS", allowed, 1);
        c = calloc(1, sizeof(*c));
        if (dm_backend_open(&ec, &b, &err) < 0 || spawn(c, env) < 0) {
                printf("Bail out! %s\n", err.msg[0] ? err.msg : "cannot start $DEMESNE serve");
                return 1;
        }

        /* Create, keep state across execs, stdin, workdir, env. */
        m = call("sandbox_create", "{\"env\":{\"GREETING\":\"hello\"}}");
        ok(!result_is_error(m), "sandbox_create");
        snprintf(sb, sizeof(sb), "%s", str_at(structured(m), "sandbox_id"));
        ok(strncmp(sb, "sbx-", 4) == 0, "id %s", sb);
        ok(*str_at(structured(m), "expires_at") && *str_at(structured(m), "output_dir") == '/',
           "expires_at and output_dir");
        json_object_put(m);
        s = exec_out(sb, "echo kept > /workspace/state; echo $GREETING");
        is_str(s, "hello\n", "create's env reaches every command");
        free(s);
        s = exec_out(sb, "cat /workspace/state");
        is_str(s, "kept\n", "/workspace persists across execs");
        free(s);
        snprintf(args, sizeof(args),
                 "{\"sandbox_id\":\"%s\",\"command\":\"pwd; tr a-z A-Z\",\"workdir\":\"/workspace\","
                 "\"stdin\":\"abc\\n\",\"env\":{\"X\":\"1\"}}",
                 sb);
        m = call("sandbox_exec", args);
        is_str(str_at(structured(m), "stdout"), "/workspace\nABC\n", "workdir and stdin");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"exit 7\"}", sb);
        m = call("sandbox_exec", args);
        is_int(json_object_get_int(path(structured(m), "exit_code", NULL, NULL)), 7, "exit code");
        json_object_put(m);

        /* A timeout kills the command and what it started; the sandbox stays usable. */
        snprintf(args, sizeof(args),
                 "{\"sandbox_id\":\"%s\",\"command\":\"sleep 301 & sleep 301\",\"timeout_seconds\":1}", sb);
        m = call("sandbox_exec", args);
        ok(json_object_get_boolean(path(structured(m), "timed_out", NULL, NULL)), "exec timeout: timed_out");
        json_object_put(m);
        s = exec_out(sb, "pgrep -c -f '^sleep 301' || true");
        is_str(s, "0\n", "the timed-out command's background process is gone too");
        free(s);

        /* 20 execs at once. */
        for (int i = 0; i < 20; i++) {
                snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"sleep 0.5; echo x%d\"}", sb, i);
                send_call(c, 1000 + i, "sandbox_exec", args);
        }
        int good = 0, got = 0;
        int64_t deadline = dm_now_ms() + 120000;
        while (got < 20 && dm_now_ms() < deadline) {
                json_object *r = recv_msg(c, (int)(deadline - dm_now_ms())), *idv;
                int i;
                char want[16];

                if (!r)
                        break;
                i = json_object_object_get_ex(r, "id", &idv) ? json_object_get_int(idv) - 1000 : -1;
                if (i >= 0 && i < 20) {
                        got++;
                        snprintf(want, sizeof(want), "x%d\n", i);
                        good += strcmp(str_at(structured(r), "stdout"), want) == 0;
                }
                json_object_put(r);
        }
        is_int(good, 20, "20 concurrent execs into one sandbox");

        /* Upload -> exec -> download of a 20 MB binary file. */
        snprintf(p, sizeof(p), "%s/blob.bin", allowed);
        snprintf(cmd, sizeof(cmd), "head -c 20971520 /dev/urandom > '%s'", p);
        system(cmd);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"%s\",\"dst\":\"/workspace/data/blob.bin\"}", sb,
                 p);
        m = call("sandbox_upload", args);
        is_int(json_object_get_int64(path(structured(m), "bytes", NULL, NULL)), 20971520, "upload 20 MiB");
        json_object_put(m);
        s = exec_out(sb, "cp /workspace/data/blob.bin /workspace/data/copy.bin && echo ok");
        is_str(s, "ok\n", "the sandbox works on the uploaded file");
        free(s);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/data/copy.bin\"}", sb);
        m = call("sandbox_download", args);
        const char *host = str_at(structured(m), "host_path");
        snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", p, host);
        ok(strstr(host, "/downloads/copy.bin") != NULL && system(cmd) == 0, "download matches byte for byte: %s", host);
        json_object_put(m);

        /* Hostile paths. */
        s = exec_out(sb, "ln -sf /etc/shadow /workspace/evil; ln -sfn / /out/root-link; echo done");
        free(s);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/evil\"}", sb);
        m = call("sandbox_download", args);
        host = str_at(structured(m), "host_path");
        snprintf(cmd, sizeof(cmd), "cmp -s /etc/shadow '%s'", host);
        ok(!result_is_error(m) && strstr(host, "/downloads/shadow") && system(cmd) != 0,
           "a link to /etc/shadow downloads the sandbox's own file, not the host's");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/../../../etc/hostname\"}", sb);
        m = call("sandbox_download", args);
        ok(!result_is_error(m) && strstr(str_at(structured(m), "host_path"), "/downloads/hostname"),
           "'..' is resolved inside the sandbox; the file lands in downloads/");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/\"}", sb);
        m = call("sandbox_download", args);
        ok(result_error_says(m, "not a regular file"), "downloading / is refused");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"relative.txt\"}", sb);
        m = call("sandbox_download", args);
        ok(result_error_says(m, "must be absolute"), "a relative sandbox path is refused");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/nope/missing\"}", sb);
        m = call("sandbox_download", args);
        ok(result_error_says(m, "does not exist"), "a missing file is refused");
        json_object_put(m);
        /* downloads/ and what is in it are the owner's, which the sandbox's
         * root cannot delete (user namespace); it can still move the
         * directory aside in its own /out. */
        s = exec_out(sb, "mv /out/downloads /out/downloads.old && ln -s /etc /out/downloads && echo swapped");
        is_str(s, "swapped\n", "the sandbox swaps downloads/ for a link to /etc");
        free(s);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/etc/hostname\"}", sb);
        m = call("sandbox_download", args);
        ok(result_error_says(m, "not a plain directory"), "downloads/ replaced by a link to /etc: refused");
        json_object_put(m);
        ok(access("/etc/hostname", F_OK) == 0, "and the host's /etc/hostname is untouched");
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/etc/passwd\",\"dst\":\"/workspace/p\"}", sb);
        m = call("sandbox_upload", args);
        ok(result_error_says(m, "outside DEMESNE_ALLOWED_PATHS"),
           "upload of a host file outside the allowed paths refused");
        json_object_put(m);
        snprintf(p, sizeof(p), "%s/escape", allowed);
        symlink("/etc/passwd", p);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"%s\",\"dst\":\"/workspace/p\"}", sb, p);
        m = call("sandbox_upload", args);
        ok(result_error_says(m, "resolves to"), "upload through a symlink escape refused");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"%s/blob.bin\",\"dst\":\"/workspace/\"}", sb,
                 allowed);
        m = call("sandbox_upload", args);
        ok(result_error_says(m, "must name a file"), "upload to a directory path refused");
        json_object_put(m);

        /* The shim's seccomp filter holds for every command in the sandbox;
         * ordinary programs still work. */
        snprintf(p, sizeof(p), "%s/probe.py", allowed);
        write_file(p, probe_syscalls);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"%s\",\"dst\":\"/workspace/probe.py\"}", sb, p);
        m = call("sandbox_upload", args);
        ok(!result_is_error(m), "upload the system-call probe");
        json_object_put(m);
        s = exec_out(sb, "python3 /workspace/probe.py");
        is_int(probe_failures(s), 0, "unshare, setns, mount, ptrace, keyctl, bpf and the rest fail with EPERM");
        free(s);
        s = exec_out(sb, "unshare -r true 2>&1; mount -t tmpfs x /mnt 2>&1; echo rc=$?");
        ok(strstr(s, "Operation not permitted") && strstr(s, "rc=32"),
           "`unshare -r true` and `mount -t tmpfs` fail: %s", s);
        free(s);
        s = exec_out(sb, "cd /tmp && printf 'int main(void){return 42;}' > a.c && gcc a.c -o a; ./a; echo c=$?; "
                         "git init -q r && git -C r -c user.name=t -c user.email=t@t commit -q --allow-empty -m m && "
                         "git -C r log --oneline | wc -l; python3 -c 'import json; print(json.dumps([1]))'");
        is_str(s, "c=42\n1\n[1]\n", "a compiler, git and python work under the filter");
        free(s);

        /* A fork bomb runs into the pids limit; the shim kills what it
         * made, and the sandbox stays usable. */
        snprintf(args, sizeof(args),
                 "{\"sandbox_id\":\"%s\",\"command\":\"b() { b | b & }; b; sleep 60\","
                 "\"timeout_seconds\":5}",
                 sb);
        m = call("sandbox_exec", args);
        /* Against a pids cgroup the bomb lives on until its timeout; where
         * the engine has none (rootless on cgroup v1) demesne-shim stops the
         * sandbox's processes past the limit: exit 137. */
        ok(json_object_get_boolean(path(structured(m), "timed_out", NULL, NULL)) ||
                   json_object_get_int(path(structured(m), "exit_code", NULL, NULL)) == 137,
           "a fork bomb is bounded: it times out, or the shim stops it (exit 137)");
        json_object_put(m);
        /* Killed processes take a moment to exit and be reaped on a busy machine. */
        s = exec_out(sb, "echo alive; for i in $(seq 100); do n=$(ps -e --no-headers | wc -l); "
                         "[ $n -lt 10 ] && break; sleep 0.1; done; echo $n");
        ok(strncmp(s, "alive\n", 6) == 0 && atoi(s + 6) < 10, "the sandbox is usable after the fork bomb (%s)", s);
        free(s);

        /* Destroy: gone from the engine and the list; a second destroy and an exec say so. */
        m = call("sandbox_list", "{}");
        ok(strstr(json_object_to_json_string(structured(m)), sb) != NULL, "sandbox_list shows it");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sb);
        m = call("sandbox_destroy", args);
        ok(!result_is_error(m) && json_object_get_boolean(path(structured(m), "destroyed", NULL, NULL)),
           "sandbox_destroy");
        json_object_put(m);
        is_int(sandbox_containers(b, sb), 0, "its container is removed");
        m = call("sandbox_destroy", args);
        ok(result_error_says(m, "unknown sandbox"), "destroy twice: a clear error");
        json_object_put(m);
        m = call("sandbox_exec", "{\"sandbox_id\":\"sbx-000000000000\",\"command\":\"true\"}");
        ok(result_error_says(m, "unknown sandbox"), "exec in an unknown sandbox: a clear error");
        json_object_put(m);
        m = call("sandbox_exec", "{\"sandbox_id\":\"../../etc\",\"command\":\"true\"}");
        ok(result_error_says(m, "unknown sandbox"), "a hostile id is just unknown");
        json_object_put(m);

        /* Outliving the server, and adoption by the next one. */
        m = call("sandbox_create", "{}");
        snprintf(sb, sizeof(sb), "%s", str_at(structured(m), "sandbox_id"));
        json_object_put(m);
        s = exec_out(sb, "echo across > /workspace/f; head -c 4096 /dev/zero > /workspace/big; echo ok");
        free(s);
        is_int(finish(c, 20000), 0, "the server exits");
        is_int(sandbox_containers(b, sb), 1, "the persistent sandbox outlives it");
        spawn(c, env);
        s = exec_out(sb, "cat /workspace/f");
        is_str(s, "across\n", "a new server adopts it, state intact");
        free(s);
        /* An adoption that waits (this sandbox's shim is stopped, so it
         * cannot reconnect) holds up no other sandbox's exec: the lock
         * on the shim list is not held across it. */
        {
                char slow[64], **ids = NULL, label[96];
                struct dm_container_info info = { 0 };
                struct dm_error e = { 0 };
                size_t n = 0;
                int slow_id, shim_pid = 0;
                int64_t t0;

                m = call("sandbox_create", "{}");
                snprintf(slow, sizeof(slow), "%s", str_at(structured(m), "sandbox_id"));
                json_object_put(m);
                s = exec_out(slow, "echo up");
                free(s);
                is_int(finish(c, 20000), 0, "the server exits (two sandboxes to adopt)");
                snprintf(label, sizeof(label), "demesne.sandbox=%s", slow);
                if (b->ops->list(b, label, &ids, &n, &e) == 0 && n == 1 && b->ops->inspect(b, ids[0], &info, &e) == 0)
                        shim_pid = info.pid;
                dm_container_info_release(&info);
                for (size_t i = 0; i < n; i++)
                        free(ids[i]);
                free(ids);
                ok(shim_pid > 1 && kill(shim_pid, SIGSTOP) == 0, "the one sandbox's shim is stopped (pid %d)",
                   shim_pid);
                spawn(c, env);
                slow_id = next_id++;
                snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"echo late\"}", slow);
                send_call(c, slow_id, "sandbox_exec", args);
                usleep(300 * 1000);
                t0 = dm_now_ms();
                s = exec_out(sb, "cat /workspace/f");
                /* Held by the stopped shim, it would not answer until
                 * SIGCONT below: the bound is against that, not a speed. */
                ok(strcmp(s, "across\n") == 0 && dm_now_ms() - t0 < slack_ms(60000),
                   "meanwhile an exec into the other sandbox is adopted and answers (%lld ms: %s)",
                   (long long)(dm_now_ms() - t0), s);
                free(s);
                if (shim_pid > 1)
                        kill(shim_pid, SIGCONT);
                m = recv_response(c, slow_id, 60000, NULL);
                is_str(result_is_error(m) ? "<error>" : str_at(structured(m), "stdout"), "late\n",
                       "the waiting exec runs once the shim is back");
                json_object_put(m);
                snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", slow);
                m = call("sandbox_destroy", args);
                ok(!result_is_error(m), "and that sandbox is destroyed");
                json_object_put(m);
        }
        /* A second live server beside it: the first holds the shim's
         * socket, and through the engine's exec API the shim could only be
         * started by a path the sandbox can change, so it runs nothing. */
        {
                struct child *c2 = calloc(1, sizeof(*c2));

                spawn(c2, env);
                snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"echo x > /workspace/second\"}", sb);
                send_call(c2, 1, "sandbox_exec", args);
                m = recv_response(c2, 1, 120000, NULL);
                ok(result_error_says(m, "another live demesne server holds this sandbox's demesne-shim"),
                   "a second live server runs nothing in it, and says why");
                json_object_put(m);
                s = exec_out(sb, "test -e /workspace/second && echo ran || echo not-run");
                is_str(s, "not-run\n", "nothing of the second server's command ran");
                free(s);
                is_int(finish(c2, 20000), 0, "the second server exits");
                free(c2);
        }

        /* TTL expiry (the test server sweeps every second). */
        m = call("sandbox_create", "{\"ttl_seconds\":2}");
        char short_sb[64];
        snprintf(short_sb, sizeof(short_sb), "%s", str_at(structured(m), "sandbox_id"));
        json_object_put(m);
        int64_t t0 = dm_now_ms();
        while (sandbox_containers(b, short_sb) > 0 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(250 * 1000);
        is_int(sandbox_containers(b, short_sb), 0, "a sandbox past its TTL is destroyed by the reaper");
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"true\"}", short_sb);
        m = call("sandbox_exec", args);
        ok(result_error_says(m, "unknown sandbox"), "and exec into it says unknown");
        json_object_put(m);

        /* A TTL of 100 s: an exec within a tenth of it writes no record
         * (sandbox_list shows the expiry the create wrote); the reaper
         * allows as much, so the sandbox is not gone early. */
        {
                char ttl_sb[64], created_exp[64] = "", listed[256];
                json_object *arr;

                m = call("sandbox_create", "{\"ttl_seconds\":100,\"image\":\"base\"}");
                snprintf(ttl_sb, sizeof(ttl_sb), "%s", str_at(structured(m), "sandbox_id"));
                snprintf(created_exp, sizeof(created_exp), "%s", str_at(structured(m), "expires_at"));
                json_object_put(m);
                usleep(1100 * 1000);
                s = exec_out(ttl_sb, "echo busy");
                is_str(s, "busy\n", "an exec into a sandbox with a TTL of 100 s");
                free(s);
                m = call("sandbox_list", "{}");
                listed[0] = '\0';
                if (json_object_object_get_ex(structured(m), "sandboxes", &arr))
                        for (size_t i = 0; i < json_object_array_length(arr); i++) {
                                json_object *e = json_object_array_get_idx(arr, i);

                                if (strcmp(str_at(e, "sandbox_id"), ttl_sb) == 0)
                                        snprintf(listed, sizeof(listed), "%s", str_at(e, "expires_at"));
                        }
                json_object_put(m);
                ok(created_exp[0] && strcmp(listed, created_exp) == 0,
                   "wrote no record: expires_at is still the create's (%s, %s)", created_exp, listed);
                snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", ttl_sb);
                m = call("sandbox_destroy", args);
                json_object_put(m);
        }

        /* The policy a sandbox was made with is the one it keeps in this
         * server: its record rewritten to open egress under the live
         * server, and its container restarted (so the server makes its
         * network anew, from what it holds), it still has no network. A
         * server that read the policy back from the record would give it
         * a veth here. */
        {
                const char *ifaces = "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '";
                char kept[64], *before, *after;
                bool rewritten, stopped;

                m = call("sandbox_create", "{\"egress\":\"none\",\"image\":\"base\"}");
                ok(!result_is_error(m), "a sandbox with egress none");
                snprintf(kept, sizeof(kept), "%s", str_at(structured(m), "sandbox_id"));
                json_object_put(m);
                before = exec_out(kept, ifaces);
                rewritten = record_rewrite(kept, "open", "");
                stopped = kill_sandbox(b, kept);
                after = exec_out(kept, ifaces);
                is_str(before, "lo\n", "made with egress none, it has loopback only");
                ok(rewritten && stopped, "its record now says egress open, and its container was stopped");
                is_str(after, "lo\n", "started again by the live server, it still has loopback only: the kept policy");
                free(before);
                free(after);
                snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", kept);
                json_object_put(call("sandbox_destroy", args));
                is_int(sandbox_containers(b, kept), 0, "destroyed: nothing of it is left");
        }

        /* Size caps. */
        is_int(finish(c, 20000), 0, "server exits");
        const char *small[] = { "DEMESNE_TRANSFER_MAX=1k", NULL };
        spawn(c, small);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"%s/blob.bin\",\"dst\":\"/workspace/b\"}", sb,
                 allowed);
        m = call("sandbox_upload", args);
        ok(result_error_says(m, "limit"), "upload over DEMESNE_TRANSFER_MAX refused");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/big\"}", sb);
        m = call("sandbox_download", args);
        ok(result_error_says(m, "limit"), "download over DEMESNE_TRANSFER_MAX refused");
        json_object_put(m);
        s = exec_out(sb, "echo still; ls /out/downloads 2>/dev/null | grep -c big || true");
        is_str(s, "still\n0\n", "and no partial file is left in downloads/");
        free(s);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", sb);
        m = call("sandbox_destroy", args);
        json_object_put(m);
        is_int(finish(c, 20000), 0, "server exits");
        is_int(sandbox_containers(b, sb), 0, "nothing left");

        dm_backend_free(b);
        free(c);
        dm_remove_tree(test_root);
        return done_testing();
}
