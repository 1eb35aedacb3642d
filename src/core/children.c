/* SPDX-License-Identifier: MIT */
/* A child's output copied into its parent's (src/core/children.h). */
#include "config.h"
#include "src/core/children.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/principal.h"
#include "src/basic/timeutil.h"
#include "src/core/ledger.h"
#include "src/core/ownership.h"

#define NOTE_MAX 8192 /* the .truncated note names this much, then counts */

struct copy {
        const struct dm_children_limits *lim;
        struct dm_children_copied *st;
        size_t entries, max_entries;
        char note[NOTE_MAX];
        size_t note_len, unnamed;
};

static bool plain_name(const char *s)
{
        size_t n = s ? strlen(s) : 0;

        return n > 0 && n <= 64 && s[0] != '.' &&
               strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == n;
}

/* One line of the note: what was left out and why. */
static void left_out(struct copy *c, const char *path, const char *why)
{
        int n;

        c->st->left_out++;
        n = snprintf(c->note + c->note_len, sizeof(c->note) - c->note_len, "%s: %s\n", path, why);
        if (n < 0 || (size_t)n >= sizeof(c->note) - c->note_len)
                c->unnamed++;
        else
                c->note_len += (size_t)n;
}

/* What is made belongs to the owner of the rest of the parent's output. */
static void give(const struct copy *c, int fd)
{
        if (c->lim->chown)
                (void)!fchown(fd, c->lim->uid, c->lim->gid);
}

/* len bytes from in to out: copy_file_range, else sendfile, else read and
 * write. 0 or -errno; *copied what went over. */
static int copy_data(int in, int out, uint64_t len, uint64_t *copied)
{
        bool fallback = false;
        char buf[65536];

        *copied = 0;
        while (*copied < len) {
                size_t want = len - *copied > (1u << 30) ? (1u << 30) : (size_t)(len - *copied);
                ssize_t n = -1;

                if (!fallback) {
                        n = copy_file_range(in, NULL, out, NULL, want, 0);
                        if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
                                      errno == EPERM)) {
                                fallback = true;
                                continue;
                        }
                } else {
                        n = sendfile(out, in, NULL, want);
                        if (n < 0 && (errno == EINVAL || errno == ENOSYS)) {
                                ssize_t r = read(in, buf, want < sizeof(buf) ? want : sizeof(buf));
                                int w;

                                if (r <= 0)
                                        return r < 0 ? -errno : 0;
                                w = dm_write_all(out, buf, (size_t)r);
                                if (w < 0)
                                        return w;
                                n = r;
                        }
                }
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break; /* it shrank since fstat */
                *copied += (uint64_t)n;
        }
        return 0;
}

static void copy_file(struct copy *c, int src, int dst, const char *name, const char *path)
{
        _cleanup_close_ int in = -1, out = -1;
        uint64_t copied = 0;
        struct stat st;
        int r;

        /* O_NONBLOCK: a FIFO swapped in since fstatat does not block us. */
        in = openat(src, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode)) {
                c->st->skipped++;
                return;
        }
        if (c->lim->max_bytes > 0 && (uint64_t)st.st_size > (uint64_t)c->lim->max_bytes - c->st->bytes) {
                char why[96];

                snprintf(why, sizeof(why), "%lld bytes, over what the cap left", (long long)st.st_size);
                left_out(c, path, why);
                return;
        }
        out = openat(dst, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out < 0) {
                c->st->skipped++;
                return;
        }
        (void)!fcntl(in, F_SETFL, fcntl(in, F_GETFL) & ~O_NONBLOCK);
        /* Never more than was counted against the cap, if it grew. */
        r = copy_data(in, out, (uint64_t)st.st_size, &copied);
        c->st->bytes += copied;
        if (r < 0)
                left_out(c, path, "only partly copied: a read or write failed");
        give(c, out);
        (void)!fchmod(out, st.st_mode & 0111 ? 0755 : 0644);
        c->st->files++;
}

static void copy_link(struct copy *c, int src, int dst, const char *name)
{
        char target[PATH_MAX];
        ssize_t n = readlinkat(src, name, target, sizeof(target) - 1);

        if (n < 0) {
                c->st->skipped++;
                return;
        }
        target[n] = '\0';
        /* Made again as it was: what it points at is never opened here. */
        if (symlinkat(target, dst, name) < 0) {
                c->st->skipped++;
                return;
        }
        if (c->lim->chown)
                (void)!fchownat(dst, name, c->lim->uid, c->lim->gid, AT_SYMLINK_NOFOLLOW);
        c->st->links++;
}

