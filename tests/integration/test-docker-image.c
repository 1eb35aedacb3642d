/* SPDX-License-Identifier: MIT */
/* The docker backend's pause, unpause, commit and image calls against the
 * real engine (Podman here; dockerd through tests/run-dockerd.sh --only
 * test-docker-image): pause and unpause, twice is not an error, a commit
 * carries its labels (what it holds: tests/integration/test-snapshot.c), the image is listed by label and removed (gone already: 0; in
 * use: -EBUSY, never by force), and hostile references and labels are
 * refused before the engine is asked. On rootless Podman with cgroup v1,
 * pause must fail naming why. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "src/basic/buf.h"
#include "tests/integration/engine-env.h"
#include "tests/tap.h"

#define IMAGE "localhost/demesne/base:latest"
#define REPO "localhost/demesne-snapshot"

static struct dm_backend *B;
static char test_label[64], tag[64], ref[160];

static struct dm_error *clr(struct dm_error *err)
{
        dm_error_clear(err);
        return err;
}

static int start(const char *const *argv, char **ret_id, struct dm_error *err)
{
        const char *labels[] = { test_label, NULL };
        struct dm_container_spec spec = { .image = IMAGE, .argv = argv, .labels = labels, .network_mode = "none" };
        struct dm_userns u = { 0 };
        int r;

        if (B->ops->userns && B->ops->userns(B, &u, err) == 0)
                spec.userns_mode = u.mode;
        r = B->ops->create(B, &spec, ret_id, err);
        return r < 0 ? r : B->ops->start(B, *ret_id, err);
}

static void test_pause(const char *id)
{
        struct dm_container_info info;
        struct dm_error err = { 0 };
        int r = B->ops->pause(B, id, clr(&err));

        if (r == -EOPNOTSUPP) {
                const char *said = strstr(err.msg, "(engine said: ");

                ok(strstr(err.msg, "cgroup") && strstr(err.msg, "rootless"),
                   "this engine cannot pause, and says why ('%s')", err.msg);
                ok(said && said[14] != ')' && !strstr(said, "this engine cannot"), "with the engine's own words, once");
                return;
        }
        ok(r == 0, "pause (%s)", err.msg);
        ok(B->ops->inspect(B, id, &info, clr(&err)) == 0 && strcmp(info.status, "paused") == 0,
           "the engine says paused");
        dm_container_info_release(&info);
        ok(B->ops->pause(B, id, clr(&err)) == 0, "pausing a paused container is not an error (%s)", err.msg);
        ok(B->ops->unpause(B, id, clr(&err)) == 0, "unpause (%s)", err.msg);
        ok(B->ops->unpause(B, id, clr(&err)) == 0, "unpausing a running container is not an error (%s)", err.msg);
        ok(B->ops->inspect(B, id, &info, clr(&err)) == 0 && strcmp(info.status, "running") == 0 && info.running,
           "running again");
        dm_container_info_release(&info);
}

static bool has(char **labels, const char *kv)
{
        for (char **l = labels; l && *l; l++)
                if (strcmp(*l, kv) == 0)
                        return true;
        return false;
}

static void test_commit(const char *id)
{
        char owner[96];
        const char *labels[] = { test_label, owner, "demesne.snapshot.note=a b/c", NULL };
        struct dm_commit_spec spec = { .repo = REPO, .tag = tag, .labels = labels };
        struct dm_image_entry e = { 0 }, *v = NULL;
        struct dm_error err = { 0 };
        char *image = NULL, *child = NULL;
        size_t n = 0;
        const char *argv[] = { "sleep", "300", NULL };
        struct dm_container_spec cs = { 0 };
        int r;

        snprintf(owner, sizeof(owner), "demesne.snapshot.owner=local/sbx-%d", (int)getpid());
        ok(B->ops->commit(B, id, &spec, &image, clr(&err)) == 0 && image && image[0], "commit (%s)", err.msg);
        free(image);
        r = B->ops->image_inspect(B, ref, &e, clr(&err));
        ok(r == 0 && e.size > 0 && e.created > 1600000000, "image_inspect: size %lld, created %lld (%s)",
           (long long)e.size, (long long)e.created, err.msg);
        ok(has(e.labels, test_label) && has(e.labels, owner) && has(e.labels, "demesne.snapshot.note=a b/c"),
           "the image carries the labels, a space and a slash included");
        dm_image_entry_release(&e);
        r = B->ops->image_list(B, test_label, &v, &n, clr(&err));
        ok(r == 0 && n == 1 && strstr(v[0].ref, tag), "image_list by label finds it alone (%zu, %s)", n,
           n ? v[0].ref : "");
        dm_image_entries_free(v, n);

        /* In use by a container: not removed, and not by force. */
        cs.image = ref;
        cs.argv = argv;
        cs.labels = (const char *const[]){ test_label, NULL };
        cs.network_mode = "none";
        {
                struct dm_userns u = { 0 };

                if (B->ops->userns && B->ops->userns(B, &u, clr(&err)) == 0)
                        cs.userns_mode = u.mode;
        }
        ok(B->ops->create(B, &cs, &child, clr(&err)) == 0, "a container from the committed image (%s)", err.msg);
        ok(B->ops->image_remove(B, ref, clr(&err)) < 0, "image_remove while a container uses it fails (%s)", err.msg);
        {
                struct dm_container_info info;

                ok(B->ops->inspect(B, child, &info, clr(&err)) == 0, "and that container is still there");
                dm_container_info_release(&info);
        }
        B->ops->destroy(B, child, clr(&err));
        free(child);
        ok(B->ops->image_remove(B, ref, clr(&err)) == 0, "image_remove once unused (%s)", err.msg);
        ok(B->ops->image_inspect(B, ref, &e, clr(&err)) == -ENOENT, "gone: -ENOENT");
        ok(B->ops->image_remove(B, ref, clr(&err)) == 0, "removing it again is not an error (%s)", err.msg);
}

