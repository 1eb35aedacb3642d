/* SPDX-License-Identifier: MIT */
/* tools/list and the initialize instructions tell the truth about the
 * server that answers them: the egress default is dm_egress_default's,
 * 'open' and 'allow' appear only where DEMESNE_ALLOW_CALLER_EGRESS=1 lets a
 * call use them, host-path parameters name the allowed roots, and the
 * instructions cover every tool family. What is advertised works; what is
 * not is refused with an error naming the variable. Run as root and as a
 * normal user: the expectations come from the same decision functions. */
#include "config.h"

#include <json-c/json.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "src/core/context.h"
#include "src/core/server.h"
#include "src/core/egress.h"
#include "tests/integration/common.h"
#include "tests/integration/stdio-client.h"
#include "tests/tap.h"

static json_object *tool_list;

static json_object *find_tool(const char *name)
{
        json_object *tools = path(tool_list, "result", "tools", NULL);

        for (size_t i = 0; tools && i < json_object_array_length(tools); i++) {
                json_object *t = json_object_array_get_idx(tools, i);
                if (!strcmp(str_at(t, "name"), name))
                        return t;
        }
        return NULL;
}

static json_object *param(const char *tool, const char *name)
{
        json_object *t = find_tool(tool), *props = t ? path(t, "inputSchema", "properties", NULL) : NULL, *p = NULL;

        if (props)
                json_object_object_get_ex(props, name, &p);
        return p;
}

static bool enum_has(json_object *p, const char *v)
{
        json_object *e = path(p, "enum", NULL, NULL);

        for (size_t i = 0; e && i < json_object_array_length(e); i++)
                if (!strcmp(json_object_get_string(json_object_array_get_idx(e, i)), v))
                        return true;
        return false;
}

static struct child *start(const char *const *env, char **instructions)
{
        struct child *c = calloc(1, sizeof(*c));
        json_object *m;

        if (!c || spawn(c, env) < 0) {
                printf("Bail out! cannot start $DEMESNE serve\n");
                exit(1);
        }
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                     "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}");
        m = recv_response(c, 1, 30000, NULL);
        *instructions = strdup(str_at(path(m, "result", NULL, NULL), "instructions"));
        json_object_put(m);
        send_line(c, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
        send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}");
        json_object_put(tool_list);
        tool_list = recv_response(c, 2, 30000, NULL);
        return c;
}

static json_object *call(struct child *c, int id, const char *tool, const char *args)
{
        send_line(c, "");
        {
                size_t n = strlen(args) + 256;
                char *line = malloc(n);
                snprintf(line, n,
                         "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                         "\"arguments\":%s}}",
                         id, tool, args);
                send_line(c, line);
                free(line);
        }
        return recv_response(c, id, 120000, NULL);
}

