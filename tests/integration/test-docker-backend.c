/* SPDX-License-Identifier: MIT */
/* The docker backend against the real engine: Podman's compat service in
 * tests/run.sh, dockerd 20.10 in tests/run-dockerd.sh. Where the engines
 * differ, each one's answer is asserted. Every container carries
 * demesne.test=<pid> and is removed by the case that made it; the last case
 * checks that none is left. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "backends/curl.h"
#include "backends/docker-internal.h"
#include "src/core/limits.h"
#include "src/basic/buf.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"
#include "tests/integration/engine-env.h"

#define IMAGE "localhost/demesne/base:latest"

static struct dm_backend *B;
/* A rootless engine: its Docker-compatible API ignores HostConfig.Ulimits
 * (Podman 4.3), and without a cgroup of its own no CFS quota applies. */
static bool rootless, cgroup_limits = true;
/* "podman" or "docker", from describe; NULL when it named something else. */
static const char *engine;

/* Clears err at the call, so a passing case never shows a stale message. */
static struct dm_error *clr(struct dm_error *err)
{
        dm_error_clear(err);
        return err;
}
static char test_label[64];

struct output {
        struct dm_buf out[3];
};

static int collect(void *userdata, int stream, const char *data, size_t len)
{
        struct output *o = userdata;

        return dm_buf_append(&o->out[stream == 2 ? 2 : 1], data, len);
}

static void output_init(struct output *o)
{
        for (int i = 0; i < 3; i++)
                dm_buf_init(&o->out[i], 8 << 20);
}

static void output_release(struct output *o)
{
        for (int i = 0; i < 3; i++)
                dm_buf_release(&o->out[i]);
}

static const char *str(const struct dm_buf *b)
{
        return b->data ? b->data : "";
}

static void spec_init(struct dm_container_spec *spec, const char *const *argv, const char *const *labels)
{
        memset(spec, 0, sizeof(*spec));
        spec->image = IMAGE;
        spec->argv = argv;
        spec->labels = labels;
        spec->network_mode = "none";
        spec->memory_bytes = 256 << 20;
        spec->pids_limit = 256;
}

/* create + attach + start + pump + wait, optionally writing stdin; the
 * container is removed unless ret_id is given. */
static int run(struct dm_backend *b, const char *const *argv, const char *input, struct output *o, int *ret_code,
               char **ret_id, struct dm_error *err)
{
        const char *labels[] = { test_label, NULL };
        struct dm_container_spec spec;
        struct dm_stream_sink sink = { collect, o };
        struct dm_stream *s = NULL;
        char *id = NULL;
        int r;

        spec_init(&spec, argv, labels);
        spec.open_stdin = input != NULL;
        r = b->ops->create(b, &spec, &id, err);
        if (r < 0)
                return r;
        r = b->ops->attach(b, id, &s, err);
        if (r >= 0)
                r = b->ops->start(b, id, err);
        if (r >= 0 && input) {
                r = dm_stream_write(s, input, strlen(input), err);
                if (r >= 0)
                        r = dm_stream_close_write(s);
        }
        if (r >= 0)
                r = dm_stream_pump(s, &sink, -1, dm_now_ms() + 60000, err);
        if (r >= 0)
                r = b->ops->wait(b, id, ret_code, err);
        dm_stream_free(s);
        if (ret_id && r >= 0) {
                *ret_id = id;
                return 0;
        }
        b->ops->destroy(b, id, NULL);
        free(id);
        return r;
}

static void test_out_err_exit(void)
{
        const char *argv[] = { "sh", "-c", "echo out; echo err >&2; exit 7", NULL };
        struct dm_error err = { 0 };
        struct output o;
        int code = -1;

        output_init(&o);
        is_int(run(B, argv, NULL, &o, &code, NULL, clr(&err)), 0, "echo out/err, exit 7: runs (%s)", err.msg);
        is_str(str(&o.out[1]), "out\n", "stdout kept apart");
        is_str(str(&o.out[2]), "err\n", "stderr kept apart");
        is_int(code, 7, "exit code 7");
        output_release(&o);
}

/* create + attach + start + pump + wait + destroy of a whole spec: 0 once
 * created (*ret_code is -1 when it did not get to run). */
/* Runs spec to its end and removes the container. With lend, in the
 * engine's user namespace as src/core/launch.c uses it: that rw bind is given to
 * the container's root between create and start. */
static int run_spec(struct dm_container_spec *spec, const char *lend, struct output *o, int *ret_code,
                    struct dm_error *err)
{
        struct dm_stream_sink sink = { collect, o };
        struct dm_stream *s = NULL;
        struct dm_userns u = { 0 };
        char *id = NULL;
        int r;

