/* SPDX-License-Identifier: MIT */
/* Snapshots and pausing through `demesne serve` against the real engine:
 * a snapshot then a sandbox from it sees the root file system and
 * /workspace (not /out), then they diverge; a snapshot outlives its
 * source; egress no wider than the snapshot's; the per-principal cap with
 * twice the cap fired at once; bad and hostile input leaves no image and
 * no directory; pause with a process that counts, exec into the paused
 * sandbox, resume; the TTL; the usage report's snapshot storage and the
 * disk cap, before and after a commit; an image a dead server left is
 * swept. (Another
 * principal's view: tests/e2e/client-snapshot.mjs, over HTTP tokens.) */
#include "config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "src/core/snapshot.h"
#include "tests/integration/engine-env.h"
#include "tests/integration/snapshot-probes.h"
#include "tests/integration/stdio-client.h"

#define CAP 3

static struct child *c;
static int next_id = 1;
static struct dm_backend *b;
static char root_label[128];

static json_object *call_on(struct child *on, const char *tool, const char *args)
{
        int id = next_id++;

        send_call(on, id, tool, args);
        return recv_response(on, id, 300000, NULL);
}

static json_object *call(const char *tool, const char *args)
{
        return call_on(c, tool, args);
}

static char *exec_out(const char *sb, const char *cmd)
{
        return sandbox_exec_stdout(call, sb, cmd);
}

/* A tool call's string field, into buf ("" on error, with a diag). */
static const char *make(const char *tool, const char *args, const char *field, char *buf, size_t len)
{
        json_object *m = call(tool, args);

        snprintf(buf, len, "%s", result_is_error(m) ? "" : str_at(structured(m), field));
        if (result_is_error(m))
                diag("%s %s: %s", tool, args, json_object_to_json_string(m));
        json_object_put(m);
        return buf;
}

static int snapshot_dirs(void)
{
        return output_entries(".snapshots");
}

static long snapshot_images(void)
{
        return snapshot_images_of(b, root_label);
}

static bool has_label(const struct dm_image_entry *e, const char *kv)
{
        for (char **l = e->labels; l && *l; l++)
                if (strcmp(*l, kv) == 0)
                        return true;
        return false;
}

static void args_of(char *buf, size_t len, const char *key, const char *id)
{
        snprintf(buf, len, "{\"%s\":\"%s\"}", key, id);
}

