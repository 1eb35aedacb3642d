/* SPDX-License-Identifier: MIT */
/* The run ledger and the usage report over it (src/core/ledger.h): trees
 * rolled up, principals kept apart, live and interrupted runs, every scope,
 * hostile names and files; and dm_time_parse, which `since` goes through. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/timeutil.h"
#include "src/core/context.h"
#include "src/core/ledger.h"
#include "tests/tap.h"

static char root[64];
static const char *me = "not-an-owner"; /* unparseable: every owner counts as alive */

static json_object *usage(int64_t in, int64_t out, int64_t cr, int64_t cw, double cost, const char *per)
{
        char text[1024];

        snprintf(text, sizeof(text),
                 "{\"input_tokens\":%lld,\"output_tokens\":%lld,\"cache_read_tokens\":%lld,"
                 "\"cache_write_tokens\":%lld,\"cost_usd\":%.6f,\"requests\":1,\"per_model\":%s}",
                 (long long)in, (long long)out, (long long)cr, (long long)cw, cost, per);
        return json_tokener_parse(text);
}

static void begin(const char *id, const char *kind, const char *parent, const char *principal, const char *job,
                  const char *owner)
{
        char dir[128];
        struct dm_error err = { 0 };
        struct dm_ledger_run r = { .run_id = id,
                                   .kind = kind,
                                   .image = "python",
                                   .principal = principal,
                                   .job_id = job,
                                   .parent_run_id = parent,
                                   .output_dir = dir };

        snprintf(dir, sizeof(dir), "%s/%s", root, id);
        mkdir(dir, 0700);
        if (!ok(dm_ledger_begin(root, owner, &r, &err) == 0, "begin %s", id))
                diag("%s", err.msg);
}

static void end(const char *id, const char *status, int exit_code, int64_t ms, json_object *u)
{
        struct dm_error err = { 0 };

        if (u) {
                ok(dm_ledger_set_usage(root, id, u, &err) == 0, "usage of %s", id);
                json_object_put(u);
        }
        ok(dm_ledger_end(root, id, status, true, exit_code, ms, NULL, &err) == 0, "end %s", id);
}

static json_object *report(const char *principal, struct dm_ledger_scope s, struct dm_error *err)
{
        memset(err, 0, sizeof(*err));
        return dm_ledger_report(root, me, principal, &s, err);
}

static int64_t geti(json_object *o, const char *path)
{
        char buf[128], *save = NULL;
        json_object *v = o;

        snprintf(buf, sizeof(buf), "%s", path);
        for (char *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save)) {
                json_object *next = NULL;

                if (json_object_is_type(v, json_type_array))
                        next = json_object_array_get_idx(v, (size_t)atoi(k));
                else if (!json_object_object_get_ex(v, k, &next))
                        next = NULL;
                v = next;
        }
        return v ? json_object_get_int64(v) : -1;
}

static double getd(json_object *o, const char *a, const char *b)
{
        json_object *v = o;

        if (!json_object_object_get_ex(v, a, &v) || (b && !json_object_object_get_ex(v, b, &v)))
                return -1;
        return json_object_get_double(v);
}

static const char *row_str(json_object *rep, size_t i, const char *key)
{
        json_object *rows, *v;

        if (!json_object_object_get_ex(rep, "runs", &rows) || i >= json_object_array_length(rows) ||
            !json_object_object_get_ex(json_object_array_get_idx(rows, i), key, &v))
                return "(none)";
        return json_object_get_string(v);
}

static void write_file(const char *path, const char *text)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        ok(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text), "wrote %s", path);
        if (fd >= 0)
                close(fd);
}

/* What a hostile sandbox writes in its /out: the usage.json the ledger read
 * for live runs before. */
static void forge(const char *id)
{
        char path[256];

        snprintf(path, sizeof(path), "%s/%s/usage.json", root, id);
        write_file(path, "{\"cost_usd\":-1000,\"input_tokens\":-5,\"output_tokens\":99999,"
                         "\"per_model\":{\"forged\":{\"cost_usd\":-1000,\"input_tokens\":-5}}}");
}

/* Figures that are no spend: negative, not finite, absurdly large, not
 * numbers. Each counts as 0, in the final figures and the live ones. */