int main(void)
{
        struct dm_context ctx;
        struct dm_error err = { 0 };
        const char *want_default;
        bool network;
        char *ins = NULL, roots[512], root_env[600], args[PATH_MAX + 256];
        json_object *p, *m;
        struct child *c;

        test_env_setup("schemas");
        unsetenv("DEMESNE_ALLOW_CALLER_EGRESS");
        unsetenv("DEMESNE_ALLOWED_PATHS");
        /* What the server will decide, from the function that decides it. */
        if (dm_server_init(&ctx, &err) < 0) {
                printf("Bail out! %s\n", err.msg);
                return 1;
        }
        want_default = dm_egress_default(&ctx);
        network = strcmp(want_default, "none") != 0;
        diag("dm_egress_default here: %s", want_default);

        /* 1. Operator defaults plus one allowed root. */
        snprintf(roots, sizeof(roots), "%s/in", test_root);
        mkdir(roots, 0755);
        snprintf(root_env, sizeof(root_env), "DEMESNE_ALLOWED_PATHS=%s", roots);
        const char *env1[] = { root_env, NULL };
        c = start(env1, &ins);
        ok(tool_list != NULL, "tools/list answered");
        p = param("sandbox_script", "egress");
        is_str(str_at(p, "default"), want_default, "sandbox_script egress default is dm_egress_default's");
        ok(strstr(str_at(p, "description"), want_default) != NULL, "and its description names it");
        is_str(str_at(param("sandbox_create", "egress"), "default"), want_default, "sandbox_create egress default too");
        ok(!enum_has(p, "open"), "'open' not advertised without DEMESNE_ALLOW_CALLER_EGRESS");
        ok(enum_has(p, "package-managers") == network, "package-managers advertised exactly when networked");
        ok(param("sandbox_script", "allow") == NULL, "'allow' not advertised");
        ok(param("sandbox_create", "allow") == NULL, "nor on sandbox_create");
        ok(strstr(str_at(param("sandbox_script", "files"), "description"), roots) != NULL, "files names the root");
        ok(strstr(str_at(param("sandbox_create", "directories"), "description"), roots) != NULL,
           "directories names the root");
        ok(strstr(str_at(param("sandbox_upload", "src"), "description"), roots) != NULL, "upload src names the root");
        {
                const char *d = str_at(param("sandbox_script", "image"), "description"),
                           *b = strstr(d, "Built on this server: ");
                ok(b && strstr(b, "base") && (!strstr(d, "Not built") || strstr(d, "Not built") > strstr(b, "base")),
                   "image says base is built in this engine's store");
        }
        ok(strstr(str_at(param("sandbox_download", "src"), "description"), roots) == NULL,
           "download src (a sandbox path) does not");
        if (!network)
                ok(strstr(str_at(find_tool("sandbox_agent"), "description"), "Unavailable on this server") != NULL,
                   "agent tools say why they cannot run without a network");
        static const char *const families[] = {
                "sandbox_script",   "sandbox_create",  "sandbox_exec",   "sandbox_upload",
                "sandbox_download", "sandbox_destroy", "sandbox_list",   "sandbox_status",
                "sandbox_wait",     "sandbox_cancel",  "sandbox_agent",  "sandbox_research",
                "background: true", "image",           "resources/read", NULL
        };
        for (size_t i = 0; families[i]; i++)
                ok(ins && strstr(ins, families[i]) != NULL, "instructions mention %s", families[i]);
        ok(ins && strstr(ins, getenv("DEMESNE_OUTPUT_ROOT")) != NULL, "instructions name the output root");

        /* The advertised default works; what is not advertised is refused clearly. */
        m = call(c, 10, "sandbox_script", "{\"command\":\"echo ok\",\"image\":\"base\"}");
        ok(!result_is_error(m) && int_at(structured(m), "exit_code") == 0, "a call with the advertised default runs");
        if (result_is_error(m))
                diag("%s", json_object_to_json_string(m));
        {
                /* Its stdout.log, linked from the result, read back over
                 * stdio as the local principal. */
                json_object *content = path(m, "result", "content", NULL), *link = NULL, *r;
                char req[1200];

                for (size_t i = 0; content && i < json_object_array_length(content); i++) {
                        json_object *item = json_object_array_get_idx(content, i);
                        if (strcmp(str_at(item, "type"), "resource_link") == 0 &&
                            strcmp(str_at(item, "name"), "stdout.log") == 0)
                                link = item;
                }
                ok(link != NULL, "the result links the run's stdout.log (resource_link)");
                snprintf(req, sizeof(req),
                         "{\"jsonrpc\":\"2.0\",\"id\":40,\"method\":\"resources/read\",\"params\":{\"uri\":\"%s\"}}",
                         link ? str_at(link, "uri") : "demesne://output/none/stdout.log");
                send_line(c, req);
                r = recv_response(c, 40, 30000, NULL);
                json_object *first = json_object_array_get_idx(path(r, "result", "contents", NULL), 0);
                ok(first && strcmp(str_at(first, "text"), "ok\n") == 0, "resources/read over stdio gives it back");
                json_object_put(r);
                send_line(c, "{\"jsonrpc\":\"2.0\",\"id\":41,\"method\":\"resources/read\",\"params\":{\"uri\":"
                             "\"demesne://output/run-none/x.txt\"}}");
                r = recv_response(c, 41, 30000, NULL);
                is_int(int_at(path(r, "error", NULL, NULL), "code"), -32002,
                       "a file no call made: -32002 on a legacy session (resource not found)");
                json_object_put(r);
        }
        json_object_put(m);
        m = call(c, 11, "sandbox_script", "{\"command\":\"true\",\"image\":\"base\",\"egress\":\"open\"}");
        ok(result_error_says(m, network ? "DEMESNE_ALLOW_CALLER_EGRESS" : "egress"),
           "egress open (not advertised) is refused, naming why");
        json_object_put(m);
        m = call(c, 12, "sandbox_script", "{\"command\":\"true\",\"image\":\"base\",\"allow\":[\"example.org\"]}");
        ok(result_error_says(m, "DEMESNE_ALLOW_CALLER_EGRESS"),
           "allow (not advertised) is refused, naming the variable");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"command\":\"true\",\"image\":\"base\",\"files\":[\"/etc/hostname\"]}");
        m = call(c, 13, "sandbox_script", args);
        ok(result_is_error(m), "a file outside the advertised root is refused");
        json_object_put(m);
        is_int(finish(c, 30000), 0, "server exits cleanly");
        free(c);
        free(ins);

        /* 2. Caller egress permitted, no allowed roots. */
        const char *env2[] = { "DEMESNE_ALLOW_CALLER_EGRESS=1", "DEMESNE_ALLOWED_PATHS=", "DEMESNE_IMAGES_AUTOBUILD=0",
                               "DEMESNE_IMAGE_REPO=localhost/demesne-schemas-none", NULL };
        c = start(env2, &ins);
        p = param("sandbox_script", "egress");
        ok(enum_has(p, "open") == network, "'open' advertised with DEMESNE_ALLOW_CALLER_EGRESS=1 (when networked)");
        ok((param("sandbox_script", "allow") != NULL) == network, "'allow' advertised likewise");
        ok(strstr(str_at(param("sandbox_script", "files"), "description"), "accepts no host paths") != NULL,
           "files says no host paths are accepted");
        ok(ins && strstr(ins, "mounts no host paths") != NULL, "instructions say so too");
        ok(strstr(str_at(param("sandbox_script", "image"), "description"),
                  "Not built, and refused here (DEMESNE_IMAGES_AUTOBUILD=0): base, python") != NULL,
           "image says which images are missing and why a call naming one is refused");
        m = call(c, 20, "sandbox_script", "{\"command\":\"true\",\"image\":\"python\"}");
        ok(result_error_says(m, "not built"), "and a call naming one is refused so");
        json_object_put(m);
        is_int(finish(c, 30000), 0, "server exits cleanly");
        free(c);
        free(ins);

        json_object_put(tool_list);
        dm_server_release(&ctx);
        return done_testing();
}
