/* SPDX-License-Identifier: MIT */
#ifndef DM_SANDBOX_INTERNAL_H
#define DM_SANDBOX_INTERNAL_H

/* What sandbox.c and its records (sandbox-record.c) share. */

#include <stdbool.h>

#include "src/core/sandbox.h"

/* "sbx-" and 12 lowercase hex digits. */
bool dm_sandbox_valid_id(const char *id);
/* Writes sb's record (whole, then renamed over the old one). */
int dm_sandbox_record_write(struct dm_context *ctx, const struct dm_sandbox *sb, struct dm_error *err);
/* Reads sandbox id's record: -ENOENT for an unknown or malformed id (the
 * message says what ids look like), -EIO for a damaged record. */
int dm_sandbox_record_read(struct dm_context *ctx, const char *id, struct dm_sandbox *sb, struct dm_error *err);
/* The sandbox is gone: its record, and the admission slot bound to it. */
void dm_sandbox_record_remove(struct dm_context *ctx, const char *id);
/* Calls fn for each record in the directory (none made when missing). */
void dm_sandbox_record_each(struct dm_context *ctx, void (*fn)(struct dm_context *, const char *, void *), void *ud);

#endif
