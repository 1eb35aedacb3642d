/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/util/paths.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "src/util/cleanup.h"
#include "src/util/log.h"

void dm_allowed_roots_release(struct dm_allowed_roots *r)
{
        for (size_t i = 0; i < r->n; i++)
                free(r->roots[i]);
        free(r->roots);
        r->roots = NULL;
        r->n = 0;
}

int dm_allowed_roots_parse(const char *spec, struct dm_allowed_roots *ret, struct dm_error *err)
{
        struct dm_allowed_roots r = { 0 };
        _cleanup_free_ char *copy = NULL;
        char *save = NULL, *tok;

        if (!spec || !*spec) {
                *ret = r;
                return 0;
        }
        copy = strdup(spec);
        if (!copy)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (tok = strtok_r(copy, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
                char resolved[PATH_MAX];
                char **grown;

                if (tok[0] != '/') {
                        dm_allowed_roots_release(&r);
                        return dm_error_set(err, -EINVAL,
                                            "DEMESNE_ALLOWED_PATHS entry '%s' is not an absolute path", tok);
                }
                if (!realpath(tok, resolved)) {
                        log_warning("allowed path '%s' ignored: %s", tok, strerror(errno));
                        continue;
                }
                grown = realloc(r.roots, (r.n + 1) * sizeof(*r.roots));
                if (!grown || !(grown[r.n] = strdup(resolved))) {
                        if (grown)
                                r.roots = grown;
                        dm_allowed_roots_release(&r);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                r.roots = grown;
                r.n++;
        }
        *ret = r;
        return 0;
}

bool dm_path_is_under(const char *path, const char *root)
{
        size_t n = strlen(root);

        if (n == 1 && root[0] == '/')
                return path[0] == '/';
        if (strncmp(path, root, n) != 0)
                return false;
        return path[n] == '\0' || path[n] == '/';
}

const char *dm_path_basename(const char *path)
{
        const char *slash = strrchr(path, '/');

        if (!slash || slash[1] == '\0')
                return NULL;
        return slash + 1;
}

int dm_path_check(const struct dm_allowed_roots *roots, const char *path, enum dm_path_kind kind,
                  char **ret_resolved, struct dm_error *err)
{
        char resolved[PATH_MAX];
        struct stat st;
        bool inside = false;

        if (!path || !*path)
                return dm_error_set(err, -EINVAL, "empty path: give an absolute host path");
        if (path[0] != '/')
                return dm_error_set(err, -EINVAL, "path '%s' is not absolute: give an absolute host path", path);
        if (strlen(path) >= PATH_MAX)
                return dm_error_set(err, -ENAMETOOLONG, "path is longer than %d bytes", PATH_MAX - 1);
        if (!realpath(path, resolved)) {
                if (errno == ENOENT || errno == ENOTDIR)
                        return dm_error_set(err, -ENOENT, "path '%s' does not exist", path);
                return dm_error_set(err, -errno, "path '%s' cannot be resolved: %s", path, strerror(errno));
        }
        for (size_t i = 0; roots && i < roots->n; i++)
                if (dm_path_is_under(resolved, roots->roots[i])) {
                        inside = true;
                        break;
                }
        if (!inside) {
                if (strcmp(resolved, path) != 0)
                        return dm_error_set(err, -EACCES,
                                            "path '%s' resolves to '%s', which is outside DEMESNE_ALLOWED_PATHS",
                                            path, resolved);
                return dm_error_set(err, -EACCES,
                                    "path '%s' is outside DEMESNE_ALLOWED_PATHS (add its folder to that variable)",
                                    path);
        }
        if (stat(resolved, &st) < 0)
                return dm_error_set(err, -errno, "path '%s' cannot be read: %s", path, strerror(errno));
        if (kind == DM_PATH_FILE && !S_ISREG(st.st_mode))
                return dm_error_set(err, -EINVAL, "path '%s' is not a regular file (use directories for folders)", path);
        if (kind == DM_PATH_DIR && !S_ISDIR(st.st_mode))
                return dm_error_set(err, -ENOTDIR, "path '%s' is not a directory (use files for single files)", path);
        if (!dm_path_basename(resolved))
                return dm_error_set(err, -EINVAL, "path '%s' has no name to mount it under in /in", path);
        *ret_resolved = strdup(resolved);
        if (!*ret_resolved)
                return dm_error_set(err, -ENOMEM, "out of memory");
        return 0;
}

int dm_mkdir_p(const char *path, unsigned mode, struct dm_error *err)
{
        char buf[PATH_MAX];
        size_t n = strlen(path);

        if (n == 0 || n >= sizeof(buf))
                return dm_error_set(err, -EINVAL, "bad directory path '%s'", path);
        memcpy(buf, path, n + 1);
        for (char *p = buf + 1;; p++) {
                if (*p == '/' || *p == '\0') {
                        char saved = *p;
                        struct stat st;

                        *p = '\0';
                        if (mkdir(buf, mode) < 0 && errno != EEXIST)
                                return dm_error_set(err, -errno, "cannot create directory '%s': %s", buf,
                                                    strerror(errno));
                        /* stat, not lstat: the output root is the user's to place,
                         * symlinked or not; containers never see the levels made here. */
                        if (stat(buf, &st) < 0)
                                return dm_error_set(err, -errno, "cannot read '%s': %s", buf, strerror(errno));
                        if (!S_ISDIR(st.st_mode))
                                return dm_error_set(err, -ENOTDIR, "'%s' is not a directory", buf);
                        *p = saved;
                        if (saved == '\0')
                                break;
                }
        }
        return 0;
}
