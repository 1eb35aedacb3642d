/* SPDX-License-Identifier: MIT */
/* The one launch sequence (src/core/launch.h) against a backend that fails
 * at the step a case picks: the steps run in order, a failure says which
 * step it was, and whatever the launch made is removed before it returns
 * (the container, exactly once), so no caller can leak one. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/core/context.h"
#include "src/core/images.h"
#include "src/core/launch.h"
#include "tests/tap.h"
#include "tests/unit/fake-engine.h"

/* Whether rootful Podman's "containers" sub-ids are on this machine. */
static bool subids(void)
{
        static const char *const files[] = { "/etc/subuid", "/etc/subgid" };
        bool found = true;

        for (size_t i = 0; i < 2 && found; i++) {
                char line[512];
                FILE *f = fopen(files[i], "re");

                found = false;
                while (f && !found && fgets(line, sizeof(line), f))
                        found = strncmp(line, "containers:", 11) == 0;
                if (f)
                        fclose(f);
        }
        return found;
}

static struct dm_context *ctx;
static struct dm_backend backend = { .ops = &ops };

/* One launch without the shim; *l and the message for the checks. */
static int launch(enum step fail, enum dm_userns_kind kind, bool attach, const char *dir, struct dm_launch *l,
                  struct dm_error *err)
{
        struct dm_mount mounts[4] = { { .host = dir, .target = "/out" } };
        size_t n = 1;
        struct dm_container_spec spec = {
                .name = "t", .image = "localhost/demesne/base:latest", .mounts = mounts, .n_mounts = n
        };
        const struct dm_image_info *img;

        memset(&fk, 0, sizeof(fk));
        fk.fail = fail;
        fk.kind = kind;
        memset(err, 0, sizeof(*err));
        if (dm_image_lookup("base", &img, err) < 0)
                return -99;
        dm_launch_harden(ctx, &spec);
        return dm_launch_container(ctx, &backend,
                                   &(struct dm_launch_request){ .img = img,
                                                                .spec = &spec,
                                                                .mounts = mounts,
                                                                .n_mounts = &n,
                                                                .lend = (const char *const[]){ dir, NULL },
                                                                .attach = attach },
                                   l, err);
}

int main(void)
{
        char dir[] = "/tmp/dm-launch-XXXXXX";
        struct dm_error err;
        struct dm_launch l;
        struct stat st;
        int r;

        ctx = calloc(1, sizeof(*ctx));
        if (!ctx || !mkdtemp(dir))
                return 1;

        r = launch(NONE, DM_USERNS_ROOTLESS, true, dir, &l, &err);
        ok(r == 0 && l.container && !strcmp(l.container, "c-1"), "a launch returns its container (%d %s)", r, err.msg);
        is_str(fk.calls, "userns create attach start ", "in order: user namespace, create, attach, start");
        ok(fk.destroyed == 0 && !l.host, "nothing removed; no shim asked for, none made");
        free(l.container);

        r = launch(NONE, DM_USERNS_ROOTLESS, false, dir, &l, &err);
        is_str(fk.calls, "userns create start ", "no attach unless asked for");
        free(l.container);

        r = launch(CREATE, DM_USERNS_ROOTLESS, true, dir, &l, &err);
        ok(r == -EIO && strstr(err.msg, "create the container: the engine refused create"),
           "a refused create says so (%s)", err.msg);
        ok(fk.destroyed == 0 && !l.container, "and there is nothing to remove");

        r = launch(ATTACH, DM_USERNS_ROOTLESS, true, dir, &l, &err);
        ok(r == -EIO && strstr(err.msg, "attach to the container: the engine refused attach"),
           "a failed attach says so (%s)", err.msg);
        is_str(fk.calls, "userns create attach destroy:c-1 ", "its container is removed, once, and never started");
        ok(!l.container && !l.stream, "the caller is left nothing to clean");

        r = launch(START, DM_USERNS_ROOTLESS, true, dir, &l, &err);
        ok(r == -EIO && strstr(err.msg, "start the container: the engine refused start"), "a failed start says so (%s)",
           err.msg);
        is_str(fk.calls, "userns create attach start destroy:c-1 ", "its container is removed, once");
        ok(!l.container, "the caller is left nothing to clean");

        r = launch(USERNS, DM_USERNS_ROOTLESS, true, dir, &l, &err);
        ok(r == -EIO && !strcmp(fk.calls, "userns "), "an engine that cannot say how it maps ids: nothing made");

        r = launch(NONE, DM_USERNS_HOST_ROOT, true, dir, &l, &err);
        ok(r == -EPERM && strstr(err.msg, "DEMESNE_ALLOW_HOST_ROOT=1") && !strcmp(fk.calls, "userns "),
           "a sandbox whose root would be the host's is refused before create (%s)", err.msg);

        /* Rootful Podman's userns=auto: the container's root is known after
         * create, and the directories go to it before start. */
        r = launch(NONE, DM_USERNS_PER_CONTAINER, false, dir, &l, &err);
        if (geteuid() != 0) {
                ok(r == -EPERM && !strstr(fk.calls, "create"),
                   "not root: a per-container user namespace is refused before create (%s)", err.msg);
                skip("not root: no directory can be lent (the root run checks the ownership)");
        } else if (!subids()) {
                ok(r == -EPERM && strstr(err.msg, "/etc/subuid"), "no 'containers' sub-ids: refused (%s)", err.msg);
                skip("no 'containers' sub-ids: no directory lent (setup.sh adds them; CI checks it)");
        } else {
                ok(r == 0 && !strcmp(fk.calls, "userns create root start "),
                   "root: create, then the container's root asked, then start (%s)", fk.calls);
                r = stat(dir, &st);
                ok(r == 0 && st.st_uid == 200000 && st.st_gid == 200000,
                   "the output directory was lent to the container's root (%u:%u)", (unsigned)st.st_uid,
                   (unsigned)st.st_gid);
                free(l.container);
        }

        r = launch(ROOT, DM_USERNS_PER_CONTAINER, false, dir, &l, &err);
        ok(r < 0 && fk.destroyed == (strstr(fk.calls, "create") ? 1 : 0) && !strstr(fk.calls, "start"),
           "a failure between create and start removes the container it made (%s)", fk.calls);

        dm_remove_tree(dir);
        free(ctx);
        return done_testing();
}
