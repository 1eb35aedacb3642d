/* SPDX-License-Identifier: MIT */
/* The run ledger and the usage report over it (src/core/ledger.h). */
#include "config.h"
#include "src/core/ledger.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/paths.h"
#include "src/basic/principal.h"
#include "src/basic/timeutil.h"
#include "src/core/context.h"
#include "src/core/ownership.h"

#define ENTRY_MAX (64 * 1024)   /* a ledger entry is a few hundred bytes */
#define USAGE_MAX (1024 * 1024) /* a live usage file, one object per model */
#define MODELS_MAX 64           /* models a run's usage lists; more are not counted */

static const char *const token_fields[] = { "input_tokens", "output_tokens", "cache_read_tokens",
                                            "cache_write_tokens" };
#define N_TOKENS (sizeof(token_fields) / sizeof(token_fields[0]))

/* A run id as a file name: what dm_run_id_new and sandbox ids are made of. */
static bool valid_id(const char *id)
{
        size_t n = id ? strlen(id) : 0;

        return n > 0 && n <= 64 && id[0] != '.' &&
               strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

/* The ledger belongs to the output root's owner, like everything else in
 * it, so that a root server serving a user's directory leaves nothing that
 * user cannot read or delete (fd is the ledger; name an entry, or NULL for
 * the ledger itself). As another user the server owns what it writes. */
static void give_to_owner(const char *root, int fd, const char *name)
{
        struct dm_owner owner;
        struct dm_error ignored = { 0 };

        if (geteuid() != 0 || dm_owner_of(root, &owner, &ignored) < 0)
                return;
        if (name)
                (void)dm_owner_give_entry(fd, name, &owner);
        else
                (void)!fchown(fd, owner.uid, owner.gid);
}

static int open_ledger(const char *root, bool make, struct dm_error *err)
{
        char path[PATH_MAX];
        int fd;

        if ((size_t)snprintf(path, sizeof(path), "%s/" DM_LEDGER_DIR, root) >= sizeof(path))
                return dm_error_set(err, -ENAMETOOLONG, "output root '%.200s' is too long", root);
        if (make) {
                int r = dm_mkdir_p(path, 0700, err);
                if (r < 0)
                        return r;
        }
        fd = dm_io_open_dir(path);
        if (fd < 0 && (make || fd != -ENOENT))
                return dm_error_set(err, fd, "cannot open the run ledger '%s': %s", path, dm_io_strerror(fd));
        if (make)
                give_to_owner(root, fd, NULL);
        return fd;
}

static json_object *read_entry(int dirfd, const char *name)
{
        _cleanup_free_ char *text = NULL;
        size_t len;
        json_object *o;

        if (dm_io_read_capped(dirfd, name, ENTRY_MAX, &text, &len) < 0)
                return NULL;
        o = json_tokener_parse(text);
        if (o && !json_object_is_type(o, json_type_object)) {
                json_object_put(o);
                o = NULL;
        }
        return o;
}

static int write_entry(const char *root, int dirfd, const char *run_id, json_object *o, struct dm_error *err)
{
        char name[80];
        const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        int r;

        snprintf(name, sizeof(name), "%s.json", run_id);
        r = text ? dm_io_replace(dirfd, name, text, strlen(text), 0600) : -ENOMEM;
        if (r < 0)
                return dm_error_set(err, r, "cannot write the ledger entry of run %s: %s", run_id, dm_io_strerror(r));
        give_to_owner(root, dirfd, name);
        return 0;
}

static void add_str(json_object *o, const char *key, const char *v)
{
        if (v)
                json_object_object_add(o, key, json_object_new_string(v));
}

int dm_ledger_begin(const char *output_root, const char *owner, const struct dm_ledger_run *run, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;
        json_object *o;
        int r;

        if (!valid_id(run->run_id))
                return dm_error_set(err, -EINVAL, "invalid run id '%.64s'", run->run_id ? run->run_id : "");
        if ((fd = open_ledger(output_root, true, err)) < 0)
                return fd;
        if (!(o = json_object_new_object()))
                return dm_error_set(err, -ENOMEM, "out of memory");
        add_str(o, "run_id", run->run_id);
        add_str(o, "kind", run->kind ? run->kind : "script");
        add_str(o, "image", run->image);
        add_str(o, "principal", run->principal && run->principal[0] ? run->principal : "local");
        add_str(o, "job_id", run->job_id);
        /* A run a nested sandbox's call made belongs to that sandbox's tree. */
        add_str(o, "parent_run_id", run->parent_run_id ? run->parent_run_id : dm_principal_leaf(run->principal));
        add_str(o, "output_dir", run->output_dir);
        add_str(o, "owner", owner);
        json_object_object_add(o, "started_ms", json_object_new_int64(dm_wall_ms()));
        add_str(o, "status", "running");
        r = write_entry(output_root, fd, run->run_id, o, err);
        json_object_put(o);
        return r;
}

/* The run's entry, and the ledger's fd in *ret_fd (the caller closes it). */
static int read_run(const char *root, const char *run_id, int *ret_fd, json_object **ret, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;
        char name[80];

        if (!valid_id(run_id))
                return dm_error_set(err, -EINVAL, "invalid run id '%.64s'", run_id ? run_id : "");
        if ((fd = open_ledger(root, false, err)) < 0)
                return fd == -ENOENT ? dm_error_set(err, -ENOENT, "no ledger under '%.200s'", root) : fd;
        snprintf(name, sizeof(name), "%s.json", run_id);
        if (!(*ret = read_entry(fd, name)))
                return dm_error_set(err, -ENOENT, "run %s has no ledger entry", run_id);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* Reads the run's entry, lets change edit it, writes it back. */
static int update(const char *root, const char *run_id, void (*change)(json_object *o, const void *arg),
                  const void *arg, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;
        json_object *o;
        int r;

        r = read_run(root, run_id, &fd, &o, err);
        if (r < 0)
                return r;
        change(o, arg);
        r = write_entry(root, fd, run_id, o, err);
        json_object_put(o);
        return r;
}

struct ending {
        const char *status, *error;
        bool has_exit;
        int exit_code;
        int64_t duration_ms;
};

static void set_end(json_object *o, const void *arg)
{
        const struct ending *e = arg;

        json_object_object_add(o, "status", json_object_new_string(e->status));
        json_object_object_add(o, "ended_ms", json_object_new_int64(dm_wall_ms()));
        json_object_object_add(o, "duration_ms", json_object_new_int64(e->duration_ms));
        if (e->has_exit)
                json_object_object_add(o, "exit_code", json_object_new_int(e->exit_code));
        if (e->error)
                json_object_object_add(o, "error", json_object_new_string(e->error));
}

int dm_ledger_end(const char *output_root, const char *run_id, const char *status, bool has_exit, int exit_code,
                  int64_t duration_ms, const char *error, struct dm_error *err)
{
        struct ending e = { status, error, has_exit, exit_code, duration_ms < 0 ? 0 : duration_ms };

        return update(output_root, run_id, set_end, &e, err);
}

static void set_usage(json_object *o, const void *arg)
{
        json_object *copy = NULL;

        if (json_object_deep_copy((json_object *)arg, &copy, NULL) == 0)
                json_object_object_add(o, "usage", copy);
}

int dm_ledger_set_usage(const char *output_root, const char *run_id, json_object *usage, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;
        char name[80];
        int r;

        if (!usage || !json_object_is_type(usage, json_type_object))
                return dm_error_set(err, -EINVAL, "no usage for run %s", run_id ? run_id : "");
        r = update(output_root, run_id, set_usage, usage, err);
        /* The final figures are in the entry: the live ones go. */
        if (r == 0 && (fd = open_ledger(output_root, false, err)) >= 0) {
                snprintf(name, sizeof(name), "%s" DM_LEDGER_LIVE_SUFFIX, run_id);
                (void)unlinkat(fd, name, 0);
        }
        return r;
}

int dm_ledger_live_path(const char *output_root, const char *run_id, char *ret, size_t len, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;

        if (!valid_id(run_id))
                return dm_error_set(err, -EINVAL, "invalid run id '%.64s'", run_id ? run_id : "");
        if ((fd = open_ledger(output_root, true, err)) < 0)
                return fd;
        if ((size_t)snprintf(ret, len, "%s/" DM_LEDGER_DIR "/%s" DM_LEDGER_LIVE_SUFFIX, output_root, run_id) >= len)
                return dm_error_set(err, -ENAMETOOLONG, "output root '%.200s' is too long", output_root);
        return 0;
}

static const char *str_of(json_object *o, const char *key)
{
        json_object *v;

        return json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string)
                       ? json_object_get_string(v)
                       : NULL;
}

static void fill_entry(json_object *o, struct dm_ledger_entry *ret)
{
        const char *v;
        json_object *t;

        memset(ret, 0, sizeof(*ret));
        snprintf(ret->kind, sizeof(ret->kind), "%s", (v = str_of(o, "kind")) ? v : "script");
        snprintf(ret->status, sizeof(ret->status), "%s", (v = str_of(o, "status")) ? v : "");
        snprintf(ret->principal, sizeof(ret->principal), "%s", (v = str_of(o, "principal")) ? v : "local");
        snprintf(ret->output_dir, sizeof(ret->output_dir), "%s", (v = str_of(o, "output_dir")) ? v : "");
        if (json_object_object_get_ex(o, "started_ms", &t))
                ret->started_ms = json_object_get_int64(t);
}

int dm_ledger_lookup(const char *output_root, const char *run_id, struct dm_ledger_entry *ret, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;
        json_object *o;
        int r;

        memset(ret, 0, sizeof(*ret));
        r = read_run(output_root, run_id, &fd, &o, err);
        if (r < 0)
                return r;
        fill_entry(o, ret);
        json_object_put(o);
        return 0;
}

size_t dm_ledger_interrupted(const char *output_root, const char *my_owner,
                             void (*fn)(void *userdata, const char *run_id, const struct dm_ledger_entry *e),
                             void *userdata)
{
        _cleanup_free_ struct dm_ledger_entry *e = malloc(sizeof(*e));
        struct dm_error err = { 0 };
        _cleanup_close_ int fd = open_ledger(output_root, false, &err);
        size_t seen = 0, n = 0;
        struct dirent *de;
        DIR *d;

        if (fd < 0 || !e || !(d = fdopendir(fcntl(fd, F_DUPFD_CLOEXEC, 3))))
                return 0;
        while ((de = readdir(d)) && seen++ < DM_LEDGER_MAX_ENTRIES) {
                size_t len = strlen(de->d_name);
                const char *status, *owner, *id;
                json_object *o;

                if (len < 6 || strcmp(de->d_name + len - 5, ".json") != 0 || de->d_name[0] == '.' ||
                    !(o = read_entry(fd, de->d_name)))
                        continue;
                status = str_of(o, "status");
                owner = str_of(o, "owner");
                id = str_of(o, "run_id");
                if (valid_id(id) && status && strcmp(status, "running") == 0 && owner && strcmp(owner, my_owner) != 0 &&
                    !dm_owner_alive(owner, my_owner)) {
                        fill_entry(o, e);
                        fn(userdata, id, e);
                        n++;
                }
                json_object_put(o);
        }
        closedir(d);
        return n;
}

/* ---- the report ------------------------------------------------------------------- */

static int64_t int_of(json_object *o, const char *key, int64_t def)
{
        json_object *v;

        return json_object_object_get_ex(o, key, &v) &&
                               (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))
                       ? json_object_get_int64(v)
                       : def;
}

