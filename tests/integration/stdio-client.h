/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_INTEGRATION_STDIO_CLIENT_H
#define DM_TESTS_INTEGRATION_STDIO_CLIENT_H

/* A minimal MCP client over a child's stdio, for tests that need to send
 * what real clients never would (bad JSON, cancels at chosen moments) and
 * to watch the server process itself (exit code, timing, kill -9). */

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/basic/timeutil.h"
#include "tests/integration/common.h"
#include "tests/integration/engine-env.h"
#include "tests/tap.h"

#define MODERN_META                                                              \
        "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
        "\"io.modelcontextprotocol/clientCapabilities\":{}}"

struct child {
        pid_t pid;
        int in, out;
        char buf[1 << 20];
        size_t len;
};

static inline int spawn(struct child *c, const char *const *extra_env)
{
        int to[2], from[2];
        const char *bin = getenv("DEMESNE");

        if (!bin || pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0)
                return -1;
        c->pid = fork();
        if (c->pid == 0) {
                dup2(to[0], 0);
                dup2(from[1], 1);
                for (size_t i = 0; extra_env && extra_env[i]; i++)
                        putenv((char *)extra_env[i]);
                execl(bin, bin, "serve", (char *)NULL);
                _exit(127);
        }
        close(to[0]);
        close(from[1]);
        c->in = to[1];
        c->out = from[0];
        c->len = 0;
        return 0;
}

static inline void send_raw(struct child *c, const char *s, size_t n)
{
        while (n > 0) {
                ssize_t w = write(c->in, s, n);
                if (w <= 0)
                        return;
                s += w;
                n -= (size_t)w;
        }
}

static inline void send_line(struct child *c, const char *s)
{
        send_raw(c, s, strlen(s));
        send_raw(c, "\n", 1);
}

/* Next message from the server, or NULL after timeout_ms. */
static inline json_object *recv_msg(struct child *c, int timeout_ms)
{
        int64_t deadline = dm_now_ms() + timeout_ms;

        for (;;) {
                char *nl = memchr(c->buf, '\n', c->len);
                if (nl) {
                        *nl = '\0';
                        json_object *o = json_tokener_parse(c->buf);
                        size_t used = (size_t)(nl - c->buf) + 1;
                        memmove(c->buf, nl + 1, c->len - used);
                        c->len -= used;
                        if (!o)
                                diag("server wrote a line that is not JSON");
                        return o;
                }
                int left = (int)(deadline - dm_now_ms());
                struct pollfd p = { .fd = c->out, .events = POLLIN };
                if (left <= 0 || poll(&p, 1, left) <= 0)
                        return NULL;
                ssize_t n = read(c->out, c->buf + c->len, sizeof(c->buf) - c->len - 1);
                if (n <= 0)
                        return NULL;
                c->len += (size_t)n;
        }
}

/* The response with the given integer id, skipping notifications (kept in *notes if asked). */
static inline json_object *recv_response(struct child *c, int id, int timeout_ms, json_object *notes)
{
        int64_t deadline = dm_now_ms() + slack_ms(timeout_ms);

        for (;;) {
                int left = (int)(deadline - dm_now_ms());
                json_object *m = left > 0 ? recv_msg(c, left) : NULL, *v;
                if (!m)
                        return NULL;
                if (json_object_object_get_ex(m, "id", &v) && json_object_get_int(v) == id)
                        return m;
                if (notes)
                        json_object_array_add(notes, m);
                else
                        json_object_put(m);
        }
}

static inline int error_code(json_object *m)
{
        json_object *e, *code;
        return m && json_object_object_get_ex(m, "error", &e) && json_object_object_get_ex(e, "code", &code)
                       ? json_object_get_int(code)
                       : 0;
}

static inline int finish(struct child *c, int timeout_ms)
{
        int64_t deadline = dm_now_ms() + slack_ms(timeout_ms);
        int status;

        close(c->in);
        while (dm_now_ms() < deadline) {
                pid_t p = waitpid(c->pid, &status, WNOHANG);
                if (p == c->pid) {
                        close(c->out);
                        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                }
                usleep(20000);
        }
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &status, 0);
        close(c->out);
        return -1;
}

/* Sends tools/call with the given arguments (JSON text), in the modern era. */
static inline void send_call(struct child *c, int id, const char *tool, const char *args_json)
{
        size_t n = strlen(args_json) + strlen(tool) + 512;
        char *line = malloc(n);

        snprintf(line, n,
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                 "\"arguments\":%s," MODERN_META "}}",
                 id, tool, args_json);
        send_line(c, line);
        free(line);
}

