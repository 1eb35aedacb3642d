/* SPDX-License-Identifier: MIT */
#ifndef DM_OWNERSHIP_H
#define DM_OWNERSHIP_H

/* Host-side ownership of what sandboxes write.
 *
 * Before a container starts, the directories it must write (/out,
 * /workspace) are handed to its root's host ids (dm_owner_lend). After it
 * is done (a run's end, a sandbox's destroy, a downloaded file), everything
 * in the output directory goes back to the output root's owner with every
 * setuid and setgid bit stripped (dm_owner_give_back): whatever the
 * sandbox's root was, nothing it left gives any host user a privilege.
 *
 * The walk holds directory fds and only ever opens directories (O_NOFOLLOW,
 * O_NONBLOCK, same filesystem); every other entry is changed in place with
 * fchownat/fchmodat(AT_SYMLINK_NOFOLLOW). A symlink is never followed, a
 * FIFO never opened, even if the sandbox is still running and swaps
 * entries under the walk. */

#include <stdbool.h>
#include <sys/types.h>

#include "src/basic/error.h"

struct dm_owner {
        uid_t uid;
        gid_t gid;
};

/* The owner of the output root (stat, following a symlink the operator
 * configured). */
int dm_owner_of(const char *output_root, struct dm_owner *ret, struct dm_error *err);

/* Gives the directory itself (not its contents) to uid:gid, mode 0700. */
int dm_owner_lend(const char *dir, unsigned uid, unsigned gid, struct dm_error *err);

/* Gives dir and everything below it to the owner: setuid and setgid bits
 * cleared, directories at least u+rwx (so the owner can delete them), regular
 * files at least u+r, dir itself 0700. Entries it may not change (a
 * non-root server, files of a rootless engine's other ids) are left as they
 * are; that is not an error. -errno only when dir cannot be opened. */
int dm_owner_give_back(const char *dir, const struct dm_owner *owner, struct dm_error *err);

/* dm_owner_of(output_root) then dm_owner_give_back(dir), a failure logged
 * (not returned: the callers go on either way). A dir that is gone is fine. */
void dm_owner_return(const char *output_root, const char *dir);

/* The same for one entry name in the directory dirfd (a downloaded file). */
int dm_owner_give_entry(int dirfd, const char *name, const struct dm_owner *owner);

#endif