static double num_of(json_object *o, const char *key)
{
        json_object *v;

        return json_object_object_get_ex(o, key, &v) &&
                               (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double))
                       ? json_object_get_double(v)
                       : 0;
}

struct row {
        json_object *e; /* the entry, owned by the array */
        bool in;        /* in the report */
        int depth;
};

struct ledger {
        struct row *rows;
        size_t n, alloc;
        json_object *entries; /* array holding the references */
        int fd;               /* the ledger directory, or -1 */
};

static void ledger_release(struct ledger *l)
{
        free(l->rows);
        json_object_put(l->entries);
        if (l->fd >= 0)
                close(l->fd);
}

/* Every entry principal may see. */
static int load(const char *root, const char *principal, struct ledger *l, struct dm_error *err)
{
        int fd;
        DIR *d;
        struct dirent *de;

        memset(l, 0, sizeof(*l));
        l->fd = -1;
        if (!(l->entries = json_object_new_array()))
                return dm_error_set(err, -ENOMEM, "out of memory");
        fd = open_ledger(root, false, err);
        if (fd == -ENOENT)
                return 0;
        if (fd < 0)
                return fd;
        l->fd = fd;
        if (!(d = fdopendir(dup(fd))))
                return dm_error_set(err, -errno, "cannot read the run ledger: %s", strerror(errno));
        while ((de = readdir(d)) && l->n < DM_LEDGER_MAX_ENTRIES) {
                size_t len = strlen(de->d_name);
                const char *who;
                json_object *e;

                if (len < 6 || strcmp(de->d_name + len - 5, ".json") != 0 || de->d_name[0] == '.')
                        continue;
                if (!(e = read_entry(fd, de->d_name)))
                        continue;
                who = str_of(e, "principal");
                if (!valid_id(str_of(e, "run_id")) || !dm_principal_covers(principal, who ? who : "local")) {
                        json_object_put(e);
                        continue;
                }
                if (l->n == l->alloc) {
                        size_t na = l->alloc ? 2 * l->alloc : 64;
                        struct row *nr = realloc(l->rows, na * sizeof(*nr));

                        if (!nr) {
                                json_object_put(e);
                                closedir(d);
                                return dm_error_set(err, -ENOMEM, "out of memory");
                        }
                        l->rows = nr;
                        l->alloc = na;
                }
                json_object_array_add(l->entries, e);
                l->rows[l->n++] = (struct row){ .e = e, .depth = 0 };
        }
        closedir(d);
        return 0;
}