        if (lend) {
                is_int(B->ops->userns(B, &u, err), 0, "the engine says how it maps ids: %s",
                       u.detail[0] ? u.detail : err->msg);
                spec->userns_mode = u.mode;
        }
        r = B->ops->create(B, spec, &id, err);
        if (r < 0)
                return r;
        if (lend && u.kind != DM_USERNS_ROOTLESS) {
                unsigned ruid = 0, rgid = 0;

                is_int(B->ops->container_root(B, id, &ruid, &rgid, err), 0, "its root is host uid %u (%s)", ruid,
                       err->msg);
                ok(u.kind == DM_USERNS_HOST_ROOT ? ruid == 0 : ruid != 0 && rgid != 0,
                   "with a user namespace, not the host's root (kind %d, uid %u, gid %u)", (int)u.kind, ruid, rgid);
                if (chown(lend, ruid, rgid) < 0)
                        diag("chown %s: %s", lend, strerror(errno));
        }
        if (B->ops->attach(B, id, &s, err) == 0 && B->ops->start(B, id, err) == 0 &&
            dm_stream_pump(s, &sink, -1, dm_now_ms() + 30000, err) == 0)
                B->ops->wait(B, id, ret_code, err);
        dm_stream_free(s);
        B->ops->destroy(B, id, NULL);
        free(id);
        return 0;
}

static void test_spec_applied(void)
{
        char dir[] = "/tmp/dm-test-mounts-XXXXXX", in[64], out[64], file[96];
        const char *argv[] = { "sh", "-c",
                               "ulimit -n; cat /in/f; (echo x >/in/g) 2>/dev/null || echo in-ro; "
                               "echo y >/out/h && echo out-rw; (: >/etc/x) 2>/dev/null || echo root-ro; "
                               "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; echo $FOO; pwd",
                               NULL };
        const char *labels[] = { test_label, NULL };
        const char *env[] = { "FOO=bar", NULL };
        const char *caps[] = { "CAP_CHOWN", NULL };
        struct dm_mount mounts[2];
        struct dm_container_spec spec;
        struct dm_error err = { 0 };
        struct output o;

        int code = -1;
        FILE *f;

        if (!mkdtemp(dir)) {
                ok(0, "mkdtemp: %s", strerror(errno));
                return;
        }
        snprintf(in, sizeof(in), "%s/in", dir);
        snprintf(out, sizeof(out), "%s/out", dir);
        mkdir(in, 0755);
        mkdir(out, 0777);
        snprintf(file, sizeof(file), "%s/f", in);
        if ((f = fopen(file, "we"))) {
                fputs("hello\n", f);
                fclose(f);
        }
        mounts[0] = (struct dm_mount){ .host = in, .target = "/in", .readonly = true };
        mounts[1] = (struct dm_mount){ .host = out, .target = "/out", .readonly = false };
        spec_init(&spec, argv, labels);
        spec.env = env;
        spec.workdir = "/tmp";
        spec.mounts = mounts;
        spec.n_mounts = 2;
        spec.cap_add = caps;
        spec.nofile = 1000;
        spec.nproc = 500;
        spec.readonly_rootfs = true;
        spec.init = true;

        output_init(&o);
        is_int(run_spec(&spec, out, &o, &code, clr(&err)), 0, "create with mounts, caps, limits (%s)", err.msg);
        is_int(code, 0, "ran (%s; stderr '%s')", err.msg, str(&o.out[2]));
        if (!rootless) {
                is_str(str(&o.out[1]),
                       "1000\nhello\nin-ro\nout-rw\nroot-ro\nCapEff:\t0000000000000001\nNoNewPrivs:\t1\nbar\n/tmp\n",
                       "nofile, ro/rw binds, ro rootfs, only CAP_CHOWN, no-new-privileges, env, workdir");
        } else {
                const char *rest = strchr(str(&o.out[1]), '\n');

                is_str(rest ? rest + 1 : "",
                       "hello\nin-ro\nout-rw\nroot-ro\nCapEff:\t0000000000000001\nNoNewPrivs:\t1\nbar\n/tmp\n",
                       "ro/rw binds, ro rootfs, only CAP_CHOWN, no-new-privileges, env, workdir");
                skip("nofile: rootless Podman's compatible API ignores HostConfig.Ulimits; demesne-shim lowers "
                     "RLIMIT_NOFILE instead (tests/security/test-memory-pids.sh checks it)");
        }
        output_release(&o);
        snprintf(file, sizeof(file), "%s/h", out);
        ok(access(file, F_OK) == 0, "the rw bind wrote to the host");
        unlink(file);
        snprintf(file, sizeof(file), "%s/f", in);
        unlink(file);
        rmdir(in);
        rmdir(out);
        rmdir(dir);
}

/* DEMESNE_CPUS and DEMESNE_DISK_MAX as the engine applies them: the CFS
 * quota in the container's own cgroup (v1 cpu.cfs_quota_us over the 100 ms
 * period, or v2 cpu.max), RLIMIT_FSIZE on its processes. */
