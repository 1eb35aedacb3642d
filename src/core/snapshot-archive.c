/* SPDX-License-Identifier: MIT */
/* A snapshot's /workspace archive, made fit to go back into another
 * sandbox: the engine's tar of a bind mount carries the host ids of the
 * source container's id range, which the engine cannot map into a new
 * container's range (Podman: "container ID ... cannot be mapped to a host
 * ID"). So each entry is rewritten owned by the container's root (0:0),
 * without setuid, setgid or sticky bits, and relative to /workspace. The
 * archive is only read and written here, never unpacked on the host. */
#include "config.h"
#include "src/core/snapshot-internal.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <string.h>

#include "src/basic/archive-copy.h"

#define TOP "workspace"

/* "workspace/x" → "x"; the top entry itself and anything outside it → NULL. */
static const char *below_top(const char *path)
{
        size_t n = strlen(TOP);

        if (!path || strncmp(path, TOP, n) != 0 || path[n] != '/' || !path[n + 1])
                return NULL;
        return path + n + 1;
}

/* 1 written, 0 left out, or a negative errno. */
static int copy_entry(struct archive *in, struct archive *out, struct archive_entry *e, struct dm_error *err)
{
        int r;

        const char *rel = below_top(archive_entry_pathname(e)), *link = archive_entry_hardlink(e);
        if (!rel)
                return 0;
        archive_entry_set_pathname(e, rel);
        if (link) {
                const char *lrel = below_top(link);

                if (!lrel)
                        return 0; /* a hard link out of /workspace: left out */
                archive_entry_set_hardlink(e, lrel);
        }
        archive_entry_set_uid(e, 0);
        archive_entry_set_gid(e, 0);
        archive_entry_set_uname(e, "root");
        archive_entry_set_gname(e, "root");
        archive_entry_set_perm(e, archive_entry_perm(e) & 0777);
        if (archive_write_header(out, e) != ARCHIVE_OK)
                return dm_error_set(err, -EIO, "cannot write the workspace archive: %s", archive_error_string(out));
        r = dm_archive_copy_data(in, "the workspace archive", out, "the workspace archive", err);
        return r < 0 ? r : 1;
}

int dm_snapshot_archive_normalize(int in_fd, int out_fd, struct dm_error *err)
{
        _cleanup_archive_locale_ locale_t utf8 = dm_archive_locale_begin();
        struct archive *in = archive_read_new(), *out = archive_write_new();
        struct archive_entry *e;
        int r = 0, ar, copied = 0;

        if (!in || !out || archive_read_support_format_tar(in) != ARCHIVE_OK ||
            archive_write_set_format_pax_restricted(out) != ARCHIVE_OK) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto out;
        }
        if (archive_read_open_fd(in, in_fd, 65536) != ARCHIVE_OK || archive_write_open_fd(out, out_fd) != ARCHIVE_OK) {
                r = dm_error_set(err, -EIO, "cannot open the workspace archive: %s",
                                 archive_error_string(in) ? archive_error_string(in) : archive_error_string(out));
                goto out;
        }
        while (r >= 0 && (ar = archive_read_next_header(in, &e)) == ARCHIVE_OK) {
                r = copy_entry(in, out, e, err);
                if (r > 0)
                        copied++;
        }
        if (r >= 0 && ar != ARCHIVE_EOF)
                r = dm_error_set(err, -EIO, "cannot read the workspace archive: %s", archive_error_string(in));
        if (r >= 0 && archive_write_close(out) != ARCHIVE_OK)
                r = dm_error_set(err, -EIO, "cannot write the workspace archive: %s", archive_error_string(out));
out:
        archive_read_free(in);
        archive_write_free(out);
        return r < 0 ? r : copied;
}
