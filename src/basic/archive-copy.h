/* SPDX-License-Identifier: MIT */
#ifndef DM_BASIC_ARCHIVE_COPY_H
#define DM_BASIC_ARCHIVE_COPY_H

/* The data of the entry libarchive's in has just read the header of,
 * written to out after the header the caller wrote there: one loop for
 * every archive the project rewrites entry by entry (a snapshot's
 * /workspace, a commit's changed paths). */

#include <archive.h>

#include "src/basic/error.h"

/* 0, or -EIO with "cannot read <in_name>: …" or "cannot write <out_name>:
 * …" (names such as "the workspace archive"). */
int dm_archive_copy_data(struct archive *in, const char *in_name, struct archive *out, const char *out_name,
                         struct dm_error *err);

#endif
