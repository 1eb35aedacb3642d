/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/limits.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "backends/backend.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

/* The watch's pace: a walk every MIN ms at most, and never more than a
 * fifth of the time in walks (a huge tree is walked less often). */
#define WATCH_MIN_MS 200
#define WATCH_MAX_MS 5000
#define DM_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

static int64_t charge(const struct stat *st)
{
        return (int64_t)st->st_blocks * 512 + DM_DISK_INODE_BYTES;
}

/* A directory's entries through getdents64 into a buffer of the caller's:
 * no DIR (its 32 KiB buffer, and the fstat and two fcntl of fdopendir) for
 * each of the many small directories a walk opens. */
#define DENTS_BUF 4096

/* Calls fn for each entry of the open directory fd but "." and "..",
 * until fn returns nonzero (that value is returned); 0 at the end or on a
 * read error (a directory removed while walked). */
static int each_entry(int fd, int (*fn)(int dirfd, const char *name, void *userdata), void *userdata)
{
        _Alignas(struct dirent64) char buf[DENTS_BUF];
        ssize_t n;
        int r = 0;

        while (r == 0 && (n = getdents64(fd, buf, sizeof(buf))) > 0)
                for (ssize_t off = 0; r == 0 && off < n;) {
                        const struct dirent64 *e = (const struct dirent64 *)(buf + off);

                        off += e->d_reclen;
                        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
                                continue;
                        r = fn(fd, e->d_name, userdata);
                }
        return r;
}

struct walk {
        dev_t dev;
        int depth;
        int64_t *sum;
};

static int walk(int dirfd, struct walk *w);

static int walk_entry(int dirfd, const char *name, void *userdata)
{
        struct walk *w = userdata;
        struct stat st;
        int fd;

        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return 0; /* gone since it was listed */
        *w->sum += charge(&st);
        if (!S_ISDIR(st.st_mode) || st.st_dev != w->dev)
                return 0;
        fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0)
                return 0; /* swapped for a symlink, or removed: not followed */
        return walk(fd, w);
}

/* dirfd is an open directory on device w->dev; it is closed here. */
static int walk(int dirfd, struct walk *w)
{
        int r = -ELOOP;

        if (w->depth <= DM_DISK_MAX_DEPTH) {
                w->depth++;
                r = each_entry(dirfd, walk_entry, w);
                w->depth--;
        }
        close(dirfd);
        return r;
}

