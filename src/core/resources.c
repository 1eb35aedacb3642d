/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/resources.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/base64.h"
#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/uri.h"
#include "src/basic/utf8.h"

#define WALK_DEPTH_MAX 16

struct claim {
        char dir[64];
        char principal[DM_RESOURCE_PRINCIPAL_MAX];
        uint64_t seq;
};

struct dm_resources {
        pthread_mutex_t lock;
        struct claim *claims; /* DM_RESOURCE_CLAIMS_MAX slots, a ring by seq */
        size_t n;
        uint64_t seq;
};

struct dm_resources *dm_resources_new(void)
{
        struct dm_resources *res = calloc(1, sizeof(*res));

        if (!res)
                return NULL;
        res->claims = calloc(DM_RESOURCE_CLAIMS_MAX, sizeof(*res->claims));
        if (!res->claims) {
                free(res);
                return NULL;
        }
        pthread_mutex_init(&res->lock, NULL);
        return res;
}

void dm_resources_free(struct dm_resources *res)
{
        if (!res)
                return;
        pthread_mutex_destroy(&res->lock);
        free(res->claims);
        free(res);
}

/* A directory name a claim or a URI may carry: one plain component. */
static bool dir_name_ok(const char *dir)
{
        size_t len = dir ? strlen(dir) : 0;

        return len > 0 && len < sizeof(((struct claim *)0)->dir) && !strchr(dir, '/') && strcmp(dir, ".") != 0 &&
               strcmp(dir, "..") != 0;
}

static struct claim *find_locked(struct dm_resources *res, const char *dir)
{
        for (size_t i = 0; i < res->n; i++)
                if (strcmp(res->claims[i].dir, dir) == 0)
                        return &res->claims[i];
        return NULL;
}

void dm_resources_claim(struct dm_resources *res, const char *dir, const char *principal)
{
        struct claim *c;

        if (!res || !dir_name_ok(dir) || !principal)
                return;
        pthread_mutex_lock(&res->lock);
        c = find_locked(res, dir);
        if (!c && res->n < DM_RESOURCE_CLAIMS_MAX)
                c = &res->claims[res->n++];
        if (!c) { /* full: the oldest claim goes */
                c = &res->claims[0];
                for (size_t i = 1; i < res->n; i++)
                        if (res->claims[i].seq < c->seq)
                                c = &res->claims[i];
        }
        snprintf(c->dir, sizeof(c->dir), "%s", dir);
        snprintf(c->principal, sizeof(c->principal), "%s", principal);
        c->seq = ++res->seq;
        pthread_mutex_unlock(&res->lock);
}

bool dm_resources_owned(struct dm_resources *res, const char *dir, const char *principal)
{
        struct claim *c;
        bool owned;

        if (!res || !dir_name_ok(dir) || !principal)
                return false;
        pthread_mutex_lock(&res->lock);
        c = find_locked(res, dir);
        owned = c && dm_principal_covers(principal, c->principal);
        pthread_mutex_unlock(&res->lock);
        return owned;
}

/* ---- names ---------------------------------------------------------------- */

/* Splits a URI into its directory and path (malloc'd together in *ret_buf).
 * Each path segment is non-empty and neither "." nor "..". */
static int parse_uri(const char *uri, char **ret_buf, const char **ret_dir, const char **ret_path)
{
        size_t n = strlen(DM_RESOURCE_SCHEME);
        char *buf, *slash, *seg, *save = NULL;
        _cleanup_free_ char *check = NULL;

        if (strncmp(uri, DM_RESOURCE_SCHEME, n) != 0)
                return -EINVAL;
        buf = strdup(uri + n);
        if (!buf)
                return -ENOMEM;
        slash = strchr(buf, '/');
        if (!slash || slash == buf || !slash[1]) {
                free(buf);
                return -EINVAL;
        }
        *slash = '\0';
        if (dm_uri_decode_in_place(buf) < 0 || !dir_name_ok(buf) || dm_uri_decode_in_place(slash + 1) < 0) {
                free(buf);
                return -EINVAL;
        }
        /* Segments of the decoded path: an encoded "/" is a separator like
         * any other, and still passes this check. */
        check = strdup(slash + 1);
        if (!check || check[0] == '/' || check[strlen(check) - 1] == '/' || strstr(check, "//")) {
                free(buf);
                return check ? -EINVAL : -ENOMEM;
        }
        for (seg = strtok_r(check, "/", &save); seg; seg = strtok_r(NULL, "/", &save))
                if (strcmp(seg, ".") == 0 || strcmp(seg, "..") == 0) {
                        free(buf);
                        return -EINVAL;
                }
        *ret_buf = buf;
        *ret_dir = buf;
        *ret_path = slash + 1;
        return 0;
}

