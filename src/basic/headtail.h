/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_HEADTAIL_H
#define DM_UTIL_HEADTAIL_H

/* Keeps the first and last bytes of an unbounded stream in fixed memory, so a
 * command that prints 50 MB costs the server `limit` bytes per stream. The
 * whole stream goes to a file elsewhere; this is what a tool result shows. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DM_HEADTAIL_DEFAULT_LIMIT (64 * 1024)

struct dm_headtail {
        size_t limit;    /* bytes kept at most: head + tail */
        size_t head_max; /* limit / 2 */
        size_t tail_max; /* limit - head_max */
        char *head;      /* owned, head_max bytes */
        size_t head_len;
        char *tail;      /* owned ring of tail_max bytes */
        size_t tail_pos; /* next write position in the ring */
        size_t tail_len; /* bytes valid in the ring (<= tail_max) */
        uint64_t total;  /* bytes fed in all */
};

/* 0 or -ENOMEM. limit must be >= 2. */
int dm_headtail_init(struct dm_headtail *ht, size_t limit);
void dm_headtail_feed(struct dm_headtail *ht, const void *p, size_t n);
/* Returns a malloc'd NUL-terminated string: the whole stream when it fit,
 * else head + a marker line + tail, both cut on UTF-8 character boundaries so
 * the result is valid UTF-8 wherever the input was. *ret_truncated tells which.
 * Invalid UTF-8 in the input is kept as is (JSON encoding escapes it later).
 * *ret_len (may be NULL) gets the length: the text may hold NUL bytes.
 * NULL on ENOMEM. The struct stays usable. */
char *dm_headtail_finish(const struct dm_headtail *ht, size_t *ret_len, bool *ret_truncated);
void dm_headtail_release(struct dm_headtail *ht);

#endif