static void test_cpu_and_fsize(void)
{
        const char *argv[] = {
                "sh", "-c",
                "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us 2>/dev/null || cut -d' ' -f1 /sys/fs/cgroup/cpu.max; "
                "grep 'Max file size' /proc/self/limits | tr -s ' ' | cut -d' ' -f4,5; "
                "head -c 2000000 /dev/zero > /tmp/f; echo $?",
                NULL
        };
        const char *labels[] = { test_label, NULL };
        struct dm_container_spec spec;
        struct dm_error err = { 0 };
        struct output o;
        int code = -1;

        spec_init(&spec, argv, labels);
        spec.nano_cpus = 500000000;
        spec.fsize = 1 << 20;
        output_init(&o);
        is_int(run_spec(&spec, NULL, &o, &code, clr(&err)), 0, "create with NanoCpus and an fsize ulimit (%s)",
               err.msg);
        if (cgroup_limits) {
                is_str(str(&o.out[1]), "50000\n1048576 1048576\n153\n",
                       "CFS quota 0.5 CPU, RLIMIT_FSIZE 1 MiB, a 2 MB write dies of SIGXFSZ");
        } else {
                /* The fsize ulimit is ignored here like nofile; demesne
                 * applies it through the shim instead. */
                skip("CFS quota and fsize ulimit: a rootless engine without a cgroup of its own applies neither; "
                     "demesne doctor says so ('CPU limit'), and demesne-shim lowers RLIMIT_FSIZE "
                     "(tests/security/test-memory-pids.sh)");
        }
        if (strcmp(str(&o.out[1]), "50000\n1048576 1048576\n153\n") != 0)
                diag("stderr: %s", str(&o.out[2]));
        output_release(&o);
}

static void test_binary(void)
{
        const char *argv[] = { "head", "-c", "1048576", "/dev/urandom", NULL };
        struct dm_error err = { 0 };
        struct output o;
        int code = -1;

        output_init(&o);
        is_int(run(B, argv, NULL, &o, &code, NULL, clr(&err)), 0, "1 MiB of random bytes: runs (%s)", err.msg);
        is_int(o.out[1].len, 1048576, "every byte arrives on stdout");
        is_int(o.out[2].len, 0, "nothing on stderr");
        is_int(code, 0, "exit 0");
        output_release(&o);
}

static void test_fast_command(void)
{
        const char *argv[] = { "echo", "fast", NULL };
        int good = 0;

        /* Attach before start: the output of a command that is over before
         * start returns must still arrive. */
        for (int i = 0; i < 20; i++) {
                struct dm_error err = { 0 };
                struct output o;
                int code = -1;

                output_init(&o);
                if (run(B, argv, NULL, &o, &code, NULL, clr(&err)) == 0 && strcmp(str(&o.out[1]), "fast\n") == 0 &&
                    code == 0)
                        good++;
                else
                        diag("run %d: r='%s' stdout='%s' code=%d", i, err.msg, str(&o.out[1]), code);
                output_release(&o);
        }
        is_int(good, 20, "a 1 ms command's output is never lost (20 runs)");
}

