/* SPDX-License-Identifier: MIT */
/* A commit whose files keep the ids the sandbox saw, on rootful Podman's
 * per-container user namespaces (issue 32).
 *
 * There the overlay driver shifts the image's layers with idmapped mounts
 * and records the container's own layer with no id mapping
 * (containers/storage: HostUIDMapping when the driver "supports
 * shifting"), so what the container wrote in its root file system is
 * stored, and committed, owned by its host ids. A sandbox made from the
 * commit has another range and sees those files, and the folders they are
 * in, as nobody. The engine's archive of a path (GET .../archive) gives
 * the same host ids, measured: all in [root, root + 65536).
 *
 * A commit on top of the source's commit cannot fix it: a 0700 folder
 * (/root) owned by unmapped ids in a lower layer blocks lookups in it even
 * under a corrected copy (measured). So the snapshot is made beside the
 * source: its changed paths (GET .../changes, mounts left out) are read out
 * of it, each id shifted back by the source's root (anything outside its
 * range becomes nobody, never a host id), deletions written as whiteouts
 * (".wh.<name>", which the commit keeps as such, measured), and put into a
 * container of the source's image with no user namespace, never started,
 * whose commit is the snapshot. */
#include "config.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backends/docker-commit-ids.h"
#include "backends/docker-internal.h"
#include "src/basic/archive-copy.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"

#define CALL_TIMEOUT_MS 120000L
#define RANGE 65536u
#define NOBODY 65534u
#define OK(...) ((const long[]){ __VA_ARGS__, 0 })

struct change {
        const char *path;
        int kind; /* 0 changed, 1 added, 2 deleted */
};

struct shift {
        unsigned uid, gid;
        struct archive *out;
};

static void json_putp(struct json_object **o)
{
        json_object_put(*o);
}

/* '/' sorts before every other byte: a folder's entries follow it. */
static int path_cmp(const void *a, const void *b)
{
        const unsigned char *x = (const unsigned char *)((const struct change *)a)->path,
                            *y = (const unsigned char *)((const struct change *)b)->path;

        for (; *x && *x == *y; x++, y++)
                ;
        return (*x == '/' ? 1 : *x) - (*y == '/' ? 1 : *y);
}

static bool below(const char *path, const char *top)
{
        size_t n = top ? strlen(top) : 0;

        return top && strncmp(path, top, n) == 0 && path[n] == '/';
}

static unsigned shifted(int64_t id, unsigned root)
{
        return id >= root && id < (int64_t)root + RANGE ? (unsigned)(id - root) : NOBODY;
}

/* "etc" for "/etc/x", "" for "/x". */
static int dir_prefix(const char *path, const char *name, char **ret)
{
        const char *slash = strrchr(path, '/');
        int n = (int)(slash - path) - 1;

        if (n <= 0)
                return (*ret = strdup(name)) ? 0 : -ENOMEM;
        return asprintf(ret, "%.*s/%s", n, path + 1, name) < 0 ? -ENOMEM : 0;
}

static int copy_entry(const struct shift *s, const char *path, struct archive *in, struct archive_entry *e,
                      struct dm_error *err)
{
        _cleanup_free_ char *name = NULL, *link = NULL;
        const char *hl = archive_entry_hardlink(e);

        if (dir_prefix(path, archive_entry_pathname(e), &name) < 0 || (hl && dir_prefix(path, hl, &link) < 0))
                return dm_error_set(err, -ENOMEM, "out of memory");
        archive_entry_set_pathname(e, name);
        if (link)
                archive_entry_set_hardlink(e, link);
        archive_entry_set_uid(e, shifted(archive_entry_uid(e), s->uid));
        archive_entry_set_gid(e, shifted(archive_entry_gid(e), s->gid));
        archive_entry_set_uname(e, NULL);
        archive_entry_set_gname(e, NULL);
        if (archive_write_header(s->out, e) != ARCHIVE_OK)
                return dm_error_set(err, -EIO, "cannot write the changes archive: %s", archive_error_string(s->out));
        return dm_archive_copy_data(in, "the engine's archive", s->out, "the changes archive", err);
}

