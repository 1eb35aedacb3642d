/* SPDX-License-Identifier: MIT */
/* The activity view's JSON API, /ui/api/v1/ (docs/reference/activity-api.md):
 * the runs of every journal (src/core/activity.h), one run with its output
 * files, a file of its output, and the journals' new lines as server-sent
 * events. */
#include "config.h"
#include "src/cli/ui.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/core/activity.h"
#include "src/core/ledger.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"
#include "src/basic/uri.h"

#define API_VERSION 1
#define MAX_FILES 1000       /* output files listed for one run */
#define FILE_DEPTH 8         /* directory levels listed */
#define KEEPALIVE_MS 15000   /* a comment on a quiet stream */
#define SCAN_MAX (1u << 20)  /* bytes of one journal read per look */
#define TAIL_MAX (64u << 10) /* bytes of a log in one tail answer */

static atomic_int streams;
static atomic_bool stopping;

void dm_ui_api_stop(void)
{
        atomic_store(&stopping, true);
}

/* A filter's value: [a-z_], 1..32. */
static bool word(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > 32)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == '_'))
                        return false;
        return true;
}

static bool field_is(json_object *o, const char *k, const char *want)
{
        json_object *v;

        return !want || (json_object_object_get_ex(o, k, &v) && strcmp(json_object_get_string(v), want) == 0);
}

static enum MHD_Result runs(const struct ui_paths *p, struct MHD_Connection *c)
{
        const char *status = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "status");
        const char *kind = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "kind");
        struct dm_activity_stats st = { 0 };
        struct dm_error err = { 0 };
        json_object *all, *out, *o;

        if ((status && !word(status)) || (kind && !word(kind)))
                return dm_ui_error(c, MHD_HTTP_BAD_REQUEST, "status and kind are words of a-z and _");
        all = dm_activity_read(p->state_dir, &st, &err);
        if (!all)
                return dm_ui_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, err.msg);
        out = json_object_new_array();
        for (size_t i = 0; i < json_object_array_length(all); i++) {
                json_object *run = json_object_array_get_idx(all, i);
                json_object_object_del(run, "egress_decisions"); /* the run's own page has them */
                if (field_is(run, "status", status) && field_is(run, "kind", kind))
                        json_object_array_add(out, json_object_get(run));
        }
        json_object_put(all);
        o = json_object_new_object();
        json_object_object_add(o, "api_version", json_object_new_int(API_VERSION));
        json_object_object_add(o, "runs", out);
        json_object_object_add(o, "journals", json_object_new_int64((int64_t)st.files));
        json_object_object_add(o, "skipped_lines", json_object_new_int64((int64_t)(st.skipped + st.truncated)));
        return dm_ui_json(c, MHD_HTTP_OK, o);
}

static int list_file(void *userdata, const char *path, const struct stat *st)
{
        json_object *files = userdata, *f;

        if (json_object_array_length(files) >= MAX_FILES)
                return -E2BIG;
        f = json_object_new_object();
        json_object_object_add(f, "name", json_object_new_string(path));
        json_object_object_add(f, "size", json_object_new_int64((int64_t)st->st_size));
        json_object_array_add(files, f);
        return 0;
}

/* The run's output directory: <output root>/<id>, opened without
 * following a link (what the journal says of it is not used). */
static int run_dir(const struct ui_paths *p, const char *id)
{
        _cleanup_close_ int root = dm_io_open_dir(p->output_root);

        if (root < 0)
                return root;
        return dm_io_open_beneath(root, id, O_RDONLY | O_DIRECTORY, 0);
}

/* What the run and the runs below it cost: sandbox_usage_report's answer
 * for the run's tree (src/core/ledger.h), when the ledger has the run. */
static void add_usage(const struct ui_paths *p, json_object *run, const char *id)
{
        struct dm_error err = { 0 };
        json_object *v, *report;
        const char *who = json_object_object_get_ex(run, "principal", &v) ? json_object_get_string(v) : NULL;

        report = dm_ledger_report(p->output_root, NULL, who, &(struct dm_ledger_scope){ .run_id = id }, &err);
        if (report)
                json_object_object_add(run, "usage_report", report);
}

