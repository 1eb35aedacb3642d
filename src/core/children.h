/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_CHILDREN_H
#define DM_CORE_CHILDREN_H

/* A child's output in its parent's. A child is a run or a sandbox that a
 * nested principal ("<maker>/<parent id>", src/basic/principal.h) made;
 * when it ends (a run's command ends, a sandbox is destroyed), its output
 * directory is copied into its parent's at children/<child id>/, which the
 * parent reads as /out/children/<child id>/.
 *
 * A copy, made once the child has ended, never a mount: the parent writes
 * its /out all the while, so a path into it checked by us and then mounted
 * by the engine could be a link by then (a host escape). Every open here is
 * relative to a directory fd, never through a link (O_NOFOLLOW, openat2
 * RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), files are created O_EXCL, a link
 * in the child's output is made again as a link (never followed), FIFOs,
 * sockets and devices are skipped. The child's own output directory stays
 * as it is. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "src/basic/error.h"
#include "src/core/context.h"

#define DM_CHILDREN_DIR "children"
#define DM_CHILDREN_MAX_ENTRIES 20000 /* files, directories and links of one copy */
#define DM_CHILDREN_MAX_DEPTH 128     /* levels of directories: two fds each while copying */

struct dm_children_limits {
        int64_t max_bytes;  /* the files' sizes together; 0: no cap */
        size_t max_entries; /* 0: DM_CHILDREN_MAX_ENTRIES */
        bool chown;         /* give what is made to uid:gid */
        uid_t uid;
        gid_t gid;
};

struct dm_children_copied {
        uint64_t bytes;
        size_t files, dirs, links;
        size_t skipped;  /* FIFOs, sockets, devices, too deep, unreadable, name taken */
        size_t left_out; /* files, directories and links the caps left out */
};

/* Copies the directory src_fd (not taken) into parent_fd (not taken) at
 * children/<child_id>/, making children/ when missing. Refused (nothing
 * written): children/ that is not a directory of parent_fd's (a link, a
 * file), a child_id that is not a plain name, children/<child_id> that
 * exists already. What the caps left out is listed in
 * children/<child_id>.truncated. Mode 0755 for directories, 0644 (0755
 * when the original could be run) for files. 0 or -errno with err set; the
 * counts are in *ret either way. */
int dm_children_copy(int src_fd, int parent_fd, const char *child_id, const struct dm_children_limits *lim,
                     struct dm_children_copied *ret, struct dm_error *err);

/* Run or sandbox child_id has ended: when a nested principal made it (its
 * run ledger entry says who) and its parent is still there (a sandbox not
 * destroyed, a run whose output directory exists), its output goes into
 * the parent's with dm_children_copy, capped at DEMESNE_DISK_MAX and given
 * to the output root's owner. Logs what it did and what it could not;
 * never fails the caller. */
void dm_children_collect(struct dm_context *ctx, const char *child_id);

/* For the sweep after a server that is gone (killed, crashed): each run a
 * nested principal made that it left "running" in the ledger (its
 * container removed by the sweep of its one-off containers) is collected
 * as above, deepest first, and its ledger entry ends "interrupted", so
 * that no later server collects it again. Returns how many. */
size_t dm_children_collect_interrupted(struct dm_context *ctx);

#endif
