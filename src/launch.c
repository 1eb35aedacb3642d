/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/launch.h"

#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "src/runner.h"

void dm_launch_harden(const struct dm_context *ctx, struct dm_container_spec *spec)
{
        spec->cap_add = dm_kept_caps;
        spec->memory_bytes = ctx->cfg.memory_bytes;
        spec->pids_limit = ctx->cfg.pids_limit;
        spec->nano_cpus = ctx->cfg.nano_cpus;
        /* One file can never pass the disk cap: a write or fallocate beyond
         * it fails at once (SIGXFSZ, else EFBIG) before any block is used.
         * The sum of all files is the disk watch's (src/limits.c). */
        spec->fsize = ctx->cfg.disk_max;
        spec->nofile = ctx->cfg.nofile;
        spec->nproc = ctx->cfg.nproc;
        spec->network_mode = "none";
        /* The engine's init reaps zombies; dm_launch_shim_prepare replaces
         * it with the shim, which does the same and more. */
        spec->init = true;
}

bool dm_launch_use_shim(const struct dm_backend *b)
{
        const char *v = getenv("DEMESNE_SHIM");

        if (!dm_backend_can(b, DM_CAP_SHIM))
                return false;
        if (v && strcmp(v, "off") == 0)
                return false;
        return dm_shim_binary_path() != NULL;
}

int dm_launch_shim_prepare(const char *dir, struct dm_container_spec *spec, struct dm_mount *mounts, size_t *n,
                           struct dm_shimhost **ret, struct dm_error *err)
{
        int r;

        r = dm_shimhost_new(dir, ret, err);
        if (r < 0)
                return dm_error_wrap(err, "listen for demesne-shim");
        dm_shimhost_mounts(*ret, &mounts[*n]);
        *n += 2;
        spec->mounts = mounts;
        spec->n_mounts = *n;
        /* Entrypoint, not Cmd: an image's own ENTRYPOINT must not wrap it. */
        spec->entrypoint = dm_shim_container_argv;
        spec->argv = NULL;
        spec->init = false;
        return 0;
}

int dm_launch_shim_ready(struct dm_backend *b, const char *container_id, struct dm_shimhost *h,
                         int64_t deadline_ms, struct dm_launched *ret, struct dm_error *err)
{
        struct dm_container_info info = { 0 };
        int r;

        r = b->ops->inspect(b, container_id, &info, err);
        if (r < 0)
                return dm_error_wrap(err, "inspect the container");
        if (!info.running) {
                dm_container_info_release(&info);
                return dm_error_set(err, -ESRCH, "the container stopped before demesne-shim connected");
        }
        /* A command in the container can reach the socket too: only PID 1
         * may pass for the shim. */
        dm_shimhost_set_peer_pid(h, info.pid);
        if (ret) {
                const char *key = "demesne.package-hosts=";

                ret->pid = info.pid;
                ret->package_hosts[0] = '\0';
                for (size_t i = 0; info.labels && info.labels[i]; i++)
                        if (strncmp(info.labels[i], key, strlen(key)) == 0)
                                snprintf(ret->package_hosts, sizeof(ret->package_hosts), "%s",
                                         info.labels[i] + strlen(key));
        }
        dm_container_info_release(&info);
        r = dm_shimhost_wait_ready(h, deadline_ms, err);
        return r < 0 ? dm_error_wrap(err, "wait for demesne-shim") : 0;
}
