/* SPDX-License-Identifier: MIT */
/* A snapshot's workspace archive rewritten to go back into any container
 * (src/core/snapshot-archive.c): entries relative to /workspace, owned by
 * 0:0, no setuid, setgid or sticky bit; the top entry, entries outside it
 * and hard links out of it left out; symlinks kept as they are (they are
 * resolved inside the container that unpacks them); a malformed archive
 * is an error. */
#include "config.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "src/core/snapshot-internal.h"
#include "tests/tap.h"

struct item {
        const char *path;
        unsigned type; /* AE_IFREG, AE_IFDIR, AE_IFLNK; AE_IFREG with link = a hard link */
        unsigned mode;
        const char *data_or_link;
};

static void add(struct archive *a, const struct item *it)
{
        struct archive_entry *e = archive_entry_new();
        bool hard = it->type == AE_IFREG && it->data_or_link && it->data_or_link[0] == '@';

        archive_entry_set_pathname(e, it->path);
        archive_entry_set_filetype(e, it->type);
        archive_entry_set_perm(e, it->mode);
        archive_entry_set_uid(e, 2147549183u);
        archive_entry_set_gid(e, 2147549183u);
        archive_entry_set_uname(e, "nobody");
        if (it->type == AE_IFLNK)
                archive_entry_set_symlink(e, it->data_or_link);
        else if (hard)
                archive_entry_set_hardlink(e, it->data_or_link + 1);
        else if (it->type == AE_IFREG)
                archive_entry_set_size(e, it->data_or_link ? (la_int64_t)strlen(it->data_or_link) : 0);
        archive_write_header(a, e);
        if (it->type == AE_IFREG && !hard && it->data_or_link)
                archive_write_data(a, it->data_or_link, strlen(it->data_or_link));
        archive_entry_free(e);
}

static int make_tar(const struct item *items, size_t n)
{
        int fd = memfd_create("in.tar", MFD_CLOEXEC);
        struct archive *a = archive_write_new();

        archive_write_set_format_pax_restricted(a);
        archive_write_open_fd(a, fd);
        for (size_t i = 0; i < n; i++)
                add(a, &items[i]);
        archive_write_close(a);
        archive_write_free(a);
        lseek(fd, 0, SEEK_SET);
        return fd;
}

struct seen {
        char line[32][160];
        size_t n;
};

/* One line per entry: "path uid:gid mode type [target]". */
static void read_back(int fd, struct seen *s)
{
        struct archive *a = archive_read_new();
        struct archive_entry *e;

        memset(s, 0, sizeof(*s));
        lseek(fd, 0, SEEK_SET);
        archive_read_support_format_tar(a);
        archive_read_open_fd(a, fd, 4096);
        while (archive_read_next_header(a, &e) == ARCHIVE_OK && s->n < 32) {
                const char *target = archive_entry_hardlink(e) ? archive_entry_hardlink(e) : archive_entry_symlink(e);

                snprintf(s->line[s->n++], sizeof(s->line[0]), "%s %lld:%lld %04o %s%s%s", archive_entry_pathname(e),
                         (long long)archive_entry_uid(e), (long long)archive_entry_gid(e),
                         (unsigned)archive_entry_perm(e),
                         archive_entry_hardlink(e)               ? "hard"
                         : archive_entry_filetype(e) == AE_IFDIR ? "dir"
                         : archive_entry_filetype(e) == AE_IFLNK ? "sym"
                                                                 : "file",
                         target ? " " : "", target ? target : "");
        }
        archive_read_free(a);
}

static bool has(const struct seen *s, const char *line)
{
        for (size_t i = 0; i < s->n; i++)
                if (strcmp(s->line[i], line) == 0)
                        return true;
        diag("missing '%s'", line);
        return false;
}

int main(void)
{
        static const struct item items[] = {
                { "workspace/", AE_IFDIR, 0700, NULL },
                { "workspace/a", AE_IFREG, 04755, "hi" },
                { "workspace/g", AE_IFREG, 02644, "g" },
                { "workspace/sub/", AE_IFDIR, 01777, NULL },
                { "workspace/sub/link", AE_IFLNK, 0777, "/etc/shadow" },
                { "workspace/hl", AE_IFREG, 0644, "@workspace/a" },
                { "workspace/hout", AE_IFREG, 0644, "@etc/passwd" },
                { "other/x", AE_IFREG, 0644, "x" },
                { "workspace", AE_IFDIR, 0755, NULL },
        };
        struct dm_error err = { 0 };
        struct seen s;
        int in = make_tar(items, sizeof(items) / sizeof(items[0]));
        int out = memfd_create("out.tar", MFD_CLOEXEC);

        is_int(dm_snapshot_archive_normalize(in, out, &err), 5, "normalize: it says how many entries it wrote (%s)",
               err.msg);
        read_back(out, &s);
        is_int((int)s.n, 5, "five entries kept (of nine)");
        ok(has(&s, "a 0:0 0755 file"), "a setuid file: owned by 0:0, relative, setuid bit gone");
        ok(has(&s, "g 0:0 0644 file"), "a setgid file: the setgid bit gone");
        ok(has(&s, "sub/ 0:0 0777 dir"), "a sticky directory: the sticky bit gone");
        ok(has(&s, "sub/link 0:0 0777 sym /etc/shadow"), "a symlink kept as it is (resolved in the container)");
        ok(has(&s, "hl 0:0 0644 hard a"), "a hard link inside: its target made relative");
        {
                bool leaked = false;

                for (size_t i = 0; i < s.n; i++)
                        leaked |= strstr(s.line[i], "hout") || strstr(s.line[i], "other") ||
                                  strncmp(s.line[i], "workspace", 9) == 0;
                ok(!leaked, "the top entry, an entry outside it and a hard link out of it are left out");
        }
        close(in);
        close(out);

        {
                /* An empty /workspace: its top entry alone, nothing written. */
                static const struct item top[] = { { "workspace/", AE_IFDIR, 0755, NULL } };

                in = make_tar(top, 1);
                out = memfd_create("out-empty.tar", MFD_CLOEXEC);
                is_int(dm_snapshot_archive_normalize(in, out, &err), 0, "an empty /workspace: no entry written (%s)",
                       err.msg);
                close(in);
                close(out);
        }

        in = memfd_create("junk", MFD_CLOEXEC);
        out = memfd_create("out2.tar", MFD_CLOEXEC);
        if (write(in, "this is not a tar archive, not at all, and long enough to be read", 65) != 65)
                diag("short write");
        lseek(in, 0, SEEK_SET);
        ok(dm_snapshot_archive_normalize(in, out, &err) == -EIO && strstr(err.msg, "workspace archive"),
           "a malformed archive: -EIO naming it (%s)", err.msg);
        close(in);
        close(out);
        return done_testing();
}