static void test_timeout_and_kill(void)
{
        const char *argv[] = { "sh", "-c", "echo started; exec sleep 60", NULL };
        const char *labels[] = { test_label, NULL };
        struct dm_container_spec spec;
        struct dm_error err = { 0 };
        struct output o;
        struct dm_stream_sink sink = { collect, &o };
        struct dm_stream *s = NULL;
        char *id = NULL;
        int code = -1, pipefd[2];
        int64_t t0;

        output_init(&o);
        spec_init(&spec, argv, labels);
        spec.init = true; /* PID 1 that forwards signals, as the server uses */
        is_int(B->ops->create(B, &spec, &id, clr(&err)), 0, "create sleeper (%s)", err.msg);
        is_int(B->ops->attach(B, id, &s, clr(&err)), 0, "attach sleeper (%s)", err.msg);
        is_int(B->ops->start(B, id, clr(&err)), 0, "start sleeper (%s)", err.msg);
        t0 = dm_now_ms();
        is_int(dm_stream_pump(s, &sink, -1, t0 + 700, clr(&err)), -ETIMEDOUT, "deadline passes: -ETIMEDOUT");
        /* Not before the deadline; after it, only not at the sleeper's 60 s. */
        ok(dm_now_ms() - t0 >= 690 && dm_now_ms() - t0 < slack_ms(20000),
           "after the deadline, not at the command's end (%ld ms)", (long)(dm_now_ms() - t0));
        is_str(str(&o.out[1]), "started\n", "output before the deadline arrived");

        /* A cancel fd that fires wins over a stream that stays silent. */
        if (pipe2(pipefd, O_CLOEXEC) == 0) {
                (void)!write(pipefd[1], "x", 1);
                is_int(dm_stream_pump(s, &sink, pipefd[0], 0, clr(&err)), -ECANCELED, "cancel fd: -ECANCELED");
                close(pipefd[0]);
                close(pipefd[1]);
        }

        struct dm_container_info info = { 0 };
        is_int(B->ops->inspect(B, id, &info, clr(&err)), 0, "inspect running container (%s)", err.msg);
        ok(info.running && info.pid > 0, "it is running with a host pid (%s, pid %d)", info.status, info.pid);
        is_str(info.status, "running", "status 'running'");
        is_str(info.image, IMAGE, "image name as created");
        ok(info.created_unix > 1600000000 && info.created_unix <= dm_wall_ms() / 1000 + 5,
           "creation time is plausible (%lld)", (long long)info.created_unix);
        int found = 0;
        for (char **l = info.labels; l && *l; l++)
                found += strcmp(*l, test_label) == 0;
        is_int(found, 1, "our label is there");
        ok(info.id && strncmp(info.id, id, strlen(info.id)) == 0, "id matches");
        dm_container_info_release(&info);

        is_int(B->ops->kill(B, id, SIGKILL, clr(&err)), 0, "kill -9 (%s)", err.msg);
        is_int(dm_stream_pump(s, &sink, -1, dm_now_ms() + 10000, clr(&err)), 0, "stream ends after kill (%s)", err.msg);
        is_int(B->ops->wait(B, id, &code, clr(&err)), 0, "wait (%s)", err.msg);
        is_int(code, 137, "exit code 128+9");
        is_int(B->ops->kill(B, id, SIGKILL, clr(&err)), 0, "kill of a stopped container is not an error (%s)", err.msg);
        dm_stream_free(s);
        is_int(B->ops->destroy(B, id, clr(&err)), 0, "destroy (%s)", err.msg);
        is_int(B->ops->destroy(B, id, clr(&err)), 0, "destroy again: already gone is fine (%s)", err.msg);
        is_int(B->ops->inspect(B, id, &info, clr(&err)), -ENOENT, "inspect after destroy: -ENOENT");
        is_int(B->ops->start(B, id, clr(&err)), -ENOENT, "start after destroy: -ENOENT");
        is_int(B->ops->attach(B, id, &s, clr(&err)), -ENOENT, "attach after destroy: -ENOENT");
        ok(strstr(err.msg, "404") && strstr(err.msg, "attach"), "with the engine's answer ('%s')", err.msg);
        free(id);
        output_release(&o);
}

static void test_stdin_attach(void)
{
        const char *argv[] = { "sh", "-c", "wc -c; echo eof >&2", NULL };
        struct dm_error err = { 0 };
        struct output o;
        int code = -1;

        output_init(&o);
        is_int(run(B, argv, "twelve bytes", &o, &code, NULL, clr(&err)), 0, "stdin through attach (%s)", err.msg);
        is_str(str(&o.out[1]), "12\n", "the command read stdin to EOF");
        is_str(str(&o.out[2]), "eof\n", "then went on");
        output_release(&o);
}

static void test_exec(void)
{
        const char *argv[] = { "sleep", "60", NULL };
        const char *labels[] = { test_label, NULL };
        const char *exec_argv[] = { "sh", "-c", "cat; echo \"in $PWD as $WHO\" >&2; exit 3", NULL };
        const char *exec_env[] = { "WHO=tester", NULL };
        const char *missing_argv[] = { "/no/such/binary", NULL };
        struct dm_exec_spec es = { .argv = exec_argv, .env = exec_env, .workdir = "/tmp", .attach_stdin = true };
        struct dm_container_spec spec;
        struct dm_error err = { 0 };
        struct output o;
        struct dm_stream_sink sink = { collect, &o };
        struct dm_stream *s = NULL;
        char *id = NULL, *exec_id = NULL;
        int code = -1;

        output_init(&o);
        spec_init(&spec, argv, labels);
        spec.init = true;
        is_int(B->ops->create(B, &spec, &id, clr(&err)), 0, "create exec target (%s)", err.msg);
        is_int(B->ops->start(B, id, clr(&err)), 0, "start it without attaching (%s)", err.msg);
        is_int(B->ops->exec(B, id, &es, &s, &exec_id, clr(&err)), 0, "exec with stdin (%s)", err.msg);
        is_int(dm_stream_write(s, "piped in\n", 9, clr(&err)), 0, "write stdin");
        is_int(dm_stream_close_write(s), 0, "close stdin");
        is_int(dm_stream_pump(s, &sink, -1, dm_now_ms() + 20000, clr(&err)), 0, "exec stream to EOF (%s)", err.msg);
        is_str(str(&o.out[1]), "piped in\n", "stdin came back on stdout");
        is_str(str(&o.out[2]), "in /tmp as tester\n", "env and workdir applied");
        is_int(B->ops->exec_exit_code(B, exec_id, &code, clr(&err)), 0, "exec exit code (%s)", err.msg);
        is_int(code, 3, "exit 3");
        dm_stream_free(s);
        free(exec_id);

        /* Engines differ here: Podman answers 127 with runc's message on
         * stderr, dockerd 126 with it on stdout. */
        es = (struct dm_exec_spec){ .argv = missing_argv };
        output_release(&o);
        output_init(&o);
        s = NULL;
        exec_id = NULL;
        int r = B->ops->exec(B, id, &es, &s, &exec_id, clr(&err));
        if (r == 0) {
                r = dm_stream_pump(s, &sink, -1, dm_now_ms() + 20000, clr(&err));
                if (r == 0)
                        r = B->ops->exec_exit_code(B, exec_id, &code, clr(&err));
        }
        if (engine && strcmp(engine, "podman") == 0)
                ok(r == 0 && code == 127 && strstr(str(&o.out[2]), "/no/such/binary"),
                   "exec of a missing binary (podman): 127, message on stderr (exit %d, stderr '%.80s')", code,
                   str(&o.out[2]));
        else if (engine && strcmp(engine, "docker") == 0)
                ok(r == 0 && code == 126 && strstr(str(&o.out[1]), "/no/such/binary"),
                   "exec of a missing binary (docker): 126, message on stdout (exit %d, stdout '%.80s')", code,
                   str(&o.out[1]));
        else
                ok(r == 0 && code != 0, "exec of a missing binary: exit %d", code);
        dm_stream_free(s);
        free(exec_id);

        is_int(B->ops->destroy(B, id, clr(&err)), 0, "destroy running container (%s)", err.msg);
        is_int(B->ops->exec(B, id, &es, &s, &exec_id, clr(&err)), -ENOENT, "exec in a removed container: -ENOENT");
        free(id);
        output_release(&o);
}