/* The entries of src into dst (both taken: closed here). */
static void copy_dir(struct copy *c, int src, int dst, const char *prefix, unsigned depth)
{
        DIR *d = fdopendir(src);
        struct dirent *e;

        if (!d) {
                close(src);
                c->st->skipped++;
                goto done;
        }
        while ((e = readdir(d))) {
                char path[PATH_MAX];
                struct stat st;

                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                if ((size_t)snprintf(path, sizeof(path), "%s%s%s", prefix, prefix[0] ? "/" : "", e->d_name) >=
                    sizeof(path)) {
                        c->st->skipped++;
                        continue;
                }
                if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                        continue; /* gone since readdir */
                if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode)) {
                        c->st->skipped++;
                        continue;
                }
                if (c->entries >= c->max_entries) {
                        left_out(c, path, "past the cap on entries");
                        continue;
                }
                c->entries++;
                if (S_ISREG(st.st_mode))
                        copy_file(c, dirfd(d), dst, e->d_name, path);
                else if (S_ISLNK(st.st_mode))
                        copy_link(c, dirfd(d), dst, e->d_name);
                else if (depth >= DM_CHILDREN_MAX_DEPTH)
                        left_out(c, path, "too deep");
                else {
                        int sub = openat(dirfd(d), e->d_name,
                                         O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC),
                            made = -1;

                        if (sub >= 0 && mkdirat(dst, e->d_name, 0700) == 0)
                                made = openat(dst, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                        if (made < 0) {
                                if (sub >= 0)
                                        close(sub);
                                c->st->skipped++;
                                continue;
                        }
                        c->st->dirs++;
                        copy_dir(c, sub, made, path, depth + 1);
                }
        }
        closedir(d);
done:
        /* Open to the parent only once filled. */
        give(c, dst);
        (void)!fchmod(dst, 0755);
        close(dst);
}

/* children/<id>.truncated in the directory cfd: what the caps left out. */
static void write_note(struct copy *c, int cfd, const char *child_id)
{
        char name[96];
        _cleanup_close_ int fd = -1;

        snprintf(name, sizeof(name), "%s.truncated", child_id);
        fd = openat(cfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
                log_warning("child %s: cannot write its note '%s': %s", child_id, name, strerror(errno));
                return;
        }
        (void)dm_write_all(fd, c->note, c->note_len);
        if (c->unnamed) {
                char more[96];
                int n = snprintf(more, sizeof(more), "... and %zu more\n", c->unnamed);

                (void)dm_write_all(fd, more, (size_t)n);
        }
        give(c, fd);
        (void)!fchmod(fd, 0644);
}

int dm_children_copy(int src_fd, int parent_fd, const char *child_id, const struct dm_children_limits *lim,
                     struct dm_children_copied *ret, struct dm_error *err)
{
        _cleanup_free_ struct copy *c = calloc(1, sizeof(*c));
        _cleanup_close_ int cfd = -1;
        int src, dst;
        bool made;

        memset(ret, 0, sizeof(*ret));
        if (!c)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (!plain_name(child_id))
                return dm_error_set(err, -EINVAL, "'%.64s' is not a child's id", child_id ? child_id : "");
        c->lim = lim;
        c->st = ret;
        c->max_entries = lim->max_entries ? lim->max_entries : DM_CHILDREN_MAX_ENTRIES;

        made = mkdirat(parent_fd, DM_CHILDREN_DIR, 0755) == 0;
        if (!made && errno != EEXIST)
                return dm_error_set(err, -errno, "cannot make " DM_CHILDREN_DIR "/ in the parent's output: %s",
                                    strerror(errno));
        /* The parent may have put anything there: only a directory of its
         * own output will do, reached through no link. */
        cfd = dm_io_open_beneath(parent_fd, DM_CHILDREN_DIR, O_RDONLY | O_DIRECTORY, 0);
        if (cfd < 0)
                return dm_error_set(err, cfd, DM_CHILDREN_DIR " in the parent's output is %s: nothing copied",
                                    cfd == -DM_IO_EBADTYPE || cfd == -ENOTDIR || cfd == -ELOOP
                                            ? "a link or not a directory"
                                            : dm_io_strerror(cfd));
        if (made) {
                give(c, cfd);
                (void)!fchmod(cfd, 0755);
        }
        if (mkdirat(cfd, child_id, 0700) < 0)
                return dm_error_set(err, -errno, DM_CHILDREN_DIR "/%s in the parent's output: %s: nothing copied",
                                    child_id, errno == EEXIST ? "the name is taken" : strerror(errno));
        dst = dm_io_open_beneath(cfd, child_id, O_RDONLY | O_DIRECTORY, 0);
        if (dst < 0)
                return dm_error_set(err, dst, DM_CHILDREN_DIR "/%s in the parent's output is %s: nothing copied",
                                    child_id, dm_io_strerror(dst));
        src = fcntl(src_fd, F_DUPFD_CLOEXEC, 3);
        if (src < 0) {
                close(dst);
                return dm_error_set(err, -errno, "cannot read the child's output: %s", strerror(errno));
        }
        /* The walk reads from the start whatever src_fd read before. */
        (void)lseek(src, 0, SEEK_SET);
        copy_dir(c, src, dst, "", 0);
        if (ret->left_out)
                write_note(c, cfd, child_id);
        return 0;
}

/* The output directory of the parent of child (entry), open, or -errno:
 * -ESRCH when the parent has gone. */
