/* SPDX-License-Identifier: MIT */
/* A child's output copied into its parent's (src/core/children.h): what is
 * copied and how, the caps, and a hostile parent's planted links and names
 * that must not make the copy write outside the parent's directory. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/io.h"
#include "src/core/children.h"
#include "src/core/ledger.h"
#include "tests/tap.h"

static char top[256];

static void put(const char *path, const char *text, mode_t mode)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

        if (fd >= 0) {
                (void)!write(fd, text, strlen(text));
                close(fd);
        }
}

static char *slurp(const char *path)
{
        static char buf[4096];
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;

        if (fd >= 0)
                close(fd);
        buf[n > 0 ? n : 0] = '\0';
        return n >= 0 ? buf : NULL;
}

static bool empty_dir(const char *path)
{
        char cmd[PATH_MAX + 64];

        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\"", path);
        return system(cmd) == 0;
}

/* A fresh directory below top; its path in buf. */
static const char *fresh(const char *name, char *buf, size_t len)
{
        snprintf(buf, len, "%s/%s", top, name);
        mkdir(buf, 0700);
        return buf;
}

static int copy(const char *src, const char *parent, const char *id, const struct dm_children_limits *lim,
                struct dm_children_copied *got, struct dm_error *err)
{
        int s = dm_io_open_dir(src), p = dm_io_open_dir(parent), r;

        r = dm_children_copy(s, p, id, lim, got, err);
        close(s);
        close(p);
        return r;
}

/* A run (or sandbox) id under root, with an output directory holding
 * out.txt, in the ledger. */
static void begin(const char *root, const char *id, const char *kind, const char *principal)
{
        char dir[PATH_MAX + 80], file[PATH_MAX + 96], text[96];
        struct dm_error err = { 0 };

        snprintf(dir, sizeof(dir), "%s/%s", root, id);
        mkdir(dir, 0700);
        snprintf(file, sizeof(file), "%s/out.txt", dir);
        snprintf(text, sizeof(text), "from %s\n", id);
        put(file, text, 0600);
        dm_ledger_begin(
                root, "me",
                &(struct dm_ledger_run){ .run_id = id, .kind = kind, .principal = principal, .output_dir = dir }, &err);
}

