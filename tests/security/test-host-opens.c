/* SPDX-License-Identifier: MIT */
/* Security battery, the host side of tests/security/test-host-opens.mjs:
 * the helper every host-side open in a container-writable place uses
 * (dm_io_*), the vendor proxy's vendor.log and usage.json against planted
 * links and FIFOs, dm_path_open's refusals and its fd surviving a swap, and
 * (as root, with the podman CLI) that a staged input mounts the directory
 * that was checked even when its path is swapped for a link to / after the
 * check. An alarm turns a hang (the old code blocked on FIFOs) into a failure. */
#include "config.h"

/* Paths here are short temporary ones: truncation cannot happen. (gcc's
 * warning only: clang has no -Wformat-truncation and rejects the pragma.) */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netpolicy/vendor-internal.h"
#include "netpolicy/vendor.h"
#include "src/core/context.h"
#include "src/core/inputs.h"
#include "src/basic/io.h"
#include "src/basic/paths.h"
#include "tests/tap.h"

static char base[] = "/tmp/dm-sec-host-opens-XXXXXX";

static void on_alarm(int sig)
{
        (void)sig;
        static const char msg[] = "not ok - the test hung (an open blocked on a FIFO?)\n";
        if (write(1, msg, sizeof(msg) - 1) < 0)
                _exit(2);
        _exit(1);
}

static void put(const char *path, const char *text)
{
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

        if (fd >= 0) {
                if (write(fd, text, strlen(text)) < 0)
                        diag("write %s failed", path);
                close(fd);
        }
}

static char *slurp(const char *path)
{
        static char buf[4096];
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);

        if (fd >= 0)
                close(fd);
        buf[n > 0 ? n : 0] = '\0';
        return buf;
}

static int count_lines(void *ud, char *line, size_t len)
{
        (void)line;
        (void)len;
        (*(int *)ud)++;
        return 0;
}

static void test_io(const char *dir)
{
        char p[PATH_MAX], outside[PATH_MAX], *data = NULL;
        int dfd = dm_io_open_dir(dir), fd, lines = 0;
        size_t len = 0;

        ok(dfd >= 0, "the directory opens");
        snprintf(outside, sizeof(outside), "%s/outside.txt", base);
        put(outside, "host file\n");
        snprintf(p, sizeof(p), "%s/link", dir);
        symlink(outside, p);
        snprintf(p, sizeof(p), "%s/fifo", dir);
        mkfifo(p, 0644);
        snprintf(p, sizeof(p), "%s/sub", dir);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/sublink", dir);
        symlink(base, p);
        snprintf(p, sizeof(p), "%s/file", dir);
        put(p, "a\nbb\n");

        is_int(dm_io_open_beneath(dfd, "link", O_RDONLY, 0), -ELOOP, "a link is never followed");
        is_int(dm_io_open_beneath(dfd, "link", O_WRONLY | O_APPEND | O_CREAT, 0644), -ELOOP,
               "not even to create or append");
        is_str(slurp(outside), "host file\n", "the link's target is untouched");
        is_int(dm_io_open_beneath(dfd, "fifo", O_WRONLY | O_APPEND | O_CREAT, 0644), -ENXIO,
               "a FIFO nobody reads: -ENXIO at once, no hang");
        is_int(dm_io_open_beneath(dfd, "fifo", O_RDONLY, 0), -DM_IO_EBADTYPE, "a FIFO to read: not a regular file");
        is_int(dm_io_open_beneath(dfd, "sub", O_RDONLY, 0), -DM_IO_EBADTYPE, "a directory where a file is wanted");
        fd = dm_io_open_beneath(dfd, "sub", O_RDONLY | O_DIRECTORY, 0);
        ok(fd >= 0, "a directory when asked for one");
        close(fd);
        is_int(dm_io_open_beneath(dfd, "sublink/outside.txt", O_RDONLY, 0), -ELOOP, "no link on the way either");
        is_int(dm_io_open_beneath(dfd, "../outside.txt", O_RDONLY, 0), -EXDEV, "'..' out of the directory refused");
        is_int(dm_io_open_beneath(dfd, outside, O_RDONLY, 0), -EINVAL, "an absolute path refused");
        is_int(dm_io_read_capped(dfd, "file", 4, &data, &len), -EFBIG, "a file over the cap: -EFBIG");
        is_int(dm_io_read_capped(dfd, "file", 5, &data, &len), 0, "a file at the cap is read");
        ok(data && len == 5 && !strcmp(data, "a\nbb\n"), "whole");
        free(data);
        fd = dm_io_open_beneath(dfd, "file", O_RDONLY, 0);
        dm_io_for_each_line(fd, 1, 1 << 20, count_lines, &lines);
        close(fd);
        is_int(lines, 1, "a line over max_line is skipped whole");
        is_int(dm_io_replace(dfd, "link", "new\n", 4, 0644), 0, "replace over a link");
        ok(!strcmp(slurp(outside), "host file\n"), "replaces the link, not its target");
        snprintf(p, sizeof(p), "%s/link", dir);
        is_str(slurp(p), "new\n", "and the new file is there");
        close(dfd);
}

