/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_PATHS_H
#define DM_UTIL_PATHS_H

/* Host path checks for everything a caller asks to mount or upload. In the
 * order TOOLS.md gives: non-empty, absolute, symlinks resolved, inside one of
 * the allowed roots (resolved too), exists, right kind, basenames unique.
 * Each failure has its own message naming the path. */

#include <stdbool.h>
#include <stddef.h>

#include "src/util/error.h"

enum dm_path_kind {
        DM_PATH_FILE,
        DM_PATH_DIR,
};

struct dm_allowed_roots {
        char **roots;   /* owned, resolved absolute paths */
        size_t n;
};

/* Parses a colon-separated list (DEMESNE_ALLOWED_PATHS). Entries that are
 * empty are ignored; entries that do not exist are kept out with a warning;
 * relative entries are an error. An empty result allows nothing. */
int dm_allowed_roots_parse(const char *spec, struct dm_allowed_roots *ret, struct dm_error *err);
void dm_allowed_roots_release(struct dm_allowed_roots *r);

/* Checks one path. On success *ret_resolved is the malloc'd resolved path. */
int dm_path_check(const struct dm_allowed_roots *roots, const char *path, enum dm_path_kind kind,
                  char **ret_resolved, struct dm_error *err);

/* True when path equals root or lies below it (both resolved, absolute). */
bool dm_path_is_under(const char *path, const char *root);

/* The last component of an absolute resolved path ("/" has none: NULL). */
const char *dm_path_basename(const char *path);

/* mkdir -p with mode; fails when a component exists and is not a directory.
 * Only for host-owned locations (never inside a container-writable one). */
int dm_mkdir_p(const char *path, unsigned mode, struct dm_error *err);

#endif
