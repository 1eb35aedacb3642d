/* SPDX-License-Identifier: MIT */
#ifndef DM_TOOLS_ARGS_H
#define DM_TOOLS_ARGS_H

/* Tool arguments: one table per tool gives each parameter's type, limits,
 * default and description. The same table produces the tool's inputSchema
 * (JSON Schema 2020-12, additionalProperties false) and validates calls, so
 * the schema a client sees and the checks the server makes cannot drift. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/util/error.h"

enum dm_arg_type {
        DM_ARG_STRING,
        DM_ARG_INT,
        DM_ARG_BOOL,
        DM_ARG_STRING_ARRAY,
        DM_ARG_STRING_MAP, /* object whose values are strings; keys are env names */
};

struct dm_arg_spec {
        const char *name;
        enum dm_arg_type type;
        bool required;
        const char *description;
        const char *const *enum_values;  /* strings: allowed values, NULL-terminated */
        const char *const *enum_aliases; /* accepted too, not listed in the schema */
        int64_t min, max;                /* ints: range; strings: max bytes; arrays/maps: max items */
        int64_t def_int;
        const char *def_str;
        bool def_bool;
        bool has_default;
};

/* The inputSchema as JSON text, malloc'd. */
char *dm_args_schema(const struct dm_arg_spec *specs, size_t n);

/* Checks args (may be NULL = {}) against the table: unknown names, missing
 * required ones, types, ranges, enums, env names. Messages name the
 * parameter and say what to send instead. */
int dm_args_check(const struct dm_arg_spec *specs, size_t n, json_object *args, struct dm_error *err);

/* Getters for checked args; they fall back to the table's default. */
const char *dm_args_str(const struct dm_arg_spec *specs, size_t n, json_object *args, const char *name);
int64_t dm_args_int(const struct dm_arg_spec *specs, size_t n, json_object *args, const char *name);
bool dm_args_bool(const struct dm_arg_spec *specs, size_t n, json_object *args, const char *name);
/* A NULL-terminated array of borrowed strings (the array itself malloc'd);
 * for maps, "KEY=VALUE" strings that are malloc'd too (free with dm_args_strv_free). */
const char **dm_args_strv(json_object *args, const char *name);
char **dm_args_env(json_object *args, const char *name);
void dm_args_strv_free(char **v);

#endif
