/* SPDX-License-Identifier: MIT */
/* The check of a host tool's arguments against its inputSchema
 * (src/mcp/client-schema.c): types, required members, members the tool
 * does not take, nested objects, arrays, enums; each refusal names the
 * member. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "src/mcp/client.h"
#include "tests/tap.h"

static const char *schema_text =
        "{\"type\":\"object\",\"additionalProperties\":false,\"required\":[\"path\"],"
        "\"properties\":{"
        "\"path\":{\"type\":\"string\"},"
        "\"head\":{\"type\":\"integer\"},"
        "\"ratio\":{\"type\":\"number\"},"
        "\"deep\":{\"type\":[\"boolean\",\"null\"]},"
        "\"mode\":{\"type\":\"string\",\"enum\":[\"text\",\"base64\"]},"
        "\"opts\":{\"type\":\"object\",\"required\":[\"k\"],\"additionalProperties\":false,"
        "          "
        "\"properties\":{\"k\":{\"type\":\"string\"},\"n\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}},"
        "\"edits\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"required\":[\"old\"],"
        "          \"properties\":{\"old\":{\"type\":\"string\"}}}},"
        "\"free\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"}}"
        "}}";

static json_object *schema;

/* args: JSON text; want: NULL for a pass, else a part of the message. */
static void check(const char *args, const char *want, const char *what)
{
        json_object *a = args ? json_tokener_parse(args) : NULL;
        struct dm_error err = { 0 };
        int r = dm_mcpclient_check_args(schema, a, &err);

        if (!want)
                ok(r == 0, "%s: passes (%s)", what, err.msg);
        else
                ok(r == -EINVAL && strstr(err.msg, want), "%s: '%s'", what, err.msg);
        json_object_put(a);
}

int main(void)
{
        schema = json_tokener_parse(schema_text);
        if (!schema)
                return 1;
        check("{\"path\":\"/a\"}", NULL, "the required member alone");
        check("{\"path\":\"/a\",\"head\":3,\"ratio\":0.5,\"deep\":null,\"mode\":\"text\","
              "\"opts\":{\"k\":\"v\",\"n\":[1,2]},\"edits\":[{\"old\":\"x\"}],\"free\":{\"a\":\"b\"}}",
              NULL, "every member well typed");
        check("{\"path\":\"/a\",\"head\":3.0,\"ratio\":2}", NULL, "3.0 is an integer and 2 a number");
        check("{}", "argument 'path': is required", "a required member missing");
        check(NULL, "argument 'path': is required", "no arguments at all");
        check("[]", "arguments: must be of type object", "arguments that are no object");
        check("{\"path\":7}", "argument 'path': must be of type string", "a number for a string");
        check("{\"path\":\"/a\",\"head\":1.5}", "argument 'head': must be of type integer", "1.5 for an integer");
        check("{\"path\":\"/a\",\"head\":\"3\"}", "argument 'head': must be of type integer",
              "a string for an integer");
        check("{\"path\":\"/a\",\"deep\":1}", "argument 'deep': must be of one of the types boolean, null",
              "a type list");
        check("{\"path\":\"/a\",\"mode\":\"hex\"}", "argument 'mode': must be one of \"text\", \"base64\"",
              "a value outside the enum");
        check("{\"path\":\"/a\",\"extra\":1}", "argument 'extra': is not a member this tool takes",
              "an extra member where additionalProperties is false");
        check("{\"path\":\"/a\",\"opts\":{}}", "argument 'opts.k': is required", "a nested required member");
        check("{\"path\":\"/a\",\"opts\":{\"k\":\"v\",\"z\":0}}", "argument 'opts.z': is not a member",
              "a nested extra member");
        check("{\"path\":\"/a\",\"opts\":{\"k\":\"v\",\"n\":[1,\"2\"]}}",
              "argument 'opts.n[1]': must be of type integer", "an array item of the wrong type");
        check("{\"path\":\"/a\",\"edits\":[{\"old\":\"x\"},{}]}", "argument 'edits[1].old': is required",
              "an object in an array missing its member");
        check("{\"path\":\"/a\",\"free\":{\"a\":1}}", "argument 'free.a': must be of type string",
              "additionalProperties as a schema");
        check("{\"path\":\"/a\",\"edits\":{}}", "argument 'edits': must be of type array", "an object for an array");
        check("{\"path\":\"/a\",\"extra\\n\\u0001\":1}",
              "argument 'extra?"
              "?'",
              "a member name with control characters");
        {
                /* Open schemas: no additionalProperties, no type. */
                json_object *open = json_tokener_parse("{\"type\":\"object\",\"properties\":{\"a\":{}}}");
                json_object *args = json_tokener_parse("{\"a\":[1,{}],\"b\":2}");
                struct dm_error err = { 0 };
                ok(dm_mcpclient_check_args(open, args, &err) == 0, "an open schema takes any member (%s)", err.msg);
                json_object_put(open);
                json_object_put(args);
        }
        {
                /* Built, not parsed (the parser stops at 32 levels): 40
                 * levels of schema and of arguments. */
                json_object *deep = json_object_new_object(), *args = json_object_new_int(1), *s = deep;
                struct dm_error err = { 0 };
                int r;
                for (int i = 0; i < 40; i++) {
                        json_object *props = json_object_new_object(), *next = json_object_new_object(),
                                    *wrap = json_object_new_object();
                        json_object_object_add(s, "type", json_object_new_string("object"));
                        json_object_object_add(s, "properties", props);
                        json_object_object_add(props, "a", next);
                        s = next;
                        json_object_object_add(wrap, "a", args);
                        args = wrap;
                }
                r = dm_mcpclient_check_args(deep, args, &err);
                ok(r == -EINVAL && strstr(err.msg, "nested too deeply") && strstr(err.msg, "a.a.a"),
                   "arguments nested past 32 levels are refused, not recursed into: '%s'", err.msg);
                json_object_put(deep);
                json_object_put(args);
        }
        json_object_put(schema);
        return done_testing();
}
