/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/core/children.h"
#include "src/core/egress.h"
#include "src/core/exec.h"
#include "src/core/images.h"
#include "src/core/idmap.h"
#include "src/core/activity.h"
#include "src/core/admission.h"
#include "src/core/claim.h"
#include "src/core/launch.h"
#include "src/core/ledger.h"
#include "src/core/limits.h"
#include "src/core/ownership.h"
#include "src/core/runner.h"
#include "src/core/sandbox-internal.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

/* Where a sandbox's inputs are mounted (src/core/idmap.c): beside its workspace,
 * "<id>.in" for "<id>.workspace". */
static void stage_dir(const struct dm_sandbox *sb, char *buf, size_t len)
{
        size_t n = strlen(sb->workspace), suffix = strlen(".workspace");

        if (n > suffix && strcmp(sb->workspace + n - suffix, ".workspace") == 0)
                snprintf(buf, len, "%.*s.in", (int)(n - suffix), sb->workspace);
        else
                snprintf(buf, len, "%.4000s.in", sb->workspace);
}

/* The workspace and the inputs' mounts, once the container is gone. */
static void remove_scratch(const struct dm_sandbox *sb)
{
        char stage[PATH_MAX + 16];

        stage_dir(sb, stage, sizeof(stage));
        dm_idmap_remove(stage);
        dm_remove_tree(sb->workspace);
}

/* ---- lifecycle ------------------------------------------------------------------ */

/* An engine that expires sandboxes itself may grant less than asked (an
 * OpenSandbox server's max_sandbox_timeout_seconds): the record, and so the
 * result's expires_at, say what was granted. */
static void ttl_granted(struct dm_backend *b, struct dm_sandbox *sb)
{
        struct dm_container_info info;
        struct dm_error e = { 0 };

        if (b->ops->inspect(b, sb->container, &info, &e) < 0)
                return;
        if (info.expires_unix > 0 && info.expires_unix < sb->expires_at) {
                log_warning("sandbox %s: the engine grants a TTL of %lld s, not %lld s: it expires at %lld", sb->id,
                            (long long)(info.expires_unix - sb->created_at), (long long)sb->ttl_s,
                            (long long)info.expires_unix);
                sb->ttl_s = info.expires_unix - sb->created_at;
                sb->expires_at = info.expires_unix;
        }
        dm_container_info_release(&info);
}

/* A new sandbox's record before its container: id, image, policy, its
 * workspace (made here; its output directory is the claim's), owner,
 * TTL. */
static int sandbox_identity(struct dm_context *ctx, const struct dm_sandbox_create *req,
                            const struct dm_image_info *img, const char *dir, struct dm_sandbox *sb,
                            struct dm_error *err)
{
        unsigned char rnd[6];

        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                return dm_error_set(err, -EIO, "no randomness for a sandbox id");
        snprintf(sb->id, sizeof(sb->id), "sbx-%02x%02x%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5]);
        snprintf(sb->image, sizeof(sb->image), "%s", img->name);
        snprintf(sb->egress, sizeof(sb->egress), "%s", req->egress ? req->egress : "none");
        for (size_t i = 0, len = 0; req->allow && req->allow[i]; i++) {
                int n = snprintf(sb->allow + len, sizeof(sb->allow) - len, "%s%s", i ? "," : "", req->allow[i]);
                if (n < 0 || (size_t)n >= sizeof(sb->allow) - len)
                        return dm_error_set(err, -E2BIG, "too many allow entries");
                len += (size_t)n;
        }
        /* Beside the record, not in the state dir: it must outlive this
         * server (and /run) as long as the sandbox does. */
        if ((size_t)snprintf(sb->workspace, sizeof(sb->workspace), "%.4000s/%s.workspace", dir, sb->id) >=
            sizeof(sb->workspace))
                return dm_error_set(err, -ENAMETOOLONG, "output root too long");
        sb->ttl_s = req->ttl_s > 0 ? req->ttl_s : DM_SANDBOX_TTL_DEFAULT;
        snprintf(sb->principal, sizeof(sb->principal), "%s", req->principal ? req->principal : "local");
        /* A nested principal's sandbox lives with the endpoint that made
         * it, in this server: a later one removes it once this one is gone
         * (dm_sandbox_sweep_nested). */
        if (dm_principal_depth(sb->principal) > 0)
                snprintf(sb->server, sizeof(sb->server), "%s", ctx->owner);
        sb->nested = req->nested;
        sb->created_at = dm_wall_ms() / 1000;
        sb->expires_at = sb->created_at + sb->ttl_s;
        if (mkdir(sb->workspace, 0700) < 0)
                return dm_error_set(err, -errno, "cannot create '%s': %s", sb->workspace, strerror(errno));
        return 0;
}

/* Its container, through the one launch sequence: idle (sleep), with the
 * caller's environment, its directories and the claim's inputs. */
static int sandbox_launch(struct dm_context *ctx, const struct dm_sandbox_create *req, const char *dir,
                          struct dm_claimed *c, const struct dm_image_build_watch *watch, struct dm_sandbox *sb,
                          struct dm_launch *lx, struct dm_error *err)
{
        static const char *const sleep_argv[] = { "sleep", "infinity", NULL };
        /* No owner label: a persistent sandbox belongs to no server, so no
         * server's exit or orphan sweep removes it. */
        char label_id[64], idmap_stage[PATH_MAX + 16];
        const char *labels[] = { label_id, DM_LABEL_KIND "=sandbox", NULL };
        int r;

