/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/context.h"
#include "src/core/budget.h"
#include "src/core/context-internal.h"
#include "src/core/resources.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

/* Boot id + pid + start time tells a live owner from a dead one even after
 * pid reuse or a reboot: the orphan cleanup of a later server relies on it. */
static unsigned long long process_start_time(pid_t pid);

static void compute_owner(char *buf, size_t len)
{
        char boot[64] = "noboot";
        FILE *f;

        f = fopen("/proc/sys/kernel/random/boot_id", "re");
        if (f) {
                if (fgets(boot, sizeof(boot), f))
                        boot[strcspn(boot, "\n")] = '\0';
                fclose(f);
        }
        snprintf(buf, len, "%.8s-%d-%llu", boot, (int)getpid(), process_start_time(getpid()));
}

static unsigned long long process_start_time(pid_t pid)
{
        char path[64], stat[1024];
        unsigned long long start = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "re");
        if (!f)
                return 0;
        if (fgets(stat, sizeof(stat), f)) {
                /* Field 22; skip past the comm field, which may hold spaces. */
                char *p = strrchr(stat, ')');
                int field = 2;
                for (; p && *p && field < 22; p++)
                        if (*p == ' ')
                                field++;
                if (p)
                        start = strtoull(p, NULL, 10);
        }
        fclose(f);
        return start;
}

bool dm_owner_alive(const char *owner, const char *my_owner)
{
        char boot[16];
        int pid;
        unsigned long long start;

        if (sscanf(owner, "%15[^-]-%d-%llu", boot, &pid, &start) != 3 || pid <= 0)
                return true; /* not ours to judge: leave it alone */
        if (strncmp(owner, my_owner, strlen(boot)) != 0 || my_owner[strlen(boot)] != '-')
                return false; /* made before this boot */
        return process_start_time(pid) == start;
}

int dm_context_init(struct dm_context *ctx, struct dm_error *err)
{
        int r;

        memset(ctx, 0, sizeof(*ctx));
        r = dm_config_load(&ctx->cfg, err);
        if (r < 0)
                return r;
        /* The egress blocklist's process-wide part, before any thread reads it. */
        dm_blocked_init(&ctx->cfg.blocked);
        r = dm_allowed_roots_parse(ctx->cfg.allowed_paths, &ctx->roots, err);
        if (r >= 0) {
                /* Sandboxes write these trees: never an input. */
                const char *const forbidden[] = { ctx->cfg.output_root, "DEMESNE_OUTPUT_ROOT", ctx->cfg.state_dir,
                                                  "DEMESNE_STATE_DIR", NULL };

                r = dm_allowed_roots_protect(&ctx->roots, forbidden, ctx->cfg.home, ctx->cfg.allow_credential_paths,
                                             err);
                if (r < 0)
                        dm_allowed_roots_release(&ctx->roots);
        }
        if (r < 0) {
                dm_config_release(&ctx->cfg);
                return r;
        }
        ctx->jobs = dm_jobs_new();
        ctx->resources = dm_resources_new();
        ctx->budget = dm_budget_new();
        if (!ctx->jobs || !ctx->resources || !ctx->budget) {
                dm_jobs_free(ctx->jobs);
                dm_resources_free(ctx->resources);
                dm_budget_free(ctx->budget);
                dm_allowed_roots_release(&ctx->roots);
                dm_config_release(&ctx->cfg);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        compute_owner(ctx->owner, sizeof(ctx->owner));
        snprintf(ctx->owner_label, sizeof(ctx->owner_label), "%s=%s", DM_LABEL_OWNER, ctx->owner);
        {
                /* FNV-1a of the output root as configured: a name, not a secret. */
                uint64_t h = 1469598103934665603ull;

                for (const char *p = ctx->cfg.output_root; p && *p; p++)
                        h = (h ^ (unsigned char)*p) * 1099511628211ull;
                snprintf(ctx->root_label, sizeof(ctx->root_label), "%s=%016llx", DM_LABEL_ROOT, (unsigned long long)h);
        }
        pthread_mutex_init(&ctx->lock, NULL);
        r = dm_reaper_new(ctx, &ctx->reaper, err);
        if (r < 0) {
                pthread_mutex_destroy(&ctx->lock);
                dm_jobs_free(ctx->jobs);
                dm_resources_free(ctx->resources);
                dm_budget_free(ctx->budget);
                dm_allowed_roots_release(&ctx->roots);
                dm_config_release(&ctx->cfg);
                return r;
        }
        return 0;
}

int dm_context_backend(struct dm_context *ctx, struct dm_backend **ret, struct dm_error *err)
{
        struct dm_engine_config ec = {
                .env = &ctx->cfg.engine_env,
                .host = ctx->cfg.engine_host,
                .may_start_podman = ctx->cfg.may_start_podman,
                .state_dir = ctx->cfg.state_dir,
                .response_max = ctx->cfg.engine_response_max,
                .backend = ctx->cfg.backend,
                .opensandbox_egress = ctx->cfg.opensandbox_egress,
        };
        bool sweep = false;
        int r = 0;

        pthread_mutex_lock(&ctx->lock);
        if (!ctx->backend) {
                r = dm_mkdir_p(ctx->cfg.state_dir, 0700, err);
                if (r >= 0)
                        r = dm_backend_open(&ec, &ctx->backend, err);
                if (r >= 0) {
                        char *desc = NULL;
                        struct dm_error e2 = { 0 };

                        if (ctx->backend->ops->describe(ctx->backend, &desc, &e2) >= 0)
                                log_info("engine: %s", desc);
                        free(desc);
                        sweep = true;
                }
        }
        *ret = ctx->backend;
        pthread_mutex_unlock(&ctx->lock);
        /* In the background: the first call need not wait for it. */
        if (sweep)
                dm_reaper_sweep_orphans(ctx->reaper);
        return r;
}

int dm_context_sweep(struct dm_context *ctx, struct dm_error *err)
{
        struct dm_backend *b;
        char **ids = NULL;
        size_t n = 0;
        int r;

        pthread_mutex_lock(&ctx->lock);
        b = ctx->backend;
        pthread_mutex_unlock(&ctx->lock);
        if (!b)
                return 0;
        r = b->ops->list(b, ctx->owner_label, &ids, &n, err);
        if (r < 0)
                return r;
        for (size_t i = 0; i < n; i++) {
                struct dm_error e = { 0 };
                if (b->ops->destroy(b, ids[i], &e) < 0)
                        log_warning("remove container '%.12s': %s", ids[i], e.msg);
                free(ids[i]);
        }
        free(ids);
        if (n)
                log_info("removed %zu container(s) at exit", n);
        return 0;
}

void dm_context_drain(struct dm_context *ctx)
{
        struct dm_error err = { 0 };

        /* The first time only: what the queue did not remove. */
        if (dm_reaper_stop(ctx->reaper) && dm_context_sweep(ctx, &err) < 0)
                log_warning("final clean-up: %s", err.msg);
}

void dm_context_release(struct dm_context *ctx)
{
        dm_jobs_free(ctx->jobs);
        ctx->jobs = NULL;
        dm_resources_free(ctx->resources);
        ctx->resources = NULL;
        /* After the jobs: their runs have released what they reserved. */
        dm_budget_free(ctx->budget);
        ctx->budget = NULL;
        dm_context_drain(ctx);
        if (ctx->backend)
                dm_backend_free(ctx->backend);
        ctx->backend = NULL;
        dm_reaper_free(ctx->reaper);
        ctx->reaper = NULL;
        pthread_mutex_destroy(&ctx->lock);
        dm_allowed_roots_release(&ctx->roots);
        dm_config_release(&ctx->cfg);
}

int dm_run_id_new(char *buf, size_t len)
{
        unsigned char rnd[3];
        struct tm tm;
        time_t now = time(NULL);

        if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd))
                return -EIO;
        gmtime_r(&now, &tm);
        snprintf(buf, len, "run-%04d%02d%02dT%02d%02d%02d-%02x%02x%02x", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                 tm.tm_hour, tm.tm_min, tm.tm_sec, rnd[0], rnd[1], rnd[2]);
        return 0;
}

