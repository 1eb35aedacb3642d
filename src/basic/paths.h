/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_PATHS_H
#define DM_UTIL_PATHS_H

/* Host path checks for everything a caller asks to mount or upload. In the
 * order TOOLS.md gives: non-empty, absolute, symlinks resolved, inside one of
 * the allowed roots (resolved too), exists, right kind, basenames unique.
 * Each failure has its own message naming the path. */

#include <stdbool.h>
#include <stddef.h>

#include "src/basic/error.h"

enum dm_path_kind {
        DM_PATH_FILE,
        DM_PATH_DIR,
};

struct dm_allowed_roots {
        char **roots; /* owned, resolved absolute paths */
        size_t n;
        /* Refused even inside a root (dm_allowed_roots_protect): */
        char **forbidden;           /* the output root and state dir, as configured */
        const char **forbidden_var; /* the variable that names each */
        size_t n_forbidden;
        char **credentials; /* credential folders, absolute, as configured */
        size_t n_credentials;
};

/* The credential folders under a home directory that are never mounted
 * unless named in DEMESNE_ALLOW_CREDENTIAL_PATHS. NULL-terminated. */
extern const char *const dm_credential_dirs[];

/* Adds what a path check refuses inside the allowed roots: the trees named
 * in forbidden[] (NULL-terminated pairs of path and variable name: the
 * output root and the state directory, which sandboxes write), and the
 * credential folders under home, less those named (colon-separated,
 * absolute) in allow_credentials. 0 or -errno (-EINVAL names the entry). */
int dm_allowed_roots_protect(struct dm_allowed_roots *r, const char *const *forbidden, const char *home,
                             const char *allow_credentials, struct dm_error *err);

/* Parses a colon-separated list (DEMESNE_ALLOWED_PATHS). Entries that are
 * empty are ignored; entries that do not exist are kept out with a warning;
 * relative entries are an error. An empty result allows nothing. */
int dm_allowed_roots_parse(const char *spec, struct dm_allowed_roots *ret, struct dm_error *err);
void dm_allowed_roots_release(struct dm_allowed_roots *r);

/* Checks one path. On success *ret_resolved is the malloc'd resolved path. */
int dm_path_check(const struct dm_allowed_roots *roots, const char *path, enum dm_path_kind kind, char **ret_resolved,
                  struct dm_error *err);

/* dm_path_check, and the checked file or directory itself: *ret_fd is an
 * O_PATH fd reached from / one component at a time with O_NOFOLLOW (a
 * component that turned into a link since it was resolved is an error), so
 * whoever uses the fd uses exactly what was checked. Also refuses what
 * dm_allowed_roots_protect added: a path whose directory chain passes
 * through a forbidden tree (compared by device and inode, so another name
 * for the same tree is caught too), a path inside a credential folder, and
 * a directory that contains one. */
int dm_path_open(const struct dm_allowed_roots *roots, const char *path, enum dm_path_kind kind, char **ret_resolved,
                 int *ret_fd, struct dm_error *err);

/* Whether path is refused for one reason alone: it resolves outside the
 * allowed roots, and opening it as dm_path_open does with that resolved
 * path as a root would pass every other check (the forbidden trees, the
 * credential folders, its kind). 1 with *ret_resolved (malloc'd, what the
 * path resolves to now: the file a symlink names, never the link), or 0
 * (inside a root, or refused for something else: nothing to ask). */
int dm_path_outside_only(const struct dm_allowed_roots *roots, const char *path, enum dm_path_kind kind,
                         char **ret_resolved);

/* A shallow copy of r whose roots are r's and then extra's (NULL-terminated;
 * borrowed, as r's are): free ret->roots alone, never release ret. */
int dm_allowed_roots_widen(const struct dm_allowed_roots *r, const char *const *extra, struct dm_allowed_roots *ret);

/* True when path equals root or lies below it (both resolved, absolute). */
bool dm_path_is_under(const char *path, const char *root);

/* The last component of an absolute resolved path ("/" has none: NULL). */
const char *dm_path_basename(const char *path);

/* mkdir -p with mode; fails when a component exists and is not a directory.
 * Only for host-owned locations (never inside a container-writable one). */
int dm_mkdir_p(const char *path, unsigned mode, struct dm_error *err);

#endif