        snprintf(label_id, sizeof(label_id), "demesne.sandbox=%s", sb->id);
        struct dm_container_spec spec = {
                .name = sb->id,
                .argv = sleep_argv,
                .env = req->env,
                .workdir = "/out",
                .labels = labels,
                .ttl_s = sb->ttl_s,
        };
        dm_launch_harden(ctx, &spec);
        if (dm_egress_backend_open(c->b, req->policy)) {
                spec.network_mode = "open";
        } else if (!dm_backend_can(c->b, DM_CAP_HOST_NETNS)) {
                spec.egress = req->policy; /* the backend enforces it or refuses */
                spec.egress_package_hosts = dm_egress_package_hosts();
                spec.egress_reach = req->reach;
        }
        stage_dir(sb, idmap_stage, sizeof(idmap_stage));
        if (c->shim_mode == 1)
                snprintf(sb->shim_dir, sizeof(sb->shim_dir), "%.4000s/%s.shim", dir, sb->id);
        r = dm_claim_launch(c, &spec,
                            &(struct dm_claim_launch){ .workspace = sb->workspace,
                                                       .shim_dir = sb->shim_dir,
                                                       .idmap_stage = idmap_stage,
                                                       .watch = watch },
                            lx, err);
        if (r < 0)
                return r;
        snprintf(sb->container, sizeof(sb->container), "%s", lx->container);
        if (dm_backend_can(c->b, DM_CAP_TTL))
                ttl_granted(c->b, sb);
        return 0;
}

/* Once its record is written: the shim and the network go to the list
 * execs look in (host and *egress taken), and the ledger has it. */
static void sandbox_register(struct dm_context *ctx, const struct dm_sandbox *sb, const struct dm_image_info *img,
                             struct dm_shimhost *host, struct dm_egress_run **egress,
                             const struct dm_limits_target *target)
{
        struct dm_error lerr = { 0 };

        if (host)
                dm_sandbox_shim_keep(ctx, sb->id, host, egress, target);
        /* No server owns it: never "interrupted", live until destroyed. */
        if (dm_ledger_begin(ctx->cfg.output_root, NULL,
                            &(struct dm_ledger_run){ .run_id = sb->id,
                                                     .kind = "sandbox",
                                                     .image = img->name,
                                                     .principal = sb->principal,
                                                     .output_dir = sb->output_dir },
                            &lerr) < 0)
                log_warning("sandbox %s: %s", sb->id, lerr.msg);
}

int dm_sandbox_create(struct dm_context *ctx, const struct dm_sandbox_create *req, struct dm_sandbox *sb,
                      struct dm_error *err)
{
        struct dm_egress_run *egress = NULL;
        bool need_net = dm_egress_needed(req->policy);
        struct dm_launch lx = { 0 };
        const struct dm_image_build_watch watch = { .on_line = req->on_message,
                                                    .userdata = req->userdata,
                                                    .cancel = req->cancel };
        struct dm_activity_event activity = { .kind = "sandbox", .egress = dm_egress_names[req->policy->mode] };
        struct dm_claimed c;
        char dir[PATH_MAX];
        int r;

