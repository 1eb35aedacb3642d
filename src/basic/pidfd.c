/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/pidfd.h"

#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef PIDFD_SIGNAL_PROCESS_GROUP
#define PIDFD_SIGNAL_PROCESS_GROUP (1U << 2) /* Linux 6.9 */
#endif

int dm_pidfd_open(int pid)
{
        long fd;

        if (pid <= 1)
                return -EINVAL;
        /* pidfds are close-on-exec from birth. */
        fd = syscall(SYS_pidfd_open, pid, 0U);
        return fd < 0 ? -errno : (int)fd;
}

int dm_pidfd_alive(int pidfd)
{
        return syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0U) < 0 ? -errno : 0;
}

int dm_pidfd_kill_group(int pidfd, int pgid, int sig)
{
        if (syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, PIDFD_SIGNAL_PROCESS_GROUP) == 0)
                return 0;
        if (errno != EINVAL)
                return -errno;
        /* An older kernel. While the leader exists (alive or a zombie) its
         * pid is not free, so the group id still names its group. */
        if (dm_pidfd_alive(pidfd) < 0)
                return -ESRCH;
        return kill(-pgid, sig) < 0 ? -errno : 0;
}
