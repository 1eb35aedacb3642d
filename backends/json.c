/* SPDX-License-Identifier: MIT */
/* json-c helpers the backends share (the Docker Engine API's bodies and
 * OpenSandbox's): adding members and array items that take ownership even
 * on failure, string arrays, and "key=value" lists in both directions. */
#include "config.h"
#include "backends/json.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/basic/cleanup.h"

int dm_json_add(struct json_object *o, const char *key, struct json_object *v)
{
        if (!v)
                return -ENOMEM;
        if (json_object_object_add(o, key, v) < 0) {
                json_object_put(v);
                return -ENOMEM;
        }
        return 0;
}

int dm_json_append(struct json_object *array, struct json_object *v)
{
        if (!v)
                return -ENOMEM;
        if (json_object_array_add(array, v) < 0) {
                json_object_put(v);
                return -ENOMEM;
        }
        return 0;
}

struct json_object *dm_json_strv(const char *const *v)
{
        struct json_object *a = json_object_new_array();

        for (; a && v && *v; v++)
                if (dm_json_append(a, json_object_new_string(*v)) < 0) {
                        json_object_put(a);
                        return NULL;
                }
        return a;
}

int dm_json_kv(const char *const *labels, const char *what, struct json_object **ret, struct dm_error *err)
{
        struct json_object *o = json_object_new_object();

        for (; o && labels && *labels; labels++) {
                const char *eq = strchr(*labels, '=');
                _cleanup_free_ char *key = NULL;

                if (!eq || eq == *labels) {
                        json_object_put(o);
                        return dm_error_set(err, -EINVAL, "%s '%s' is not key=value", what, *labels);
                }
                key = strndup(*labels, (size_t)(eq - *labels));
                if (!key || dm_json_add(o, key, json_object_new_string(eq + 1)) < 0) {
                        json_object_put(o);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
        }
        if (!o)
                return dm_error_set(err, -ENOMEM, "out of memory");
        *ret = o;
        return 0;
}

char **dm_labels_from_json(struct json_object *labels)
{
        size_t n = 0, i = 0;
        char **v;

        if (labels && json_object_is_type(labels, json_type_object))
                n = (size_t)json_object_object_length(labels);
        v = calloc(n + 1, sizeof(char *));
        if (v && n) {
                json_object_object_foreach(labels, key, val)
                {
                        const char *s = json_object_get_string(val);

                        if (i < n && asprintf(&v[i++], "%s=%s", key, s ? s : "") < 0) {
                                v[i - 1] = NULL;
                                for (size_t j = 0; j < i - 1; j++)
                                        free(v[j]);
                                free(v);
                                return NULL;
                        }
                }
        }
        return v;
}
