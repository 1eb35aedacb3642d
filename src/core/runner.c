/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/core/admission.h"
#include "src/core/children.h"
#include "src/core/egress.h"
#include "src/core/exec.h"
#include "src/core/images.h"
#include "src/core/idmap.h"
#include "src/core/launch.h"
#include "src/core/pool.h"
#include "src/core/ledger.h"
#include "src/core/limits.h"
#include "src/core/ownership.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

void dm_run_result_release(struct dm_run_result *res)
{
        free(res->run_id);
        free(res->output_dir);
        free(res->stdout_text);
        free(res->stderr_text);
        memset(res, 0, sizeof(*res));
}

static size_t count(const char *const *v)
{
        size_t n = 0;
        while (v && v[n])
                n++;
        return n;
}

static int open_log(int dirfd, const char *name, const char *dir, struct dm_error *err)
{
        /* O_EXCL: the directory is new and ours; nothing may be there yet,
         * and a link would be an attack. */
        int fd = dm_io_open_beneath(dirfd, name, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0)
                return dm_error_set(err, fd, "cannot create '%s/%s': %s", dir, name, dm_io_strerror(fd));
        return fd;
}

static void strv_free(char **v)
{
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

/* The command through demesne-shim, once the shim is up (l: what
 * dm_launch_shim_ready said, long ago for a warm container) and the
 * network in place. No container of a run has req->env as its own. */
static int run_shim(struct dm_context *ctx, struct dm_exec_target *t, const struct dm_launched *l,
                    const struct dm_exec_request *xreq, struct dm_exec_sink *sink, const struct dm_run_request *req,
                    struct dm_run_result *res, struct dm_exec_result *xres, struct dm_error *err)
{
        struct dm_exec_request with_env = *xreq;
        struct dm_egress_run *egress = NULL;
        char **extra = NULL, **started = NULL;
        _cleanup_free_ const char **env = NULL;
        int r;

        /* The network, before the command can send anything. */
        if (dm_egress_needed(req->policy) || req->vendor_port) {
                r = dm_egress_start_vendor(ctx, req->policy, res->run_id, ctx->owner, l->pid, l->package_hosts,
                                           res->output_dir, req->vendor_port, &egress, err);
                if (r < 0)
                        return r;
        }
        if (egress && req->on_network &&
            (r = req->on_network(req->network_userdata, dm_egress_net(egress), res->output_dir, &extra, err)) < 0) {
                strv_free(extra);
                dm_egress_stop(ctx, egress, false);
                return r;
        }
        if (req->on_started && (r = req->on_started(req->started_userdata, res->run_id, l->pid, &started, err)) < 0) {
                strv_free(extra);
                dm_egress_stop(ctx, egress, false);
                return r;
        }
        /* Bottom to top: the caller's environment, the egress proxy's, the
         * agent's (its NO_PROXY wins), the hook's. */
        env = dm_exec_env((const char *const *const[]){ req->env, dm_egress_env(egress), (const char *const *)extra,
                                                        (const char *const *)started },
                          4);
        if (!env) {
                strv_free(extra);
                strv_free(started);
                dm_egress_stop(ctx, egress, false);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        with_env.env = env;
        r = dm_exec(t, &with_env, sink, xres, err);
        /* The pair goes with the container's namespace when the reaper
         * removes it; only the proxy listener goes now. */
        dm_egress_stop(ctx, egress, false);
        strv_free(extra);
        strv_free(started);
        return r < 0 ? dm_error_wrap(err, "run the command") : 0;
}

static int watch_limits(struct dm_context *ctx, struct dm_backend *b, const char *id,
                        const struct dm_limits_target *known, const char *outdir, const char *workspace,
                        const struct dm_run_request *req, int *stop_fd, struct dm_limits_watch **ret,
                        struct dm_error *err)
{
        const char *trees[] = { outdir, workspace, NULL };
        struct dm_limits_watch_conf wc = {
                .trees = trees,
                .cap = ctx->cfg.disk_max,
                .cancel_fd = *stop_fd,
                .limit_fd = req->limit ? req->limit->fd : -1,
        };
        int r;

        r = known ? dm_limits_watch_target(known, &wc, ret, err) : dm_limits_watch_container(b, id, &wc, ret, err);
        if (r < 0)
                return r;
        *stop_fd = dm_limits_watch_fd(*ret);
        return 0;
}

/* How the run ended, in its ledger entry: r is dm_run's answer. */
static void ledger_end(struct dm_context *ctx, const char *run_id, int r, const struct dm_run_result *res,
                       int64_t wall_ms, const struct dm_error *err)
{
        struct dm_error lerr = { 0 };
        bool ran = r == 0 || r == -ECANCELED;
        const char *status = r == -ECANCELED       ? "cancelled"
                             : r < 0               ? "failed"
                             : res->timed_out      ? "timed_out"
                             : res->exit_code == 0 ? "succeeded"
                                                   : "failed";

        /* The command's own time when it ran; else until it failed. */
        if (dm_ledger_end(ctx->cfg.output_root, run_id, status, ran, res->exit_code,
                          ran && res->duration_ms > 0 ? res->duration_ms : wall_ms,
                          r < 0 && r != -ECANCELED ? err->msg : NULL, &lerr) < 0)
                log_warning("run %s: %s", run_id, lerr.msg);
}

/* How a cold run's container is confined: by the shim (its filter on
 * every process: a run's only command goes through it, never the engine's
 * exec API), or by the backend's own network; -ENOTSUP when egress is
 * asked for and only the shim could put it in place. */
static int confine(struct dm_backend *b, const struct dm_run_request *req, bool shim, struct dm_container_spec *spec,
                   struct dm_error *err)
{
        if (shim) {
                spec->own_seccomp = true;
                return 0;
        }
        if (dm_egress_backend_open(b, req->policy) && !req->vendor_port) {
                spec->network_mode = "open"; /* the backend's own network */
        } else if (!dm_backend_can(b, DM_CAP_HOST_NETNS) && !req->vendor_port) {
                spec->egress = req->policy; /* the backend enforces it or refuses */
                spec->egress_package_hosts = dm_egress_package_hosts();
        } else if (dm_egress_needed(req->policy) || req->vendor_port) {
                /* Without the shim a command could run before the network is
                 * in place: refuse rather than run it with less. */
                return dm_error_set(err, -ENOTSUP,
                                    "egress other than 'none' needs demesne-shim, which is off "
                                    "(DEMESNE_SHIM=off) or which this backend cannot mount");
        }
        return 0;
}

static int run(struct dm_context *ctx, const struct dm_run_request *req, struct dm_run_result *res,
               struct dm_error *err)
{
        const struct dm_image_info *img;
        struct dm_backend *b;
        struct dm_exec_sink sink = { .log_fd = { -1, -1, -1 } };
        struct dm_exec_result xres = { 0 };
        int stop_fd = req->cancel ? req->cancel->fd : -1; /* the caller's cancel, then a limit's too */
        bool sink_made = false;
        struct dm_limits_watch *limits = NULL;
        size_t n_in = count(req->files) + count(req->dirs);
        _cleanup_free_ struct dm_mount *mounts = NULL;
        _cleanup_free_ char **owned = NULL;
        struct dm_inputs_stage stage = { .n = 0 };
        size_t n_mounts = 0, n_owned = 0;
        char run_id[64], label_owner[160], label_run[128], label_kind[64], outdir[PATH_MAX], scratch[PATH_MAX];
        char workspace[PATH_MAX + 16], shimdir[PATH_MAX + 16];
        struct dm_shimhost *host = NULL;
        const char *labels[5], *bash_argv[4];
        _cleanup_close_ int dirfd = -1;
        struct dm_stream *stream = NULL;
        static const char *const idle_argv[] = { "sleep", "infinity", NULL };
        char *id = NULL;
        bool scratch_made = false, exec_only = false, outdir_made = false;
        struct dm_pool_entry *warm = NULL;
        const struct dm_image_build_watch watch = { .on_line = req->on_message,
                                                    .userdata = req->userdata,
                                                    .cancel = req->cancel };
        _cleanup_free_ struct dm_launch *cold = NULL; /* a cold container, once launched */
        const struct dm_launched *launched_ref = NULL;
        char idmap_stage[PATH_MAX + 16];
        int64_t t0, ledger_t0 = 0;
        int r, shim_mode;

        memset(res, 0, sizeof(*res));
        if (req->timeout_s <= 0 || req->timeout_s > ctx->cfg.max_timeout_s)
                return dm_error_set(err, -EINVAL, "timeout_seconds must be between 1 and %lld",
                                    (long long)ctx->cfg.max_timeout_s);
        r = dm_image_lookup(req->image ? req->image : DM_IMAGE_DEFAULT, &img, err);
        if (r < 0)
                return r;

        mounts = calloc(n_in + 4 + req->n_mounts, sizeof(*mounts));
        owned = calloc(3 * n_in + 1, sizeof(*owned));
        if (!mounts || !owned)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_inputs_add(ctx, req->files, DM_PATH_FILE, mounts, &n_mounts, owned, &n_owned, &stage, err);
        if (r >= 0)
                r = dm_inputs_add(ctx, req->dirs, DM_PATH_DIR, mounts, &n_mounts, owned, &n_owned, &stage, err);
        if (r < 0)
                goto out;

        r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                goto out;
        /* No shim, no run, unless the operator turned it off by name:
         * before anything is made for the run. */
        shim_mode = dm_launch_shim_mode(ctx, b, err);
        if (shim_mode < 0) {
                r = shim_mode;
                goto out;
        }
        r = dm_image_require(b, img, ctx->cfg.images_autobuild, &watch, err);
        if (r < 0)
                goto out;

        bash_argv[0] = "/bin/bash";
        bash_argv[1] = "-c";
        bash_argv[2] = req->command;
        bash_argv[3] = NULL;
        /* A warm container when the run fits one (src/core/pool.h): its mounts
         * are fixed at create, so no host inputs or extra mounts; the
         * pool's image; the shim. */
        if (ctx->pool && shim_mode == 1 && dm_backend_can(b, DM_CAP_ATTACH) &&
            (!req->kind || strcmp(req->kind, "script") == 0)) {
                if (n_in || req->n_mounts || req->vendor_port)
                        log_info("run without a warm container: %s",
                                 n_in ? "host inputs are mounted at create" : "its mounts are made at create");
                else
                        warm = dm_pool_claim(ctx->pool, img->name);
        }
        if (warm) {
                snprintf(run_id, sizeof(run_id), "%s", warm->run_id);
                snprintf(outdir, sizeof(outdir), "%s", warm->outdir);
        } else {
                /* The output directory: made fresh, owned by the server, bound at /out. */
                if ((r = dm_run_id_new(run_id, sizeof(run_id))) < 0) {
                        dm_error_set(err, r, "cannot make a run id");
                        goto out;
                }
                /* 0700: what a sandbox leaves is its owner's alone, even before
                 * it is given back (dm_owner_give_back). */
                r = dm_mkdir_p(ctx->cfg.output_root, 0700, err);
                if (r < 0)
                        goto out;
                snprintf(outdir, sizeof(outdir), "%s/%s", ctx->cfg.output_root, run_id);
                if (mkdir(outdir, 0700) < 0) {
                        r = dm_error_set(err, -errno, "cannot create output directory '%s': %s", outdir,
                                         strerror(errno));
                        goto out;
                }
        }
        outdir_made = true;
        ledger_t0 = dm_now_ms();
        {
                struct dm_ledger_run lr = { .run_id = run_id,
                                            .kind = req->ledger_kind ? req->ledger_kind
                                                    : req->kind      ? req->kind
                                                                     : "script",
                                            .image = img->name,
                                            .principal = req->principal,
                                            .job_id = req->job_id,
                                            .parent_run_id = req->parent_run_id,
                                            .output_dir = outdir };
                struct dm_error lerr = { 0 };

                if (dm_ledger_begin(ctx->cfg.output_root, ctx->owner, &lr, &lerr) < 0)
                        log_warning("run %s: %s", run_id, lerr.msg);
        }
        res->run_id = strdup(run_id);
        res->output_dir = strdup(outdir);
        dirfd = open(outdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dirfd < 0 || !res->run_id || !res->output_dir) {
                r = dm_error_set(err, -errno, "cannot open output directory '%s': %s", outdir, strerror(errno));
                goto out;
        }
        if ((r = dm_exec_sink_init(&sink, (size_t)ctx->cfg.output_cap)) < 0) {
                dm_error_set(err, r, "out of memory");
                goto out;
        }
        sink_made = true;
        sink.on_output = req->on_output;
        sink.on_progress = req->on_progress;
        sink.userdata = req->userdata;
        if ((r = sink.log_fd[1] = open_log(dirfd, "stdout.log", outdir, err)) < 0 ||
            (r = sink.log_fd[2] = open_log(dirfd, "stderr.log", outdir, err)) < 0)
                goto out;

        if (warm) {
                /* The run owns the warm container from here, as if it had
                 * made it: it goes with the run. */
                snprintf(scratch, sizeof(scratch), "%s", warm->scratch);
                snprintf(workspace, sizeof(workspace), "%s", warm->workspace);
                scratch_made = true;
                id = warm->container;
                warm->container = NULL;
                host = warm->host;
                warm->host = NULL;
                t0 = dm_now_ms();
                log_debug("run %s: a warm container", run_id);
                goto started;
        }
        /* scratch/workspace is the container's /workspace; scratch/shim,
         * which it cannot write, holds the shim's socket. */
        snprintf(scratch, sizeof(scratch), "%s/work/%s", ctx->cfg.state_dir, run_id);
        snprintf(workspace, sizeof(workspace), "%s/workspace", scratch);
        snprintf(shimdir, sizeof(shimdir), "%s/shim", scratch);
        r = dm_mkdir_p(scratch, 0700, err);
        if (r < 0)
                goto out;
        scratch_made = true;
        r = dm_mkdir_p(workspace, 0700, err);
        if (r < 0)
                goto out;

        mounts[n_mounts++] = (struct dm_mount){ .host = outdir, .target = "/out", .readonly = false };
        mounts[n_mounts++] = (struct dm_mount){ .host = workspace, .target = "/workspace", .readonly = false };
        for (size_t i = 0; i < req->n_mounts; i++)
                mounts[n_mounts++] = req->mounts[i];

        snprintf(label_owner, sizeof(label_owner), "%s", ctx->owner_label);
        snprintf(label_run, sizeof(label_run), "%s=%s", DM_LABEL_RUN, run_id);
        labels[0] = label_owner;
        labels[1] = label_run;
        snprintf(label_kind, sizeof(label_kind), "%s=%s", DM_LABEL_KIND, req->kind ? req->kind : "script");
        labels[2] = label_kind;
        labels[3] = ctx->root_label;
        labels[4] = NULL;

        struct dm_container_spec spec = {
                .name = run_id,
                .image = dm_image_ref(img),
                .argv = req->command ? bash_argv : req->argv,
                /* With the shim the caller's environment goes with the
                 * command, as on a warm container: PID 1 would read it
                 * (glibc's GLIBC_TUNABLES, say) before its filter is on. */
                .env = shim_mode == 1 ? NULL : req->env,
                .workdir = "/out",
                .mounts = mounts,
                .n_mounts = n_mounts,
                .labels = labels,
        };
        dm_launch_harden(ctx, &spec);
        /* Without attach (OpenSandbox) the container idles and the command
         * is an exec, whose exit code comes from the exec. */
        exec_only = !dm_backend_can(b, DM_CAP_ATTACH);
        if (exec_only) {
                spec.entrypoint = idle_argv;
                spec.argv = NULL;
                spec.env = NULL; /* the exec's, below */
                /* The backend's own expiry as a backstop: the command's
                 * limit plus time to make and remove the sandbox. */
                spec.ttl_s = req->timeout_s + 600;
        }
        r = confine(b, req, shim_mode == 1, &spec, err);
        if (r < 0)
                goto out;
        cold = malloc(sizeof(*cold));
        if (!cold) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto out;
        }
        /* Inputs the sandbox's root could not read otherwise: idmapped. */
        snprintf(idmap_stage, sizeof(idmap_stage), "%s/in", scratch);
        t0 = dm_now_ms();
        r = dm_launch_container(ctx, b,
                                &(struct dm_launch_request){
                                        .img = img,
                                        .spec = &spec,
                                        .mounts = mounts,
                                        .n_mounts = &n_mounts,
                                        .shim_dir = shim_mode == 1 ? shimdir : NULL,
                                        .idmap_stage = idmap_stage,
                                        .lend = (const char *const[]){ outdir, workspace, NULL },
                                        .stage = &stage,
                                        .attach = !exec_only,
                                        .watch = &watch,
                                },
                                cold, err);
        if (r < 0)
                goto out;
        /* The run owns them from here; its way out releases them. */
        id = cold->container;
        host = cold->host;
        stream = cold->stream;
        cold->container = NULL;
        launched_ref = host ? &cold->launched : NULL; /* its inspect is the disk watch's too */
started:
        if (warm)
                launched_ref = &warm->launched; /* its shim connected long ago (src/core/pool.c) */
        /* The disk cap's watch, from the command's start. */
        r = watch_limits(ctx, b, id, launched_ref ? &launched_ref->target : NULL, outdir, workspace, req, &stop_fd,
                         &limits, err);
        if (r < 0)
                goto out;
        {
                struct dm_exec_target t = {
                        .backend = b,
                        .container = id,
                        .shim = host,
                        .attached = stream,
                        .whole_container = true,
                };
                struct dm_exec_request xreq = {
                        .argv = req->command ? bash_argv : req->argv,
                        .env = exec_only ? req->env : NULL,
                        .cwd = "/out",
                        .timeout_s = req->timeout_s,
                        .stop_fd = stop_fd,
                };

                if (!host && req->on_started) {
                        r = dm_error_set(err, -ENOTSUP,
                                         "this run needs demesne-shim (its hook runs before the command), which is "
                                         "off (DEMESNE_SHIM=off) or which this backend cannot mount");
                        goto out;
                }
                /* Without attach (OpenSandbox) the command is an exec, whose
                 * exit code comes from the exec. */
                r = host ? run_shim(ctx, &t, launched_ref, &xreq, &sink, req, res, &xres, err)
                         : dm_exec(&t, &xreq, &sink, &xres, err);
                if (r < 0)
                        goto out;
                res->exit_code = xres.exit_code;
                res->timed_out = xres.timed_out;
                res->cancelled = xres.cancelled;
        }
        /* A limit, not the caller, stopped it: the run fails with the
         * limit's sentence (the logs so far stay in the output directory). */
        if (dm_limits_watch_tripped(limits, err) ||
            (!res->cancelled && dm_limits_fsize_hit(ctx->cfg.disk_max, res->exit_code, err))) {
                r = err->code;
                log_info("run %s: %s", run_id, err->msg);
                goto out;
        }
        res->duration_ms = dm_now_ms() - t0;
        res->stdout_bytes = dm_exec_sink_total(&sink, 1);
        res->stderr_bytes = dm_exec_sink_total(&sink, 2);
        res->stdout_text = dm_exec_sink_text(&sink, 1, &res->stdout_len, &res->stdout_truncated);
        res->stderr_text = dm_exec_sink_text(&sink, 2, &res->stderr_len, &res->stderr_truncated);
        if (!res->stdout_text || !res->stderr_text) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto out;
        }
        r = res->cancelled ? -ECANCELED : 0;
        if (r < 0)
                dm_error_set(err, r, "cancelled");

out:
        dm_limits_watch_stop(limits);
        if (stream)
                dm_stream_free(stream);
        /* The socket goes now; its directory with the scratch tree, after
         * the container. */
        dm_shimhost_free(host);
        dm_inputs_unstage(&stage);
        for (int i = 1; i <= 2; i++)
                if (sink.log_fd[i] >= 0)
                        close(sink.log_fd[i]);
        if (sink_made)
                dm_exec_sink_release(&sink);
        /* Now for the result, and again once the container is gone
         * (something it left running may still write). */
        if (outdir_made)
                dm_owner_return(ctx->cfg.output_root, outdir);
        if (id || scratch_made)
                /* The result does not depend on the removal: do it after. */
                dm_context_reap_slot(ctx, id, scratch_made ? strdup(scratch) : NULL,
                                     id && outdir_made ? strdup(outdir) : NULL, id ? dm_slot_ref(req->slot) : NULL);
        dm_pool_entry_free(warm);
        for (size_t i = 0; i < n_owned; i++)
                free(owned[i]);
        if (outdir_made)
                ledger_end(ctx, run_id, r, res, dm_now_ms() - ledger_t0, err);
        /* A nested principal's run: its output into its parent's too. */
        if (outdir_made && dm_principal_depth(req->principal) > 0 &&
            !(req->collect_later && (r == 0 || r == -ECANCELED)))
                dm_children_collect(ctx, run_id);
        if (r < 0 && r != -ECANCELED) {
                /* Keep the output directory (it may hold partial logs) but
                 * return no half-filled result. */
                dm_run_result_release(res);
        }
        return r;
}

int dm_run(struct dm_context *ctx, const struct dm_run_request *req, struct dm_run_result *res, struct dm_error *err)
{
        int r;

        dm_context_busy(ctx, true);
        r = run(ctx, req, res, err);
        dm_context_busy(ctx, false);
        return r;
}
