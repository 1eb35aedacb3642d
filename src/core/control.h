/* SPDX-License-Identifier: MIT */
#ifndef DM_CORE_CONTROL_H
#define DM_CORE_CONTROL_H

/* A serve process's control socket, through which the activity view
 * (`demesne ui`, another process) asks the server that owns a job or a
 * sandbox to end it: <state dir>/control/<pid>.sock, a unix stream socket
 * (directory 0700, socket 0600), removed at exit. Only a peer of this
 * process's own uid (SO_PEERCRED) is heard; anything else is answered with
 * an error and closed. One JSON line per connection each way:
 *
 *   {"op":"cancel","id":"job-…"}    dm_jobs_cancel: the job and its tree
 *   {"op":"destroy","id":"sbx-…"}   dm_sandbox_destroy
 *
 * answered {"ok":true,"status":"cancelled"} or {"error":"…","code":404}.
 * The caller is the operator (the host principal): the same acts as
 * sandbox_cancel and sandbox_destroy, for any principal of this server. */

#include <json-c/json.h>
#include <sys/types.h>

#include "src/basic/error.h"

struct dm_context;
struct dm_control;

#define DM_CONTROL_DIR "control"
#define DM_CONTROL_LINE_MAX 1024 /* bytes of one request or answer line */

/* Acts on op ("cancel" or "destroy") and id in ctx, as the operator. An
 * answer object ({"ok":true,...} or {"error","code"}) in *ret, always. */
void dm_control_act(struct dm_context *ctx, const char *op, const char *id, json_object **ret);

/* Makes the socket under state_dir and a thread that answers it. A stale
 * socket of a dead pid is removed on the way. 0, or a negative errno with
 * err filled. */
int dm_control_start(struct dm_context *ctx, const char *state_dir, struct dm_control **ret, struct dm_error *err);
/* Stops the thread, removes the socket; NULL is fine. */
void dm_control_stop(struct dm_control *c);

/* Asks the server pid under state_dir: its answer object in *ret. -ENOENT
 * (or -ECONNREFUSED) when no such server listens, with err filled. */
int dm_control_request(const char *state_dir, pid_t pid, const char *op, const char *id, json_object **ret,
                       struct dm_error *err);

#endif