int dm_disk_usage(const char *const *paths, int64_t *ret_bytes)
{
        int64_t sum = 0;

        for (size_t i = 0; paths && paths[i]; i++) {
                struct stat st;
                int fd = open(paths[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), r;

                if (fd < 0)
                        continue;
                if (fstat(fd, &st) < 0) {
                        close(fd);
                        continue;
                }
                r = walk(fd, &(struct walk){ .dev = st.st_dev, .sum = &sum });
                if (r < 0)
                        return r;
        }
        *ret_bytes = sum;
        return 0;
}

/* ---- files unlinked but still open ------------------------------------------- */

#define UNLINKED_MAX_PIDS 65536
#define UNLINKED_MAX_FILES 65536

struct held {
        dev_t dev;
        ino_t ino;
        int64_t bytes;
};

static int held_cmp(const void *a, const void *b)
{
        const struct held *x = a, *y = b;

        if (x->dev != y->dev)
                return x->dev < y->dev ? -1 : 1;
        return x->ino < y->ino ? -1 : x->ino > y->ino;
}

struct held_scan {
        const dev_t *devs;
        size_t n_devs;
        struct held *v; /* grown as found: most containers hold none */
        size_t n, cap;
        bool failed;
};

static int held_entry(int dirfd, const char *name, void *userdata)
{
        struct held_scan *h = userdata;
        struct stat st;
        bool ours = false;

        if (h->n >= UNLINKED_MAX_FILES || h->failed)
                return 1;
        /* stat through the magic link: the kernel's own file, no path
         * walked, nothing opened. */
        if (fstatat(dirfd, name, &st, 0) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 0)
                return 0;
        /* Only the trees' file systems: memfd and tmpfs are memory. */
        for (size_t i = 0; i < h->n_devs && !ours; i++)
                ours = st.st_dev == h->devs[i];
        if (!ours)
                return 0;
        if (h->n == h->cap) {
                size_t cap = h->cap ? h->cap * 2 : 64;
                struct held *v = realloc(h->v, cap * sizeof(*v));

                if (!v) {
                        h->failed = true;
                        return 1;
                }
                h->v = v;
                h->cap = cap;
        }
        h->v[h->n++] = (struct held){ st.st_dev, st.st_ino, (int64_t)st.st_blocks * 512 };
        return 0;
}

static void scan_fds(int pid, struct held_scan *h)
{
        char dir[64];
        int fd;

        snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
        fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        each_entry(fd, held_entry, h);
        close(fd);
}

int64_t dm_disk_unlinked_open(const char *procs_path, const dev_t *devs, size_t n_devs)
{
        struct held_scan h = { .devs = devs, .n_devs = n_devs };
        size_t pids = 0;
        int64_t sum = 0;
        FILE *f;
        int pid;

        if (!procs_path || !(f = fopen(procs_path, "re")))
                return 0;
        while (!h.failed && pids++ < UNLINKED_MAX_PIDS && fscanf(f, "%d", &pid) == 1)
                if (pid > 0)
                        scan_fds(pid, &h);
        fclose(f);
        /* Out of memory: what was found so far counts. */
        if (h.n)
                qsort(h.v, h.n, sizeof(*h.v), held_cmp);
        for (size_t i = 0; i < h.n; i++)
                if (i == 0 || held_cmp(&h.v[i], &h.v[i - 1]) != 0)
                        sum += h.v[i].bytes;
        free(h.v);
        return sum;
}

/* The cgroup.procs file of pid's cgroup (v1 pids hierarchy, else v2),
 * malloc'd, or NULL. */
static char *procs_file(int pid)
{
        char path[64], *line = NULL, *ret = NULL;
        size_t cap = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/cgroup", pid);
        if (pid <= 0 || !(f = fopen(path, "re")))
                return NULL;
        while (!ret && getline(&line, &cap, f) > 0) {
                char *ctl = strchr(line, ':'), *cg = ctl ? strchr(ctl + 1, ':') : NULL;

                if (!cg)
                        continue;
                *cg++ = '\0';
                cg[strcspn(cg, "\n")] = '\0';
                if (!strcmp(ctl + 1, "pids")) {
                        if (asprintf(&ret, "/sys/fs/cgroup/pids%s/cgroup.procs", cg) < 0)
                                ret = NULL;
                } else if (ctl == line + 1 && line[0] == '0' && !ctl[1]) {
                        /* v2 (or hybrid's unified tree, listed after the v1
                         * lines): its cgroup.procs lists the same processes. */
                        bool hybrid = access("/sys/fs/cgroup/unified", F_OK) == 0;

                        if (asprintf(&ret, "/sys/fs/cgroup%s%s/cgroup.procs", hybrid ? "/unified" : "", cg) < 0)
                                ret = NULL;
                }
        }
        free(line);
        fclose(f);
        return ret;
}

void dm_format_size(int64_t bytes, char *buf, size_t len)
{
        static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB" };
        double v = (double)bytes;
        int u = -1;

        if (bytes < 1024) {
                snprintf(buf, len, "%lld bytes", (long long)bytes);
                return;
        }
        while (v >= 1024 && u < 3) {
                v /= 1024;
                u++;
        }
        if (v == (double)(int64_t)v)
                snprintf(buf, len, "%lld %s", (long long)v, unit[u]);
        else
                snprintf(buf, len, "%.1f %s", v, unit[u]);
}

int dm_disk_cap_error(struct dm_error *err, int64_t cap, const char *why)
{
        char c[32];

        dm_format_size(cap, c, sizeof(c));
        return dm_error_set(err, -EDQUOT, "disk cap of %s reached (DEMESNE_DISK_MAX): %s", c, why);
}

/* ---- the watch ------------------------------------------------------------------ */

/* Most commands end long before the first walk is due, so a watch starts
 * no thread of its own: the fd the command waits on is an epoll set of the
 * caller's cancel, the outside limit and the watch's own trip, readable
 * when any of them is (nothing to pass on), and one thread for the whole
 * server (the ticker) starts a watch's walker once its command has run
 * WATCH_MIN_MS. From then on each command has its walker, as before. */

struct dm_limits_watch {
        int poll_fd; /* epoll: cancel_fd, limit_fd, trip_fd */
        int trip_fd; /* eventfd: a limit tripped */
        int stop_fd; /* eventfd: the walker ends; -1 until it starts */
        int cancel_fd, limit_fd;
        char **trees;
        char *procs;   /* the container's cgroup.procs, or NULL */
        dev_t devs[8]; /* the trees' file systems */
        size_t n_devs;
        int64_t cap, baseline;
        /* The ticker's, under its lock. */
        int64_t due; /* when the walker starts (monotonic ms) */
        bool queued, walking;
        pthread_t thread;
        struct dm_limits_watch *next;
        pthread_mutex_t lock; /* guards err and used */
        int64_t used;         /* at the last walk; -1: none yet */
        struct dm_error err;  /* code != 0 once a limit tripped */
};

static struct {
        pthread_once_t once;
        pthread_mutex_t lock;
        pthread_cond_t cond; /* on CLOCK_MONOTONIC */
        bool running;        /* the ticker thread exists */
        int64_t wake_at;     /* when it wakes unasked; INT64_MAX: only when signalled */
        struct dm_limits_watch *queue;
} ticker = { .once = PTHREAD_ONCE_INIT, .lock = PTHREAD_MUTEX_INITIALIZER, .wake_at = INT64_MAX };

static void trip(struct dm_limits_watch *w, int code, const char *msg)
{
        uint64_t one = 1;

        pthread_mutex_lock(&w->lock);
        if (!w->err.code)
                dm_error_set(&w->err, code, "%s", msg);
        pthread_mutex_unlock(&w->lock);
        if (write(w->trip_fd, &one, sizeof(one)) < 0)
                log_warning("limits: cannot wake the command's waiter: %s", strerror(errno));
}

/* 1 when the command must stop (w->err set), else 0. */
static int check_disk(struct dm_limits_watch *w)
{
        struct dm_error e = { 0 };
        char used[32];
        int64_t sum = 0;
        int r = dm_disk_usage((const char *const *)w->trees, &sum);

        sum += dm_disk_unlinked_open(w->procs, w->devs, w->n_devs);
        pthread_mutex_lock(&w->lock);
        w->used = r < 0 ? -1 : sum;
        pthread_mutex_unlock(&w->lock);

        if (r == -ELOOP) {
                dm_disk_cap_error(&e, w->cap, "a directory tree is deeper than 256 levels; the command was stopped");
                trip(w, e.code, e.msg);
                return 1;
        }
        if (sum <= w->cap || sum <= w->baseline)
                return 0;
        dm_format_size(sum, used, sizeof(used));
        {
                char why[128];

                snprintf(why, sizeof(why),
                         "the sandbox holds %s (/out, /workspace, its root file system and logs); "
                         "the command was stopped",
                         used);
                dm_disk_cap_error(&e, w->cap, why);
        }
        trip(w, e.code, e.msg);
        return 1;
}

/* A walk at once (the command has run WATCH_MIN_MS), then at the pace. */
static void *walker_main(void *arg)
{
        struct dm_limits_watch *w = arg;
        int64_t pause = 0;

        for (;;) {
                struct pollfd p = { .fd = w->stop_fd, .events = POLLIN };
                int64_t t0;
                int n = poll(&p, 1, (int)pause);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n != 0)
                        break;
                t0 = dm_now_ms();
                if (check_disk(w))
                        break;
                pause = 5 * (dm_now_ms() - t0);
                pause = pause < WATCH_MIN_MS ? WATCH_MIN_MS : pause > WATCH_MAX_MS ? WATCH_MAX_MS : pause;
        }
        return NULL;
}

