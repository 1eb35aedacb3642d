/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/images.h"

#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/util/buf.h"

extern char **environ;

const struct dm_image_info dm_images[] = {
        { "base", "localhost/demesne/base:latest", true, "Debian bookworm with bash, coreutils, curl, git" },
        { "python", "localhost/demesne/python:latest", true, "python3 with pip, numpy, pandas, scipy, matplotlib" },
        { "node", "localhost/demesne/node:latest", false, "Node.js and npm" },
        { "go", "localhost/demesne/go:latest", false, "the Go toolchain" },
        { "browser", "localhost/demesne/browser:latest", false, "headless Chromium with Playwright, React, Vite" },
        { "media", "localhost/demesne/media:latest", false, "ffmpeg, ImageMagick, vips, sox" },
        { "twine", "localhost/demesne/twine:latest", false, "a Twee compiler with story formats and Chromium" },
        { "webgamedev", "localhost/demesne/webgamedev:latest", false, "Phaser + Vite + TypeScript template" },
};
const size_t dm_images_count = sizeof(dm_images) / sizeof(dm_images[0]);
const char *const dm_image_names[] = { "base", "python", "node", "go", "browser", "media", "twine", "webgamedev", NULL };
const char *const dm_image_aliases[] = { "anaconda", NULL };

static const struct {
        const char *alias;
        const char *name;
} aliases[] = {
        { "anaconda", "python" },
};

int dm_image_lookup(const char *name, const struct dm_image_info **ret, struct dm_error *err)
{
        struct dm_buf list;

        for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
                if (strcmp(name, aliases[i].alias) == 0)
                        name = aliases[i].name;
        for (size_t i = 0; i < dm_images_count; i++)
                if (strcmp(name, dm_images[i].name) == 0) {
                        *ret = &dm_images[i];
                        return 0;
                }
        dm_buf_init(&list, 1024);
        dm_buf_join(&list, dm_image_names, ", ");
        dm_error_set(err, -EINVAL, "unknown image '%s': valid images are %s (and 'anaconda' for python)", name,
                     list.data ? list.data : "");
        dm_buf_release(&list);
        return -EINVAL;
}

int dm_image_require(struct dm_backend *b, const struct dm_image_info *img, struct dm_error *err)
{
        bool exists = false;
        int r;

        /* A backend without an image store of ours (OpenSandbox pulls at
         * create) reports a missing image when the sandbox is made. */
        if (!dm_backend_can(b, DM_CAP_IMAGES))
                return 0;
        r = b->ops->image_exists(b, img->ref, &exists, err);
        if (r < 0)
                return dm_error_wrap(err, "look up image '%s'", img->name);
        if (exists)
                return 0;
        if (!img->buildable)
                return dm_error_set(err, -ENOENT,
                                    "image '%s' is not available in this version of demesne yet: use base or python",
                                    img->name);
        return dm_error_set(err, -ENOENT, "image '%s' is not built: run `demesne images build %s`", img->name,
                            img->name);
}

const char *dm_images_dir(void)
{
        static char found[PATH_MAX];
        const char *env = getenv("DEMESNE_IMAGES_DIR");
        const char *candidates[] = { DM_PKGDATADIR "/images", DM_SRCDIR "/images" };
        struct stat st;

        if (env && *env)
                return env;
        for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
                snprintf(found, sizeof(found), "%s/build.sh", candidates[i]);
                if (stat(found, &st) == 0) {
                        snprintf(found, sizeof(found), "%s", candidates[i]);
                        return found;
                }
        }
        return DM_PKGDATADIR "/images";
}

int dm_images_build(const char *const *names, bool force, struct dm_error *err)
{
        char script[PATH_MAX];
        const char *argv[64];
        size_t n = 0;
        pid_t pid;
        int status, r;
        posix_spawn_file_actions_t fa;

        snprintf(script, sizeof(script), "%s/build.sh", dm_images_dir());
        if (access(script, R_OK) < 0)
                return dm_error_set(err, -ENOENT, "image build script '%s' not found (set DEMESNE_IMAGES_DIR)", script);
        argv[n++] = "/bin/bash";
        argv[n++] = script;
        if (force)
                argv[n++] = "--force";
        if (!names || !names[0]) {
                argv[n++] = "--all";
        } else {
                for (size_t i = 0; names[i] && n < 60; i++) {
                        const struct dm_image_info *img;

                        if (dm_image_lookup(names[i], &img, err) < 0)
                                return -EINVAL;
                        if (!img->buildable)
                                return dm_error_set(err, -ENOTSUP,
                                                    "image '%s' cannot be built by this version of demesne yet",
                                                    img->name);
                        argv[n++] = img->name;
                }
        }
        argv[n] = NULL;

        /* The build's progress belongs on stderr: in `demesne serve` stdout
         * is the MCP channel. */
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, STDERR_FILENO, STDOUT_FILENO);
        r = posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0)
                return dm_error_set(err, -r, "cannot run '%s': %s", script, strerror(r));
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR)
                        return dm_error_set(err, -errno, "waiting for the image build: %s", strerror(errno));
        if (WIFEXITED(status))
                return WEXITSTATUS(status) == 0
                               ? 0
                               : dm_error_set(err, -EIO, "image build failed (exit %d): see the messages above",
                                              WEXITSTATUS(status));
        return dm_error_set(err, -EIO, "image build killed by signal %d", WTERMSIG(status));
}
