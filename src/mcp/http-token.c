/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/mcp/http-token.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "src/util/cleanup.h"
#include "src/util/io.h"
#include "src/util/paths.h"

int dm_http_token_check(const char *token, const char *what, struct dm_error *err)
{
        size_t len = strlen(token);

        for (size_t i = 0; i < len; i++)
                if (!isgraph((unsigned char)token[i]))
                        return dm_error_set(err, -EINVAL, "%s: the token must be printable, without spaces", what);
        if (len < DM_HTTP_TOKEN_MIN)
                return dm_error_set(err, -EINVAL,
                                    "%s: the token needs at least %d characters "
                                    "(head -c 32 /dev/urandom | base64 makes one)",
                                    what, DM_HTTP_TOKEN_MIN);
        return 0;
}

static int random_bytes(unsigned char *buf, size_t n)
{
        size_t got = 0;

        while (got < n) {
                ssize_t r = getrandom(buf + got, n - got, 0);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)r;
        }
        return 0;
}

int dm_http_token_generate(char ret[65])
{
        unsigned char raw[32];
        int r = random_bytes(raw, sizeof(raw));

        if (r < 0)
                return r;
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(ret + 2 * i, 3, "%02x", raw[i]);
        explicit_bzero(raw, sizeof(raw));
        return 0;
}

int dm_http_token_write(const char *dir, const char *name, const char *token, char **ret_path, struct stat *ret_st,
                        struct dm_error *err)
{
        _cleanup_close_ int dfd = -1, fd = -1;
        unsigned char rnd[8];
        char tmp[256];
        struct stat st;
        int r;

        if ((r = dm_mkdir_p(dir, 0700, err)) < 0)
                return r;
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return dm_error_set(err, -errno, "token file: cannot open the state directory '%s': %s", dir,
                                    strerror(errno));
        if (fstat(dfd, &st) < 0)
                return dm_error_set(err, -errno, "token file: '%s': %s", dir, strerror(errno));
        if (st.st_uid != geteuid() || (st.st_mode & 0022))
                return dm_error_set(err, -EPERM,
                                    "token file: the state directory '%s' must belong to this user and not be "
                                    "writable by others (DEMESNE_STATE_DIR sets it)",
                                    dir);
        if ((r = random_bytes(rnd, sizeof(rnd))) < 0)
                return dm_error_set(err, r, "getrandom: %s", strerror(-r));
        snprintf(tmp, sizeof(tmp), ".%s.%02x%02x%02x%02x%02x%02x%02x%02x", name, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5], rnd[6], rnd[7]);
        /* O_EXCL and O_NOFOLLOW: nothing planted at the name is opened. */
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return dm_error_set(err, -errno, "token file '%s/%s': %s", dir, tmp, strerror(errno));
        if (fchmod(fd, 0600) < 0 || (r = dm_write_all(fd, token, strlen(token))) < 0 ||
            (r = dm_write_all(fd, "\n", 1)) < 0 || fsync(fd) < 0 || fstat(fd, &st) < 0) {
                r = r < 0 ? r : -errno;
                unlinkat(dfd, tmp, 0);
                return dm_error_set(err, r, "token file '%s/%s': %s", dir, tmp, strerror(-r));
        }
        /* rename() replaces a symlink at the name; it does not follow it. */
        if (renameat(dfd, tmp, dfd, name) < 0) {
                r = -errno;
                unlinkat(dfd, tmp, 0);
                return dm_error_set(err, r, "token file '%s/%s': %s", dir, name, strerror(-r));
        }
        if (asprintf(ret_path, "%s/%s", dir, name) < 0) {
                unlinkat(dfd, name, 0);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        *ret_st = st;
        return 0;
}

void dm_http_token_remove(const char *path, const struct stat *st)
{
        struct stat now;

        if (path && lstat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino)
                unlink(path);
}
