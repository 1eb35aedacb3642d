/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/core/context.h"
#include "src/basic/paths.h"
#include "tests/tap.h"

static char root[512], outside[512];

static void touch(const char *dir, const char *name)
{
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", dir, name);
        close(open(p, O_WRONLY | O_CREAT, 0644));
}

static int check(struct dm_allowed_roots *r, const char *path, enum dm_path_kind kind, struct dm_error *err)
{
        char *resolved = NULL;
        int ret;

        dm_error_clear(err);
        ret = dm_path_check(r, path, kind, &resolved, err);
        free(resolved);
        return ret;
}

int main(void)
{
        struct dm_allowed_roots roots;
        struct dm_error err = { 0 };
        char base[] = "/tmp/dm-test-paths-XXXXXX", p[PATH_MAX], spec[2 * PATH_MAX], *resolved = NULL;

        if (!mkdtemp(base))
                return skip_all("mkdtemp failed");
        snprintf(root, sizeof(root), "%s/allowed", base);
        snprintf(outside, sizeof(outside), "%s/outside", base);
        mkdir(root, 0755);
        mkdir(outside, 0755);
        snprintf(p, sizeof(p), "%s/sub", root);
        mkdir(p, 0755);
        touch(root, "a.txt");
        touch(p, "a.txt");
        touch(outside, "secret");
        snprintf(p, sizeof(p), "%s/escape", root);
        snprintf(spec, sizeof(spec), "%s/secret", outside);
        symlink(spec, p);
        snprintf(p, sizeof(p), "%s/inner-link", root);
        symlink("a.txt", p);

        snprintf(spec, sizeof(spec), "%s::relative-ignored-no", root);
        is_int(dm_allowed_roots_parse("relative/path", &roots, &err), -EINVAL, "relative allowed root refused");
        ok(strstr(err.msg, "not an absolute path") != NULL, "message says why: %s", err.msg);
        snprintf(spec, sizeof(spec), "%s::/nonexistent-dm-root", root);
        is_int(dm_allowed_roots_parse(spec, &roots, &err), 0, "empty and missing entries are skipped");
        is_int(roots.n, 1, "one usable root");

        is_int(check(&roots, "", DM_PATH_FILE, &err), -EINVAL, "empty path");
        ok(strstr(err.msg, "empty path") != NULL, "message: %s", err.msg);
        is_int(check(&roots, "a.txt", DM_PATH_FILE, &err), -EINVAL, "relative path");
        ok(strstr(err.msg, "not absolute") != NULL, "message: %s", err.msg);

        snprintf(p, sizeof(p), "%s/a.txt", root);
        is_int(dm_path_check(&roots, p, DM_PATH_FILE, &resolved, &err), 0, "file inside the root");
        is_str(resolved, p, "resolved path returned");
        free(resolved);

        snprintf(p, sizeof(p), "%s/sub/../../outside/secret", root);
        is_int(check(&roots, p, DM_PATH_FILE, &err), -EACCES, "'..' escape refused");
        ok(strstr(err.msg, "outside DEMESNE_ALLOWED_PATHS") != NULL, "message: %s", err.msg);

        snprintf(p, sizeof(p), "%s/escape", root);
        is_int(check(&roots, p, DM_PATH_FILE, &err), -EACCES, "symlink escape refused");
        ok(strstr(err.msg, "resolves to") != NULL, "message names the target: %s", err.msg);

        snprintf(p, sizeof(p), "%s/inner-link", root);
        is_int(check(&roots, p, DM_PATH_FILE, &err), 0, "symlink inside the root accepted");

        /* What a person may be asked about (src/tools/request.c). */
        snprintf(p, sizeof(p), "%s/escape", root);
        snprintf(spec, sizeof(spec), "%s/secret", outside);
        is_int(dm_path_outside_only(&roots, p, DM_PATH_FILE, &resolved), 1, "outside only: a link to a file outside");
        ok(resolved && strcmp(resolved, spec) == 0, "outside only: named by its target: %s", resolved ? resolved : "");
        free(resolved);
        resolved = NULL;
        is_int(dm_path_outside_only(&roots, p, DM_PATH_DIR, &resolved), 0,
               "outside only: not when it is also the wrong kind");
        snprintf(p, sizeof(p), "%s/inner-link", root);
        is_int(dm_path_outside_only(&roots, p, DM_PATH_FILE, &resolved), 0, "outside only: not for a path inside");
        snprintf(p, sizeof(p), "%s/missing", outside);
        is_int(dm_path_outside_only(&roots, p, DM_PATH_FILE, &resolved), 0, "outside only: not for a missing path");

        snprintf(p, sizeof(p), "%s/secret", outside);
        is_int(check(&roots, p, DM_PATH_FILE, &err), -EACCES, "path outside every root");

        snprintf(p, sizeof(p), "%s-sibling/x", root);
        ok(!dm_path_is_under(p, root), "a sibling with the root as prefix is not under it");
        ok(dm_path_is_under(root, root), "the root itself is under the root");

        snprintf(p, sizeof(p), "%s/missing", root);
        is_int(check(&roots, p, DM_PATH_FILE, &err), -ENOENT, "missing path");
        ok(strstr(err.msg, "does not exist") != NULL, "message: %s", err.msg);

        snprintf(p, sizeof(p), "%s/sub", root);
        is_int(check(&roots, p, DM_PATH_FILE, &err), -EINVAL, "directory where a file is wanted");
        snprintf(p, sizeof(p), "%s/a.txt", root);
        is_int(check(&roots, p, DM_PATH_DIR, &err), -ENOTDIR, "file where a directory is wanted");
        snprintf(p, sizeof(p), "%s/sub", root);
        is_int(check(&roots, p, DM_PATH_DIR, &err), 0, "directory accepted");

        struct dm_allowed_roots none = { 0 };
        snprintf(p, sizeof(p), "%s/a.txt", root);
        is_int(check(&none, p, DM_PATH_FILE, &err), -EACCES, "no roots: nothing allowed");

        struct dm_allowed_roots slash;
        dm_allowed_roots_parse("/", &slash, &err);
        is_int(check(&slash, p, DM_PATH_FILE, &err), 0, "root '/' allows everything");
        dm_allowed_roots_release(&slash);

        is_str(dm_path_basename("/a/b/c.txt"), "c.txt", "basename");
        ok(dm_path_basename("/") == NULL, "'/' has no basename");

        /* dm_remove_tree never follows a symlink out of the tree. */
        snprintf(p, sizeof(p), "%s/tree", base);
        mkdir(p, 0755);
        snprintf(spec, sizeof(spec), "%s/tree/link-out", base);
        symlink(outside, spec);
        touch(p, "f");
        is_int(dm_remove_tree(p), 0, "remove_tree succeeds");
        ok(access(p, F_OK) != 0, "tree gone");
        snprintf(spec, sizeof(spec), "%s/secret", outside);
        ok(access(spec, F_OK) == 0, "target of a symlink inside the tree untouched");

        /* A forbidden tree (the state directory) is never asked about. */
        is_int(dm_allowed_roots_protect(&roots, (const char *const[]){ outside, "DEMESNE_STATE_DIR", NULL }, NULL, NULL,
                                        &err),
               0, "protect the outside folder");
        snprintf(p, sizeof(p), "%s/escape", root);
        is_int(dm_path_outside_only(&roots, p, DM_PATH_FILE, &resolved), 0,
               "outside only: not for a path in a forbidden tree");

        dm_allowed_roots_release(&roots);
        dm_remove_tree(base);
        return done_testing();
}
