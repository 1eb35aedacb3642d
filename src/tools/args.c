/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/tools/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/basic/buf.h"

static const char *type_name(enum dm_arg_type t)
{
        switch (t) {
        case DM_ARG_STRING: return "a string";
        case DM_ARG_INT: return "an integer";
        case DM_ARG_NUMBER: return "a number";
        case DM_ARG_BOOL: return "a boolean";
        case DM_ARG_STRING_ARRAY: return "an array of strings";
        default: return "an object of strings";
        }
}

char *dm_args_schema(const struct dm_arg_spec *specs, size_t n)
{
        json_object *schema = json_object_new_object(), *props = json_object_new_object();
        json_object *required = json_object_new_array();
        char *text;

        json_object_object_add(schema, "$schema",
                               json_object_new_string("https://json-schema.org/draft/2020-12/schema"));
        json_object_object_add(schema, "type", json_object_new_string("object"));
        for (size_t i = 0; i < n; i++) {
                const struct dm_arg_spec *s = &specs[i];
                json_object *p, *sub;

                if (s->hidden)
                        continue;
                p = json_object_new_object();

                switch (s->type) {
                case DM_ARG_STRING:
                        json_object_object_add(p, "type", json_object_new_string("string"));
                        if (s->enum_values) {
                                json_object *e = json_object_new_array();
                                for (size_t k = 0; s->enum_values[k]; k++)
                                        json_object_array_add(e, json_object_new_string(s->enum_values[k]));
                                json_object_object_add(p, "enum", e);
                        } else if (s->max > 0) {
                                json_object_object_add(p, "maxLength", json_object_new_int64(s->max));
                        }
                        if (s->has_default && s->def_str)
                                json_object_object_add(p, "default", json_object_new_string(s->def_str));
                        break;
                case DM_ARG_INT:
                        json_object_object_add(p, "type", json_object_new_string("integer"));
                        json_object_object_add(p, "minimum", json_object_new_int64(s->min));
                        json_object_object_add(p, "maximum", json_object_new_int64(s->max));
                        if (s->has_default)
                                json_object_object_add(p, "default", json_object_new_int64(s->def_int));
                        break;
                case DM_ARG_NUMBER:
                        json_object_object_add(p, "type", json_object_new_string("number"));
                        json_object_object_add(p, "exclusiveMinimum", json_object_new_int64(s->min));
                        json_object_object_add(p, "maximum", json_object_new_int64(s->max));
                        break;
                case DM_ARG_BOOL:
                        json_object_object_add(p, "type", json_object_new_string("boolean"));
                        if (s->has_default)
                                json_object_object_add(p, "default", json_object_new_boolean(s->def_bool));
                        break;
                case DM_ARG_STRING_ARRAY:
                        json_object_object_add(p, "type", json_object_new_string("array"));
                        sub = json_object_new_object();
                        json_object_object_add(sub, "type", json_object_new_string("string"));
                        json_object_object_add(p, "items", sub);
                        if (s->max > 0)
                                json_object_object_add(p, "maxItems", json_object_new_int64(s->max));
                        if (s->has_default)
                                json_object_object_add(p, "default", json_object_new_array());
                        break;
                case DM_ARG_STRING_MAP:
                        json_object_object_add(p, "type", json_object_new_string("object"));
                        sub = json_object_new_object();
                        json_object_object_add(sub, "type", json_object_new_string("string"));
                        json_object_object_add(p, "additionalProperties", sub);
                        if (s->max > 0)
                                json_object_object_add(p, "maxProperties", json_object_new_int64(s->max));
                        if (s->has_default)
                                json_object_object_add(p, "default", json_object_new_object());
                        break;
                }
                json_object_object_add(p, "description", json_object_new_string(s->description));
                json_object_object_add(props, s->name, p);
                if (s->required)
                        json_object_array_add(required, json_object_new_string(s->name));
        }
        json_object_object_add(schema, "properties", props);
        json_object_object_add(schema, "required", required);
        json_object_object_add(schema, "additionalProperties", json_object_new_boolean(0));
        text = strdup(json_object_to_json_string_ext(schema, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(schema);
        return text;
}

static const struct dm_arg_spec *find(const struct dm_arg_spec *specs, size_t n, const char *name)
{
        for (size_t i = 0; i < n; i++)
                if (strcmp(specs[i].name, name) == 0)
                        return &specs[i];
        return NULL;
}

static bool in_list(const char *const *list, const char *v)
{
        for (size_t k = 0; list && list[k]; k++)
                if (strcmp(list[k], v) == 0)
                        return true;
        return false;
}

static bool env_name_ok(const char *k)
{
        if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_'))
                return false;
        for (k++; *k; k++)
                if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || (*k >= '0' && *k <= '9') || *k == '_'))
                        return false;
        return true;
}