static void test_list(void)
{
        char label[96];
        const char *labels[] = { test_label, label, NULL };
        const char *argv[] = { "true", NULL };
        struct dm_container_spec spec;
        struct dm_error err = { 0 };
        char *ids[2] = { NULL, NULL }, **got = NULL;
        size_t n = 0;
        int matched = 0;

        snprintf(label, sizeof(label), "demesne.test.list=%d-%lld", (int)getpid(), (long long)dm_wall_ms());
        spec_init(&spec, argv, labels);
        for (int i = 0; i < 2; i++)
                is_int(B->ops->create(B, &spec, &ids[i], clr(&err)), 0, "create labelled container %d (%s)", i,
                       err.msg);
        is_int(B->ops->list(B, label, &got, &n, clr(&err)), 0, "list by label (%s)", err.msg);
        is_int(n, 2, "exactly the two made");
        for (size_t i = 0; i < n; i++) {
                matched += ids[0] && strcmp(got[i], ids[0]) == 0;
                matched += ids[1] && strcmp(got[i], ids[1]) == 0;
                free(got[i]);
        }
        free(got);
        is_int(matched, 2, "and they are ours");
        for (int i = 0; i < 2; i++) {
                if (ids[i])
                        B->ops->destroy(B, ids[i], NULL);
                free(ids[i]);
        }
        is_int(B->ops->list(B, label, &got, &n, clr(&err)), 0, "list again");
        is_int(n, 0, "none left");
        free(got);
}

/* A taken name is -EEXIST on both engines (Docker answers 409, Podman 500). */
static void test_name_taken(void)
{
        const char *argv[] = { "true", NULL };
        const char *labels[] = { test_label, NULL };
        struct dm_container_spec spec;
        struct dm_error err = { 0 };
        char name[64], *ids[2] = { NULL, NULL };

        snprintf(name, sizeof(name), "demesne-test-%d-name", (int)getpid());
        spec_init(&spec, argv, labels);
        spec.name = name;
        is_int(B->ops->create(B, &spec, &ids[0], clr(&err)), 0, "create named '%s' (%s)", name, err.msg);
        is_int(B->ops->create(B, &spec, &ids[1], clr(&err)), -EEXIST, "the same name again: -EEXIST");
        ok(strstr(err.msg, name) != NULL, "with the engine's answer ('%s')", err.msg);
        for (int i = 0; i < 2; i++) {
                if (ids[i])
                        B->ops->destroy(B, ids[i], NULL);
                free(ids[i]);
        }
}

struct destroy_arg {
        const char *id;
        int r;
        struct dm_error err;
};

static void *thread_destroy(void *p)
{
        struct destroy_arg *a = p;

        a->r = B->ops->destroy(B, a->id, &a->err);
        return NULL;
}

/* Two removals of one running container at once (a server's reaper and
 * another server's sweep): both succeed. dockerd answers the second 409
 * "removal already in progress" where Podman waits. */
