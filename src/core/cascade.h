/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_CASCADE_H
#define DM_CORE_CASCADE_H

/* The end of a nested subtree (a nested sandbox destroyed, a nested run
 * ended), in two steps around what the caller stops between them (the MCP
 * endpoint the subtree's calls come through):
 *
 *   dm_cascade_close  principal's subtree (principal and all below it)
 *                     gets no new claim, and each claim it holds (runs,
 *                     creates, jobs' runs, at any level) is cancelled;
 *   dm_cascade_end    its background jobs are cancelled, what holds a
 *                     slot there is waited for (a minute at most; what
 *                     still runs then is logged and its sandboxes are
 *                     destroyed anyway), its sandboxes are destroyed,
 *                     and the subtree is open again (to nothing: its
 *                     endpoint is gone). Returns how many sandboxes.
 *
 * Every close has its end; two cascades of one subtree may overlap. */

#include <stddef.h>

#include "src/core/context.h"

void dm_cascade_close(struct dm_context *ctx, const char *principal);
/* id: the sandbox or run whose subtree it is, for the log. */
size_t dm_cascade_end(struct dm_context *ctx, const char *principal, const char *id);

#endif