/* Read by the dynamic loader and by glibc itself as a process starts,
 * before its main and so before any seccomp filter of its own: static
 * binaries too read GLIBC_TUNABLES. No caller chooses them for a command;
 * what one needs (a library path) goes on its command line instead. */
static bool env_name_refused(const char *k)
{
        return strncmp(k, "LD_", 3) == 0 || strcmp(k, "GLIBC_TUNABLES") == 0;
}

/* json-c strings may hold NUL (from \u0000): such a value would be cut short
 * on its way to the container, so it is refused rather than altered. */
static bool has_nul(json_object *s)
{
        return strlen(json_object_get_string(s)) != (size_t)json_object_get_string_len(s);
}

static int check_one(const struct dm_arg_spec *s, json_object *v, struct dm_error *err)
{
        switch (s->type) {
        case DM_ARG_STRING:
                if (!json_object_is_type(v, json_type_string))
                        break;
                if (has_nul(v))
                        return dm_error_set(err, -EINVAL, "'%s' must not contain NUL characters", s->name);
                if (s->enum_values) {
                        const char *x = json_object_get_string(v);
                        if (!in_list(s->enum_values, x) && !in_list(s->enum_aliases, x)) {
                                struct dm_buf b;
                                dm_buf_init(&b, 65536);
                                dm_buf_join(&b, s->enum_values, ", ");
                                dm_error_set(err, -EINVAL, "'%s' must be one of %s, not '%.100s'", s->name,
                                             b.data ? b.data : "", x);
                                dm_buf_release(&b);
                                return -EINVAL;
                        }
                } else if (s->max > 0 && json_object_get_string_len(v) > s->max) {
                        return dm_error_set(err, -E2BIG, "'%s' is longer than %lld bytes", s->name, (long long)s->max);
                }
                if (s->required && json_object_get_string_len(v) == 0)
                        return dm_error_set(err, -EINVAL, "'%s' must not be empty", s->name);
                return 0;
        case DM_ARG_INT: {
                int64_t x;
                if (!json_object_is_type(v, json_type_int)) {
                        /* 30.0 is an integer in JSON Schema; 30.5 is not. */
                        if (!json_object_is_type(v, json_type_double))
                                break;
                        double d = json_object_get_double(v);
                        /* Past int64 the cast is undefined (fuzz-args found
                         * 1e300): such a number is outside every range. */
                        if (!(d >= -0x1p63 && d < 0x1p63))
                                return dm_error_set(err, -ERANGE, "'%s' must be between %lld and %lld, not %g", s->name,
                                                    (long long)s->min, (long long)s->max, d);
                        if (d != (double)(int64_t)d)
                                break;
                        x = (int64_t)d;
                } else {
                        x = json_object_get_int64(v);
                }
                if (x < s->min || x > s->max)
                        return dm_error_set(err, -ERANGE, "'%s' must be between %lld and %lld, not %lld", s->name,
                                            (long long)s->min, (long long)s->max, (long long)x);
                return 0;
        }
        case DM_ARG_NUMBER: {
                double d;
                if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
                        break;
                d = json_object_get_double(v);
                if (!(d > (double)s->min && d <= (double)s->max))
                        return dm_error_set(err, -ERANGE, "'%s' must be more than %lld and at most %lld, not %g",
                                            s->name, (long long)s->min, (long long)s->max, d);
                return 0;
        }
        case DM_ARG_BOOL:
                if (!json_object_is_type(v, json_type_boolean))
                        break;
                return 0;
        case DM_ARG_STRING_ARRAY:
                if (!json_object_is_type(v, json_type_array))
                        break;
                if (s->max > 0 && (int64_t)json_object_array_length(v) > s->max)
                        return dm_error_set(err, -E2BIG, "'%s' has more than %lld entries", s->name, (long long)s->max);
                for (size_t i = 0; i < json_object_array_length(v); i++) {
                        json_object *e = json_object_array_get_idx(v, i);
                        if (!json_object_is_type(e, json_type_string))
                                return dm_error_set(err, -EINVAL, "'%s[%zu]' must be a string", s->name, i);
                        if (has_nul(e))
                                return dm_error_set(err, -EINVAL, "'%s[%zu]' must not contain NUL characters", s->name,
                                                    i);
                }
                return 0;
        case DM_ARG_STRING_MAP: {
                int64_t count = 0;
                if (!json_object_is_type(v, json_type_object))
                        break;
                json_object_object_foreach(v, key, val)
                {
                        if (!env_name_ok(key))
                                return dm_error_set(
                                        err, -EINVAL,
                                        "'%s' key '%.100s' is not a valid variable name (letters, digits, _; "
                                        "not starting with a digit)",
                                        s->name, key);
                        if (env_name_refused(key))
                                return dm_error_set(err, -EPERM,
                                                    "'%s' key '%.100s' is refused: LD_* and GLIBC_TUNABLES steer "
                                                    "the dynamic loader and glibc before a process's filter is in "
                                                    "place; set them inside the command instead",
                                                    s->name, key);
                        if (!json_object_is_type(val, json_type_string))
                                return dm_error_set(err, -EINVAL, "'%s.%.100s' must be a string", s->name, key);
                        if (has_nul(val))
                                return dm_error_set(err, -EINVAL, "'%s.%.100s' must not contain NUL characters",
                                                    s->name, key);
                        count++;
                }
                if (s->max > 0 && count > s->max)
                        return dm_error_set(err, -E2BIG, "'%s' has more than %lld entries", s->name, (long long)s->max);
                return 0;
        }
        }
        return dm_error_set(err, -EINVAL, "'%s' must be %s, not %s", s->name, type_name(s->type),
                            json_type_to_name(json_object_get_type(v)));
}

