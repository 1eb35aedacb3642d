/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_CONTEXT_INTERNAL_H
#define DM_CORE_CONTEXT_INTERNAL_H

/* The reaper (context-reaper.c), a server's background work, one thread: the containers waiting to be
 * removed after their result was sent (with their scratch trees, their
 * output directories given back, and their admission slots dropped), the
 * engine opened at start, the sweep after dead servers' containers, and
 * the gate that keeps it all off the CPU while calls run. Its state is
 * its own (struct dm_context holds only the handle); the calls that use
 * it are in src/core/context.h (dm_context_reap*, dm_context_busy,
 * dm_context_wait_quiet, dm_context_warm_up, dm_context_reap_flush). */

#include <stdbool.h>

#include "src/basic/error.h"

struct dm_context;
struct dm_reaper;

/* Starts the thread; the reaper reads ctx's settings and engine. */
int dm_reaper_new(struct dm_context *ctx, struct dm_reaper **ret, struct dm_error *err);
/* Waits for the queue, then ends the thread. True the first time (the
 * caller then sweeps what is left), false after. */
bool dm_reaper_stop(struct dm_reaper *r);
/* Stops it if running, and frees it (NULL: nothing). */
void dm_reaper_free(struct dm_reaper *r);
/* The engine was opened: sweep after dead servers in the background. */
void dm_reaper_sweep_orphans(struct dm_reaper *r);

#endif
