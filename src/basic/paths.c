/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/paths.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/log.h"

const char *const dm_credential_dirs[] = {
        ".claude", ".codex", ".ssh", ".aws", ".config/gcloud", ".docker", ".kube", ".gnupg", NULL,
};

void dm_allowed_roots_release(struct dm_allowed_roots *r)
{
        for (size_t i = 0; i < r->n; i++)
                free(r->roots[i]);
        free(r->roots);
        for (size_t i = 0; i < r->n_forbidden; i++)
                free(r->forbidden[i]);
        free(r->forbidden);
        free(r->forbidden_var);
        for (size_t i = 0; i < r->n_credentials; i++)
                free(r->credentials[i]);
        free(r->credentials);
        memset(r, 0, sizeof(*r));
}

static int strv_push(char ***v, size_t *n, const char *s)
{
        char **grown = realloc(*v, (*n + 1) * sizeof(**v));

        if (!grown)
                return -ENOMEM;
        *v = grown;
        if (!(grown[*n] = strdup(s)))
                return -ENOMEM;
        (*n)++;
        return 0;
}

/* Two names of one place: equal as written, or equal once resolved. */
static bool same_place(const char *a, const char *b)
{
        char ra[PATH_MAX], rb[PATH_MAX];

        if (strcmp(a, b) == 0)
                return true;
        return realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

static bool credential_allowed(const char *dir, const char *allow)
{
        _cleanup_free_ char *copy = allow ? strdup(allow) : NULL;
        char *save = NULL;

        for (char *t = copy ? strtok_r(copy, ":", &save) : NULL; t; t = strtok_r(NULL, ":", &save))
                if (same_place(t, dir))
                        return true;
        return false;
}

int dm_allowed_roots_protect(struct dm_allowed_roots *r, const char *const *forbidden, const char *home,
                             const char *allow_credentials, struct dm_error *err)
{
        _cleanup_free_ char *copy = allow_credentials ? strdup(allow_credentials) : NULL;
        char *save = NULL;

        for (char *t = copy ? strtok_r(copy, ":", &save) : NULL; t; t = strtok_r(NULL, ":", &save))
                if (t[0] != '/')
                        return dm_error_set(err, -EINVAL,
                                            "DEMESNE_ALLOW_CREDENTIAL_PATHS entry '%s' is not an absolute path", t);
        for (size_t i = 0; forbidden && forbidden[i] && forbidden[i + 1]; i += 2) {
                const char **grown = realloc(r->forbidden_var, (r->n_forbidden + 1) * sizeof(*grown));

                if (!grown)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                r->forbidden_var = grown;
                grown[r->n_forbidden] = forbidden[i + 1];
                if (strv_push(&r->forbidden, &r->n_forbidden, forbidden[i]) < 0)
                        return dm_error_set(err, -ENOMEM, "out of memory");
        }
        for (size_t i = 0; home && home[0] == '/' && dm_credential_dirs[i]; i++) {
                char dir[PATH_MAX];

                snprintf(dir, sizeof(dir), "%s/%s", strcmp(home, "/") ? home : "", dm_credential_dirs[i]);
                if (credential_allowed(dir, allow_credentials))
                        continue;
                if (strv_push(&r->credentials, &r->n_credentials, dir) < 0)
                        return dm_error_set(err, -ENOMEM, "out of memory");
        }
        return 0;
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
                        return dm_error_set(err, -EINVAL, "DEMESNE_ALLOWED_PATHS entry '%s' is not an absolute path",
                                            tok);
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

int dm_path_check(const struct dm_allowed_roots *roots, const char *path, enum dm_path_kind kind, char **ret_resolved,
                  struct dm_error *err)
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
                                            "path '%s' resolves to '%s', which is outside DEMESNE_ALLOWED_PATHS", path,
                                            resolved);
                return dm_error_set(err, -EACCES,
                                    "path '%s' is outside DEMESNE_ALLOWED_PATHS (add its folder to that variable)",
                                    path);
        }
        if (stat(resolved, &st) < 0)
                return dm_error_set(err, -errno, "path '%s' cannot be read: %s", path, strerror(errno));
        if (kind == DM_PATH_FILE && !S_ISREG(st.st_mode))
                return dm_error_set(err, -EINVAL, "path '%s' is not a regular file (use directories for folders)",
                                    path);
        if (kind == DM_PATH_DIR && !S_ISDIR(st.st_mode))
                return dm_error_set(err, -ENOTDIR, "path '%s' is not a directory (use files for single files)", path);
        if (!dm_path_basename(resolved))
                return dm_error_set(err, -EINVAL, "path '%s' has no name to mount it under in /in", path);
        *ret_resolved = strdup(resolved);
        if (!*ret_resolved)
                return dm_error_set(err, -ENOMEM, "out of memory");
        return 0;
}