int dm_args_check(const struct dm_arg_spec *specs, size_t n, json_object *args, struct dm_error *err)
{
        int r;

        if (args) {
                if (!json_object_is_type(args, json_type_object))
                        return dm_error_set(err, -EINVAL, "arguments must be an object");
                json_object_object_foreach(args, key, val)
                {
                        const struct dm_arg_spec *s = find(specs, n, key);
                        if (!s) {
                                struct dm_buf b;
                                dm_buf_init(&b, 65536);
                                for (size_t i = 0; i < n; i++)
                                        dm_buf_printf(&b, "%s%s", i ? ", " : "", specs[i].name);
                                dm_error_set(err, -EINVAL, "unknown argument '%.100s': this tool takes %s", key,
                                             b.data ? b.data : "none");
                                dm_buf_release(&b);
                                return -EINVAL;
                        }
                        if (!val)
                                return dm_error_set(err, -EINVAL, "'%s' must be %s, not null", key, type_name(s->type));
                        r = check_one(s, val, err);
                        if (r < 0)
                                return r;
                }
        }
        for (size_t i = 0; i < n; i++) {
                json_object *v;
                if (specs[i].required && (!args || !json_object_object_get_ex(args, specs[i].name, &v)))
                        return dm_error_set(err, -EINVAL, "missing required argument '%s' (%s)", specs[i].name,
                                            type_name(specs[i].type));
        }
        return 0;
}

const char *dm_args_str(const struct dm_arg_spec *specs, size_t n, json_object *args, const char *name)
{
        json_object *v;
        const struct dm_arg_spec *s = find(specs, n, name);

        if (args && json_object_object_get_ex(args, name, &v) && json_object_is_type(v, json_type_string))
                return json_object_get_string(v);
        return s && s->has_default ? s->def_str : NULL;
}