static void test_concurrent_destroy(void)
{
        const char *argv[] = { "sleep", "60", NULL };
        const char *labels[] = { test_label, NULL };
        struct dm_container_spec spec;
        struct dm_container_info info = { 0 };
        struct dm_error err = { 0 };
        struct destroy_arg a[2] = { { 0 } };
        pthread_t t[2];
        char *id = NULL;

        spec_init(&spec, argv, labels);
        spec.init = true;
        is_int(B->ops->create(B, &spec, &id, clr(&err)), 0, "create a sleeper (%s)", err.msg);
        is_int(B->ops->start(B, id, clr(&err)), 0, "start it (%s)", err.msg);
        if (!id)
                return;
        for (int i = 0; i < 2; i++) {
                a[i].id = id;
                pthread_create(&t[i], NULL, thread_destroy, &a[i]);
        }
        for (int i = 0; i < 2; i++) {
                pthread_join(t[i], NULL);
                is_int(a[i].r, 0, "concurrent destroy %d succeeds (%s)", i, a[i].err.msg);
        }
        is_int(B->ops->inspect(B, id, &info, clr(&err)), -ENOENT, "and the container is gone");
        dm_container_info_release(&info);
        free(id);
}

static void test_bad_image(void)
{
        const char *argv[] = { "true", NULL };
        const char *labels[] = { test_label, NULL };
        struct dm_container_spec spec;
        struct dm_error err = { 0 };
        char *id = NULL;
        bool exists = true;

        spec_init(&spec, argv, labels);
        spec.image = "localhost/demesne/no-such-image:nope";
        is_int(B->ops->create(B, &spec, &id, clr(&err)), -ENOENT, "missing image: -ENOENT");
        ok(strstr(err.msg, "no-such-image") && strstr(err.msg, "404"), "the message names image and answer ('%s')",
           err.msg);
        free(id);
        is_int(B->ops->image_exists(B, spec.image, &exists, clr(&err)), 0, "image_exists works for a missing image");
        ok(!exists, "and says no");
}

/* The backend remembers an image it has seen (a cold run does not ask
 * each time), and forgets it when a create finds it gone. */
static void test_image_remembered(void)
{
        const char *argv[] = { "true", NULL };
        const char *labels[] = { test_label, NULL };
        struct dm_curl *http = dm_docker_http(B);
        struct dm_container_spec spec;
        struct dm_buf out = { 0 };
        struct dm_error err = { 0 };
        char tag[32], ref[96], path[160];
        char *id = NULL;
        bool exists = false;
        long status = 0;

        snprintf(tag, sizeof(tag), "gone-%d", (int)getpid());
        snprintf(ref, sizeof(ref), "localhost/demesne-test/remembered:%s", tag);
        snprintf(path, sizeof(path), "/images/%s/tag?repo=localhost/demesne-test/remembered&tag=%s", IMAGE, tag);
        dm_buf_init(&out, 1 << 20);
        is_int(dm_curl_request(http, "POST", path, NULL, 30000, &status, &out, clr(&err)), 0, "tag the test image");
        ok(status == 201 || status == 200, "as %s (%ld)", ref, status);
        is_int(B->ops->image_exists(B, ref, &exists, clr(&err)), 0, "image_exists");
        ok(exists, "says yes");
        snprintf(path, sizeof(path), "/images/%s", ref);
        dm_buf_release(&out);
        dm_buf_init(&out, 1 << 20);
        is_int(dm_curl_request(http, "DELETE", path, NULL, 30000, &status, &out, clr(&err)), 0, "untag it");
        ok(status == 200, "gone from the engine (%ld)", status);
        exists = false;
        is_int(B->ops->image_exists(B, ref, &exists, clr(&err)), 0, "image_exists again");
        ok(exists, "is answered from memory: still yes");
        spec_init(&spec, argv, labels);
        spec.image = ref;
        is_int(B->ops->create(B, &spec, &id, clr(&err)), -ENOENT, "a create finds it gone: -ENOENT");
        free(id);
        exists = true;
        is_int(B->ops->image_exists(B, ref, &exists, clr(&err)), 0, "image_exists after that");
        ok(!exists, "asks the engine again, which says no");
        dm_buf_release(&out);
}

static void test_response_cap(void)
{
        struct dm_backend *small = NULL;
        struct dm_container_info info = { 0 };
        struct dm_error err = { 0 };
        const char *argv[] = { "true", NULL };
        const char *labels[] = { test_label, NULL };
        struct dm_container_spec spec;
        char *desc = NULL, *id = NULL;
        const char *at;

        /* The same engine, through a backend that takes at most 64 bytes. */
        if (B->ops->describe(B, &desc, clr(&err)) < 0 || !(at = strstr(desc, " at "))) {
                ok(0, "engine address from describe (%s)", err.msg);
                free(desc);
                return;
        }
        spec_init(&spec, argv, labels);
        is_int(B->ops->create(B, &spec, &id, clr(&err)), 0, "create (%s)", err.msg);
        is_int(dm_docker_backend_new(at + 4, 64, test_engine_env(), &small, clr(&err)), 0,
               "backend with a 64-byte cap (%s)", err.msg);
        if (small && id) {
                is_int(small->ops->inspect(small, id, &info, clr(&err)), -E2BIG, "inspect answer too big: -E2BIG");
                ok(strstr(err.msg, "larger than 64 bytes") != NULL, "says so ('%s')", err.msg);
                is_int(small->ops->ping(small, clr(&err)), 0, "small answers still pass (%s)", err.msg);
        }
        dm_backend_free(small);
        if (id)
                B->ops->destroy(B, id, NULL);
        free(id);
        free(desc);
}

