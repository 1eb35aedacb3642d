/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_BUF_H
#define DM_UTIL_BUF_H

/* A growable byte buffer with a hard cap, for everything read from outside
 * (MCP input, engine responses). The data is always NUL-terminated one past
 * len so it can be handed to parsers that want C strings. */

#include <stddef.h>

struct dm_buf {
        char *data; /* owned; NULL until the first append */
        size_t len;
        size_t alloc;
        size_t max; /* appends past this fail with -E2BIG */
};

void dm_buf_init(struct dm_buf *b, size_t max);
/* 0, -E2BIG when len + n would exceed max (nothing appended), -ENOMEM. */
int dm_buf_append(struct dm_buf *b, const void *p, size_t n);
int dm_buf_printf(struct dm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends the strings of a NULL-terminated list with sep between them. */
int dm_buf_join(struct dm_buf *b, const char *const *strv, const char *sep);
void dm_buf_reset(struct dm_buf *b);
/* Hands the data to the caller (never NULL on success: "" for empty). */
char *dm_buf_steal(struct dm_buf *b);
void dm_buf_release(struct dm_buf *b);

#endif
