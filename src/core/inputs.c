/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/inputs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/log.h"

static atomic_uint stage_counter;

/* Bind-mounts the checked fd at stage->dir/<i>. 0 when mounted, 1 when the
 * server may not mount (not root: the caller uses the resolved path), or
 * -errno with err set. */
static int stage_one(const struct dm_context *ctx, struct dm_inputs_stage *stage, size_t i, enum dm_path_kind kind,
                     char **ret_path, struct dm_error *err)
{
        char base[PATH_MAX - 128], target[PATH_MAX], src[64];
        int r;

        if (geteuid() != 0)
                return 1;
        if (!stage->dir[0]) {
                snprintf(base, sizeof(base), "%s/mnt", ctx->cfg.state_dir);
                r = dm_mkdir_p(base, 0700, err);
                if (r < 0)
                        return r;
                if ((size_t)snprintf(stage->dir, sizeof(stage->dir), "%s/%s.%u", base, ctx->owner,
                                     atomic_fetch_add(&stage_counter, 1)) >= sizeof(stage->dir)) {
                        stage->dir[0] = '\0';
                        return dm_error_set(err, -ENAMETOOLONG, "DEMESNE_STATE_DIR is too long");
                }
                if (mkdir(stage->dir, 0700) < 0) {
                        r = dm_error_set(err, -errno, "cannot create '%s': %s", stage->dir, strerror(errno));
                        stage->dir[0] = '\0';
                        return r;
                }
                /* A private mount of its own first: what is mounted below it
                 * never propagates to another mount namespace (where /run is
                 * shared, a copy there would outlive the unmount here). */
                if (mount(stage->dir, stage->dir, NULL, MS_BIND, NULL) < 0 ||
                    mount(NULL, stage->dir, NULL, MS_PRIVATE, NULL) < 0) {
                        r = -errno;
                        umount2(stage->dir, MNT_DETACH | UMOUNT_NOFOLLOW);
                        rmdir(stage->dir);
                        stage->dir[0] = '\0';
                        if (r == -EPERM)
                                return 1;
                        return dm_error_set(err, r, "cannot make the staging directory private: %s", strerror(-r));
                }
        }
        snprintf(target, sizeof(target), "%s/%zu", stage->dir, i);
        if (kind == DM_PATH_DIR ? mkdir(target, 0700) < 0
                                : (r = open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)) < 0 ||
                                          close(r) < 0)
                return dm_error_set(err, -errno, "cannot create '%s': %s", target, strerror(errno));
        /* The kernel follows the fd's magic link to exactly the file or
         * directory that was checked, whatever its path holds now. */
        snprintf(src, sizeof(src), "/proc/self/fd/%d", stage->fds[i]);
        if (mount(src, target, NULL, MS_BIND | MS_REC, NULL) < 0) {
                r = -errno;
                if (kind == DM_PATH_DIR)
                        rmdir(target);
                else
                        unlink(target);
                if (r == -EPERM)
                        return 1;
                return dm_error_set(err, r, "cannot stage the input at '%s': %s", target, strerror(-r));
        }
        /* Nothing of it propagates to other mount namespaces. */
        if (mount(NULL, target, NULL, MS_PRIVATE | MS_REC, NULL) < 0)
                log_debug("make '%s' private: %s", target, strerror(errno));
        *ret_path = strdup(target);
        return *ret_path ? 0 : dm_error_set(err, -ENOMEM, "out of memory");
}

