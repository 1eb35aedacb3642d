/* SPDX-License-Identifier: MIT */
#ifndef DM_BACKENDS_DOCKER_COMMIT_IDS_H
#define DM_BACKENDS_DOCKER_COMMIT_IDS_H

/* backends/docker-commit-ids.c: on rootful Podman's per-container user
 * namespaces, the second half of a commit (issue 32). */

#include "backends/backend.h"
#include "src/basic/error.h"

/* Reads what container id changed in its root file system, shifts each
 * id back by the container's root uid and gid (ids outside its 65536 become
 * nobody), and puts it, deletions as whiteouts, into a new container of the
 * container's image with no user namespace, never started: its id in
 * *ret_helper, to commit and then remove with
 * dm_docker_commit_helper_remove; named name when given (NULL: the
 * engine's). On failure nothing is left. */
int dm_docker_commit_shift(struct dm_backend *b, const char *id, unsigned uid, unsigned gid, const char *name,
                           char **ret_helper, struct dm_error *err);
void dm_docker_commit_helper_remove(struct dm_backend *b, const char *helper);

#endif
