/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_IO_H
#define DM_UTIL_IO_H

#include <stddef.h>

/* Writes all n bytes, retrying on EINTR and short writes. 0 or -errno. */
int dm_write_all(int fd, const void *data, size_t n);

#endif
