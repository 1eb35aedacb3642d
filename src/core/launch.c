/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/launch.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "src/core/idmap.h"
#include "src/core/images.h"
#include "src/core/inputs.h"
#include "src/core/limits.h"
#include "src/core/ownership.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

/* What package managers and archive tools need, and nothing that reaches
 * the network stack, devices or the kernel's keyrings. */
const char *const dm_kept_caps[] = {
        "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", NULL,
};

void dm_launch_harden(const struct dm_context *ctx, struct dm_container_spec *spec)
{
        spec->cap_add = dm_kept_caps;
        spec->memory_bytes = ctx->cfg.memory_bytes;
        spec->pids_limit = ctx->cfg.pids_limit;
        spec->nano_cpus = ctx->cfg.nano_cpus;
        /* One file can never pass the disk cap: a write or fallocate beyond
         * it fails at once (SIGXFSZ, else EFBIG) before any block is used.
         * The sum of all files is the disk watch's (src/core/limits.c). */
        spec->fsize = ctx->cfg.disk_max;
        spec->nofile = ctx->cfg.nofile;
        spec->nproc = ctx->cfg.nproc;
        spec->network_mode = "none";
        /* The engine's init reaps zombies; dm_launch_shim_prepare replaces
         * it with the shim, which does the same and more. */
        spec->init = true;
}

int dm_launch_shim_mode(const struct dm_context *ctx, const struct dm_backend *b, struct dm_error *err)
{
        const char *bin;

        /* The operator's choice, by name: the only way to run without. */
        if (ctx->cfg.shim_off)
                return 0;
        if (!dm_backend_can(b, DM_CAP_SHIM))
                return dm_error_set(err, -ENOTSUP,
                                    "the %s backend cannot run demesne-shim, so commands would run without its "
                                    "seccomp filter; set DEMESNE_SHIM=off to accept the backend's own profile",
                                    b->ops->name);
        bin = dm_shim_binary_find(ctx->cfg.shim_path);
        if (!bin || access(bin, X_OK) < 0)
                return dm_shim_binary_missing(bin, err);
        return 1;
}

bool dm_launch_use_shim(const struct dm_context *ctx, const struct dm_backend *b)
{
        struct dm_error err = { 0 };

        return dm_launch_shim_mode(ctx, b, &err) == 1;
}

int dm_launch_check_workdir(const char *dir, struct dm_error *err)
{
        if (!dir || dir[0] != '/')
                return dm_error_set(err, -EINVAL, "the working directory must be an absolute path in the sandbox");
        /* "/proc/self/fd/3", "//proc", "/out/../proc": the runc
         * CVE-2024-21626 pattern, where a working directory under
         * /proc/self/fd reaches a directory outside the container through an
         * fd the runtime leaked. The shim also checks the directory it lands
         * in; this covers the engine's exec API too, whose runtime resolves
         * the path before anything of ours runs. */
        if (dm_shim_path_under_proc(dir))
                return dm_error_set(err, -EPERM,
                                    "the working directory '%s' is under /proc, which is refused: a path there can "
                                    "lead outside the sandbox",
                                    dir);
        return 0;
}

bool dm_launch_engine_limits(struct dm_context *ctx, char *why, size_t size)
{
        struct dm_backend *b;
        struct dm_userns u = { 0 };
        struct dm_error err = { 0 };
        bool rootless;

        if (dm_context_backend(ctx, &b, &err) < 0 || !dm_backend_can(b, DM_CAP_HOST_NETNS))
                return true; /* not ours to judge: the backend's server applies its own */
        rootless = b->ops->userns && b->ops->userns(b, &u, &err) == 0 && u.kind == DM_USERNS_ROOTLESS;
        return dm_limits_cgroup_applies(rootless, why, size);
}

/* The shim's command line: with the limits the engine cannot apply, which
 * the shim applies instead (src/shim/shim.c). Decided once per server: the
 * engine's mode and the host's cgroups do not change under it. */