static struct row *find_run(struct ledger *l, const char *run_id)
{
        for (size_t i = 0; i < l->n; i++)
                if (strcmp(str_of(l->rows[i].e, "run_id"), run_id) == 0)
                        return &l->rows[i];
        return NULL;
}

/* Marks every descendant of a marked row, depth by depth; a cycle (a
 * hand-edited ledger) ends when nothing new is marked. */
static void add_descendants(struct ledger *l)
{
        for (bool more = true; more;) {
                more = false;
                for (size_t i = 0; i < l->n; i++) {
                        const char *parent = str_of(l->rows[i].e, "parent_run_id");
                        struct row *p;

                        if (l->rows[i].in || !parent || !(p = find_run(l, parent)) || !p->in)
                                continue;
                        l->rows[i].in = true;
                        l->rows[i].depth = p->depth + 1;
                        more = true;
                }
        }
}

static int by_start(const void *a, const void *b)
{
        const struct row *x = a, *y = b;
        int64_t s = int_of(x->e, "started_ms", 0), t = int_of(y->e, "started_ms", 0);

        if (x->depth != y->depth && (x->in && y->in))
                return x->depth < y->depth ? -1 : 1;
        return s < t ? -1 : s > t;
}

/* A figure of a usage object: a JSON number, finite, not negative and at
 * most max; anything else is no figure (0). Usage is written by demesne
 * only, but the report is not where a hand-edited or torn file gets to
 * subtract from a tree's spend. */