static void test_dead_socket(void)
{
        struct dm_engine_env env = *test_engine_env();
        struct dm_engine_config cfg = { .env = &env, .may_start_podman = true };
        struct dm_backend *b = NULL;
        struct dm_error err = { 0 };

        /* DOCKER_HOST as the settings hand it down. */
        env.docker_host = "unix:///nonexistent";
        is_int(dm_backend_open(&cfg, &b, clr(&err)), -EHOSTDOWN, "DOCKER_HOST=unix:///nonexistent: -EHOSTDOWN");
        ok(strstr(err.msg, "not reachable at 'unix:///nonexistent'") && strstr(err.msg, "DOCKER_HOST"),
           "message names the socket and where it came from ('%s')", err.msg);
        ok(b == NULL, "no backend returned");
        env.docker_host = "ssh://somewhere";
        is_int(dm_backend_open(&cfg, &b, clr(&err)), -EINVAL, "unsupported scheme: -EINVAL ('%s')", err.msg);
}

struct thread_arg {
        int ok;
};

static void *thread_run(void *p)
{
        struct thread_arg *a = p;
        const char *argv[] = { "sh", "-c", "echo $((6 * 7))", NULL };
        struct dm_error err = { 0 };
        struct output o;
        int code = -1;

        output_init(&o);
        a->ok = run(B, argv, NULL, &o, &code, NULL, clr(&err)) == 0 && strcmp(str(&o.out[1]), "42\n") == 0 && code == 0;
        if (!a->ok)
                diag("thread: '%s' stdout '%s'", err.msg, str(&o.out[1]));
        output_release(&o);
        return NULL;
}

static void test_threads(void)
{
        pthread_t t[4];
        struct thread_arg a[4] = { { 0 } };
        int good = 0;

        for (int i = 0; i < 4; i++)
                pthread_create(&t[i], NULL, thread_run, &a[i]);
        for (int i = 0; i < 4; i++) {
                pthread_join(t[i], NULL);
                good += a[i].ok;
        }
        is_int(good, 4, "four runs at once on one backend");
}

/* fds this process inherited (make's jobserver, the shell's): not ours to judge. */
static bool inherited[1000];

/* Open fds below 1000 (valgrind keeps its own above); with remember, marks
 * them as inherited; else counts in ret_inheritable the ones we opened that
 * lack close-on-exec. */
static int count_fds(bool remember, int *ret_inheritable)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int n = 0, bad = 0;

        while (d && (e = readdir(d))) {
                int fd = atoi(e->d_name);

                if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd == dirfd(d) || fd >= 1000)
                        continue;
                n++;
                if (remember)
                        inherited[fd] = true;
                else if (fd > 2 && !inherited[fd] && !(fcntl(fd, F_GETFD) & FD_CLOEXEC)) {
                        diag("fd %d is inheritable", fd);
                        bad++;
                }
        }
        if (d)
                closedir(d);
        if (ret_inheritable)
                *ret_inheritable = bad;
        return n;
}

static void test_fds_cloexec(void)
{
        int bad = -1, n = count_fds(false, &bad);

        /* The pool holds engine connections now (test_threads ran). */
        ok(n > 3, "engine connections are open (%d fds)", n);
        is_int(bad, 0, "every one of them is close-on-exec");
}

/* The pid of `podman system service` listening on sock, from /proc. */
static pid_t find_service(const char *sock)
{
        DIR *d = opendir("/proc");
        struct dirent *e;
        pid_t found = 0;

        while (d && (e = readdir(d)) && !found) {
                char path[300], cmd[4096];
                ssize_t n;
                int fd;

                if (e->d_name[0] < '0' || e->d_name[0] > '9')
                        continue;
                snprintf(path, sizeof(path), "/proc/%s/cmdline", e->d_name);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        continue;
                n = read(fd, cmd, sizeof(cmd) - 1);
                close(fd);
                if (n <= 0)
                        continue;
                for (ssize_t i = 0; i < n; i++)
                        if (!cmd[i])
                                cmd[i] = ' ';
                cmd[n] = '\0';
                if (strstr(cmd, "system service") && strstr(cmd, sock))
                        found = atoi(e->d_name);
        }
        if (d)
                closedir(d);
        return found;
}