static const char *const *shim_argv(const struct dm_context *ctx)
{
        static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        static bool decided;
        static char data[32], pids[32], nofile[32], fsize[32], nproc[32];
        static const char *argv[14];

        pthread_mutex_lock(&lock);
        if (!decided) {
                char why[512];
                size_t n = 0;

                argv[n++] = DM_SHIM_BIN_PATH;
                /* The operator's switch for every sandbox (a sandbox's own
                 * is DEMESNE_SHIM_WARM=0 in its environment). */
                if (ctx->cfg.shim_warm_off)
                        argv[n++] = "--no-warm";
                /* Rootless Podman's Docker-compatible API ignores
                 * HostConfig.Ulimits (measured on 4.3: a container asked
                 * for nofile 1000 gets the user's 20000), so the shim lowers
                 * RLIMIT_NOFILE and RLIMIT_FSIZE itself, whatever the
                 * engine did. */
                if (ctx->cfg.nofile > 0) {
                        snprintf(nofile, sizeof(nofile), "%lld", (long long)ctx->cfg.nofile);
                        argv[n++] = "--rlimit-nofile";
                        argv[n++] = nofile;
                }
                /* The same for the disk cap's RLIMIT_FSIZE (the host's watch
                 * thread holds the total either way). */
                if (ctx->cfg.disk_max > 0) {
                        snprintf(fsize, sizeof(fsize), "%lld", (long long)ctx->cfg.disk_max);
                        argv[n++] = "--rlimit-fsize";
                        argv[n++] = fsize;
                }
                /* The callers' context; const only in this signature. */
                if (!dm_launch_engine_limits((struct dm_context *)ctx, why, sizeof(why))) {
                        log_info("memory and pids limits by demesne-shim: %s", why);
                        if (ctx->cfg.memory_bytes > 0) {
                                snprintf(data, sizeof(data), "%lld", (long long)ctx->cfg.memory_bytes);
                                argv[n++] = "--rlimit-data";
                                argv[n++] = data;
                        }
                        /* The kernel's own bound on a fork bomb where no pids
                         * cgroup is: RLIMIT_NPROC counts the tasks of the
                         * sandbox's uid in the engine's user namespace (all of
                         * this user's rootless sandboxes, Linux >= 5.14), which
                         * is what DEMESNE_NPROC means. The shim's count below
                         * then stops the sandbox at DEMESNE_PIDS_LIMIT. Without
                         * it a bomb grew until the user, then the machine, ran
                         * out of processes (seen in the rootless CI run). */
                        if (ctx->cfg.nproc > 0) {
                                snprintf(nproc, sizeof(nproc), "%lld", (long long)ctx->cfg.nproc);
                                argv[n++] = "--rlimit-nproc";
                                argv[n++] = nproc;
                        }
                        if (ctx->cfg.pids_limit > 0) {
                                snprintf(pids, sizeof(pids), "%lld", (long long)ctx->cfg.pids_limit);
                                argv[n++] = "--pids-max";
                                argv[n++] = pids;
                        }
                }
                argv[n] = NULL;
                decided = true;
        }
        pthread_mutex_unlock(&lock);
        return argv;
}

/* Listens for the shim in dir (made 0700, or taken over from an earlier
 * server), appends its two read-only mounts at mounts[*n] (the array needs
 * room for them) and makes the shim the container's entrypoint in place of
 * the engine's init. On error nothing is left listening. */
static int shim_prepare(const struct dm_context *ctx, const char *dir, struct dm_container_spec *spec,
                        struct dm_mount *mounts, size_t *n, struct dm_shimhost **ret, struct dm_error *err)
{
        int r;

        r = dm_shimhost_new(dir, dm_shim_binary_find(ctx->cfg.shim_path), ret, err);
        if (r < 0)
                return dm_error_wrap(err, "listen for demesne-shim");
        dm_shimhost_mounts(*ret, &mounts[*n]);
        *n += 2;
        spec->mounts = mounts;
        spec->n_mounts = *n;
        /* Entrypoint, not Cmd: an image's own ENTRYPOINT must not wrap it. */
        spec->entrypoint = shim_argv(ctx);
        spec->argv = NULL;
        spec->init = false;
        return 0;
}