        memset(sb, 0, sizeof(*sb));
        /* The claim (src/core/claim.h): admission first (the caller's
         * reservation, or a slot now), the inputs, the backend, the shim,
         * the image; its slot goes to the record once it is written, and
         * back on every other way out. */
        r = dm_claim(ctx,
                     &(struct dm_claim_request){ .principal = req->principal,
                                                 .reserved = req->reserved,
                                                 .cancel = req->cancel,
                                                 .image = req->image,
                                                 .image_ref = req->image_ref,
                                                 .files = req->files,
                                                 .dirs = req->dirs,
                                                 .granted = req->granted,
                                                 .n_extra = 2,
                                                 .watch = &watch,
                                                 .activity = &activity },
                     &c, err);
        if (r < 0)
                return r;
        if (dm_egress_backend_open(c.b, req->policy) || !dm_backend_can(c.b, DM_CAP_HOST_NETNS))
                need_net = false; /* the backend's own network: spec.network_mode or spec.egress below */
        if (need_net && c.shim_mode != 1)
                r = dm_error_set(err, -ENOTSUP,
                                 "egress other than 'none' needs demesne-shim, which is off "
                                 "(DEMESNE_SHIM=off) or which this backend cannot mount");
        if (r >= 0)
                r = dm_sandbox_dir(ctx, dir, sizeof(dir), err);
        if (r >= 0)
                r = sandbox_identity(ctx, req, c.img, dir, sb, err);
        if (r >= 0 && (r = dm_claim_outdir(&c, sb->id, err)) >= 0)
                snprintf(sb->output_dir, sizeof(sb->output_dir), "%s", c.outdir);
        if (r >= 0)
                r = sandbox_launch(ctx, req, dir, &c, &watch, sb, &lx, err);
        /* The network before any command runs. */
        if (r >= 0 && need_net)
                r = dm_sandbox_net(ctx, sb, req->policy, &lx.launched, &egress, err);
        /* Kept as parsed: this server never reads it back from the record. */
        if (r >= 0)
                r = dm_sandbox_policy_keep(ctx, sb->id, req->policy, err);
        if (r >= 0)
                r = dm_sandbox_record_write(ctx, sb, err);
        if (r >= 0) {
                /* The claim is kept: it counts by its slot until it is
                 * destroyed (by a call, its TTL, a cascade:
                 * dm_sandbox_destroy releases the key). */
                dm_claim_keep(&c, sb->id);
                sandbox_register(ctx, sb, c.img, TAKE_PTR(lx.host), &egress, &lx.launched.target);
                free(lx.container);
        }
        dm_egress_stop(ctx, egress, false);
        if (r < 0 && sb->id[0]) {
                struct dm_error e2 = { 0 };

                dm_launch_undo(c.b, &lx);
                dm_sandbox_policy_forget(ctx, sb->id);
                if (sb->shim_dir[0])
                        dm_shimhost_remove_dir(sb->shim_dir, &e2);
                remove_scratch(sb);
                dm_error_wrap(err, "create sandbox");
        }
        dm_release(&c, r < 0 ? DM_RELEASE_UNDO : DM_RELEASE_KEPT);
        return r;
}

/* Word for word what an unknown id gets. */
static int not_theirs(const char *id, struct dm_error *err)
{
        return dm_error_set(err, -ENOENT,
                            "unknown sandbox '%s': it was destroyed, expired, or never existed (sandbox_list shows "
                            "the live ones)",
                            id);
}

/* The sandboxes this server is destroying. A call that finds one's
 * container stopped would start it again (dm_sandbox_get), and Podman,
 * between its kill and its removal, starts it and then drops it from its
 * records with its processes still running: a sandbox_list during a
 * sweep's or the TTL reaper's destroy left the container's conmon and
 * shim behind on rootless Podman. So a destroy is announced before the
 * engine is asked, and a start happens only while no destroy of that
 * sandbox is under way, under the same lock. */
struct dm_destroying {
        char id[DM_SANDBOX_ID_LEN];
        struct dm_destroying *next;
};

struct dm_sandboxes *dm_sandboxes_new(void)
{
        struct dm_sandboxes *s = calloc(1, sizeof(*s));

