/* SPDX-License-Identifier: MIT */
#ifndef DM_RESOURCES_H
#define DM_RESOURCES_H

/* Run outputs as MCP resources, for clients that do not share the server's
 * disk (served over HTTP to another machine).
 *
 * A file below a run's or a sandbox's output directory is
 *   demesne://output/<dir>/<path>
 * with <dir> the directory's name under the output root (run-..., sbx-...)
 * and <path> its path there, each segment percent-encoded.
 *
 * Ownership: each output directory is claimed by the principal of the call
 * that made it (the session's HTTP token name, "local" on stdio). Only
 * that principal lists or reads its files; a directory nobody claimed in
 * this server's life (an earlier server's, the CLI's) is not served.
 *
 * Reading opens the file beneath the output root the way downloads do
 * (dm_io_open_beneath: no symlink followed, no escape, no FIFO opened), up
 * to DM_RESOURCE_READ_MAX bytes: text when the bytes are UTF-8 without NUL,
 * otherwise base64 (blob). */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/basic/error.h"
#include "src/basic/principal.h"

#define DM_RESOURCE_SCHEME "demesne://output/"
#define DM_RESOURCE_READ_MAX ((size_t)4 << 20)
#define DM_RESOURCE_LINKS_MAX 32    /* resource_link items in one tool result */
#define DM_RESOURCE_LIST_MAX 500    /* resources in one resources/list answer */
#define DM_RESOURCE_CLAIMS_MAX 4096 /* the oldest claims are forgotten past this */
#define DM_RESOURCE_PRINCIPAL_MAX \
        DM_PRINCIPAL_MAX /* a principal, with its NUL (as MCP sessions' DM_MCP_PRINCIPAL_MAX) */

struct dm_resources;

struct dm_resources *dm_resources_new(void);
void dm_resources_free(struct dm_resources *res);

/* Records that principal made the output directory dir (a plain name
 * under the output root). A later claim of the same name replaces it. */
void dm_resources_claim(struct dm_resources *res, const char *dir, const char *principal);
/* Whether principal claimed dir. */
bool dm_resources_owned(struct dm_resources *res, const char *dir, const char *principal);

/* The resource_link content items for the regular files below
 * output_root/dir (sorted by path; at most max, with *ret_omitted saying
 * how many more there were). An empty array when the directory is gone. */
json_object *dm_resources_links(const char *output_root, const char *dir, size_t max, size_t *ret_omitted);

/* One file's description: uri, name, title (its path), mimeType, size;
 * with "type": type unless type is NULL ("resource_link" in a tool result,
 * none in resources/list). */
json_object *dm_resources_describe(const char *dir, const char *path, int64_t size, const char *type);

/* resources/list: principal's files, newest directory first, at most
 * DM_RESOURCE_LIST_MAX. */
json_object *dm_resources_list(struct dm_resources *res, const char *output_root, const char *principal);

/* resources/templates/list's resourceTemplates. */
json_object *dm_resources_templates(void);

/* resources/read: fills *ret with the result's contents array.
 * -EINVAL: not a demesne://output/ URI (or a malformed one); -ENOENT: no such
 * file for this principal (not claimed, gone, not a regular file); -EFBIG:
 * over DM_RESOURCE_READ_MAX. err says which. */
int dm_resources_read(struct dm_resources *res, const char *output_root, const char *principal, const char *uri,
                      json_object **ret, struct dm_error *err);

#endif
