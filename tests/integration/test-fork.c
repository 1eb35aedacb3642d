/* SPDX-License-Identifier: MIT */
/* sandbox_fork through `demesne serve` against the real engine: the forks
 * see the source's root file system and /workspace (not its /out), then
 * the forks and the source diverge; each fork has its own /out; bad input
 * (count 0, 9, "4", missing; an unknown sandbox) gets a clear error and
 * leaves nothing; a fork refused midway (the snapshot cap, after the
 * slots were reserved) leaves no sandbox, image or directory; a server
 * killed mid-fork leaves nothing once the next one has swept, and one
 * killed while the commit holds the source paused leaves it running
 * again (where the engine cannot pause: its clear error). (The tree
 * caps, which only a nested caller has: tests/e2e/test-fork-admission.sh;
 * through the npm client: tests/e2e/client-snapshot.mjs.) */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "src/basic/cleanup.h"
#include "src/core/snapshot.h"
#include "tests/integration/engine-env.h"
#include "tests/integration/snapshot-probes.h"
#include "tests/integration/stdio-client.h"

static struct child *c;
static int next_id = 1;
static struct dm_backend *b;
static char root_label[128];

static json_object *call(const char *tool, const char *args)
{
        int id = next_id++;

        send_call(c, id, tool, args);
        return recv_response(c, id, 300000, NULL);
}

static char *exec_out(const char *sb, const char *cmd)
{
        return sandbox_exec_stdout(call, sb, cmd);
}

static long snapshot_images(void)
{
        return snapshot_images_of(b, root_label);
}

/* Live sandboxes sandbox_list shows. */
static int sandboxes(void)
{
        json_object *m = call("sandbox_list", "{}"), *a = path(structured(m), "sandboxes", NULL, NULL);
        int n = a ? (int)json_object_array_length(a) : -1;

        json_object_put(m);
        return n;
}

struct state {
        int sandboxes, outdirs, snapdirs;
        long images;
};

static struct state now(void)
{
        return (struct state){ sandboxes(), output_entries(NULL), output_entries(".snapshots"), snapshot_images() };
}

static bool same(struct state a, struct state b2)
{
        return a.sandboxes == b2.sandboxes && a.outdirs == b2.outdirs && a.snapdirs == b2.snapdirs &&
               a.images == b2.images;
}

static void destroy(const char *key, const char *id)
{
        char args[256];

        snprintf(args, sizeof(args), "{\"%s\":\"%s\"}", key, id);
        json_object_put(call("sandbox_destroy", args));
}

/* Forks src count times: the result, with the ids in ids[] ("" past them). */
static json_object *fork_of(const char *src, int count, char ids[][64], char *snap)
{
        char args[256];
        json_object *m, *a;

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"count\":%d}", src, count);
        m = call("sandbox_fork", args);
        a = path(structured(m), "sandbox_ids", NULL, NULL);
        for (int i = 0; i < count; i++)
                snprintf(ids[i], 64, "%s",
                         a && (size_t)i < json_object_array_length(a)
                                 ? json_object_get_string(json_object_array_get_idx(a, i))
                                 : "");
        snprintf(snap, 64, "%s", result_is_error(m) ? "" : str_at(structured(m), "snapshot_id"));
        if (result_is_error(m))
                diag("sandbox_fork %s: %s", args, json_object_to_json_string(m));
        return m;
}

