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

#include "src/core/activity.h"
#include "src/core/admission.h"
#include "src/core/children.h"
#include "src/core/claim.h"
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

/* A sandbox the backend expires itself lives the command's limit plus
 * this, to be made and removed. */
#define EXEC_ONLY_TTL_SLACK_S 600

void dm_run_result_release(struct dm_run_result *res)
{
        free(res->run_id);
        free(res->output_dir);
        free(res->stdout_text);
        free(res->stderr_text);
        memset(res, 0, sizeof(*res));
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
static const char *ledger_end(struct dm_context *ctx, const char *run_id, int r, const struct dm_run_result *res,
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
        return status;
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
                spec->egress_reach = req->reach;
        } else if (dm_egress_needed(req->policy) || req->vendor_port) {
                /* Without the shim a command could run before the network is
                 * in place: refuse rather than run it with less. */
                return dm_error_set(err, -ENOTSUP,
                                    "egress other than 'none' needs demesne-shim, which is off "
                                    "(DEMESNE_SHIM=off) or which this backend cannot mount");
        }
        return 0;
}

/* The journal's start line of a run: its fields, and argv as one line. */
struct run_activity {
        struct dm_activity_event ev;
        char argv[DM_ACTIVITY_COMMAND_MAX + 1];
};

/* A run from its claim to its release: what it holds. Claim
 * (src/core/claim.h): admission, the spend when asked, the inputs, image
 * and backend, then a warm container of the pool, or a fresh output
 * directory and the one launch sequence (src/core/launch.h); exec: the
 * command; release: the container to the reaper, the ledger's end, and
 * what the claim holds given back. */
struct run {
        struct dm_context *ctx;
        const struct dm_run_request *req;
        struct dm_image_build_watch watch;
        struct dm_claimed c;
        char run_id[64], scratch[PATH_MAX], workspace[PATH_MAX + 16];
        bool scratch_made, exec_only, sink_made;
        struct dm_pool_entry *warm;
        struct dm_launch *cold;
        char *container; /* ours: the reaper removes it */
        struct dm_shimhost *host;
        struct dm_stream *stream;
        const struct dm_launched *launched; /* the shim's, warm or cold */
        struct dm_exec_sink sink;
        int64_t t0, ledger_t0;
        struct run_activity activity;
};

/* A cold run's container, made for it: scratch/workspace is its
 * /workspace; scratch/shim, which it cannot write, holds the shim's
 * socket. */
static int run_launch(struct run *x, struct dm_error *err)
{
        static const char *const idle_argv[] = { "sleep", "infinity", NULL };
        const struct dm_run_request *req = x->req;
        struct dm_claimed *c = &x->c;
        char label_owner[160], label_run[128], label_kind[64], shimdir[PATH_MAX + 16], idmap_stage[PATH_MAX + 16];
        const char *labels[5], *bash_argv[] = { "/bin/bash", "-c", req->command, NULL };
        int r;

        snprintf(x->scratch, sizeof(x->scratch), "%s/work/%s", x->ctx->cfg.state_dir, x->run_id);
        snprintf(x->workspace, sizeof(x->workspace), "%s/workspace", x->scratch);
        snprintf(shimdir, sizeof(shimdir), "%s/shim", x->scratch);
        if ((r = dm_mkdir_p(x->scratch, 0700, err)) < 0)
                return r;
        x->scratch_made = true;
        if ((r = dm_mkdir_p(x->workspace, 0700, err)) < 0)
                return r;
        snprintf(label_owner, sizeof(label_owner), "%s", x->ctx->owner_label);
        snprintf(label_run, sizeof(label_run), "%s=%s", DM_LABEL_RUN, x->run_id);
        snprintf(label_kind, sizeof(label_kind), "%s=%s", DM_LABEL_KIND, req->kind ? req->kind : "script");
        labels[0] = label_owner;
        labels[1] = label_run;
        labels[2] = label_kind;
        labels[3] = x->ctx->root_label;
        labels[4] = NULL;

        struct dm_container_spec spec = {
                .name = x->run_id,
                .argv = req->command ? bash_argv : req->argv,
                /* With the shim the caller's environment goes with the
                 * command, as on a warm container: PID 1 would read it
                 * (glibc's GLIBC_TUNABLES, say) before its filter is on. */
                .env = c->shim_mode == 1 ? NULL : req->env,
                .workdir = "/out",
                .labels = labels,
        };
        dm_launch_harden(x->ctx, &spec);
        /* Without attach (OpenSandbox) the container idles and the command
         * is an exec, whose exit code comes from the exec. */
        x->exec_only = !dm_backend_can(c->b, DM_CAP_ATTACH);
        if (x->exec_only) {
                spec.entrypoint = idle_argv;
                spec.argv = NULL;
                spec.env = NULL; /* the exec's */
                /* The backend's own expiry as a backstop: the command's
                 * limit plus time to make and remove the sandbox. */
                spec.ttl_s = req->timeout_s + EXEC_ONLY_TTL_SLACK_S;
        }
        r = confine(c->b, req, c->shim_mode == 1, &spec, err);
        if (r >= 0 && !(x->cold = malloc(sizeof(*x->cold))))
                r = dm_error_set(err, -ENOMEM, "out of memory");
        if (r < 0)
                return r;
        /* Inputs the sandbox's root could not read otherwise: idmapped. */
        snprintf(idmap_stage, sizeof(idmap_stage), "%s/in", x->scratch);
        x->t0 = dm_now_ms();
        r = dm_claim_launch(c, &spec,
                            &(struct dm_claim_launch){ .workspace = x->workspace,
                                                       .shim_dir = shimdir,
                                                       .idmap_stage = idmap_stage,
                                                       .extra = req->mounts,
                                                       .n_extra = req->n_mounts,
                                                       .attach = !x->exec_only,
                                                       .watch = &x->watch },
                            x->cold, err);
        if (r < 0)
                return r;
        /* The run owns them from here; its release lets them go. */
        x->container = TAKE_PTR(x->cold->container);
        x->host = x->cold->host;
        x->stream = x->cold->stream;
        x->launched = x->host ? &x->cold->launched : NULL; /* its inspect is the disk watch's too */
        return 0;
}

