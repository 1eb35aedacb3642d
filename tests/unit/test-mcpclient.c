/* SPDX-License-Identifier: MIT */
/* The MCP client (src/mcp/client.c) against hostile stdio servers: this
 * program runs itself as the server ("serve MODE"), which answers
 * initialize and tools/list well and then, for tools/call, as MODE says:
 * well, with malformed JSON, with a line over the cap, with another id,
 * with a JSON-RPC error, not at all, or by dying. Each must give a clear
 * error, never a crash or a hang; a server given up on is started again
 * once. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/basic/timeutil.h"
#include "src/mcp/client.h"
#include "tests/tap.h"

static void answer(json_object *id, const char *result_json)
{
        printf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}\n", json_object_to_json_string(id), result_json);
        fflush(stdout);
}

static int serve(const char *mode)
{
        static char line[1 << 20];

        while (fgets(line, sizeof(line), stdin)) {
                json_object *m = json_tokener_parse(line), *id = NULL, *method = NULL, *params = NULL, *cur;
                const char *meth;

                if (!m)
                        return 3;
                json_object_object_get_ex(m, "id", &id);
                json_object_object_get_ex(m, "method", &method);
                json_object_object_get_ex(m, "params", &params);
                meth = json_object_get_string(method);
                if (!id || !meth) { /* a notification, or the answer to its ping */
                        json_object_put(m);
                        continue;
                }
                if (strcmp(meth, "initialize") == 0) {
                        /* A notification and a request of its own first: both
                         * must be passed over (the request answered). */
                        puts("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}");
                        puts("{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"ping\"}");
                        answer(id, "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{\"tools\":{}},"
                                   "\"serverInfo\":{\"name\":\"hostile\",\"version\":\"1\"}}");
                } else if (strcmp(meth, "tools/list") == 0) {
                        if (params && json_object_object_get_ex(params, "cursor", &cur))
                                answer(id, "{\"tools\":[{\"name\":\"two\",\"inputSchema\":{\"type\":\"object\"}}]}");
                        else
                                answer(id, "{\"tools\":[{\"name\":\"one\",\"inputSchema\":{\"type\":\"object\"}}],"
                                           "\"nextCursor\":\"p2\"}");
                } else if (strcmp(mode, "good") == 0) {
                        answer(id, "{\"content\":[{\"type\":\"text\",\"text\":\"fine\"}]}");
                } else if (strcmp(mode, "badjson") == 0) {
                        puts("{\"jsonrpc\":\"2.0\",\"id\":");
                        fflush(stdout);
                } else if (strcmp(mode, "huge") == 0) {
                        printf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"",
                               json_object_to_json_string(id));
                        for (int i = 0; i < 100000; i++)
                                putchar('x');
                        puts("\"}]}}");
                        fflush(stdout);
                } else if (strcmp(mode, "liar") == 0) {
                        json_object *other = json_object_new_int64(json_object_get_int64(id) + 100);
                        answer(other, "{\"content\":[]}");
                        json_object_put(other);
                } else if (strcmp(mode, "error") == 0) {
                        printf("{\"jsonrpc\":\"2.0\",\"id\":%s,\"error\":{\"code\":-32602,\"message\":\"no such "
                               "file: /x\"}}\n",
                               json_object_to_json_string(id));
                        fflush(stdout);
                } else if (strcmp(mode, "die") == 0) {
                        return 0;
                } else if (strcmp(mode, "die-once") == 0) {
                        /* The first of its processes dies; the next answers. */
                        const char *marker = getenv("DM_TEST_MARKER");
                        if (access(marker, F_OK) < 0) {
                                fclose(fopen(marker, "w"));
                                return 0;
                        }
                        answer(id, "{\"content\":[{\"type\":\"text\",\"text\":\"again\"}]}");
                } /* "silent": never answers */
                json_object_put(m);
        }
        return 0;
}

static char self[4096];
static char **mode_env; /* the next server's environment; NULL = none */

static struct dm_mcpclient *open_mode(const char *mode, struct dm_mcpclient_spec *spec, char **args)
{
        static char *none[] = { NULL };
        struct dm_mcpclient *c = NULL;
        struct dm_error err = { 0 };

        args[0] = "serve";
        args[1] = (char *)mode;
        args[2] = NULL;
        memset(spec, 0, sizeof(*spec));
        spec->name = (char *)mode;
        spec->command = self;
        spec->args = args;
        spec->env = mode_env ? mode_env : none;
        spec->headers = none;
        spec->tools = none;
        spec->max_message = 8192;
        spec->timeout_ms = 1500;
        if (dm_mcpclient_open(spec, &c, &err) < 0)
                ok(0, "%s: open: %s", mode, err.msg);
        return c;
}

static int call(struct dm_mcpclient *c, struct dm_cancel *cancel, json_object **res, struct dm_error *err)
{
        json_object *p = json_object_new_object();
        int r;

        json_object_object_add(p, "name", json_object_new_string("one"));
        memset(err, 0, sizeof(*err));
        *res = NULL;
        r = dm_mcpclient_request(c, "tools/call", p, cancel, res, err);
        json_object_put(p);
        return r;
}

struct restart_arg {
        struct dm_mcpclient *c;
        int r;
};

static void *call_on_thread(void *arg)
{
        struct restart_arg *a = arg;
        struct dm_error err;
        json_object *res = NULL;

        a->r = a->c ? call(a->c, NULL, &res, &err) : -1;
        json_object_put(res);
        return NULL;
}

static void *fire_later(void *arg)
{
        usleep(200 * 1000);
        dm_cancel_fire(arg);
        return NULL;
}