/* ---- walking an output directory ---------------------------------------- */

struct found {
        char *path;
        off_t size;
        int64_t mtime;
};

struct walk {
        struct found *v;
        size_t n, cap, total;
        size_t keep; /* entries kept beyond this are only counted */
};

static int walk_add(struct walk *w, const char *path, const struct stat *st)
{
        w->total++;
        if (w->n >= w->keep)
                return 0;
        if (w->n == w->cap) {
                size_t cap = w->cap ? w->cap * 2 : 16;
                struct found *v = realloc(w->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                w->v = v;
                w->cap = cap;
        }
        w->v[w->n].path = strdup(path);
        if (!w->v[w->n].path)
                return -ENOMEM;
        w->v[w->n].size = st->st_size;
        w->v[w->n].mtime = (int64_t)st->st_mtime;
        w->n++;
        return 0;
}

static int walk_one(void *userdata, const char *path, const struct stat *st)
{
        return walk_add(userdata, path, st);
}

static int cmp_found(const void *a, const void *b)
{
        return strcmp(((const struct found *)a)->path, ((const struct found *)b)->path);
}

static void walk_release(struct walk *w)
{
        for (size_t i = 0; i < w->n; i++)
                free(w->v[i].path);
        free(w->v);
}

static int walk_output(const char *output_root, const char *dir, size_t keep, struct walk *w)
{
        _cleanup_close_ int rootfd = -1;
        int fd, r;

        *w = (struct walk){ .keep = keep };
        rootfd = dm_io_open_dir(output_root);
        if (rootfd < 0)
                return rootfd;
        fd = dm_io_open_beneath(rootfd, dir, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0)
                return fd;
        r = dm_io_walk_files(fd, WALK_DEPTH_MAX, false, walk_one, w);
        close(fd);
        return r;
}

json_object *dm_resources_describe(const char *dir, const char *path, int64_t size, const char *type)
{
        json_object *o = json_object_new_object();
        char *uri = dm_uri_make(DM_RESOURCE_SCHEME, dir, path);
        const char *base = strrchr(path, '/');

        if (type)
                json_object_object_add(o, "type", json_object_new_string(type));
        json_object_object_add(o, "uri", json_object_new_string(uri ? uri : ""));
        json_object_object_add(o, "name", json_object_new_string(base ? base + 1 : path));
        json_object_object_add(o, "title", json_object_new_string(path));
        json_object_object_add(o, "mimeType", json_object_new_string(dm_mime_type(path)));
        json_object_object_add(o, "size", json_object_new_int64(size));
        free(uri);
        return o;
}

static json_object *describe(const char *dir, const struct found *f, const char *type)
{
        return dm_resources_describe(dir, f->path, (int64_t)f->size, type);
}

json_object *dm_resources_links(const char *output_root, const char *dir, size_t max, size_t *ret_omitted)
{
        json_object *a = json_object_new_array();
        struct walk w = { 0 };

        *ret_omitted = 0;
        /* Every file is counted; the first max by path are kept, so a
         * directory of thousands costs a walk but not their names. Sorting
         * the kept ones is by walk order, then path: good enough for a
         * result that says how many it left out. */
        if (!dir_name_ok(dir) || walk_output(output_root, dir, max, &w) < 0) {
                walk_release(&w);
                return a;
        }
        qsort(w.v, w.n, sizeof(*w.v), cmp_found);
        for (size_t i = 0; i < w.n; i++) {
                json_object_array_add(a, describe(dir, &w.v[i], "resource_link"));
        }
        *ret_omitted = w.total - w.n;
        walk_release(&w);
        return a;
}

json_object *dm_resources_list(struct dm_resources *res, const char *output_root, const char *principal)
{
        json_object *a = json_object_new_array();
        struct claim *mine;
        size_t n = 0;

        if (!res)
                return a;
        /* A copy of this principal's claims, newest first, outside the lock
         * for the walks. */
        pthread_mutex_lock(&res->lock);
        mine = calloc(res->n ? res->n : 1, sizeof(*mine));
        for (size_t i = 0; mine && i < res->n; i++)
                if (dm_principal_covers(principal, res->claims[i].principal))
                        mine[n++] = res->claims[i];
        pthread_mutex_unlock(&res->lock);
        for (size_t i = 0; i < n; i++)
                for (size_t j = i + 1; j < n; j++)
                        if (mine[j].seq > mine[i].seq) {
                                struct claim t = mine[i];
                                mine[i] = mine[j];
                                mine[j] = t;
                        }
        for (size_t i = 0; i < n && json_object_array_length(a) < DM_RESOURCE_LIST_MAX; i++) {
                struct walk w = { 0 };

                if (walk_output(output_root, mine[i].dir, DM_RESOURCE_LIST_MAX - json_object_array_length(a), &w) ==
                    0) {
                        qsort(w.v, w.n, sizeof(*w.v), cmp_found);
                        for (size_t k = 0; k < w.n; k++) {
                                json_object_array_add(a, describe(mine[i].dir, &w.v[k], NULL));
                        }
                }
                walk_release(&w);
        }
        free(mine);
        return a;
}

json_object *dm_resources_templates(void)
{
        json_object *a = json_object_new_array(), *t = json_object_new_object();

        json_object_object_add(t, "uriTemplate", json_object_new_string(DM_RESOURCE_SCHEME "{dir}/{+path}"));
        json_object_object_add(t, "name", json_object_new_string("output"));
        json_object_object_add(t, "title", json_object_new_string("A file a sandbox wrote"));
        json_object_object_add(
                t, "description",
                json_object_new_string("A file below a run's or a sandbox's output directory: dir is its name "
                                       "(run-..., sbx-...: run_id or sandbox_id in the tool result), path the file's "
                                       "path in /out. Readable by the client (token) whose call made it, up to 4 MiB; "
                                       "tool results link to these files (resource_link)."));
        json_object_array_add(a, t);
        return a;
}

int dm_resources_read(struct dm_resources *res, const char *output_root, const char *principal, const char *uri,
                      json_object **ret, struct dm_error *err)
{
        _cleanup_free_ char *buf = NULL, *data = NULL;
        _cleanup_close_ int rootfd = -1;
        const char *dir, *path;
        size_t len = 0;
        json_object *c;
        int r;

        r = parse_uri(uri, &buf, &dir, &path);
        if (r == -ENOMEM)
                return dm_error_set(err, r, "out of memory");
        if (r < 0)
                return dm_error_set(err, -EINVAL,
                                    "'%.200s' is not a resource of this server: its URIs are " DM_RESOURCE_SCHEME
                                    "<dir>/<path> (resources/templates/list)",
                                    uri);
        /* Another principal's file answers exactly as a missing one. */
        if (!dm_resources_owned(res, dir, principal))
                return dm_error_set(err, -ENOENT, "resource '%.200s' not found", uri);
        rootfd = dm_io_open_dir(output_root);
        if (rootfd < 0)
                return dm_error_set(err, -ENOENT, "resource '%.200s' not found", uri);
        {
                char rel[4096];

                if ((size_t)snprintf(rel, sizeof(rel), "%s/%s", dir, path) >= sizeof(rel))
                        return dm_error_set(err, -EINVAL, "resource path too long");
                r = dm_io_read_capped(rootfd, rel, DM_RESOURCE_READ_MAX, &data, &len);
        }
        if (r == -EFBIG)
                return dm_error_set(err, -EFBIG,
                                    "resource '%.200s' is over %zu MiB: fetch it with sandbox_download, or split it "
                                    "in the sandbox",
                                    uri, DM_RESOURCE_READ_MAX >> 20);
        if (r == -ENOMEM)
                return dm_error_set(err, r, "out of memory");
        if (r < 0)
                return dm_error_set(err, -ENOENT, "resource '%.200s' not found", uri);

        c = json_object_new_object();
        json_object_object_add(c, "uri", json_object_new_string(uri));
        if (memchr(data, '\0', len) == NULL && dm_utf8_valid(data, len)) {
                const char *type = dm_mime_type(path);
                json_object_object_add(
                        c, "mimeType",
                        json_object_new_string(strcmp(type, "application/octet-stream") == 0 ? "text/plain" : type));
                json_object_object_add(c, "text", json_object_new_string_len(data, (int)len));
        } else {
                _cleanup_free_ char *b64 = dm_base64_encode(data, len);
                if (!b64) {
                        json_object_put(c);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                json_object_object_add(c, "mimeType", json_object_new_string(dm_mime_type(path)));
                json_object_object_add(c, "blob", json_object_new_string(b64));
        }
        *ret = json_object_new_array();
        json_object_array_add(*ret, c);
        return 0;
}