/* Under ticker.lock. A walker that cannot start stops the command: the cap
 * would go unwatched. */
static void walker_start(struct dm_limits_watch *w)
{
        char msg[128];
        int r;

        w->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        r = w->stop_fd < 0 ? -errno : -pthread_create(&w->thread, NULL, walker_main, w);
        if (r == 0) {
                w->walking = true;
                return;
        }
        snprintf(msg, sizeof(msg), "cannot start the disk watch (%s); the command was stopped", strerror(-r));
        trip(w, r, msg);
}

static void *ticker_main(void *arg)
{
        (void)arg;
        pthread_mutex_lock(&ticker.lock);
        for (;;) {
                int64_t now = dm_now_ms(), next = INT64_MAX;
                struct timespec ts;

                for (struct dm_limits_watch **p = &ticker.queue; *p;) {
                        struct dm_limits_watch *w = *p;

                        if (w->due > now) {
                                next = w->due < next ? w->due : next;
                                p = &w->next;
                                continue;
                        }
                        *p = w->next;
                        w->queued = false;
                        walker_start(w);
                }
                ticker.wake_at = next;
                if (next == INT64_MAX) {
                        pthread_cond_wait(&ticker.cond, &ticker.lock);
                        continue;
                }
                dm_monotonic_after(next - now, &ts);
                pthread_cond_timedwait(&ticker.cond, &ticker.lock, &ts);
        }
        return NULL;
}

