/* SPDX-License-Identifier: MIT */
/* The tool registry under concurrent tools/list: every connection thread of
 * the HTTP transport describes the tools and drops its answer on its own.
 * json-c counts references without atomics, so what describe hands out must
 * be the caller's alone; a shared reference lost updates and freed the
 * cached description under other threads (serve --http died with SIGSEGV
 * in libjson-c).
 * And two registries in one process share nothing: each MCP server lists
 * and calls its own tools only, and freeing one leaves the other whole. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "src/mcp/jsonrpc.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
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

static struct dm_registry *reg;

static void *hammer(void *arg)
{
        int *good = arg;

        for (int i = 0; i < ROUNDS; i++) {
                json_object *d = dm_registry_describe(reg, dm_registry_at(reg, (size_t)i % 2));
                const char *text = json_object_to_json_string_ext(d, JSON_C_TO_STRING_PLAIN);
                size_t len = 0;
                const char *cached = dm_registry_describe_text(reg, dm_registry_at(reg, (size_t)i % 2), &len);

                /* The printed text tools/list joins is the same entry, the
                 * one text for every thread. */
                *good += text && strstr(text, "\"inputSchema\":{\"type\":\"object\"") != NULL && cached &&
                         len == strlen(text) && memcmp(cached, text, len) == 0;
                json_object_put(d);
        }
        return NULL;
}

/* ---- two registries, two servers, one process ---- */

struct peer {
        char last[8192]; /* the last answer, as JSON text */
};

static int on_send(void *transport, json_object *msg)
{
        struct peer *p = transport;

        snprintf(p->last, sizeof(p->last), "%s", json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN));
        return 0;
}

static void say(struct dm_mcp_session *s, const char *line)
{
        dm_mcp_session_handle(s, line, strlen(line));
}

static json_object *echo(struct dm_call *call, json_object *args)
{
        (void)args;
        return dm_tool_result_error("%s", dm_call_tool(call)->name);
}

/* ---- pages: tools/list prints the registry's cached texts ---- */

static json_object *page(struct dm_mcp_session *s, char **last, const char *cursor)
{
        char line[256];
        json_object *msg, *result = NULL;

        snprintf(line, sizeof(line), "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/list\"%s%s%s}",
                 cursor ? ",\"params\":{\"cursor\":\"" : "", cursor ? cursor : "", cursor ? "\"}" : "");
        dm_mcp_session_handle(s, line, strlen(line));
        msg = *last ? json_tokener_parse(*last) : NULL;
        if (msg && json_object_object_get_ex(msg, "result", &result))
                json_object_get(result);
        json_object_put(msg);
        return result;
}

static int on_send_big(void *transport, json_object *msg)
{
        char **last = transport;
        size_t len;

        free(*last);
        *last = dm_rpc_serialize(msg, &len);
        return 0;
}

/* 25 tools, the 3rd nested-only: a host caller's pages hold 20 and 4, each
 * entry what describe gives, the cursor past the hidden one. */
static void pages(void)
{
        static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                                   "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
                                   "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}";
        struct dm_registry *r = dm_registry_new();
        struct dm_mcp_server *srv;
        struct dm_mcp_session *s;
        char *last = NULL;
        json_object *first, *second, *v = NULL, *d, *list;
        int same = 0, total = 0;

        for (int i = 0; i < 25; i++) {
                char name[16];
                struct dm_tool t = { .name = name,
                                     .description = "a tool with a \"quoted\" / slashed description",
                                     .input_schema =
                                             "{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\"}}}",
                                     .output_schema = i % 2 ? "{\"type\":\"object\"}" : NULL,
                                     .nested_only = i == 2 };
                snprintf(name, sizeof(name), "t_%02d", i);
                dm_registry_add_copy(r, &t);
        }
        srv = dm_mcp_server_new(NULL, r, "/nonexistent");
        s = dm_mcp_session_new(srv, on_send_big, &last);
        dm_mcp_session_handle(s, init, strlen(init));
        first = page(s, &last, NULL);
        second = json_object_object_get_ex(first, "nextCursor", &v) ? page(s, &last, json_object_get_string(v)) : NULL;
        is_str(v ? json_object_get_string(v) : NULL, "t:21", "page 1 ends past 20 visible tools: nextCursor t:21");
        ok(second && !json_object_object_get_ex(second, "nextCursor", NULL), "page 2 is the last");
        for (json_object *pg = first; pg; pg = pg == first ? second : NULL)
                if (json_object_object_get_ex(pg, "tools", &list))
                        for (size_t i = 0; i < json_object_array_length(list); i++) {
                                json_object *e = json_object_array_get_idx(list, i);
                                d = dm_registry_describe(
                                        r,
                                        dm_registry_find(r, json_object_get_string(json_object_object_get(e, "name"))));
                                same += json_object_equal(e, d);
                                total++;
                                json_object_put(d);
                        }
        is_int(total, 24, "the pages list the 24 tools a host caller sees");
        is_int(same, 24, "... each entry what describe gives");
        ok(json_object_object_get_ex(first, "tools", &list) &&
                   strcmp(json_object_get_string(json_object_object_get(json_object_array_get_idx(list, 2), "name")),
                          "t_03") == 0,
           "the nested-only t_02 is left out: t_03 follows t_01");
        json_object_put(first);
        json_object_put(second);
        free(last);
        dm_mcp_session_free(s);
        dm_mcp_server_free(srv);
        dm_registry_free(r);
}

