/* SPDX-License-Identifier: MIT */
/* The run journal (src/core/activity.h): lines as written, starts and ends
 * merged newest first, concurrent appends whole, and every hostile line a
 * reader may meet (not JSON, a bad id, a huge line, a cut last line, NUL
 * bytes, a link) skipped with a count, never a crash; previews opened and
 * closed. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/core/activity.h"
#include "tests/tap.h"

static char state[64], dir[128];

static void write_file(const char *name, const char *text, size_t len)
{
        char path[256];
        int fd;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ok(fd >= 0 && dm_write_all(fd, text, len) == 0, "wrote %s", name);
        close(fd);
}

static json_object *find(json_object *arr, const char *id)
{
        for (size_t i = 0; i < json_object_array_length(arr); i++) {
                json_object *o = json_object_array_get_idx(arr, i);
                if (strcmp(json_object_get_string(json_object_object_get(o, "id")), id) == 0)
                        return o;
        }
        return NULL;
}

static const char *field(json_object *o, const char *k)
{
        json_object *v;
        return o && json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : NULL;
}

static void test_format(void)
{
        char *line = NULL, big[DM_ACTIVITY_COMMAND_MAX * 2];
        size_t len = 0;

        ok(dm_activity_format(&(struct dm_activity_event){ .event = "start", .id = "../x" }, &line, &len) == -EINVAL,
           "a path as id is refused");
        ok(dm_activity_format(&(struct dm_activity_event){ .event = "begin", .id = "run-1" }, &line, &len) == -EINVAL,
           "an unknown event is refused");
        ok(!dm_activity_id_valid("..") && !dm_activity_id_valid("") && !dm_activity_id_valid("a/b") &&
                   dm_activity_id_valid("run-20261207T101500-abcdef"),
           "ids: only [A-Za-z0-9._-], not . or ..");
        /* A long command with a multibyte character across the cut. */
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        memcpy(big + DM_ACTIVITY_COMMAND_MAX - 1, "\xc3\xa9", 2);
        ok(dm_activity_format(&(struct dm_activity_event){ .event = "start", .id = "run-1", .command = big }, &line,
                              &len) == 0,
           "a long command is written");
        ok(len < DM_ACTIVITY_LINE_MAX && line[len - 1] == '\n' && !memchr(line, '\n', len - 1), "as one short line");
        ok(strstr(line, "\"command_truncated\":true") != NULL, "marked truncated");
        ok(strstr(line, "\xc3") == NULL, "cut before the character that straddles the cap, not inside it");
        free(line);
}

static void test_round_trip(void)
{
        struct dm_activity_stats st = { 0 };
        struct dm_error err = { 0 };
        json_object *arr, *o;

        const struct dm_activity_event evs[] = {
                { .event = "start",
                  .id = "run-a",
                  .kind = "run",
                  .image = "base",
                  .egress = "none",
                  .command = "echo '<img src=x onerror=alert(1)>'",
                  .status = "running",
                  .output_dir = "/tmp/out/run-a",
                  .time_ms = 1000 },
                { .event = "start",
                  .id = "run-b",
                  .kind = "agent",
                  .parent_id = "run-a",
                  .status = "running",
                  .time_ms = 2000 },
                { .event = "end",
                  .id = "run-a",
                  .status = "failed",
                  .has_exit = true,
                  .exit_code = 3,
                  .time_ms = 3000 },
        };

        for (size_t i = 0; i < DM_ARRAY_SIZE(evs); i++)
                dm_activity_record(state, 14, &evs[i]);
        arr = dm_activity_read(state, &st, &err);
        if (!ok(arr != NULL, "read back"))
                diag("%s", err.msg);
        ok(arr && json_object_array_length(arr) == 2, "two runs");
        ok(arr && strcmp(field(json_object_array_get_idx(arr, 0), "id"), "run-b") == 0, "newest first");
        o = find(arr, "run-a");
        is_str(field(o, "status"), "failed", "the end's status wins");
        is_str(field(o, "exit_code"), "3", "its exit code");
        is_str(field(o, "end_ms"), "3000", "its end");
        is_str(field(o, "command"), "echo '<img src=x onerror=alert(1)>'", "the command as text");
        is_str(field(o, "principal"), "local", "a host caller is 'local'");
        is_str(field(find(arr, "run-b"), "parent_id"), "run-a", "the parent id kept for the tree");
        ok(st.files == 1 && st.lines == 3 && st.skipped == 0 && st.truncated == 0, "nothing skipped (%zu %zu %zu %zu)",
           st.files, st.lines, st.skipped, st.truncated);
        json_object_put(arr);
}