/* The engine's archive of path into fd. A changed path (kind 0) is read
 * only as far as HEAD_MAX first: a changed folder's own entry comes first
 * and is all that is taken of it (its changed entries are listed too), so
 * the archive of a folder holding 200 MB is not read whole for one header.
 * Anything else, or a first entry that is not a folder, is read whole. */
#define HEAD_MAX (1L << 20)
static int fetch_path(struct dm_backend *b, const char *id, const struct change *c, int fd, struct dm_error *err)
{
        struct dm_error head = { 0 };
        struct archive *in;
        struct archive_entry *e;
        bool folder = false;
        int r;

        if (c->kind == 0) {
                r = dm_docker_get_archive(b, id, c->path, fd, HEAD_MAX, &head);
                if (r >= 0)
                        return 0;
                if (r != -EFBIG) {
                        *err = head;
                        return r;
                }
                in = archive_read_new();
                if (in && lseek(fd, 0, SEEK_SET) == 0 && archive_read_support_format_tar(in) == ARCHIVE_OK &&
                    archive_read_open_fd(in, fd, 65536) == ARCHIVE_OK && archive_read_next_header(in, &e) == ARCHIVE_OK)
                        folder = archive_entry_filetype(e) == AE_IFDIR;
                archive_read_free(in);
                if (folder)
                        return 0;
                if (ftruncate(fd, 0) < 0 || lseek(fd, 0, SEEK_SET) < 0)
                        return dm_error_set(err, -errno, "cannot reset the engine's archive: %s", strerror(errno));
        }
        return dm_docker_get_archive(b, id, c->path, fd, 0, err);
}

/* One changed path out of the source, shifted into s->out. A changed
 * folder brings its own entry alone: its changed entries are listed too. */
static int add_path(struct dm_backend *b, const char *id, const struct change *c, const struct shift *s,
                    struct dm_error *err)
{
        _cleanup_close_ int fd = memfd_create("demesne-commit-path", MFD_CLOEXEC);
        struct archive *in = NULL;
        struct archive_entry *e;
        int r, ar = ARCHIVE_OK;

        if (fd < 0)
                return dm_error_set(err, -errno, "cannot make a memfd: %s", strerror(errno));
        r = fetch_path(b, id, c, fd, err);
        if (r < 0)
                return r;
        if (lseek(fd, 0, SEEK_SET) < 0)
                return dm_error_set(err, -errno, "cannot rewind the engine's archive: %s", strerror(errno));
        in = archive_read_new();
        if (!in || archive_read_support_format_tar(in) != ARCHIVE_OK ||
            archive_read_open_fd(in, fd, 65536) != ARCHIVE_OK)
                r = dm_error_set(err, -EIO, "cannot read the engine's archive of '%s'", c->path);
        /* A changed path's first entry alone (what follows may be cut off). */
        while (r >= 0 && (ar = archive_read_next_header(in, &e)) == ARCHIVE_OK) {
                r = copy_entry(s, c->path, in, e, err);
                if (c->kind == 0) {
                        ar = ARCHIVE_EOF;
                        break;
                }
        }
        if (r >= 0 && ar != ARCHIVE_OK && ar != ARCHIVE_EOF)
                r = dm_error_set(err, -EIO, "cannot read the engine's archive of '%s': %s", c->path,
                                 archive_error_string(in));
        archive_read_free(in);
        return r;
}

/* A deletion: the whiteout ".wh.<name>" beside it, which the engine's
 * commit of the helper keeps as one (measured, Podman 4.3.1 overlay). */