/* Root file system and workspace into a snapshot, then into new sandboxes. */
static void take_and_use(char *src, char *snap)
{
        char args[1024], sb2[64], sb3[64], ref[160], kv[256];
        struct dm_image_entry img = { 0 };
        struct dm_error err = { 0 };
        json_object *m;
        char *s;

        make("sandbox_create", "{\"image\":\"base\",\"egress\":\"none\"}", "sandbox_id", src, 64);
        ok(src[0], "a sandbox to snapshot (%s)", src);
        s = exec_out(src, "echo one > /etc/snap-root; echo one > /workspace/ws; mkdir -p /workspace/d; "
                          "cp /bin/true /workspace/d/suid; chmod 4755 /workspace/d/suid; echo out > /out/o; echo ok");
        is_str(s, "ok\n", "the source writes its root, /workspace (a setuid file among them) and /out");
        free(s);
        args_of(args, sizeof(args), "sandbox_id", src);
        snprintf(args + strlen(args) - 1, sizeof(args) - strlen(args) + 1, ",\"name\":\"prepared 1\"}");
        m = call("sandbox_snapshot", args);
        snprintf(snap, 64, "%s", str_at(structured(m), "snapshot_id"));
        ok(!result_is_error(m) && strncmp(snap, "snap-", 5) == 0 && int_at(structured(m), "size_bytes") > 0 &&
                   str_at(structured(m), "created_at")[0],
           "sandbox_snapshot: snapshot_id, size_bytes > 0, created_at (%s, %lld bytes)", snap,
           (long long)int_at(structured(m), "size_bytes"));
        json_object_put(m);

        snprintf(ref, sizeof(ref), "%s:%s", DM_SNAPSHOT_REPO, snap);
        ok(b->ops->image_inspect(b, ref, &img, &err) == 0, "the engine holds the snapshot's image %s", ref);
        snprintf(kv, sizeof(kv), "demesne.snapshot.source=%s", src);
        ok(has_label(&img, "demesne.snapshot.owner=local") && has_label(&img, kv) &&
                   has_label(&img, "demesne.snapshot.image=base") && has_label(&img, "demesne.snapshot.egress=none"),
           "its labels name the owner, the source, the image and the egress");
        for (char **l = img.labels; l && *l; l++)
                if (strncmp(*l, "demesne.root=", 13) == 0)
                        snprintf(root_label, sizeof(root_label), "%s", *l);
        ok(root_label[0] != '\0', "and the output root (%s)", root_label);
        dm_image_entry_release(&img);

        args_of(args, sizeof(args), "snapshot_id", snap);
        make("sandbox_create", args, "sandbox_id", sb2, sizeof(sb2));
        ok(sb2[0], "sandbox_create {snapshot_id} (%s)", sb2);
        s = exec_out(sb2, "cat /etc/snap-root /workspace/ws; test -e /out/o && echo has-out; "
                          "stat -c %a /workspace/d/suid; echo end");
        is_str(s, "one\none\n755\nend\n",
               "the new sandbox sees the root file system and /workspace, not /out, and no setuid bit");
        free(s);
        s = exec_out(sb2, "echo two > /etc/snap-root; echo two > /workspace/ws; echo ok");
        free(s);
        s = exec_out(src, "cat /etc/snap-root /workspace/ws");
        is_str(s, "one\none\n", "the source does not see the new sandbox's writes");
        free(s);
        make("sandbox_create", args, "sandbox_id", sb3, sizeof(sb3));
        s = exec_out(sb3, "cat /etc/snap-root /workspace/ws");
        is_str(s, "one\none\n", "a second sandbox from the snapshot sees the snapshot, not the first one's writes");
        free(s);
        s = exec_out(src, "echo three > /workspace/ws; echo ok");
        free(s);
        s = exec_out(sb3, "cat /workspace/ws");
        is_str(s, "one\n", "nor the source's later writes");
        free(s);
        args_of(args, sizeof(args), "sandbox_id", sb2);
        json_object_put(call("sandbox_destroy", args));
        args_of(args, sizeof(args), "sandbox_id", sb3);
        json_object_put(call("sandbox_destroy", args));
}

static void egress_rules(const char *snap)
{
        char args[512];
        json_object *m;

        snprintf(args, sizeof(args), "{\"snapshot_id\":\"%s\",\"egress\":\"package-managers\"}", snap);
        m = call("sandbox_create", args);
        ok(result_error_says(m, "wider than snapshot"), "an egress wider than the snapshot's is refused, saying so");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"snapshot_id\":\"%s\",\"image\":\"python\"}", snap);
        m = call("sandbox_create", args);
        ok(result_error_says(m, "differs from snapshot"), "another image than the snapshot's is refused");
        json_object_put(m);
}

/* text with the first "what" replaced by "with", into buf (text may be buf). */
static void replace(char *buf, size_t len, const char *text, const char *what, const char *with)
{
        char copy[1024];
        const char *p;

        snprintf(copy, sizeof(copy), "%s", text);
        p = strstr(copy, what);
        if (p)
                snprintf(buf, len, "%.*s%s%s", (int)(p - copy), copy, with, p + strlen(what));
        else
                snprintf(buf, len, "%s", copy);
}

