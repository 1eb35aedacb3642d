/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/paths.h"
#include "src/basic/timeutil.h"
#include "src/core/images.h"
#include "src/core/sandbox-internal.h"
#include "src/core/sandbox.h"
#include "src/core/snapshot-internal.h"

#define LABEL_SNAPSHOT "demesne.snapshot"

/* Held from counting a principal's snapshots to writing the new one's
 * record: two takes cannot both pass the cap. Process-wide, as the records
 * are (servers of one output root each take theirs). */
static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;

static bool valid_id(const char *id)
{
        return id && strncmp(id, "snap-", 5) == 0 && strlen(id) == 17 && strspn(id + 5, "0123456789abcdef") == 12;
}

static int unknown(const char *id, struct dm_error *err)
{
        return dm_error_set(err, -ENOENT,
                            "unknown snapshot '%.64s': it was deleted, expired, or never existed (sandbox_list shows "
                            "yours)",
                            id ? id : "");
}

static int snap_dir(struct dm_context *ctx, const char *id, char *buf, size_t len)
{
        if ((size_t)snprintf(buf, len, "%s/.snapshots%s%s", ctx->cfg.output_root, id ? "/" : "", id ? id : "") >= len)
                return -ENAMETOOLONG;
        return 0;
}

static int record_write(struct dm_context *ctx, const struct dm_snapshot *s, struct dm_error *err)
{
        char dir[PATH_MAX], tmp[PATH_MAX + 32], final[PATH_MAX + 32];
        _cleanup_close_ int fd = -1;
        json_object *o = json_object_new_object();
        const char *text;
        int r;

        if (!o || snap_dir(ctx, s->id, dir, sizeof(dir)) < 0) {
                json_object_put(o);
                return dm_error_set(err, -ENAMETOOLONG, "output root too long");
        }
        json_object_object_add(o, "snapshot_id", json_object_new_string(s->id));
        json_object_object_add(o, "name", json_object_new_string(s->name));
        json_object_object_add(o, "source", json_object_new_string(s->source));
        json_object_object_add(o, "image", json_object_new_string(s->image));
        json_object_object_add(o, "image_ref", json_object_new_string(s->image_ref));
        json_object_object_add(o, "egress", json_object_new_string(s->egress));
        json_object_object_add(o, "allow", json_object_new_string(s->allow));
        json_object_object_add(o, "principal", json_object_new_string(s->principal));
        json_object_object_add(o, "server", json_object_new_string(s->server));
        json_object_object_add(o, "ready", json_object_new_boolean(s->ready));
        json_object_object_add(o, "workspace", json_object_new_boolean(s->has_workspace));
        json_object_object_add(o, "size_bytes", json_object_new_int64(s->size_bytes));
        json_object_object_add(o, "created_at", json_object_new_int64(s->created_at));
        json_object_object_add(o, "expires_at", json_object_new_int64(s->expires_at));
        text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        snprintf(tmp, sizeof(tmp), "%s/.record.%d.tmp", dir, (int)getpid());
        snprintf(final, sizeof(final), "%s/record.json", dir);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        r = fd < 0 ? -errno : dm_write_all(fd, text, strlen(text));
        json_object_put(o);
        if (r >= 0 && rename(tmp, final) < 0)
                r = -errno;
        if (r < 0) {
                unlink(tmp);
                return dm_error_set(err, r, "cannot write snapshot record '%s': %s", final, strerror(-r));
        }
        return 0;
}

static bool get_bool(json_object *o, const char *key)
{
        json_object *v;

        return json_object_object_get_ex(o, key, &v) && json_object_get_boolean(v);
}