/* Three forks see the source's files, then each goes its own way. */
#define BIG_FILE "/usr/share/perl/5.36.0/Unicode/Collate/allkeys.txt"
static void fork_and_diverge(const char *src)
{
        _cleanup_free_ char *big_sum = NULL;
        char ids[3][64], snap[64], *s;
        struct dm_error err = { 0 };
        json_object *m;
        bool all_see = true, own = true, apart = true, mine = true;

        s = exec_out(src,
                     "echo one > /etc/forked-root; mkdir -p $HOME/made; echo one > $HOME/made/f; "
                     "echo one > /workspace/ws; echo u > '/workspace/\xc3\xbc.txt'; echo out > /out/o; rm /etc/motd && "
                     "echo ok");
        is_str(s, "ok\n", "the source writes its root (/etc, $HOME), /workspace and /out, and removes /etc/motd");
        free(s);
        /* A changed file of the image past the 1 MiB the snapshot first
         * reads of a changed path (it is then read whole). */
        big_sum = exec_out(src, "echo forked-mark >> " BIG_FILE " && md5sum < " BIG_FILE);
        /* Enough changes in /etc for the snapshot to read the folder once
         * (BATCH_MIN, backends/docker-commit-ids.c), among them a name that
         * is a glob to Podman and a hard link. */
        free(exec_out(src, "for i in $(seq 20); do echo $i > /etc/many$i; done; echo b > '/etc/[b'; "
                           "ln /etc/many1 /etc/many-hl"));
        ok(big_sum && strlen(big_sum) > 32, "the source appends to a file of its image larger than 1 MiB (%s)",
           BIG_FILE);
        m = fork_of(src, 3, ids, snap);
        ok(!result_is_error(m) && strncmp(snap, "snap-", 5) == 0 && ids[2][0] &&
                   json_object_array_length(path(structured(m), "sandboxes", NULL, NULL)) == 3,
           "sandbox_fork count 3: a snapshot_id and three sandbox_ids (%s %s %s)", ids[0], ids[1], ids[2]);
        {
                struct dm_image_entry img = { 0 };
                char ref[160];

                snprintf(ref, sizeof(ref), "%s:%s", DM_SNAPSHOT_REPO, snap);
                if (b->ops->image_inspect(b, ref, &img, &err) == 0)
                        for (char **l = img.labels; l && *l; l++)
                                if (strncmp(*l, "demesne.root=", 13) == 0)
                                        snprintf(root_label, sizeof(root_label), "%s", *l);
                dm_image_entry_release(&img);
                ok(root_label[0] != '\0', "the engine holds the fork's snapshot image, of this output root (%s)",
                   root_label);
        }
        for (int i = 0; i < 3; i++) {
                const char *out = str_at(json_object_array_get_idx(path(structured(m), "sandboxes", NULL, NULL), i),
                                         "output_dir");
                char want[PATH_MAX];

                snprintf(want, sizeof(want), "%s/%s", getenv("DEMESNE_OUTPUT_ROOT"), ids[i]);
                own = own && strcmp(out, want) == 0 && strcmp(ids[i], src) != 0;
                s = exec_out(ids[i], "cat /etc/forked-root /workspace/ws; ls /out | wc -l");
                all_see = all_see && s && strcmp(s, "one\none\n0\n") == 0;
                if (!s || strcmp(s, "one\none\n0\n") != 0)
                        diag("fork %s: %s", ids[i], s ? s : "(no answer)");
                free(s);
                s = exec_out(ids[i], "cat /etc/many20 '/etc/[b' /etc/many-hl '/workspace/\xc3\xbc.txt'; stat -c %h "
                                     "/etc/many1");
                all_see = all_see && s && strcmp(s, "20\nb\n1\nu\n2\n") == 0;
                if (!s || strcmp(s, "20\nb\n1\nu\n2\n") != 0)
                        diag("fork %s: /etc/many20, /etc/[b, /etc/many-hl and its links: %s", ids[i],
                             s ? s : "(no answer)");
                free(s);
                s = exec_out(ids[i], "md5sum < " BIG_FILE);
                all_see = all_see && s && big_sum && strcmp(s, big_sum) == 0;
                if (!s || !big_sum || strcmp(s, big_sum) != 0)
                        diag("fork %s: %s is %s, the source's %s", ids[i], BIG_FILE, s ? s : "(no answer)",
                             big_sum ? big_sum : "(none)");
                free(s);
        }
        json_object_put(m);
        ok(all_see, "each fork sees the source's root file system (a large file changed, 20 new files in /etc, one "
                    "named '[b', a hard link) and /workspace (a name not ASCII), and an empty /out of its own");
        ok(own, "each fork's output_dir is its own, under the output root");
        ok(strcmp(ids[0], ids[1]) != 0 && strcmp(ids[1], ids[2]) != 0 && strcmp(ids[0], ids[2]) != 0,
           "three different sandboxes");

        /* Each writes its own name where the others read. */
        for (int i = 0; i < 3; i++) {
                char cmd[1024];

                /* A file of its own in the root file system, in a folder
                 * the source left alone. */
                snprintf(cmd, sizeof(cmd), "echo %s > /opt/fork-mine; echo %s > /workspace/ws; echo %s > /out/mine",
                         ids[i], ids[i], ids[i]);
                free(exec_out(ids[i], cmd));
        }
        /* What the source made or changed in its root file system, and
         * the folders it is in, are the fork's own (issue 32: on rootful
         * Podman they were nobody's, "Permission denied"). */
        for (int i = 0; i < 3; i++) {
                s = exec_out(ids[i], "exec 2>&1; test ! -e /etc/motd && echo two >> /etc/forked-root && touch "
                                     "/etc/fork-new && rm /etc/fork-new && "
                                     "echo two >> $HOME/made/f && rm -r $HOME/made && "
                                     "stat -c %u:%g /etc /etc/forked-root && rm /etc/forked-root && echo written");
                mine = mine && s && strcmp(s, "0:0\n0:0\nwritten\n") == 0;
                if (!s || strcmp(s, "0:0\n0:0\nwritten\n") != 0)
                        diag("fork %s writing where the source wrote: %s", ids[i], s ? s : "(no answer)");
                free(s);
        }
        ok(mine, "each fork writes and removes the files the source made under /etc and $HOME, owned by its root, "
                 "and lacks the file the source removed");
        free(exec_out(src, "echo source > /etc/forked-root; echo source > /workspace/ws"));
        s = exec_out(src, "ls /opt/fork-mine 2>&1 >/dev/null | grep -c 'No such file'");
        is_str(s, "1\n", "the source does not see a file its forks made");
        free(s);
        for (int i = 0; i < 3; i++) {
                char want[512], host[PATH_MAX];
                FILE *f;

                snprintf(want, sizeof(want), "%s\n%s\n", ids[i], ids[i]);
                s = exec_out(ids[i], "cat /opt/fork-mine /workspace/ws");
                apart = apart && s && strcmp(s, want) == 0;
                if (!s || strcmp(s, want) != 0)
                        diag("fork %s reads: %s", ids[i], s ? s : "(no answer)");
                free(s);
                snprintf(host, sizeof(host), "%s/%s/mine", getenv("DEMESNE_OUTPUT_ROOT"), ids[i]);
                if ((f = fopen(host, "r"))) {
                        char line[128] = "";

                        apart = apart && fgets(line, sizeof(line), f) && strncmp(line, ids[i], strlen(ids[i])) == 0;
                        fclose(f);
                } else
                        apart = false;
        }
        s = exec_out(src, "cat /etc/forked-root /workspace/ws /out/o");
        is_str(s, "source\nsource\nout\n", "the source keeps its own root, /workspace and /out");
        free(s);
        ok(apart, "the forks diverge: each reads its own writes, and its /out on the host holds its own file");
        for (int i = 0; i < 3; i++)
                destroy("sandbox_id", ids[i]);
        destroy("snapshot_id", snap);
}