        if (!s)
                return NULL;
        pthread_mutex_init(&s->shim_lock, NULL);
        pthread_cond_init(&s->shim_changed, NULL);
        pthread_mutex_init(&s->destroy_lock, NULL);
        pthread_mutex_init(&s->ttl_lock, NULL);
        pthread_cond_init(&s->ttl_cond, NULL);
        pthread_mutex_init(&s->policy_lock, NULL);
        return s;
}

void dm_sandboxes_free(struct dm_sandboxes *s)
{
        if (!s)
                return;
        pthread_mutex_destroy(&s->shim_lock);
        pthread_cond_destroy(&s->shim_changed);
        pthread_mutex_destroy(&s->destroy_lock);
        pthread_mutex_destroy(&s->ttl_lock);
        pthread_cond_destroy(&s->ttl_cond);
        dm_sandbox_policies_free(s);
        pthread_mutex_destroy(&s->policy_lock);
        free(s);
}

static bool destroying_locked(struct dm_context *ctx, const char *id)
{
        for (struct dm_destroying *d = ctx->sandboxes->destroying; d; d = d->next)
                if (strcmp(d->id, id) == 0)
                        return true;
        return false;
}

/* Waits for a start of id under way, then marks it. */
static void destroy_begin(struct dm_context *ctx, struct dm_destroying *d, const char *id)
{
        snprintf(d->id, sizeof(d->id), "%s", id);
        pthread_mutex_lock(&ctx->sandboxes->destroy_lock);
        d->next = ctx->sandboxes->destroying;
        ctx->sandboxes->destroying = d;
        pthread_mutex_unlock(&ctx->sandboxes->destroy_lock);
}

static void destroy_end(struct dm_context *ctx, struct dm_destroying *d)
{
        pthread_mutex_lock(&ctx->sandboxes->destroy_lock);
        for (struct dm_destroying **p = &ctx->sandboxes->destroying; *p; p = &(*p)->next)
                if (*p == d) {
                        *p = d->next;
                        break;
                }
        pthread_mutex_unlock(&ctx->sandboxes->destroy_lock);
}

int dm_sandbox_get(struct dm_context *ctx, const char *id, const char *principal, struct dm_sandbox *sb,
                   struct dm_error *err)
{
        struct dm_container_info info = { 0 };
        struct dm_backend *b;
        int r;

        r = dm_sandbox_record_read(ctx, id, sb, err);
        if (r < 0)
                return r;
        if (principal && !dm_principal_covers(principal, sb->principal))
                return not_theirs(id, err);
        /* The hot path: a shim that holds a connection open to this server
         * is PID 1 of a running container, so the engine need not be asked. */
        if (dm_sandbox_shim_ready(ctx, id))
                return 0;
        r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                return r;
        r = b->ops->inspect(b, sb->container, &info, err);
        if (r == -ENOENT) {
                struct dm_error e2 = { 0 };

                dm_sandbox_shim_forget(ctx, id);
                if (sb->shim_dir[0])
                        dm_shimhost_remove_dir(sb->shim_dir, &e2);
                dm_sandbox_record_remove(ctx, id);
                remove_scratch(sb);
                return dm_error_set(err, -ENOENT,
                                    "unknown sandbox '%s': its container is gone (destroyed, expired, or removed "
                                    "by hand)",
                                    id);
        }
        if (r < 0)
                return r;
        /* Paused by hand (or by a server that died before its record
         * said so): what the engine says wins. */
        if (strcmp(info.status, "paused") == 0)
                sb->paused = true;
        else if (!info.running) {
                pthread_mutex_lock(&ctx->sandboxes->destroy_lock);
                if (destroying_locked(ctx, id)) {
                        pthread_mutex_unlock(&ctx->sandboxes->destroy_lock);
                        dm_container_info_release(&info);
                        return dm_error_set(err, -ENOENT, "unknown sandbox '%s': it is being destroyed", id);
                }
                /* Stopped by an engine restart, say: bring it back, state intact. */
                log_info("sandbox %s was stopped; starting it again", id);
                /* Its new shim has a new pid: take the socket anew. */
                dm_sandbox_shim_forget(ctx, id);
                r = b->ops->start(b, sb->container, err);
                pthread_mutex_unlock(&ctx->sandboxes->destroy_lock);
                /* Its host inputs were staged for its first start only. */
                if (r < 0)
                        dm_error_wrap(err,
                                      "start sandbox '%s' again (one made with files or directories "
                                      "cannot be restarted: destroy it and create it anew)",
                                      id);
        }
        dm_container_info_release(&info);
        return r;
}

int dm_sandbox_check_owner(struct dm_context *ctx, const char *id, const char *principal, struct dm_error *err)
{
        struct dm_sandbox sb;
        int r = dm_sandbox_record_read(ctx, id, &sb, err);

        if (r < 0)
                return r;
        /* Another principal cannot even learn that the sandbox exists. */
        return dm_principal_covers(principal, sb.principal) ? 0 : not_theirs(id, err);
}

/* How far a sandbox's recorded expiry may lag behind its last use before an
 * exec writes the record again: a tenth of its TTL, at most 30 s, none
 * under 10 s. The TTL reaper adds the same before it destroys, so a sandbox
 * goes between ttl and ttl + slack after its last call, never before. */
static int64_t touch_slack(int64_t ttl_s)
{
        int64_t s = ttl_s / 10;

        return s > 30 ? 30 : s;
}

int dm_sandbox_touch(struct dm_context *ctx, struct dm_sandbox *sb, struct dm_error *err)
{
        int64_t before = sb->expires_at, now = dm_wall_ms() / 1000;
        struct dm_backend *b;
        int r;

        r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                return dm_error_wrap(err, "refresh the TTL of sandbox '%s'", sb->id);
        /* Most execs into a busy sandbox write nothing (a record write is
         * most of the server's own time per exec). A backend that expires
         * sandboxes itself gets every renewal. */
        if (!(dm_backend_can(b, DM_CAP_TTL) && b->ops->renew) && now + sb->ttl_s - before < touch_slack(sb->ttl_s))
                return 0;
        sb->expires_at = now + sb->ttl_s;
        /* A backend that expires sandboxes itself must hear of it too; it
         * only takes a later time (two execs in one second give the same). */
        if (sb->expires_at > before && dm_backend_can(b, DM_CAP_TTL) && b->ops->renew)
                r = b->ops->renew(b, sb->container, sb->expires_at, err);
        if (r < 0)
                return dm_error_wrap(err, "refresh the TTL of sandbox '%s'", sb->id);
        {
                struct dm_sandbox now_rec;

                /* A pause since sb was read stays recorded (src/core/sandbox-pause.c). */
                if (dm_sandbox_record_read(ctx, sb->id, &now_rec, NULL) == 0)
                        sb->paused = now_rec.paused;
        }
        return dm_sandbox_record_write(ctx, sb, err);
}

static void env_free(char **env)
{
        for (size_t i = 0; env && env[i]; i++)
                free(env[i]);
        free(env);
}

/* Through the sandbox's shim when this server holds it (cached; the
 * egress proxy's environment over the caller's, a nested sandbox's
 * endpoint's over both), else the engine's exec API. */
static int exec_in(struct dm_context *ctx, struct dm_backend *b, const struct dm_sandbox *sb,
                   struct dm_exec_request *xreq, struct dm_exec_sink *sink, struct dm_exec_result *xres,
                   struct dm_error *err)
{
        struct dm_exec_target t = {
                .backend = b,
                .container = sb->container,
                .filter_exec = sb->shim_dir[0] != '\0',
        };
        struct dm_sandbox_shim *e = NULL;
        _cleanup_free_ const char **env = NULL;
        char **nested_env = NULL;
        int r;

