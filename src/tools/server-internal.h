/* SPDX-License-Identifier: MIT */
/* The tools server's parts, for the files of src/tools that keep them
 * (server.c makes and frees it; nested.c and hostmcp.c read their own). */
#ifndef DEMESNE_TOOLS_SERVER_INTERNAL_H
#define DEMESNE_TOOLS_SERVER_INTERNAL_H

#include "src/core/context.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"

struct dm_tools_server {
        struct dm_context *ctx;
        struct dm_registry *registry; /* every family's tools, then the host proxy's */
        struct dm_mcp_server *mcp;    /* serves registry; borrows it */
        struct dm_nested *nested;     /* nested sandboxes' endpoints (nested.c) */
        struct dm_hostmcp *hostmcp;   /* the host tool proxy (hostmcp.c), NULL = none */
        struct dm_previews *previews; /* sandbox_expose's open previews (expose.c) */
};

#endif