/* Its output directory: a warm container's when the run fits one (its
 * mounts are fixed at create, so no extra mounts; not an agent's), or
 * made fresh. */
static int run_outdir(struct run *x, struct dm_error *err)
{
        const struct dm_run_request *req = x->req;
        int r;

        x->warm = dm_claim_warm(&x->c,
                                (!req->kind || strcmp(req->kind, "script") == 0) && !req->n_mounts &&
                                        !req->vendor_port && !req->reach,
                                req->policy, req->timeout_s + EXEC_ONLY_TTL_SLACK_S);
        if (x->warm) {
                snprintf(x->run_id, sizeof(x->run_id), "%s", x->warm->run_id);
                return 0;
        }
        if ((r = dm_run_id_new(x->run_id, sizeof(x->run_id))) < 0)
                return dm_error_set(err, r, "cannot make a run id");
        return dm_claim_outdir(&x->c, x->run_id, err);
}

/* The claim: the output directory, the ledger's entry, the logs, then the
 * container (warm, or launched). */
static int run_claim(struct run *x, struct dm_run_result *res, struct dm_error *err)
{
        const struct dm_run_request *req = x->req;
        _cleanup_close_ int dirfd = -1;
        struct dm_error lerr = { 0 };
        int r;

        r = run_outdir(x, err);
        if (r < 0)
                return r;
        x->ledger_t0 = dm_now_ms();
        if (dm_ledger_begin(x->ctx->cfg.output_root, x->ctx->owner,
                            &(struct dm_ledger_run){ .run_id = x->run_id,
                                                     .kind = req->ledger_kind ? req->ledger_kind
                                                             : req->kind      ? req->kind
                                                                              : "script",
                                                     .image = x->c.img->name,
                                                     .principal = req->principal,
                                                     .job_id = req->job_id,
                                                     .parent_run_id = req->parent_run_id,
                                                     .output_dir = x->c.outdir },
                            &lerr) < 0)
                log_warning("run %s: %s", x->run_id, lerr.msg);
        res->run_id = strdup(x->run_id);
        res->output_dir = strdup(x->c.outdir);
        dirfd = open(x->c.outdir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dirfd < 0 || !res->run_id || !res->output_dir)
                return dm_error_set(err, -errno, "cannot open output directory '%s': %s", x->c.outdir, strerror(errno));
        if ((r = dm_exec_sink_init(&x->sink, (size_t)x->ctx->cfg.output_cap)) < 0)
                return dm_error_set(err, r, "out of memory");
        x->sink_made = true;
        x->sink.on_output = req->on_output;
        x->sink.on_progress = req->on_progress;
        x->sink.userdata = req->userdata;
        if ((r = x->sink.log_fd[1] = open_log(dirfd, "stdout.log", x->c.outdir, err)) < 0 ||
            (r = x->sink.log_fd[2] = open_log(dirfd, "stderr.log", x->c.outdir, err)) < 0)
                return r;
        if (!x->warm)
                return run_launch(x, err);
        /* The run owns the warm container from here, as if it had made it:
         * it goes with the run. Its shim connected long ago. */
        snprintf(x->scratch, sizeof(x->scratch), "%s", x->warm->scratch);
        snprintf(x->workspace, sizeof(x->workspace), "%s", x->warm->workspace);
        x->scratch_made = true;
        x->container = TAKE_PTR(x->warm->container);
        x->host = TAKE_PTR(x->warm->host);
        /* A remote one idles without a shim: its command is an exec. */
        x->exec_only = x->warm->remote;
        x->launched = x->host ? &x->warm->launched : NULL;
        x->t0 = dm_now_ms();
        log_debug("run %s: a warm container", x->run_id);
        return 0;
}