        if (sb->shim_dir[0]) {
                r = dm_sandbox_shim_get(ctx, b, sb, &e, err);
                if (r == -EBUSY) {
                        log_debug("sandbox %s: its shim is held by another server (%s)", sb->id, err->msg);
                        dm_error_clear(err);
                        e = NULL;
                } else if (r < 0)
                        return dm_error_wrap(err, "reach sandbox '%s'", sb->id);
        }
        if (e)
                t.shim = e->host;
        /* A nested sandbox's endpoint, in the network namespace of the
         * container as this server reached it; or, on a backend whose
         * sandboxes are elsewhere (OpenSandbox), behind the remote
         * listener: made again for a sandbox taken over from an earlier
         * server, whose endpoint went with it. */
        if (sb->nested && ctx->before_sandbox_exec) {
                if (e && e->target.pid > 0)
                        ctx->before_sandbox_exec(ctx, sb, e->target.pid, &nested_env);
                else if (!e && !dm_backend_can(b, DM_CAP_HOST_NETNS))
                        ctx->before_sandbox_exec(ctx, sb, 0, &nested_env);
        }
        if ((e && e->egress) || nested_env) {
                env = dm_exec_env((const char *const *const[]){ xreq->env, dm_egress_env(e ? e->egress : NULL),
                                                                (const char *const *)nested_env },
                                  3);
                if (!env) {
                        if (e)
                                dm_sandbox_shim_put(ctx, e);
                        env_free(nested_env);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                xreq->env = env;
        }
        r = dm_exec(&t, xreq, sink, xres, err);
        if (e)
                dm_sandbox_shim_put(ctx, e);
        env_free(nested_env);
        return r;
}

static int sandbox_exec(struct dm_context *ctx, const struct dm_sandbox *sb, const struct dm_sandbox_exec *req,
                        struct dm_sandbox_exec_result *res, struct dm_error *err)
{
        const char *argv[] = { "/bin/bash", "-c", req->command, NULL };
        struct dm_exec_request xreq = {
                .argv = argv,
                .env = req->env,
                .cwd = req->workdir ? req->workdir : "/out",
                .stdin_data = req->stdin_data,
                .stdin_len = req->stdin_len,
                .timeout_s = req->timeout_s,
        };
        struct dm_exec_sink sink;
        struct dm_exec_result xres;
        struct dm_backend *b;
        int64_t t0 = dm_now_ms();
        struct dm_limits_watch *watch = NULL;
        int r;