static double figure(json_object *o, const char *key, double max)
{
        json_object *v;
        double d;

        if (!o || !json_object_object_get_ex(o, key, &v))
                return 0;
        if (json_object_is_type(v, json_type_int)) {
                int64_t n = json_object_get_int64(v);
                return n < 0 || (double)n > max ? 0 : (double)n;
        }
        if (!json_object_is_type(v, json_type_double))
                return 0;
        d = json_object_get_double(v);
        return isfinite(d) && d >= 0 && d <= max ? d : 0;
}

static void clean_tokens(json_object *to, json_object *from)
{
        for (size_t i = 0; i < N_TOKENS; i++)
                json_object_object_add(
                        to, token_fields[i],
                        json_object_new_int64((int64_t)figure(from, token_fields[i], DM_LEDGER_TOKENS_MAX)));
        json_object_object_add(to, "cost_usd", json_object_new_double(figure(from, "cost_usd", DM_LEDGER_USD_MAX)));
}

/* A copy of a usage object with only figures that can be spend (see
 * figure), at most MODELS_MAX models; NULL for no object. */
static json_object *clean_usage(json_object *from)
{
        json_object *o, *per, *to_per;
        size_t models = 0;

        if (!from || !json_object_is_type(from, json_type_object) || !(o = json_object_new_object()))
                return NULL;
        clean_tokens(o, from);
        if (json_object_object_get_ex(from, "per_model", &per) && json_object_is_type(per, json_type_object) &&
            (to_per = json_object_new_object())) {
                json_object_object_foreach(per, model, m)
                {
                        json_object *c;

                        if (models >= MODELS_MAX || strlen(model) > 128 || !json_object_is_type(m, json_type_object) ||
                            !(c = json_object_new_object()))
                                continue;
                        clean_tokens(c, m);
                        json_object_object_add(to_per, model, c);
                        models++;
                }
                json_object_object_add(o, "per_model", to_per);
        }
        return o;
}

