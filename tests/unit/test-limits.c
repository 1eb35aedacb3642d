/* SPDX-License-Identifier: MIT */
/* The disk cap's walk and watch (src/core/limits.c) on real directories: what
 * counts, that links are never followed, and when the watch trips. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include "src/core/context.h"
#include "src/core/limits.h"
#include "tests/tap.h"

static char top[64];

static void put(const char *path, size_t bytes)
{
        static char block[65536];
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

        memset(block, 'x', sizeof(block));
        while (fd >= 0 && bytes > 0) {
                size_t n = bytes < sizeof(block) ? bytes : sizeof(block);
                if (write(fd, block, n) != (ssize_t)n)
                        break;
                bytes -= n;
        }
        if (fd >= 0) {
                fsync(fd);
                close(fd);
        }
}

static int64_t usage_of(const char *dir)
{
        const char *paths[] = { dir, NULL };
        int64_t n = -1;

        if (dm_disk_usage(paths, &n) < 0)
                return -1;
        return n;
}

static bool readable(int fd, int ms)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        return poll(&p, 1, ms) == 1;
}

/* This process's threads: num_threads, the 20th field of /proc/self/stat
 * (after the name in parentheses); -1 when unreadable. */
static int threads_now(void)
{
        char buf[1024];
        const char *p;
        int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC), n = -1;
        ssize_t len = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

        if (fd >= 0)
                close(fd);
        if (len <= 0)
                return -1;
        buf[len] = '\0';
        /* Fields 3 to 19 go before it: 17 separators after the ')'. */
        p = strrchr(buf, ')');
        for (int field = 2; p && field < 20; field++)
                p = strchr(p + 1, ' ');
        if (!p || sscanf(p, "%d", &n) != 1)
                return -1;
        return n;
}

/* Polls every 10 ms until the thread count is want, at most ms. */
static bool threads_become(int want, long long ms)
{
        for (long long waited = 0; waited <= ms; waited += 10) {
                if (threads_now() == want)
                        return true;
                usleep(10 * 1000);
        }
        return false;
}

static int64_t mono_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* No thread per command: a command that ends within 200 ms never
 * had a walker; one that runs on gets its own, which trips as
 * before. Many at once, and watches stopped as their walkers are
 * due, leave no thread behind. */
static void no_thread_per_command(const char *tree)
{
        const char *trees[] = { tree, NULL };
        struct dm_error err = { 0 };
        char path[512];
        struct dm_limits_watch_conf c = {
                .trees = trees,
                .cap = 64 << 20,
                .cancel_fd = -1,
                .limit_fd = -1,
                .baseline_known = true,
                .baseline = 0,
        };
        struct dm_limits_watch *w[24] = { 0 };
        int64_t t0;
        int base_threads, now_threads;
        size_t started = 0;

        dm_error_clear(&err);
        /* The first watch brings the server's one ticker thread. */
        ok(dm_limits_watch_start(&c, &w[0], &err) == 0, "a watch");
        dm_limits_watch_stop(w[0]);
        base_threads = threads_now();
        t0 = mono_ms();
        ok(dm_limits_watch_start(&c, &w[0], &err) == 0, "a watch for a quick command");
        now_threads = threads_now();
        /* Only a lower bound: no walker before 200 ms. */
        ok(now_threads == base_threads || mono_ms() - t0 >= 200, "no thread of its own at the start (%d -> %d threads)",
           base_threads, now_threads);
        ok(!dm_limits_watch_tripped(w[0], &err), "under the cap at the end");
        dm_limits_watch_stop(w[0]);
        usleep(300 * 1000);
        ok(threads_now() == base_threads, "and none after it was due");

        for (size_t i = 0; i < 24; i++)
                started += dm_limits_watch_start(&c, &w[i], &err) == 0;
        ok(started == 24, "24 watches at once");
        now_threads = threads_become(base_threads + 24, slack_ms(10000)) ? base_threads + 24 : threads_now();
        ok(now_threads == base_threads + 24, "each gets its walker once its command ran 200 ms (%d -> %d threads)",
           base_threads, now_threads);
        snprintf(path, sizeof(path), "%s/big", tree);
        put(path, 66 << 20);
        started = 0;
        for (size_t i = 0; i < 24; i++)
                started += readable(dm_limits_watch_fd(w[i]), (int)slack_ms(30000));
        ok(started == 24, "all 24 trip past the cap");
        started = 0;
        for (size_t i = 0; i < 24; i++) {
                started += dm_limits_watch_tripped(w[i], &err) && err.code == -EDQUOT;
                dm_limits_watch_stop(w[i]);
        }
        ok(started == 24, "each with the cap's error");
        ok(threads_become(base_threads, slack_ms(10000)), "and their walkers are gone");
        unlink(path);

        /* Stopped just as the ticker starts walkers: none outlives its
         * watch (ASan and valgrind see a use after free). */
        for (int round = 0; round < 40; round++) {
                for (size_t i = 0; i < 4; i++)
                        if (dm_limits_watch_start(&c, &w[i], &err) < 0)
                                w[i] = NULL;
                usleep((useconds_t)(190 + (round % 20)) * 1000);
                for (size_t i = 0; i < 4; i++)
                        dm_limits_watch_stop(w[i]);
        }
        ok(threads_become(base_threads, slack_ms(10000)), "watches stopped around their due time leave no thread");
}