static int add_whiteout(const struct change *c, const struct shift *s, struct dm_error *err)
{
        _cleanup_free_ char *wh = NULL, *name = NULL;
        struct archive_entry *e;
        int r = 0;

        if (asprintf(&wh, ".wh.%s", strrchr(c->path, '/') + 1) < 0 || dir_prefix(c->path, wh, &name) < 0 ||
            !(e = archive_entry_new()))
                return dm_error_set(err, -ENOMEM, "out of memory");
        archive_entry_set_pathname(e, name);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0600);
        archive_entry_set_size(e, 0);
        if (archive_write_header(s->out, e) != ARCHIVE_OK)
                r = dm_error_set(err, -EIO, "cannot write the changes archive: %s", archive_error_string(s->out));
        archive_entry_free(e);
        return r;
}

static int list_changes(struct json_object *arr, struct change **ret, size_t *ret_n, struct dm_error *err)
{
        size_t n = json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : 0, k = 0;
        struct change *c = calloc(n ? n : 1, sizeof(*c));

        if (!c)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                struct json_object *o = json_object_array_get_idx(arr, i), *p, *kind;

                if (!json_object_object_get_ex(o, "Path", &p) || !json_object_object_get_ex(o, "Kind", &kind) ||
                    !json_object_get_string(p) || json_object_get_string(p)[0] != '/') {
                        free(c);
                        return dm_error_set(err, -EPROTO, "the engine's list of changes is malformed");
                }
                c[k++] = (struct change){ json_object_get_string(p), json_object_get_int(kind) };
        }
        qsort(c, k, sizeof(*c), path_cmp);
        *ret = c;
        *ret_n = k;
        return 0;
}

/* Whether path is a mount of the container's (a bind, a volume, a
 * tmpfs) or below one: the engine lists their mount points as changes, and
 * its archive of them is the mount's, not the root file system's. */
static bool mounted(struct json_object *info, const char *path)
{
        struct json_object *mounts = json_object_object_get(info, "Mounts"), *hc, *tmpfs;

        for (size_t i = 0; json_object_is_type(mounts, json_type_array) && i < json_object_array_length(mounts); i++) {
                const char *d = json_object_get_string(
                        json_object_object_get(json_object_array_get_idx(mounts, i), "Destination"));

                if (d && (strcmp(path, d) == 0 || below(path, d)))
                        return true;
        }
        if (!json_object_object_get_ex(info, "HostConfig", &hc) || !json_object_object_get_ex(hc, "Tmpfs", &tmpfs) ||
            !json_object_is_type(tmpfs, json_type_object))
                return false;
        json_object_object_foreach(tmpfs, d, v)
        {
                (void)v;
                if (strcmp(path, d) == 0 || below(path, d))
                        return true;
        }
        return false;
}

/* A folder with this many changes (not deletions) right in it is read
 * whole, once, and what changed is taken out of that one archive: Podman
 * answers each GET .../archive through a chroot'd helper process of its
 * own, about 0.25 s a call here (measured: 300 changed files in /usr/bin
 * took 87 s a path at a time). The folder itself need not be listed:
 * Podman 4.3.1 lists /usr/bin for 40 changed files in it, not for 300. */
#define BATCH_MIN 16

/* "/usr/bin" for "/usr/bin/x" (malloc'd), NULL for "/x". */
static char *parent_of(const char *path)
{
        const char *slash = strrchr(path, '/');

        return slash && slash > path ? strndup(path, slash - path) : NULL;
}

/* When c[i] is the first change below its folder seen so far (*seen
 * names the last folder judged) and that folder has BATCH_MIN or more
 * changes right in it, from i on: the end (exclusive) of the changes below
 * it, and *ret_top the folder (malloc'd). Else i. */
static size_t batch_end(const struct change *c, size_t n, size_t i, char **seen, char **ret_top)
{
        _cleanup_free_ char *top = parent_of(c[i].path);
        size_t j, direct = 0, len;

        if (!top || (*seen && strcmp(*seen, top) == 0))
                return i;
        free(*seen);
        *seen = strdup(top);
        len = strlen(top);
        for (j = i; j < n && below(c[j].path, top); j++)
                if (c[j].kind != 2 && !strchr(c[j].path + len + 1, '/'))
                        direct++;
        if (direct < BATCH_MIN)
                return i;
        *ret_top = TAKE_PTR(top);
        return j;
}

