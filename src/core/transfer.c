/* SPDX-License-Identifier: MIT */
/* libarchive rather than a hand-written tar reader: the engines' archives
 * carry PAX headers (long names, xattrs, high-resolution times), and a
 * download must refuse every entry that is not one regular file, reliably. */
#include "config.h"
#include "src/core/transfer.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/core/ownership.h"
#include "src/basic/cleanup.h"
#include "src/basic/archive-copy.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/paths.h"

/* An unnamed temporary file in the state dir, which only the server writes. */
static int temp_fd(struct dm_context *ctx, struct dm_error *err)
{
        int fd;

        if (dm_mkdir_p(ctx->cfg.state_dir, 0700, err) < 0)
                return err->code;
        fd = open(ctx->cfg.state_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0)
                return dm_error_set(err, -errno, "cannot make a temporary file in '%s': %s", ctx->cfg.state_dir,
                                    strerror(errno));
        return fd;
}

/* A sandbox path: absolute, no NUL (JSON strings may hold one), no '..'
 * games needed: the engine resolves it inside the container. */
static int check_sandbox_path(const char *p, struct dm_error *err)
{
        if (!p || p[0] != '/')
                return dm_error_set(err, -EINVAL, "sandbox path '%s' must be absolute (e.g. /workspace/data.csv)",
                                    p ? p : "");
        if (strlen(p) >= PATH_MAX)
                return dm_error_set(err, -ENAMETOOLONG, "sandbox path is too long");
        return 0;
}

/* The folder is made inside the sandbox, by the sandbox. */
static int make_dir(struct dm_context *ctx, const struct dm_sandbox *sb, const char *dir, struct dm_error *err)
{
        struct dm_sandbox_exec mk = { .command = "mkdir -p -- \"$DM_DIR\"", .timeout_s = 30 };
        struct dm_sandbox_exec_result res;
        char env_dir[PATH_MAX + 16];
        const char *env[] = { env_dir, NULL };
        int r;

        snprintf(env_dir, sizeof(env_dir), "DM_DIR=%s", dir);
        mk.env = env;
        r = dm_sandbox_exec(ctx, sb, &mk, &res, err);
        if (r >= 0 && res.exit_code != 0)
                r = dm_error_set(err, -EINVAL, "cannot create '%s' in the sandbox: %.200s", dir,
                                 res.stderr_text ? res.stderr_text : "");
        dm_sandbox_exec_result_release(&res);
        return r;
}

/* File in (read from its start, st its fstat) to dst in the sandbox; what
 * names it in errors. */
static int upload_fd(struct dm_context *ctx, const struct dm_sandbox *sb, int in, const struct stat *st,
                     const char *what, const char *dst, int64_t *ret_bytes, struct dm_error *err)
{
        _cleanup_archive_locale_ locale_t utf8 = dm_archive_locale_begin();
        _cleanup_free_ char *dir = NULL;
        _cleanup_close_ int tar = -1;
        const char *name = strrchr(dst, '/') + 1;
        struct archive *a = NULL;
        struct archive_entry *e = NULL;
        struct dm_backend *b;
        char buf[65536];
        off_t tar_len;
        int r;

        dir = name - dst > 1 ? strndup(dst, (size_t)(name - dst - 1)) : strdup("/");
        if (!dir)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                return r;
        if (b->ops->put_file) {
                /* The backend takes the file as it is: no tar around it. */
                r = make_dir(ctx, sb, dir, err);
                if (r >= 0)
                        r = b->ops->put_file(b, sb->container, dst, in, st->st_size, st->st_mode & 0755, err);
                if (r >= 0)
                        *ret_bytes = st->st_size;
                return r;
        }
        tar = temp_fd(ctx, err);
        if (tar < 0)
                return tar;

        a = archive_write_new();
        e = archive_entry_new();
        if (!a || !e || archive_write_set_format_pax_restricted(a) != ARCHIVE_OK ||
            archive_write_open_fd(a, tar) != ARCHIVE_OK) {
                r = dm_error_set(err, -EIO, "cannot write the transfer archive");
                goto out;
        }
        archive_entry_set_pathname(e, name);
        archive_entry_set_size(e, st->st_size);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, st->st_mode & 0755);
        archive_entry_set_mtime(e, st->st_mtime, 0);
        if (archive_write_header(a, e) != ARCHIVE_OK) {
                r = dm_error_set(err, -EIO, "cannot write the transfer archive: %s", archive_error_string(a));
                goto out;
        }
        for (;;) {
                ssize_t n = read(in, buf, sizeof(buf));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        r = dm_error_set(err, -errno, "reading %s: %s", what, strerror(errno));
                        goto out;
                }
                if (n == 0)
                        break;
                if (archive_write_data(a, buf, (size_t)n) != n) {
                        r = dm_error_set(err, -EIO, "cannot write the transfer archive: %s", archive_error_string(a));
                        goto out;
                }
        }
        if (archive_write_close(a) != ARCHIVE_OK) {
                r = dm_error_set(err, -EIO, "cannot write the transfer archive: %s", archive_error_string(a));
                goto out;
        }
        tar_len = lseek(tar, 0, SEEK_END);
        lseek(tar, 0, SEEK_SET);

        r = make_dir(ctx, sb, dir, err);
        if (r < 0)
                goto out;
        r = b->ops->put_archive(b, sb->container, dir, tar, tar_len, err);
        dm_sandbox_usage_changed(ctx, sb->id);
        if (r >= 0)
                *ret_bytes = st->st_size;
