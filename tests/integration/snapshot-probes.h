/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_SNAPSHOT_PROBES_H
#define DM_TESTS_SNAPSHOT_PROBES_H

/* What a test of snapshots and forks counts to say "nothing left": the
 * entries of the output root's folders, and the engine's snapshot images
 * of one output root (test-snapshot.c, test-fork.c). */

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"

/* Entries of <output root>/<dir> (dir NULL: the root itself: output
 * directories) whose names do not start with '.'. */
static inline int output_entries(const char *dir)
{
        char p[PATH_MAX];
        DIR *d;
        struct dirent *e;
        int n = 0;

        snprintf(p, sizeof(p), "%s%s%s", getenv("DEMESNE_OUTPUT_ROOT"), dir ? "/" : "", dir ? dir : "");
        if (!(d = opendir(p)))
                return 0;
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        return n;
}

/* The engine's snapshot images labelled root_label (demesne.root=…);
 * -1 when it cannot say (no label yet, an engine error). */
static inline long snapshot_images_of(struct dm_backend *b, const char *root_label)
{
        struct dm_image_entry *v = NULL;
        struct dm_error err = { 0 };
        size_t n = 0;
        long count = 0;

        if (!root_label[0] || b->ops->image_list(b, root_label, &v, &n, &err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++)
                for (char **l = v[i].labels; l && *l; l++)
                        count += strncmp(*l, "demesne.snapshot=", 17) == 0;
        dm_image_entries_free(v, n);
        return count;
}

#endif
