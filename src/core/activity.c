/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/core/activity.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/paths.h"
#include "src/basic/principal.h"
#include "src/basic/timeutil.h"
#include "src/basic/utf8.h"

static void json_putp(json_object **p)
{
        json_object_put(*p);
}

bool dm_activity_id_valid(const char *id)
{
        size_t n = id ? strlen(id) : 0;

        if (n == 0 || n > DM_ACTIVITY_ID_MAX || strcmp(id, ".") == 0 || strcmp(id, "..") == 0)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = id[i];
                if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                      c == '_' || c == '-'))
                        return false;
        }
        return true;
}

static void add_str(json_object *o, const char *key, const char *v)
{
        if (v)
                json_object_object_add(o, key, json_object_new_string(v));
}

/* The command's first DM_ACTIVITY_COMMAND_MAX bytes, cut where a UTF-8
 * sequence begins; invalid bytes become U+FFFD (the line stays JSON). */
static char *cut_command(const char *s, bool *ret_cut)
{
        size_t n = strlen(s);

        *ret_cut = n > DM_ACTIVITY_COMMAND_MAX;
        if (*ret_cut) {
                n = DM_ACTIVITY_COMMAND_MAX;
                while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
                        n--;
        }
        size_t len;

        return dm_utf8_sanitize(s, n, &len);
}

int dm_activity_format(const struct dm_activity_event *ev, char **ret, size_t *ret_len)
{
        _cleanup_(json_putp) json_object *o = NULL;
        const char *text;
        size_t len;
        char *line;

        if (!ev->event || !dm_activity_event_known(ev->event) || !dm_activity_id_valid(ev->id))
                return -EINVAL;
        o = json_object_new_object();
        if (!o)
                return -ENOMEM;
        add_str(o, "event", ev->event);
        add_str(o, "id", ev->id);
        add_str(o, "kind", ev->kind);
        /* A nested caller's run is its principal's leaf, as the ledger has it. */
        const char *parent = ev->parent_id ? ev->parent_id : dm_principal_leaf(ev->principal);
        if (dm_activity_id_valid(parent))
                add_str(o, "parent_id", parent);
        if (dm_activity_id_valid(ev->job_id))
                add_str(o, "job_id", ev->job_id);
        add_str(o, "principal", ev->principal ? ev->principal : (strcmp(ev->event, "start") == 0 ? "local" : NULL));
        add_str(o, "image", ev->image);
        add_str(o, "egress", ev->egress);
        if (ev->command) {
                bool cut;
                _cleanup_free_ char *c = cut_command(ev->command, &cut);
                if (!c)
                        return -ENOMEM;
                add_str(o, "command", c);
                if (cut)
                        json_object_object_add(o, "command_truncated", json_object_new_boolean(true));
        }
        add_str(o, "status", ev->status);
        add_str(o, "output_dir", ev->output_dir);
        json_object_object_add(o, "time_ms", json_object_new_int64(ev->time_ms ? ev->time_ms : dm_wall_ms()));
        if (ev->has_exit)
                json_object_object_add(o, "exit_code", json_object_new_int(ev->exit_code));
        dm_activity_format_extra(ev, o);
        text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        len = strlen(text);
        if (len + 1 > DM_ACTIVITY_LINE_MAX)
                return -E2BIG; /* not reached: every field above is capped */
        line = malloc(len + 2);
        if (!line)
                return -ENOMEM;
        memcpy(line, text, len);
        line[len] = '\n';
        line[len + 1] = '\0';
        *ret = line;
        *ret_len = len + 1;
        return 0;
}

int dm_activity_append(int fd, const struct dm_activity_event *ev)
{
        _cleanup_free_ char *line = NULL;
        size_t len;
        ssize_t n;
        int r;

        r = dm_activity_format(ev, &line, &len);
        if (r < 0)
                return r;
        /* One write: O_APPEND places it whole after every other line
         * (regular files take a write of this size in one piece). */
        do
                n = write(fd, line, len);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        return (size_t)n == len ? 0 : -EIO;
}

/* ---- this process's journal ------------------------------------------------------------ */

static pthread_mutex_t journal_lock = PTHREAD_MUTEX_INITIALIZER;
static int journal_fd = -1;
static int journal_errno; /* the last failure logged, not repeated */

