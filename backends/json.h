/* SPDX-License-Identifier: MIT */
#ifndef DM_BACKENDS_JSON_H
#define DM_BACKENDS_JSON_H

/* json-c helpers shared by the backends (backends/json.c). */

#include "src/basic/error.h"

struct json_object;

/* Adds v under key / to the array, taking it: a NULL v is -ENOMEM, and v is
 * released on failure. */
int dm_json_add(struct json_object *o, const char *key, struct json_object *v);
int dm_json_append(struct json_object *array, struct json_object *v);
/* A string array from a NULL-terminated list (NULL on ENOMEM). */
struct json_object *dm_json_strv(const char *const *v);
/* "key=value" strings (NULL-terminated, may be NULL) as an object; what
 * names them in the -EINVAL message for one without '='. */
int dm_json_kv(const char *const *kv, const char *what, struct json_object **ret, struct dm_error *err);
/* A JSON object of strings (Docker's Labels, OpenSandbox's metadata) as a
 * NULL-terminated "key=value" array (empty for NULL or a non-object). NULL
 * on ENOMEM. */
char **dm_labels_from_json(struct json_object *labels);

#endif
