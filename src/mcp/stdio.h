/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_STDIO_H
#define DM_MCP_STDIO_H

/* MCP over stdio: newline-delimited JSON-RPC on fds 0 and 1. Returns when
 * stdin reaches EOF or SIGTERM/SIGINT arrives, after every call in flight
 * was cancelled and finished. 0, or a negative errno for a read error. */

#include <stddef.h>

struct dm_mcp_server;

int dm_mcp_stdio_serve(struct dm_mcp_server *srv, int in_fd, int out_fd, size_t max_message);

#endif