static int journal_open(const char *state_dir, int64_t keep_days)
{
        char dir[4096], name[64];
        struct dm_error err = { 0 };
        _cleanup_close_ int dfd = -1;
        int fd;

        if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", state_dir, DM_ACTIVITY_DIR) >= sizeof(dir))
                return -ENAMETOOLONG;
        if (dm_mkdir_p(dir, 0700, &err) < 0)
                return err.code;
        dfd = dm_io_open_dir(dir);
        if (dfd < 0)
                return dfd;
        snprintf(name, sizeof(name), "%d-%lld.jsonl", (int)getpid(), (long long)dm_wall_ms());
        fd = openat(dfd, name, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        if (keep_days > 0)
                dm_activity_prune(dfd, keep_days, name);
        return fd;
}

void dm_activity_record(const char *state_dir, int64_t keep_days, const struct dm_activity_event *ev)
{
        struct stat st;
        int r = 0;

        if (!state_dir)
                return;
        pthread_mutex_lock(&journal_lock);
        if (journal_fd >= 0 && fstat(journal_fd, &st) == 0 && st.st_size >= DM_ACTIVITY_FILE_MAX) {
                close(journal_fd);
                journal_fd = -1;
        }
        if (journal_fd < 0 && (r = journal_open(state_dir, keep_days)) >= 0)
                journal_fd = r;
        if (r >= 0)
                r = dm_activity_append(journal_fd, ev);
        if (r < 0 && -r != journal_errno)
                log_warning("activity journal under '%s': %s (the event of '%s' is not recorded)", state_dir,
                            strerror(-r), ev->id ? ev->id : "?");
        journal_errno = r < 0 ? -r : 0;
        pthread_mutex_unlock(&journal_lock);
}

static bool journal_name(const char *name)
{
        size_t n = strlen(name);

        return n > 6 && strcmp(name + n - 6, ".jsonl") == 0 && name[0] != '.';
}

size_t dm_activity_prune(int dirfd, int64_t keep_days, const char *skip)
{
        int64_t now_s = dm_wall_ms() / 1000;
        _cleanup_close_ int fd = dup(dirfd);
        DIR *d;
        struct dirent *e;
        size_t n = 0;

        if (fd < 0 || keep_days <= 0 || !(d = fdopendir(fd)))
                return 0;
        fd = -1; /* the DIR has it */
        while ((e = readdir(d))) {
                struct stat st;

                if (!journal_name(e->d_name) || (skip && strcmp(e->d_name, skip) == 0) ||
                    fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
                        continue;
                if (now_s - st.st_mtime > keep_days * 86400 && unlinkat(dirfd, e->d_name, 0) == 0)
                        n++;
        }
        closedir(d);
        return n;
}

/* ---- reading ------------------------------------------------------------------------ */

static const char *const str_fields[] = { "kind",   "parent_id", "job_id",     "principal", "image",
                                          "egress", "command",   "output_dir", "status" };

/* One line: checked, then merged into runs. false: skipped. */
static bool take_line(const char *line, size_t len, const char *journal, json_object *runs)
{
        _cleanup_(json_putp) json_object *o = NULL;
        json_object *v, *run;
        const char *ev, *id;
        bool start;
        int64_t t;

        if (!dm_utf8_valid(line, len) || !(o = json_tokener_parse(line)) || !json_object_is_type(o, json_type_object))
                return false;
        if (!json_object_object_get_ex(o, "event", &v) || !json_object_is_type(v, json_type_string))
                return false;
        ev = json_object_get_string(v);
        start = strcmp(ev, "start") == 0;
        if (!dm_activity_event_known(ev))
                return false;
        if (!json_object_object_get_ex(o, "id", &v) || !json_object_is_type(v, json_type_string) ||
            !dm_activity_id_valid(id = json_object_get_string(v)))
                return false;
        if (!json_object_object_get_ex(o, "time_ms", &v) || !json_object_is_type(v, json_type_int) ||
            (t = json_object_get_int64(v)) < 0)
                return false;
        if (!json_object_object_get_ex(runs, id, &run)) {
                if (json_object_object_length(runs) >= DM_ACTIVITY_READ_RUNS)
                        return false;
                run = json_object_new_object();
                json_object_object_add(run, "id", json_object_new_string(id));
                json_object_object_add(run, "journal", json_object_new_string(journal));
                json_object_object_add(runs, id, run);
        }
        if (!start && strcmp(ev, "end") != 0)
                return dm_activity_take_extra(ev, o, run);
        for (size_t i = 0; i < DM_ARRAY_SIZE(str_fields); i++)
                if (json_object_object_get_ex(o, str_fields[i], &v) && json_object_is_type(v, json_type_string) &&
                    (strcmp(str_fields[i], "parent_id") != 0 || dm_activity_id_valid(json_object_get_string(v))))
                        json_object_object_add(run, str_fields[i], json_object_get(v));
        json_object_object_add(run, start ? "start_ms" : "end_ms", json_object_new_int64(t));
        if (!start)
                json_object_object_del(run, "previews"); /* they close with it */
        if (json_object_object_get_ex(o, "exit_code", &v) && json_object_is_type(v, json_type_int))
                json_object_object_add(run, "exit_code", json_object_new_int(json_object_get_int(v)));
        if (json_object_object_get_ex(o, "command_truncated", &v) && json_object_get_boolean(v))
                json_object_object_add(run, "command_truncated", json_object_new_boolean(true));
        return true;
}

void dm_activity_parse(const char *text, size_t len, const char *journal, json_object *runs,
                       struct dm_activity_stats *stats)
{
        size_t at = 0;

        while (at < len) {
                const char *nl = memchr(text + at, '\n', len - at);
                size_t n = nl ? (size_t)(nl - (text + at)) : len - at;

                if (!nl) {
                        stats->truncated++; /* a write cut short: never half-believed */
                        break;
                }
                if (n + 1 > DM_ACTIVITY_LINE_MAX || memchr(text + at, '\0', n)) {
                        stats->skipped++;
                } else {
                        char line[DM_ACTIVITY_LINE_MAX];
                        memcpy(line, text + at, n);
                        line[n] = '\0';
                        if (take_line(line, n, journal, runs))
                                stats->lines++;
                        else if (n > 0)
                                stats->skipped++;
                }
                at += n + 1;
        }
}

static int newest_first(const void *a, const void *b)
{
        json_object *x = *(json_object *const *)a, *y = *(json_object *const *)b, *v;
        int64_t tx = json_object_object_get_ex(x, "start_ms", &v) ? json_object_get_int64(v) : 0;
        int64_t ty = json_object_object_get_ex(y, "start_ms", &v) ? json_object_get_int64(v) : 0;

        return tx < ty   ? 1
               : tx > ty ? -1
                         : strcmp(json_object_get_string(json_object_object_get(x, "id")),
                                  json_object_get_string(json_object_object_get(y, "id")));
}

json_object *dm_activity_read(const char *state_dir, struct dm_activity_stats *ret_stats, struct dm_error *err)
{
        _cleanup_(json_putp) json_object *runs = json_object_new_object();
        struct dm_activity_stats stats = { 0 };
        json_object *arr = json_object_new_array();
        char dir[4096];
        _cleanup_close_ int dfd = -1;
        DIR *d = NULL;
        struct dirent *e;

        if (!runs || !arr) {
                json_object_put(arr);
                dm_error_set(err, -ENOMEM, "out of memory");
                return NULL;
        }
        snprintf(dir, sizeof(dir), "%s/%s", state_dir, DM_ACTIVITY_DIR);
        dfd = dm_io_open_dir(dir);
        if (dfd >= 0 && (d = fdopendir(dfd)))
                dfd = -1;
        else if (dfd != -ENOENT) {
                json_object_put(arr);
                dm_error_set(err, dfd < 0 ? dfd : -errno, "cannot read '%s': %s", dir,
                             dm_io_strerror(dfd < 0 ? dfd : -errno));
                return NULL;
        }
        while (d && (e = readdir(d)) && stats.files < DM_ACTIVITY_READ_FILES) {
                _cleanup_free_ char *text = NULL;
                size_t len;

                if (!journal_name(e->d_name) ||
                    dm_io_read_capped(dirfd(d), e->d_name, DM_ACTIVITY_FILE_MAX + DM_ACTIVITY_LINE_MAX, &text, &len) <
                            0)
                        continue;
                stats.files++;
                dm_activity_parse(text, len, e->d_name, runs, &stats);
        }
        if (d)
                closedir(d);
        json_object_object_foreach(runs, key, run)
        {
                (void)key;
                json_object_array_add(arr, json_object_get(run));
        }
        json_object_array_sort(arr, newest_first);
        if (ret_stats)
                *ret_stats = stats;
        return arr;
}