static void ticker_init(void)
{
        pthread_condattr_t ca;
        pthread_attr_t a;
        pthread_t t;

        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&ticker.cond, &ca);
        pthread_condattr_destroy(&ca);
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        /* Without it, every watch starts its walker at once (as it did before). */
        ticker.running = pthread_create(&t, &a, ticker_main, NULL) == 0;
        pthread_attr_destroy(&a);
}

/* Hands w to the ticker, or starts its walker now. */
static void walker_schedule(struct dm_limits_watch *w)
{
        pthread_once(&ticker.once, ticker_init);
        pthread_mutex_lock(&ticker.lock);
        if (!ticker.running) {
                walker_start(w);
                pthread_mutex_unlock(&ticker.lock);
                return;
        }
        w->due = dm_now_ms() + WATCH_MIN_MS;
        w->queued = true;
        w->next = ticker.queue;
        ticker.queue = w;
        /* A ticker that wakes before then picks it up by itself. */
        if (w->due < ticker.wake_at)
                pthread_cond_signal(&ticker.cond);
        pthread_mutex_unlock(&ticker.lock);
}

static void watch_free(struct dm_limits_watch *w)
{
        if (w->poll_fd >= 0)
                close(w->poll_fd);
        if (w->stop_fd >= 0)
                close(w->stop_fd);
        if (w->trip_fd >= 0)
                close(w->trip_fd);
        for (size_t i = 0; w->trees && w->trees[i]; i++)
                free(w->trees[i]);
        free(w->trees);
        free(w->procs);
        pthread_mutex_destroy(&w->lock);
        free(w);
}

static int poll_set_add(int epfd, int fd)
{
        struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

        return fd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) == 0 || errno == EEXIST ? 0 : -errno;
}

static int watch_fds(struct dm_limits_watch *w, struct dm_error *err)
{
        int r = 0;

        w->trip_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        w->poll_fd = epoll_create1(EPOLL_CLOEXEC);
        if (w->trip_fd < 0 || w->poll_fd < 0)
                r = -errno;
        if (r == 0)
                r = poll_set_add(w->poll_fd, w->trip_fd);
        if (r == 0)
                r = poll_set_add(w->poll_fd, w->cancel_fd);
        if (r == 0)
                r = poll_set_add(w->poll_fd, w->limit_fd);
        return r < 0 ? dm_error_set(err, r, "limits: %s", strerror(-r)) : 0;
}