static void usage_add(json_object *sum, json_object *run)
{
        static const char *const keys[] = { "input_tokens", "output_tokens" };
        json_object *u, *v;

        if (!json_object_object_get_ex(run, "usage", &u) || !json_object_object_get_ex(u, "own", &u))
                return;
        for (size_t i = 0; i < DM_ARRAY_SIZE(keys); i++)
                json_object_object_add(
                        sum, keys[i],
                        json_object_new_int64(
                                json_object_get_int64(json_object_object_get(sum, keys[i])) +
                                (json_object_object_get_ex(u, keys[i], &v) ? json_object_get_int64(v) : 0)));
        json_object_object_add(sum, "cost_usd",
                               json_object_new_double(json_object_get_double(json_object_object_get(sum, "cost_usd")) +
                                                      json_object_get_double(json_object_object_get(u, "cost_usd"))));
}

static json_object *usage_zero(void)
{
        json_object *o = json_object_new_object();

        json_object_object_add(o, "input_tokens", json_object_new_int64(0));
        json_object_object_add(o, "output_tokens", json_object_new_int64(0));
        json_object_object_add(o, "cost_usd", json_object_new_double(0));
        return o;
}

/* usage {own, tree}: the journal's "usage" figures of the run (zeros when
 * it used no model), and summed over it and every run below it
 * (parent_id), each run once. */
static void add_tree_usage(json_object *all, json_object *run, const char *id)
{
        json_object *own = usage_zero(), *tree = usage_zero(), *in = json_object_new_object(), *u;
        size_t n = json_object_array_length(all), added = 1;

        usage_add(own, run);
        json_object_object_add(in, id, NULL);
        /* Passes until no run joins: a tree is a few levels deep. */
        while (added) {
                added = 0;
                for (size_t i = 0; i < n; i++) {
                        json_object *r = json_object_array_get_idx(all, i), *v;
                        const char *rid = json_object_get_string(json_object_object_get(r, "id"));
                        if (json_object_object_get_ex(in, rid, NULL) ||
                            !json_object_object_get_ex(r, "parent_id", &v) ||
                            !json_object_object_get_ex(in, json_object_get_string(v), NULL))
                                continue;
                        json_object_object_add(in, rid, NULL);
                        usage_add(tree, r);
                        added++;
                }
        }
        json_object_put(in);
        usage_add(tree, run);
        u = json_object_new_object();
        json_object_object_add(u, "own", own);
        json_object_object_add(u, "tree", tree);
        json_object_object_add(run, "usage", u);
}

static enum MHD_Result one_run(const struct ui_paths *p, struct MHD_Connection *c, const char *id)
{
        struct dm_error err = { 0 };
        json_object *all = dm_activity_read(p->state_dir, NULL, &err), *run = NULL, *files;
        _cleanup_close_ int dfd = -1;
        int r;

        if (!all)
                return dm_ui_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, err.msg);
        for (size_t i = 0; i < json_object_array_length(all) && !run; i++)
                if (field_is(json_object_array_get_idx(all, i), "id", id))
                        run = json_object_get(json_object_array_get_idx(all, i));
        if (run) {
                if (!json_object_object_get_ex(run, "egress_decisions", NULL))
                        json_object_object_add(run, "egress_decisions", json_object_new_array());
                add_tree_usage(all, run, id);
        }
        json_object_put(all);
        if (!run)
                return dm_ui_error(c, MHD_HTTP_NOT_FOUND, "no such run");
        files = json_object_new_array();
        dfd = run_dir(p, id);
        r = dfd >= 0 ? dm_io_walk_files(dfd, FILE_DEPTH, false, list_file, files) : 0;
        json_object_object_add(run, "files", files);
        if (r == -E2BIG)
                json_object_object_add(run, "files_truncated", json_object_new_boolean(true));
        add_usage(p, run, id);
        json_object_object_add(run, "api_version", json_object_new_int(API_VERSION));
        return dm_ui_json(c, MHD_HTTP_OK, run);
}

/* Inline only what a browser cannot run: plain text and raster images. */
static const char *inline_type(const char *name)
{
        static const char *const raster[] = { "image/png", "image/jpeg", "image/gif", "image/webp" };
        const char *type = dm_mime_type(name);

        if (strcmp(type, "text/plain") == 0)
                return "text/plain; charset=utf-8";
        for (size_t i = 0; i < DM_ARRAY_SIZE(raster); i++)
                if (strcmp(type, raster[i]) == 0)
                        return type;
        return NULL;
}