/* Opens resolved (absolute, no links, no "." or "..") from / one component
 * at a time, O_PATH|O_NOFOLLOW, and fails if any directory on the way, or
 * the end, is one of the n places in dev/ino (*ret_hit is its index). */
static int walk(const char *resolved, const dev_t *dev, const ino_t *ino, size_t n, int *ret_fd, size_t *ret_hit)
{
        _cleanup_close_ int cur = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        const char *p = resolved;

        *ret_hit = SIZE_MAX;
        if (cur < 0)
                return -errno;
        for (;;) {
                char name[NAME_MAX + 1];
                struct stat st;
                size_t len;
                int next;

                if (fstat(cur, &st) < 0)
                        return -errno;
                for (size_t i = 0; i < n; i++)
                        if (st.st_dev == dev[i] && st.st_ino == ino[i]) {
                                *ret_hit = i;
                                return -EACCES;
                        }
                while (*p == '/')
                        p++;
                if (!*p)
                        break;
                if (!S_ISDIR(st.st_mode))
                        return -ENOTDIR;
                len = strcspn(p, "/");
                if (len > NAME_MAX)
                        return -ENAMETOOLONG;
                memcpy(name, p, len);
                name[len] = '\0';
                p += len;
                next = openat(cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
                if (next < 0)
                        return -errno;
                close(cur);
                cur = next;
                if (fstat(cur, &st) < 0)
                        return -errno;
                /* Resolved a moment ago without links: one now is a swap. */
                if (S_ISLNK(st.st_mode))
                        return -ELOOP;
        }
        *ret_fd = TAKE_FD(cur);
        return 0;
}

static int protected_check(const struct dm_allowed_roots *roots, const char *path, const char *resolved,
                           enum dm_path_kind kind, struct dm_error *err)
{
        for (size_t i = 0; i < roots->n_credentials; i++) {
                char rc[PATH_MAX];
                struct stat st;
                const char *c = realpath(roots->credentials[i], rc) ? rc : roots->credentials[i];

                if (dm_path_is_under(resolved, c))
                        return dm_error_set(err, -EACCES,
                                            "path '%s' is inside the credential folder '%s', which is never mounted "
                                            "(name that folder in DEMESNE_ALLOW_CREDENTIAL_PATHS to allow it)",
                                            path, roots->credentials[i]);
                if (kind == DM_PATH_DIR && dm_path_is_under(c, resolved) && lstat(c, &st) == 0)
                        return dm_error_set(err, -EACCES,
                                            "directory '%s' contains the credential folder '%s': give a folder "
                                            "that does not contain it, or name '%s' in "
                                            "DEMESNE_ALLOW_CREDENTIAL_PATHS",
                                            path, roots->credentials[i], roots->credentials[i]);
        }
        return 0;
}

int dm_path_open(const struct dm_allowed_roots *roots, const char *path, enum dm_path_kind kind, char **ret_resolved,
                 int *ret_fd, struct dm_error *err)
{
        _cleanup_free_ char *resolved = NULL;
        _cleanup_free_ dev_t *dev = NULL;
        _cleanup_free_ ino_t *ino = NULL;
        _cleanup_free_ size_t *which = NULL;
        _cleanup_close_ int fd = -1;
        size_t n = 0, hit;
        struct stat st;
        int r;

        /* Named through a forbidden tree: refused by that name, whatever
         * the sandbox there makes it resolve to at this moment. */
        for (size_t i = 0; path && path[0] == '/' && i < roots->n_forbidden; i++) {
                char rf[PATH_MAX];

                if (dm_path_is_under(path, roots->forbidden[i]) ||
                    (realpath(roots->forbidden[i], rf) && dm_path_is_under(path, rf)))
                        return dm_error_set(err, -EACCES,
                                            "path '%s' is inside '%s' (%s), where sandboxes write: inputs must "
                                            "come from elsewhere",
                                            path, roots->forbidden[i], roots->forbidden_var[i]);
        }
        r = dm_path_check(roots, path, kind, &resolved, err);
        if (r < 0)
                return r;
        r = protected_check(roots, path, resolved, kind, err);
        if (r < 0)
                return r;
        dev = calloc(roots->n_forbidden + 1, sizeof(*dev));
        ino = calloc(roots->n_forbidden + 1, sizeof(*ino));
        which = calloc(roots->n_forbidden + 1, sizeof(*which));
        if (!dev || !ino || !which)
                return dm_error_set(err, -ENOMEM, "out of memory");
        /* The trees as they are now (one not made yet holds nothing). */
        for (size_t i = 0; i < roots->n_forbidden; i++)
                if (stat(roots->forbidden[i], &st) == 0) {
                        dev[n] = st.st_dev;
                        ino[n] = st.st_ino;
                        which[n++] = i;
                }
        r = walk(resolved, dev, ino, n, &fd, &hit);
        if (r == -EACCES && hit != SIZE_MAX)
                return dm_error_set(err, -EACCES,
                                    "path '%s' is inside '%s' (%s), where sandboxes write: inputs must come from "
                                    "elsewhere",
                                    path, roots->forbidden[which[hit]], roots->forbidden_var[which[hit]]);
        if (r == -ELOOP)
                return dm_error_set(err, -ELOOP, "path '%s' changed while it was checked (a link appeared in it)",
                                    path);
        if (r < 0)
                return dm_error_set(err, r, "path '%s' cannot be opened: %s", path, strerror(-r));
        if (fstat(fd, &st) < 0)
                return dm_error_set(err, -errno, "path '%s': %s", path, strerror(errno));
        if (kind == DM_PATH_FILE ? !S_ISREG(st.st_mode) : !S_ISDIR(st.st_mode))
                return dm_error_set(err, -EINVAL, "path '%s' changed while it was checked", path);
        *ret_resolved = TAKE_PTR(resolved);
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int dm_allowed_roots_widen(const struct dm_allowed_roots *r, const char *const *extra, struct dm_allowed_roots *ret)
{
        size_t n = 0;

        while (extra && extra[n])
                n++;
        *ret = *r;
        ret->roots = calloc(r->n + n + 1, sizeof(*ret->roots));
        if (!ret->roots)
                return -ENOMEM;
        for (size_t i = 0; i < r->n; i++)
                ret->roots[i] = r->roots[i];
        for (size_t i = 0; i < n; i++)
                ret->roots[r->n + i] = (char *)extra[i];
        ret->n = r->n + n;
        return 0;
}

int dm_path_outside_only(const struct dm_allowed_roots *roots, const char *path, enum dm_path_kind kind,
                         char **ret_resolved)
{
        char resolved[PATH_MAX];
        _cleanup_free_ char *checked = NULL;
        struct dm_allowed_roots widened;
        struct dm_error e = { 0 };
        int fd, r;

        if (dm_path_check(roots, path, kind, &checked, &e) == 0 || e.code != -EACCES || !realpath(path, resolved))
                return 0;
        for (size_t i = 0; i < roots->n; i++)
                if (dm_path_is_under(resolved, roots->roots[i]))
                        return 0;
        if (dm_allowed_roots_widen(roots, (const char *const[]){ resolved, NULL }, &widened) < 0)
                return 0;
        r = dm_path_open(&widened, path, kind, &checked, &fd, &e);
        free(widened.roots);
        if (r < 0)
                return 0;
        close(fd);
        /* The path as it resolved when it was opened: what a question names
         * is what the claim will find (or it refuses). */
        *ret_resolved = TAKE_PTR(checked);
        return 1;
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