int dm_limits_watch_start(const struct dm_limits_watch_conf *conf, struct dm_limits_watch **ret, struct dm_error *err)
{
        struct dm_limits_watch *w = calloc(1, sizeof(*w));
        size_t n = 0;
        int r;

        if (!w)
                return dm_error_set(err, -ENOMEM, "out of memory");
        pthread_mutex_init(&w->lock, NULL);
        w->cap = conf->cap;
        w->cancel_fd = conf->cancel_fd;
        w->limit_fd = conf->limit_fd;
        w->stop_fd = -1;
        r = watch_fds(w, err);
        if (r < 0) {
                watch_free(w);
                return r;
        }
        while (conf->trees && conf->trees[n])
                n++;
        w->trees = calloc(n + 1, sizeof(*w->trees));
        for (size_t i = 0; w->trees && i < n; i++)
                if (!(w->trees[i] = strdup(conf->trees[i]))) {
                        watch_free(w);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
        if (!w->trees) {
                watch_free(w);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < n && w->n_devs < DM_ARRAY_LEN(w->devs); i++) {
                struct stat st;

                if (stat(w->trees[i], &st) == 0)
                        w->devs[w->n_devs++] = st.st_dev;
        }
        if (w->cap > 0)
                w->procs = procs_file(conf->pid);
        w->used = -1;
        if (w->cap > 0 && conf->baseline_known)
                w->baseline = conf->baseline;
        else if (w->cap > 0) {
                if (dm_disk_usage((const char *const *)w->trees, &w->baseline) < 0)
                        w->baseline = 0;
                w->baseline += dm_disk_unlinked_open(w->procs, w->devs, w->n_devs);
        }
        if (w->cap > 0)
                walker_schedule(w);
        *ret = w;
        return 0;
}

int dm_limits_watch_fd(const struct dm_limits_watch *w)
{
        return w->poll_fd;
}

static bool readable(int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };

        return fd >= 0 && poll(&p, 1, 0) == 1;
}

bool dm_limits_watch_tripped(struct dm_limits_watch *w, struct dm_error *err)
{
        bool tripped;

        /* The outside limit fired: whatever else stopped the command, it
         * would not have gone on. */
        if (readable(w->limit_fd))
                trip(w, -ECONNABORTED, "stopped by a limit");
        pthread_mutex_lock(&w->lock);
        tripped = w->err.code != 0;
        pthread_mutex_unlock(&w->lock);
        /* A command quicker than the watch's first walk is measured once
         * more now that it has ended: what it left counts the same. Not
         * after a cancel: nobody waits for that answer. */
        if (!tripped && w->cap > 0 && !readable(w->cancel_fd))
                check_disk(w);
        pthread_mutex_lock(&w->lock);
        tripped = w->err.code != 0;
        if (tripped)
                dm_error_set(err, w->err.code, "%s", w->err.msg);
        pthread_mutex_unlock(&w->lock);
        return tripped;
}

int64_t dm_limits_watch_usage(struct dm_limits_watch *w)
{
        int64_t used;

        pthread_mutex_lock(&w->lock);
        used = w->used;
        pthread_mutex_unlock(&w->lock);
        return used;
}

void dm_limits_watch_stop(struct dm_limits_watch *w)
{
        uint64_t one = 1;
        bool walking;

        if (!w)
                return;
        pthread_mutex_lock(&ticker.lock);
        if (w->queued)
                for (struct dm_limits_watch **p = &ticker.queue; *p; p = &(*p)->next)
                        if (*p == w) {
                                *p = w->next;
                                break;
                        }
        w->queued = false;
        walking = w->walking;
        pthread_mutex_unlock(&ticker.lock);
        if (walking) {
                if (write(w->stop_fd, &one, sizeof(one)) < 0)
                        log_warning("limits: cannot stop the disk watch: %s", strerror(errno));
                pthread_join(w->thread, NULL);
        }
        watch_free(w);
}

/* The directory part of path into buf ("" when it has none). */
static void dir_of(const char *path, char *buf, size_t len)
{
        const char *slash = path ? strrchr(path, '/') : NULL;

        if (!slash || slash == path)
                buf[0] = '\0';
        else
                snprintf(buf, len, "%.*s", (int)(slash - path), path);
}

void dm_limits_target_from_info(const struct dm_container_info *info, struct dm_limits_target *t)
{
        char hosts_dir[PATH_MAX], log_dir[PATH_MAX];

        memset(t, 0, sizeof(*t));
        t->pid = info->pid;
        if (info->upper_dir)
                snprintf(t->dirs[t->n++], PATH_MAX, "%s", info->upper_dir);
        /* The directories of /etc/hosts, /etc/hostname and the container's
         * log: container root can write the first two, its PID 1's output
         * fills the last. */
        dir_of(info->hosts_path, hosts_dir, sizeof(hosts_dir));
        dir_of(info->log_path, log_dir, sizeof(log_dir));
        if (hosts_dir[0])
                snprintf(t->dirs[t->n++], PATH_MAX, "%s", hosts_dir);
        if (log_dir[0] && strcmp(log_dir, hosts_dir) != 0)
                snprintf(t->dirs[t->n++], PATH_MAX, "%s", log_dir);
}

