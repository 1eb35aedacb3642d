/* SPDX-License-Identifier: MIT */
/* The MCP client (src/mcp/client.c) against hostile stdio servers: this
 * program runs itself as the server ("serve MODE"), which answers
 * initialize and tools/list well and then, for tools/call, as MODE says:
 * well, with malformed JSON, with a line over the cap, with another id,
 * with a JSON-RPC error, not at all, or by dying. Each must give a clear
 * error, never a crash or a hang; a server given up on is started again
 * after a delay, as often as it is given up on. Also: the environment a
 * server gets (mode "env" prints its own), a call waiting for its turn
 * that is cancelled, and a user that cannot be taken on. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
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
                if (strcmp(meth, "initialize") == 0 && strcmp(mode, "crashloop") == 0) {
                        /* Its first process starts well; every later one
                         * dies before it answers initialize. */
                        const char *marker = getenv("DM_TEST_MARKER");
                        if (access(marker, F_OK) == 0)
                                _exit(0);
                        fclose(fopen(marker, "w"));
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
                } else if (strcmp(mode, "env") == 0) {
                        extern char **environ;
                        json_object *res = json_object_new_object(), *content = json_object_new_array(),
                                    *text = json_object_new_object();
                        char uid[32];
                        json_object *all = json_object_new_array();

                        for (char **e = environ; *e; e++)
                                json_object_array_add(all, json_object_new_string(*e));
                        snprintf(uid, sizeof(uid), "uid=%u", (unsigned)getuid());
                        json_object_array_add(all, json_object_new_string(uid));
                        json_object_object_add(text, "type", json_object_new_string("text"));
                        json_object_object_add(text, "text", all);
                        json_object_array_add(content, text);
                        json_object_object_add(res, "content", content);
                        answer(id, json_object_to_json_string_ext(res, JSON_C_TO_STRING_PLAIN));
                        json_object_put(res);
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
                } else if (strcmp(mode, "die") == 0 || strcmp(mode, "crashloop") == 0) {
                        /* At once: an ASan build's leak check at exit would
                         * keep its stdout open past the call's timeout. */
                        _exit(0);
                } else if (strcmp(mode, "die-once") == 0) {
                        /* The first of its processes dies; the next answers. */
                        const char *marker = getenv("DM_TEST_MARKER");
                        if (access(marker, F_OK) < 0) {
                                fclose(fopen(marker, "w"));
                                _exit(0);
                        }
                        answer(id, "{\"content\":[{\"type\":\"text\",\"text\":\"again\"}]}");
                } /* "silent": never answers */
                json_object_put(m);
        }
        return 0;
}

static char self[4096];
static char **mode_env;         /* the next server's environment; NULL = none */
static int64_t mode_timeout_ms; /* the next server's timeout; 0 = 1500 */

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
        spec->timeout_ms = mode_timeout_ms ? mode_timeout_ms : 1500;
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

/* The list itself: the file's entries first and winning, then the four
 * base variables where set, HOME from the user's entry when given. */
static void test_env_list(void)
{
        char *environ_[] = { "PATH=/usr/bin",      "HOME=/root", "ANTHROPIC_API_KEY=sk", "LANG=C", "XDG_RUNTIME_DIR=/r",
                             "OPENAI_API_KEY=sk2", NULL };
        char *file[] = { "PATH=/opt/bin", "TOKEN=t", NULL };
        char *none[] = { NULL };
        struct dm_mcpclient_spec spec = { .env = file };
        char **e = dm_mcpclient_env(&spec, environ_, NULL);
        size_t n = 0;

        while (e && e[n])
                n++;
        ok(e && n == 4 && strcmp(e[0], "PATH=/opt/bin") == 0 && strcmp(e[1], "TOKEN=t") == 0 &&
                   strcmp(e[2], "HOME=/root") == 0 && strcmp(e[3], "LANG=C") == 0,
           "env: the file's entries (its PATH wins), then HOME and LANG from demesne's; TZ unset; nothing else "
           "(%zu entries)",
           n);
        free(e);
        spec.env = none;
        e = dm_mcpclient_env(&spec, environ_, "HOME=/home/mcp");
        ok(e && e[0] && strcmp(e[0], "PATH=/usr/bin") == 0 && e[1] && strcmp(e[1], "HOME=/home/mcp") == 0 && e[2] &&
                   strcmp(e[2], "LANG=C") == 0 && !e[3],
           "env: as another user, HOME is that user's");
        free(e);
        e = dm_mcpclient_env(&spec, NULL, NULL);
        ok(e && !e[0], "env: an empty environment gives an empty list");
        free(e);
}

