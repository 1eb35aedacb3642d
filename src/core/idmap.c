/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/idmap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/paths.h"

#define RANGE 65536u

/* The engine resolves bind sources in the host's mount namespace: a
 * server in a private one (a client that sandboxes it) would stage mounts
 * the engine never sees, and the sandbox would find empty inputs. */
static bool host_mount_ns(void)
{
        struct stat self, init;

        /* PID 1's may be closed to us (EACCES, as on these machines): then
         * nothing says this one is private. */
        if (stat("/proc/self/ns/mnt", &self) < 0 || stat("/proc/1/ns/mnt", &init) < 0)
                return true;
        return self.st_ino == init.st_ino && self.st_dev == init.st_dev;
}

int dm_idmap_prepare(struct dm_idmap *im, const char *stage_dir, struct dm_mount *mounts, size_t n,
                     struct dm_error *err)
{
        int r;

        memset(im, 0, sizeof(*im));
        if (!host_mount_ns()) {
                log_debug("not in the host's mount namespace: inputs are bound as they are");
                return 0;
        }
        for (size_t i = 0; i < n; i++)
                if (mounts[i].readonly && strncmp(mounts[i].target, "/in/", 4) == 0)
                        im->n++;
        if (!im->n)
                return 0;
        im->dir = strdup(stage_dir);
        im->src = calloc(im->n, sizeof(char *));
        im->stage = calloc(im->n, sizeof(char *));
        if (!im->dir || !im->src || !im->stage)
                goto oom;
        r = dm_mkdir_p(stage_dir, 0700, err);
        if (r < 0)
                return r;
        for (size_t i = 0, k = 0; i < n; i++) {
                struct stat st;
                int fd;

                if (!mounts[i].readonly || strncmp(mounts[i].target, "/in/", 4) != 0)
                        continue;
                if (stat(mounts[i].host, &st) < 0)
                        return dm_error_set(err, -errno, "cannot read input '%s': %s", mounts[i].host, strerror(errno));
                im->src[k] = strdup(mounts[i].host);
                if (!im->src[k] || asprintf(&im->stage[k], "%s/%zu", stage_dir, k) < 0)
                        goto oom;
                if (S_ISDIR(st.st_mode))
                        fd = mkdir(im->stage[k], 0700) < 0 ? -1 : 0;
                else
                        fd = open(im->stage[k], O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0)
                        return dm_error_set(err, -errno, "cannot make '%s': %s", im->stage[k], strerror(errno));
                if (fd > 0)
                        close(fd);
                mounts[i].host = im->stage[k];
                k++;
        }
        return 0;
oom:
        return dm_error_set(err, -ENOMEM, "out of memory");
}

/* A user namespace with the sandbox's range, as an fd: a child unshares
 * one, the server writes its maps, keeps the fd and ends the child. */
static int range_userns(unsigned uid, unsigned gid, struct dm_error *err)
{
        int p[2], fd = -1, e = 0;
        char path[64], map[64];
        pid_t child;
        char c;

        if (pipe2(p, O_CLOEXEC) < 0)
                return dm_error_set(err, -errno, "pipe: %s", strerror(errno));
        child = fork();
        if (child < 0) {
                e = errno;
                close(p[0]);
                close(p[1]);
                return dm_error_set(err, -e, "fork: %s", strerror(e));
        }
        if (child == 0) {
                char ok = unshare(CLONE_NEWUSER) == 0 ? 'y' : 'n';

                (void)!write(p[1], &ok, 1);
                pause();
                _exit(0);
        }
        close(p[1]);
        if (read(p[0], &c, 1) != 1 || c != 'y')
                e = EPERM;
        close(p[0]);
        for (int i = 0; !e && i < 2; i++) {
                _cleanup_close_ int m = -1;

                snprintf(path, sizeof(path), "/proc/%d/%s", (int)child, i ? "gid_map" : "uid_map");
                snprintf(map, sizeof(map), "0 %u %u\n", i ? gid : uid, RANGE);
                m = open(path, O_WRONLY | O_CLOEXEC);
                if (m < 0 || write(m, map, strlen(map)) < 0)
                        e = errno;
        }
        if (!e) {
                snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)child);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                if (fd < 0)
                        e = errno;
        }
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        if (e)
                return dm_error_set(err, -e, "cannot make a user namespace for the sandbox's range: %s", strerror(e));
        return fd;
}

static int mount_idmapped(const char *src, const char *stage, int userns_fd)
{
        struct mount_attr a = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY, .userns_fd = (__u64)userns_fd };
        _cleanup_close_ int t =
                (int)syscall(SYS_open_tree, AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);

        if (t < 0 || syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH | AT_RECURSIVE, &a, sizeof(a)) < 0 ||
            syscall(SYS_move_mount, t, "", AT_FDCWD, stage, MOVE_MOUNT_F_EMPTY_PATH) < 0)
                return -errno;
        return 0;
}

/* As without a user namespace: a read-only bind. */
static int mount_plain(const char *src, const char *stage)
{
        if (mount(src, stage, NULL, MS_BIND | MS_REC, NULL) < 0)
                return -errno;
        if (mount(NULL, stage, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0) {
                int e = errno;
                umount2(stage, MNT_DETACH);
                return -e;
        }
        return 0;
}

int dm_idmap_attach(struct dm_idmap *im, unsigned uid, unsigned gid, struct dm_error *err)
{
        _cleanup_close_ int ns = -1;

        if (!im->n)
                return 0;
        ns = range_userns(uid, gid, err);
        if (ns < 0)
                return ns;
        for (size_t k = 0; k < im->n; k++) {
                int r = mount_idmapped(im->src[k], im->stage[k], ns);

                if (r < 0) {
                        log_warning("input '%s' cannot be idmapped (%s): bound as it is, so the sandbox reads only "
                                    "what its mode lets anyone read",
                                    im->src[k], strerror(-r));
                        r = mount_plain(im->src[k], im->stage[k]);
                }
                if (r < 0)
                        return dm_error_set(err, r, "cannot mount input '%s' for the sandbox: %s", im->src[k],
                                            strerror(-r));
        }
        return 0;
}

void dm_idmap_release(struct dm_idmap *im)
{
        for (size_t k = 0; k < im->n; k++) {
                if (im->src)
                        free(im->src[k]);
                if (im->stage)
                        free(im->stage[k]);
        }
        free(im->src);
        free(im->stage);
        free(im->dir);
        memset(im, 0, sizeof(*im));
}

void dm_idmap_remove(const char *stage_dir)
{
        _cleanup_close_ int fd = open(stage_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        DIR *d;
        struct dirent *e;

        if (fd < 0)
                return;
        d = fdopendir(TAKE_FD(fd));
        while (d && (e = readdir(d))) {
                char path[4096];

                if (e->d_name[0] == '.')
                        continue;
                /* Only the entries dm_idmap_prepare made: numbers. */
                if (strspn(e->d_name, "0123456789") != strlen(e->d_name) ||
                    (size_t)snprintf(path, sizeof(path), "%s/%s", stage_dir, e->d_name) >= sizeof(path))
                        continue;
                while (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) == 0)
                        ;
                if (unlinkat(dirfd(d), e->d_name, 0) < 0 && errno == EISDIR)
                        unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
        }
        if (d)
                closedir(d);
        rmdir(stage_dir);
}