/* Bad input: each a clear error, nothing made. */
static void bad_input(const char *src)
{
        static const char *const cases[][2] = {
                { "{\"sandbox_id\":\"SRC\",\"count\":0}", "'count' must be between 1 and 8, not 0" },
                { "{\"sandbox_id\":\"SRC\",\"count\":9}", "'count' must be between 1 and 8, not 9" },
                { "{\"sandbox_id\":\"SRC\",\"count\":\"4\"}", "'count' must be an integer" },
                { "{\"sandbox_id\":\"SRC\",\"count\":2.5}", "'count'" },
                { "{\"sandbox_id\":\"SRC\"}", "count" },
                { "{\"count\":2}", "sandbox_id" },
                { "{\"sandbox_id\":\"sbx-000000000000\",\"count\":2}", "unknown sandbox 'sbx-000000000000'" },
                { "{\"sandbox_id\":\"../../.snapshots\",\"count\":1}", "unknown sandbox" },
                { "{\"sandbox_id\":\"SRC\",\"count\":2,\"egress\":\"open\"}", "invalid arguments" },
        };
        struct state before = now();

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char args[512];
                const char *p = strstr(cases[i][0], "SRC");
                json_object *m;

                if (p)
                        snprintf(args, sizeof(args), "%.*s%s%s", (int)(p - cases[i][0]), cases[i][0], src, p + 3);
                else
                        snprintf(args, sizeof(args), "%s", cases[i][0]);
                m = call("sandbox_fork", args);
                ok(result_error_says(m, cases[i][1]), "sandbox_fork %s: '%s'", cases[i][0], cases[i][1]);
                if (!result_error_says(m, cases[i][1]))
                        diag("%s", json_object_to_json_string(m));
                json_object_put(m);
        }
        ok(same(before, now()), "and no sandbox, output directory, snapshot directory or image was made");
}