int main(void)
{
        char src[PATH_MAX], parent[PATH_MAX], outside[PATH_MAX], p[PATH_MAX + 128], link[PATH_MAX];
        struct dm_children_limits lim = { 0 };
        struct dm_children_copied got;
        struct dm_error err = { 0 };
        struct stat st;
        ssize_t n;
        int r;

        snprintf(top, sizeof(top), "/tmp/dm-children-XXXXXX");
        if (!mkdtemp(top))
                return skip_all("no temporary directory");

        /* 1: what is copied, and how. */
        fresh("child", src, sizeof(src));
        fresh("parent", parent, sizeof(parent));
        fresh("outside", outside, sizeof(outside));
        snprintf(p, sizeof(p), "%s/hello.txt", src);
        put(p, "hello\n", 0600);
        snprintf(p, sizeof(p), "%s/run.sh", src);
        put(p, "#!/bin/sh\n", 0700);
        snprintf(p, sizeof(p), "%s/sub", src);
        mkdir(p, 0700);
        snprintf(p, sizeof(p), "%s/sub/deep.txt", src);
        put(p, "deep\n", 0600);
        snprintf(p, sizeof(p), "%s/passwd", src);
        (void)!symlink("/etc/passwd", p);
        snprintf(p, sizeof(p), "%s/fifo", src);
        mkfifo(p, 0600);
        r = copy(src, parent, "run-abc", &lim, &got, &err);
        ok(r == 0, "a child's output is copied (%s)", err.msg);
        snprintf(p, sizeof(p), "%s/children/run-abc/hello.txt", parent);
        is_str(slurp(p), "hello\n", "its file is at children/<id>/hello.txt");
        r = stat(p, &st);
        ok(r == 0 && (st.st_mode & 07777) == 0644, "readable by the parent (0644: %o)", st.st_mode & 07777);
        snprintf(p, sizeof(p), "%s/children/run-abc/run.sh", parent);
        r = stat(p, &st);
        ok(r == 0 && (st.st_mode & 07777) == 0755, "a file that could run stays so (0755: %o)", st.st_mode & 07777);
        snprintf(p, sizeof(p), "%s/children/run-abc/sub/deep.txt", parent);
        is_str(slurp(p), "deep\n", "directories are copied");
        snprintf(p, sizeof(p), "%s/children/run-abc/sub", parent);
        r = stat(p, &st);
        ok(r == 0 && (st.st_mode & 07777) == 0755, "and are 0755 (%o)", st.st_mode & 07777);
        snprintf(p, sizeof(p), "%s/children/run-abc/passwd", parent);
        n = readlink(p, link, sizeof(link) - 1);
        link[n > 0 ? n : 0] = '\0';
        ok(lstat(p, &st) == 0 && S_ISLNK(st.st_mode) && strcmp(link, "/etc/passwd") == 0,
           "a link is made again as a link, not followed (-> %s)", link);
        snprintf(p, sizeof(p), "%s/children/run-abc/fifo", parent);
        ok(lstat(p, &st) < 0 && errno == ENOENT, "a FIFO is skipped");
        ok(got.files == 3 && got.dirs == 1 && got.links == 1 && got.skipped == 1 && got.bytes == 21 &&
                   got.left_out == 0,
           "the counts: %zu files, %zu dirs, %zu links, %zu skipped, %llu bytes", got.files, got.dirs, got.links,
           got.skipped, (unsigned long long)got.bytes);
        snprintf(p, sizeof(p), "%s/hello.txt", src);
        is_str(slurp(p), "hello\n", "the child's own output stays where it is");

        /* 2: the same id again: the name is taken, nothing written. */
        ok(copy(src, parent, "run-abc", &lim, &got, &err) == -EEXIST && strstr(err.msg, "name is taken"),
           "a second copy under the same id is refused (%s)", err.msg);
        dm_error_clear(&err);

        /* 3: a hostile parent: children is a link to somewhere else. */
        fresh("parent2", parent, sizeof(parent));
        snprintf(p, sizeof(p), "%s/children", parent);
        (void)!symlink(outside, p);
        ok(copy(src, parent, "run-def", &lim, &got, &err) < 0 && empty_dir(outside),
           "children planted as a link elsewhere: refused, nothing written there (%s)", err.msg);
        dm_error_clear(&err);

        /* 4: children is a file. */
        fresh("parent3", parent, sizeof(parent));
        snprintf(p, sizeof(p), "%s/children", parent);
        put(p, "mine\n", 0600);
        ok(copy(src, parent, "run-def", &lim, &got, &err) < 0 && strcmp(slurp(p), "mine\n") == 0,
           "children planted as a file: refused, the file unchanged (%s)", err.msg);
        dm_error_clear(&err);

        /* 5: a file named like the child id. */
        fresh("parent4", parent, sizeof(parent));
        snprintf(p, sizeof(p), "%s/children", parent);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/children/run-def", parent);
        put(p, "mine\n", 0600);
        ok(copy(src, parent, "run-def", &lim, &got, &err) == -EEXIST && strcmp(slurp(p), "mine\n") == 0,
           "a file named like the child: refused, unchanged (%s)", err.msg);
        dm_error_clear(&err);

        /* 6: a link named like the child id, to somewhere else. */
        snprintf(p, sizeof(p), "%s/children/run-ghi", parent);
        (void)!symlink(outside, p);
        ok(copy(src, parent, "run-ghi", &lim, &got, &err) < 0 && empty_dir(outside),
           "a link named like the child: refused, nothing written through it (%s)", err.msg);
        dm_error_clear(&err);

        /* 7: an id that is not a plain name. */
        ok(copy(src, parent, "../escape", &lim, &got, &err) == -EINVAL, "an id like '../escape' is refused (%s)",
           err.msg);
        dm_error_clear(&err);

        /* 8: the size cap: what does not fit is left out and named. */
        fresh("parent5", parent, sizeof(parent));
        lim.max_bytes = 10;
        r = copy(src, parent, "run-cap", &lim, &got, &err);
        ok(r == 0 && got.left_out >= 1 && got.bytes <= 10, "over the cap: %zu left out, %llu bytes copied",
           got.left_out, (unsigned long long)got.bytes);
        snprintf(p, sizeof(p), "%s/children/run-cap.truncated", parent);
        ok(slurp(p) && strstr(slurp(p), "over what the cap left"), "children/<id>.truncated says what and why: %s",
           slurp(p) ? slurp(p) : "(none)");
        lim.max_bytes = 0;

        /* 9: the cap on entries. */
        fresh("parent6", parent, sizeof(parent));
        lim.max_entries = 2;
        r = copy(src, parent, "run-many", &lim, &got, &err);
        ok(r == 0 && got.left_out > 0, "past the cap on entries: %zu left out", got.left_out);
        lim.max_entries = 0;

        /* 10: too deep. */
        {
                char deep[PATH_MAX], pdeep[PATH_MAX];
                int fd = dm_io_open_dir(fresh("deep", deep, sizeof(deep)));

                for (int i = 0; fd >= 0 && i < DM_CHILDREN_MAX_DEPTH + 2; i++) {
                        int sub = mkdirat(fd, "d", 0700) == 0 ? openat(fd, "d", O_RDONLY | O_DIRECTORY) : -1;

                        close(fd);
                        fd = sub;
                }
                if (fd >= 0)
                        close(fd);
                r = copy(deep, fresh("parent7", pdeep, sizeof(pdeep)), "run-deep", &lim, &got, &err);
                ok(r == 0 && got.left_out == 1 && got.dirs == DM_CHILDREN_MAX_DEPTH,
                   "past %d levels: the rest is left out (%zu dirs copied, %zu left out)", DM_CHILDREN_MAX_DEPTH,
                   got.dirs, got.left_out);
        }

        /* 11-13: dm_children_collect, from the run ledger. */
        {
                struct dm_context ctx;
                char root[PATH_MAX], pdir[PATH_MAX + 32];

                memset(&ctx, 0, sizeof(ctx));
                fresh("root", root, sizeof(root));
                ctx.cfg.output_root = root;
                ctx.cfg.disk_max = 1 << 20;
                begin(root, "sbx-000000000001", "sandbox", "local");
                begin(root, "run-child1", "script", "local/sbx-000000000001");
                snprintf(pdir, sizeof(pdir), "%s/sbx-000000000001", root);
                dm_children_collect(&ctx, "run-child1");
                snprintf(p, sizeof(p), "%s/children/run-child1/out.txt", pdir);
                is_str(slurp(p), "from run-child1\n", "a nested principal's run is collected into its parent sandbox");

                begin(root, "run-top", "script", "local");
                dm_children_collect(&ctx, "run-top");
                snprintf(p, sizeof(p), "%s/children/run-top", pdir);
                ok(lstat(p, &st) < 0, "the host's caller's run is nobody's child: not copied");

                dm_ledger_end(root, "sbx-000000000001", "destroyed", false, 0, 0, NULL, &err);
                begin(root, "run-child2", "script", "local/sbx-000000000001");
                dm_children_collect(&ctx, "run-child2");
                snprintf(p, sizeof(p), "%s/children/run-child2", pdir);
                ok(lstat(p, &st) < 0, "a destroyed parent gets nothing");
                dm_error_clear(&err);

                /* 14-16: a dead server's child run, at the next sweep. */
                {
                        struct dm_ledger_entry e;
                        char dir[PATH_MAX + 32];

                        snprintf(ctx.owner, sizeof(ctx.owner), "%s", "deadbeef-1-1");
                        begin(root, "sbx-000000000002", "sandbox", "local");
                        snprintf(dir, sizeof(dir), "%s/run-int1", root);
                        mkdir(dir, 0700);
                        dm_ledger_begin(root, "cafebabe-1-1",
                                        &(struct dm_ledger_run){ .run_id = "run-int1",
                                                                 .principal = "local/sbx-000000000002",
                                                                 .output_dir = dir },
                                        &err);
                        snprintf(p, sizeof(p), "%s/out.txt", dir);
                        put(p, "interrupted\n", 0600);
                        ok(dm_children_collect_interrupted(&ctx) == 1, "the sweep finds a dead server's child run");
                        snprintf(p, sizeof(p), "%s/sbx-000000000002/children/run-int1/out.txt", root);
                        is_str(slurp(p), "interrupted\n", "and copies it into its parent");
                        ok(dm_ledger_lookup(root, "run-int1", &e, &err) == 0 && strcmp(e.status, "interrupted") == 0 &&
                                   dm_children_collect_interrupted(&ctx) == 0,
                           "its entry ends 'interrupted' (%s): the next sweep leaves it", e.status);
                }
        }

        snprintf(p, sizeof(p), "rm -rf '%s'", top);
        (void)!system(p);
        return done_testing();
}
