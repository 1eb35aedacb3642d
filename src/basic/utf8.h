/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_UTF8_H
#define DM_UTIL_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Returns a malloc'd NUL-terminated copy of s[0..len) in which every invalid
 * UTF-8 sequence (and NUL) is replaced by U+FFFD, so command output can go
 * into a JSON string that every client parses. *ret_len gets the new length.
 * NULL on ENOMEM. */
char *dm_utf8_sanitize(const char *s, size_t len, size_t *ret_len);

bool dm_utf8_valid(const char *s, size_t len);

#endif