static int add_checked(const struct dm_context *ctx, const struct dm_allowed_roots *roots, const char *const *paths,
                       enum dm_path_kind kind, struct dm_mount *mounts, size_t *n, char **owned, size_t *n_owned,
                       struct dm_inputs_stage *stage, struct dm_error *err)
{
        for (size_t i = 0; paths && paths[i]; i++) {
                char *resolved = NULL, *target, *staged = NULL;
                const char *base;
                size_t k;
                int fd, r;

                if (stage->n >= DM_INPUTS_MAX)
                        return dm_error_set(err, -E2BIG, "more than %d inputs", DM_INPUTS_MAX);
                r = dm_path_open(roots, paths[i], kind, &resolved, &fd, err);
                if (r < 0)
                        return r;
                owned[(*n_owned)++] = resolved;
                k = stage->n++;
                stage->fds[k] = fd;
                base = dm_path_basename(resolved);
                for (size_t j = 0; j < *n; j++) {
                        const char *other = strrchr(mounts[j].target, '/') + 1;
                        if (strncmp(mounts[j].target, "/in/", 4) == 0 && strcmp(other, base) == 0)
                                return dm_error_set(err, -EEXIST,
                                                    "two inputs share the name '%s' ('%s' and another): "
                                                    "each lands at /in/<name>, so names must be unique",
                                                    base, paths[i]);
                }
                r = stage_one(ctx, stage, k, kind, &staged, err);
                if (r < 0)
                        return r;
                if (staged)
                        owned[(*n_owned)++] = staged;
                if (asprintf(&target, "/in/%s", base) < 0)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                owned[(*n_owned)++] = target;
                mounts[*n].host = staged ? staged : resolved;
                mounts[*n].target = target;
                mounts[*n].readonly = true;
                (*n)++;
        }
        return 0;
}

int dm_inputs_add(const struct dm_context *ctx, const char *const *paths, enum dm_path_kind kind,
                  const char *const *granted, struct dm_mount *mounts, size_t *n, char **owned, size_t *n_owned,
                  struct dm_inputs_stage *stage, struct dm_error *err)
{
        struct dm_allowed_roots widened = ctx->roots;
        int r = 0;

        if (granted && granted[0] && dm_allowed_roots_widen(&ctx->roots, granted, &widened) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = add_checked(ctx, &widened, paths, kind, mounts, n, owned, n_owned, stage, err);
        if (widened.roots != ctx->roots.roots)
                free(widened.roots);
        return r;
}

static void unstage_dir(const char *dir)
{
        DIR *d = opendir(dir);
        struct dirent *de;

        if (!d)
                return;
        while ((de = readdir(d))) {
                char p[PATH_MAX];

                if (de->d_name[0] == '.')
                        continue;
                snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
                /* Detached: a container that still uses it keeps its copy. */
                if (umount2(p, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
                        log_warning("unmount the staged input '%s': %s", p, strerror(errno));
                if (rmdir(p) < 0 && errno == ENOTDIR)
                        unlink(p);
        }
        closedir(d);
        if (umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 && errno != EINVAL && errno != ENOENT)
                log_warning("unmount '%s': %s", dir, strerror(errno));
        if (rmdir(dir) < 0 && errno != ENOENT)
                log_warning("remove '%s': %s", dir, strerror(errno));
}

void dm_inputs_unstage(struct dm_inputs_stage *stage)
{
        if (!stage)
                return;
        if (stage->dir[0])
                unstage_dir(stage->dir);
        stage->dir[0] = '\0';
        for (size_t i = 0; i < stage->n; i++)
                close(stage->fds[i]);
        stage->n = 0;
}

void dm_inputs_sweep(struct dm_context *ctx)
{
        char base[PATH_MAX - 512], p[PATH_MAX];
        DIR *d;
        struct dirent *de;

        if (geteuid() != 0)
                return;
        snprintf(base, sizeof(base), "%s/mnt", ctx->cfg.state_dir);
        d = opendir(base);
        if (!d)
                return;
        while ((de = readdir(d))) {
                char owner[NAME_MAX + 1];
                char *dot;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(owner, sizeof(owner), "%s", de->d_name);
                dot = strrchr(owner, '.');
                if (!dot)
                        continue;
                *dot = '\0';
                if (!strcmp(owner, ctx->owner) || dm_owner_alive(owner, ctx->owner))
                        continue;
                snprintf(p, sizeof(p), "%s/%s", base, de->d_name);
                unstage_dir(p);
        }
        closedir(d);
}
