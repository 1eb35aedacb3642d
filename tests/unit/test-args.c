/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>

#include "src/tools/args.h"
#include "tests/tap.h"

static const char *const colours[] = { "red", "green", NULL };
static const char *const colour_aliases[] = { "verte", NULL };

static const struct dm_arg_spec specs[] = {
        { .name = "command", .type = DM_ARG_STRING, .required = true, .max = 16, .description = "c" },
        { .name = "colour",
          .type = DM_ARG_STRING,
          .enum_values = colours,
          .enum_aliases = colour_aliases,
          .has_default = true,
          .def_str = "red",
          .description = "k" },
        { .name = "n", .type = DM_ARG_INT, .min = 1, .max = 10, .has_default = true, .def_int = 5, .description = "n" },
        { .name = "flag", .type = DM_ARG_BOOL, .has_default = true, .description = "f" },
        { .name = "list", .type = DM_ARG_STRING_ARRAY, .max = 2, .has_default = true, .description = "l" },
        { .name = "env", .type = DM_ARG_STRING_MAP, .max = 2, .has_default = true, .description = "e" },
        { .name = "usd", .type = DM_ARG_NUMBER, .min = 0, .max = 100, .description = "u" },
};
#define N (sizeof(specs) / sizeof(specs[0]))

static int check(const char *json, struct dm_error *err)
{
        json_object *o = json ? json_tokener_parse(json) : NULL;
        int r;

        dm_error_clear(err);
        r = dm_args_check(specs, N, o, err);
        json_object_put(o);
        return r;
}

