/* SPDX-License-Identifier: MIT */
#ifndef DM_SERVER_H
#define DM_SERVER_H

/* The server object: a dm_context and every part that keeps state in it,
 * started and released in one order. The top of src/core: it includes the
 * parts, and no part includes it, so none of them calls back up.
 *
 *   init     settings, allowed roots, owner, jobs, the reap queue's thread;
 *   start    the engine opened in the background (then the sweep of dead
 *            servers' containers, agents' files and input stages), the
 *            warm pool (when asked), the TTL reaper of persistent sandboxes;
 *   release  the TTL reaper, the jobs (their containers queued for
 *            removal), the warm pool, the reap queue drained and this
 *            server's containers removed, the shim sockets let go (the
 *            sandboxes outlive the server), egress's proxy and NAT, the
 *            engine connection and the settings, and last the admission
 *            table (src/core/admission.h), made at init. */

#include <stdbool.h>

#include "src/core/context.h"

int dm_server_init(struct dm_context *ctx, struct dm_error *err);

/* pool: keep cfg.pool_size warm containers of the default image (`serve`;
 * a one-off `demesne run` does not). ttl_reaper: destroy persistent
 * sandboxes whose TTL ran out, every cfg.sweep_s seconds. */
void dm_server_start(struct dm_context *ctx, bool pool, bool ttl_reaper);

/* Safe after a failed dm_server_start, or with no start at all. */
void dm_server_release(struct dm_context *ctx);

#endif
