/* SPDX-License-Identifier: MIT */
#ifndef DM_URI_H
#define DM_URI_H

/* The URIs under which files are served (demesne://output/, skill://):
 * <scheme><dir>/<path>, each segment percent-encoded (RFC 3986: all but the
 * unreserved characters; the path keeps its slashes). */

/* scheme is the prefix ("skill://", "demesne://output/"); malloc'd, NULL
 * when out of memory. */
char *dm_uri_make(const char *scheme, const char *dir, const char *path);
/* s percent-encoded for a URL's path or query: all but the unreserved
 * characters and those in keep ("" for none, "/:" for an engine path that
 * keeps its slashes and a tag's colon). malloc'd, NULL when out of memory. */
char *dm_uri_escape(const char *s, const char *keep);
/* Decodes %XX in place; a NUL byte, a stray '%' or a query/fragment is
 * refused (-EINVAL). */
int dm_uri_decode_in_place(char *s);

/* A MIME type from the file name's extension, any case;
 * application/octet-stream when unknown. */
const char *dm_mime_type(const char *name);

#endif