        memset(res, 0, sizeof(*res));
        /* Its shim is frozen too: the command would wait for its timeout. */
        r = dm_sandbox_check_awake(sb, err);
        if (r >= 0)
                r = dm_launch_check_workdir(xreq.cwd, err);
        if (r < 0)
                return r;
        /* A sandbox made while the shim was off has no filter to put its
         * commands under: it runs them only while the operator still says
         * so. */
        if (!sb->shim_dir[0] && !ctx->cfg.shim_off)
                return dm_error_set(err, -EPERM,
                                    "sandbox '%s' was created without demesne-shim (DEMESNE_SHIM=off), so its "
                                    "commands would run without the seccomp filter: destroy it and create a new "
                                    "one, or set DEMESNE_SHIM=off",
                                    sb->id);
        r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                return r;
        if (req->stdin_len && !dm_backend_can(b, DM_CAP_EXEC_STDIN))
                return dm_error_set(err, -EOPNOTSUPP,
                                    "the %s backend cannot pass stdin to a command: write the "
                                    "input to a file with sandbox_upload and redirect from it",
                                    b->ops->name);
        {
                /* The sandbox's cap covers all it holds, not one command's
                 * share: a command may still free space in a full one. */
                const char *trees[] = { sb->output_dir, sb->workspace, NULL };
                struct dm_limits_watch_conf wc = {
                        .trees = trees,
                        .cap = ctx->cfg.disk_max,
                        .cancel_fd = req->cancel ? req->cancel->fd : -1,
                        .limit_fd = -1,
                };

                struct dm_limits_target *t = calloc(1, sizeof(*t));
                int64_t used = -1;

                /* Known since the shim was taken: no engine round trip. What
                 * the sandbox held at the last command's end is the baseline
                 * while it is under the cap (the baseline only matters over
                 * it): no walk before the command either. */
                if (t && dm_sandbox_shim_target(ctx, sb->id, t, &used)) {
                        wc.baseline_known = used >= 0 && used < wc.cap;
                        wc.baseline = used;
                        r = dm_limits_watch_target(t, &wc, &watch, err);
                } else
                        r = dm_limits_watch_container(b, sb->container, &wc, &watch, err);
                free(t);
                if (r < 0)
                        return r;
                xreq.stop_fd = dm_limits_watch_fd(watch);
        }
        if (dm_exec_sink_init(&sink, (size_t)ctx->cfg.output_cap) < 0) {
                dm_limits_watch_stop(watch);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        sink.on_progress = req->on_progress;
        sink.userdata = req->userdata;
        r = exec_in(ctx, b, sb, &xreq, &sink, &xres, err);
        if (r < 0)
                goto out;
        res->exit_code = xres.exit_code;
        res->timed_out = xres.timed_out;
        /* A limit, not the caller, stopped it: its sentence is the error. */
        if (dm_limits_watch_tripped(watch, err) ||
            (!xres.cancelled && dm_limits_fsize_hit(ctx->cfg.disk_max, res->exit_code, err))) {
                r = err->code;
                dm_sandbox_shim_note_usage(ctx, sb->id, -1);
                goto out;
        }
        /* Nothing else writes to it until the next command but an upload,
         * which says so (dm_sandbox_usage_changed). */
        dm_sandbox_shim_note_usage(ctx, sb->id, xres.cancelled ? -1 : dm_limits_watch_usage(watch));
        res->duration_ms = dm_now_ms() - t0;
        res->stdout_text = dm_exec_sink_text(&sink, 1, &res->stdout_len, &res->stdout_truncated);
        res->stderr_text = dm_exec_sink_text(&sink, 2, &res->stderr_len, &res->stderr_truncated);
        if (!res->stdout_text || !res->stderr_text) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto out;
        }
        /* Cancelled: the result so far, as a run's (dm_run). */
        if (xres.cancelled)
                r = dm_error_set(err, -ECANCELED, "cancelled");
out:
        dm_limits_watch_stop(watch);
        dm_exec_sink_release(&sink);
        if (r < 0 && r != -ECANCELED)
                dm_sandbox_exec_result_release(res);
        return r;
}

int dm_sandbox_exec(struct dm_context *ctx, const struct dm_sandbox *sb, const struct dm_sandbox_exec *req,
                    struct dm_sandbox_exec_result *res, struct dm_error *err)
{
        int r;