struct batch {
        const char *top; /* the folder read whole */
        struct json_object *info;
        const struct change **want; /* the changes below it to take, by strcmp */
        size_t n_want;
};

static int want_cmp(const void *a, const void *b)
{
        return strcmp((*(const struct change *const *)a)->path, (*(const struct change *const *)b)->path);
}

static const struct change *want_find(const struct batch *bt, const char *path)
{
        const struct change key = { path, 0 }, *kp = &key, **hit;

        hit = bsearch(&kp, bt->want, bt->n_want, sizeof(*bt->want), want_cmp);
        return hit ? *hit : NULL;
}

/* Whether path, an entry of the folder's archive, is to be taken: the
 * folder itself, a change listed, or inside a folder that was added (its
 * entries are not listed). Inside a changed folder only what is listed. */
static bool wanted(const struct batch *bt, const char *path)
{
        _cleanup_free_ char *p = NULL;
        const struct change *w;
        char *slash;

        if (strcmp(path, bt->top) == 0)
                return false; /* its own change, if listed, is taken by itself */
        if (want_find(bt, path))
                return !mounted(bt->info, path);
        p = strdup(path);
        while (p && (slash = strrchr(p, '/')) && slash > p && strlen(p) > strlen(bt->top)) {
                *slash = '\0';
                if ((w = want_find(bt, p)))
                        return w->kind == 1 && !mounted(bt->info, path);
        }
        return false;
}

/* "/usr" + "bin/x" → "/usr/bin/x", without a trailing slash. */
static char *entry_path(const char *top, const char *name)
{
        const char *slash = strrchr(top, '/');
        char *p = NULL;
        size_t len;

        if (asprintf(&p, "%.*s/%s", (int)(slash - top), top, name) < 0)
                return NULL;
        len = strlen(p);
        while (len > 1 && p[len - 1] == '/')
                p[--len] = '\0';
        return p;
}

/* The folder top read whole once, and of it what changed in c[i, end)
 * (deletions are the caller's). A hard link whose target is not taken is
 * read by itself afterwards (its data came with the target). */