/* -ENOENT (an unknown id's message) for a malformed id or no record. */
static int record_read(struct dm_context *ctx, const char *id, struct dm_snapshot *s, struct dm_error *err)
{
        char dir[PATH_MAX];
        _cleanup_free_ char *text = NULL;
        _cleanup_close_ int dirfd = -1;
        json_object *o = NULL;

        if (!valid_id(id) || snap_dir(ctx, id, dir, sizeof(dir)) < 0)
                return unknown(id, err);
        dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dirfd >= 0 && dm_io_read_capped(dirfd, "record.json", 1 << 20, &text, NULL) == 0)
                o = json_tokener_parse(text);
        if (!o)
                return unknown(id, err);
        memset(s, 0, sizeof(*s));
        dm_record_copy_str(o, "snapshot_id", s->id, sizeof(s->id));
        dm_record_copy_str(o, "name", s->name, sizeof(s->name));
        dm_record_copy_str(o, "source", s->source, sizeof(s->source));
        dm_record_copy_str(o, "image", s->image, sizeof(s->image));
        dm_record_copy_str(o, "image_ref", s->image_ref, sizeof(s->image_ref));
        dm_record_copy_str(o, "egress", s->egress, sizeof(s->egress));
        dm_record_copy_str(o, "allow", s->allow, sizeof(s->allow));
        dm_record_copy_str(o, "principal", s->principal, sizeof(s->principal));
        dm_record_copy_str(o, "server", s->server, sizeof(s->server));
        s->ready = get_bool(o, "ready");
        s->has_workspace = get_bool(o, "workspace");
        s->size_bytes = dm_record_int(o, "size_bytes");
        s->created_at = dm_record_int(o, "created_at");
        s->expires_at = dm_record_int(o, "expires_at");
        json_object_put(o);
        if (strcmp(s->id, id) != 0 || !s->principal[0])
                return dm_error_set(err, -EIO, "snapshot record '%s/record.json' is damaged", dir);
        return 0;
}

/* fn for each snapshot directory's id (none when there is no directory). */
static void each(struct dm_context *ctx, void (*fn)(struct dm_context *, const char *, void *), void *ud)
{
        char dir[PATH_MAX];
        DIR *d;
        struct dirent *de;

        if (snap_dir(ctx, NULL, dir, sizeof(dir)) < 0 || !(d = opendir(dir)))
                return;
        while ((de = readdir(d)))
                if (valid_id(de->d_name))
                        fn(ctx, de->d_name, ud);
        closedir(d);
}

/* The directory and, when given, the image: what a snapshot leaves. */
static void remove_all(struct dm_context *ctx, const char *id, const char *image_ref)
{
        char dir[PATH_MAX];
        struct dm_backend *b;
        struct dm_error e = { 0 };

        if (image_ref && image_ref[0] && dm_context_backend(ctx, &b, &e) == 0 && b->ops->image_remove &&
            b->ops->image_remove(b, image_ref, &e) < 0)
                log_info("snapshot %s: its image stays until the sweep finds it unused: %s", id, e.msg);
        if (snap_dir(ctx, id, dir, sizeof(dir)) == 0)
                dm_remove_tree(dir);
}

/* ---- taking one ------------------------------------------------------------------- */