/* Deeper than this, the walk does not hold a directory fd per level: it
 * moves the deeper part up to the top of the tree and removes it from there
 * in the next pass, so a tree of any depth a sandbox built still goes. */
#define REMOVE_MAX_DEPTH 256
#define REMOVE_MAX_PASSES 64

struct remove_walk {
        int top;        /* the tree's top directory, once open */
        unsigned seq;   /* names for the parts moved up */
        unsigned moved; /* parts moved up in this pass */
};

/* Removes name below parent: everything by directory fd and unlinkat, so a
 * sandbox that swaps a directory for a link while this runs (its container
 * may still live when its removal failed) only gets its link removed. Stays
 * on the device it started on (like FTW_MOUNT). */
static int remove_at(int parent, const char *name, dev_t dev, int depth, struct remove_walk *w)
{
        struct stat st;
        struct dirent *de;
        DIR *d;
        int fd, r;

        if (depth >= REMOVE_MAX_DEPTH) {
                char up[64];

                snprintf(up, sizeof(up), ".dm-deep-%u", w->seq++);
                if (renameat(parent, name, w->top, up) == 0) {
                        w->moved++;
                        return 0;
                }
                return errno == ENOENT ? 0 : -1;
        }
        fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOTDIR || errno == ELOOP)
                        return unlinkat(parent, name, 0) < 0 && errno != ENOENT ? -1 : 0;
                return errno == ENOENT ? 0 : -1;
        }
        if (fstat(fd, &st) < 0 || st.st_dev != dev) {
                close(fd);
                errno = EXDEV;
                return -1;
        }
        d = fdopendir(fd);
        if (!d) {
                close(fd);
                return -1;
        }
        if (depth == 0)
                w->top = dirfd(d);
        /* At the top, passes go on while deeper parts were moved up: a
         * chain of REMOVE_MAX_PASSES * REMOVE_MAX_DEPTH levels at most, so a
         * sandbox still writing cannot keep the walk going for ever. */
        int passes = 0;
        do {
                if (depth == 0)
                        w->moved = 0;
                r = 0;
                rewinddir(d);
                while ((de = readdir(d))) {
                        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                                continue;
                        if (de->d_type == DT_DIR || de->d_type == DT_UNKNOWN) {
                                if (remove_at(dirfd(d), de->d_name, dev, depth + 1, w) < 0)
                                        r = -1;
                        } else if (unlinkat(dirfd(d), de->d_name, 0) < 0 && errno != ENOENT) {
                                r = -1;
                        }
                }
        } while (depth == 0 && w->moved > 0 && ++passes < REMOVE_MAX_PASSES);
        closedir(d);
        if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                r = -1;
        return r;
}

int dm_remove_tree(const char *path)
{
        const char *base;
        struct stat st;
        int parent = dm_io_open_parent(path, &base), r;

        if (parent < 0) {
                errno = -parent;
                return -1;
        }
        if (fstatat(parent, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                r = errno == ENOENT ? 0 : -1;
        } else if (!S_ISDIR(st.st_mode)) {
                /* A link or a file where the tree was: removed, never followed. */
                r = unlinkat(parent, base, 0);
        } else {
                struct remove_walk w = { .top = -1 };

                r = remove_at(parent, base, st.st_dev, 0, &w);
        }
        close(parent);
        return r;
}
