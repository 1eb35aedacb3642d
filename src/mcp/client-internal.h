/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_CLIENT_INTERNAL_H
#define DM_MCP_CLIENT_INTERNAL_H

/* Shared by client.c and client-start.c: who a stdio server runs as. */

#include <sys/types.h>

#include "src/basic/error.h"
#include "src/mcp/client.h"

struct dm_mcpclient_identity {
        bool set; /* false: as demesne itself */
        uid_t uid;
        gid_t gid;
        gid_t *groups; /* the user's supplementary groups, n_groups of them */
        int n_groups;
        char *home_env; /* "HOME=<the user's home>" */
};

/* Looks up spec->user before the fork (the child may only make system
 * calls): -EPERM when demesne is not root, -ENOENT when there is no such
 * user, err naming the server. No user: 0 and ret->set false. */
int dm_mcpclient_identity_lookup(const struct dm_mcpclient_spec *spec, struct dm_mcpclient_identity *ret,
                                 struct dm_error *err);
void dm_mcpclient_identity_release(struct dm_mcpclient_identity *id);
/* In the child, before exec: groups, gid, then uid. 0 or -errno. */
int dm_mcpclient_identity_apply(const struct dm_mcpclient_identity *id);

#endif
