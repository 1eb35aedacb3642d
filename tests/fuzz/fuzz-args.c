/* SPDX-License-Identifier: MIT */
/* libFuzzer target for tool arguments (src/tools/args.c): dm_args_check and
 * the getters, against each registered tool's argument table as its
 * published inputSchema states it (type, enum, maxLength, minimum/maximum,
 * maxItems/maxProperties, required; the tables' aliases and defaults are
 * not in the schema and so not used here).
 *
 * Input: byte 0 picks the tool (mod the number of tools); the rest is the
 * arguments object as JSON. Whatever the check accepts must satisfy the
 * schema, and the getters must then return values inside it. */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>

#include "src/mcp/registry.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "tests/fuzz/fuzz.h"

#define MAX_ARGS 32
#define MAX_ENUM 64

struct table {
        json_object *schema; /* owns the strings the specs point to */
        struct dm_arg_spec specs[MAX_ARGS];
        const char *enums[MAX_ARGS][MAX_ENUM + 1];
        size_t n;
};

static struct table tables[64];
static size_t n_tables;

static int64_t get_int(json_object *o, const char *key, int64_t def)
{
        json_object *v;

        return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : def;
}

static void table_from_schema(struct table *t, const char *text)
{
        json_object *props, *required;

        t->schema = json_tokener_parse(text);
        FUZZ_CHECK(t->schema && json_object_object_get_ex(t->schema, "properties", &props));
        json_object_object_get_ex(t->schema, "required", &required);
        json_object_object_foreach(props, name, p)
        {
                struct dm_arg_spec *s = &t->specs[t->n];
                json_object *type, *e;
                const char *ty;

                FUZZ_CHECK(t->n < MAX_ARGS && json_object_object_get_ex(p, "type", &type));
                ty = json_object_get_string(type);
                s->name = name;
                s->description = "";
                if (strcmp(ty, "string") == 0) {
                        s->type = DM_ARG_STRING;
                        s->max = get_int(p, "maxLength", 0);
                        if (json_object_object_get_ex(p, "enum", &e)) {
                                size_t k = 0;
                                for (; k < json_object_array_length(e) && k < MAX_ENUM; k++)
                                        t->enums[t->n][k] = json_object_get_string(json_object_array_get_idx(e, k));
                                t->enums[t->n][k] = NULL;
                                s->enum_values = t->enums[t->n];
                        }
                } else if (strcmp(ty, "integer") == 0) {
                        s->type = DM_ARG_INT;
                        s->min = get_int(p, "minimum", INT64_MIN);
                        s->max = get_int(p, "maximum", INT64_MAX);
                } else if (strcmp(ty, "number") == 0) {
                        s->type = DM_ARG_NUMBER;
                        s->min = get_int(p, "exclusiveMinimum", INT64_MIN);
                        s->max = get_int(p, "maximum", INT64_MAX);
                } else if (strcmp(ty, "boolean") == 0) {
                        s->type = DM_ARG_BOOL;
                } else if (strcmp(ty, "array") == 0) {
                        s->type = DM_ARG_STRING_ARRAY;
                        s->max = get_int(p, "maxItems", 0);
                } else {
                        FUZZ_CHECK(strcmp(ty, "object") == 0);
                        s->type = DM_ARG_STRING_MAP;
                        s->max = get_int(p, "maxProperties", 0);
                }
                for (size_t i = 0; required && i < json_object_array_length(required); i++)
                        if (strcmp(json_object_get_string(json_object_array_get_idx(required, i)), name) == 0)
                                s->required = true;
                t->n++;
        }
}

static void setup(void)
{
        /* Lives as long as the process: the tables are built from it once. */
        static struct dm_registry *reg;

        reg = dm_registry_new();
        FUZZ_CHECK(reg);
        dm_tools_configure(NULL, reg);
        n_tables = dm_registry_count(reg);
        FUZZ_CHECK(n_tables > 0 && n_tables <= sizeof(tables) / sizeof(tables[0]));
        for (size_t i = 0; i < n_tables; i++)
                table_from_schema(&tables[i], dm_registry_at(reg, i)->input_schema);
}