/* Bad input: each a clear error, and no image and no directory left. */
static void bad_input(const char *src)
{
        static const char *const cases[][3] = {
                { "sandbox_snapshot", "{\"sandbox_id\":\"sbx-000000000000\"}", "unknown sandbox 'sbx-000000000000'" },
                { "sandbox_snapshot", "{\"sandbox_id\":5}", "invalid arguments" },
                { "sandbox_snapshot", "{}", "invalid arguments" },
                { "sandbox_snapshot", "{\"sandbox_id\":\"SRC\",\"name\":\"../../../etc/passwd\"}",
                  "'name' may hold only" },
                { "sandbox_snapshot", "{\"sandbox_id\":\"SRC\",\"name\":\"a\\\"b\\nLABEL x=y\"}",
                  "'name' may hold only" },
                { "sandbox_snapshot", "{\"sandbox_id\":\"SRC\",\"name\":\"LONG\"}", "at most 64" },
                { "sandbox_create", "{\"snapshot_id\":\"snap-000000000000\"}", "unknown snapshot 'snap-000000000000'" },
                { "sandbox_create", "{\"snapshot_id\":\"../../.sandboxes\"}", "unknown snapshot" },
                { "sandbox_create", "{\"snapshot_id\":7}", "invalid arguments" },
                { "sandbox_destroy", "{\"snapshot_id\":\"snap-../../x\"}", "unknown snapshot" },
                { "sandbox_destroy", "{}", "give either 'sandbox_id' or 'snapshot_id'" },
                { "sandbox_pause", "{\"sandbox_id\":\"sbx-000000000000\"}", "unknown sandbox" },
                { "sandbox_resume", "{\"sandbox_id\":[]}", "invalid arguments" },
        };
        long images = snapshot_images();
        int dirs = snapshot_dirs();

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char args[1024], long_name[66];
                json_object *m;

                memset(long_name, 'x', 65);
                long_name[65] = '\0';
                replace(args, sizeof(args), cases[i][1], "SRC", src);
                replace(args, sizeof(args), args, "LONG", long_name);
                m = call(cases[i][0], args);
                ok(result_error_says(m, cases[i][2]), "%s %s: '%s'", cases[i][0], cases[i][1], cases[i][2]);
                if (!result_error_says(m, cases[i][2]))
                        diag("%s", json_object_to_json_string(m));
                json_object_put(m);
        }
        ok(snapshot_images() == images && snapshot_dirs() == dirs,
           "and no image, no directory left (%ld images, %d directories)", snapshot_images(), snapshot_dirs());
}

/* Twice the cap at once: exactly the cap's worth taken, the rest refused
 * by the cap's own sentence, nothing of them left. */
static void cap(const char *src)
{
        char args[256];
        int taken = 0, refused = 0, got = 0, first = next_id;
        int64_t deadline = dm_now_ms() + slack_ms(300000);

        args_of(args, sizeof(args), "sandbox_id", src);
        for (int i = 0; i < 2 * CAP; i++)
                send_call(c, next_id++, "sandbox_snapshot", args);
        /* The answers come in any order. */
        while (got < 2 * CAP && dm_now_ms() < deadline) {
                json_object *m = recv_msg(c, (int)(deadline - dm_now_ms())), *idv;
                int id;

                if (!m)
                        break;
                id = json_object_object_get_ex(m, "id", &idv) ? json_object_get_int(idv) : -1;
                if (id >= first && id < first + 2 * CAP) {
                        got++;
                        if (!result_is_error(m))
                                taken++;
                        else if (result_error_says(m, "snapshot cap reached") &&
                                 result_error_says(m, "DEMESNE_SNAPSHOT_MAX"))
                                refused++;
                        else
                                diag("%s", json_object_to_json_string(m));
                }
                json_object_put(m);
        }
        /* One is held already (take_and_use's). */
        ok(taken == CAP - 1 && refused == CAP + 1,
           "%d at once under a cap of %d with one held: %d taken, %d refused naming DEMESNE_SNAPSHOT_MAX", 2 * CAP, CAP,
           taken, refused);
        ok(snapshot_images() == CAP && snapshot_dirs() == CAP, "the engine holds %d images, the root %d directories",
           (int)snapshot_images(), snapshot_dirs());
}

/* Deletes every snapshot sandbox_list shows but keep. */
static void delete_all_but(const char *keep)
{
        json_object *m = call("sandbox_list", "{}"), *a = path(structured(m), "snapshots", NULL, NULL);
        char args[256];

        for (size_t i = 0; a && i < json_object_array_length(a); i++) {
                const char *id = str_at(json_object_array_get_idx(a, i), "snapshot_id");

                if (strcmp(id, keep) == 0)
                        continue;
                args_of(args, sizeof(args), "snapshot_id", id);
                json_object_put(call("sandbox_destroy", args));
        }
        json_object_put(m);
}

static long read_count(const char *sb)
{
        char p[PATH_MAX];
        long n = -1;
        FILE *f;

        snprintf(p, sizeof(p), "%s/.sandboxes/%s.workspace/count", getenv("DEMESNE_OUTPUT_ROOT"), sb);
        if ((f = fopen(p, "r"))) {
                if (fscanf(f, "%ld", &n) != 1)
                        n = -1;
                fclose(f);
        }
        return n;
}