int main(void)
{
        struct dm_error err = { 0 };
        char *schema = dm_args_schema(specs, N);
        json_object *s = json_tokener_parse(schema), *v;

        ok(s != NULL, "schema is JSON");
        ok(json_object_object_get_ex(s, "additionalProperties", &v) && !json_object_get_boolean(v),
           "additionalProperties false");
        ok(json_object_object_get_ex(s, "required", &v) && json_object_array_length(v) == 1, "one required");
        ok(strstr(schema, "\"enum\":[\"red\",\"green\"]") != NULL, "enum written out, aliases not listed");
        ok(strstr(schema, "\"default\":5") != NULL, "integer default written out");
        ok(strstr(schema, "\"minimum\":1") && strstr(schema, "\"maximum\":10"), "range written out");
        ok(strstr(schema, "\"usd\":{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":100") != NULL,
           "a number's range written out");
        json_object_put(s);
        free(schema);

        is_int(check("{\"command\":\"ls\"}", &err), 0, "minimal valid call");
        is_int(check("{}", &err), -EINVAL, "missing required");
        ok(strstr(err.msg, "missing required argument 'command'") != NULL, "message: %s", err.msg);
        is_int(check(NULL, &err), -EINVAL, "no arguments at all: missing required");
        is_int(check("{\"command\":\"\"}", &err), -EINVAL, "empty required string");
        is_int(check("{\"command\":\"ls\",\"bogus\":1}", &err), -EINVAL, "unknown argument");
        ok(strstr(err.msg, "unknown argument 'bogus'") && strstr(err.msg, "command, colour"),
           "message lists the names: %s", err.msg);
        is_int(check("{\"command\":5}", &err), -EINVAL, "wrong type");
        ok(strstr(err.msg, "'command' must be a string, not int") != NULL, "message: %s", err.msg);
        is_int(check("{\"command\":null}", &err), -EINVAL, "null refused");
        is_int(check("{\"command\":\"01234567890123456\"}", &err), -E2BIG, "string over max");
        is_int(check("{\"command\":\"a\\u0000b\"}", &err), -EINVAL, "NUL inside a string refused");
        is_int(check("{\"command\":\"x\",\"colour\":\"blue\"}", &err), -EINVAL, "enum value refused");
        ok(strstr(err.msg, "one of red, green") != NULL, "message lists values: %s", err.msg);
        is_int(check("{\"command\":\"x\",\"colour\":\"verte\"}", &err), 0, "alias accepted");
        is_int(check("{\"command\":\"x\",\"n\":0}", &err), -ERANGE, "int below range");
        is_int(check("{\"command\":\"x\",\"n\":11}", &err), -ERANGE, "int above range");
        is_int(check("{\"command\":\"x\",\"n\":\"5\"}", &err), -EINVAL, "int as string refused");
        is_int(check("{\"command\":\"x\",\"n\":5.0}", &err), 0, "5.0 is an integer");
        is_int(check("{\"command\":\"x\",\"n\":5.5}", &err), -EINVAL, "5.5 is not");
        /* Integral doubles past int64 were cast (undefined behaviour). */
        is_int(check("{\"command\":\"x\",\"n\":1e300}", &err), -ERANGE, "1e300 is out of range");
        ok(strstr(err.msg, "'n' must be between 1 and 10, not 1e+300") != NULL, "message: %s", err.msg);
        is_int(check("{\"command\":\"x\",\"n\":-9223372036854775809.0}", &err), -ERANGE, "below int64 too");
        is_int(check("{\"command\":\"x\",\"n\":9.2233720368547758e18}", &err), -ERANGE, "2^63 too");
        is_int(check("{\"command\":\"x\",\"flag\":\"true\"}", &err), -EINVAL, "bool as string refused");
        is_int(check("{\"command\":\"x\",\"list\":[\"a\",1]}", &err), -EINVAL, "array with a non-string");
        is_int(check("{\"command\":\"x\",\"list\":[\"a\",\"b\",\"c\"]}", &err), -E2BIG, "array over max items");
        is_int(check("{\"command\":\"x\",\"env\":{\"A\":\"1\"}}", &err), 0, "env ok");
        is_int(check("{\"command\":\"x\",\"env\":{\"1A\":\"1\"}}", &err), -EINVAL, "env name starting with a digit");
        is_int(check("{\"command\":\"x\",\"env\":{\"A=B\":\"1\"}}", &err), -EINVAL, "env name with '='");
        is_int(check("{\"command\":\"x\",\"env\":{\"A\":1}}", &err), -EINVAL, "env value not a string");
        {
                static const char *const refused[] = { "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_",
                                                       "GLIBC_TUNABLES" };
                char json[256];

                for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
                        snprintf(json, sizeof(json), "{\"command\":\"x\",\"env\":{\"A\":\"1\",\"%s\":\"v\"}}",
                                 refused[i]);
                        is_int(check(json, &err), -EPERM, "env '%s' is refused", refused[i]);
                        ok(strstr(err.msg, "'env' key '") && strstr(err.msg, refused[i]) &&
                                   strstr(err.msg, "is refused"),
                           "and the message names it: %s", err.msg);
                }
        }
        /* Names that only look alike are a command's own business. */
        is_int(check("{\"command\":\"x\",\"env\":{\"ld_preload\":\"1\",\"OLD_LD_X\":\"2\"}}", &err), 0,
               "lower-case ld_preload and a name with LD_ inside are accepted");
        is_int(check("{\"command\":\"x\",\"env\":{\"GLIBC_TUNABLES_X\":\"1\",\"LD\":\"2\"}}", &err), 0,
               "GLIBC_TUNABLES_X and LD are accepted");
        is_int(check("{\"command\":\"x\",\"env\":{\"A\":\"1\",\"B\":\"2\",\"C\":\"3\"}}", &err), -E2BIG,
               "env over max");
        is_int(check("[]", &err), -EINVAL, "arguments not an object");
        is_int(check("{\"command\":\"x\",\"usd\":2.5}", &err), 0, "a number");
        is_int(check("{\"command\":\"x\",\"usd\":100}", &err), 0, "an integer is a number, the maximum included");
        is_int(check("{\"command\":\"x\",\"usd\":0}", &err), -ERANGE, "the minimum excluded");
        ok(strstr(err.msg, "'usd' must be more than 0 and at most 100, not 0") != NULL, "message: %s", err.msg);
        is_int(check("{\"command\":\"x\",\"usd\":100.01}", &err), -ERANGE, "above the maximum");
        is_int(check("{\"command\":\"x\",\"usd\":\"2\"}", &err), -EINVAL, "a number as a string refused");
        {
                json_object *u = json_tokener_parse("{\"usd\":0.25}");

                ok(dm_args_number(u, "usd") == 0.25 && dm_args_number(u, "none") == 0, "the number, 0 when not given");
                json_object_put(u);
        }

        json_object *o = json_tokener_parse("{\"command\":\"x\",\"env\":{\"A\":\"1\"},\"list\":[\"p\"]}");
        is_str(dm_args_str(specs, N, o, "colour"), "red", "string default");
        is_int(dm_args_int(specs, N, o, "n"), 5, "int default");
        ok(!dm_args_bool(specs, N, o, "flag"), "bool default");
        char **env = dm_args_env(o, "env");
        is_str(env[0], "A=1", "env as KEY=VALUE");
        ok(env[1] == NULL, "env NULL-terminated");
        dm_args_strv_free(env);
        const char **list = dm_args_strv(o, "list");
        is_str(list[0], "p", "string array");
        free(list);
        json_object_put(o);
        return done_testing();
}