static enum MHD_Result one_file(const struct ui_paths *p, struct MHD_Connection *c, const char *id, const char *raw)
{
        _cleanup_free_ char *path = strdup(raw);
        _cleanup_close_ int dfd = -1;
        struct MHD_Response *r;
        const char *type;
        struct stat st;
        int fd;

        if (!path || dm_uri_decode_in_place(path) < 0 || !*path)
                return dm_ui_error(c, MHD_HTTP_BAD_REQUEST, "a bad file path");
        dfd = run_dir(p, id);
        if (dfd < 0)
                return dm_ui_error(c, MHD_HTTP_NOT_FOUND, "no such run");
        /* Beneath the run's directory, no link, no "..", a regular file. */
        fd = dm_io_open_beneath(dfd, path, O_RDONLY, 0);
        if (fd < 0 || fstat(fd, &st) < 0) {
                if (fd >= 0)
                        close(fd);
                return dm_ui_error(c, MHD_HTTP_NOT_FOUND, "no such file");
        }
        r = MHD_create_response_from_fd((uint64_t)st.st_size, fd);
        if (!r) {
                close(fd);
                return MHD_NO;
        }
        type = inline_type(path);
        MHD_add_response_header(r, "Content-Type", type ? type : "application/octet-stream");
        MHD_add_response_header(r, "Content-Disposition", type ? "inline" : "attachment");
        return dm_ui_queue(c, MHD_HTTP_OK, r);
}

/* A piece of the run's stdout.log or stderr.log as it grows: at most
 * TAIL_MAX bytes from ?from=N (default: the last TAIL_MAX), with the offset
 * to ask from next in X-Log-Next and the log's size in X-Log-Size. */
static enum MHD_Result tail(const struct ui_paths *p, struct MHD_Connection *c, const char *id, const char *which)
{
        const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "from");
        _cleanup_close_ int dfd = -1;
        struct MHD_Response *r;
        uint64_t from, n;
        char num[32], *end;
        struct stat st;
        int fd;

        if (strcmp(which, "stdout") != 0 && strcmp(which, "stderr") != 0)
                return dm_ui_error(c, MHD_HTTP_NOT_FOUND, "a tail is of stdout or stderr");
        errno = 0;
        from = q ? strtoull(q, &end, 10) : 0;
        if (q && (!*q || *end || errno || *q == '-'))
                return dm_ui_error(c, MHD_HTTP_BAD_REQUEST, "from is a byte offset");
        dfd = run_dir(p, id);
        if (dfd < 0)
                return dm_ui_error(c, MHD_HTTP_NOT_FOUND, "no such run");
        snprintf(num, sizeof(num), "%s.log", which);
        fd = dm_io_open_beneath(dfd, num, O_RDONLY, 0);
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                if (fd >= 0)
                        close(fd);
                return dm_ui_error(c, MHD_HTTP_NOT_FOUND, "no such log");
        }
        if (!q)
                from = (uint64_t)st.st_size > TAIL_MAX ? (uint64_t)st.st_size - TAIL_MAX : 0;
        if (from > (uint64_t)st.st_size)
                from = (uint64_t)st.st_size;
        n = (uint64_t)st.st_size - from;
        if (n > TAIL_MAX)
                n = TAIL_MAX;
        r = MHD_create_response_from_fd_at_offset64(n, fd, from);
        if (!r) {
                close(fd);
                return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
        snprintf(num, sizeof(num), "%" PRIu64, from + n);
        MHD_add_response_header(r, "X-Log-Next", num);
        snprintf(num, sizeof(num), "%" PRIu64, (uint64_t)st.st_size);
        MHD_add_response_header(r, "X-Log-Size", num);
        return dm_ui_queue(c, MHD_HTTP_OK, r);
}

/* ---- server-sent events ------------------------------------------------------------------ */

/* A 250 ms look at the journals' sizes rather than inotify: journals come
 * and go with servers, a look is a few fstatat() calls, and a line shows
 * within a second as the API promises either way. */
struct seen {
        char name[64];
        off_t off;
};

struct stream {
        char state_dir[4096];
        struct seen seen[DM_ACTIVITY_READ_FILES];
        size_t n_seen;
        char *out;
        size_t len, pos;
        int64_t last_ms;
        int ino, watch; /* inotify on the journals' folder; -1: polled */
};