static int open_parent(struct dm_context *ctx, const struct dm_ledger_entry *child, char *ret_id, size_t len,
                       struct dm_error *err)
{
        const char *parent = dm_principal_leaf(child->principal);
        struct dm_ledger_entry p;
        int fd;

        snprintf(ret_id, len, "%s", parent ? parent : "");
        if (!parent)
                return -EINVAL;
        if (dm_ledger_lookup(ctx->cfg.output_root, parent, &p, err) < 0)
                return err->code;
        if ((strcmp(p.kind, "sandbox") == 0 && strcmp(p.status, "running") != 0) || !p.output_dir[0])
                return dm_error_set(err, -ESRCH, "its parent %s is gone", parent);
        fd = dm_io_open_dir(p.output_dir);
        if (fd < 0)
                return dm_error_set(err, fd == -ENOENT ? -ESRCH : fd, "its parent's output '%s': %s", p.output_dir,
                                    fd == -ENOENT ? "gone" : dm_io_strerror(fd));
        return fd;
}

void dm_children_collect(struct dm_context *ctx, const char *child_id)
{
        struct dm_ledger_entry child;
        struct dm_children_limits lim = { .max_bytes = ctx->cfg.disk_max };
        struct dm_children_copied got = { 0 };
        struct dm_error err = { 0 };
        _cleanup_close_ int pfd = -1, sfd = -1;
        char parent[DM_PRINCIPAL_MAX];
        struct dm_owner owner;

        if (dm_ledger_lookup(ctx->cfg.output_root, child_id, &child, &err) < 0 ||
            dm_principal_depth(child.principal) == 0)
                return; /* not a child (or from before the ledger) */
        pfd = open_parent(ctx, &child, parent, sizeof(parent), &err);
        if (pfd < 0) {
                if (pfd == -ESRCH)
                        log_debug("child %s: %s; its output is not copied", child_id, err.msg);
                else
                        log_warning("child %s: its output is not copied into its parent %s: %s", child_id, parent,
                                    err.msg);
                return;
        }
        sfd = dm_io_open_dir(child.output_dir);
        if (sfd < 0) {
                log_warning("child %s: its output '%s': %s", child_id, child.output_dir, dm_io_strerror(sfd));
                return;
        }
        if (geteuid() == 0 && dm_owner_of(ctx->cfg.output_root, &owner, &err) == 0) {
                lim.chown = true;
                lim.uid = owner.uid;
                lim.gid = owner.gid;
        }
        dm_error_clear(&err);
        if (dm_children_copy(sfd, pfd, child_id, &lim, &got, &err) < 0) {
                log_warning("child %s: its output is not copied into its parent %s: %s", child_id, parent, err.msg);
                return;
        }
        log_info("child %s: its output is in its parent %s's " DM_CHILDREN_DIR "/%s/ (%zu files, %llu bytes%s)",
                 child_id, parent, child_id, got.files, (unsigned long long)got.bytes,
                 got.left_out ? "; what the caps left out is listed beside it, in .truncated" : "");
}

struct interrupted {
        char (*ids)[80];
        unsigned *depth;
        int64_t *started;
        size_t n, max;
};

static void note_interrupted(void *userdata, const char *run_id, const struct dm_ledger_entry *e)
{
        struct interrupted *w = userdata;
        unsigned depth = dm_principal_depth(e->principal);

        if (depth == 0 || w->n >= w->max || strlen(run_id) >= sizeof(w->ids[0]))
                return;
        snprintf(w->ids[w->n], sizeof(w->ids[0]), "%s", run_id);
        w->started[w->n] = e->started_ms;
        w->depth[w->n++] = depth;
}

size_t dm_children_collect_interrupted(struct dm_context *ctx)
{
        struct interrupted w = { .max = 4096 };
        struct dm_error err = { 0 };
        size_t done = 0;

        w.ids = calloc(w.max, sizeof(*w.ids));
        w.depth = calloc(w.max, sizeof(*w.depth));
        w.started = calloc(w.max, sizeof(*w.started));
        if (w.ids && w.depth && w.started)
                dm_ledger_interrupted(ctx->cfg.output_root, ctx->owner, note_interrupted, &w);
        /* The deepest first, each into its parent while that is there. */
        for (unsigned d = DM_PRINCIPAL_MAX; d > 0 && w.n; d--)
                for (size_t i = 0; i < w.n; i++) {
                        if (w.depth[i] != d)
                                continue;
                        dm_children_collect(ctx, w.ids[i]);
                        if (dm_ledger_end(ctx->cfg.output_root, w.ids[i], "interrupted", false, 0,
                                          w.started[i] > 0 ? dm_wall_ms() - w.started[i] : 0,
                                          "its server ended before it did", &err) < 0)
                                log_warning("run %s: %s", w.ids[i], err.msg);
                        dm_error_clear(&err);
                        done++;
                }
        free(w.ids);
        free(w.depth);
        free(w.started);
        return done;
}
