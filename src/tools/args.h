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

#include "src/basic/error.h"
#include "src/core/egress.h"

/* Parameters whose truth depends on the server (dm_args_tailor). */
enum dm_arg_role {
        DM_ARG_ROLE_PLAIN,
        DM_ARG_ROLE_EGRESS,    /* none / package-managers / open */
        DM_ARG_ROLE_ALLOW,     /* caller-supplied egress entries */
        DM_ARG_ROLE_HOST_PATH, /* host paths checked against the allowed roots */
        DM_ARG_ROLE_IMAGE,     /* an image of this engine's store */
};

enum dm_arg_type {
        DM_ARG_STRING,
        DM_ARG_INT,
        DM_ARG_NUMBER, /* a finite JSON number with min < x <= max (min exclusive) */
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
        int64_t min, max; /* ints: range; numbers: (min, max]; strings: max bytes; arrays/maps: max items */
        int64_t def_int;
        const char *def_str;
        bool def_bool;
        bool has_default;
        enum dm_arg_role role;
        bool hidden; /* accepted (so its refusal can say why), not listed in the schema */
};

struct dm_vendor_env;

/* What a server permits, decided once at start by the functions that
 * decide behaviour (dm_egress_default, dm_policy_caller_egress_allowed,
 * DEMESNE_ALLOWED_PATHS): the schemas say it instead of a copy of the rule.
 * A value its reader owns (dm_tools_configure), read only while tables are
 * tailored from it: nothing keeps a pointer into it. NULL strings count as
 * "none" and "". */
struct dm_args_facts {
        const char *egress_default; /* dm_egress_default(ctx) */
        /* The modes the backend accepts with this configuration
         * (dm_egress_offer), or NULL: every mode when egress_default is not
         * none, else none alone. */
        const struct dm_egress_offer *offer;
        bool caller_egress;         /* 'open' and 'allow' permitted */
        const char *allowed_paths;  /* colon-separated roots, "" = none */
        const char *images;         /* which images are built here, which not (a sentence), or NULL */
        const char *login_files[2]; /* the Claude and Codex login files named by the server's settings
                                       (DEMESNE_CLAUDE_CREDENTIALS, DEMESNE_CODEX_AUTH); NULL: the default */
        /* The vendors' keys the settings read (for dm_vendor_unavailable); NULL: none. */
        const struct dm_vendor_env *vendor_env;
        /* Why agent runs are refused on this server whatever the
         * credentials (no network for the vendor proxy), or NULL. */
        const char *agents_why;
};

/* A tool's table as one server checks calls against it: a copy of the
 * tool's static template, with n entries. */
struct dm_args_table {
        size_t n;
        struct dm_arg_spec specs[];
};
/* A copy of tmpl with its server-dependent parameters (egress, allow,
 * files, directories, src, image) rewritten from f. follow_default: the
 * tool's egress default is f's (sandbox_script, sandbox_create), else the
 * template's. One allocation holding every string it points to beyond the
 * template's static ones (free() frees it all: a family gives it to its
 * registry, dm_registry_own); f may go right after. NULL when out of
 * memory. */
struct dm_args_table *dm_args_tailor(const struct dm_args_facts *f, const struct dm_arg_spec *tmpl, size_t n,
                                     bool follow_default);

/* The inputSchema as JSON text, malloc'd. */
char *dm_args_schema(const struct dm_arg_spec *specs, size_t n);

/* Checks args (may be NULL = {}) against the table: unknown names, missing
 * required ones, types, ranges, enums, env names (LD_* and GLIBC_TUNABLES
 * refused, -EPERM). Messages name the
 * parameter and say what to send instead. */
int dm_args_check(const struct dm_arg_spec *specs, size_t n, json_object *args, struct dm_error *err);

/* Getters for checked args; they fall back to the table's default. */
const char *dm_args_str(const struct dm_arg_spec *specs, size_t n, json_object *args, const char *name);
int64_t dm_args_int(const struct dm_arg_spec *specs, size_t n, json_object *args, const char *name);
bool dm_args_bool(const struct dm_arg_spec *specs, size_t n, json_object *args, const char *name);
/* A number argument (DM_ARG_NUMBER, checked); 0 when not given. */
double dm_args_number(json_object *args, const char *name);
/* A NULL-terminated array of borrowed strings (the array itself malloc'd);
 * for maps, "KEY=VALUE" strings that are malloc'd too (free with dm_args_strv_free). */
const char **dm_args_strv(json_object *args, const char *name);
char **dm_args_env(json_object *args, const char *name);
void dm_args_strv_free(char **v);

#endif