static int check_name(const char *name, struct dm_error *err)
{
        size_t n = name ? strlen(name) : 0;

        if (n > DM_SNAPSHOT_NAME_MAX)
                return dm_error_set(err, -EINVAL, "'name' is %zu characters long: at most %d", n, DM_SNAPSHOT_NAME_MAX);
        if (n && strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ._-") != n)
                return dm_error_set(err, -EINVAL, "'name' may hold only letters, digits, spaces, '.', '_' and '-'");
        return 0;
}

struct count_walk {
        const char *principal;
        const char *skip; /* the snapshot being taken: not counted */
        bool below;       /* principal's and those below it (the report), or its own (the caps) */
        size_t n;
        int64_t bytes;
};

static void count_one(struct dm_context *ctx, const char *id, void *ud)
{
        struct count_walk *w = ud;
        struct dm_snapshot s;

        if ((w->skip && strcmp(id, w->skip) == 0) || record_read(ctx, id, &s, NULL) < 0)
                return;
        if (w->below ? !dm_principal_covers(w->principal, s.principal) : strcmp(s.principal, w->principal) != 0)
                return;
        w->n++;
        w->bytes += s.size_bytes > 0 ? s.size_bytes : 0;
}

/* held: what principal's other snapshots hold; s->size_bytes, what this
 * one would add (0 before its commit). */
static int disk_refusal(struct dm_context *ctx, const struct dm_snapshot *s, int64_t held, struct dm_error *err)
{
        char adds[96] = "";

        if (s->size_bytes > 0)
                snprintf(adds, sizeof(adds), " and this one would add %lld (it was removed)", (long long)s->size_bytes);
        return dm_error_set(err, -EDQUOT,
                            "snapshot disk cap reached: '%s' holds %lld bytes of snapshots%s, "
                            "DEMESNE_SNAPSHOT_DISK_MAX is %lld; delete one with sandbox_destroy {snapshot_id}",
                            s->principal, (long long)held, adds, (long long)ctx->cfg.snapshot_disk_max);
}

/* Counts principal's snapshots and, under the caps, makes s's directory
 * and its first record (not ready) in the same step. */
static int reserve(struct dm_context *ctx, struct dm_snapshot *s, struct dm_error *err)
{
        struct count_walk w = { .principal = s->principal };
        char dir[PATH_MAX];
        int r;

        if (snap_dir(ctx, NULL, dir, sizeof(dir)) < 0 || dm_mkdir_p(dir, 0700, err) < 0)
                return err && err->code ? err->code : dm_error_set(err, -ENAMETOOLONG, "output root too long");
        pthread_mutex_lock(&cap_lock);
        each(ctx, count_one, &w);
        if ((int64_t)w.n >= ctx->cfg.snapshot_max) {
                pthread_mutex_unlock(&cap_lock);
                return dm_error_set(err, -EDQUOT,
                                    "snapshot cap reached: '%s' holds %zu snapshots, DEMESNE_SNAPSHOT_MAX is %lld; "
                                    "delete one with sandbox_destroy {snapshot_id}",
                                    s->principal, w.n, (long long)ctx->cfg.snapshot_max);
        }
        if (ctx->cfg.snapshot_disk_max > 0 && w.bytes >= ctx->cfg.snapshot_disk_max) {
                pthread_mutex_unlock(&cap_lock);
                return disk_refusal(ctx, s, w.bytes, err);
        }
        snap_dir(ctx, s->id, dir, sizeof(dir));
        r = mkdir(dir, 0700) < 0 ? dm_error_set(err, -errno, "cannot create '%s': %s", dir, strerror(errno))
                                 : record_write(ctx, s, err);
        pthread_mutex_unlock(&cap_lock);
        if (r < 0)
                rmdir(dir);
        return r;
}

/* /workspace as the engine's tar of it (into a file unlinked at once, so
 * nothing is left of it on any way out), then rewritten to go back into
 * any container (snapshot-archive.c) as workspace.tar. */
static int take_workspace(struct dm_context *ctx, struct dm_backend *b, const struct dm_sandbox *sb,
                          struct dm_snapshot *s, int64_t *ret_bytes, struct dm_error *err)
{
        char dir[PATH_MAX];
        _cleanup_close_ int dfd = -1, raw = -1, fd = -1;
        struct stat st;
        int r;

        if (!b->ops->get_archive)
                return dm_error_set(err, -EOPNOTSUPP, "the %s backend cannot read /workspace as an archive",
                                    b->ops->name);
        snap_dir(ctx, s->id, dir, sizeof(dir));
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        raw = dfd < 0 ? -1 : openat(dfd, "workspace.raw", O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (raw >= 0)
                unlinkat(dfd, "workspace.raw", 0);
        fd = raw < 0 ? -1 : openat(dfd, "workspace.tar", O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return dm_error_set(err, -errno, "cannot create the workspace archive in '%s': %s", dir,
                                    strerror(errno));
        s->has_workspace = true; /* (removed with the directory on failure) */
        r = b->ops->get_archive(b, sb->container, "/workspace", raw,
                                ctx->cfg.disk_max > 0 ? ctx->cfg.disk_max + (1 << 20) : 0, err);
        if (r < 0)
                return dm_error_wrap(err, "read /workspace of sandbox '%s'", sb->id);
        if (lseek(raw, 0, SEEK_SET) < 0)
                return dm_error_set(err, -errno, "cannot read the workspace archive back: %s", strerror(errno));
        r = dm_snapshot_archive_normalize(raw, fd, err);
        if (r < 0)
                return r;
        if (r == 0) {
                /* An empty /workspace: nothing to put back into a sandbox
                 * made from it (each such put is one of the engine's copier
                 * processes, tens of milliseconds of every create). */
                unlinkat(dfd, "workspace.tar", 0);
                s->has_workspace = false;
                *ret_bytes = 0;
                return 0;
        }
        if (fstat(fd, &st) < 0)
                return dm_error_set(err, -errno, "cannot stat the workspace archive: %s", strerror(errno));
        *ret_bytes = st.st_size;
        return 0;
}

/* The commit, labelled; its size is what it adds to the image it came from. */
static int take_root(struct dm_context *ctx, struct dm_backend *b, const struct dm_sandbox *sb, struct dm_snapshot *s,
                     int64_t *ret_bytes, struct dm_error *err)
{
        char l_id[64], l_owner[DM_PRINCIPAL_MAX + 32], l_source[64], l_image[64], l_egress[64], l_created[64];
        const char *labels[] = { l_id, l_owner, l_source, l_image, l_egress, l_created, ctx->root_label, NULL };
        _cleanup_free_ char *image_id = NULL;
        struct dm_image_entry mine = { 0 }, base = { 0 };
        const struct dm_image_info *img;
        int r;

        snprintf(l_id, sizeof(l_id), LABEL_SNAPSHOT "=%s", s->id);
        snprintf(l_owner, sizeof(l_owner), LABEL_SNAPSHOT ".owner=%s", s->principal);
        snprintf(l_source, sizeof(l_source), LABEL_SNAPSHOT ".source=%s", s->source);
        snprintf(l_image, sizeof(l_image), LABEL_SNAPSHOT ".image=%s", s->image);
        snprintf(l_egress, sizeof(l_egress), LABEL_SNAPSHOT ".egress=%s", s->egress);
        snprintf(l_created, sizeof(l_created), LABEL_SNAPSHOT ".created=%lld", (long long)s->created_at);
        /* A nested sandbox's endpoint token is in its container's
         * environment: it stays out of the image (a sandbox made from it
         * gets its own, or none). */
        static const char *const env_clear[] = { "DEMESNE_MCP_TOKEN", "DEMESNE_MCP_URL", NULL };
        r = b->ops->commit(b, sb->container,
                           &(struct dm_commit_spec){
                                   .repo = DM_SNAPSHOT_REPO, .tag = s->id, .labels = labels, .env_clear = env_clear },
                           &image_id, err);
        if (r < 0)
                return r;
        r = b->ops->image_inspect(b, s->image_ref, &mine, err);
        if (r < 0)
                return r;
        *ret_bytes = mine.size;
        if (dm_image_lookup(s->image, &img, NULL) == 0 &&
            b->ops->image_inspect(b, dm_image_ref(img), &base, NULL) == 0 && base.size <= mine.size)
                *ret_bytes = mine.size - base.size;
        dm_image_entry_release(&mine);
        dm_image_entry_release(&base);
        return 0;
}

/* Taken whole: its size, against the disk cap with what else principal
 * holds, and the record made ready in one step under the cap's lock (two
 * takes finishing together cannot both pass it). held: the server's name
 * stays in the record (a fork still making its sandboxes from it). */
static int take(struct dm_context *ctx, struct dm_backend *b, const struct dm_sandbox *sb, struct dm_snapshot *s,
                bool held, struct dm_error *err)
{
        struct count_walk w = { .principal = s->principal, .skip = s->id };
        int64_t ws = 0, root = 0;
        int r;

        r = take_workspace(ctx, b, sb, s, &ws, err);
        if (r >= 0)
                r = take_root(ctx, b, sb, s, &root, err);
        if (r < 0)
                return r;
        s->size_bytes = ws + root;
        s->ready = true;
        if (!held)
                s->server[0] = '\0';
        pthread_mutex_lock(&cap_lock);
        each(ctx, count_one, &w);
        if (ctx->cfg.snapshot_disk_max > 0 && w.bytes + s->size_bytes > ctx->cfg.snapshot_disk_max)
                r = disk_refusal(ctx, s, w.bytes, err);
        else
                r = record_write(ctx, s, err);
        pthread_mutex_unlock(&cap_lock);
        return r;
}

static int identity(struct dm_context *ctx, const char *principal, const struct dm_sandbox *sb, const char *name,
                    struct dm_snapshot *s, struct dm_error *err)
{
        unsigned char rnd[6];

        memset(s, 0, sizeof(*s));
        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                return dm_error_set(err, -EIO, "no randomness for a snapshot id");
        snprintf(s->id, sizeof(s->id), "snap-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4], rnd[5]);
        snprintf(s->name, sizeof(s->name), "%s", name ? name : "");
        snprintf(s->source, sizeof(s->source), "%s", sb->id);
        snprintf(s->image, sizeof(s->image), "%s", sb->image);
        snprintf(s->image_ref, sizeof(s->image_ref), "%s:%s", DM_SNAPSHOT_REPO, s->id);
        snprintf(s->egress, sizeof(s->egress), "%s", sb->egress);
        snprintf(s->allow, sizeof(s->allow), "%s", sb->allow);
        snprintf(s->principal, sizeof(s->principal), "%s", principal ? principal : "local");
        snprintf(s->server, sizeof(s->server), "%s", ctx->owner);
        s->created_at = dm_wall_ms() / 1000;
        s->expires_at = s->created_at + ctx->cfg.snapshot_ttl_s;
        return 0;
}

static int take_as(struct dm_context *ctx, const char *principal, const char *sandbox_id, const char *name, bool held,
                   struct dm_snapshot *ret, struct dm_error *err)
{
        struct dm_sandbox sb;
        struct dm_snapshot s;
        struct dm_backend *b;
        int r;

        r = check_name(name, err);
        if (r >= 0)
                r = dm_sandbox_get(ctx, sandbox_id, principal ? principal : "local", &sb, err);
        if (r >= 0)
                r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                return r;
        if (!b->ops->commit || !b->ops->image_inspect || !b->ops->image_remove)
                return dm_error_set(err, -EOPNOTSUPP,
                                    "the %s backend cannot take snapshots: its server offers no way to keep a "
                                    "sandbox's file system (use the docker backend: Podman or dockerd)",
                                    b->ops->name);
        r = identity(ctx, principal, &sb, name, &s, err);
        if (r >= 0)
                r = reserve(ctx, &s, err);
        if (r < 0)
                return r;
        r = take(ctx, b, &sb, &s, held, err);
        if (r < 0) {
                remove_all(ctx, s.id, s.image_ref);
                return dm_error_wrap(err, "snapshot sandbox '%s'", sandbox_id);
        }
        log_info("snapshot %s of sandbox %s taken (%lld bytes)", s.id, sb.id, (long long)s.size_bytes);
        *ret = s;
        return 0;
}

int dm_snapshot_take(struct dm_context *ctx, const char *principal, const char *sandbox_id, const char *name,
                     struct dm_snapshot *ret, struct dm_error *err)
{
        return take_as(ctx, principal, sandbox_id, name, false, ret, err);
}

int dm_snapshot_take_held(struct dm_context *ctx, const char *principal, const char *sandbox_id, const char *name,
                          struct dm_snapshot *ret, struct dm_error *err)
{
        return take_as(ctx, principal, sandbox_id, name, true, ret, err);
}

int dm_snapshot_unhold(struct dm_context *ctx, struct dm_snapshot *s, struct dm_error *err)
{
        int r;

        s->server[0] = '\0';
        pthread_mutex_lock(&cap_lock);
        r = record_write(ctx, s, err);
        pthread_mutex_unlock(&cap_lock);
        return r;
}

/* ---- using one --------------------------------------------------------------------- */

int dm_snapshot_get(struct dm_context *ctx, const char *principal, const char *id, struct dm_snapshot *ret,
                    struct dm_error *err)
{
        struct dm_snapshot s;
        int r = record_read(ctx, id, &s, err);

        if (r == -EIO)
                return r;
        /* Not taken whole yet, expired, or another's: all unknown. */
        if (r < 0 || !s.ready || s.expires_at <= dm_wall_ms() / 1000 ||
            !dm_principal_covers(principal ? principal : "local", s.principal))
                return unknown(id, err);
        *ret = s;
        return 0;
}

int dm_snapshot_seed(struct dm_context *ctx, const struct dm_snapshot *snap, const char *container,
                     struct dm_error *err)
{
        char dir[PATH_MAX];
        _cleanup_close_ int dfd = -1, fd = -1;
        struct stat st;
        struct dm_backend *b;
        int r;

        if (!snap->has_workspace)
                return 0;
        r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                return r;
        if (!b->ops->put_archive)
                return dm_error_set(err, -EOPNOTSUPP, "the %s backend cannot write /workspace from an archive",
                                    b->ops->name);
        snap_dir(ctx, snap->id, dir, sizeof(dir));
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        fd = dfd < 0 ? -1 : openat(dfd, "workspace.tar", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return dm_error_set(err, -EIO, "snapshot '%s': its workspace archive is missing", snap->id);
        /* Relative to /workspace, owned by the container's root: the
         * engine writes it through the bind mount, mapping the ids into
         * the new container's range. */
        r = b->ops->put_archive(b, container, "/workspace", fd, st.st_size, err);
        return r < 0 ? dm_error_wrap(err, "restore /workspace from snapshot '%s'", snap->id) : 0;
}

int dm_snapshot_delete(struct dm_context *ctx, const char *principal, const char *id, struct dm_error *err)
{
        struct dm_snapshot s;
        int r = record_read(ctx, id, &s, err);

        if (r == -EIO)
                return r;
        if (r < 0 || !s.ready || !dm_principal_covers(principal ? principal : "local", s.principal))
                return unknown(id, err);
        remove_all(ctx, s.id, s.image_ref);
        log_info("snapshot %s deleted", s.id);
        return 0;
}

json_object *dm_snapshot_describe(const struct dm_snapshot *s)
{
        json_object *o = json_object_new_object();
        char t[32];

        json_object_object_add(o, "snapshot_id", json_object_new_string(s->id));
        json_object_object_add(o, "name", json_object_new_string(s->name));
        json_object_object_add(o, "source", json_object_new_string(s->source));
        json_object_object_add(o, "size_bytes", json_object_new_int64(s->size_bytes));
        dm_time_format(s->created_at, t, sizeof(t));
        json_object_object_add(o, "created_at", json_object_new_string(t));
        dm_time_format(s->expires_at, t, sizeof(t));
        json_object_object_add(o, "expires_at", json_object_new_string(t));
        return o;
}

struct list_walk {
        const char *principal;
        json_object *a;
};

static void list_one(struct dm_context *ctx, const char *id, void *ud)
{
        struct list_walk *w = ud;
        struct dm_snapshot s;

        if (dm_snapshot_get(ctx, w->principal, id, &s, NULL) == 0)
                json_object_array_add(w->a, dm_snapshot_describe(&s));
}

json_object *dm_snapshot_list(struct dm_context *ctx, const char *principal)
{
        struct list_walk w = { .principal = principal ? principal : "local", .a = json_object_new_array() };

        each(ctx, list_one, &w);
        return w.a;
}

/* ---- the TTL and the sweep ------------------------------------------------------ */

static void reap_one(struct dm_context *ctx, const char *id, void *ud)
{
        struct dm_snapshot s;

        if (record_read(ctx, id, &s, NULL) < 0 || !s.ready || s.expires_at > dm_wall_ms() / 1000)
                return;
        remove_all(ctx, s.id, s.image_ref);
        log_info("snapshot %s expired and was deleted", id);
        (*(int *)ud)++;
}

static int sweep_images(struct dm_context *ctx);

int dm_snapshot_reap_expired(struct dm_context *ctx)
{
        int n = 0;

        each(ctx, reap_one, &n);
        /* And the images of deleted snapshots that sandboxes still ran
         * from when they were deleted, once those are gone. */
        sweep_images(ctx);
        return n;
}

/* The sandboxes a fork was making from snapshot s when its server died:
 * every sandbox container started from s's image (its caller never
 * learnt their ids). Their records go with them; a container whose record
 * was not yet written goes alone. */
static void remove_forks(struct dm_context *ctx, const struct dm_snapshot *s)
{
        struct dm_backend *b;
        struct dm_error e = { 0 };
        char **ids = NULL;
        size_t n = 0, len = strlen(s->id);

        if (dm_context_backend(ctx, &b, &e) < 0 || b->ops->list(b, DM_LABEL_KIND "=sandbox", &ids, &n, &e) < 0) {
                log_warning("snapshot %s: cannot list the sandboxes made from it: %s", s->id, e.msg);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                struct dm_container_info info = { 0 };
                const char *sb = NULL;
                size_t il;

                if (b->ops->inspect(b, ids[i], &info, &e) == 0 && (il = strlen(info.image)) > len &&
                    strcmp(info.image + il - len, s->id) == 0 && info.image[il - len - 1] == ':' &&
                    strstr(info.image, "demesne-snapshot")) {
                        for (char **l = info.labels; l && *l; l++)
                                if (strncmp(*l, "demesne.sandbox=", 16) == 0)
                                        sb = *l + 16;
                        if (!sb || dm_sandbox_destroy(ctx, sb, &e) < 0) {
                                dm_error_clear(&e);
                                if (b->ops->destroy(b, ids[i], &e) < 0)
                                        log_warning("snapshot %s: its fork '%.12s' stays: %s", s->id, ids[i], e.msg);
                        }
                        log_info("snapshot %s: fork %s, made by a server that died mid-fork, removed", s->id,
                                 sb ? sb : ids[i]);
                }
                dm_container_info_release(&info);
                dm_error_clear(&e);
                free(ids[i]);
        }
        free(ids);
}

/* The container a shifted commit (rootful Podman) was making the image
 * in, when its server died during it: found by its name. */
static void remove_helper(struct dm_context *ctx, const char *id)
{
        char name[64];
        struct dm_backend *b;
        struct dm_error e = { 0 };

        struct dm_container_info info = { 0 };

        snprintf(name, sizeof(name), DM_COMMIT_HELPER_PREFIX "%s", id);
        if (dm_context_backend(ctx, &b, &e) < 0 || b->ops->inspect(b, name, &info, &e) < 0)
                return;
        dm_container_info_release(&info);
        if (b->ops->destroy(b, name, &e) == 0)
                log_info("snapshot %s: its commit's helper container, left by a server that is gone, removed", id);
}

/* The source of a snapshot whose server died during its commit: the
 * commit pauses it where the engine can (backends/docker-image.c) and
 * the dead server never resumed it. Resumed unless its record says its
 * caller paused it (sandbox_pause): then the commit could not pause it
 * and it stays as its caller left it. */
static void resume_source(struct dm_context *ctx, const struct dm_snapshot *s)
{
        struct dm_container_info info = { 0 };
        struct dm_backend *b;
        struct dm_sandbox sb;
        struct dm_error e = { 0 };

        if (!s->source[0] || dm_sandbox_record_read(ctx, s->source, &sb, NULL) < 0 || sb.paused ||
            dm_context_backend(ctx, &b, &e) < 0 || !b->ops->unpause || b->ops->inspect(b, sb.container, &info, &e) < 0)
                return;
        if (info.status && strcmp(info.status, "paused") == 0) {
                if (b->ops->unpause(b, sb.container, &e) == 0)
                        log_info("snapshot %s: its source %s, paused by a server that died during the commit, "
                                 "resumed",
                                 s->id, sb.id);
                else
                        log_warning("snapshot %s: its source %s stays paused: %s", s->id, sb.id, e.msg);
        }
        dm_container_info_release(&info);
}

/* An orphaned snapshot: its record names a server (one that is taking it,
 * or whose sandbox_fork is still making sandboxes from it) that is gone;
 * or a directory without a record (a server killed between its mkdir and
 * its first write). It goes, and so do the forks made from it. A snapshot
 * whose record names no server was handed to its caller: kept until its
 * TTL or a sandbox_destroy. */
static void sweep_one(struct dm_context *ctx, const char *id, void *ud)
{
        struct dm_snapshot s;
        int r = record_read(ctx, id, &s, NULL);

        if (r == 0 && (!s.server[0] || strcmp(s.server, ctx->owner) == 0 || dm_owner_alive(s.server, ctx->owner)))
                return;
        if (r < 0) {
                char dir[PATH_MAX];
                struct stat st;

                /* Give a take under way (record not yet written) a minute. */
                if (snap_dir(ctx, id, dir, sizeof(dir)) < 0 || stat(dir, &st) < 0 ||
                    st.st_mtime > dm_wall_ms() / 1000 - 60)
                        return;
        }
        if (r == 0 && s.ready)
                remove_forks(ctx, &s);
        remove_helper(ctx, id);
        if (r == 0)
                resume_source(ctx, &s);
        remove_all(ctx, id, r == 0 ? s.image_ref : NULL);
        log_info("snapshot %s: left %s by a server that is gone; removed", id,
                 r == 0 && s.ready ? "mid-fork" : "unfinished");
        (*(int *)ud)++;
}

/* Images of this output root whose snapshot has no record. */
static int sweep_images(struct dm_context *ctx)
{
        struct dm_image_entry *v = NULL;
        struct dm_backend *b;
        struct dm_error e = { 0 };
        size_t n = 0;
        int removed = 0;

        if (dm_context_backend(ctx, &b, &e) < 0 || !b->ops->image_list ||
            b->ops->image_list(b, ctx->root_label, &v, &n, &e) < 0)
                return 0;
        for (size_t i = 0; i < n; i++) {
                const char *id = NULL;
                struct dm_snapshot s;

                for (char **l = v[i].labels; l && *l; l++)
                        if (strncmp(*l, LABEL_SNAPSHOT "=", sizeof(LABEL_SNAPSHOT)) == 0)
                                id = *l + sizeof(LABEL_SNAPSHOT);
                if (!id || !valid_id(id) || record_read(ctx, id, &s, NULL) == 0)
                        continue;
                if (b->ops->image_remove(b, v[i].id, &e) == 0)
                        removed++;
                dm_error_clear(&e);
        }
        dm_image_entries_free(v, n);
        return removed;
}

int dm_snapshot_sweep(struct dm_context *ctx)
{
        int n = 0;

        each(ctx, sweep_one, &n);
        return n + sweep_images(ctx);
}

/* ---- a tree's end, and what snapshots hold ------------------------------------ */

struct tree_walk {
        const char *principal;
        size_t n;
};

static void tree_one(struct dm_context *ctx, const char *id, void *ud)
{
        struct tree_walk *w = ud;
        struct dm_snapshot s;

        if (record_read(ctx, id, &s, NULL) < 0 || !dm_principal_covers(w->principal, s.principal))
                return;
        remove_all(ctx, s.id, s.image_ref);
        log_info("snapshot %s of '%s' deleted with its tree", s.id, s.principal);
        w->n++;
}

size_t dm_snapshot_delete_tree(struct dm_context *ctx, const char *principal)
{
        struct tree_walk w = { .principal = principal };

        if (principal && dm_principal_depth(principal) > 0)
                each(ctx, tree_one, &w);
        return w.n;
}

void dm_snapshot_usage(struct dm_context *ctx, const char *principal, size_t *ret_count, int64_t *ret_bytes)
{
        struct count_walk w = { .principal = principal ? principal : "local", .below = true };

        each(ctx, count_one, &w);
        *ret_count = w.n;
        *ret_bytes = w.bytes;
}