        dm_context_busy(ctx, true);
        r = sandbox_exec(ctx, sb, req, res, err);
        dm_context_busy(ctx, false);
        return r;
}

void dm_sandbox_exec_result_release(struct dm_sandbox_exec_result *r)
{
        free(r->stdout_text);
        free(r->stderr_text);
        memset(r, 0, sizeof(*r));
}

int dm_sandbox_destroy(struct dm_context *ctx, const char *id, struct dm_error *err)
{
        struct dm_destroying mark;
        struct dm_sandbox sb;
        struct dm_backend *b;
        int r;

        r = dm_sandbox_record_read(ctx, id, &sb, err);
        if (r < 0)
                return r;
        r = dm_context_backend(ctx, &b, err);
        if (r >= 0) {
                destroy_begin(ctx, &mark, id);
                r = b->ops->destroy(b, sb.container, err);
                destroy_end(ctx, &mark);
        }
        if (r < 0)
                return dm_error_wrap(err, "destroy sandbox '%s'", id);
        dm_sandbox_shim_forget(ctx, id);
        if (sb.shim_dir[0] && dm_shimhost_remove_dir(sb.shim_dir, err) < 0) {
                log_warning("sandbox %s: %s", id, err->msg);
                dm_error_clear(err);
        }
        dm_sandbox_record_remove(ctx, id);
        remove_scratch(&sb);
        /* (A sandbox made before the ledger existed has no entry.) */
        r = dm_ledger_end(ctx->cfg.output_root, id, "destroyed", false, 0,
                          sb.created_at > 0 ? dm_wall_ms() - sb.created_at * 1000 : 0, NULL, err);
        if (r < 0 && r != -ENOENT)
                log_warning("sandbox %s: %s", id, err->msg);
        dm_error_clear(err);
        dm_activity_record(ctx->cfg.state_dir, ctx->cfg.activity_days,
                           &(struct dm_activity_event){ .event = "end", .id = id, .status = "destroyed" });
        /* What it left goes to the owner; it can no longer write there. */
        dm_owner_return(ctx->cfg.output_root, sb.output_dir);
        log_info("sandbox %s destroyed (output directory '%s' kept)", id, sb.output_dir);
        /* A nested principal's: a copy in its parent's output too. */
        if (dm_principal_depth(sb.principal) > 0)
                dm_children_collect(ctx, id);
        if (ctx->after_sandbox_destroy)
                ctx->after_sandbox_destroy(ctx, id);
        return 0;
}

json_object *dm_sandbox_describe(const struct dm_sandbox *sb)
{
        json_object *o = json_object_new_object();
        char t[32];

        json_object_object_add(o, "sandbox_id", json_object_new_string(sb->id));
        json_object_object_add(o, "image", json_object_new_string(sb->image));
        json_object_object_add(o, "egress", json_object_new_string(sb->egress));
        dm_time_format(sb->created_at, t, sizeof(t));
        json_object_object_add(o, "created_at", json_object_new_string(t));
        dm_time_format(sb->expires_at, t, sizeof(t));
        json_object_object_add(o, "expires_at", json_object_new_string(t));
        json_object_object_add(o, "output_dir", json_object_new_string(sb->output_dir));
        return o;
}

struct list_walk {
        json_object *a;
        const char *principal;
};

static void list_one(struct dm_context *ctx, const char *id, void *ud)
{
        struct list_walk *w = ud;
        struct dm_sandbox sb;
        struct dm_error err = { 0 };

        /* Another principal's sandbox is not even touched (dm_sandbox_get
         * checks the record's principal before it may adopt it). */
        if (dm_sandbox_get(ctx, id, w->principal, &sb, &err) == 0)
                json_object_array_add(w->a, dm_sandbox_describe(&sb));
}

json_object *dm_sandbox_list(struct dm_context *ctx, const char *principal)
{
        struct list_walk w = { .a = json_object_new_array(), .principal = principal };

        dm_sandbox_record_each(ctx, list_one, &w);
        return w.a;
}

struct ids_walk {
        const char *principal;
        bool exact;
        char (*ids)[DM_SANDBOX_ID_LEN];
        size_t max, n;
};

static void ids_one(struct dm_context *ctx, const char *id, void *ud)
{
        struct ids_walk *w = ud;
        struct dm_sandbox sb;
        struct dm_error err = { 0 };

        if (dm_sandbox_record_read(ctx, id, &sb, &err) < 0 ||
            !(w->exact ? strcmp(sb.principal, w->principal) == 0 : dm_principal_covers(w->principal, sb.principal)))
                return;
        if (w->n < w->max)
                snprintf(w->ids[w->n], DM_SANDBOX_ID_LEN, "%s", sb.id);
        w->n++;
}

size_t dm_sandbox_ids(struct dm_context *ctx, const char *principal, bool exact, char (*ids)[DM_SANDBOX_ID_LEN],
                      size_t max)
{
        struct ids_walk w = { .principal = principal, .exact = exact, .ids = ids, .max = max };

        if (principal && principal[0])
                dm_sandbox_record_each(ctx, ids_one, &w);
        return w.n;
}

int dm_sandbox_pid(struct dm_context *ctx, const struct dm_sandbox *sb, int *ret_pid, struct dm_error *err)
{
        struct dm_container_info info = { 0 };
        struct dm_backend *b;
        int r = dm_context_backend(ctx, &b, err);

        if (r < 0)
                return r;
        r = b->ops->inspect(b, sb->container, &info, err);
        if (r >= 0 && (!info.running || info.pid <= 0))
                r = dm_error_set(err, -ESRCH, "sandbox '%s' is not running", sb->id);
        if (r >= 0)
                *ret_pid = info.pid;
        dm_container_info_release(&info);
        return r;
}

static void reap_one(struct dm_context *ctx, const char *id, void *ud)
{
        struct dm_sandbox sb;
        struct dm_error err = { 0 };

        if (dm_sandbox_record_read(ctx, id, &sb, &err) < 0 ||
            sb.expires_at + touch_slack(sb.ttl_s) > dm_wall_ms() / 1000)
                return;
        if (dm_sandbox_destroy(ctx, id, &err) == 0) {
                log_info("sandbox %s expired (TTL %lld s) and was destroyed", id, (long long)sb.ttl_s);
                (*(int *)ud)++;
        } else if (err.code == -ENOENT) {
                dm_sandbox_record_remove(ctx, id);
        } else {
                log_warning("sandbox %s expired but could not be destroyed: %s", id, err.msg);
        }
}

int dm_sandbox_reap_expired(struct dm_context *ctx)
{
        int n = 0;

        dm_sandbox_record_each(ctx, reap_one, &n);
        return n;
}

/* ---- what a dead server's nested endpoints made ------------------------------------ */

struct nested_walk {
        struct dm_context *ctx;
        char (*ids)[DM_SANDBOX_ID_LEN];
        unsigned *depth;
        size_t n, max;
};

static void nested_one(struct dm_context *ctx, const char *id, void *ud)
{
        struct nested_walk *w = ud;
        struct dm_sandbox sb;
        struct dm_error err = { 0 };

        /* Made by a nested principal of a server that is gone: its
         * endpoint went with that server. (Records without a server are
         * not ours to judge.) */
        if (dm_sandbox_record_read(ctx, id, &sb, &err) < 0 || dm_principal_depth(sb.principal) == 0 || !sb.server[0] ||
            strcmp(sb.server, ctx->owner) == 0 || dm_owner_alive(sb.server, ctx->owner) || w->n >= w->max)
                return;
        snprintf(w->ids[w->n], DM_SANDBOX_ID_LEN, "%s", id);
        w->depth[w->n++] = dm_principal_depth(sb.principal);
}

int dm_sandbox_sweep_nested(struct dm_context *ctx)
{
        struct nested_walk w = { .ctx = ctx, .max = 4096 };
        struct dm_error err = { 0 };
        int destroyed = 0;

        w.ids = calloc(w.max, sizeof(*w.ids));
        w.depth = calloc(w.max, sizeof(*w.depth));
        if (w.ids && w.depth)
                dm_sandbox_record_each(ctx, nested_one, &w);
        /* The deepest first: each is copied into its parent while that
         * one is still there, up to the top sandbox that stays. */
        for (unsigned d = DM_PRINCIPAL_MAX; d > 0 && w.n; d--)
                for (size_t i = 0; i < w.n; i++) {
                        if (w.depth[i] != d)
                                continue;
                        if (dm_sandbox_destroy(ctx, w.ids[i], &err) == 0) {
                                destroyed++;
                                log_info("sandbox %s: made through the MCP endpoint of a server that is gone; "
                                         "destroyed",
                                         w.ids[i]);
                        } else if (err.code == -ENOENT)
                                dm_sandbox_record_remove(ctx, w.ids[i]);
                        else
                                log_warning("sandbox %s: made through the endpoint of a server that is gone, but "
                                            "could not be destroyed: %s",
                                            w.ids[i], err.msg);
                        dm_error_clear(&err);
                }
        free(w.ids);
        free(w.depth);
        return destroyed;
}
