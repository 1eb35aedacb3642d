/* SPDX-License-Identifier: MIT */
#ifndef DM_INPUTS_H
#define DM_INPUTS_H

/* Host inputs (files, directories) from check to mount with no window in
 * between. Each path is checked and opened (dm_path_open); the engine then
 * gets a path it cannot be tricked through: when the server may mount
 * (root), a bind mount of the opened fd at <state dir>/mnt/<owner>.<n>/<k>,
 * a tree only the server writes, made private and removed once the
 * container has started (its mount namespace keeps its own copy); without
 * that privilege, the resolved path, which no sandbox can change (inputs
 * under the output root or the state dir are refused). */

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "src/core/context.h"
#include "src/basic/error.h"
#include "src/basic/paths.h"

/* Maximum inputs of one call (files + directories, 64 each). */
#define DM_INPUTS_MAX 128

struct dm_inputs_stage {
        char dir[PATH_MAX - 64]; /* "" until the first staged mount */
        int fds[DM_INPUTS_MAX];  /* the checked inputs, O_PATH */
        size_t n;
};

/* Checks host inputs (TOOLS.md's order, and dm_path_open's refusals) and
 * appends one read-only mount per input at /in/<basename> to mounts[*n];
 * basenames must not collide with mounts already there. The strings it
 * allocates go to owned[*n_owned] (room for three per input), for the caller
 * to free; the fds and staged mounts go to stage (zeroed by the caller), for
 * dm_inputs_unstage once the container has started (or failed to).
 * granted (NULL-terminated, may be NULL): resolved paths outside
 * DEMESNE_ALLOWED_PATHS that the person at the client allowed for this
 * call alone (src/tools/request.c), accepted as roots of their own; every
 * other check (forbidden trees, credential folders) still holds. */
int dm_inputs_add(const struct dm_context *ctx, const char *const *paths, enum dm_path_kind kind,
                  const char *const *granted, struct dm_mount *mounts, size_t *n, char **owned, size_t *n_owned,
                  struct dm_inputs_stage *stage, struct dm_error *err);

/* Unmounts and removes the staged mounts and closes the fds. Idempotent. */
void dm_inputs_unstage(struct dm_inputs_stage *stage);

/* Removes staged mounts that servers which are gone left behind. */
void dm_inputs_sweep(struct dm_context *ctx);

#endif