/* The names tools/list gives s, comma-separated, into out. */
static void list_names(struct dm_mcp_session *s, struct peer *p, char *out, size_t size)
{
        json_object *msg, *result, *list;
        size_t len = 0;

        out[0] = '\0';
        say(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}");
        msg = json_tokener_parse(p->last);
        if (msg && json_object_object_get_ex(msg, "result", &result) &&
            json_object_object_get_ex(result, "tools", &list))
                for (size_t i = 0; i < json_object_array_length(list); i++)
                        len += (size_t)snprintf(out + len, len < size ? size - len : 0, "%s%s", i ? "," : "",
                                                json_object_get_string(json_object_object_get(
                                                        json_object_array_get_idx(list, i), "name")));
        json_object_put(msg);
}

static void two_registries(void)
{
        static const char init[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
                                   "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
                                   "\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}";
        const struct dm_tool a_tools[] = {
                { .name = "a_only", .description = "A's", .input_schema = "{\"type\":\"object\"}", .handler = echo },
        };
        struct dm_registry *a = dm_registry_new(), *b = dm_registry_new();
        struct dm_mcp_server *sa, *sb;
        struct dm_mcp_session *ca, *cb;
        struct peer pa = { 0 }, pb = { 0 };
        char names[1024];

        /* A borrows a table that goes out of scope before A is used (entries
         * are copied), and owns a description built for it; B has a run-time
         * copy and a table of its own. */
        dm_registry_add(a, a_tools, 1);
        {
                struct dm_tool t = { .name = "a_built", .input_schema = "{\"type\":\"object\"}", .handler = echo };
                t.description = dm_registry_own(a, strdup("built for A"));
                dm_registry_add(a, &t, 1);
        }
        {
                char name[] = "b_copy";
                struct dm_tool t = {
                        .name = name, .description = "B's", .input_schema = "{\"type\":\"object\"}", .handler = echo
                };
                ok(dm_registry_add_copy(b, &t) == 0, "B takes a run-time copy");
        }
        dm_registry_add(b, &tools[1], 1);
        dm_registry_set_instructions(a, "serving A");
        dm_registry_set_instructions(b, "serving B");
        ok(dm_registry_find(a, "b_copy") == NULL && dm_registry_find(b, "a_only") == NULL,
           "a registry finds only its own tools");

        sa = dm_mcp_server_new(NULL, a, "/nonexistent");
        sb = dm_mcp_server_new(NULL, b, "/nonexistent");
        ca = dm_mcp_session_new(sa, on_send, &pa);
        cb = dm_mcp_session_new(sb, on_send, &pb);
        say(ca, init);
        ok(strstr(pa.last, "\"instructions\":\"serving A\"") != NULL, "initialize gives A's instructions on A");
        say(cb, init);
        ok(strstr(pb.last, "\"instructions\":\"serving B\"") != NULL, "... and B's on B");
        list_names(ca, &pa, names, sizeof(names));
        is_str(names, "a_only,a_built", "server A lists A's tools only");
        ok(strstr(pa.last, "\"description\":\"built for A\"") != NULL, "... with the description A owns");
        list_names(cb, &pb, names, sizeof(names));
        is_str(names, "b_copy,t_two", "server B lists B's tools only");
        say(cb, "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"a_only\"}}");
        ok(strstr(pb.last, "unknown tool 'a_only'") != NULL, "B does not know A's tool");

        dm_mcp_session_free(ca);
        dm_mcp_server_free(sa);
        dm_registry_free(a);
        list_names(cb, &pb, names, sizeof(names));
        is_str(names, "b_copy,t_two", "after A is freed, B lists its tools as before");
        ok(strstr(pb.last, "\"description\":\"B's\"") != NULL, "... its copies whole");
        say(cb, init);
        ok(strstr(pb.last, "\"instructions\":\"serving B\"") != NULL, "... and its instructions");
        dm_mcp_session_free(cb);
        dm_mcp_server_free(sb);
        dm_registry_free(b);
        dm_registry_free(NULL);
}

int main(void)
{
        pthread_t th[THREADS];
        int good[THREADS] = { 0 }, total = 0;
        json_object *a, *b;

        reg = dm_registry_new();
        dm_registry_add(reg, tools, 2);
        a = dm_registry_describe(reg, dm_registry_at(reg, 0));
        b = dm_registry_describe(reg, dm_registry_at(reg, 0));
        ok(a && b && a != b, "each describe is an object of the caller's own");
        ok(json_object_equal(a, b), "... with the same content");
        json_object_object_add(a, "name", json_object_new_string("changed"));
        json_object_put(a);
        json_object_put(b);
        b = dm_registry_describe(reg, dm_registry_at(reg, 0));
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
        b = dm_registry_describe(reg, dm_registry_at(reg, 1));
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

                ok(dm_registry_add_copy(reg, &t) == 0, "a tool made at run time is added");
                memset(name, 'x', sizeof(name) - 1);
                found = dm_registry_find(reg, "host__fs__read");
                ok(found && found->name != t.name && strcmp(found->description, "reads") == 0,
                   "its strings are the registry's own copies");
                t.name = "host__fs__read";
                ok(dm_registry_add_copy(reg, &t) == -EEXIST, "a name taken is refused");
                t.name = "t_one";
                ok(dm_registry_add_copy(reg, &t) == -EEXIST, "... a static tool's name too");
                ok(!dm_registry_visible(found, "local") && !dm_registry_visible(found, "alice"),
                   "a nested-only tool is not visible to the host's callers");
                ok(dm_registry_visible(found, "local/sbx-1") && dm_registry_visible(found, "alice/sbx-1/sbx-2"),
                   "it is to callers inside nested sandboxes");
                ok(dm_registry_visible(dm_registry_find(reg, "t_one"), "local") &&
                           dm_registry_visible(dm_registry_find(reg, "t_one"), "local/sbx-1"),
                   "other tools are visible to all");
                ok(!dm_registry_visible(NULL, "local/sbx-1"), "no tool is visible to nobody");
        }
        dm_registry_free(reg);
        two_registries();
        pages();
        return done_testing();
}