/* A run's usage as its vendor proxy last wrote it into the ledger
 * (<run_id>.live), for a run with no final figures: live, or interrupted
 * by a server that died. Never the usage.json in the run's /out, which the
 * sandbox can write. */
static json_object *live_usage(int ledger_fd, const char *run_id)
{
        _cleanup_free_ char *text = NULL;
        char name[80];
        size_t len;

        if (ledger_fd < 0 || !valid_id(run_id))
                return NULL;
        snprintf(name, sizeof(name), "%s" DM_LEDGER_LIVE_SUFFIX, run_id);
        if (dm_io_read_capped(ledger_fd, name, USAGE_MAX, &text, &len) < 0)
                return NULL;
        return json_tokener_parse(text);
}

static void add_tokens(json_object *sum, json_object *from)
{
        for (size_t i = 0; i < N_TOKENS; i++)
                json_object_object_add(
                        sum, token_fields[i],
                        json_object_new_int64(int_of(sum, token_fields[i], 0) + int_of(from, token_fields[i], 0)));
        json_object_object_add(sum, "cost_usd",
                               json_object_new_double(num_of(sum, "cost_usd") + num_of(from, "cost_usd")));
}

static json_object *zero_tokens(void)
{
        json_object *o = json_object_new_object();

        for (size_t i = 0; o && i < N_TOKENS; i++)
                json_object_object_add(o, token_fields[i], json_object_new_int64(0));
        if (o)
                json_object_object_add(o, "cost_usd", json_object_new_double(0));
        return o;
}

/* Rounded to a millionth of a dollar, as usage.json writes it. */
static json_object *dollars(double v)
{
        char text[48];

        snprintf(text, sizeof(text), "%.6f", v);
        return json_object_new_double_s(strtod(text, NULL), text);
}

static const char *row_status(json_object *e, const char *my_owner)
{
        const char *status = str_of(e, "status"), *owner = str_of(e, "owner");

        if (!status)
                return "unknown";
        /* Its server died before it could say how the run ended. */
        if (strcmp(status, "running") == 0 && owner && my_owner && !dm_owner_alive(owner, my_owner))
                return "interrupted";
        return status;
}

static json_object *make_row(const struct row *r, int ledger_fd, const char *my_owner, int64_t now,
                             json_object *usage_sum, json_object *per_model_sum, int64_t *ret_start, int64_t *ret_end)
{
        json_object *o = json_object_new_object(), *usage = NULL, *raw = NULL, *live = NULL, *per;
        const char *status = row_status(r->e, my_owner);
        int64_t start = int_of(r->e, "started_ms", now), end, wall;
        char t[32];
        bool final = true;

        if (!o)
                return NULL;
        end = strcmp(status, "running") == 0 ? now : int_of(r->e, "ended_ms", start);
        /* An ended run's own time (the command's, a sandbox's life); a live
         * one's so far. */
        wall = strcmp(status, "running") != 0 && json_object_object_get_ex(r->e, "duration_ms", NULL)
                       ? int_of(r->e, "duration_ms", 0)
                       : end - start;
        /* The final figures, else the live ones (a run still going, or one
         * whose server died before it wrote them); both from the ledger. */
        if (!json_object_object_get_ex(r->e, "usage", &raw)) {
                raw = live = live_usage(ledger_fd, str_of(r->e, "run_id"));
                final = false;
        }
        usage = clean_usage(raw);
        json_object_put(live);
        add_str(o, "run_id", str_of(r->e, "run_id"));
        add_str(o, "parent_run_id", str_of(r->e, "parent_run_id"));
        json_object_object_add(o, "depth", json_object_new_int(r->depth));
        add_str(o, "kind", str_of(r->e, "kind"));
        add_str(o, "image", str_of(r->e, "image"));
        add_str(o, "job_id", str_of(r->e, "job_id"));
        add_str(o, "status", status);
        if (json_object_object_get_ex(r->e, "exit_code", NULL))
                json_object_object_add(o, "exit_code", json_object_new_int((int)int_of(r->e, "exit_code", 0)));
        dm_time_format(start / 1000, t, sizeof(t));
        add_str(o, "started_at", t);
        if (strcmp(status, "running") != 0 && json_object_object_get_ex(r->e, "ended_ms", NULL)) {
                dm_time_format(end / 1000, t, sizeof(t));
                add_str(o, "ended_at", t);
        }
        json_object_object_add(o, "wall_seconds", json_object_new_double((double)wall / 1000.0));
        for (size_t i = 0; i < N_TOKENS; i++)
                json_object_object_add(o, token_fields[i], json_object_new_int64(int_of(usage, token_fields[i], 0)));
        json_object_object_add(o, "cost_usd", dollars(num_of(usage, "cost_usd")));
        json_object_object_add(o, "usage_final", json_object_new_boolean(final));
        add_str(o, "output_dir", str_of(r->e, "output_dir"));
        if (usage) {
                add_tokens(usage_sum, usage);
                if (json_object_object_get_ex(usage, "per_model", &per) && json_object_is_type(per, json_type_object)) {
                        json_object_object_foreach(per, model, m)
                        {
                                json_object *acc;

                                if (!json_object_object_get_ex(per_model_sum, model, &acc)) {
                                        acc = zero_tokens();
                                        json_object_object_add(per_model_sum, model, acc);
                                }
                                if (acc)
                                        add_tokens(acc, m);
                        }
                }
        }
        json_object_put(usage);
        *ret_start = start;
        *ret_end = end;
        return o;
}