static void test_vendor(const char *dir)
{
        char usage[PATH_MAX], tmp[PATH_MAX], logp[PATH_MAX], target[PATH_MAX];
        struct dm_vendor_usage u = { 0 };
        struct dm_error err = { 0 };
        struct dm_vendor_proxy *p = NULL;
        struct stat st;

        snprintf(target, sizeof(target), "%s/host-usage.json", base);
        put(target, "HOST\n");
        snprintf(usage, sizeof(usage), "%s/usage.json", dir);
        snprintf(tmp, sizeof(tmp), "%s/usage.json.tmp", dir);
        mkfifo(tmp, 0644);
        symlink(target, usage);
        is_int(dm_vendor_usage_write(&u, usage, &err), 0, "usage.json written with a FIFO at usage.json.tmp (no hang)");
        ok(lstat(usage, &st) == 0 && S_ISREG(st.st_mode), "usage.json is a regular file again");
        is_str(slurp(target), "HOST\n", "the host file behind the planted link is untouched");

        snprintf(logp, sizeof(logp), "%s/vendor.log", dir);
        mkfifo(logp, 0644);
        struct dm_vendor_conf conf = {
                .provider = DM_VENDOR_ANTHROPIC,
                .bind = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) },
                .token = "0123456789abcdef0123456789abcdef",
                .cred = { .auth = DM_VENDOR_AUTH_API_KEY, .secret = (char *)"sk-test" },
                .log_path = logp,
                .prices_path = NULL,
        };
        ok(dm_vendor_start(&conf, &p, &err) < 0 && strstr(err.msg, "vendor.log"),
           "vendor.log a FIFO: the proxy refuses to start, no hang (%s)", err.msg);
        unlink(logp);
        symlink(target, logp);
        dm_error_clear(&err);
        ok(dm_vendor_start(&conf, &p, &err) < 0 && strstr(err.msg, "symbolic link"), "vendor.log a link: refused (%s)",
           err.msg);
        is_str(slurp(target), "HOST\n", "its target untouched");
}