out:
        if (a)
                archive_write_free(a);
        archive_entry_free(e);
        return r;
}

/* dst names a file in the sandbox: absolute, and not a directory. */
static int check_upload_dst(const char *dst, struct dm_error *err)
{
        const char *name;
        int r;

        r = check_sandbox_path(dst, err);
        if (r < 0)
                return r;
        name = strrchr(dst, '/') + 1;
        if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
                return dm_error_set(err, -EINVAL, "sandbox path '%s' must name a file, not a directory", dst);
        return 0;
}

int dm_transfer_upload(struct dm_context *ctx, const struct dm_sandbox *sb, const char *src, const char *const *granted,
                       const char *dst, int64_t max_bytes, int64_t *ret_bytes, struct dm_error *err)
{
        _cleanup_free_ char *resolved = NULL, *what = NULL;
        _cleanup_close_ int in = -1, checked = -1;
        struct dm_allowed_roots roots = ctx->roots;
        char proc[64];
        struct stat st;
        int r;

        r = check_upload_dst(dst, err);
        if (r < 0)
                return r;
        if (granted && granted[0] && dm_allowed_roots_widen(&ctx->roots, granted, &roots) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_path_open(&roots, src, DM_PATH_FILE, &resolved, &checked, err);
        if (roots.roots != ctx->roots.roots)
                free(roots.roots);
        if (r < 0)
                return r;
        /* Reopened through the checked fd: the file that was checked, not
         * whatever its path names now; never blocking on a FIFO. */
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", checked);
        in = open(proc, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        if (in < 0 || fstat(in, &st) < 0 || !S_ISREG(st.st_mode))
                return dm_error_set(err, -EINVAL, "cannot read '%s' as a regular file", src);
        fcntl(in, F_SETFL, fcntl(in, F_GETFL) & ~O_NONBLOCK);
        if (st.st_size > max_bytes)
                return dm_error_set(err, -EFBIG, "'%s' is %lld bytes, over the %lld-byte limit (DEMESNE_TRANSFER_MAX)",
                                    src, (long long)st.st_size, (long long)max_bytes);
        if (asprintf(&what, "'%s'", src) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        return upload_fd(ctx, sb, in, &st, what, dst, ret_bytes, err);
}

int dm_transfer_upload_bytes(struct dm_context *ctx, const struct dm_sandbox *sb, const void *data, size_t len,
                             const char *dst, int64_t max_bytes, int64_t *ret_bytes, struct dm_error *err)
{
        _cleanup_close_ int in = -1;
        struct stat st;
        int r;

        r = check_upload_dst(dst, err);
        if (r < 0)
                return r;
        if ((int64_t)len > max_bytes)
                return dm_error_set(err, -EFBIG,
                                    "the content is %zu bytes, over the %lld-byte limit "
                                    "(DEMESNE_TRANSFER_MAX)",
                                    len, (long long)max_bytes);
        in = temp_fd(ctx, err);
        if (in < 0)
                return in;
        if (dm_write_all(in, data, len) < 0 || lseek(in, 0, SEEK_SET) < 0 || fstat(in, &st) < 0)
                return dm_error_set(err, -errno, "cannot stage the content: %s", strerror(errno));
        st.st_mode = S_IFREG | 0644;
        return upload_fd(ctx, sb, in, &st, "the content", dst, ret_bytes, err);
}

/* The downloads folder inside the output directory, opened without following
 * a link the sandbox may have put there. */
static int open_downloads(const char *output_dir, struct dm_error *err)
{
        _cleanup_close_ int out = dm_io_open_dir(output_dir);
        int fd;

        if (out < 0)
                return dm_error_set(err, out, "cannot open output directory '%s': %s", output_dir, strerror(-out));
        if (mkdirat(out, "downloads", 0755) < 0 && errno != EEXIST)
                return dm_error_set(err, -errno, "cannot create '%s/downloads': %s", output_dir, strerror(errno));
        fd = dm_io_open_beneath(out, "downloads", O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0)
                return dm_error_set(err, -EPERM,
                                    "'%s/downloads' is not a plain directory (the sandbox replaced it with a link "
                                    "or a file?): refusing to write there; remove it and retry",
                                    output_dir);
        return fd;
}

/* Straight into downloads/<name>, for backends that hand out plain files. */
static int download_file(struct dm_backend *b, const struct dm_sandbox *sb, const char *src, const char *resolved,
                         const char *name, int64_t max_bytes, char **ret_host_path, int64_t *ret_bytes,
                         struct dm_error *err)
{
        _cleanup_close_ int dl = -1, out = -1;
        struct stat st;
        int r;

        dl = open_downloads(sb->output_dir, err);
        if (dl < 0)
                return dl;
        unlinkat(dl, name, 0);
        out = dm_io_open_beneath(dl, name, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (out < 0)
                return dm_error_set(err, out, "cannot create '%s/downloads/%s': %s", sb->output_dir, name,
                                    dm_io_strerror(out));
        r = b->ops->get_file(b, sb->container, resolved, out, max_bytes, err);
        if (r == -EFBIG)
                r = dm_error_set(err, -EFBIG, "'%s' is over the %lld-byte limit (DEMESNE_TRANSFER_MAX)", src,
                                 (long long)max_bytes);
        else if (r == -EISDIR)
                r = dm_error_set(err, -EISDIR, "'%s' in the sandbox is not a regular file", src);
        if (r >= 0 && fstat(out, &st) < 0)
                r = dm_error_set(err, -errno, "fstat: %s", strerror(errno));
        if (r >= 0 && asprintf(ret_host_path, "%s/downloads/%s", sb->output_dir, name) < 0)
                r = dm_error_set(err, -ENOMEM, "out of memory");
        if (r < 0) {
                unlinkat(dl, name, 0);
                return r;
        }
        *ret_bytes = st.st_size;
        return 0;
}

static int download(struct dm_context *ctx, const struct dm_sandbox *sb, const char *src, int64_t max_bytes,
                    char **ret_host_path, int64_t *ret_bytes, struct dm_error *err)
{
        _cleanup_close_ int tar = -1, dl = -1, out = -1;
        struct dm_sandbox_exec_result res = { 0 };
        struct archive *a = NULL;
        struct archive_entry *e;
        struct dm_backend *b;
        char resolved[PATH_MAX], env_src[PATH_MAX + 16], name[256];
        const char *env[] = { env_src, NULL };
        const char *base;
        int64_t total = 0;
        int r;

        r = check_sandbox_path(src, err);
        if (r < 0)
                return r;
        r = dm_context_backend(ctx, &b, err);
        if (r < 0)
                return r;
        /* Resolve links inside the sandbox: a link to /etc/shadow names the
         * sandbox's own /etc/shadow, never the host's. */
        snprintf(env_src, sizeof(env_src), "DM_SRC=%s", src);
        struct dm_sandbox_exec q = {
                .command = "p=$(realpath -e -- \"$DM_SRC\") || exit 3; [ -f \"$p\" ] || exit 4; printf %s \"$p\"",
                .env = env,
                .timeout_s = 30,
        };
        r = dm_sandbox_exec(ctx, sb, &q, &res, err);
        if (r < 0) {
                dm_sandbox_exec_result_release(&res);
                return r;
        }
        if (res.exit_code == 3 || res.exit_code == 4 || res.stdout_len == 0 || res.stdout_len >= sizeof(resolved)) {
                r = dm_error_set(err, res.exit_code == 4 ? -EISDIR : -ENOENT,
                                 res.exit_code == 4 ? "'%s' in the sandbox is not a regular file"
                                                    : "'%s' does not exist in the sandbox",
                                 src);
                dm_sandbox_exec_result_release(&res);
                return r;
        }
        memcpy(resolved, res.stdout_text, res.stdout_len);
        resolved[res.stdout_len] = '\0';
        dm_sandbox_exec_result_release(&res);

        /* The sandbox answered that: it may say anything. */
        base = strrchr(resolved, '/');
        base = base ? base + 1 : "";
        if (!*base || !strcmp(base, ".") || !strcmp(base, "..") || strlen(base) >= sizeof(name))
                return dm_error_set(err, -EINVAL, "cannot name a download after '%s'", resolved);
        snprintf(name, sizeof(name), "%s", base);

        if (b->ops->get_file)
                return download_file(b, sb, src, resolved, name, max_bytes, ret_host_path, ret_bytes, err);
        tar = temp_fd(ctx, err);
        if (tar < 0)
                return tar;
        /* The tar adds headers to the file: allow for them, then check the file itself. */
        r = b->ops->get_archive(b, sb->container, resolved, tar, max_bytes + (1 << 20), err);
        if (r == -EFBIG)
                return dm_error_set(err, -EFBIG, "'%s' is over the %lld-byte limit (DEMESNE_TRANSFER_MAX)", src,
                                    (long long)max_bytes);
        if (r < 0)
                return r;
        lseek(tar, 0, SEEK_SET);

        a = archive_read_new();
        if (!a || archive_read_support_format_tar(a) != ARCHIVE_OK ||
            archive_read_open_fd(a, tar, 65536) != ARCHIVE_OK) {
                r = dm_error_set(err, -EIO, "cannot read the engine's archive");
                goto done;
        }
        if (archive_read_next_header(a, &e) != ARCHIVE_OK) {
                r = dm_error_set(err, -EPROTO, "the engine's archive is empty or damaged: %s", archive_error_string(a));
                goto done;
        }
        if (archive_entry_filetype(e) != AE_IFREG) {
                r = dm_error_set(err, -EISDIR, "'%s' in the sandbox is not a regular file", src);
                goto done;
        }
        if (archive_entry_size(e) > max_bytes) {
                r = dm_error_set(err, -EFBIG, "'%s' is %lld bytes, over the %lld-byte limit (DEMESNE_TRANSFER_MAX)",
                                 src, (long long)archive_entry_size(e), (long long)max_bytes);
                goto done;
        }
        dl = open_downloads(sb->output_dir, err);
        if (dl < 0) {
                r = dl;
                goto done;
        }
        /* Replace a previous download of the same name; never follow a link. */
        unlinkat(dl, name, 0);
        out = dm_io_open_beneath(dl, name, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (out < 0) {
                r = dm_error_set(err, out, "cannot create '%s/downloads/%s': %s", sb->output_dir, name,
                                 dm_io_strerror(out));
                goto done;
        }
        for (;;) {
                char buf[65536];
                la_ssize_t n = archive_read_data(a, buf, sizeof(buf));
                if (n == 0)
                        break;
                if (n < 0) {
                        r = dm_error_set(err, -EIO, "reading the engine's archive: %s", archive_error_string(a));
                        goto done;
                }
                total += n;
                if (total > max_bytes || dm_write_all(out, buf, (size_t)n) < 0) {
                        r = dm_error_set(err, total > max_bytes ? -EFBIG : -EIO, "writing the download failed");
                        goto done;
                }
        }
        if (asprintf(ret_host_path, "%s/downloads/%s", sb->output_dir, name) < 0) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto done;
        }
        *ret_bytes = total;
        r = 0;
done:
        if (r < 0 && out >= 0)
                unlinkat(dl, name, 0);
        if (a)
                archive_read_free(a);
        return r;
}

/* The server wrote the file: it and downloads/ go to the output root's
 * owner, as everything else in the output directory does. */
static void give_download(struct dm_context *ctx, const char *output_dir, const char *host_path)
{
        _cleanup_close_ int out = open(output_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), dl = -1;
        struct dm_owner owner;
        struct dm_error err = { 0 };
        struct stat st;

        if (out < 0 || dm_owner_of(ctx->cfg.output_root, &owner, &err) < 0)
                return;
        dl = openat(out, "downloads", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dl < 0)
                return;
        if (fstat(dl, &st) == 0 && (st.st_uid != owner.uid || st.st_gid != owner.gid))
                (void)!fchown(dl, owner.uid, owner.gid);
        if (dm_owner_give_entry(dl, strrchr(host_path, '/') + 1, &owner) < 0 && geteuid() == 0)
                log_warning("cannot give '%s' to uid %u: %s", host_path, (unsigned)owner.uid, strerror(errno));
}

int dm_transfer_download(struct dm_context *ctx, const struct dm_sandbox *sb, const char *src, int64_t max_bytes,
                         char **ret_host_path, int64_t *ret_bytes, struct dm_error *err)
{
        _cleanup_archive_locale_ locale_t utf8 = dm_archive_locale_begin(); /* download()'s archive */
        int r = download(ctx, sb, src, max_bytes, ret_host_path, ret_bytes, err);

        if (r >= 0)
                give_download(ctx, sb->output_dir, *ret_host_path);
        return r;
}