int dm_launch_shim_ready(struct dm_backend *b, const char *container_id, struct dm_shimhost *h, int64_t deadline_ms,
                         struct dm_launched *ret, struct dm_error *err)
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
         * may pass for the shim. Without its pid, any peer could. */
        if (info.pid <= 0) {
                dm_container_info_release(&info);
                return dm_error_set(err, -EPROTO,
                                    "the engine did not say which process is the container's PID 1, "
                                    "so demesne-shim cannot be told from a command");
        }
        dm_shimhost_set_peer_pid(h, info.pid);
        if (ret) {
                const char *key = "demesne.package-hosts=";

                ret->pid = info.pid;
                dm_limits_target_from_info(&info, &ret->target);
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

/* Whether /etc/subuid and /etc/subgid both have a line for user (rootful
 * Podman's userns=auto takes its ranges from "containers"). */
static bool subids_present(const char *user)
{
        static const char *const files[] = { "/etc/subuid", "/etc/subgid" };
        size_t len = strlen(user);

        for (size_t i = 0; i < 2; i++) {
                char line[512];
                bool found = false;
                FILE *f = fopen(files[i], "re");

                while (f && !found && fgets(line, sizeof(line), f))
                        found = strncmp(line, user, len) == 0 && line[len] == ':';
                if (f)
                        fclose(f);
                if (!found)
                        return false;
        }
        return true;
}

int dm_launch_userns(struct dm_context *ctx, struct dm_backend *b, struct dm_container_spec *spec,
                     struct dm_launch_ids *ret, struct dm_error *err)
{
        struct dm_userns u;
        int r;

        memset(ret, 0, sizeof(*ret));
        ret->kind = DM_USERNS_ROOTLESS;
        if (!b->ops->userns)
                return 0;
        r = b->ops->userns(b, &u, err);
        if (r < 0)
                return r;
        ret->kind = u.kind;
        switch (u.kind) {
        case DM_USERNS_ROOTLESS: return 0;
        case DM_USERNS_HOST_ROOT:
                if (ctx->cfg.allow_host_root)
                        return 0;
                return dm_error_set(err, -EPERM,
                                    "refusing to run a sandbox whose root would be the host's root (%s): start "
                                    "dockerd with --userns-remap=default, or use Podman; "
                                    "DEMESNE_ALLOW_HOST_ROOT=1 runs it anyway",
                                    u.detail);
        case DM_USERNS_DAEMON:
                ret->uid = u.uid;
                ret->gid = u.gid;
                break;
        case DM_USERNS_PER_CONTAINER:
                if (!subids_present("containers"))
                        return dm_error_set(err, -EPERM,
                                            "rootful Podman needs host ids for the sandboxes' user namespaces: add "
                                            "'containers:2147483647:2147483648' to /etc/subuid and /etc/subgid "
                                            "(./setup.sh does)");
                spec->userns_mode = u.mode;
                break;
        }
        if (geteuid() != 0)
                return dm_error_set(err, -EPERM,
                                    "the engine maps a sandbox's root to host ids of its own (%s), and only root can "
                                    "give it the run's directories: run demesne as root, or use rootless Podman",
                                    u.detail);
        ret->lend = true;
        return 0;
}

/* After create, before start: gives dirs (NULL-terminated, each the host
 * side of a writable mount) to the container's root, and opens the shim's
 * socket (host may be NULL) to its group. Nothing when ids->lend is false. */
static int lend(struct dm_backend *b, const char *container_id, struct dm_launch_ids *ids, const char *const *dirs,
                struct dm_shimhost *host, struct dm_error *err)
{
        int r;

        if (!ids->lend)
                return 0;
        if (ids->kind == DM_USERNS_PER_CONTAINER) {
                r = b->ops->container_root(b, container_id, &ids->uid, &ids->gid, err);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; dirs && dirs[i]; i++) {
                r = dm_owner_lend(dirs[i], ids->uid, ids->gid, err);
                if (r < 0)
                        return r;
        }
        if (host) {
                r = dm_shimhost_lend(host, ids->gid, err);
                if (r < 0)
                        return r;
        }
        log_debug("container '%.12s': root is host uid %u, gid %u", container_id, ids->uid, ids->gid);
        return 0;
}

/* b->ops->create. A backend remembers the images it has seen, so a cold
 * run does not ask each time: when the engine says the image is gone
 * (removed since), it is required again (built when autobuild) and the
 * create tried once more. */
static int create(struct dm_backend *b, const struct dm_image_info *img, bool autobuild,
                  const struct dm_image_build_watch *watch, const struct dm_container_spec *spec, char **ret_id,
                  struct dm_error *err)
{
        int r = b->ops->create(b, spec, ret_id, err);

        if (r != -ENOENT || !dm_backend_can(b, DM_CAP_IMAGES))
                return r;
        log_info("%s (removed since it was last seen?): looking for the image again", err->msg);
        r = dm_image_require(b, img, autobuild, watch, err);
        return r < 0 ? r : b->ops->create(b, spec, ret_id, err);
}

/* After create: the directories to the container's root, the idmapped
 * inputs attached, the output stream, then start. */
static int launch_start(struct dm_backend *b, const struct dm_launch_request *req, struct dm_launch_ids *ids,
                        struct dm_idmap *im, struct dm_launch *l, struct dm_error *err)
{
        int r;

        /* Before attach: Podman sets the container up (its mounts) there. */
        r = lend(b, l->container, ids, req->lend, l->host, err);
        if (r >= 0 && ids->lend)
                r = dm_idmap_attach(im, ids->uid, ids->gid, err);
        if (r < 0)
                return r;
        if (req->attach && !l->host && (r = b->ops->attach(b, l->container, &l->stream, err)) < 0)
                return dm_error_wrap(err, "attach to the container");
        r = b->ops->start(b, l->container, err);
        return r < 0 ? dm_error_wrap(err, "start the container") : 0;
}

int dm_launch_container(struct dm_context *ctx, struct dm_backend *b, const struct dm_launch_request *req,
                        struct dm_launch *ret, struct dm_error *err)
{
        struct dm_container_spec *spec = req->spec;
        struct dm_launch_ids ids;
        struct dm_idmap im = { 0 };
        int r;

        memset(ret, 0, sizeof(*ret));
        r = dm_launch_userns(ctx, b, spec, &ids, err);
        /* Inputs the sandbox's root could not read otherwise: idmapped. */
        if (r >= 0 && ids.lend && req->idmap_stage)
                r = dm_idmap_prepare(&im, req->idmap_stage, req->mounts, *req->n_mounts, err);
        if (r >= 0 && req->shim_dir)
                r = shim_prepare(ctx, req->shim_dir, spec, req->mounts, req->n_mounts, &ret->host, err);
        if (r >= 0) {
                r = create(b, req->img, ctx->cfg.images_autobuild && req->watch,
                           req->watch ?: &(const struct dm_image_build_watch){ 0 }, spec, &ret->container, err);
                if (r < 0)
                        dm_error_wrap(err, "create the container");
        }
        if (r >= 0)
                r = launch_start(b, req, &ids, &im, ret, err);
        /* Started (or not): the container has its own copies of the
         * inputs' mounts. A restart by the engine finds the staged ones gone. */
        if (req->stage)
                dm_inputs_unstage(req->stage);
        dm_idmap_release(&im);
        if (r >= 0 && ret->host)
                r = dm_launch_shim_ready(b, ret->container, ret->host, dm_now_ms() + DM_SHIM_READY_MS, &ret->launched,
                                         err);
        if (r < 0)
                dm_launch_undo(b, ret);
        return r;
}

void dm_launch_undo(struct dm_backend *b, struct dm_launch *l)
{
        struct dm_error e = { 0 };

        if (l->stream)
                dm_stream_free(l->stream);
        if (l->container && b->ops->destroy(b, l->container, &e) < 0)
                log_warning("remove container '%.12s': %s", l->container, e.msg);
        dm_shimhost_free(l->host);
        free(l->container);
        memset(l, 0, sizeof(*l));
}