static void test_backoff(void)
{
        struct dm_mcpclient_backoff b = { 0 };
        int64_t d[8];

        for (int i = 0; i < 8; i++)
                d[i] = dm_mcpclient_backoff_failed(&b, 100, false);
        ok(d[0] == 500 && d[1] == 1000 && d[2] == 2000 && d[5] == 16000 && d[6] == 30000 && d[7] == 30000,
           "backoff: 0.5 s doubling to 30 s (%lld %lld %lld ... %lld %lld)", (long long)d[0], (long long)d[1],
           (long long)d[2], (long long)d[6], (long long)d[7]);
        ok(dm_mcpclient_backoff_failed(&b, 100, true) == 500 && dm_mcpclient_backoff_failed(&b, 100, false) == 30000,
           "backoff: a bad answer to a call restarts after 0.5 s and does not double");
        ok(dm_mcpclient_backoff_failed(&b, DM_MCPCLIENT_HEALTHY_MS, false) == 500 &&
                   dm_mcpclient_backoff_failed(&b, 10, false) == 1000,
           "backoff: after a healthy minute it starts from 0.5 s again");
}

/* The server's environment: its own, not demesne's. */
static void test_env(struct dm_mcpclient_spec *spec, char **args)
{
        char *env[] = { "K=V", "LANG=C.UTF-8", NULL };
        struct dm_mcpclient *c;
        struct dm_error err;
        json_object *res = NULL;
        const char *text;
        int r;

        setenv("ANTHROPIC_API_KEY", "sk-ant-secret", 1);
        setenv("OPENAI_API_KEY", "sk-openai-secret", 1);
        setenv("DEMESNE_HTTP_TOKEN", "tok-secret", 1);
        setenv("LANG", "fr_FR.UTF-8", 1);
        setenv("TZ", "UTC", 1);
        mode_env = env;
        c = open_mode("env", spec, args);
        mode_env = NULL;
        r = c ? call(c, NULL, &res, &err) : -1;
        text = r == 0 ? json_object_to_json_string(res) : "";
        ok(r == 0 && strstr(text, "\"K=V\"") && strstr(text, "\"LANG=C.UTF-8\"") && strstr(text, "\"PATH=") &&
                   strstr(text, "\"TZ=UTC\"") && !strstr(text, "fr_FR"),
           "a server gets PATH, LANG, TZ and its file's env, which wins (%.300s)", text);
        ok(r == 0 && !strstr(text, "secret") && !strstr(text, "API_KEY") && !strstr(text, "DEMESNE_"),
           "and none of demesne's other variables: no vendor key, no token");
        json_object_put(res);
        dm_mcpclient_free(c);
        unsetenv("ANTHROPIC_API_KEY");
        unsetenv("OPENAI_API_KEY");
        unsetenv("DEMESNE_HTTP_TOKEN");
}

struct turn_arg {
        struct dm_mcpclient *c;
        struct dm_cancel cancel;
        atomic_bool done;
        int r;
};

static void *call_cancellable(void *arg)
{
        struct turn_arg *a = arg;
        struct dm_error err;
        json_object *res = NULL;

        a->r = call(a->c, &a->cancel, &res, &err);
        json_object_put(res);
        atomic_store(&a->done, true);
        return NULL;
}

/* A call waiting behind another for a silent server: its cancel ends its
 * wait while the first still waits; then the first is cancelled, and the
 * server still serves. */
static void test_turn_cancel(struct dm_mcpclient *c)
{
        struct turn_arg a = { .c = c }, b = { .c = c };
        json_object *tools = NULL;
        struct dm_error err = { 0 };
        pthread_t ta, tb;
        int r;

        if (!c) {
                ok(0, "turn: no client");
                return;
        }
        dm_cancel_init(&a.cancel);
        dm_cancel_init(&b.cancel);
        pthread_create(&ta, NULL, call_cancellable, &a);
        usleep(300 * 1000); /* a holds the turn (it waits for an answer that never comes) */
        pthread_create(&tb, NULL, call_cancellable, &b);
        usleep(100 * 1000);
        dm_cancel_fire(&b.cancel);
        pthread_join(tb, NULL);
        ok(b.r == -ECANCELED && !atomic_load(&a.done),
           "a call waiting for the server's turn ends on its cancel (%d) while the call ahead still waits", b.r);
        dm_cancel_fire(&a.cancel);
        pthread_join(ta, NULL);
        ok(a.r == -ECANCELED, "the call ahead ends on its own cancel (%d)", a.r);
        r = dm_mcpclient_list_tools(c, &tools, &err);
        ok(r == 0, "and the server is not left wedged: the next request is answered (%s)", err.msg);
        json_object_put(tools);
        dm_cancel_release(&a.cancel);
        dm_cancel_release(&b.cancel);
}