static struct seen *seen_of(struct stream *s, const char *name)
{
        for (size_t i = 0; i < s->n_seen; i++)
                if (strcmp(s->seen[i].name, name) == 0)
                        return &s->seen[i];
        if (s->n_seen == DM_ARRAY_SIZE(s->seen) || strlen(name) >= sizeof(s->seen[0].name))
                return NULL;
        snprintf(s->seen[s->n_seen].name, sizeof(s->seen[0].name), "%s", name);
        s->seen[s->n_seen].off = 0;
        return &s->seen[s->n_seen++];
}

static void emit(struct stream *s, const char *text, size_t n)
{
        char *grown = realloc(s->out, s->len + n);

        if (!grown)
                return;
        s->out = grown;
        memcpy(s->out + s->len, text, n);
        s->len += n;
}

/* Each whole new line of one journal becomes an event "run". */
static void emit_lines(struct stream *s, const char *journal, const char *text, size_t len)
{
        size_t at = 0;

        while (at < len) {
                const char *nl = memchr(text + at, '\n', len - at);
                size_t n = (size_t)(nl - (text + at));
                struct dm_activity_stats st = { 0 };
                json_object *one = json_object_new_object();

                dm_activity_parse(text + at, n + 1, journal, one, &st);
                json_object_object_foreach(one, key, run)
                {
                        const char *j = json_object_to_json_string_ext(run, JSON_C_TO_STRING_PLAIN);
                        (void)key;
                        emit(s, "event: run\ndata: ", 17);
                        emit(s, j, strlen(j));
                        emit(s, "\n\n", 2);
                }
                json_object_put(one);
                at += n + 1;
        }
}

/* What fd (journal w, size bytes now) gained since the last look: its
 * whole new lines as events. */
static void read_new(struct stream *s, struct seen *w, int fd, off_t size)
{
        size_t want, got;
        _cleanup_free_ char *buf = NULL;
        const char *last;
        ssize_t r;

        if (size < w->off)
                w->off = 0; /* replaced */
        want = (size_t)(size - w->off) > SCAN_MAX ? SCAN_MAX : (size_t)(size - w->off);
        if (want == 0 || !(buf = malloc(want)))
                return;
        r = pread(fd, buf, want, w->off);
        got = r > 0 ? (size_t)r : 0;
        last = got ? memrchr(buf, '\n', got) : NULL;
        if (last) {
                emit_lines(s, w->name, buf, (size_t)(last - buf) + 1);
                w->off += (off_t)(last - buf) + 1;
        } else if (got >= DM_ACTIVITY_LINE_MAX) {
                w->off += (off_t)got; /* a line too long to ever be taken */
        }
}

/* Every journal's new lines; first: only where each ends now (a journal
 * that appears later is read from its start). */
static void look(struct stream *s, bool first)
{
        char dir[4200];
        _cleanup_close_ int dfd = -1;
        DIR *d;
        struct dirent *e;

        snprintf(dir, sizeof(dir), "%s/%s", s->state_dir, DM_ACTIVITY_DIR);
        if ((dfd = dm_io_open_dir(dir)) < 0 || !(d = fdopendir(dfd)))
                return;
        dfd = -1;
        while ((e = readdir(d))) {
                size_t n = strlen(e->d_name);
                struct seen *w;
                struct stat st;
                int fd;

                if (n < 7 || strcmp(e->d_name + n - 6, ".jsonl") != 0 || !(w = seen_of(s, e->d_name)))
                        continue;
                fd = dm_io_open_beneath(dirfd(d), e->d_name, O_RDONLY, 0);
                if (fd >= 0 && fstat(fd, &st) == 0) {
                        if (first)
                                w->off = st.st_size;
                        else
                                read_new(s, w, fd, st.st_size);
                }
                if (fd >= 0)
                        close(fd);
        }
        closedir(d);
}

/* Until the journals' folder changes (a line written, a journal made), or
 * DM_UI_POLL_MS at most: a new run is on the page as soon as it is in its
 * journal. Without inotify, or before the folder exists, just that long. */
