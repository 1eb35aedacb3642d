/* SPDX-License-Identifier: MIT */
#ifndef DM_TRANSFER_H
#define DM_TRANSFER_H

/* Files into and out of a persistent sandbox, through the engine's archive
 * API. Host paths are checked like mounts; sandbox paths are resolved inside
 * the sandbox only; the host never follows a path inside the output
 * directory (which the sandbox can write): downloads are written through a
 * directory fd with O_NOFOLLOW|O_EXCL. */

#include <stdint.h>

#include "src/core/sandbox.h"

#define DM_TRANSFER_MAX_DEFAULT (1LL << 30)

/* Copies host file src to absolute path dst inside the sandbox (its folder
 * is made when missing). *ret_bytes gets the file's size. granted
 * (NULL-terminated, may be NULL): resolved paths outside the allowed roots
 * that the person at the client allowed for this call (dm_inputs_add's),
 * src still opened one component at a time against them. */
int dm_transfer_upload(struct dm_context *ctx, const struct dm_sandbox *sb, const char *src, const char *const *granted,
                       const char *dst, int64_t max_bytes, int64_t *ret_bytes, struct dm_error *err);

/* The same with the file's bytes given (a client with no disk in common
 * with the server): the file is made 0644. */
int dm_transfer_upload_bytes(struct dm_context *ctx, const struct dm_sandbox *sb, const void *data, size_t len,
                             const char *dst, int64_t max_bytes, int64_t *ret_bytes, struct dm_error *err);

/* Copies regular file src inside the sandbox (symlinks resolved in there)
 * to <output_dir>/downloads/<basename>, replacing a file of that name.
 * *ret_host_path (malloc'd) and *ret_bytes say where and how much. */
int dm_transfer_download(struct dm_context *ctx, const struct dm_sandbox *sb, const char *src, int64_t max_bytes,
                         char **ret_host_path, int64_t *ret_bytes, struct dm_error *err);

#endif