static json_object *scope_json(const struct dm_ledger_scope *s)
{
        json_object *o = json_object_new_object();
        char t[32];

        add_str(o, "job_id", s->job_id);
        add_str(o, "run_id", s->run_id);
        add_str(o, "output_dir", s->output_dir);
        if (s->has_since) {
                dm_time_format(s->since, t, sizeof(t));
                add_str(o, "since", t);
        }
        return o;
}

/* Marks the rows the scope names; the run id of output_dir is its last
 * component, and it must be directly under the output root. */
static int select_rows(struct ledger *l, const char *root, const struct dm_ledger_scope *s, struct dm_error *err)
{
        size_t hits = 0;
        const char *run_id = s->run_id;
        _cleanup_free_ char *dir = NULL, *real_root = NULL;

        if (s->output_dir) {
                const char *base;
                size_t plen;

                real_root = realpath(root, NULL);
                dir = realpath(s->output_dir, NULL);
                if (!dir || !real_root)
                        return dm_error_set(err, -ENOENT, "output_dir '%.200s': %s", s->output_dir, strerror(errno));
                base = dm_path_basename(dir);
                plen = base ? (size_t)(base - dir) : 0; /* with its '/' */
                if (!base || plen != strlen(real_root) + 1 || strncmp(dir, real_root, plen - 1) != 0 || !valid_id(base))
                        return dm_error_set(err, -ENOENT,
                                            "output_dir '%.200s' is not a run's output directory: those are "
                                            "directly under the output root '%.200s'",
                                            s->output_dir, root);
                run_id = base;
        }
        for (size_t i = 0; i < l->n; i++) {
                json_object *e = l->rows[i].e;
                const char *job = str_of(e, "job_id");
                bool in = false;

                if (run_id)
                        in = strcmp(str_of(e, "run_id"), run_id) == 0;
                else if (s->job_id)
                        in = job && strcmp(job, s->job_id) == 0;
                else if (s->has_since)
                        in = int_of(e, "started_ms", 0) >= s->since * 1000;
                l->rows[i].in = in;
                hits += in;
        }
        if (hits == 0 && run_id)
                return dm_error_set(err, -ENOENT, "no run '%.64s' of yours in the ledger of '%.200s'", run_id, root);
        if (hits == 0 && s->job_id)
                return dm_error_set(err, -ENOENT,
                                    "job '%.64s' has no run of yours in the ledger: job ids come from calls with "
                                    "background: true, and a job that has not yet made its sandbox has none",
                                    s->job_id);
        /* With since, children of runs begun earlier are reported on their
         * own, at depth 0, and no tree walk is needed. */
        if (!s->has_since)
                add_descendants(l);
        return 0;
}

