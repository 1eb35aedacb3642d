/* SPDX-License-Identifier: MIT */
#ifndef DM_SNAPSHOT_INTERNAL_H
#define DM_SNAPSHOT_INTERNAL_H

/* What snapshot.c and snapshot-archive.c share. */

#include "src/basic/error.h"

/* Reads the engine's tar of /workspace from in_fd and writes to out_fd the
 * same files relative to /workspace, each owned by 0:0 with the setuid,
 * setgid and sticky bits cleared; hard links out of it are left out. The
 * number of entries written (0: /workspace was empty), or -EIO with a
 * sentence on a malformed archive or a failed write. */
int dm_snapshot_archive_normalize(int in_fd, int out_fd, struct dm_error *err);

#endif