/* The snapshot cap (DEMESNE_SNAPSHOT_MAX=2) refuses a fork after its
 * slots were reserved: they go back, nothing is left. */
static void refused_midway(const char *src)
{
        char ids[3][64], snap1[64], snap2[64], snap3[64];
        struct state before;
        json_object *m;

        json_object_put(fork_of(src, 1, ids, snap1));
        destroy("sandbox_id", ids[0]);
        json_object_put(fork_of(src, 1, ids, snap2));
        destroy("sandbox_id", ids[0]);
        ok(snap1[0] && snap2[0], "two forks hold two snapshots (%s, %s)", snap1, snap2);
        before = now();
        m = fork_of(src, 3, ids, snap3);
        ok(result_error_says(m, "DEMESNE_SNAPSHOT_MAX") && !ids[0][0],
           "a third fork is refused by the snapshot cap, naming it");
        json_object_put(m);
        ok(same(before, now()), "and leaves no sandbox, output directory, snapshot directory or image");
        destroy("snapshot_id", snap1);
        destroy("snapshot_id", snap2);
}

/* The ids of the engine's snapshot images of this output root, each
 * followed by a space, in buf. */
static void snapshot_ids(char *buf, size_t len)
{
        struct dm_image_entry *v = NULL;
        struct dm_error err = { 0 };
        size_t n = 0, at = 0;

        buf[0] = '\0';
        if (b->ops->image_list(b, root_label, &v, &n, &err) < 0)
                return;
        for (size_t i = 0; i < n; i++)
                for (char **l = v[i].labels; l && *l; l++)
                        if (strncmp(*l, "demesne.snapshot=", 17) == 0 && at + strlen(*l) < len)
                                at += (size_t)snprintf(buf + at, len - at, "%s ", *l + 17);
        dm_image_entries_free(v, n);
}

/* Containers of any state started from snapshot snap's image: they
 * carry its labels (the engine copies an image's labels to its
 * containers), one filtered list. */