json_object *dm_ledger_report(const char *output_root, const char *my_owner, const char *principal,
                              const struct dm_ledger_scope *scope, struct dm_error *err)
{
        struct ledger l;
        json_object *out = NULL, *rows, *usage, *per, *kinds;
        int64_t now = dm_wall_ms(), first = INT64_MAX, last = INT64_MIN;
        double sandbox_seconds = 0;
        int n = 0;

        if (!principal || !principal[0])
                principal = "local";
        if (load(output_root, principal, &l, err) < 0 || select_rows(&l, output_root, scope, err) < 0) {
                ledger_release(&l);
                return NULL;
        }
        /* No rows is no array at all: qsort must not see its NULL. */
        if (l.n > 1)
                qsort(l.rows, l.n, sizeof(*l.rows), by_start);
        out = json_object_new_object();
        rows = json_object_new_array();
        usage = zero_tokens();
        per = json_object_new_object();
        kinds = json_object_new_object();
        if (!out || !rows || !usage || !per || !kinds) {
                json_object_put(out);
                json_object_put(rows);
                json_object_put(usage);
                json_object_put(per);
                json_object_put(kinds);
                ledger_release(&l);
                dm_error_set(err, -ENOMEM, "out of memory");
                return NULL;
        }
        for (size_t i = 0; i < l.n; i++) {
                int64_t s, e;
                json_object *row;
                const char *kind;

                if (!l.rows[i].in || !(row = make_row(&l.rows[i], l.fd, my_owner, now, usage, per, &s, &e)))
                        continue;
                json_object_array_add(rows, row);
                n++;
                first = s < first ? s : first;
                last = e > last ? e : last;
                sandbox_seconds += num_of(row, "wall_seconds");
                kind = str_of(row, "kind");
                kind = kind ? kind : "script";
                json_object_object_add(kinds, kind, json_object_new_int((int)int_of(kinds, kind, 0) + 1));
        }
        json_object_object_add(out, "scope", scope_json(scope));
        json_object_object_add(out, "cost_usd", dollars(num_of(usage, "cost_usd")));
        json_object_object_del(usage, "cost_usd");
        json_object_object_foreach(per, model, m)
        {
                (void)model;
                json_object_object_add(m, "cost_usd", dollars(num_of(m, "cost_usd")));
        }
        json_object_object_add(usage, "per_model", per);
        json_object_object_add(out, "usage", usage);
        json_object_object_add(out, "wall_seconds", json_object_new_double(n ? (double)(last - first) / 1000.0 : 0));
        json_object_object_add(out, "sandbox_seconds", json_object_new_double(sandbox_seconds));
        json_object_object_add(out, "sandbox_count", json_object_new_int(n));
        json_object_object_add(out, "by_kind", kinds);
        json_object_object_add(out, "runs", rows);
        ledger_release(&l);
        return out;
}

char *dm_ledger_table(json_object *report)
{
        struct dm_buf b;
        json_object *rows = NULL, *usage = NULL;

        dm_buf_init(&b, 4 * 1024 * 1024);
        json_object_object_get_ex(report, "runs", &rows);
        json_object_object_get_ex(report, "usage", &usage);
        dm_buf_printf(&b, "%-34s %-8s %-11s %9s %10s %10s %10s %10s %10s\n", "run", "kind", "status", "wall_s",
                      "cost_usd", "input", "output", "cache_read", "cache_wr");
        for (size_t i = 0; rows && i < json_object_array_length(rows); i++) {
                json_object *r = json_object_array_get_idx(rows, i);
                int depth = (int)int_of(r, "depth", 0);
                char name[80];

                snprintf(name, sizeof(name), "%*s%s", depth > 8 ? 16 : 2 * depth, "", str_of(r, "run_id"));
                dm_buf_printf(&b, "%-34s %-8s %-11s %9.1f %10.4f %10lld %10lld %10lld %10lld\n", name,
                              str_of(r, "kind") ? str_of(r, "kind") : "", str_of(r, "status"),
                              num_of(r, "wall_seconds"), num_of(r, "cost_usd"), (long long)int_of(r, "input_tokens", 0),
                              (long long)int_of(r, "output_tokens", 0), (long long)int_of(r, "cache_read_tokens", 0),
                              (long long)int_of(r, "cache_write_tokens", 0));
        }
        dm_buf_printf(&b, "%-34s %-8s %-11s %9.1f %10.4f %10lld %10lld %10lld %10lld\n", "total", "", "",
                      num_of(report, "wall_seconds"), num_of(report, "cost_usd"),
                      (long long)int_of(usage, "input_tokens", 0), (long long)int_of(usage, "output_tokens", 0),
                      (long long)int_of(usage, "cache_read_tokens", 0),
                      (long long)int_of(usage, "cache_write_tokens", 0));
        dm_buf_printf(&b, "%d sandbox%s, %.1f s of sandbox time\n", (int)int_of(report, "sandbox_count", 0),
                      int_of(report, "sandbox_count", 0) == 1 ? "" : "es", num_of(report, "sandbox_seconds"));
        return dm_buf_steal(&b);
}
