/* SPDX-License-Identifier: MIT */
#ifndef DM_IDMAP_H
#define DM_IDMAP_H

/* A sandbox's read-only inputs (/in) through idmapped mounts made on the
 * host. In a user namespace the sandbox's root is not the host's root, so a
 * plain bind of a file only its owner may read (mode 0600) would be
 * unreadable in the sandbox. runc 1.1 does not honour idmapped bind mounts,
 * so the server makes them itself: a detached clone of each input
 * (open_tree), mapped with a user namespace of the sandbox's range
 * (mount_setattr MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY) and moved onto a
 * staging path that the container binds in its place. A file of host uid k
 * then shows as uid k in the sandbox (root's as the sandbox's root), read
 * only. Nothing on disk changes.
 *
 *   dm_idmap_prepare(&im, stage_dir, mounts, n)   before create: the inputs'
 *                                                 host paths become staging paths
 *   dm_idmap_attach(&im, uid, gid)                after create, before start
 *   dm_idmap_release(&im)                         frees memory, mounts stay
 *   dm_idmap_remove(stage_dir)                    after the container is gone
 *
 * A filesystem that cannot be idmapped gets a plain read-only bind there
 * instead (as without a user namespace), with a warning. */

#include <stddef.h>

#include "backends/backend.h"
#include "src/basic/error.h"

struct dm_idmap {
        char *dir;    /* the staging directory */
        char **src;   /* the inputs' host paths */
        char **stage; /* where each is mounted */
        size_t n;
};

/* Every read-only mount whose target is under /in/ gets a staging path in
 * stage_dir (made 0700; a directory or an empty file, like its source). */
int dm_idmap_prepare(struct dm_idmap *im, const char *stage_dir, struct dm_mount *mounts, size_t n,
                     struct dm_error *err);
int dm_idmap_attach(struct dm_idmap *im, unsigned uid, unsigned gid, struct dm_error *err);
void dm_idmap_release(struct dm_idmap *im);
/* Detaches whatever is mounted in stage_dir and removes it; gone is fine. */
void dm_idmap_remove(const char *stage_dir);

#endif