int main(void)
{
        char tree[128], outside[128], path[512], buf[32];
        struct dm_error err = { 0 };
        int64_t base, n;

        snprintf(top, sizeof(top), "/tmp/dm-limits-XXXXXX");
        if (!mkdtemp(top))
                return 1;
        snprintf(tree, sizeof(tree), "%s/tree", top);
        snprintf(outside, sizeof(outside), "%s/outside", top);
        mkdir(tree, 0755);
        mkdir(outside, 0755);

        dm_format_size(2LL << 30, buf, sizeof(buf));
        is_str(buf, "2 GiB", "format: 2 GiB");
        dm_format_size(3LL << 19, buf, sizeof(buf));
        is_str(buf, "1.5 MiB", "format: 1.5 MiB");
        dm_format_size(100, buf, sizeof(buf));
        is_str(buf, "100 bytes", "format: bytes");
        dm_disk_cap_error(&err, 2LL << 30, "why");
        is_str(err.msg, "disk cap of 2 GiB reached (DEMESNE_DISK_MAX): why", "the cap's sentence");
        is_int(err.code, -EDQUOT, "as -EDQUOT");

        base = usage_of(tree);
        ok(base == 0, "an empty tree holds nothing (%lld)", (long long)base);
        {
                const char *missing[] = { "/nonexistent/dm-limits", NULL };
                ok(dm_disk_usage(missing, &n) == 0 && n == 0, "a missing tree counts 0");
        }

        /* Many small files count by their blocks and inodes. */
        snprintf(path, sizeof(path), "%s/small", tree);
        mkdir(path, 0755);
        for (int i = 0; i < 200; i++) {
                snprintf(path, sizeof(path), "%s/small/%d", tree, i);
                put(path, 1);
        }
        n = usage_of(tree);
        ok(n >= 200 * (4096 + DM_DISK_INODE_BYTES), "200 one-byte files count %lld bytes (>= 200 blocks)",
           (long long)n);
        for (int i = 0; i < 50; i++) {
                snprintf(path, sizeof(path), "%s/small/empty%d", tree, i);
                put(path, 0);
        }
        ok(usage_of(tree) >= n + 50 * DM_DISK_INODE_BYTES, "empty files count their inode");

        /* Links are not followed: a big file and a directory outside. */
        snprintf(path, sizeof(path), "%s/big", outside);
        put(path, 8 << 20);
        n = usage_of(tree);
        snprintf(path, sizeof(path), "%s/big", outside);
        {
                char link[512];
                snprintf(link, sizeof(link), "%s/to-big", tree);
                ok(symlink(path, link) == 0, "symlink to a file outside");
                snprintf(link, sizeof(link), "%s/to-outside", tree);
                ok(symlink(outside, link) == 0, "symlink to a directory outside");
        }
        ok(usage_of(tree) < n + 64 * 1024, "neither is followed (%lld -> %lld)", (long long)n,
           (long long)usage_of(tree));
        {
                const char *link_as_root[] = { NULL, NULL };
                char link[512];
                snprintf(link, sizeof(link), "%s/to-outside", tree);
                link_as_root[0] = link;
                ok(dm_disk_usage(link_as_root, &n) == 0 && n == 0, "a tree given as a symlink is not entered");
        }

        /* A tree deeper than the walk goes counts as over the cap. */
        {
                char deep[128];
                int fd;

                snprintf(deep, sizeof(deep), "%s/deep", top);
                mkdir(deep, 0755);
                fd = open(deep, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                for (int i = 0; i < DM_DISK_MAX_DEPTH + 5 && fd >= 0; i++) {
                        int next;
                        mkdirat(fd, "d", 0755);
                        next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                        close(fd);
                        fd = next;
                }
                if (fd >= 0)
                        close(fd);
                is_int(usage_of(deep), -1, "a tree deeper than %d levels: -ELOOP", DM_DISK_MAX_DEPTH);
        }

        /* A file unlinked while held open is in no tree: counted through
         * the fds of the processes a procs file lists (here: this one). */
        {
                char procs[160];
                struct stat st;
                int fd, pf;

                long long before;

                snprintf(procs, sizeof(procs), "%s/procs", top);
                pf = open(procs, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                dprintf(pf, "%d\n", (int)getpid());
                close(pf);
                stat(tree, &st);
                /* What this process already holds there (valgrind keeps
                 * unlinked files of its own open in /tmp). */
                before = dm_disk_unlinked_open(procs, &st.st_dev, 1);
                snprintf(path, sizeof(path), "%s/held", tree);
                put(path, 3 << 20);
                fd = open(path, O_RDONLY | O_CLOEXEC);
                unlink(path);
                n = dm_disk_unlinked_open(procs, &st.st_dev, 1) - before;
                ok(n >= 3 << 20 && n < (3 << 20) + (1 << 20), "an unlinked file held open counts (%lld)", (long long)n);
                {
                        dev_t other = st.st_dev + 1;

                        ok(dm_disk_unlinked_open(procs, &other, 1) == 0, "only on the trees' file systems");
                }
                close(fd);
                ok(dm_disk_unlinked_open(procs, &st.st_dev, 1) == before, "and not once it is closed");
                unlink(procs);
        }

        /* The watch trips when the tree grows past the cap. */
        {
                const char *trees[] = { tree, NULL };
                struct dm_limits_watch_conf c = { .trees = trees, .cap = 4 << 20, .cancel_fd = -1, .limit_fd = -1 };
                struct dm_limits_watch *w = NULL;

                dm_error_clear(&err);
                ok(dm_limits_watch_start(&c, &w, &err) == 0, "watch starts");
                ok(!readable(dm_limits_watch_fd(w), 500), "under the cap: not tripped");
                snprintf(path, sizeof(path), "%s/grow", tree);
                put(path, 6 << 20);
                /* The watch looks every 0.2-5 s: the bound is against one that never trips. */
                ok(readable(dm_limits_watch_fd(w), (int)slack_ms(30000)), "past the cap: tripped");
                ok(dm_limits_watch_tripped(w, &err) && err.code == -EDQUOT &&
                           strstr(err.msg, "disk cap of 4 MiB reached (DEMESNE_DISK_MAX)"),
                   "with the cap's sentence: %s", err.msg);
                dm_limits_watch_stop(w);
        }

        /* Already over the cap at the start: it may shrink, not grow. */
        {
                const char *trees[] = { tree, NULL };
                struct dm_limits_watch_conf c = { .trees = trees, .cap = 4 << 20, .cancel_fd = -1, .limit_fd = -1 };
                struct dm_limits_watch *w = NULL;

                dm_error_clear(&err);
                ok(dm_limits_watch_start(&c, &w, &err) == 0, "watch starts over the cap");
                snprintf(path, sizeof(path), "%s/grow", tree);
                truncate(path, 5 << 20);
                ok(!readable(dm_limits_watch_fd(w), 600), "shrinking is allowed");
                ok(!dm_limits_watch_tripped(w, &err), "and not a trip");
                dm_limits_watch_stop(w);

                ok(dm_limits_watch_start(&c, &w, &err) == 0, "a fresh watch");
                snprintf(path, sizeof(path), "%s/more", tree);
                put(path, 1 << 20);
                /* The command ended before a walk: the last measure catches it. */
                ok(dm_limits_watch_tripped(w, &err) && err.code == -EDQUOT,
                   "growing is a trip, also measured at the end");
                dm_limits_watch_stop(w);
        }

        /* The caller's cancel is passed on, and is not a limit; an outside
         * limit is. */
        {
                const char *trees[] = { tree, NULL };
                int cancel = eventfd(0, EFD_CLOEXEC), limit = eventfd(0, EFD_CLOEXEC);
                uint64_t one = 1;
                struct dm_limits_watch_conf c = { .trees = trees, .cap = 0, .cancel_fd = cancel, .limit_fd = limit };
                struct dm_limits_watch *w = NULL;

                dm_error_clear(&err);
                ok(dm_limits_watch_start(&c, &w, &err) == 0, "watch without a disk cap");
                ok(write(cancel, &one, sizeof(one)) == sizeof(one), "cancel fired");
                ok(readable(dm_limits_watch_fd(w), 2000), "the watch fd says stop");
                ok(!dm_limits_watch_tripped(w, &err), "but no limit tripped");
                dm_limits_watch_stop(w);

                c.cancel_fd = -1;
                ok(dm_limits_watch_start(&c, &w, &err) == 0, "another watch");
                ok(write(limit, &one, sizeof(one)) == sizeof(one), "outside limit fired");
                ok(readable(dm_limits_watch_fd(w), 2000), "the watch fd says stop");
                ok(dm_limits_watch_tripped(w, &err) && err.code == -ECONNABORTED, "as a limit");
                dm_limits_watch_stop(w);
                close(cancel);
                close(limit);
        }

        no_thread_per_command(tree);

        dm_remove_tree(top);
        ok(access(top, F_OK) < 0, "nothing left behind");
        /* Who applies memory and pids: a rootful engine always; a rootless
         * one only on the unified hierarchy with both controllers delegated
         * to this user's systemd manager, else why names the fix. */
        {
                char why[512] = "";
                struct statfs sf;
                bool v2 = statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == CGROUP2_SUPER_MAGIC;

                ok(dm_limits_cgroup_applies(false, why, sizeof(why)), "a rootful engine applies memory and pids");
                if (!v2) {
                        ok(!dm_limits_cgroup_applies(true, why, sizeof(why)) && strstr(why, "cgroup v1") &&
                                   strstr(why, "systemd.unified_cgroup_hierarchy=1") && strstr(why, "Delegate="),
                           "rootless on cgroup v1: not applied, and why names the fix (%s)", why);
                } else {
                        bool applied = dm_limits_cgroup_applies(true, why, sizeof(why));
                        ok(applied || strstr(why, "Delegate="),
                           "rootless on cgroup v2: applied, or why names Delegate= (%s)", applied ? "applied" : why);
                }
        }
        return done_testing();
}