static void test_bad_figures(void)
{
        static const char *const bad =
                "{\"input_tokens\":-5,\"output_tokens\":1e300,\"cache_read_tokens\":\"12\","
                "\"cache_write_tokens\":4,\"cost_usd\":%s,"
                "\"per_model\":{\"m\":{\"input_tokens\":-1,\"cost_usd\":%s,\"cache_write_tokens\":4}}}";
        const char *costs[] = { "-1000", "NaN", "Infinity", "-Infinity", "1e300", "1e7", "\"0.5\"" };
        struct dm_error err = { 0 };
        char text[512], path[256];

        for (size_t i = 0; i < sizeof(costs) / sizeof(costs[0]); i++) {
                char id[32];
                json_object *u, *rep;

                snprintf(id, sizeof(id), "run-bad%zu", i);
                snprintf(text, sizeof(text), bad, costs[i], costs[i]);
                begin(id, "agent", NULL, "local", NULL, me);
                if (i % 2 == 0) {
                        u = json_tokener_parse(text);
                        ok(u != NULL, "figures %s parse", costs[i]);
                        end(id, "succeeded", 0, 10, u);
                } else {
                        ok(dm_ledger_live_path(root, id, path, sizeof(path), &err) == 0, "live path of %s", id);
                        write_file(path, text);
                }
                rep = report("local", (struct dm_ledger_scope){ .run_id = id }, &err);
                ok(rep && getd(rep, "cost_usd", NULL) == 0, "%s cost %s counts as $0 (%f)", i % 2 ? "live" : "final",
                   costs[i], rep ? getd(rep, "cost_usd", NULL) : -1);
                is_int(rep ? geti(rep, "usage.input_tokens") : -1, 0, "negative tokens count as 0");
                is_int(rep ? geti(rep, "usage.output_tokens") : -1, 0, "1e300 tokens count as 0");
                is_int(rep ? geti(rep, "usage.cache_read_tokens") : -1, 0, "a string is no figure");
                is_int(rep ? geti(rep, "usage.cache_write_tokens") : -1, 4, "a good figure beside them counts");
                is_int(rep ? geti(rep, "usage.per_model.m.input_tokens") : -1, 0, "per model: checked the same");
                json_object_put(rep);
        }
        /* Final figures replace the live ones, which go. */
        begin("run-fin", "agent", NULL, "local", NULL, me);
        ok(dm_ledger_live_path(root, "run-fin", path, sizeof(path), &err) == 0, "live path of run-fin");
        write_file(path, "{\"input_tokens\":1,\"cost_usd\":0.1}");
        end("run-fin", "succeeded", 0, 10, usage(2, 0, 0, 0, 0.2, "{}"));
        ok(access(path, F_OK) < 0 && errno == ENOENT, "the final figures written, the live file is gone");
        ok(dm_ledger_live_path(root, "../x", path, sizeof(path), &err) == -EINVAL, "a bad run id has no live path");
}

static void test_time_parse(void)
{
        int64_t t = 0;

        ok(dm_time_parse("2026-12-04T10:00:00Z", &t) == 0 && t == 1796378400, "RFC 3339 in UTC");
        ok(dm_time_parse("2026-12-04T11:00:00+01:00", &t) == 0 && t == 1796378400, "an offset east");
        ok(dm_time_parse("2026-12-04T09:30:00-00:30", &t) == 0 && t == 1796378400, "an offset west");
        ok(dm_time_parse("2026-12-04T10:00:00.250Z", &t) == 0 && t == 1796378400, "a fraction");
        ok(dm_time_parse("2026-12-04T10:00:00", &t) == 0 && t == 1796378400, "no zone: UTC");
        ok(dm_time_parse("2026-12-04", &t) == 0 && t == 1796342400, "a date: midnight UTC");
        ok(dm_time_parse("2026-12-04T10:00:00Zjunk", &t) == -EINVAL, "trailing text refused");
        ok(dm_time_parse("yesterday", &t) == -EINVAL, "words refused");
        ok(dm_time_parse(" 2026-12-04", &t) == -EINVAL, "leading blanks refused");
        ok(dm_time_parse("2026-12-04T1:00:00Z", &t) == -EINVAL, "a one-digit hour refused");
        ok(dm_time_parse("2026-12-04T10:00:00.Z", &t) == -EINVAL, "an empty fraction refused");
        ok(dm_time_parse("2026-12-04T10:00:00+1:00", &t) == -EINVAL, "a short offset refused");
        ok(dm_time_parse("", &t) == -EINVAL && dm_time_parse(NULL, &t) == -EINVAL, "empty and NULL refused");
}

