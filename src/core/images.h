/* SPDX-License-Identifier: MIT */
#ifndef DM_IMAGES_H
#define DM_IMAGES_H

/* The image names callers use, the engine references behind them, and the
 * build script that makes them from Debian packages (images/build.sh). */

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "src/basic/cancel.h"
#include "src/basic/error.h"

/* The image a run gets when it names none, and the one the warm pool keeps. */
#define DM_IMAGE_DEFAULT "python"

struct dm_image_info {
        const char *name; /* "python" */
        bool buildable;   /* images/build.sh knows it */
        bool tool_image;  /* in the tools' `image` enum (the agent CLIs' images are not) */
        const char *summary;
};

/* Where a build on first use reports: each line build.sh prints (already
 * on the server's stderr too), and a cancel that stops the build. */
struct dm_image_build_watch {
        void (*on_line)(void *userdata, const char *line);
        void *userdata;
        struct dm_cancel *cancel; /* may be NULL */
};

/* Every image demesne knows, in build order; dm_image_names are the ones
 * the tool schemas list (aliases excluded). */
extern const struct dm_image_info dm_images[];
extern const size_t dm_images_count;
/* The same names as a NULL-terminated list, and the accepted aliases. */
extern const char *const dm_image_names[];
extern const char *const dm_image_aliases[];

/* The engine reference: "<repo>/<name>:latest" with repo
 * $DEMESNE_IMAGE_REPO, default "localhost/demesne" ("localhost/" keeps both
 * engines from asking a registry). */
const char *dm_image_ref(const struct dm_image_info *img);

/* Resolves a caller's name (aliases such as "anaconda" included). -EINVAL
 * with the list of valid names when unknown. */
int dm_image_lookup(const char *name, const struct dm_image_info **ret, struct dm_error *err);

/* Makes sure the engine has the image. A missing one is built on first use
 * (build.sh, with the engine the backend talks to), its lines going to
 * watch (may be NULL), unless autobuild is false (DEMESNE_IMAGES_AUTOBUILD=0)
 * or the backend has no image store of ours; then -ENOENT with the command
 * that builds it. -ECANCELED when watch->cancel fires (the build is stopped). */
int dm_image_require(struct dm_backend *b, const struct dm_image_info *img, bool autobuild,
                     const struct dm_image_build_watch *watch, struct dm_error *err);

/* The directory holding build.sh: $DEMESNE_IMAGES_DIR, else the installed
 * pkgdatadir, else the source tree this binary was built from. */
const char *dm_images_dir(void);

/* Runs build.sh for the given names (NULL-terminated; NULL = all buildable)
 * with the build's own output on stderr (and to watch, may be NULL).
 * engine: "podman", "docker" or NULL (build.sh picks); engine_host: the
 * engine's address (DOCKER_HOST for docker, CONTAINER_HOST for podman --remote),
 * or NULL for the CLI's own default. 0 when built or up to date, else a
 * negative errno with the failing step in err. */
int dm_images_build(const char *const *names, bool force, const char *engine, const char *engine_host,
                    const struct dm_image_build_watch *watch, struct dm_error *err);

/* The engine backend b talks to, as build.sh wants it: "podman" or
 * "docker", or "" when unknown. host gets its address when the CLI needs it:
 * always for docker; for podman only when the socket belongs to another
 * user, whose store the podman CLI would not use. */
void dm_image_engine(struct dm_backend *b, char engine[16], char *host, size_t host_size);

/* `build.sh --list`: fills *ret with its tab-separated output. */
int dm_images_list(const char *engine, const char *engine_host, char **ret, struct dm_error *err);

#endif
