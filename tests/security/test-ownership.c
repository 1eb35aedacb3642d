/* SPDX-License-Identifier: MIT */
/* The host-side give-back on its own (src/core/ownership.c), without any engine
 * or user namespace: a tree as a sandbox's root could leave it (files of a
 * foreign uid, setuid and setgid bits, a FIFO, links to host files, a
 * directory nobody may enter) goes to the owner with no privilege left,
 * nothing outside it is touched, and nothing blocks. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/core/context.h"
#include "src/core/ownership.h"
#include "tests/tap.h"

#define SANDBOX_ROOT 2147483647u
#define OWNER 4242u

static char top[64];

static void mk(const char *rel, mode_t mode, bool dir)
{
        char p[256];

        snprintf(p, sizeof(p), "%s/%s", top, rel);
        if (dir ? mkdir(p, 0700) : close(open(p, O_WRONLY | O_CREAT | O_EXCL, 0600))) {
                printf("Bail out! cannot make %s: %s\n", p, strerror(errno));
                exit(1);
        }
        if (chmod(p, mode) < 0 || lchown(p, SANDBOX_ROOT, SANDBOX_ROOT) < 0) {
                printf("Bail out! cannot set up %s: %s\n", p, strerror(errno));
                exit(1);
        }
}

static struct stat st_of(const char *rel)
{
        struct stat st = { 0 };
        char p[256];

        snprintf(p, sizeof(p), "%s/%s", top, rel);
        if (lstat(p, &st) < 0)
                printf("# lstat %s: %s\n", p, strerror(errno));
        return st;
}

static void owned(const char *rel, mode_t want)
{
        struct stat st = st_of(rel);

        ok(st.st_uid == OWNER && st.st_gid == OWNER && (st.st_mode & 07777) == want,
           "%s: owner %u:%u mode %04o (got %u:%u %04o)", rel, OWNER, OWNER, (unsigned)want, (unsigned)st.st_uid,
           (unsigned)st.st_gid, (unsigned)(st.st_mode & 07777));
}

int main(void)
{
        struct dm_owner owner = { .uid = OWNER, .gid = OWNER };
        struct dm_error err = { 0 };
        struct stat st;
        char p[256], victim[128];
        int r;

        if (geteuid() != 0) {
                printf("1..0 # SKIP needs root (CAP_CHOWN) to make files of another uid\n");
                return 77;
        }
        snprintf(top, sizeof(top), "/tmp/dm-own-XXXXXX");
        if (!mkdtemp(top))
                return printf("Bail out! mkdtemp: %s\n", strerror(errno)), 1;
        /* A host file outside the tree, owned by root with its own mode. */
        snprintf(victim, sizeof(victim), "%s.victim", top);
        close(open(victim, O_WRONLY | O_CREAT | O_EXCL, 0600));
        chmod(victim, 04750);

        mk("out", 0755, true);
        mk("out/s", 04755, false);
        mk("out/g", 02711, false);
        mk("out/unreadable", 0, false);
        mk("out/shared", 02777, true);
        mk("out/shared/deep", 06755, false);
        mk("out/locked", 0, true);
        snprintf(p, sizeof(p), "%s/out/locked", top);
        chmod(p, 0700);
        mk("out/locked/inner", 04700, false);
        chmod(p, 0);
        snprintf(p, sizeof(p), "%s/out/fifo", top);
        mkfifo(p, 04666);
        chmod(p, 04666);
        lchown(p, SANDBOX_ROOT, SANDBOX_ROOT);
        snprintf(p, sizeof(p), "%s/out/link", top);
        (void)!symlink(victim, p);
        lchown(p, SANDBOX_ROOT, SANDBOX_ROOT);
        snprintf(p, sizeof(p), "%s/out/dirlink", top);
        (void)!symlink("/etc", p);

        /* A FIFO opened for reading would block here for ever. */
        alarm(20);
        snprintf(p, sizeof(p), "%s/out", top);
        r = dm_owner_give_back(p, &owner, &err);
        alarm(0);
        is_int(r, 0, "the walk finishes (no FIFO opened): %s", err.msg);

        owned("out", 0700);
        owned("out/s", 0755);
        owned("out/g", 0711);
        owned("out/unreadable", 0400);
        owned("out/shared", 0777);
        owned("out/shared/deep", 0755);
        owned("out/locked", 0700);
        owned("out/locked/inner", 0700);
        owned("out/fifo", 0666);
        st = st_of("out/link");
        ok(S_ISLNK(st.st_mode) && st.st_uid == OWNER, "a link is given back as a link (uid %u)", (unsigned)st.st_uid);
        ok(stat(victim, &st) == 0 && st.st_uid == 0 && (st.st_mode & 07777) == 04750,
           "the host file a link names is untouched (uid %u, mode %04o)", (unsigned)st.st_uid,
           (unsigned)(st.st_mode & 07777));
        ok(stat("/etc", &st) == 0 && st.st_uid == 0, "a link to a host directory is not followed");

        /* One entry alone, as for a downloaded file. */
        snprintf(p, sizeof(p), "%s/single", top);
        close(open(p, O_WRONLY | O_CREAT | O_EXCL, 0644));
        chmod(p, 06755);
        {
                int dfd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

                is_int(dm_owner_give_entry(dfd, "single", &owner), 0, "one entry is given back");
                close(dfd);
        }
        owned("single", 0755);

        /* Lending: the directory itself goes to the sandbox's root, 0700. */
        snprintf(p, sizeof(p), "%s/lent", top);
        mkdir(p, 0755);
        is_int(dm_owner_lend(p, SANDBOX_ROOT, SANDBOX_ROOT, &err), 0, "a directory is lent: %s", err.msg);
        ok(stat(p, &st) == 0 && st.st_uid == SANDBOX_ROOT && (st.st_mode & 07777) == 0700, "lent: uid %u mode %04o",
           (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        snprintf(p, sizeof(p), "%s/lent-link", top);
        (void)!symlink(victim, p);
        ok(dm_owner_lend(p, SANDBOX_ROOT, SANDBOX_ROOT, &err) < 0 && stat(victim, &st) == 0 && st.st_uid == 0,
           "lending refuses a link and leaves its target alone");

        /* Nothing left behind. */
        ok(dm_remove_tree(top) == 0 && unlink(victim) == 0 && access(top, F_OK) < 0, "the tree is removed");
        printf("1..%d\n", tap_n);
        return tap_failed ? 1 : 0;
}