void dm_limits_target_read(struct dm_backend *b, const char *id, struct dm_limits_target *t)
{
        struct dm_container_info info = { 0 };
        struct dm_error err = { 0 };

        memset(t, 0, sizeof(*t));
        if (b->ops->inspect(b, id, &info, &err) < 0)
                return;
        dm_limits_target_from_info(&info, t);
        dm_container_info_release(&info);
}

int dm_limits_watch_target(const struct dm_limits_target *t, const struct dm_limits_watch_conf *conf,
                           struct dm_limits_watch **ret, struct dm_error *err)
{
        struct dm_limits_watch_conf c = *conf;
        const char *trees[10];
        size_t n = 0;

        for (; conf->trees && conf->trees[n] && n < 6; n++)
                trees[n] = conf->trees[n];
        if (conf->cap > 0 && t) {
                c.pid = t->pid;
                for (size_t i = 0; i < t->n && i < 3; i++)
                        trees[n++] = t->dirs[i];
        }
        trees[n] = NULL;
        c.trees = trees;
        return dm_limits_watch_start(&c, ret, err);
}

int dm_limits_watch_container(struct dm_backend *b, const char *id, const struct dm_limits_watch_conf *conf,
                              struct dm_limits_watch **ret, struct dm_error *err)
{
        struct dm_limits_target t = { 0 };

        if (conf->cap > 0)
                dm_limits_target_read(b, id, &t);
        return dm_limits_watch_target(&t, conf, ret, err);
}

bool dm_limits_fsize_hit(int64_t cap, int exit_code, struct dm_error *err)
{
        if (cap <= 0 || exit_code != 128 + SIGXFSZ)
                return false;
        dm_disk_cap_error(err, cap,
                          "a file grew past it and the command was stopped (SIGXFSZ, "
                          "file size limit exceeded)");
        return true;
}

/* ---- whether the engine can apply memory and pids limits ----------------- */

bool dm_limits_cgroup_applies(bool rootless, char *why, size_t size)
{
        char path[256], ctl[512] = "";
        struct statfs sf;
        FILE *f;

        if (!rootless)
                return true;
        if (statfs("/sys/fs/cgroup", &sf) < 0 || sf.f_type != CGROUP2_SUPER_MAGIC) {
                snprintf(why, size,
                         "cgroup v1 (or hybrid): a rootless engine gets no cgroup of its own, so memory and pids "
                         "limits are ignored; boot with systemd.unified_cgroup_hierarchy=1 and delegate the "
                         "controllers (Delegate=memory pids cpu in a drop-in for user@.service)");
                return false;
        }
        snprintf(path, sizeof(path), "/sys/fs/cgroup/user.slice/user-%u.slice/user@%u.service/cgroup.controllers",
                 (unsigned)geteuid(), (unsigned)geteuid());
        f = fopen(path, "re");
        if (f) {
                if (!fgets(ctl, sizeof(ctl), f))
                        ctl[0] = '\0';
                fclose(f);
        }
        /* Whole words: "memory" and "pids" among the controllers. */
        {
                bool mem = false, pids = false;
                char *save = NULL;

                for (char *w = strtok_r(ctl, " \n", &save); w; w = strtok_r(NULL, " \n", &save)) {
                        mem |= !strcmp(w, "memory");
                        pids |= !strcmp(w, "pids");
                }
                if (mem && pids)
                        return true;
        }
        snprintf(why, size,
                 "cgroup v2 without the memory and pids controllers delegated to user@%u.service, so a rootless "
                 "engine cannot apply them; add Delegate=memory pids cpu in "
                 "/etc/systemd/system/user@.service.d/delegate.conf and log in again",
                 (unsigned)geteuid());
        return false;
}