int main(void)
{
        struct dm_error err = { 0 };
        json_object *rep, *u;
        char path[256];
        int fd;

        test_time_parse();

        snprintf(root, sizeof(root), "/tmp/dm-ledger-XXXXXX");
        if (!mkdtemp(root))
                return skip_all("no temporary directory");

        rep = report("local", (struct dm_ledger_scope){ .has_since = true, .since = 0 }, &err);
        ok(rep && geti(rep, "sandbox_count") == 0 && getd(rep, "cost_usd", NULL) == 0,
           "no ledger yet: an empty report, no error");
        json_object_put(rep);

        /* A tree: a script whose sandbox ran an agent, which ran another. */
        begin("run-a", "script", NULL, NULL, "job-1", me);
        end("run-a", "succeeded", 0, 1500, NULL);
        begin("run-b", "agent", "run-a", "local", NULL, me);
        end("run-b", "succeeded", 0, 4000,
            usage(100, 50, 10, 5, 0.25,
                  "{\"m1\":{\"input_tokens\":100,\"output_tokens\":50,\"cache_read_tokens\":10,"
                  "\"cache_write_tokens\":5,\"cost_usd\":0.25}}"));
        begin("run-c", "research", "run-b", "local", NULL, me);
        end("run-c", "failed", 2, 500,
            usage(3, 2, 0, 0, 0.015,
                  "{\"m1\":{\"input_tokens\":1,\"output_tokens\":1,\"cost_usd\":0.005},"
                  "\"m2\":{\"input_tokens\":2,\"output_tokens\":1,\"cost_usd\":0.01}}"));
        /* Someone else's, under the same root. */
        begin("run-d", "agent", NULL, "token:other", NULL, me);
        end("run-d", "succeeded", 0, 100, usage(1000, 1000, 0, 0, 9, "{}"));
        /* A run whose server died: no end, its proxy's live figures in the
         * ledger say 7 tokens. */
        begin("run-e", "agent", NULL, "local", NULL, "aaaaaaaa-1-1");
        ok(dm_ledger_live_path(root, "run-e", path, sizeof(path), &err) == 0 &&
                   strcmp(path + strlen(root), "/.ledger/run-e.live") == 0,
           "the live figures' place is in the ledger: %s", path);
        write_file(path, "{\"input_tokens\":7,\"cost_usd\":0.5}");
        /* What the sandboxes wrote in their /out: forged usage.json files,
         * in a live run's and in an ended one's. None of it is read. */
        forge("run-e");
        forge("run-b");
        forge("run-a");

        rep = report(NULL, (struct dm_ledger_scope){ .run_id = "run-a" }, &err);
        ok(rep != NULL, "report on the root run");
        is_int(geti(rep, "sandbox_count"), 3, "the whole tree: three runs");
        is_str(row_str(rep, 0, "run_id"), "run-a", "parents before children (0)");
        is_str(row_str(rep, 1, "run_id"), "run-b", "parents before children (1)");
        is_str(row_str(rep, 2, "run_id"), "run-c", "parents before children (2)");
        is_int(geti(rep, "runs.2.depth"), 2, "the grandchild at depth 2");
        ok(getd(rep, "cost_usd", NULL) > 0.26499 && getd(rep, "cost_usd", NULL) < 0.26501, "cost sums: 0.265");
        is_int(geti(rep, "usage.input_tokens"), 103, "input tokens sum");
        is_int(geti(rep, "usage.output_tokens"), 52, "output tokens sum");
        is_int(geti(rep, "usage.cache_read_tokens"), 10, "cache read tokens sum");
        is_int(geti(rep, "usage.cache_write_tokens"), 5, "cache write tokens sum");
        is_int(geti(rep, "usage.per_model.m1.input_tokens"), 101, "per model: m1 over two runs");
        is_int(geti(rep, "usage.per_model.m2.input_tokens"), 2, "per model: m2");
        ok(getd(rep, "sandbox_seconds", NULL) > 5.99 && getd(rep, "sandbox_seconds", NULL) < 6.01,
           "sandbox time sums the runs' wall times");
        is_int(geti(rep, "by_kind.agent"), 1, "by kind: one agent");
        is_int(geti(rep, "by_kind.research"), 1, "by kind: one research run");
        is_str(row_str(rep, 2, "status"), "failed", "a row keeps its status");
        is_int(geti(rep, "runs.2.exit_code"), 2, "and its exit code");
        {
                char *table = dm_ledger_table(rep);

                ok(table && strstr(table, "  run-b") && strstr(table, "    run-c") && strstr(table, "total") &&
                           strstr(table, "3 sandboxes"),
                   "the table indents children and ends with the totals");
                free(table);
        }
        json_object_put(rep);

        rep = report("local", (struct dm_ledger_scope){ .run_id = "run-b" }, &err);
        is_int(rep ? geti(rep, "sandbox_count") : -1, 2, "a subtree: the run and its child");
        is_int(rep ? geti(rep, "runs.0.depth") : -1, 0, "the asked run is depth 0");
        json_object_put(rep);

        rep = report("local", (struct dm_ledger_scope){ .job_id = "job-1" }, &err);
        is_int(rep ? geti(rep, "sandbox_count") : -1, 3, "a job: its run's whole tree");
        json_object_put(rep);

        snprintf(path, sizeof(path), "%s/run-e/", root);
        rep = report("local", (struct dm_ledger_scope){ .output_dir = path }, &err);
        ok(rep != NULL, "an output directory (trailing slash and all)");
        is_str(row_str(rep, 0, "status"), "interrupted", "a dead server's running run is interrupted");
        is_int(geti(rep, "usage.input_tokens"), 7, "its tokens from its live figures in the ledger");
        ok(getd(rep, "cost_usd", NULL) > 0.4999 && getd(rep, "cost_usd", NULL) < 0.5001,
           "its cost from the ledger too, not from the forged usage.json ($%f)", getd(rep, "cost_usd", NULL));
        is_str(row_str(rep, 0, "usage_final"), "false", "marked not final");
        json_object_put(rep);

        rep = report("local", (struct dm_ledger_scope){ .has_since = true, .since = 0 }, &err);
        is_int(rep ? geti(rep, "sandbox_count") : -1, 4, "since the epoch: every run of this principal");
        json_object_put(rep);
        rep = report("local", (struct dm_ledger_scope){ .has_since = true, .since = dm_wall_ms() / 1000 + 3600 }, &err);
        is_int(rep ? geti(rep, "sandbox_count") : -1, 0, "since an hour ahead: none");
        json_object_put(rep);

        rep = report("token:other", (struct dm_ledger_scope){ .run_id = "run-a" }, &err);
        ok(!rep && err.code == -ENOENT && strstr(err.msg, "no run 'run-a' of yours"),
           "another principal's run is unknown: %s", err.msg);
        rep = report("token:other", (struct dm_ledger_scope){ .has_since = true }, &err);
        is_int(rep ? geti(rep, "sandbox_count") : -1, 1, "each principal sees its own runs only");
        json_object_put(rep);
        rep = report("local", (struct dm_ledger_scope){ .job_id = "job-9" }, &err);
        ok(!rep && err.code == -ENOENT && strstr(err.msg, "job 'job-9'"), "an unknown job: %s", err.msg);
        rep = report("local", (struct dm_ledger_scope){ .output_dir = "/tmp" }, &err);
        ok(!rep && strstr(err.msg, "directly under the output root"), "a directory outside the root: %s", err.msg);
        rep = report("local", (struct dm_ledger_scope){ .output_dir = root }, &err);
        ok(!rep && strstr(err.msg, "directly under the output root"), "the root itself: %s", err.msg);
        rep = report("local", (struct dm_ledger_scope){ .output_dir = "/nonexistent/run-a" }, &err);
        ok(!rep && err.code == -ENOENT, "a missing directory: %s", err.msg);

        /* Hostile names and files. */
        {
                struct dm_ledger_run bad = { .run_id = "../escape" };

                ok(dm_ledger_begin(root, me, &bad, &err) == -EINVAL, "a run id with a slash is refused");
                bad.run_id = ".hidden";
                ok(dm_ledger_begin(root, me, &bad, &err) == -EINVAL, "a dot run id is refused");
                ok(dm_ledger_end(root, "run-zz", "failed", false, 0, 0, NULL, &err) == -ENOENT,
                   "ending a run with no entry: ENOENT");
        }
        snprintf(path, sizeof(path), "%s/.ledger/junk.json", root);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        ok(fd >= 0 && write(fd, "not json", 8) == 8, "a junk entry");
        close(fd);
        snprintf(path, sizeof(path), "%s/.ledger/link.json", root);
        ok(symlink("run-a.json", path) == 0, "a symlinked entry");
        rep = report("local", (struct dm_ledger_scope){ .has_since = true }, &err);
        is_int(rep ? geti(rep, "sandbox_count") : -1, 4, "junk and links are skipped, not counted twice");
        json_object_put(rep);

        u = json_object_new_array();
        ok(dm_ledger_set_usage(root, "run-a", u, &err) == -EINVAL, "usage must be an object");
        json_object_put(u);

        test_bad_figures();

        dm_remove_tree(root);
        return done_testing();
}