static void test_paths(void)
{
        char root[PATH_MAX], out[PATH_MAX], state[PATH_MAX], home[PATH_MAX], p[PATH_MAX], q[PATH_MAX], spec[PATH_MAX];
        struct dm_allowed_roots roots;
        struct dm_error err = { 0 };
        char *resolved = NULL;
        struct stat a, b;
        int fd = -1;

        snprintf(root, sizeof(root), "%s/roots", base);
        snprintf(out, sizeof(out), "%s/out", root);
        snprintf(state, sizeof(state), "%s/state", root);
        snprintf(home, sizeof(home), "%s/home", root);
        mkdir(root, 0755);
        mkdir(out, 0755);
        mkdir(state, 0755);
        mkdir(home, 0755);
        snprintf(p, sizeof(p), "%s/.ssh", home);
        mkdir(p, 0700);
        snprintf(p, sizeof(p), "%s/.aws", home);
        mkdir(p, 0700);
        snprintf(p, sizeof(p), "%s/run-1", out);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/proj", root);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/out-alias", root);
        symlink(out, p);

        dm_allowed_roots_parse(root, &roots, &err);
        snprintf(spec, sizeof(spec), "%s/.aws", home);
        const char *const forbidden[] = { out, "DEMESNE_OUTPUT_ROOT", state, "DEMESNE_STATE_DIR", NULL };
        is_int(dm_allowed_roots_protect(&roots, forbidden, home, spec, &err), 0, "protect");
        is_int(dm_allowed_roots_protect(&roots, NULL, NULL, "relative", &err), -EINVAL,
               "a relative DEMESNE_ALLOW_CREDENTIAL_PATHS entry is an error");

        snprintf(p, sizeof(p), "%s/run-1", out);
        ok(dm_path_open(&roots, p, DM_PATH_DIR, &resolved, &fd, &err) == -EACCES &&
                   strstr(err.msg, "DEMESNE_OUTPUT_ROOT"),
           "under the output root: refused (%s)", err.msg);
        snprintf(p, sizeof(p), "%s/out-alias/run-1", root);
        ok(dm_path_open(&roots, p, DM_PATH_DIR, &resolved, &fd, &err) == -EACCES, "through a link to it too");
        ok(dm_path_open(&roots, state, DM_PATH_DIR, &resolved, &fd, &err) == -EACCES &&
                   strstr(err.msg, "DEMESNE_STATE_DIR"),
           "the state dir: refused (%s)", err.msg);
        snprintf(p, sizeof(p), "%s/.ssh", home);
        ok(dm_path_open(&roots, p, DM_PATH_DIR, &resolved, &fd, &err) == -EACCES &&
                   strstr(err.msg, "DEMESNE_ALLOW_CREDENTIAL_PATHS"),
           "~/.ssh: refused (%s)", err.msg);
        ok(dm_path_open(&roots, home, DM_PATH_DIR, &resolved, &fd, &err) == -EACCES &&
                   strstr(err.msg, "contains the credential folder"),
           "a folder holding ~/.ssh: refused (%s)", err.msg);
        snprintf(p, sizeof(p), "%s/.aws", home);
        is_int(dm_path_open(&roots, p, DM_PATH_DIR, &resolved, &fd, &err), 0,
               "~/.aws named in DEMESNE_ALLOW_CREDENTIAL_PATHS: allowed");
        free(resolved);
        close(fd);

        /* The fd is what was checked, whatever the path holds afterwards. */
        snprintf(p, sizeof(p), "%s/proj", root);
        is_int(dm_path_open(&roots, p, DM_PATH_DIR, &resolved, &fd, &err), 0, "a plain folder opens");
        fstat(fd, &a);
        snprintf(q, sizeof(q), "%s/proj.moved", root);
        rename(p, q);
        symlink("/", p);
        fstat(fd, &b);
        ok(a.st_ino == b.st_ino && a.st_dev == b.st_dev, "its fd still names the checked folder after a swap");
        ok(dm_path_open(&roots, p, DM_PATH_DIR, &resolved, &fd, &err) < 0, "and the swapped path now fails the check");
        free(resolved);
        dm_allowed_roots_release(&roots);
}

