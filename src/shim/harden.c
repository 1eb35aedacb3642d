/* SPDX-License-Identifier: MIT */
/* What the shim checks and closes right before a command's execve, apart
 * from the seccomp filter: the working directory it landed in, and the
 * file descriptors the command would otherwise inherit. Used in the forked
 * child (spawn.c) and by `demesne-shim --exec` (the engine's exec API). */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <linux/magic.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/shim/shim.h"

int shim_check_cwd(void)
{
        char buf[PATH_MAX];
        struct statfs sfs;

        /* The runc CVE-2024-21626 pattern: a working directory under
         * /proc (/proc/self/fd/N, or a symlink to it) can be a directory of
         * the host reached through an fd. Wherever the path led, the
         * directory we are in now must not be procfs... */
        if (statfs(".", &sfs) < 0)
                return -errno;
        if (sfs.f_type == PROC_SUPER_MAGIC)
                return -EPERM;
        /* ...and must be reachable from our root: the kernel answers
         * "(unreachable)/..." for a directory outside it, which glibc
         * turns into ENOENT. */
        if (!getcwd(buf, sizeof(buf)))
                return errno == ERANGE ? 0 : -EXDEV;
        return buf[0] == '/' ? 0 : -EXDEV;
}

static int close_span(unsigned lo, unsigned hi)
{
        if (lo > hi)
                return 0;
        return syscall(SYS_close_range, lo, hi, 0U) == 0 ? 0 : -errno;
}

void shim_close_inherited(int keep)
{
        shim_close_from(3, keep);
}

void shim_close_from(int from, int keep)
{
        struct rlimit rl;
        int r;

        if (keep >= from) {
                r = close_span((unsigned)from, (unsigned)keep - 1);
                if (r == 0)
                        r = close_span((unsigned)keep + 1, ~0U);
        } else {
                r = close_span((unsigned)from, ~0U);
        }
        if (r == 0)
                return;
        /* A kernel before 5.9: one by one, up to the fd limit. */
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 20))
                rl.rlim_cur = 1u << 20;
        for (int fd = from; fd < (int)rl.rlim_cur; fd++)
                if (fd != keep)
                        close(fd);
}
