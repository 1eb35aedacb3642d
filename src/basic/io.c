/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/basic/cleanup.h"

int dm_write_all(int fd, const void *data, size_t n)
{
        const char *p = data;

        while (n > 0) {
                ssize_t w = write(fd, p, n);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* What openat2 does with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
 * RESOLVE_NO_XDEV, one component at a time with O_NOFOLLOW, for where
 * openat2 is missing (kernels before 5.6, valgrind 3.19, seccomp profiles
 * that never heard of it). -1 with errno, as a syscall. */
static long open_beneath_walk(int dirfd, const char *path, const struct open_how *how)
{
        _cleanup_free_ char *copy = strdup(path);
        _cleanup_close_ int cur = -1;
        char *save = NULL, *part, *next;
        struct stat top, st;
        int at = dirfd, fd;

        if (!copy)
                return errno = ENOMEM, -1;
        if (fstat(dirfd, &top) < 0)
                return -1;
        for (part = strtok_r(copy, "/", &save); part; part = next) {
                next = strtok_r(NULL, "/", &save);
                if (strcmp(part, "..") == 0)
                        return errno = EXDEV, -1;
                if (!next)
                        break;
                if (strcmp(part, ".") == 0)
                        continue;
                fd = openat(at, part, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                /* A link on the way is ELOOP, as openat2 says it. */
                if (fd < 0 && errno == ENOTDIR && fstatat(at, part, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISLNK(st.st_mode))
                        errno = ELOOP;
                if (fd < 0)
                        return -1;
                if (fstat(fd, &st) < 0 || st.st_dev != top.st_dev) {
                        close(fd);
                        return errno = EXDEV, -1;
                }
                if (cur >= 0)
                        close(cur);
                at = cur = fd;
        }
        if (!part)
                return errno = EINVAL, -1;
        fd = openat(at, part, (int)how->flags, (mode_t)how->mode);
        if (fd >= 0 && (fstat(fd, &st) < 0 || st.st_dev != top.st_dev)) {
                close(fd);
                return errno = EXDEV, -1;
        }
        return fd;
}

int dm_io_open_beneath(int dirfd, const char *path, int flags, mode_t mode)
{
        struct open_how how = {
                .flags = (uint64_t)((flags & ~O_TRUNC) | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC),
                .mode = flags & (O_CREAT | O_TMPFILE) ? mode : 0,
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV,
        };
        _cleanup_close_ int fd = -1;
        struct stat st;
        long r;

        if (!path || !*path || path[0] == '/')
                return -EINVAL;
        /* openat2 refuses O_PATH with any flag but these. */
        if (flags & O_PATH)
                how.flags = (uint64_t)(O_PATH | O_NOFOLLOW | O_CLOEXEC | (flags & O_DIRECTORY));
        do
                r = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        while (r < 0 && (errno == EINTR || errno == EAGAIN));
        if (r < 0 && errno == ENOSYS)
                r = open_beneath_walk(dirfd, path, &how);
        if (r < 0)
                return -errno;
        fd = (int)r;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (flags & O_DIRECTORY ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
                return -DM_IO_EBADTYPE;
        if (!(flags & O_DIRECTORY) && !(flags & O_PATH) && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
                return -errno;
        if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY && ftruncate(fd, 0) < 0)
                return -errno;
        return TAKE_FD(fd);
}

int dm_io_open_dir(const char *path)
{
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

        return fd < 0 ? -errno : fd;
}

int dm_io_open_parent(const char *path, const char **ret_base)
{
        const char *slash = strrchr(path, '/');
        char *dir;
        int fd;

        if (!slash || path[0] != '/' || !slash[1] || !strcmp(slash + 1, ".") || !strcmp(slash + 1, ".."))
                return -EINVAL;
        dir = slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
        if (!dir)
                return -ENOMEM;
        fd = dm_io_open_dir(dir);
        free(dir);
        if (fd >= 0)
                *ret_base = slash + 1;
        return fd;
}

int dm_io_read_capped(int dirfd, const char *path, size_t max, char **ret, size_t *ret_len)
{
        _cleanup_close_ int fd = dm_io_open_beneath(dirfd, path, O_RDONLY, 0);
        _cleanup_free_ char *buf = NULL;
        size_t len = 0;

        if (fd < 0)
                return fd;
        buf = malloc(max + 1);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                /* One byte past the cap tells "exactly max" from "more". */
                ssize_t n = read(fd, buf + len, max + 1 - len);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                len += (size_t)n;
                if (len > max)
                        return -EFBIG;
        }
        buf[len] = '\0';
        *ret = TAKE_PTR(buf);
        if (ret_len)
                *ret_len = len;
        return 0;
}

int dm_io_for_each_line(int fd, size_t max_line, uint64_t max_total, int (*fn)(void *userdata, char *line, size_t len),
                        void *userdata)
{
        _cleanup_free_ char *line = malloc(max_line + 1);
        char chunk[65536];
        uint64_t total = 0;
        size_t len = 0;
        bool skipping = false;
        int r;

        if (!line)
                return -ENOMEM;
        while (total < max_total) {
                size_t want = sizeof(chunk);
                ssize_t n;

                if (max_total - total < want)
                        want = (size_t)(max_total - total);
                n = read(fd, chunk, want);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                total += (uint64_t)n;
                for (ssize_t i = 0; i < n; i++) {
                        if (chunk[i] == '\n') {
                                if (!skipping) {
                                        line[len] = '\0';
                                        r = fn(userdata, line, len);
                                        if (r < 0)
                                                return r;
                                }
                                len = 0;
                                skipping = false;
                        } else if (!skipping) {
                                if (len == max_line)
                                        skipping = true;
                                else
                                        line[len++] = chunk[i];
                        }
                }
        }
        if (len && !skipping) {
                line[len] = '\0';
                r = fn(userdata, line, len);
                return r < 0 ? r : 0;
        }
        return 0;
}

int dm_io_replace(int dirfd, const char *dst, const void *data, size_t len, mode_t mode)
{
        char tmp[96];
        unsigned char rnd[6];
        int fd, r;

        if (strchr(dst, '/') || getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                return -EINVAL;
        snprintf(tmp, sizeof(tmp), ".%.40s.%02x%02x%02x%02x%02x%02x.tmp", dst, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5]);
        fd = dm_io_open_beneath(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL, mode);
        if (fd < 0)
                return fd;
        r = dm_write_all(fd, data, len);
        if (close(fd) < 0 && r == 0)
                r = -errno;
        if (r == 0 && renameat(dirfd, tmp, dirfd, dst) < 0)
                r = -errno;
        if (r < 0)
                unlinkat(dirfd, tmp, 0);
        return r;
}

const char *dm_io_strerror(int r)
{
        switch (r) {
        case -ELOOP: return "a symbolic link (or a path through one), not followed";
        case -EXDEV: return "a path that leaves its directory";
        case -ENXIO: return "a FIFO or device, not opened";
        case -DM_IO_EBADTYPE: return "not a regular file";
        case -EFBIG: return "over its size limit";
        default: return strerror(-r);
        }
}

static int walk_files(int fd, const char *prefix, int depth, int max_depth, bool skip_hidden,
                      int (*fn)(void *userdata, const char *path, const struct stat *st), void *userdata)
{
        DIR *d = fdopendir(fd);
        struct dirent *e;
        int r = 0;

        if (!d) {
                r = -errno;
                close(fd);
                return r;
        }
        while (r >= 0 && (e = readdir(d))) {
                char path[4096];
                struct stat st;

                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || (skip_hidden && e->d_name[0] == '.'))
                        continue;
                if ((size_t)snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "/" : "", e->d_name) >=
                    sizeof(path))
                        continue;
                if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue;
                if (S_ISREG(st.st_mode))
                        r = fn(userdata, path, &st);
                else if (S_ISDIR(st.st_mode) && depth < max_depth) {
                        int sub = openat(dirfd(d), e->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                        if (sub >= 0)
                                r = walk_files(sub, path, depth + 1, max_depth, skip_hidden, fn, userdata);
                }
        }
        closedir(d);
        return r;
}

int dm_io_walk_files(int fd, int max_depth, bool skip_hidden,
                     int (*fn)(void *userdata, const char *path, const struct stat *st), void *userdata)
{
        int own = fcntl(fd, F_DUPFD_CLOEXEC, 3);

        if (own < 0)
                return -errno;
        return walk_files(own, "", 0, max_depth, skip_hidden, fn, userdata);
}
