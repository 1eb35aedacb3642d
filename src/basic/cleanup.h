/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_CLEANUP_H
#define DM_UTIL_CLEANUP_H

/* Scope-bound cleanup in the style of systemd: a variable declared with
 * _cleanup_free_ is freed when it leaves scope unless TAKE_PTR moved it out. */

#include <stdlib.h>
#include <unistd.h>
#include <errno.h>

static inline void dm_freep(void *p)
{
        free(*(void **)p);
}
static inline void dm_closep(int *fd)
{
        if (*fd >= 0) {
                int saved = errno;
                close(*fd);
                errno = saved;
        }
}

#define _cleanup_(f) __attribute__((cleanup(f)))
#define _cleanup_free_ _cleanup_(dm_freep)
#define _cleanup_close_ _cleanup_(dm_closep)

#define TAKE_PTR(p)                      \
        ({                               \
                __typeof__(p) _tp = (p); \
                (p) = NULL;              \
                _tp;                     \
        })
#define TAKE_FD(fd)             \
        ({                      \
                int _tf = (fd); \
                (fd) = -1;      \
                _tf;            \
        })

#define DM_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