static long count_after(const char *sb, long above, int64_t ms)
{
        int64_t t0 = dm_now_ms();
        long n;

        while ((n = read_count(sb)) <= above && dm_now_ms() - t0 < ms)
                usleep(100 * 1000);
        return n;
}

/* A command that counts in /workspace/count until /workspace/stop exists
 * (a process a command started in the background would end with it). */
static void paused_and_back(const char *src);

static void pausing(const char *src)
{
        char args[512], stop[PATH_MAX];
        long before, after;
        int counter = next_id++;
        json_object *m;
        FILE *f;

        snprintf(args, sizeof(args),
                 "{\"sandbox_id\":\"%s\",\"timeout_seconds\":600,\"command\":\"i=0; while [ ! -e /workspace/stop ]; "
                 "do i=$((i+1)); echo $i > /workspace/count; sleep 0.1; done; echo counted\"}",
                 src);
        send_call(c, counter, "sandbox_exec", args);
        before = count_after(src, 2, slack_ms(30000));
        ok(before > 2, "a command counts (%ld)", before);
        args_of(args, sizeof(args), "sandbox_id", src);
        m = call("sandbox_pause", args);
        if (result_error_says(m, "this engine cannot pause containers")) {
                /* Rootless Podman on cgroup v1: the reason, and nothing changed. */
                ok(result_error_says(m, "cgroup v2") && result_error_says(m, "rootless"),
                   "this engine cannot pause: the error says why (the freezer, cgroup v2)");
                json_object_put(m);
                after = count_after(src, before, slack_ms(30000));
                ok(after > before, "and the command counts on (%ld, then %ld)", before, after);
        } else {
                ok(!result_is_error(m) && strcmp(str_at(structured(m), "status"), "paused") == 0,
                   "sandbox_pause: paused");
                json_object_put(m);
                paused_and_back(src);
        }
        snprintf(stop, sizeof(stop), "%s/.sandboxes/%s.workspace/stop", getenv("DEMESNE_OUTPUT_ROOT"), src);
        if ((f = fopen(stop, "w")))
                fclose(f);
        m = recv_response(c, counter, slack_ms(60000), NULL);
        ok(!result_is_error(m) && strcmp(str_at(structured(m), "stdout"), "counted\n") == 0,
           "the command that was paused ends normally");
        json_object_put(m);
}

/* The sandbox paused: frozen, exec refused, then resumed where it was. */
static void paused_and_back(const char *src)
{
        char args[512];
        struct dm_container_info info;
        struct dm_error err = { 0 };
        long frozen, after;
        json_object *m;

        ok(b->ops->inspect(b, src, &info, &err) == 0 && strcmp(info.status, "paused") == 0,
           "the engine says the container is paused");
        dm_container_info_release(&info);
        frozen = read_count(src);
        usleep(1500 * 1000); /* a lower bound: fifteen counts' time */
        is_int(read_count(src), frozen, "while paused it does not count");
        {
                char snap[64];

                args_of(args, sizeof(args), "sandbox_id", src);
                make("sandbox_snapshot", args, "snapshot_id", snap, sizeof(snap));
                ok(snap[0], "a paused sandbox can be snapshotted (%s)", snap);
                args_of(args, sizeof(args), "snapshot_id", snap);
                json_object_put(call("sandbox_destroy", args));
        }
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"echo no\"}", src);
        m = call("sandbox_exec", args);
        ok(result_error_says(m, "is paused") && result_error_says(m, "sandbox_resume"),
           "sandbox_exec into it is a clear error naming sandbox_resume");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"content\":\"aGk=\",\"dst\":\"/workspace/new/up\"}", src);
        m = call("sandbox_upload", args);
        ok(result_error_says(m, "is paused"), "so is sandbox_upload (it would make its folder with a command)");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"src\":\"/workspace/count\"}", src);
        m = call("sandbox_download", args);
        ok(result_error_says(m, "is paused"), "and sandbox_download");
        json_object_put(m);
        args_of(args, sizeof(args), "sandbox_id", src);
        m = call("sandbox_pause", args);
        ok(!result_is_error(m), "pausing it again is not an error");
        json_object_put(m);
        m = call("sandbox_resume", args);
        ok(!result_is_error(m) && strcmp(str_at(structured(m), "status"), "running") == 0, "sandbox_resume: running");
        json_object_put(m);
        after = count_after(src, frozen, slack_ms(30000));
        ok(after > frozen, "it counts on from where it stopped, not anew (%ld, then %ld)", frozen, after);
}

