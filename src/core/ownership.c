/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/ownership.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/log.h"

#define SUID_BITS (S_ISUID | S_ISGID)
/* Deeper trees are walked too, but each level holds an fd: a bound. */
#define MAX_DEPTH 256

int dm_owner_of(const char *output_root, struct dm_owner *ret, struct dm_error *err)
{
        struct stat st;

        if (stat(output_root, &st) < 0)
                return dm_error_set(err, -errno, "cannot read the output root '%s': %s", output_root, strerror(errno));
        ret->uid = st.st_uid;
        ret->gid = st.st_gid;
        return 0;
}

int dm_owner_lend(const char *dir, unsigned uid, unsigned gid, struct dm_error *err)
{
        _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

        if (fd < 0 || fchown(fd, (uid_t)uid, (gid_t)gid) < 0 || fchmod(fd, 0700) < 0)
                return dm_error_set(err, -errno, "cannot give '%s' to the sandbox's root (host uid %u): %s", dir, uid,
                                    strerror(errno));
        return 0;
}

/* The mode an entry of this type should end with, from the one it has. */
static mode_t wanted_mode(mode_t m)
{
        mode_t bits = m & 07777 & ~SUID_BITS;

        if (S_ISDIR(m))
                bits |= S_IRWXU;
        else if (S_ISREG(m))
                bits |= S_IRUSR;
        return bits;
}

/* One non-directory entry, in place. */
static void give_entry(int dirfd, const char *name, const struct stat *st, const struct dm_owner *o,
                       unsigned *ret_failed)
{
        if ((st->st_uid != o->uid || st->st_gid != o->gid) &&
            fchownat(dirfd, name, o->uid, o->gid, AT_SYMLINK_NOFOLLOW) < 0 && errno != ENOENT)
                (*ret_failed)++;
        if (S_ISLNK(st->st_mode))
                return; /* a link has no mode of its own */
        /* chown clears the bits of a regular file already; a device, a
         * FIFO or a file chown could not touch keeps them: strip them here.
         * With AT_SYMLINK_NOFOLLOW an entry swapped for a link in between
         * answers EOPNOTSUPP and stays as it is. */
        if ((st->st_mode & 07777) != wanted_mode(st->st_mode) &&
            fchmodat(dirfd, name, wanted_mode(st->st_mode), AT_SYMLINK_NOFOLLOW) < 0 && errno != ENOENT &&
            errno != EOPNOTSUPP)
                (*ret_failed)++;
}

int dm_owner_give_entry(int dirfd, const char *name, const struct dm_owner *owner)
{
        struct stat st;
        unsigned failed = 0;

        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return -errno;
        give_entry(dirfd, name, &st, owner, &failed);
        return failed ? -EPERM : 0;
}

/* fd is an open directory (consumed); its entries first, then itself. */
static void walk(int fd, dev_t dev, mode_t self_mode, const struct dm_owner *o, unsigned depth, unsigned *failed)
{
        DIR *d;
        struct dirent *e;
        struct stat st;

        if (fstat(fd, &st) < 0) {
                close(fd);
                (*failed)++;
                return;
        }
        if (depth < MAX_DEPTH) {
                int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);

                d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
                if (!d) {
                        if (dup_fd >= 0)
                                close(dup_fd);
                        (*failed)++;
                }
                while (d && (e = readdir(d))) {
                        struct stat cst;
                        int cfd;

                        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                                continue;
                        if (fstatat(fd, e->d_name, &cst, AT_SYMLINK_NOFOLLOW) < 0)
                                continue; /* gone since readdir */
                        if (!S_ISDIR(cst.st_mode)) {
                                give_entry(fd, e->d_name, &cst, o, failed);
                                continue;
                        }
                        /* O_NOFOLLOW | O_DIRECTORY: a link or a FIFO swapped in
                         * since fstatat fails here instead of being followed or
                         * blocking. */
                        cfd = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
                        if (cfd < 0) {
                                (*failed)++;
                                continue;
                        }
                        if (fstat(cfd, &cst) < 0 || cst.st_dev != dev) {
                                close(cfd); /* another filesystem mounted here: not ours */
                                (*failed)++;
                                continue;
                        }
                        walk(cfd, dev, wanted_mode(cst.st_mode), o, depth + 1, failed);
                }
                if (d)
                        closedir(d);
        } else
                (*failed)++;
        if ((st.st_uid != o->uid || st.st_gid != o->gid) && fchown(fd, o->uid, o->gid) < 0)
                (*failed)++;
        if ((st.st_mode & 07777) != self_mode && fchmod(fd, self_mode) < 0)
                (*failed)++;
        close(fd);
}

int dm_owner_give_back(const char *dir, const struct dm_owner *owner, struct dm_error *err)
{
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        unsigned failed = 0;
        struct stat st;

        if (fd < 0)
                return dm_error_set(err, -errno, "cannot open '%s' to give it back: %s", dir, strerror(errno));
        if (fstat(fd, &st) < 0) {
                int e = errno;
                close(fd);
                return dm_error_set(err, -e, "cannot read '%s': %s", dir, strerror(e));
        }
        walk(fd, st.st_dev, 0700, owner, 0, &failed);
        /* Root changes everything; a rootless server cannot change its
                 * engine's other ids, which is expected. */
        if (failed && geteuid() == 0)
                log_warning("giving '%s' back to uid %u: %u entr%s could not be changed", dir, (unsigned)owner->uid,
                            failed, failed == 1 ? "y" : "ies");
        else if (failed)
                log_debug("giving '%s' back to uid %u: %u entr%s left as they were", dir, (unsigned)owner->uid, failed,
                          failed == 1 ? "y" : "ies");
        return 0;
}

void dm_owner_return(const char *output_root, const char *dir)
{
        struct dm_owner owner;
        struct dm_error err = { 0 };

        if ((dm_owner_of(output_root, &owner, &err) < 0 || dm_owner_give_back(dir, &owner, &err) < 0) &&
            err.code != -ENOENT)
                log_warning("%s", err.msg);
}
