/* SPDX-License-Identifier: MIT */
/* Arguments for a host MCP server checked against its tool's inputSchema
 * (client.h) before they are sent: a nested caller's arguments reach a
 * server that runs on the host, so a server that trusts its own schema
 * (and its SDK's check of it) is not handed what the schema rules out.
 * Only the subset of JSON Schema tool schemas use is understood; other
 * keywords are left to the server. */
#include "config.h"
#include "src/mcp/client.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define DEPTH_MAX 32
#define PATH_MAX_SHOWN 200

/* Where in the arguments a fault is, as a message names it: a.b[2]. */
struct where {
        char s[PATH_MAX_SHOWN + 4];
        size_t len;
};

static void where_add(struct where *w, const char *member, long index)
{
        char part[PATH_MAX_SHOWN + 1];
        size_t i = 0;

        if (member) {
                if (w->len)
                        part[i++] = '.';
                /* The caller's own member names: one line, capped. */
                for (const char *p = member; *p && i < PATH_MAX_SHOWN; p++)
                        part[i++] = (unsigned char)*p < 0x20 || *p == 0x7f || *p == '\'' ? '?' : *p;
                part[i] = '\0';
        } else {
                snprintf(part, sizeof(part), "[%ld]", index);
                i = strlen(part);
        }
        if (w->len >= PATH_MAX_SHOWN)
                return; /* already cut short, "..." shown */
        if (w->len + i > PATH_MAX_SHOWN) {
                memcpy(w->s + w->len, part, PATH_MAX_SHOWN - w->len);
                memcpy(w->s + PATH_MAX_SHOWN, "...", 4);
                w->len = PATH_MAX_SHOWN + 3;
                return;
        }
        memcpy(w->s + w->len, part, i);
        w->len += i;
        w->s[w->len] = '\0';
}

static int fault(struct dm_error *err, const struct where *w, const char *what, const char *detail)
{
        if (!w->len)
                return dm_error_set(err, -EINVAL, "arguments: %s%s", what, detail);
        return dm_error_set(err, -EINVAL, "argument '%s': %s%s", w->s, what, detail);
}

static bool is_integer(json_object *v)
{
        double d;

        if (json_object_is_type(v, json_type_int))
                return true;
        if (!json_object_is_type(v, json_type_double))
                return false;
        d = json_object_get_double(v);
        return d > -9.2e18 && d < 9.2e18 && d == (double)(long long)d;
}

static bool type_is(const char *want, json_object *v)
{
        if (strcmp(want, "null") == 0)
                return v == NULL;
        if (strcmp(want, "boolean") == 0)
                return json_object_is_type(v, json_type_boolean);
        if (strcmp(want, "integer") == 0)
                return v && is_integer(v);
        if (strcmp(want, "number") == 0)
                return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
        if (strcmp(want, "string") == 0)
                return json_object_is_type(v, json_type_string);
        if (strcmp(want, "array") == 0)
                return json_object_is_type(v, json_type_array);
        if (strcmp(want, "object") == 0)
                return json_object_is_type(v, json_type_object);
        return true; /* a type this checker does not know: the server's to judge */
}

/* "type": one name or an array of names. */
static int check_type(json_object *type, json_object *v, const struct where *w, struct dm_error *err)
{
        char names[160] = "";
        size_t n;

        if (json_object_is_type(type, json_type_string)) {
                if (type_is(json_object_get_string(type), v))
                        return 0;
                return fault(err, w, "must be of type ", json_object_get_string(type));
        }
        if (!json_object_is_type(type, json_type_array))
                return 0;
        n = json_object_array_length(type);
        for (size_t i = 0; i < n; i++) {
                json_object *t = json_object_array_get_idx(type, i);
                if (!json_object_is_type(t, json_type_string) || type_is(json_object_get_string(t), v))
                        return 0;
                snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "",
                         json_object_get_string(t));
        }
        return n ? fault(err, w, "must be of one of the types ", names) : 0;
}

/* An enum's values as a message shows them. Not json_object_to_json_string:
 * that writes into the schema, which calls on other threads read. */
struct shown {
        char s[200];
};
static struct shown enum_shown(json_object *values)
{
        struct shown r = { "" };
        size_t len = 0;