int main(int argc, char **argv)
{
        struct dm_mcpclient_spec spec;
        struct dm_mcpclient *c;
        struct dm_error err;
        json_object *res = NULL, *tools = NULL;
        char *args[3];
        int r;

        if (argc == 3 && strcmp(argv[1], "serve") == 0)
                return serve(argv[2]);
        if (readlink("/proc/self/exe", self, sizeof(self) - 1) < 0)
                return 1;

        c = open_mode("good", &spec, args);
        ok(c != NULL, "good: initialize passes over a notification and answers the server's ping");
        memset(&err, 0, sizeof(err));
        r = c ? dm_mcpclient_list_tools(c, &tools, &err) : -1;
        ok(r == 0 && json_object_array_length(tools) == 2, "good: tools/list follows nextCursor (%s)", err.msg);
        if (r == 0)
                json_object_put(tools);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == 0 && strstr(json_object_to_json_string(res), "fine"), "good: tools/call answers");
        json_object_put(res);
        dm_mcpclient_free(c);

        c = open_mode("badjson", &spec, args);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -EPROTO && strstr(err.msg, "'badjson' sent malformed JSON"), "malformed JSON: '%s'", err.msg);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -EPROTO, "the server was ended and started again for the next call: '%s'", err.msg);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -EPIPE && strstr(err.msg, "'badjson' is not running"), "but only once: '%s'", err.msg);
        dm_mcpclient_free(c);

        c = open_mode("huge", &spec, args);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -E2BIG && strstr(err.msg, "over 8192 bytes"), "an answer over max_message: '%s'", err.msg);
        dm_mcpclient_free(c);

        c = open_mode("liar", &spec, args);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -EPROTO && strstr(err.msg, "answered request"), "an answer to an id never asked: '%s'", err.msg);
        dm_mcpclient_free(c);

        c = open_mode("error", &spec, args);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -EREMOTEIO && strcmp(err.msg, "no such file: /x") == 0,
           "a JSON-RPC error keeps the server's message: '%s'", err.msg);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -EREMOTEIO, "and the server stays in use");
        dm_mcpclient_free(c);

        c = open_mode("silent", &spec, args);
        {
                int64_t t0 = dm_now_ms();
                r = c ? call(c, NULL, &res, &err) : -1;
                ok(r == -ETIMEDOUT && strstr(err.msg, "did not answer") && dm_now_ms() - t0 < slack_ms(30000),
                   "a server that does not answer times out: '%s'", err.msg);
        }
        {
                struct dm_cancel cancel;
                pthread_t th;
                int64_t t0 = dm_now_ms();

                dm_cancel_init(&cancel);
                pthread_create(&th, NULL, fire_later, &cancel);
                r = c ? call(c, &cancel, &res, &err) : -1;
                pthread_join(th, NULL);
                /* Not cancelled, the call would end -ETIMEDOUT at 1.5 s. */
                ok(r == -ECANCELED, "a cancel ends the wait before the call's timeout (%lld ms)",
                   (long long)(dm_now_ms() - t0));
                dm_cancel_release(&cancel);
        }
        {
                int64_t t0 = dm_now_ms();
                dm_mcpclient_free(c);
                /* Stdin closed, SIGTERM 2 s later, SIGKILL 2 s after: against a hang. */
                ok(dm_now_ms() - t0 < slack_ms(30000), "a server ends when its stdin closes (%lld ms)",
                   (long long)(dm_now_ms() - t0));
        }

        c = open_mode("die", &spec, args);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -EPIPE && strstr(err.msg, "'die' exited"), "a server that dies: '%s'", err.msg);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -EPIPE && strstr(err.msg, "exited"), "it is started again once, and dies again: '%s'", err.msg);
        dm_mcpclient_free(c);

        {
                /* Started again on a call's own thread, it must outlive that
                 * thread. */
                char marker[] = "/tmp/dm-test-mcpclient-XXXXXX", env0[64];
                char *env[] = { env0, NULL };
                struct restart_arg a;
                pthread_t th;
                int fd = mkstemp(marker);

                close(fd);
                unlink(marker);
                snprintf(env0, sizeof(env0), "DM_TEST_MARKER=%s", marker);
                mode_env = env;
                c = open_mode("die-once", &spec, args);
                mode_env = NULL;
                a.c = c;
                r = c ? call(c, NULL, &res, &err) : -1;
                ok(r == -EPIPE, "die-once: the first call finds it dead: '%s'", err.msg);
                pthread_create(&th, NULL, call_on_thread, &a);
                pthread_join(th, NULL);
                ok(a.r == 0, "it is started again on a call's thread, and answers");
                usleep(300 * 1000);
                r = c ? call(c, NULL, &res, &err) : -1;
                ok(r == 0 && strstr(json_object_to_json_string(res), "again"),
                   "and still answers after that thread ended: '%s'", err.msg);
                json_object_put(res);
                dm_mcpclient_free(c);
                unlink(marker);
        }
        {
                static char *none[] = { NULL };
                struct dm_mcpclient_spec bad = { .name = "nope",
                                                 .command = "/nonexistent/mcp-server",
                                                 .args = none,
                                                 .env = none,
                                                 .headers = none,
                                                 .tools = none };
                memset(&err, 0, sizeof(err));
                c = NULL;
                r = dm_mcpclient_open(&bad, &c, &err);
                ok(r == -ENOENT && !c && strstr(err.msg, "'nope': cannot run '/nonexistent/mcp-server'"),
                   "a command that cannot run: '%s'", err.msg);
        }
        return done_testing();
}
