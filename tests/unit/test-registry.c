/* SPDX-License-Identifier: MIT */
/* The tool registry under concurrent tools/list: every connection thread of
 * the HTTP transport describes the tools and drops its answer on its own.
 * json-c counts references without atomics, so what describe hands out must
 * be the caller's alone; a shared reference lost updates and freed the
 * cached description under other threads (serve --http died with SIGSEGV
 * in libjson-c). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "src/mcp/registry.h"
#include "tests/tap.h"

#define THREADS 8
#define ROUNDS 20000

static const struct dm_tool tools[] = {
        { .name = "t_one",
          .title = "One",
          .description = "the first",
          .input_schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}",
          .output_schema = "{\"type\":\"object\"}",
          .read_only = true },
        { .name = "t_two", .description = "the second", .input_schema = "{\"type\":\"object\"}" },
};

static void *hammer(void *arg)
{
        int *good = arg;

        for (int i = 0; i < ROUNDS; i++) {
                json_object *d = dm_registry_describe(dm_registry_at((size_t)i % 2));
                const char *text = json_object_to_json_string_ext(d, JSON_C_TO_STRING_PLAIN);
                *good += text && strstr(text, "\"inputSchema\":{\"type\":\"object\"") != NULL;
                json_object_put(d);
        }
        return NULL;
}

int main(void)
{
        pthread_t th[THREADS];
        int good[THREADS] = { 0 }, total = 0;
        json_object *a, *b;

        dm_registry_add(tools, 2);
        a = dm_registry_describe(dm_registry_at(0));
        b = dm_registry_describe(dm_registry_at(0));
        ok(a && b && a != b, "each describe is an object of the caller's own");
        ok(json_object_equal(a, b), "... with the same content");
        json_object_object_add(a, "name", json_object_new_string("changed"));
        json_object_put(a);
        json_object_put(b);
        b = dm_registry_describe(dm_registry_at(0));
        ok(strcmp(json_object_get_string(json_object_object_get(b, "name")), "t_one") == 0,
           "what a caller does with its copy does not reach the registry");
        json_object_put(b);

        for (int i = 0; i < THREADS; i++)
                pthread_create(&th[i], NULL, hammer, &good[i]);
        for (int i = 0; i < THREADS; i++) {
                pthread_join(th[i], NULL);
                total += good[i];
        }
        is_int(total, THREADS * ROUNDS, "%d threads describing and dropping at once: every description whole", THREADS);
        b = dm_registry_describe(dm_registry_at(1));
        ok(b && strcmp(json_object_get_string(json_object_object_get(b, "name")), "t_two") == 0,
           "the registry is intact afterwards");
        json_object_put(b);

        /* Tools made at run time: copied, and visible to nested callers only. */
        {
                char name[] = "host__fs__read", desc[] = "reads";
                struct dm_tool t = { .name = name,
                                     .description = desc,
                                     .input_schema = "{\"type\":\"object\"}",
                                     .read_only = true,
                                     .nested_only = true };
                const struct dm_tool *found;

                ok(dm_registry_add_copy(&t) == 0, "a tool made at run time is added");
                memset(name, 'x', sizeof(name) - 1);
                found = dm_registry_find("host__fs__read");
                ok(found && found->name != t.name && strcmp(found->description, "reads") == 0,
                   "its strings are the registry's own copies");
                t.name = "host__fs__read";
                ok(dm_registry_add_copy(&t) == -EEXIST, "a name taken is refused");
                t.name = "t_one";
                ok(dm_registry_add_copy(&t) == -EEXIST, "... a static tool's name too");
                ok(!dm_registry_visible(found, "local") && !dm_registry_visible(found, "alice"),
                   "a nested-only tool is not visible to the host's callers");
                ok(dm_registry_visible(found, "local/sbx-1") && dm_registry_visible(found, "alice/sbx-1/sbx-2"),
                   "it is to callers inside nested sandboxes");
                ok(dm_registry_visible(dm_registry_find("t_one"), "local") &&
                           dm_registry_visible(dm_registry_find("t_one"), "local/sbx-1"),
                   "other tools are visible to all");
                ok(!dm_registry_visible(NULL, "local/sbx-1"), "no tool is visible to nobody");
        }
        dm_registry_clear();
        return done_testing();
}
