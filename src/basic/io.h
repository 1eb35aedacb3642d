/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_IO_H
#define DM_UTIL_IO_H

/* Writes, and the one way the host opens anything in a place a container
 * can write (its /out, its /workspace): relative to a directory fd the
 * server opened, never through a link, never blocking on a FIFO or device,
 * only a regular file (or a directory when asked), read with a size cap. */

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Writes all n bytes, retrying on EINTR and short writes. 0 or -errno. */
int dm_write_all(int fd, const void *data, size_t n);

/* Opens path below dirfd: relative, no "..", no symlink anywhere on the
 * way or at the end (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
 * RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV), O_NONBLOCK|O_NOCTTY|O_CLOEXEC
 * always, then fstat: a regular file, or a directory when flags has
 * O_DIRECTORY. O_TRUNC is applied only after that check. O_NONBLOCK is
 * cleared again on the returned fd. Returns the fd or -errno: -ELOOP for a
 * link, -EXDEV for an escape or a mount crossing, -ENXIO for a FIFO nobody
 * reads, -DM_IO_EBADTYPE for anything that is not the asked kind. */
#define DM_IO_EBADTYPE EMEDIUMTYPE
int dm_io_open_beneath(int dirfd, const char *path, int flags, mode_t mode);

/* A directory the server owns, by absolute path (its components are not
 * container-writable): O_DIRECTORY|O_NOFOLLOW on the last one. fd or -errno. */
int dm_io_open_dir(const char *path);

/* The directory of an absolute path (dm_io_open_dir), and in *ret_base its
 * last component, to open beneath it. fd or -errno. */
int dm_io_open_parent(const char *path, const char **ret_base);

/* Reads the regular file path below dirfd (dm_io_open_beneath) whole into a
 * malloc'd NUL-terminated buffer; more than max bytes: -EFBIG. */
int dm_io_read_capped(int dirfd, const char *path, size_t max, char **ret, size_t *ret_len);

/* Calls fn for each regular file below the directory fd (not taken), depth
 * first, with its path relative to fd and its lstat. Symlinks, FIFOs and
 * devices are skipped; directories are entered without following a link
 * (O_NOFOLLOW, O_NONBLOCK), down to max_depth levels. Names starting with
 * '.' are skipped when skip_hidden. fn returning < 0 stops the walk with
 * that value; otherwise 0, or -errno when fd cannot be read. */
struct stat;
int dm_io_walk_files(int fd, int max_depth, bool skip_hidden,
                     int (*fn)(void *userdata, const char *path, const struct stat *st), void *userdata);

/* Calls fn for each '\n'-terminated line of fd (the last one may lack it),
 * NUL-terminated, without the newline. Lines longer than max_line are
 * skipped whole; reading stops after max_total bytes. Memory stays below
 * max_line. fn returning < 0 stops with that value. 0 or -errno. */
int dm_io_for_each_line(int fd, size_t max_line, uint64_t max_total, int (*fn)(void *userdata, char *line, size_t len),
                        void *userdata);

/* Replaces dst below dirfd atomically with data: written to a fresh,
 * randomly named temporary file beside it (O_EXCL, so a planted link or FIFO
 * is never opened), then renamed over dst (a link at dst is replaced, not
 * followed). 0 or -errno. */
int dm_io_replace(int dirfd, const char *dst, const void *data, size_t len, mode_t mode);

/* A few words for the errors above ("a symbolic link ...", "not a regular
 * file", ...), else strerror, for messages. */
const char *dm_io_strerror(int r);

#endif
