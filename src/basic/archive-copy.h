/* SPDX-License-Identifier: MIT */
#ifndef DM_BASIC_ARCHIVE_COPY_H
#define DM_BASIC_ARCHIVE_COPY_H

/* The data of the entry libarchive's in has just read the header of,
 * written to out after the header the caller wrote there: one loop for
 * every archive the project rewrites entry by entry (a snapshot's
 * /workspace, a commit's changed paths). */

#include <archive.h>
#include <locale.h>

#include "src/basic/cleanup.h"
#include "src/basic/error.h"

/* 0, or -EIO with "cannot read <in_name>: …" or "cannot write <out_name>:
 * …" (names such as "the workspace archive"). */
int dm_archive_copy_data(struct archive *in, const char *in_name, struct archive *out, const char *out_name,
                         struct dm_error *err);

/* libarchive converts names between a pax header's UTF-8 and the
 * locale's charset: in the C locale a name that is not ASCII cannot be
 * read ("Pathname can't be converted from UTF-8 to current locale"), as
 * /etc/ssl/certs has and any user's /workspace may. Between begin and end
 * the calling thread (only it) works in C.UTF-8; begin returns what end
 * puts back ((locale_t)0: nothing was changed). */
locale_t dm_archive_locale_begin(void);
void dm_archive_locale_end(locale_t previous);
static inline void dm_archive_localep(locale_t *p)
{
        dm_archive_locale_end(*p);
}
/* A function's scope in C.UTF-8: _cleanup_archive_locale_ locale_t l = dm_archive_locale_begin();
 * (unused: only its clean-up matters, which clang would warn of). */
#define _cleanup_archive_locale_ _cleanup_(dm_archive_localep) __attribute__((unused))

#endif
