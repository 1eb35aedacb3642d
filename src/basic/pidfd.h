/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_PIDFD_H
#define DM_UTIL_PIDFD_H

/* Signals through a pidfd: a pid number can be reused once its process is
 * reaped, a pidfd cannot. Take the pidfd while something else proves the
 * pid is still the right process (dm_pidfd_open, then ask again), and
 * signal only through it afterwards. */

/* A close-on-exec pidfd for pid, or a negative errno (-ESRCH: no such
 * process; -ENOSYS: a kernel before 5.3). */
int dm_pidfd_open(int pid);

/* 0 while the process behind pidfd exists (a zombie counts), else -ESRCH. */
int dm_pidfd_alive(int pidfd);

/* Sends sig to the process group that pidfd's process leads (pgid is its
 * pid, for kernels before 6.9, which cannot signal a group through a
 * pidfd: there the group is signalled by number only while its leader
 * provably still exists, so the number cannot have been reused). 0, or
 * -ESRCH when nothing is left to signal. */
int dm_pidfd_kill_group(int pidfd, int pgid, int sig);

#endif
