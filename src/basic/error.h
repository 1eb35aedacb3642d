/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_ERROR_H
#define DM_UTIL_ERROR_H

/* An error travels up the stack in a caller-owned struct: the function that
 * fails fills it (dm_error_set), each caller on the way up may prefix context
 * (dm_error_wrap), and the place that handles it logs or reports it. Functions
 * return 0 or a negative errno; the struct carries the sentence. */

#include <stdarg.h>

#define DM_ERROR_MSG_MAX 1024

struct dm_error {
        int code;                   /* negative errno, 0 when unset */
        char msg[DM_ERROR_MSG_MAX]; /* one line, no trailing period */
};

/* Sets err (may be NULL) and returns code, so callers can `return dm_error_set(...)`.
 * code must be negative; a non-negative value becomes -EIO. */
int dm_error_set(struct dm_error *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Prefixes "context: " to the message already in err and returns err->code
 * (or -EIO when err was never set). */
int dm_error_wrap(struct dm_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void dm_error_clear(struct dm_error *err);

#endif