/* "preview" lines: opened and closed per port, a hostile URL or port
 * skipped, none left after the sandbox's end. */
static void test_previews(void)
{
        static const char text[] =
                "{\"event\":\"start\",\"id\":\"sbx-1\",\"kind\":\"sandbox\",\"time_ms\":1}\n"
                "{\"event\":\"preview\",\"id\":\"sbx-1\",\"port\":8000,\"open\":true,"
                "\"url\":\"http://127.0.0.1:4000/\",\"time_ms\":2}\n"
                "{\"event\":\"preview\",\"id\":\"sbx-1\",\"port\":5173,\"open\":true,"
                "\"url\":\"http://127.0.0.1:4001/\",\"time_ms\":3}\n"
                "{\"event\":\"preview\",\"id\":\"sbx-1\",\"port\":8000,\"open\":false,\"time_ms\":4}\n"
                "{\"event\":\"preview\",\"id\":\"sbx-1\",\"port\":9,\"open\":true,"
                "\"url\":\"javascript:alert(1)//\",\"time_ms\":5}\n"
                "{\"event\":\"preview\",\"id\":\"sbx-1\",\"port\":0,\"open\":true,"
                "\"url\":\"http://127.0.0.1:4002/\",\"time_ms\":6}\n";
        static const char end[] = "{\"event\":\"end\",\"id\":\"sbx-1\",\"status\":\"destroyed\",\"time_ms\":7}\n";
        struct dm_activity_stats st = { 0 };
        json_object *runs = json_object_new_object(), *list;
        char *line = NULL;
        size_t len = 0;

        ok(dm_activity_format(
                   &(struct dm_activity_event){
                           .event = "preview", .id = "sbx-1", .port = 8000, .url = "http://127.0.0.1:4000/" },
                   &line, &len) == 0 &&
                   strstr(line, "\"port\":8000,\"open\":true,\"url\":\"http://127.0.0.1:4000/\""),
           "a preview line has its port and URL");
        free(line);
        dm_activity_parse(text, sizeof(text) - 1, "1-1.jsonl", runs, &st);
        list = json_object_object_get(json_object_object_get(runs, "sbx-1"), "previews");
        ok(list && json_object_array_length(list) == 1 &&
                   json_object_get_int(json_object_object_get(json_object_array_get_idx(list, 0), "port")) == 5173,
           "the closed preview is gone, the open one kept");
        ok(st.lines == 4 && st.skipped == 2, "a hostile URL and port 0 skipped (%zu %zu)", st.lines, st.skipped);
        dm_activity_parse(end, sizeof(end) - 1, "1-1.jsonl", runs, &st);
        ok(!json_object_object_get_ex(json_object_object_get(runs, "sbx-1"), "previews", NULL),
           "none after the sandbox's end");
        json_object_put(runs);
}

static void test_hostile(void)
{
        struct dm_activity_stats st = { 0 };
        struct dm_error err = { 0 };
        size_t huge_len = DM_ACTIVITY_LINE_MAX * 4;
        char *huge = malloc(huge_len + 64);
        json_object *arr;
        char path[256];

        /* A huge line, then good ones, then lies, then a cut last line. */
        memset(huge, 'x', huge_len);
        memcpy(huge, "{\"event\":\"start\",\"id\":\"run-huge\",\"time_ms\":1,\"command\":\"", 56);
        memcpy(huge + huge_len - 3, "\"}\n", 3);
        write_file("hostile.jsonl", huge, huge_len);
        free(huge);
        static const char lies[] = "not json\n"
                                   "[1,2]\n"
                                   "{\"event\":\"start\",\"id\":\"../../etc\",\"time_ms\":5}\n"
                                   "{\"event\":\"start\",\"id\":\"run-nan\",\"time_ms\":\"x\"}\n"
                                   "{\"event\":\"explode\",\"id\":\"run-e\",\"time_ms\":5}\n"
                                   "{\"event\":\"start\",\"id\":\"run-ok\",\"time_ms\":7,\"parent_id\":\"../x\"}\n"
                                   "\xff\xfe{}\n"
                                   "{\"event\":\"end\",\"id\":\"run-cut\",\"ti";
        write_file("lies.jsonl", lies, sizeof(lies) - 1);
        static const char nul[] = "{\"event\":\"start\",\0\"id\":\"run-n\",\"time_ms\":1}\n";
        write_file("nul.jsonl", nul, sizeof(nul) - 1);
        snprintf(path, sizeof(path), "%s/link.jsonl", dir);
        ok(symlink("/etc/passwd", path) == 0, "a link planted");
        arr = dm_activity_read(state, &st, &err);
        ok(arr != NULL, "read with hostile journals");
        ok(find(arr, "run-huge") == NULL, "the huge line skipped");
        ok(find(arr, "run-ok") != NULL && field(find(arr, "run-ok"), "parent_id") == NULL,
           "a good line kept, its path-like parent dropped");
        ok(find(arr, "run-cut") == NULL && find(arr, "run-nan") == NULL && find(arr, "run-e") == NULL &&
                   find(arr, "run-n") == NULL,
           "lies are not runs");
        ok(st.skipped == 8, "skipped counted: %zu", st.skipped);
        ok(st.truncated == 1, "the cut last line counted: %zu", st.truncated);
        ok(st.files == 4, "the link is not read: %zu files", st.files);
        json_object_put(arr);
}