/* As root, with podman: the staged mount is the checked directory. */
static void test_staged_mount(void)
{
        char root[PATH_MAX], good[PATH_MAX], moved[PATH_MAX], cmd[2 * PATH_MAX + 256], p[PATH_MAX], state[PATH_MAX];
        struct dm_context ctx = { 0 };
        struct dm_inputs_stage stage = { .n = 0 };
        struct dm_mount mounts[2];
        const char *dirs[] = { good, NULL };
        char *owned[4] = { 0 };
        size_t n = 0, n_owned = 0;
        struct dm_error err = { 0 };
        FILE *f;
        char line[256] = "";

        if (geteuid() != 0 || system("podman image exists localhost/demesne/base:latest") != 0) {
                ok(1, "# SKIP staged mounts need root and the podman CLI with the base image");
                return;
        }
        snprintf(root, sizeof(root), "%s/stage-root", base);
        mkdir(root, 0755);
        snprintf(good, sizeof(good), "%s/input", root);
        mkdir(good, 0755);
        snprintf(p, sizeof(p), "%s/marker", good);
        put(p, "CHECKED\n");
        snprintf(state, sizeof(state), "%s/state", base);
        ctx.cfg.state_dir = state;
        snprintf(ctx.owner, sizeof(ctx.owner), "test-%d-1", (int)getpid());
        dm_allowed_roots_parse(root, &ctx.roots, &err);
        is_int(dm_inputs_add(&ctx, dirs, DM_PATH_DIR, NULL, mounts, &n, owned, &n_owned, &stage, &err), 0,
               "the input is checked and staged");
        ok(n == 1 && strncmp(mounts[0].host, state, strlen(state)) == 0, "the engine gets the staged path (%s)",
           n ? mounts[0].host : "");
        /* The swap, after the check: the path now names /. */
        snprintf(moved, sizeof(moved), "%s/input.moved", root);
        rename(good, moved);
        symlink("/", good);
        /* Through the Podman API service when it runs (what the server
         * talks to), else the podman CLI; the same runc either way. */
        snprintf(cmd, sizeof(cmd),
                 "podman %s run --rm --network none -v '%s:/in/input:ro' localhost/demesne/base:latest "
                 "sh -c 'cat /in/input/marker; test -e /in/input/etc/passwd && echo ROOT' 2>'%s/podman.err'",
                 access("/run/podman/podman.sock", F_OK) == 0 ? "--remote --url unix:///run/podman/podman.sock" : "",
                 mounts[0].host, base);
        /* The container's whole stdout; podman's own warnings go to the
         * file, for the diagnostics. A podman that printed nothing failed
         * to run the container at all (the suite's other tests share its
         * engine): that is tried again, twice, and never counts as held. */
        for (int attempt = 0; attempt < 3 && !line[0]; attempt++) {
                f = popen(cmd, "r");
                if (f) {
                        line[fread(line, 1, sizeof(line) - 1, f)] = '\0';
                        pclose(f);
                }
                if (!line[0])
                        sleep(1);
        }
        if (!ok(strcmp(line, "CHECKED\n") == 0,
                "the container gets the checked directory, not / behind the swapped path")) {
                char errs[PATH_MAX];

                snprintf(errs, sizeof(errs), "%s/podman.err", base);
                diag("got '%s', want 'CHECKED\\n'; podman's stderr: %s", line, slurp(errs));
        }
        dm_inputs_unstage(&stage);
        snprintf(p, sizeof(p), "%s/state/mnt", base);
        snprintf(cmd, sizeof(cmd), "test -z \"$(ls -A '%s')\" && ! grep -q '%s' /proc/self/mountinfo", p, p);
        is_int(system(cmd), 0, "unstaged: no mount and no directory left");
        for (size_t i = 0; i < n_owned; i++)
                free(owned[i]);
        dm_allowed_roots_release(&ctx.roots);
}

/* A workspace's removal never follows what the sandbox left in it. */
static void test_remove_tree(void)
{
        char tree[PATH_MAX], p[PATH_MAX], victim[PATH_MAX], link[PATH_MAX];

        snprintf(victim, sizeof(victim), "%s/victim", base);
        mkdir(victim, 0755);
        snprintf(p, sizeof(p), "%s/keep", victim);
        put(p, "keep\n");
        snprintf(tree, sizeof(tree), "%s/workspace", base);
        mkdir(tree, 0755);
        snprintf(p, sizeof(p), "%s/a", tree);
        mkdir(p, 0755);
        snprintf(p, sizeof(p), "%s/a/b", tree);
        symlink(victim, p);
        snprintf(p, sizeof(p), "%s/a/fifo", tree);
        mkfifo(p, 0644);
        is_int(dm_remove_tree(tree), 0, "a workspace with links and FIFOs inside is removed");
        ok(access(tree, F_OK) != 0, "gone");
        snprintf(p, sizeof(p), "%s/keep", victim);
        is_str(slurp(p), "keep\n", "what its links pointed at is untouched");
        snprintf(link, sizeof(link), "%s/ws-link", base);
        symlink(victim, link);
        is_int(dm_remove_tree(link), 0, "a link where the tree was is removed");
        ok(access(p, F_OK) == 0, "and never followed");
}

int main(void)
{
        char dir[PATH_MAX];

        signal(SIGALRM, on_alarm);
        alarm(120);
        if (!mkdtemp(base))
                return skip_all("mkdtemp failed");
        snprintf(dir, sizeof(dir), "%s/out", base);
        mkdir(dir, 0755);
        test_io(dir);
        snprintf(dir, sizeof(dir), "%s/agent-out", base);
        mkdir(dir, 0755);
        test_vendor(dir);
        test_paths();
        test_remove_tree();
        test_staged_mount();
        dm_remove_tree(base);
        return done_testing();
}
