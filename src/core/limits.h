/* SPDX-License-Identifier: MIT */
#ifndef DM_LIMITS_H
#define DM_LIMITS_H

/* The disk cap of a run or sandbox (DEMESNE_DISK_MAX), enforced from the
 * host while a command runs, and the one place a command is stopped for a
 * limit rather than a cancel. docs/explanation/limits.md says why it is
 * built this way.
 *
 * Two parts share the cap:
 *   - RLIMIT_FSIZE at the cap on every process of the container
 *     (dm_launch_harden): one file cannot pass it at all, a write or
 *     fallocate beyond it fails at once (SIGXFSZ, EFBIG) before a block is
 *     used;
 *   - a watch thread that sums what the command's writable trees hold
 *     (/out, /workspace, the root file system's overlay upper directory, the
 *     directories of /etc/hosts and of the engine log) and the files its
 *     processes hold open after unlinking them, and ends the command when
 *     the sum passes the cap.
 *
 * The walk runs as the server on trees a container writes: it goes through
 * directory fds only (openat O_NOFOLLOW|O_DIRECTORY, fstatat
 * AT_SYMLINK_NOFOLLOW), never follows a symlink, never leaves a tree's file
 * system, opens nothing but directories and reads no file. */

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "src/basic/error.h"

/* Blocks allocated (st_blocks × 512) plus DM_DISK_INODE_BYTES for each
 * inode, so a tree of empty files counts too. */
#define DM_DISK_INODE_BYTES 256
/* Deeper trees are not walked: they count as over the cap. */
#define DM_DISK_MAX_DEPTH 256

/* What regular files on devices devs[0..n_devs) that the processes listed
 * in procs_path (a cgroup.procs file) hold open with no name left (unlinked)
 * allocate, each counted once. Only stat()s /proc/PID/fd entries: no file
 * is opened. 0 when the file cannot be read. */
int64_t dm_disk_unlinked_open(const char *procs_path, const dev_t *devs, size_t n_devs);

/* What the trees in paths (absolute host directories, NULL-terminated;
 * missing ones count 0) hold, in bytes. -ELOOP when a tree is deeper than
 * DM_DISK_MAX_DEPTH; other errors inside a tree (a directory removed while
 * walked) are skipped. */
int dm_disk_usage(const char *const *paths, int64_t *ret_bytes);

/* "2 GiB", "64 MiB", "1.5 GiB", "512 KiB", "100 bytes". */
void dm_format_size(int64_t bytes, char *buf, size_t len);

/* Fills err with the cap's sentence, -EDQUOT:
 * "disk cap of 2 GiB reached (DEMESNE_DISK_MAX): <why>". */
int dm_disk_cap_error(struct dm_error *err, int64_t cap, const char *why);

struct dm_limits_watch;

struct dm_limits_watch_conf {
        const char *const *trees; /* host directories the command can write; copied */
        int64_t cap;              /* bytes; 0 = no disk watch (cancel and limit only) */
        int cancel_fd;            /* the caller's cancel (readable = cancelled); -1 = none */
        int limit_fd;             /* an outside limit (the vendor proxy's spending cap)
                                           fired: readable = stop; -1 = none */
        int pid;                  /* the container's PID 1 on this host, 0 = unknown: files
                                           its processes hold open after unlinking them count
                                           too (they are in no tree) */
        bool baseline_known;      /* what the trees held is known (the last command's
                                           end measured it): no walk at start */
        int64_t baseline;
};

/* Measures the trees once (the baseline: a sandbox already over its cap may
 * still run commands that free space; it is stopped when it grows; or
 * conf->baseline when known) and starts the thread. 0, -ENOMEM, or a
 * pthread/eventfd errno. */
int dm_limits_watch_start(const struct dm_limits_watch_conf *conf, struct dm_limits_watch **ret, struct dm_error *err);
/* Readable once the command must end: the caller's cancel, the disk cap or
 * the outside limit. Pass it where a cancel fd goes. */
int dm_limits_watch_fd(const struct dm_limits_watch *w);
/* After the command ended: true when a limit (not the caller's cancel)
 * stopped it, or when the trees hold more than the cap now (measured once
 * more: a command may end before the first walk), with the sentence in err
 * (-EDQUOT for the disk cap, -ECONNABORTED for the outside limit). */
bool dm_limits_watch_tripped(struct dm_limits_watch *w, struct dm_error *err);
/* What the trees held at the last walk (dm_limits_watch_tripped walks once
 * more at the end), -1 when there was none (no cap, or a cancel). */
int64_t dm_limits_watch_usage(struct dm_limits_watch *w);
/* What the engine says of a container that the disk watch needs: its PID 1
 * and the host directories its writes go to besides its mounts (the root
 * file system's upper directory, those of /etc/hosts and of its log). It
 * does not change while the container runs, so a caller that keeps the
 * container (a warm one, a persistent sandbox's) reads it once. */
struct dm_limits_target {
        int pid;
        size_t n;
        char dirs[3][PATH_MAX];
};
struct dm_backend;
struct dm_container_info;
/* From an inspect already made (dm_launch_shim_ready's). */
void dm_limits_target_from_info(const struct dm_container_info *info, struct dm_limits_target *t);
/* One inspect. An engine that says nothing of a directory leaves it out;
 * a failed inspect leaves the target empty (trees only). */
void dm_limits_target_read(struct dm_backend *b, const char *id, struct dm_limits_target *t);
/* The watch of a command in a container: conf's trees plus the target's. */
int dm_limits_watch_target(const struct dm_limits_target *t, const struct dm_limits_watch_conf *conf,
                           struct dm_limits_watch **ret, struct dm_error *err);
/* The same, reading the target now (dm_limits_target_read) when a cap is set. */
int dm_limits_watch_container(struct dm_backend *b, const char *id, const struct dm_limits_watch_conf *conf,
                              struct dm_limits_watch **ret, struct dm_error *err);
/* After a command ended with exit_code: when it died of SIGXFSZ (a file
 * reached RLIMIT_FSIZE, which is the cap), fills err with the cap's
 * sentence and returns true. */
bool dm_limits_fsize_hit(int64_t cap, int exit_code, struct dm_error *err);
/* Joins the thread and frees. NULL is fine. */
void dm_limits_watch_stop(struct dm_limits_watch *w);

/* Whether the engine applies the memory and pids limits with cgroups. A
 * rootful engine does. A rootless one only on cgroup v2 (the unified
 * hierarchy, read from /sys/fs/cgroup) where the user's systemd manager
 * (user@UID.service) has the memory and pids controllers delegated;
 * otherwise (cgroup v1, or no delegation) it ignores them, and why says so
 * with the fix. The engine runs on this host (DM_CAP_HOST_NETNS). */
bool dm_limits_cgroup_applies(bool rootless, char *why, size_t size);

#endif