static int forks_of(const char *snap)
{
        struct dm_error err = { 0 };
        char **ids = NULL, label[64];
        size_t n = 0;

        snprintf(label, sizeof(label), "demesne.snapshot=%s", snap);
        if (b->ops->list(b, label, &ids, &n, &err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++)
                free(ids[i]);
        free(ids);
        return (int)n;
}

/* The engine's state of sandbox sb's container ("running", "paused"),
 * in buf; "" when the engine cannot say. */
static const char *engine_status(const char *sb, char *buf, size_t len)
{
        struct dm_error err = { 0 };
        struct dm_container_info info = { 0 };
        char **ids = NULL, label[96];
        size_t n = 0;

        buf[0] = '\0';
        snprintf(label, sizeof(label), "demesne.sandbox=%s", sb);
        if (b->ops->list(b, label, &ids, &n, &err) == 0 && n == 1 && b->ops->inspect(b, ids[0], &info, &err) == 0)
                snprintf(buf, len, "%s", info.status ? info.status : "");
        dm_container_info_release(&info);
        for (size_t i = 0; i < n; i++)
                free(ids[i]);
        free(ids);
        return buf;
}

/* The source after a killed server and the next one's sweep: running,
 * and a command in it answers. */
static bool source_awake(const char *src)
{
        char st[32];
        char *s = exec_out(src, "echo awake");
        bool awake = s && strcmp(s, "awake\n") == 0 && strcmp(engine_status(src, st, sizeof(st)), "running") == 0;

        if (!awake)
                diag("source %s: engine says '%s', exec says %s", src, st, s ? s : "(no answer)");
        free(s);
        return awake;
}

/* The server is killed (SIGKILL) while a fork of 4 is making its
 * sandboxes: polled for, its snapshot's image in the engine and a fork's
 * container made, before the fork's answer (the record names the server
 * until then). The next
 * server's sweep removes the forks' containers and the orphaned snapshot,
 * image and directory; the source stays. */
static void killed_midway(const char *src, const char *const *env)
{
        int64_t started = dm_now_ms();
        char before[4096], after[4096], snap[64] = "", args[128], *p, rec[PATH_MAX];
        int64_t t0 = dm_now_ms();
        int status, forks_then, forks_now = -1, id = next_id++;
        struct stat st;
        json_object *record;

        /* 48 MB in /workspace: each fork's seeding of it keeps the window
         * between a fork's container and the answer open long enough to be
         * seen on a quick machine (without it the answer sometimes came
         * first, once the snapshot read a changed folder's header only). */
        free(exec_out(src, "head -c 48M /dev/urandom > /workspace/widen"));
        snapshot_ids(before, sizeof(before));
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"count\":4}", src);
        send_call(c, id, "sandbox_fork", args);
        while (!snap[0] && dm_now_ms() - t0 < slack_ms(120000)) {
                snapshot_ids(after, sizeof(after));
                for (p = strtok(after, " "); p && !snap[0]; p = strtok(NULL, " "))
                        if (!strstr(before, p))
                                snprintf(snap, sizeof(snap), "%s", p);
                if (!snap[0])
                        usleep(10 * 1000);
        }
        /* Then a fork's container: inside the window, with something of
         * the fork's own to sweep. */
        while (snap[0] && forks_of(snap) < 1 && dm_now_ms() - t0 < slack_ms(120000))
                usleep(10 * 1000);
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
        close(c->in);
        close(c->out);
        forks_then = snap[0] ? forks_of(snap) : -1;
        snprintf(rec, sizeof(rec), "%s/.snapshots/%s/record.json", getenv("DEMESNE_OUTPUT_ROOT"), snap);
        record = json_object_from_file(rec);
        ok(snap[0] && record && str_at(record, "server")[0] && forks_then >= 1,
           "the server is killed mid-fork: its snapshot %s is in the engine, its record still names the server, "
           "%d of the 4 forks' containers made",
           snap, forks_then);
        json_object_put(record);
        memset(c, 0, sizeof(*c));
        if (spawn(c, env) < 0) {
                ok(0, "a new server starts");
                return;
        }
        json_object_put(call("sandbox_list", "{}")); /* it has opened the engine and swept */
        t0 = dm_now_ms();
        while (dm_now_ms() - t0 < slack_ms(60000)) {
                snapshot_ids(after, sizeof(after));
                forks_now = forks_of(snap);
                if (!strstr(after, snap) && forks_now == 0 && stat(rec, &st) < 0)
                        break;
                usleep(200 * 1000);
        }
        ok(!strstr(after, snap) && stat(rec, &st) < 0,
           "the next server's sweep removed the orphaned snapshot: no image, no directory");
        ok(forks_now == 0 && sandboxes() == 1, "and the half-made forks' containers (%d left), the source alone listed",
           forks_now);
        ok(source_awake(src), "the source runs and answers after the sweep");
        free(exec_out(src, "rm -f /workspace/widen"));
        diag("%s took %lld ms", __func__, (long long)(dm_now_ms() - started));
}

/* Restarts the server after a SIGKILL: the next one sweeps what the dead
 * one left. */
static bool respawn(const char *const *env)
{
        int status;

        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
        close(c->in);
        close(c->out);
        memset(c, 0, sizeof(*c));
        if (spawn(c, env) < 0)
                return false;
        json_object_put(call("sandbox_list", "{}")); /* it has opened the engine and swept */
        return true;
}

/* The server is killed while the commit of a snapshot holds the source
 * paused (rootful Podman pauses it while its changes are read, dockerd
 * while it copies): the next server's sweep resumes it and removes the
 * unfinished snapshot. Many changed files make the commit last. Where the
 * engine cannot pause (rootless Podman on cgroup v1) there is no pause to
 * be left: the clear error is asserted instead. */