static void test_hostile(const char *id)
{
        static const char *const bad_labels[] = { "x=a\"b", "x=a\\b", "noequals", "x=line\nLABEL y=z", NULL };
        static const char *const bad_refs[] = { "../../containers/x", "/images/x", "a b", "x?force=1", "", NULL };
        struct dm_image_entry e = { 0 };
        struct dm_error err = { 0 };
        char *image = NULL;

        for (size_t i = 0; bad_labels[i]; i++) {
                const char *labels[] = { bad_labels[i], NULL };
                struct dm_commit_spec spec = { .repo = REPO, .tag = tag, .labels = labels };

                ok(B->ops->commit(B, id, &spec, &image, clr(&err)) == -EINVAL,
                   "commit with label %zu ('%.*s'): -EINVAL", i, (int)strcspn(bad_labels[i], "\n"), bad_labels[i]);
        }
        for (size_t i = 0; bad_refs[i]; i++) {
                ok(B->ops->image_remove(B, bad_refs[i], clr(&err)) == -EINVAL &&
                           B->ops->image_inspect(B, bad_refs[i], &e, clr(&err)) == -EINVAL,
                   "image reference '%s': -EINVAL, the engine not asked", bad_refs[i]);
        }
        {
                struct dm_commit_spec spec = { .repo = REPO, .tag = "../x" };

                ok(B->ops->commit(B, id, &spec, &image, clr(&err)) == -EINVAL, "a tag '../x': -EINVAL");
        }
        ok(B->ops->pause(B, "../x", clr(&err)) == -EINVAL, "pause of a container id '../x': -EINVAL");
        ok(B->ops->image_inspect(B, ref, &e, clr(&err)) == -ENOENT, "and nothing was committed");
}

int main(void)
{
        struct dm_engine_config cfg = { .env = test_engine_env(), .may_start_podman = false };
        const char *argv[] = { "sleep", "300", NULL };
        struct dm_error err = { 0 };
        char *id = NULL;

        snprintf(test_label, sizeof(test_label), "demesne.test=%d", (int)getpid());
        snprintf(tag, sizeof(tag), "test-%d", (int)getpid());
        snprintf(ref, sizeof(ref), "%s:%s", REPO, tag);
        if (dm_backend_open(&cfg, &B, clr(&err)) < 0) {
                printf("Bail out! open the container engine: %s\n", err.msg);
                return 1;
        }
        if (start(argv, &id, clr(&err)) < 0) {
                printf("Bail out! start a container of " IMAGE ": %s\n", err.msg);
                return 1;
        }
        test_pause(id);
        test_hostile(id);
        test_commit(id);
        B->ops->destroy(B, id, clr(&err));
        free(id);
        dm_backend_free(B);
        return done_testing();
}
