/* SPDX-License-Identifier: MIT */
#ifndef DM_LAUNCH_H
#define DM_LAUNCH_H

/* What every demesne container shares, whoever starts it (sandbox_script's
 * runner, persistent sandboxes): the hardening, and demesne-shim as PID 1
 * with its socket in a directory the server owns.
 *
 * With the shim:
 *   dm_launch_harden(ctx, &spec);
 *   dm_launch_shim_prepare(ctx, dir, &spec, mounts, &n, &host, err);   before create
 *   create, start;
 *   dm_launch_shim_ready(b, id, host, deadline, err);             after start
 *   dm_shim_exec(host, ...) as often as needed
 * Without it (only when the operator set DEMESNE_SHIM=off:
 * dm_launch_shim_mode() 0) the caller uses the engine's attach or exec
 * API instead (exec alone on a backend without DM_CAP_ATTACH); when
 * dm_launch_shim_mode() fails, the caller runs nothing. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "src/core/context.h"
#include "src/core/limits.h"
#include "src/core/shimhost.h"

/* Capabilities kept, memory, pids, nofile and nproc limits, no network. */
void dm_launch_harden(const struct dm_context *ctx, struct dm_container_spec *spec);

/* Whether containers run demesne-shim. Security fails closed: 1 = yes;
 * 0 = no, because the operator set DEMESNE_SHIM=off; else an error that
 * says why there is no shim and names DEMESNE_SHIM=off as the way out (no
 * binary found, or a backend without DM_CAP_SHIM, as OpenSandbox): the
 * caller must then refuse to run anything. */
int dm_launch_shim_mode(const struct dm_context *ctx, const struct dm_backend *b, struct dm_error *err);
/* dm_launch_shim_mode() == 1, for callers that only choose defaults. */
bool dm_launch_use_shim(const struct dm_context *ctx, const struct dm_backend *b);

/* Refuses a command's working directory that is not absolute or lies under
 * /proc however spelled ("/proc/self/fd/3", "//proc", "/./proc"): -EINVAL
 * or -EPERM with the sentence in *err. */
int dm_launch_check_workdir(const char *dir, struct dm_error *err);

/* Listens for the shim in dir (made 0700, or taken over from an earlier
 * server), appends its two read-only mounts at mounts[*n] (the array needs
 * room for them) and makes the shim the container's entrypoint in place of
 * the engine's init. On error nothing is left listening. */
/* Whether the engine applies the memory and pids limits (cgroups); when
 * not, why (with the fix), and the shim applies them as it can: memory per
 * process (RLIMIT_DATA), processes per sandbox (counted by the shim). */
bool dm_launch_engine_limits(struct dm_context *ctx, char *why, size_t size);

int dm_launch_shim_prepare(const struct dm_context *ctx, const char *dir, struct dm_container_spec *spec,
                           struct dm_mount *mounts, size_t *n, struct dm_shimhost **ret, struct dm_error *err);

/* Whose ids a container runs with on the host, decided before create:
 * with a user namespace its root is not the host's root, and the run's
 * directories are lent to it between create and start. */
struct dm_launch_ids {
        enum dm_userns_kind kind;
        bool lend;         /* directories go to uid:gid before start */
        unsigned uid, gid; /* known at once for DM_USERNS_DAEMON, else after create */
};

/* Asks the engine (once) how it maps ids and sets spec->userns_mode. An
 * engine whose containers' root is the host's root is refused (-EPERM, the
 * message says how to fix it) unless DEMESNE_ALLOW_HOST_ROOT=1; so is a
 * mapping this process cannot lend directories to (not root), and rootful
 * Podman without "containers" lines in /etc/subuid and /etc/subgid. A
 * backend that runs containers elsewhere (no userns op) lends nothing. */
int dm_launch_userns(struct dm_context *ctx, struct dm_backend *b, struct dm_container_spec *spec,
                     struct dm_launch_ids *ret, struct dm_error *err);

/* After create, before start: gives dirs (NULL-terminated, each the host
 * side of a writable mount) to the container's root, and opens the shim's
 * socket (host may be NULL) to its group. Nothing when ids->lend is false. */
int dm_launch_lend(struct dm_backend *b, const char *container_id, struct dm_launch_ids *ids, const char *const *dirs,
                   struct dm_shimhost *host, struct dm_error *err);

/* Whether /etc/subuid and /etc/subgid both have a line for user (rootful
 * Podman's userns=auto takes its ranges from "containers"). */
bool dm_launch_subids_present(const char *user);

/* After the container started (or for a running one a later server adopts):
 * accepts only the container's PID 1 from now on and waits for its hello
 * until the monotonic deadline_ms. */
struct dm_launched {
        int pid;                        /* the container's PID 1 on the host */
        char package_hosts[2048];       /* the image's label demesne.package-hosts ("" = none) */
        struct dm_limits_target target; /* the disk watch's, from the same inspect */
};
int dm_launch_shim_ready(struct dm_backend *b, const char *container_id, struct dm_shimhost *h, int64_t deadline_ms,
                         struct dm_launched *ret, struct dm_error *err);

/* b->ops->create. A backend remembers the images it has seen, so a cold
 * run does not ask each time: when the engine says the image is gone
 * (removed since), it is required again (built when autobuild) and the
 * create tried once more. */
struct dm_image_info;
struct dm_image_build_watch;
int dm_launch_create(struct dm_backend *b, const struct dm_image_info *img, bool autobuild,
                     const struct dm_image_build_watch *watch, const struct dm_container_spec *spec, char **ret_id,
                     struct dm_error *err);

/* The capabilities every sandbox keeps (all others are dropped). */
extern const char *const dm_kept_caps[];

#endif