/* A test of `demesne serve` on the real engine begins: a private root
 * (test_env_setup(name)), the engine, and server c started with env. Bails
 * out (exit 1) when $DEMESNE or $DEMESNE_SHIM_PATH is unset or either
 * cannot start. */
static inline struct dm_backend *serve_start(const char *name, struct child *c, const char *const *env)
{
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        struct dm_error err = { 0 };
        struct dm_backend *b;

        test_env_setup(name);
        if (!getenv("DEMESNE") || !getenv("DEMESNE_SHIM_PATH")) {
                printf("Bail out! DEMESNE and DEMESNE_SHIM_PATH must name the built binaries\n");
                exit(1);
        }
        if (dm_backend_open(&ec, &b, &err) < 0 || spawn(c, env) < 0) {
                printf("Bail out! %s\n", err.msg[0] ? err.msg : "cannot start $DEMESNE serve");
                exit(1);
        }
        return b;
}

/* tools/call on c with the next of *next_id: the response (up to 120 s)
 * or NULL. */
static inline json_object *call_tool(struct child *c, int *next_id, const char *tool, const char *args_json)
{
        int id = (*next_id)++;

        send_call(c, id, tool, args_json);
        return recv_response(c, id, 120000, NULL);
}

/* structuredContent of a tools/call response, borrowed from m. */
static inline json_object *structured(json_object *m)
{
        return path(m, "result", "structuredContent", NULL);
}

static inline const char *str_at(json_object *o, const char *key)
{
        json_object *v = path(o, key, NULL, NULL);
        return v ? json_object_get_string(v) : "";
}

/* ---- results of tools/call (shared by the tool tests) -------------------- */

/* A tool error result, or no response at all. */
static inline bool result_is_error(json_object *m)
{
        return !m || json_object_get_boolean(path(m, "result", "isError", NULL));
}

/* An error result whose text says what; otherwise says what came. */
static inline bool result_error_says(json_object *m, const char *what)
{
        bool yes = result_is_error(m) && m && strstr(json_object_to_json_string(m), what) != NULL;

        if (!yes)
                diag("wanted an error saying '%s', got %s", what, m ? json_object_to_json_string(m) : "nothing");
        return yes;
}

/* An integer field, -999 when missing. */
static inline int64_t int_at(json_object *o, const char *key)
{
        json_object *v = path(o, key, NULL, NULL);
        return v ? json_object_get_int64(v) : -999;
}

/* The notifications/message about job_id among collected notifications. */
static inline json_object *job_end_message(json_object *notes, const char *job_id)
{
        for (size_t i = 0; i < json_object_array_length(notes); i++) {
                json_object *n = json_object_array_get_idx(notes, i);
                if (strcmp(str_at(n, "method"), "notifications/message") == 0 &&
                    strcmp(json_object_get_string(path(n, "params", "data", "job_id")) ?: "", job_id) == 0)
                        return n;
        }
        return NULL;
}

/* The stdout of one sandbox_exec made through call, "<error>" when it
 * failed (and then why, as a diag line). Free it. */
static inline char *sandbox_exec_stdout(json_object *(*call)(const char *tool, const char *args), const char *sb,
                                        const char *cmd)
{
        char args[4096];
        json_object *m;
        char *out;

        int64_t t0 = dm_now_ms();

        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\",\"command\":\"%s\"}", sb, cmd);
        m = call("sandbox_exec", args);
        /* Rootless without a pids cgroup, every sandbox of the user shares
         * one RLIMIT_NPROC count: while a test running beside this one
         * makes a fork bomb (until demesne-shim stops it), bash here may
         * not fork. That is the other test's doing, not this command's:
         * the command runs again, for up to 30 s. */
        while (result_is_error(m) && strstr(json_object_to_json_string(m), "cannot fork") && dm_now_ms() - t0 < 30000) {
                diag("sandbox_exec '%s': bash could not fork (a fork bomb beside this test?): again", cmd);
                json_object_put(m);
                usleep(300 * 1000);
                m = call("sandbox_exec", args);
        }
        if (result_is_error(m))
                diag("sandbox_exec '%s': %s", cmd, m ? json_object_to_json_string(m) : "no response");
        out = strdup(result_is_error(m) ? "<error>" : str_at(structured(m), "stdout"));
        json_object_put(m);
        return out;
}

#endif