struct writer {
        int fd, n;
};

static void *append_many(void *p)
{
        struct writer *w = p;
        char id[32];

        for (int i = 0; i < 200; i++) {
                snprintf(id, sizeof(id), "run-%d-%d", w->n, i);
                dm_activity_append(w->fd, &(struct dm_activity_event){ .event = "start",
                                                                       .id = id,
                                                                       .command = "a command of some length",
                                                                       .time_ms = 1 + i });
        }
        return NULL;
}

static void test_concurrent(void)
{
        char path[256];
        pthread_t t[4];
        struct writer w[4];
        _cleanup_free_ char *text = NULL;
        size_t len = 0;
        struct dm_activity_stats st = { 0 };
        json_object *runs = json_object_new_object();

        snprintf(path, sizeof(path), "%s/many.jsonl", dir);
        for (int i = 0; i < 4; i++) {
                w[i] = (struct writer){ .fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600), .n = i };
                pthread_create(&t[i], NULL, append_many, &w[i]);
        }
        for (int i = 0; i < 4; i++) {
                pthread_join(t[i], NULL);
                close(w[i].fd);
        }
        {
                _cleanup_close_ int dfd = dm_io_open_dir(dir);
                ok(dm_io_read_capped(dfd, "many.jsonl", 1 << 24, &text, &len) == 0, "read the journal");
        }
        dm_activity_parse(text, len, "many.jsonl", runs, &st);
        ok(st.lines == 800 && st.skipped == 0 && st.truncated == 0,
           "4 writers x 200 appends: every line whole (%zu lines, %zu skipped)", st.lines, st.skipped);
        json_object_put(runs);
}

static void test_prune(void)
{
        char path[256];
        struct timespec old[2] = { { .tv_sec = 1000 }, { .tv_sec = 1000 } };
        _cleanup_close_ int dfd = -1;

        write_file("old.jsonl", "", 0);
        write_file("keep.txt", "", 0);
        snprintf(path, sizeof(path), "%s/old.jsonl", dir);
        utimensat(AT_FDCWD, path, old, 0);
        snprintf(path, sizeof(path), "%s/keep.txt", dir);
        utimensat(AT_FDCWD, path, old, 0);
        dfd = dm_io_open_dir(dir);
        ok(dm_activity_prune(dfd, 0, NULL) == 0, "0 days: nothing removed");
        ok(dm_activity_prune(dfd, 14, NULL) == 1, "an old journal removed");
        ok(access(path, F_OK) == 0, "a file that is not a journal stays");
        snprintf(path, sizeof(path), "%s/many.jsonl", dir);
        ok(access(path, F_OK) == 0, "a recent journal stays");
}

int main(void)
{
        char cmd[256];

        snprintf(state, sizeof(state), "/tmp/dm-activity-XXXXXX");
        if (!mkdtemp(state))
                return 1;
        snprintf(dir, sizeof(dir), "%s/%s", state, DM_ACTIVITY_DIR);
        test_format();
        test_round_trip();
        test_previews();
        test_hostile();
        test_concurrent();
        test_prune();
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", state);
        if (system(cmd) != 0)
                diag("cannot remove %s", state);
        return done_testing();
}