static int add_folder(struct dm_backend *b, const char *id, struct json_object *info, const char *top,
                      const struct change *c, size_t i, size_t end, const struct shift *s, struct dm_error *err)
{
        _cleanup_free_ const struct change **want = calloc(end - i, sizeof(*want));
        _cleanup_free_ char **alone = calloc(end - i + 1, sizeof(*alone));
        _cleanup_close_ int fd = memfd_create("demesne-commit-folder", MFD_CLOEXEC);
        struct batch bt = { .top = top, .info = info, .want = want };
        struct archive *in = NULL;
        struct archive_entry *e;
        size_t n_alone = 0;
        int r = 0, ar = ARCHIVE_OK;

        if (!want || !alone || fd < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (size_t j = i; j < end; j++)
                if (c[j].kind != 2)
                        want[bt.n_want++] = &c[j];
        qsort(want, bt.n_want, sizeof(*want), want_cmp);
        r = dm_docker_get_archive(b, id, bt.top, fd, 0, err);
        if (r >= 0 && lseek(fd, 0, SEEK_SET) < 0)
                r = dm_error_set(err, -errno, "cannot rewind the engine's archive: %s", strerror(errno));
        if (r >= 0 && (!(in = archive_read_new()) || archive_read_support_format_tar(in) != ARCHIVE_OK ||
                       archive_read_open_fd(in, fd, 65536) != ARCHIVE_OK))
                r = dm_error_set(err, -EIO, "cannot read the engine's archive of '%s'", bt.top);
        while (r >= 0 && (ar = archive_read_next_header(in, &e)) == ARCHIVE_OK) {
                _cleanup_free_ char *path = entry_path(bt.top, archive_entry_pathname(e)), *link = NULL;
                const char *hl = archive_entry_hardlink(e);

                if (!path || (hl && !(link = entry_path(bt.top, hl)))) {
                        r = dm_error_set(err, -ENOMEM, "out of memory");
                        break;
                }
                if (!wanted(&bt, path))
                        continue;
                if (link && !wanted(&bt, link)) {
                        alone[n_alone++] = TAKE_PTR(path);
                        continue;
                }
                r = copy_entry(s, bt.top, in, e, err);
        }
        if (r >= 0 && ar != ARCHIVE_OK && ar != ARCHIVE_EOF)
                r = dm_error_set(err, -EIO, "cannot read the engine's archive of '%s': %s", bt.top,
                                 archive_error_string(in));
        archive_read_free(in);
        for (size_t k = 0; k < n_alone; k++) {
                if (r >= 0)
                        r = add_path(b, id, &(struct change){ alone[k], 1 }, s, err);
                free(alone[k]);
        }
        return r;
}

/* The source's changed paths, shifted back, as one tar in a memfd. */
static int changes_tar(struct dm_backend *b, const char *id, struct json_object *info, unsigned uid, unsigned gid,
                       int *ret_fd, int64_t *ret_len, struct dm_error *err)
{
        _cleanup_archive_locale_ locale_t utf8 = dm_archive_locale_begin();
        _cleanup_(json_putp) struct json_object *arr = NULL;
        _cleanup_free_ struct change *c = NULL;
        _cleanup_free_ char *path = NULL;
        _cleanup_close_ int fd = -1;
        struct shift s = { uid, gid, NULL };
        _cleanup_free_ char *batched = NULL, *seen = NULL, *top = NULL;
        const char *added = NULL, *deleted = NULL;
        size_t n = 0, end;
        int r;

        if (asprintf(&path, "/containers/%s/changes", id) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_docker_call(b, "GET", NULL, CALL_TIMEOUT_MS, OK(200), NULL, &arr, err, path);
        if (r >= 0)
                r = list_changes(arr, &c, &n, err);
        if (r < 0)
                return r;
        fd = memfd_create("demesne-commit-changes", MFD_CLOEXEC);
        s.out = archive_write_new();
        if (fd < 0 || !s.out || archive_write_set_format_pax_restricted(s.out) != ARCHIVE_OK ||
            archive_write_open_fd(s.out, fd) != ARCHIVE_OK)
                r = dm_error_set(err, -EIO, "cannot make the changes archive");
        for (size_t i = 0; r >= 0 && i < n; i++) {
                if (below(c[i].path, added) || below(c[i].path, deleted) || mounted(info, c[i].path))
                        continue; /* inside an added or deleted folder, or not the root's */
                if (c[i].kind == 2) {
                        deleted = c[i].path;
                        r = add_whiteout(&c[i], &s, err);
                        continue;
                }
                if (c[i].kind == 1)
                        added = c[i].path;
                if (below(c[i].path, batched))
                        continue; /* taken with its folder */
                if ((end = batch_end(c, n, i, &seen, &top)) > i) {
                        free(batched);
                        batched = TAKE_PTR(top);
                        r = add_folder(b, id, info, batched, c, i, end, &s, err);
                        continue;
                }
                r = add_path(b, id, &c[i], &s, err);
        }
        if (r >= 0 && archive_write_close(s.out) != ARCHIVE_OK)
                r = dm_error_set(err, -EIO, "cannot write the changes archive: %s", archive_error_string(s.out));
        archive_write_free(s.out);
        if (r < 0)
                return r;
        *ret_len = lseek(fd, 0, SEEK_CUR);
        if (*ret_len < 0 || lseek(fd, 0, SEEK_SET) < 0)
                return dm_error_set(err, -errno, "cannot rewind the changes archive: %s", strerror(errno));
        *ret_fd = TAKE_FD(fd);
        return 0;
}

/* A container of the source's image with the source's command,
 * environment, working directory and user (what its commit would keep),
 * no user namespace, never started. */
static int helper_create(struct dm_backend *b, struct json_object *info, const char *name, char **ret_id,
                         struct dm_error *err)
{
        _cleanup_free_ char *path = NULL;
        static const char *const keep[] = { "Env", "Cmd", "Entrypoint", "WorkingDir", "User", NULL };
        _cleanup_(json_putp) struct json_object *body = json_object_new_object(), *hc = json_object_new_object(),
                                                *o = NULL;
        struct json_object *config = json_object_object_get(info, "Config"), *v;
        const char *image = json_object_get_string(json_object_object_get(info, "Image")), *id;
        int r;

        if (!body || !hc)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (image && strncmp(image, "sha256:", 7) == 0)
                image += 7;
        if (!image || dm_docker_check_ref("image id", image, NULL) < 0)
                return dm_error_set(err, -EPROTO, "the engine named no image for the container");
        json_object_object_add(hc, "NetworkMode", json_object_new_string("none"));
        json_object_object_add(hc, "UsernsMode", json_object_new_string("host"));
        json_object_object_add(body, "Image", json_object_new_string(image));
        for (size_t i = 0; keep[i]; i++)
                if (json_object_object_get_ex(config, keep[i], &v) && v)
                        json_object_object_add(body, keep[i], json_object_get(v));
        json_object_object_add(body, "HostConfig", json_object_get(hc));
        if (name && dm_docker_check_ref("container name", name, err) < 0)
                return -EINVAL;
        if (asprintf(&path, "/containers/create%s%s", name ? "?name=" : "", name ? name : "") < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_docker_call(b, "POST", json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN), CALL_TIMEOUT_MS,
                           OK(201, 200), NULL, &o, err, path);
        if (r < 0)
                return r;
        id = json_object_get_string(json_object_object_get(o, "Id"));
        if (!id || dm_docker_check_ref("container id", id, NULL) < 0)
                return dm_error_set(err, -EPROTO, "the engine named no container");
        *ret_id = strdup(id);
        return *ret_id ? 0 : dm_error_set(err, -ENOMEM, "out of memory");
}

static void helper_remove(struct dm_backend *b, const char *id)
{
        _cleanup_free_ char *path = NULL;
        struct dm_error e = { 0 };

        if (asprintf(&path, "/containers/%s?force=1", id) < 0 ||
            dm_docker_call(b, "DELETE", NULL, CALL_TIMEOUT_MS, OK(200, 204, 404), NULL, NULL, &e, path) < 0)
                log_warning("cannot remove the commit's helper container '%.12s': %s", id, e.msg);
}

int dm_docker_commit_shift(struct dm_backend *b, const char *id, unsigned uid, unsigned gid, const char *name,
                           char **ret_helper, struct dm_error *err)
{
        _cleanup_(json_putp) struct json_object *info = NULL;
        _cleanup_free_ char *helper = NULL, *path = NULL;
        _cleanup_close_ int fd = -1;
        int64_t len = 0;
        int r;

        if (asprintf(&path, "/containers/%s/json", id) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_docker_call(b, "GET", NULL, CALL_TIMEOUT_MS, OK(200), NULL, &info, err, path);
        if (r >= 0)
                r = changes_tar(b, id, info, uid, gid, &fd, &len, err);
        if (r >= 0)
                r = helper_create(b, info, name, &helper, err);
        if (r >= 0)
                r = dm_docker_put_archive(b, helper, "/", fd, len, err);
        if (r < 0) {
                if (helper)
                        helper_remove(b, helper);
                return dm_error_wrap(err, "give back the ids of container '%.12s'", id);
        }
        *ret_helper = TAKE_PTR(helper);
        return 0;
}

void dm_docker_commit_helper_remove(struct dm_backend *b, const char *helper)
{
        helper_remove(b, helper);
}