        for (size_t i = 0; i < json_object_array_length(values) && len < sizeof(r.s) - 8; i++) {
                json_object *e = json_object_array_get_idx(values, i);
                const char *sep = i ? ", " : "";
                int n;

                if (json_object_is_type(e, json_type_string))
                        n = snprintf(r.s + len, sizeof(r.s) - len, "%s\"%.60s\"", sep, json_object_get_string(e));
                else if (json_object_is_type(e, json_type_int))
                        n = snprintf(r.s + len, sizeof(r.s) - len, "%s%lld", sep, (long long)json_object_get_int64(e));
                else if (json_object_is_type(e, json_type_boolean))
                        n = snprintf(r.s + len, sizeof(r.s) - len, "%s%s", sep,
                                     json_object_get_boolean(e) ? "true" : "false");
                else
                        n = snprintf(r.s + len, sizeof(r.s) - len, "%s%s", sep, e ? "..." : "null");
                len = n < 0 ? len : len + (size_t)n >= sizeof(r.s) ? sizeof(r.s) - 1 : len + (size_t)n;
        }
        return r;
}

static int check(json_object *schema, json_object *v, struct where *w, int depth, struct dm_error *err);

static int check_object(json_object *schema, json_object *v, struct where *w, int depth, struct dm_error *err)
{
        json_object *props = NULL, *extra = NULL, *required, *sub;
        size_t len = w->len;
        int r;

        json_object_object_get_ex(schema, "properties", &props);
        if (!json_object_is_type(props, json_type_object))
                props = NULL;
        json_object_object_get_ex(schema, "additionalProperties", &extra);
        if (json_object_object_get_ex(schema, "required", &required) && json_object_is_type(required, json_type_array))
                for (size_t i = 0; i < json_object_array_length(required); i++) {
                        json_object *name = json_object_array_get_idx(required, i);
                        if (!json_object_is_type(name, json_type_string) ||
                            json_object_object_get_ex(v, json_object_get_string(name), NULL))
                                continue;
                        where_add(w, json_object_get_string(name), 0);
                        r = fault(err, w, "is required", "");
                        w->len = len, w->s[len] = '\0';
                        return r;
                }
        json_object_object_foreach(v, key, val)
        {
                where_add(w, key, 0);
                if (props && json_object_object_get_ex(props, key, &sub))
                        r = check(sub, val, w, depth + 1, err);
                else if (json_object_is_type(extra, json_type_boolean) && !json_object_get_boolean(extra))
                        r = fault(err, w, "is not a member this tool takes", "");
                else if (json_object_is_type(extra, json_type_object))
                        r = check(extra, val, w, depth + 1, err);
                else
                        r = 0;
                w->len = len, w->s[len] = '\0';
                if (r < 0)
                        return r;
        }
        return 0;
}

static int check(json_object *schema, json_object *v, struct where *w, int depth, struct dm_error *err)
{
        json_object *kw;
        size_t len = w->len;
        int r;

        if (json_object_is_type(schema, json_type_boolean))
                return json_object_get_boolean(schema) ? 0 : fault(err, w, "is not allowed", "");
        if (!json_object_is_type(schema, json_type_object))
                return 0;
        if (depth > DEPTH_MAX)
                return fault(err, w, "is nested too deeply", "");
        if (json_object_object_get_ex(schema, "type", &kw) && (r = check_type(kw, v, w, err)) < 0)
                return r;
        if (json_object_object_get_ex(schema, "enum", &kw) && json_object_is_type(kw, json_type_array)) {
                bool found = false;
                for (size_t i = 0; i < json_object_array_length(kw) && !found; i++)
                        found = json_object_equal(json_object_array_get_idx(kw, i), v) == 1;
                if (!found)
                        return fault(err, w, "must be one of ", enum_shown(kw).s);
        }
        if (json_object_is_type(v, json_type_object))
                return check_object(schema, v, w, depth, err);
        if (json_object_is_type(v, json_type_array) && json_object_object_get_ex(schema, "items", &kw)) {
                for (size_t i = 0; i < json_object_array_length(v); i++) {
                        where_add(w, NULL, (long)i);
                        r = check(kw, json_object_array_get_idx(v, i), w, depth + 1, err);
                        w->len = len, w->s[len] = '\0';
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

int dm_mcpclient_check_args(json_object *schema, json_object *args, struct dm_error *err)
{
        struct where w = { .len = 0 };
        json_object *none = NULL;
        int r;

        if (!args)
                args = none = json_object_new_object();
        r = check(schema, args, &w, 0, err);
        json_object_put(none);
        return r;
}