/* A server of no arguments, environment or tools, run as user. */
static int open_bare(const char *name, const char *command, const char *user, struct dm_mcpclient **c,
                     struct dm_error *err)
{
        static char *none[] = { NULL };
        static struct dm_mcpclient_spec spec;

        memset(&spec, 0, sizeof(spec));
        spec.name = (char *)name;
        spec.command = (char *)command;
        spec.user = (char *)user;
        spec.args = spec.env = spec.headers = spec.tools = none;
        memset(err, 0, sizeof(*err));
        return dm_mcpclient_open(&spec, c, err);
}

/* A user to run as: only as root, only one that exists. */
static void test_user(void)
{
        struct dm_mcpclient *c = NULL;
        struct dm_error err;
        int r = open_bare("as", "/bin/true", "dm-no-such-user-x", &c, &err);

        if (geteuid() == 0)
                ok(r == -ENOENT && !c && strstr(err.msg, "'as': no user 'dm-no-such-user-x'"),
                   "as root, a user that does not exist: '%s'", err.msg);
        else
                ok(r == -EPERM && !c && strstr(err.msg, "needs demesne to run as root"),
                   "not root, \"user\" is refused: '%s'", err.msg);
}

/* A server that cannot start again: each failed start doubles the delay
 * (0.5, 1, 2 s), a call waits for a delay within its timeout (1.5 s) and
 * fails with -EAGAIN at once when the delay is longer. */
static void test_crashloop(struct dm_mcpclient_spec *spec, char **args)
{
        char marker[] = "/tmp/dm-test-mcpclient-XXXXXX", env0[64];
        char *env[] = { env0, NULL };
        struct dm_mcpclient *c;
        struct dm_error err;
        json_object *res = NULL;
        int fd = mkstemp(marker), r[5];

        close(fd);
        unlink(marker);
        snprintf(env0, sizeof(env0), "DM_TEST_MARKER=%s", marker);
        mode_env = env;
        c = open_mode("crashloop", spec, args);
        mode_env = NULL;
        r[0] = c ? call(c, NULL, &res, &err) : -1;
        ok(r[0] == -EPIPE, "crashloop: the call that kills it fails: '%s'", err.msg);
        for (int i = 1; i < 4; i++)
                r[i] = c ? call(c, NULL, &res, &err) : -1;
        ok(r[1] == -EPIPE && r[2] == -EPIPE && r[3] == -EPIPE,
           "crashloop: the next calls wait for its delays (0.5, 0.5, 1 s) and find it failing to start: '%s'", err.msg);
        /* The next delay, 2 s, is longer than the timeout; should this
         * process stall past the half second between, the call waits,
         * finds it failing, and the one after meets 4 s. */
        for (int i = 0; i < 2; i++) {
                r[4] = c ? call(c, NULL, &res, &err) : -1;
                if (r[4] != -EPIPE)
                        break;
        }
        ok(r[4] == -EAGAIN && strstr(err.msg, "'crashloop' failed and starts again in "),
           "crashloop: a delay longer than the call's timeout fails it without waiting: '%s'", err.msg);
        dm_mcpclient_free(c);
        unlink(marker);
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
        test_env_list();
        test_backoff();

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
        ok(r == -EPROTO, "and again for the one after: a caller's bad answers do not take it away: '%s'", err.msg);
        dm_mcpclient_free(c);

        c = open_mode("huge", &spec, args);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -E2BIG && strstr(err.msg, "over 8192 bytes"), "an answer over max_message: '%s'", err.msg);
        memset(&err, 0, sizeof(err));
        r = c ? dm_mcpclient_list_tools(c, &tools, &err) : -1;
        ok(r == 0, "the next request starts it again and is answered (%s)", err.msg);
        if (r == 0)
                json_object_put(tools);
        dm_mcpclient_free(c);

        test_env(&spec, args);

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

        mode_timeout_ms = 60000;
        c = open_mode("silent", &spec, args);
        mode_timeout_ms = 0;
        test_turn_cancel(c);
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
        ok(r == -EPIPE && strstr(err.msg, "exited"), "it is started again, and dies again: '%s'", err.msg);
        r = c ? call(c, NULL, &res, &err) : -1;
        ok(r == -EPIPE && strstr(err.msg, "exited"), "and again, not once per lifetime: '%s'", err.msg);
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
                c = NULL;
                r = open_bare("nope", "/nonexistent/mcp-server", NULL, &c, &err);
                ok(r == -ENOENT && !c && strstr(err.msg, "'nope': cannot run '/nonexistent/mcp-server'"),
                   "a command that cannot run: '%s'", err.msg);
        }
        test_user();
        test_crashloop(&spec, args);
        return done_testing();
}