int64_t dm_args_int(const struct dm_arg_spec *specs, size_t n, json_object *args, const char *name)
{
        json_object *v;
        const struct dm_arg_spec *s = find(specs, n, name);

        if (args && json_object_object_get_ex(args, name, &v) &&
            (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
                return json_object_is_type(v, json_type_int) ? json_object_get_int64(v)
                                                             : (int64_t)json_object_get_double(v);
        return s ? s->def_int : 0;
}

double dm_args_number(json_object *args, const char *name)
{
        json_object *v;

        if (args && json_object_object_get_ex(args, name, &v) &&
            (json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double)))
                return json_object_get_double(v);
        return 0;
}

bool dm_args_bool(const struct dm_arg_spec *specs, size_t n, json_object *args, const char *name)
{
        json_object *v;
        const struct dm_arg_spec *s = find(specs, n, name);

        if (args && json_object_object_get_ex(args, name, &v) && json_object_is_type(v, json_type_boolean))
                return json_object_get_boolean(v);
        return s ? s->def_bool : false;
}

const char **dm_args_strv(json_object *args, const char *name)
{
        json_object *v;
        const char **out;
        size_t len = 0;

        if (args && json_object_object_get_ex(args, name, &v) && json_object_is_type(v, json_type_array))
                len = json_object_array_length(v);
        out = calloc(len + 1, sizeof(*out));
        for (size_t i = 0; out && i < len; i++)
                out[i] = json_object_get_string(json_object_array_get_idx(v, i));
        return out;
}

char **dm_args_env(json_object *args, const char *name)
{
        json_object *v;
        char **out;
        size_t i = 0;

        if (!args || !json_object_object_get_ex(args, name, &v) || !json_object_is_type(v, json_type_object))
                return calloc(1, sizeof(char *));
        out = calloc((size_t)json_object_object_length(v) + 1, sizeof(*out));
        if (!out)
                return NULL;
        json_object_object_foreach(v, key, val)
        {
                if (asprintf(&out[i], "%s=%s", key, json_object_get_string(val)) < 0) {
                        out[i] = NULL;
                        dm_args_strv_free(out);
                        return NULL;
                }
                i++;
        }
        return out;
}

void dm_args_strv_free(char **v)
{
        for (size_t i = 0; v && v[i]; i++)
                free(v[i]);
        free(v);
}

/* ---- what this server permits ----------------------------------------------- */

/* The tables calls are checked against are each server's own
 * (dm_args_tailor's copies, kept by the registry the tools went into): two
 * servers in one process with different facts check and describe calls by
 * their own, and freeing one frees nothing the other uses. */
/* Every subset of the modes, by bit (1 none, 2 package-managers, 4 open),
 * in that order: the listed ones and the rest (accepted, not listed, so
 * that their refusal is the policy's own message). */
static const char *const egress_sets[8][4] = {
        { NULL },
        { "none", NULL },
        { "package-managers", NULL },
        { "none", "package-managers", NULL },
        { "open", NULL },
        { "none", "open", NULL },
        { "package-managers", "open", NULL },
        { "none", "package-managers", "open", NULL },
};

/* The offer tailor works from: f's, or the one egress_default implies. */
static struct dm_egress_offer offer_of(const struct dm_args_facts *f, bool network)
{
        struct dm_egress_offer o = { .none = true, .package_managers = network, .open = network, .allow = network };

        return f->offer ? *f->offer : o;
}

static unsigned offered_bits(const struct dm_args_facts *f, const struct dm_egress_offer *o)
{
        return (o->none ? 1u : 0u) | (o->package_managers ? 2u : 0u) | (o->open && f->caller_egress ? 4u : 0u);
}

/* "/a, /b" from "/a:/b". */
static void print_roots(struct dm_buf *b, const char *p)
{
        bool first = true;

        while (*p) {
                size_t len = strcspn(p, ":");
                if (len) {
                        dm_buf_printf(b, "%s%.*s", first ? "" : ", ", (int)len, p);
                        first = false;
                }
                p += len;
                if (*p == ':')
                        p++;
        }
}

static char *describe_egress(const struct dm_args_facts *f, bool network, const char *def)
{
        struct dm_egress_offer o = offer_of(f, network);
        unsigned bits = offered_bits(f, &o);
        struct dm_buf b;

        dm_buf_init(&b, 65536);
        dm_buf_printf(&b, "Network egress; the default on this server is %s.", def);
        if (!bits) {
                dm_buf_printf(&b, " This server refuses every mode: %s.", o.why ? o.why : "no egress can be had");
                return b.data;
        }
        if (o.none && o.none_reaches_dns)
                dm_buf_printf(&b, " none: no network but the name servers (the backend's egress sidecar lets "
                                  "those through).");
        else if (o.none)
                dm_buf_printf(&b, " none: loopback only.");
        if (o.package_managers)
                dm_buf_printf(&b, " package-managers: the package registries%s.",
                              f->offer && !network ? " (allowed by the backend's egress rules, every port)"
                                                   : " through demesne's proxy (HTTP_PROXY and friends set)");
        if (o.open && f->caller_egress)
                dm_buf_printf(&b, " open: %s.",
                              o.none_reaches_dns || (f->offer && !network)
                                      ? "the backend's own network"
                                      : "public addresses, NATed (never the host, other sandboxes, cloud metadata "
                                        "or private ranges)");
        if (o.allow && f->caller_egress)
                dm_buf_printf(&b, " With 'allow', none means: only those entries.");
        if ((o.open || o.allow) && !f->caller_egress)
                dm_buf_printf(&b,
                              " 'open'%s are off on this server (its operator can permit them with "
                              "DEMESNE_ALLOW_CALLER_EGRESS=1).",
                              o.allow ? " and 'allow'" : "");
        if (o.why)
                dm_buf_printf(&b, " Only these modes work here: %s.", o.why);
        return b.data;
}

static char *describe_paths(const char *roots, const char *base)
{
        struct dm_buf b;

        dm_buf_init(&b, 65536);
        dm_buf_printf(&b, "%s", base);
        if (roots[strspn(roots, ":")]) {
                dm_buf_printf(&b, " This server accepts paths inside: ");
                print_roots(&b, roots);
                dm_buf_printf(&b, " (DEMESNE_ALLOWED_PATHS).");
        } else {
                dm_buf_printf(&b, " This server accepts no host paths (DEMESNE_ALLOWED_PATHS is unset): any "
                                  "path is refused.");
        }
        return b.data;
}

/* The text dm_args_tailor writes for s (malloc'd), or NULL: the
 * template's stays. */
static char *describe(const struct dm_args_facts *f, const struct dm_arg_spec *s, bool network, const char *def)
{
        struct dm_buf b;

        switch (s->role) {
        case DM_ARG_ROLE_EGRESS: return describe_egress(f, network, def);
        case DM_ARG_ROLE_HOST_PATH: return describe_paths(f->allowed_paths ? f->allowed_paths : "", s->description);
        case DM_ARG_ROLE_IMAGE:
                if (!f->images)
                        return NULL;
                dm_buf_init(&b, 65536);
                dm_buf_printf(&b, "%s %s", s->description, f->images);
                return b.data;
        default: return NULL;
        }
}

struct dm_args_table *dm_args_tailor(const struct dm_args_facts *f, const struct dm_arg_spec *tmpl, size_t n,
                                     bool follow_default)
{
        const char *egress_default = f->egress_default ? f->egress_default : "none";
        bool network = strcmp(egress_default, "none") != 0;
        struct dm_egress_offer offer = offer_of(f, network);
        unsigned bits;
        size_t size = sizeof(struct dm_args_table) + n * sizeof(tmpl[0]) + strlen(egress_default) + 1;
        struct dm_args_table *t = NULL;
        char **text = calloc(n ? n : 1, sizeof(*text)), *p;

        /* The texts first (one that fails leaves the template's), then one
         * block for the table and all of them. */
        for (size_t i = 0; text && i < n; i++) {
                text[i] = describe(f, &tmpl[i], network, follow_default ? egress_default : tmpl[i].def_str);
                if (text[i])
                        size += strlen(text[i]) + 1;
        }
        if (text)
                t = malloc(size);
        if (t) {
                t->n = n;
                memcpy(t->specs, tmpl, n * sizeof(tmpl[0]));
                p = (char *)&t->specs[n];
                strcpy(p, egress_default);
                egress_default = p;
                p += strlen(p) + 1;
                for (size_t i = 0; i < n; i++) {
                        struct dm_arg_spec *s = &t->specs[i];

                        if (text[i]) {
                                s->description = strcpy(p, text[i]);
                                p += strlen(p) + 1;
                        }
                        switch (s->role) {
                        case DM_ARG_ROLE_EGRESS:
                                if (follow_default)
                                        s->def_str = egress_default;
                                /* Modes the server would refuse stay accepted
                                 * (not listed), so the refusal is the
                                 * policy's own message. */
                                bits = offered_bits(f, &offer);
                                /* A schema's enum is never empty: none
                                 * stays listed where every call is refused. */
                                s->enum_values = egress_sets[bits ? bits : 1u];
                                s->enum_aliases = egress_sets[7u & ~(bits ? bits : 1u)];
                                break;
                        case DM_ARG_ROLE_ALLOW: s->hidden = !offer.allow || !f->caller_egress; break;
                        default: break;
                        }
                }
        }
        for (size_t i = 0; text && i < n; i++)
                free(text[i]);
        free(text);
        return t;
}