/* A nested sandbox's container environment holds its endpoint's token: a
 * sandbox from its snapshot must not have it. */
static void nested_source(void)
{
        char nested[64], snap[64], from[64], args[256];
        char *s;

        make("sandbox_create", "{\"image\":\"base\",\"egress\":\"none\",\"nested\":true}", "sandbox_id", nested,
             sizeof(nested));
        s = exec_out(nested, "echo x${DEMESNE_MCP_TOKEN:+set}x");
        is_str(s, "xsetx\n", "a nested sandbox has its endpoint's token in its environment");
        free(s);
        args_of(args, sizeof(args), "sandbox_id", nested);
        make("sandbox_snapshot", args, "snapshot_id", snap, sizeof(snap));
        args_of(args, sizeof(args), "snapshot_id", snap);
        make("sandbox_create", args, "sandbox_id", from, sizeof(from));
        s = exec_out(from, "echo x${DEMESNE_MCP_TOKEN}${DEMESNE_MCP_URL}x");
        is_str(s, "xx\n", "a sandbox from its snapshot has neither the token nor the URL");
        free(s);
        {
                char tar[PATH_MAX];
                struct stat st;

                /* Its /workspace was empty: nothing kept, nothing put back. */
                snprintf(tar, sizeof(tar), "%s/.snapshots/%s/workspace.tar", getenv("DEMESNE_OUTPUT_ROOT"), snap);
                ok(stat(tar, &st) < 0 && errno == ENOENT, "an empty /workspace is not kept as an archive");
                s = exec_out(from, "ls -A /workspace | wc -l; echo w > /workspace/w && cat /workspace/w");
                is_str(s, "0\nw\n", "and the sandbox from it has an empty /workspace of its own, writable");
                free(s);
        }
        args_of(args, sizeof(args), "sandbox_id", from);
        json_object_put(call("sandbox_destroy", args));
        args_of(args, sizeof(args), "sandbox_id", nested);
        json_object_put(call("sandbox_destroy", args));
        args_of(args, sizeof(args), "snapshot_id", snap);
        json_object_put(call("sandbox_destroy", args));
}

/* A second server with a TTL of 2 s: its snapshot goes by itself. */
static void ttl(const char *src)
{
        const char *env[] = { "DEMESNE_SNAPSHOT_TTL=2", "DEMESNE_SANDBOX_SWEEP_SECONDS=1", NULL };
        struct child *c2 = calloc(1, sizeof(*c2));
        char args[256], snap[64] = "", dir[PATH_MAX];
        struct stat st;
        int64_t t0;
        json_object *m;

        if (!c2 || spawn(c2, env) < 0) {
                ok(0, "a server with DEMESNE_SNAPSHOT_TTL=2 starts");
                return;
        }
        args_of(args, sizeof(args), "sandbox_id", src);
        m = call_on(c2, "sandbox_snapshot", args);
        snprintf(snap, sizeof(snap), "%s", str_at(structured(m), "snapshot_id"));
        ok(!result_is_error(m) && snap[0], "a snapshot under a TTL of 2 s (%s)", snap);
        json_object_put(m);
        snprintf(dir, sizeof(dir), "%s/.snapshots/%s", getenv("DEMESNE_OUTPUT_ROOT"), snap);
        t0 = dm_now_ms();
        while (stat(dir, &st) == 0 && dm_now_ms() - t0 < slack_ms(60000))
                usleep(100 * 1000);
        ok(stat(dir, &st) < 0, "the TTL reaper deleted it once expired (after %lld ms)", (long long)(dm_now_ms() - t0));
        args_of(args, sizeof(args), "snapshot_id", snap);
        m = call_on(c2, "sandbox_create", args);
        ok(result_error_says(m, "unknown snapshot"), "and a sandbox from it is refused as unknown");
        json_object_put(m);
        is_int(finish(c2, 20000), 0, "the TTL server exits");
        free(c2);
}