static void killed_mid_commit(const char *src, const char *const *env)
{
        char st[32] = "", before[4096], after[4096], args[128];
        json_object *m;
        int64_t t0, started = dm_now_ms();
        bool seen = false;

        m = call("sandbox_pause", (snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", src), args));
        if (result_is_error(m)) {
                ok(result_error_says(m, "this engine cannot pause containers"),
                   "the engine cannot pause: sandbox_pause says why (%s)", json_object_to_json_string(m));
                json_object_put(m);
                return;
        }
        json_object_put(m);
        json_object_put(call("sandbox_resume", args));
        free(exec_out(src, "mkdir -p /opt/many && cd /opt/many && for i in $(seq 300); do echo $i > f$i; done"));
        snapshot_ids(before, sizeof(before));
        send_call(c, next_id++, "sandbox_snapshot", args);
        t0 = dm_now_ms();
        while (!seen && dm_now_ms() - t0 < slack_ms(60000)) {
                seen = strcmp(engine_status(src, st, sizeof(st)), "paused") == 0;
                snapshot_ids(after, sizeof(after));
                if (strcmp(before, after) != 0)
                        break; /* the commit is over */
        }
        ok(seen, "the server is killed while the commit holds the source paused");
        if (!respawn(env)) {
                ok(0, "a new server starts");
                return;
        }
        t0 = dm_now_ms();
        while (strcmp(engine_status(src, st, sizeof(st)), "running") != 0 && dm_now_ms() - t0 < slack_ms(30000))
                usleep(100 * 1000);
        ok(source_awake(src), "the next server's sweep resumed the source: it runs and answers");
        /* dockerd finishes a commit whose client is gone: the image it then
         * leaves has no record and goes at the server's next sweep (every
         * DEMESNE_SANDBOX_SWEEP_SECONDS, 2 here). */
        t0 = dm_now_ms();
        do {
                snapshot_ids(after, sizeof(after));
                if (strcmp(before, after) == 0 && output_entries(".snapshots") == 0)
                        break;
                usleep(200 * 1000);
        } while (dm_now_ms() - t0 < slack_ms(30000));
        ok(strcmp(before, after) == 0 && output_entries(".snapshots") == 0,
           "and removed the unfinished snapshot: no image, no directory");
        diag("%s took %lld ms", __func__, (long long)(dm_now_ms() - started));
}

int main(void)
{
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        struct dm_error err = { 0 };
        const char *env[] = { "DEMESNE_SNAPSHOT_MAX=2", "DEMESNE_POOL=0", "DEMESNE_SANDBOX_SWEEP_SECONDS=2", NULL };
        char src[64] = "";
        struct state start;
        json_object *m;

        test_env_setup("fork");
        c = calloc(1, sizeof(*c));
        if (dm_backend_open(&ec, &b, &err) < 0 || spawn(c, env) < 0) {
                printf("Bail out! %s\n", err.msg[0] ? err.msg : "cannot start $DEMESNE serve");
                return 1;
        }
        start = now();
        m = call("sandbox_create", "{\"image\":\"base\",\"egress\":\"none\"}");
        snprintf(src, sizeof(src), "%s", str_at(structured(m), "sandbox_id"));
        ok(!result_is_error(m) && src[0], "a sandbox to fork (%s)", src);
        json_object_put(m);

        fork_and_diverge(src);
        bad_input(src);
        refused_midway(src);
        killed_midway(src, env);
        killed_mid_commit(src, env);

        destroy("sandbox_id", src);
        {
                int64_t t0 = dm_now_ms();

                while (snapshot_images() != 0 && dm_now_ms() - t0 < slack_ms(60000))
                        usleep(200 * 1000);
        }
        ok(snapshot_images() == 0 && output_entries(".snapshots") == 0 && sandboxes() == 0,
           "at the end no sandbox, snapshot image or snapshot directory is left (started with %d sandboxes)",
           start.sandboxes);
        is_int(finish(c, 20000), 0, "the server exits");
        dm_backend_free(b);
        return done_testing();
}