static void test_private_service(void)
{
        char dir[] = "/tmp/dm-test-engine-XXXXXX", sock[128];
        struct dm_engine_config cfg = { .env = test_engine_env(), .may_start_podman = false, .private_only = true };
        const char *argv[] = { "echo", "private", NULL };
        struct dm_backend *b = NULL;
        struct dm_error err = { 0 };
        struct output o;
        char *desc = NULL;
        pid_t pid;
        int code = -1;
        int64_t t0;

        if (system("command -v podman >/dev/null 2>&1") != 0) {
                ok(1, "private podman service # SKIP podman is not on PATH");
                return;
        }
        if (!mkdtemp(dir)) {
                ok(0, "mkdtemp: %s", strerror(errno));
                return;
        }
        cfg.state_dir = dir;
        is_int(dm_backend_open(&cfg, &b, clr(&err)), -EHOSTDOWN,
               "private only, not allowed to start podman: -EHOSTDOWN");
        ok(strstr(err.msg, "not allowed") && strstr(err.msg, "apt-get install podman"),
           "message says what was tried and how to fix it ('%s')", err.msg);

        cfg.may_start_podman = true;
        t0 = dm_now_ms();
        is_int(dm_backend_open(&cfg, &b, clr(&err)), 0, "private podman service starts (%s)", err.msg);
        if (!b)
                return;
        diag("private service answered after %lld ms", (long long)(dm_now_ms() - t0));
        snprintf(sock, sizeof(sock), "%s/podman-%d.sock", dir, (int)getpid());
        is_int(b->ops->describe(b, &desc, clr(&err)), 0, "describe (%s)", err.msg);
        ok(desc && strstr(desc, "podman") && strstr(desc, sock), "it is podman on our socket ('%s')", desc);
        free(desc);
        pid = find_service(sock);
        ok(pid > 0, "service process found (pid %d)", (int)pid);
        output_init(&o);
        is_int(run(b, argv, NULL, &o, &code, NULL, clr(&err)), 0, "a container runs through it (%s)", err.msg);
        is_str(str(&o.out[1]), "private\n", "with its output");
        output_release(&o);

        dm_backend_free(b);
        ok(pid > 0 && kill(pid, 0) < 0 && errno == ESRCH, "service process gone after dm_backend_free");
        /* Rootless podman with no pause process yet runs the service in a
         * child of the process we started: that one must go too. */
        is_int(find_service(sock), 0, "no process of the service's is left (its whole process group)");
        ok(access(sock, F_OK) < 0, "socket removed");
        ok(rmdir(dir) == 0, "state dir left empty");
}

static void test_nothing_left(void)
{
        struct dm_error err = { 0 };
        char **ids = NULL;
        size_t n = 99;

        is_int(B->ops->list(B, test_label, &ids, &n, clr(&err)), 0, "list test containers (%s)", err.msg);
        is_int(n, 0, "every container made by this test was removed");
        for (size_t i = 0; i < n; i++) {
                B->ops->destroy(B, ids[i], NULL);
                free(ids[i]);
        }
        free(ids);
}

int main(void)
{
        struct dm_engine_config cfg = { .env = test_engine_env(), .may_start_podman = true };
        struct dm_error err = { 0 };
        char *desc = NULL;
        bool exists = false;
        int fds_before = count_fds(true, NULL);

        snprintf(test_label, sizeof(test_label), "demesne.test=%d", (int)getpid());
        if (dm_backend_open(&cfg, &B, clr(&err)) < 0) {
                ok(0, "open the container engine: %s", err.msg);
                return done_testing();
        }
        ok(B->ops->ping(B, clr(&err)) == 0, "ping (%s)", err.msg);
        if (B->ops->describe(B, &desc, clr(&err)) == 0) {
                diag("engine: %s", desc);
                engine = strncmp(desc, "podman ", 7) == 0   ? "podman"
                         : strncmp(desc, "docker ", 7) == 0 ? "docker"
                                                            : NULL;
        }
        free(desc);
        {
                struct dm_userns u = { 0 };
                char why[512];

                rootless = B->ops->userns && B->ops->userns(B, &u, clr(&err)) == 0 && u.kind == DM_USERNS_ROOTLESS;
                cgroup_limits = dm_limits_cgroup_applies(rootless, why, sizeof(why));
                if (rootless)
                        diag("rootless engine; cgroup limits %s", cgroup_limits ? "apply" : why);
        }
        if (B->ops->image_exists(B, IMAGE, &exists, clr(&err)) < 0 || !exists) {
                ok(0, "test image '" IMAGE "' is missing: run images/build.sh base (%s)", err.msg);
                dm_backend_free(B);
                return done_testing();
        }

        test_out_err_exit();
        test_image_remembered();
        test_spec_applied();
        test_cpu_and_fsize();
        test_binary();
        test_fast_command();
        test_timeout_and_kill();
        test_stdin_attach();
        test_exec();
        test_list();
        test_name_taken();
        test_concurrent_destroy();
        test_bad_image();
        test_response_cap();
        test_dead_socket();
        test_threads();
        test_fds_cloexec();
        test_private_service();
        test_nothing_left();
        dm_backend_free(B);
        is_int(count_fds(false, NULL), fds_before, "no fd leaked once the backend is freed");
        return done_testing();
}