static void wait_change(struct stream *s)
{
        char dir[4200];
        char ev[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
        struct pollfd p = { .fd = s->ino, .events = POLLIN };

        if (s->ino >= 0 && s->watch < 0) {
                snprintf(dir, sizeof(dir), "%s/%s", s->state_dir, DM_ACTIVITY_DIR);
                s->watch = inotify_add_watch(s->ino, dir, IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_DONT_FOLLOW);
        }
        if (s->watch < 0) {
                nanosleep(&(struct timespec){ .tv_nsec = DM_UI_POLL_MS * 1000000L }, NULL);
                return;
        }
        if (poll(&p, 1, DM_UI_POLL_MS) > 0)
                while (read(s->ino, ev, sizeof(ev)) > 0)
                        ;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        struct stream *s = cls;

        (void)pos;
        while (s->pos == s->len) {
                int64_t now = dm_now_ms();

                s->pos = s->len = 0;
                if (atomic_load(&stopping))
                        return MHD_CONTENT_READER_END_OF_STREAM;
                look(s, false);
                if (s->len)
                        break;
                if (now - s->last_ms >= KEEPALIVE_MS) {
                        emit(s, ": keepalive\n\n", 13);
                        break;
                }
                wait_change(s);
        }
        s->last_ms = dm_now_ms();
        size_t n = s->len - s->pos < max ? s->len - s->pos : max;
        memcpy(buf, s->out + s->pos, n);
        s->pos += n;
        return (ssize_t)n;
}

static void stream_free(void *cls)
{
        struct stream *s = cls;

        if (s->ino >= 0)
                close(s->ino);
        free(s->out);
        free(s);
        atomic_fetch_sub(&streams, 1);
}

static enum MHD_Result events(const struct ui_paths *p, struct MHD_Connection *c)
{
        struct MHD_Response *r;
        struct stream *s;

        if (atomic_fetch_add(&streams, 1) >= DM_UI_MAX_STREAMS) {
                atomic_fetch_sub(&streams, 1);
                return dm_ui_error(c, MHD_HTTP_TOO_MANY_REQUESTS, "too many event streams open");
        }
        s = calloc(1, sizeof(*s));
        if (!s) {
                atomic_fetch_sub(&streams, 1);
                return MHD_NO;
        }
        snprintf(s->state_dir, sizeof(s->state_dir), "%s", p->state_dir);
        s->ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        s->watch = -1;
        look(s, true); /* from now on: what came before is in GET runs */
        emit(s, "retry: 1000\n\n", 13);
        s->last_ms = dm_now_ms();
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free);
        if (!r) {
                stream_free(s);
                return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        return dm_ui_queue(c, MHD_HTTP_OK, r);
}

bool dm_ui_api(const struct ui_paths *p, struct MHD_Connection *c, const char *method, const char *path,
               enum MHD_Result *ret)
{
        char id[DM_ACTIVITY_ID_MAX + 1];
        const char *rest;
        bool post = strcmp(method, "POST") == 0;
        size_t n;

        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 && !post)
                return false;
        if (post && strncmp(path, "runs/", 5) != 0)
                return false;
        if (strcmp(path, "runs") == 0)
                return *ret = runs(p, c), true;
        if (strcmp(path, "events") == 0)
                return *ret = events(p, c), true;
        if (strncmp(path, "runs/", 5) != 0)
                return false;
        path += 5;
        rest = strchr(path, '/');
        n = rest ? (size_t)(rest - path) : strlen(path);
        if (n > DM_ACTIVITY_ID_MAX) {
                *ret = dm_ui_error(c, MHD_HTTP_BAD_REQUEST, "a run id is at most 128 characters");
                return true;
        }
        memcpy(id, path, n);
        id[n] = '\0';
        if (!dm_activity_id_valid(id)) {
                *ret = dm_ui_error(c, MHD_HTTP_BAD_REQUEST, "a run id is made of A-Z a-z 0-9 . _ -");
                return true;
        }
        if (post && rest && (strcmp(rest, "/cancel") == 0 || strcmp(rest, "/destroy") == 0))
                *ret = dm_ui_act(p, c, id, rest + 1);
        else if (post)
                *ret = dm_ui_error(c, MHD_HTTP_NOT_FOUND, "nothing to change here");
        else if (!rest)
                *ret = one_run(p, c, id);
        else if (strncmp(rest, "/files/", 7) == 0)
                *ret = one_file(p, c, id, rest + 7);
        else if (strncmp(rest, "/tail/", 6) == 0)
                *ret = tail(p, c, id, rest + 6);
        else
                *ret = dm_ui_error(c, MHD_HTTP_NOT_FOUND, "no such page");
        return true;
}
