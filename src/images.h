/* SPDX-License-Identifier: MIT */
#ifndef DM_IMAGES_H
#define DM_IMAGES_H

/* The image names callers use, the engine references behind them, and the
 * build script that makes them from Debian packages (images/build.sh). */

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "src/util/error.h"

struct dm_image_info {
        const char *name;       /* "python" */
        const char *ref;        /* "localhost/demesne/python:latest" */
        bool buildable;         /* false: arrives with the image-set issue */
        const char *summary;
};

/* Every name the tool schemas list, in order (aliases excluded). */
extern const struct dm_image_info dm_images[];
extern const size_t dm_images_count;
/* The same names as a NULL-terminated list, and the accepted aliases. */
extern const char *const dm_image_names[];
extern const char *const dm_image_aliases[];

/* Resolves a caller's name (aliases such as "anaconda" included). -EINVAL
 * with the list of valid names when unknown. */
int dm_image_lookup(const char *name, const struct dm_image_info **ret, struct dm_error *err);

/* Fails with a message naming the command that builds the image when the
 * engine does not have it, -ENOENT. */
int dm_image_require(struct dm_backend *b, const struct dm_image_info *img, struct dm_error *err);

/* The directory holding build.sh: $DEMESNE_IMAGES_DIR, else the installed
 * pkgdatadir, else the source tree this binary was built from. */
const char *dm_images_dir(void);

/* Runs build.sh for the given names (NULL-terminated; NULL = all buildable)
 * with the build's own output on stderr. Returns the script's exit status
 * (0 = built or up to date) or a negative errno. */
int dm_images_build(const char *const *names, bool force, struct dm_error *err);

#endif
