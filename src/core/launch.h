/* SPDX-License-Identifier: MIT */
#ifndef DM_LAUNCH_H
#define DM_LAUNCH_H

/* Every container demesne starts, whoever asks (sandbox_script's runner,
 * persistent sandboxes, the warm pool), comes from one launch sequence:
 *   dm_launch_harden(ctx, &spec);          the limits every sandbox has
 *   the caller's choices on the spec       network, entrypoint, own_seccomp
 *   dm_launch_container(ctx, b, &req, &l)  user namespace, idmapped inputs,
 *                                          shim, create, lend, attach,
 *                                          start, the shim's hello
 *   dm_shim_exec(l.host, ...) as often as needed
 * Without the shim (only when the operator set DEMESNE_SHIM=off:
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

/* Whether the engine applies the memory and pids limits (cgroups); when
 * not, why (with the fix), and the shim applies them as it can: memory per
 * process (RLIMIT_DATA), processes per sandbox (counted by the shim). */
bool dm_launch_engine_limits(struct dm_context *ctx, char *why, size_t size);

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

/* The one launch sequence: every container demesne starts (a run's, a
 * persistent sandbox's, the pool's) comes from here. The caller makes the
 * spec (dm_launch_harden, then its own choices: network, entrypoint,
 * own_seccomp); this then, in order: the engine's user namespace, the
 * idmapped inputs, the shim's socket and mounts, create (the image built
 * again when the engine lost it), the directories lent to the container's
 * root, attach, start, and the shim's hello. On error nothing it made is
 * left (container removed, stream and socket closed) and err says which
 * step failed. */
struct dm_image_build_watch;
struct dm_image_info;
struct dm_inputs_stage;
struct dm_launch_request {
        const struct dm_image_info *img;
        struct dm_container_spec *spec;
        struct dm_mount *mounts; /* the spec's, with room for the shim's two */
        size_t *n_mounts;
        const char *shim_dir;          /* where the shim's socket goes; NULL: no shim */
        const char *idmap_stage;       /* NULL: no inputs to idmap */
        const char *const *lend;       /* NULL-terminated: the writable mounts' host sides */
        struct dm_inputs_stage *stage; /* unstaged once the container started (or failed); may be NULL */
        bool attach;                   /* without the shim: the output through the engine's attach */
        /* Where a build of an image the engine lost reports (when
         * DEMESNE_IMAGES_AUTOBUILD allows one); NULL: never built here. */
        const struct dm_image_build_watch *watch;
};
struct dm_launch {
        char *container;
        struct dm_shimhost *host;    /* with the shim, ready */
        struct dm_stream *stream;    /* with attach */
        struct dm_launched launched; /* with the shim: from the inspect that found its PID 1 */
};
int dm_launch_container(struct dm_context *ctx, struct dm_backend *b, const struct dm_launch_request *req,
                        struct dm_launch *ret, struct dm_error *err);
/* Removes the container now and closes what the launch opened. */
void dm_launch_undo(struct dm_backend *b, struct dm_launch *l);

/* The capabilities every sandbox keeps (all others are dropped). */
extern const char *const dm_kept_caps[];

#endif
