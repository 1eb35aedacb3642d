/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_BASE64_H
#define DM_UTIL_BASE64_H

/* RFC 4648 base64 (the standard alphabet, with padding), binary-safe. */

#include <stddef.h>

/* Strict: padding required, no white space or stray characters. *ret
 * (malloc'd, NUL-terminated for convenience) holds *ret_len bytes, which
 * may include NULs. -EINVAL on bad input, -ENOMEM. */
int dm_base64_decode(const char *in, size_t len, char **ret, size_t *ret_len);

/* The encoding of len bytes, NUL-terminated, malloc'd; NULL when out of
 * memory. */
char *dm_base64_encode(const void *data, size_t len);

#endif