/* The command of a run on a remote backend with an on_started hook (a
 * nested script's endpoint, behind the remote listener): the hook with pid
 * 0, its variables over the caller's, then the exec. */
static int run_remote_hooked(struct run *x, struct dm_exec_target *t, struct dm_exec_request *xreq,
                             struct dm_run_result *res, struct dm_exec_result *xres, struct dm_error *err)
{
        const struct dm_run_request *req = x->req;
        _cleanup_free_ const char **env = NULL;
        char **started = NULL;
        int r;

        r = req->on_started(req->started_userdata, res->run_id, 0, &started, err);
        if (r < 0)
                return r;
        env = dm_exec_env((const char *const *const[]){ req->env, (const char *const *)started }, 2);
        if (!env) {
                strv_free(started);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        xreq->env = env;
        r = dm_exec(t, xreq, &x->sink, xres, err);
        xreq->env = NULL;
        strv_free(started);
        return r < 0 ? dm_error_wrap(err, "run the command") : 0;
}

/* The command, from its start to its result, under the disk cap's watch. */
static int run_exec(struct run *x, struct dm_run_result *res, struct dm_error *err)
{
        const struct dm_run_request *req = x->req;
        const char *bash_argv[] = { "/bin/bash", "-c", req->command, NULL };
        int stop_fd = req->cancel ? req->cancel->fd : -1; /* the caller's cancel, then a limit's too */
        struct dm_limits_watch *limits = NULL;
        struct dm_exec_result xres = { 0 };
        int r;

        r = watch_limits(x->ctx, x->c.b, x->container, x->launched ? &x->launched->target : NULL, x->c.outdir,
                         x->workspace, req, &stop_fd, &limits, err);
        if (r < 0)
                return r;
        struct dm_exec_target t = {
                .backend = x->c.b,
                .container = x->container,
                .shim = x->host,
                .attached = x->stream,
                .whole_container = true,
        };
        struct dm_exec_request xreq = {
                .argv = req->command ? bash_argv : req->argv,
                .env = x->exec_only ? req->env : NULL,
                .cwd = "/out",
                .timeout_s = req->timeout_s,
                .stop_fd = stop_fd,
        };
        if (!x->host && req->on_started && x->exec_only && !dm_backend_can(x->c.b, DM_CAP_HOST_NETNS))
                r = run_remote_hooked(x, &t, &xreq, res, &xres, err);
        else if (!x->host && req->on_started)
                r = dm_error_set(err, -ENOTSUP,
                                 "this run needs demesne-shim (its hook runs before the command), which is "
                                 "off (DEMESNE_SHIM=off) or which this backend cannot mount");
        /* Without attach (OpenSandbox) the command is an exec, whose exit
         * code comes from the exec. */
        else if (x->host)
                r = run_shim(x->ctx, &t, x->launched, &xreq, &x->sink, req, res, &xres, err);
        else
                r = dm_exec(&t, &xreq, &x->sink, &xres, err);
        if (r >= 0) {
                res->exit_code = xres.exit_code;
                res->timed_out = xres.timed_out;
                res->cancelled = xres.cancelled;
        }
        /* A limit, not the caller, stopped it: the run fails with the
         * limit's sentence (the logs so far stay in the output directory). */
        if (r >= 0 && (dm_limits_watch_tripped(limits, err) ||
                       (!res->cancelled && dm_limits_fsize_hit(x->ctx->cfg.disk_max, res->exit_code, err)))) {
                r = err->code;
                log_info("run %s: %s", x->run_id, err->msg);
        }
        dm_limits_watch_stop(limits);
        if (r < 0)
                return r;
        res->duration_ms = dm_now_ms() - x->t0;
        res->stdout_bytes = dm_exec_sink_total(&x->sink, 1);
        res->stderr_bytes = dm_exec_sink_total(&x->sink, 2);
        res->stdout_text = dm_exec_sink_text(&x->sink, 1, &res->stdout_len, &res->stdout_truncated);
        res->stderr_text = dm_exec_sink_text(&x->sink, 2, &res->stderr_len, &res->stderr_truncated);
        if (!res->stdout_text || !res->stderr_text)
                return dm_error_set(err, -ENOMEM, "out of memory");
        return res->cancelled ? dm_error_set(err, -ECANCELED, "cancelled") : 0;
}

/* What the run journal says of the run (src/core/activity.h). */
static void run_activity(const struct dm_run_request *req, struct run_activity *a)
{
        const char *kind = req->ledger_kind ? req->ledger_kind : req->kind ? req->kind : "script";
        size_t at = 0;

        a->argv[0] = '\0';
        for (size_t i = 0; !req->command && req->argv && req->argv[i] && at < sizeof(a->argv) - 1; i++) {
                int n = snprintf(a->argv + at, sizeof(a->argv) - at, "%s%s", i ? " " : "", req->argv[i]);
                at += n > 0 ? (size_t)n : 0;
        }
        a->ev = (struct dm_activity_event){
                .kind = strcmp(kind, "script") != 0 ? "agent"
                        : req->job_id               ? "job"
                                                    : "run",
                .command = req->command ? req->command : a->argv,
                .egress = req->policy ? dm_egress_names[req->policy->mode] : dm_egress_names[DM_EGRESS_NONE],
                .parent_id = req->parent_run_id,
                .job_id = req->job_id,
        };
}

/* The release, on every way out: r is the run's answer. */
static void run_release(struct run *x, int r, struct dm_run_result *res, struct dm_error *err)
{
        const struct dm_run_request *req = x->req;
        struct dm_context *ctx = x->ctx;
        struct dm_claimed *c = &x->c;

        if (x->stream)
                dm_stream_free(x->stream);
        /* The socket goes now; its directory with the scratch tree, after
         * the container. */
        dm_shimhost_free(x->host);
        for (int i = 1; i <= 2; i++)
                if (x->sink.log_fd[i] >= 0)
                        close(x->sink.log_fd[i]);
        if (x->sink_made)
                dm_exec_sink_release(&x->sink);
        if (x->container || x->scratch_made)
                /* The result does not depend on the removal: do it after.
                 * The reaper takes the strings. */
                dm_context_reap_slot(ctx, x->container, x->scratch_made ? strdup(x->scratch) : NULL,
                                     x->container && c->outdir_made ? strdup(c->outdir) : NULL,
                                     x->container ? dm_slot_ref(c->slot) : NULL);
        dm_pool_entry_free(x->warm);
        free(x->cold);
        if (c->outdir_made) {
                c->end_status = ledger_end(ctx, x->run_id, r, res, dm_now_ms() - x->ledger_t0, err);
                c->has_exit = r == 0 || r == -ECANCELED;
                c->exit_code = res->exit_code;
        }
        /* The caller's last figures (an agent's usage) into the ledger
         * before its spend goes back. */
        if (req->before_release)
                req->before_release(req->release_userdata);
        if (req->spend)
                *req->spend = NULL;
        /* The output to its owner, a nested principal's into its parent's
         * too (unless the caller writes more there after dm_run), the
         * spend, the slot (a job's reservation stays the job's). */
        dm_release(c, req->collect_later && (r == 0 || r == -ECANCELED) ? DM_RELEASE_NOCOPY : DM_RELEASE_END);
        /* Keep the output directory (it may hold partial logs) but return
         * no half-filled result. */
        if (r < 0 && r != -ECANCELED)
                dm_run_result_release(res);
}

static int run(struct dm_context *ctx, const struct dm_run_request *req, struct dm_run_result *res,
               struct dm_error *err)
{
        struct run x = {
                .ctx = ctx,
                .req = req,
                .watch = { .on_line = req->on_message, .userdata = req->userdata, .cancel = req->cancel },
                .sink = { .log_fd = { -1, -1, -1 } },
        };
        int r;

        memset(res, 0, sizeof(*res));
        run_activity(req, &x.activity);
        if (req->timeout_s <= 0 || req->timeout_s > ctx->cfg.max_timeout_s)
                return dm_error_set(err, -EINVAL, "timeout_seconds must be between 1 and %lld",
                                    (long long)ctx->cfg.max_timeout_s);
        r = dm_claim(ctx,
                     &(struct dm_claim_request){ .principal = req->principal,
                                                 .reserved = req->reserved,
                                                 .cancel = req->cancel,
                                                 .spend = req->spend != NULL,
                                                 .spend_usd = req->spend_usd,
                                                 .spend_root = req->spend_root,
                                                 .image = req->image,
                                                 .files = req->files,
                                                 .dirs = req->dirs,
                                                 .granted = req->granted,
                                                 .n_extra = 2 + req->n_mounts,
                                                 .watch = &x.watch,
                                                 .activity = &x.activity.ev },
                     &x.c, err);
        if (r < 0)
                return r;
        if (req->spend)
                *req->spend = x.c.spend;
        r = run_claim(&x, res, err);
        if (r >= 0)
                r = run_exec(&x, res, err);
        run_release(&x, r, res, err);
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
