/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/util/io.h"

#include <errno.h>
#include <unistd.h>

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