static bool in_enum(const char *const *e, const char *v)
{
        for (; *e; e++)
                if (strcmp(*e, v) == 0)
                        return true;
        return false;
}

/* The args passed the check: each value must fit its entry of the schema,
 * and the getters must return it. */
static void accepted(const struct table *t, json_object *args)
{
        for (size_t i = 0; i < t->n; i++) {
                const struct dm_arg_spec *s = &t->specs[i];
                json_object *v;

                if (!args || !json_object_object_get_ex(args, s->name, &v)) {
                        FUZZ_CHECK(!s->required);
                        continue;
                }
                switch (s->type) {
                case DM_ARG_STRING: {
                        const char *str = dm_args_str(t->specs, t->n, args, s->name);
                        FUZZ_CHECK(str && strlen(str) == (size_t)json_object_get_string_len(v));
                        FUZZ_CHECK(!s->enum_values || in_enum(s->enum_values, str));
                        FUZZ_CHECK(s->enum_values || s->max <= 0 || (int64_t)strlen(str) <= s->max);
                        FUZZ_CHECK(!s->required || *str);
                        break;
                }
                case DM_ARG_INT: {
                        int64_t x = dm_args_int(t->specs, t->n, args, s->name);
                        FUZZ_CHECK(x >= s->min && x <= s->max);
                        break;
                }
                case DM_ARG_NUMBER: {
                        double x = dm_args_number(args, s->name);
                        FUZZ_CHECK(x > (double)s->min && x <= (double)s->max);
                        break;
                }
                case DM_ARG_BOOL:
                        FUZZ_CHECK(json_object_is_type(v, json_type_boolean));
                        FUZZ_CHECK(dm_args_bool(t->specs, t->n, args, s->name) == json_object_get_boolean(v));
                        break;
                case DM_ARG_STRING_ARRAY: {
                        const char **strv = dm_args_strv(args, s->name);
                        size_t n = 0;
                        FUZZ_CHECK(strv);
                        for (; strv[n]; n++)
                                FUZZ_CHECK(strlen(strv[n]) ==
                                           (size_t)json_object_get_string_len(json_object_array_get_idx(v, n)));
                        FUZZ_CHECK(n == json_object_array_length(v) && (s->max <= 0 || (int64_t)n <= s->max));
                        free(strv);
                        break;
                }
                case DM_ARG_STRING_MAP: {
                        char **env = dm_args_env(args, s->name);
                        size_t n = 0;
                        FUZZ_CHECK(env);
                        for (; env[n]; n++) {
                                const char *eq = strchr(env[n], '=');
                                FUZZ_CHECK(eq && eq > env[n] && !memchr(env[n], '=', (size_t)(eq - env[n])));
                        }
                        FUZZ_CHECK(n == (size_t)json_object_object_length(v) && (s->max <= 0 || (int64_t)n <= s->max));
                        dm_args_strv_free(env);
                        break;
                }
                }
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct dm_error err = { 0 };
        const struct table *t;
        json_tokener *tok;
        json_object *args;

        if (size < 1)
                return 0;
        if (!n_tables)
                setup();
        t = &tables[data[0] % n_tables];
        /* As the server gets them: inside a message parsed with this depth. */
        tok = json_tokener_new_ex(64);
        FUZZ_CHECK(tok);
        args = json_tokener_parse_ex(tok, (const char *)data + 1, (int)(size - 1));
        json_tokener_free(tok);
        if (args && !json_object_is_type(args, json_type_object)) {
                /* tools/call refuses these before any tool sees them. */
                FUZZ_CHECK(dm_args_check(t->specs, t->n, args, &err) == -EINVAL);
        } else if (dm_args_check(t->specs, t->n, args, &err) == 0) {
                accepted(t, args);
        } else {
                FUZZ_CHECK(err.code < 0 && err.msg[0]);
        }
        json_object_put(args);
        return 0;
}