/* A server with DEMESNE_SNAPSHOT_DISK_MAX=cap (bytes), or NULL. */
static struct child *capped_server(int64_t cap)
{
        char var[64];
        const char *env[] = { var, NULL };
        struct child *c2 = calloc(1, sizeof(*c2));

        snprintf(var, sizeof(var), "DEMESNE_SNAPSHOT_DISK_MAX=%lld", (long long)cap);
        if (c2 && spawn(c2, env) == 0)
                return c2;
        free(c2);
        ok(0, "a server with %s starts", var);
        return NULL;
}

/* The usage report counts the caller's snapshots' storage; the disk cap
 * refuses a snapshot when what the caller holds reaches it, and removes
 * one whose commit passes it (a sandbox that wrote 20 MB, a cap 8 MB above
 * what is held). */
static void disk_cap(const char *src)
{
        int64_t started = dm_now_ms();
        json_object *m = call("sandbox_usage_report", "{\"since\":\"2000-01-01\"}"), *l, *a;
        int64_t count = int_at(path(structured(m), "snapshots", NULL, NULL), "count"),
                bytes = int_at(path(structured(m), "snapshots", NULL, NULL), "size_bytes"), listed = 0;
        char args[256], *out;
        int images = (int)snapshot_images(), dirs = snapshot_dirs();
        struct child *c2;

        l = call("sandbox_list", "{}");
        a = path(structured(l), "snapshots", NULL, NULL);
        for (size_t i = 0; a && i < json_object_array_length(a); i++)
                listed += int_at(json_object_array_get_idx(a, i), "size_bytes");
        ok(!result_is_error(m) && count == (int64_t)json_object_array_length(a) && count >= 1 && bytes == listed &&
                   bytes > 0 && strstr(json_object_to_json_string(m), "snapshots: "),
           "sandbox_usage_report counts the snapshots' storage: %lld, %lld bytes (sandbox_list: %lld bytes)",
           (long long)count, (long long)bytes, (long long)listed);
        json_object_put(m);
        json_object_put(l);
        args_of(args, sizeof(args), "sandbox_id", src);
        if (!(c2 = capped_server(bytes)))
                return;
        m = call_on(c2, "sandbox_snapshot", args);
        ok(result_error_says(m, "DEMESNE_SNAPSHOT_DISK_MAX") && result_error_says(m, "holds"),
           "at the disk cap a snapshot is refused, naming DEMESNE_SNAPSHOT_DISK_MAX");
        json_object_put(m);
        is_int(finish(c2, 20000), 0, "that server exits");
        free(c2);

        out = exec_out(src, "head -c 20000000 /dev/urandom > /var/tmp/big && echo ok");
        is_str(out, "ok\n", "the sandbox writes 20 MB to its root file system");
        free(out);
        if (!(c2 = capped_server(bytes + (8 << 20))))
                return;
        m = call_on(c2, "sandbox_snapshot", args);
        ok(result_error_says(m, "DEMESNE_SNAPSHOT_DISK_MAX") && result_error_says(m, "was removed"),
           "a snapshot whose commit passes the cap is refused, naming it");
        json_object_put(m);
        ok(snapshot_images() == images && snapshot_dirs() == dirs,
           "and removed: no image, no directory kept (%ld images, %d directories)", snapshot_images(), snapshot_dirs());
        is_int(finish(c2, 20000), 0, "that server exits");
        free(c2);
        free(exec_out(src, "rm -f /var/tmp/big"));
        diag("%s took %lld ms", __func__, (long long)(dm_now_ms() - started));
}

/* An image labelled as a snapshot of this output root whose record is
 * gone (its server was killed between the commit and the record): the
 * next server's sweep removes it. */
static void orphan_image(const char *src)
{
        const char *labels[] = { "demesne.snapshot=snap-0123456789ab", root_label, NULL };
        struct dm_commit_spec spec = { .repo = DM_SNAPSHOT_REPO, .tag = "snap-0123456789ab", .labels = labels };
        struct dm_image_entry e = { 0 };
        struct dm_error err = { 0 };
        char *id = NULL, ref[160];
        struct child *c2 = calloc(1, sizeof(*c2));
        int64_t t0;
        int r;

        snprintf(ref, sizeof(ref), "%s:snap-0123456789ab", DM_SNAPSHOT_REPO);
        ok(b->ops->commit(b, src, &spec, &id, &err) == 0, "an orphan snapshot image made by hand %s", err.msg);
        free(id);
        if (!c2 || spawn(c2, NULL) < 0) {
                ok(0, "a new server starts");
                return;
        }
        json_object_put(call_on(c2, "sandbox_list", "{}")); /* it has opened the engine */
        t0 = dm_now_ms();
        /* Until the engine says it is gone: another answer (an error while
         * the engine is busy, as at 4 tests at once) is asked again. */
        while ((r = b->ops->image_inspect(b, ref, &e, &err)) != -ENOENT && dm_now_ms() - t0 < slack_ms(60000)) {
                if (r == 0)
                        dm_image_entry_release(&e);
                dm_error_clear(&err);
                usleep(200 * 1000);
        }
        ok(r == -ENOENT, "a new server's sweep removed it (last answer %d %s)", r, r == -ENOENT ? "" : err.msg);
        if (r != -ENOENT) {
                if (r == 0)
                        dm_image_entry_release(&e);
                b->ops->image_remove(b, ref, &err);
        }
        is_int(finish(c2, 20000), 0, "that server exits");
        free(c2);
}

int main(void)
{
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        struct dm_error err = { 0 };
        const char *env[] = { "DEMESNE_SANDBOX_SWEEP_SECONDS=1", "DEMESNE_SNAPSHOT_MAX=3", NULL };
        char src[64] = "", snap[64] = "", args[256], sb[64];
        json_object *m;

        test_env_setup("snapshot");
        c = calloc(1, sizeof(*c));
        if (dm_backend_open(&ec, &b, &err) < 0 || spawn(c, env) < 0) {
                printf("Bail out! %s\n", err.msg[0] ? err.msg : "cannot start $DEMESNE serve");
                return 1;
        }

        take_and_use(src, snap);
        egress_rules(snap);
        m = call("sandbox_list", "{}");
        ok(json_object_array_length(path(structured(m), "snapshots", NULL, NULL)) == 1 &&
                   strcmp(str_at(json_object_array_get_idx(path(structured(m), "snapshots", NULL, NULL), 0), "name"),
                          "prepared 1") == 0,
           "sandbox_list shows the snapshot with its name");
        json_object_put(m);
        bad_input(src);
        cap(src);
        delete_all_but(snap);
        ok(snapshot_images() == 1 && snapshot_dirs() == 1, "sandbox_destroy {snapshot_id} removes image and directory");

        /* The snapshot outlives its source. */
        args_of(args, sizeof(args), "sandbox_id", src);
        json_object_put(call("sandbox_destroy", args));
        make("sandbox_create", "{\"image\":\"base\",\"egress\":\"none\"}", "sandbox_id", src, 64);
        args_of(args, sizeof(args), "snapshot_id", snap);
        make("sandbox_create", args, "sandbox_id", sb, sizeof(sb));
        {
                char *s = exec_out(sb, "cat /workspace/ws");
                is_str(s, "one\n", "a snapshot outlives its source sandbox");
                free(s);
        }

        pausing(src);
        nested_source();
        ttl(src);
        disk_cap(src);
        orphan_image(src);

        /* Deleted while a sandbox runs from it: gone at once for callers;
         * its image goes once that sandbox is gone (the reaper's sweep). */
        args_of(args, sizeof(args), "snapshot_id", snap);
        m = call("sandbox_destroy", args);
        ok(!result_is_error(m), "a snapshot a sandbox runs from can be deleted");
        json_object_put(m);
        m = call("sandbox_create", args);
        ok(result_error_says(m, "unknown snapshot"), "and is unknown at once");
        json_object_put(m);
        args_of(args, sizeof(args), "sandbox_id", sb);
        json_object_put(call("sandbox_destroy", args));
        args_of(args, sizeof(args), "sandbox_id", src);
        json_object_put(call("sandbox_destroy", args));
        {
                int64_t t0 = dm_now_ms();

                while (snapshot_images() != 0 && dm_now_ms() - t0 < slack_ms(60000))
                        usleep(200 * 1000);
        }
        ok(snapshot_images() == 0 && snapshot_dirs() == 0, "at the end no snapshot image or directory is left");
        is_int(finish(c, 20000), 0, "the server exits");
        dm_backend_free(b);
        return done_testing();
}
