/* SPDX-License-Identifier: MIT */
/* Asking the client (src/mcp/server-ask.c) at the MCP layer, with a tool that asks
 * and answers with what it heard: the 2025-11-25 elicitation/create and its
 * answers by id (strays, a malformed answer, a timeout, a cancel), who is
 * never asked (no capability, a nested caller, asking off), and the
 * 2026-07-28 input_required result with its requestState, good once. */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"

#define MAX_MSGS 64

/* What the server sent, in order, as JSON text. */
struct peer {
        pthread_mutex_t lock;
        pthread_cond_t more;
        char *msgs[MAX_MSGS];
        int n;
};

static int on_send(void *transport, json_object *msg)
{
        struct peer *p = transport;

        pthread_mutex_lock(&p->lock);
        if (p->n < MAX_MSGS)
                p->msgs[p->n++] = strdup(
                        json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        pthread_cond_broadcast(&p->more);
        pthread_mutex_unlock(&p->lock);
        return 0;
}

/* The first message from index *from on that contains needle (owned by the
 * peer), waiting for it; NULL when none came in time. */
static const char *wait_for(struct peer *p, int *from, const char *needle)
{
        int64_t deadline = dm_now_ms() + slack_ms(10000);
        const char *found = NULL;

        pthread_mutex_lock(&p->lock);
        while (!found) {
                for (; *from < p->n && !found; (*from)++)
                        if (strstr(p->msgs[*from], needle))
                                found = p->msgs[*from];
                if (found || dm_now_ms() > deadline)
                        break;
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 50 * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                        ts.tv_sec++;
                        ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&p->more, &p->lock, &ts);
        }
        pthread_mutex_unlock(&p->lock);
        return found;
}

/* Whether any message so far contains needle. */
static bool seen(struct peer *p, const char *needle)
{
        bool found = false;

        pthread_mutex_lock(&p->lock);
        for (int i = 0; i < p->n && !found; i++)
                found = strstr(p->msgs[i], needle) != NULL;
        pthread_mutex_unlock(&p->lock);
        return found;
}

static void say(struct dm_mcp_session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(struct dm_mcp_session *s, const char *fmt, ...)
{
        char line[4096];
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        dm_mcp_session_handle(s, line, (size_t)n);
}

static json_object *asker(struct dm_call *call, json_object *args)
{
        (void)args;
        return dm_tool_result_error("heard: %s", dm_ask_answer_name(dm_call_ask(call, "egress", "open it?")));
}

/* The session a nested caller's question goes to (dm_call_ask_host). */
static uint64_t host_session;

static json_object *host_asker(struct dm_call *call, json_object *args)
{
        (void)args;
        return dm_tool_result_error(
                "heard: %s", dm_ask_answer_name(dm_call_ask_host(call, host_session, "egress", "open it, tree?")));
}

static const struct dm_tool tools[] = {
        { .name = "t_ask", .description = "asks", .input_schema = "{\"type\":\"object\"}", .handler = asker },
        { .name = "t_ask_host",
          .description = "asks the host",
          .input_schema = "{\"type\":\"object\"}",
          .handler = host_asker },
};

/* A server with the asking tool, one session, and what it sent. */
struct fixture {
        struct dm_registry *reg;
        struct dm_mcp_server *srv;
        struct dm_mcp_session *s;
        struct peer p;
        int from;
};

/* The question's timeout where a round is answered: 1 s, widened. */
static int ask_ms;

static void fixture_init(struct fixture *f, int timeout_ms, const char *principal)
{
        *f = (struct fixture){ .p = { .lock = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER } };
        f->reg = dm_registry_new();
        dm_registry_add(f->reg, tools, 2);
        f->srv = dm_mcp_server_new(NULL, f->reg, "/nonexistent");
        dm_mcp_server_set_ask_timeout(f->srv, timeout_ms);
        f->s = dm_mcp_session_new(f->srv, on_send, &f->p);
        if (principal)
                dm_mcp_session_set_principal(f->s, principal);
}

static void fixture_release(struct fixture *f)
{
        dm_mcp_session_free(f->s);
        dm_mcp_server_free(f->srv);
        dm_registry_free(f->reg);
        for (int i = 0; i < f->p.n; i++)
                free(f->p.msgs[i]);
}

#define INIT_ELICIT                                                                                               \
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"," \
        "\"capabilities\":{\"elicitation\":{}},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"
#define CALL(id) "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\",\"params\":{\"name\":\"t_ask\"}}"

/* The id of the question in msg, into id (JSON text). */
static void question_id(const char *msg, char *id, size_t size)
{
        json_object *o = json_tokener_parse(msg), *v;

        id[0] = '\0';
        if (o && json_object_object_get_ex(o, "id", &v))
                snprintf(id, size, "%s", json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
        json_object_put(o);
}

/* One legacy call answered with result (JSON text, or NULL: none); what the
 * tool heard is checked against want. */
static void legacy_round(struct dm_mcp_session *s, struct peer *p, int *from, int call_id, const char *result,
                         const char *want, const char *what)
{
        char id[512], callmsg[200], done[64];
        const char *q;

        snprintf(callmsg, sizeof(callmsg),
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"t_ask\"}}", call_id);
        dm_mcp_session_handle(s, callmsg, strlen(callmsg));
        q = wait_for(p, from, "\"method\":\"elicitation/create\"");
        question_id(q ? q : "{}", id, sizeof(id));
        if (result)
                say(s, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":%s}", id, result);
        snprintf(done, sizeof(done), "\"id\":%d,\"result\"", call_id);
        q = wait_for(p, from, done);
        ok(q && strstr(q, want), "%s: %s", what, q ? q : "(no answer)");
}

static void legacy(void)
{
        struct fixture f;
        struct dm_mcp_session *s;
        struct peer *p = &f.p;
        int *from = &f.from;
        const char *q;
        int64_t t0;

        /* The rounds answered must beat the timeout on a starved machine too
         * (valgrind at nice 19 in CI did not, at 300 ms): a liveness bound,
         * widened by slack_ms; the round left unanswered waits it out. */
        fixture_init(&f, ask_ms, NULL);
        s = f.s;
        say(s, INIT_ELICIT);
        dm_mcp_session_handle(s, CALL(2), strlen(CALL(2)));
        q = wait_for(p, from, "\"method\":\"elicitation/create\"");
        ok(q && strstr(q, "\"id\":\"demesne-ask-1 for 2\"") && strstr(q, "\"message\":\"open it?\"") &&
                   strstr(q, "\"enum\":[\"allow\",\"refuse\"]"),
           "2025-11-25: the question goes out with an id of its own naming the call, the message and the enum: %s",
           q ? q : "(none)");
        /* Strays first: another id, a number, an error to no question. */
        say(s, "{\"jsonrpc\":\"2.0\",\"id\":\"demesne-ask-9 for 2\",\"result\":{\"action\":\"accept\","
               "\"content\":{\"decision\":\"allow\"}}}");
        say(s,
            "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"action\":\"accept\",\"content\":{\"decision\":\"allow\"}}}");
        say(s, "{\"jsonrpc\":\"2.0\",\"id\":77,\"error\":{\"code\":-1,\"message\":\"x\"}}");
        say(s, "{\"jsonrpc\":\"2.0\",\"id\":\"demesne-ask-1 for 2\",\"result\":{\"action\":\"decline\"}}");
        q = wait_for(p, from, "\"id\":2,\"result\"");
        ok(q && strstr(q, "heard: refuse"), "strays are ignored; the answer to the question counts (decline): %s",
           q ? q : "(none)");

        legacy_round(s, p, from, 3, "{\"action\":\"accept\",\"content\":{\"decision\":\"allow\"}}", "heard: allow",
                     "accept + allow");
        legacy_round(s, p, from, 4, "{\"action\":\"accept\",\"content\":{\"decision\":\"refuse\"}}", "heard: refuse",
                     "accept + refuse");
        legacy_round(s, p, from, 5, "{\"action\":\"cancel\"}", "heard: cancel", "cancel");
        legacy_round(s, p, from, 6, "{\"action\":\"accept\",\"content\":{\"decision\":true}}", "heard: no answer",
                     "a malformed answer is no answer");
        legacy_round(s, p, from, 7, "[1,2]", "heard: no answer", "an answer that is not an object is no answer");
        t0 = dm_now_ms();
        legacy_round(s, p, from, 8, NULL, "heard: no answer", "no answer within the timeout");
        ok(dm_now_ms() - t0 >= ask_ms, "... not before the timeout");

        fixture_release(&f);
}

/* The call's answer when the session is never asked. */
static void never_asked(const char *init, const char *principal, int timeout_ms, const char *what)
{
        struct fixture f;
        struct dm_mcp_session *s;
        struct peer *p = &f.p;
        int *from = &f.from;
        const char *q;

        fixture_init(&f, timeout_ms, principal);
        s = f.s;
        say(s, "%s", init);
        dm_mcp_session_handle(s, CALL(2), strlen(CALL(2)));
        q = wait_for(p, from, "\"id\":2,\"result\"");
        ok(q && strstr(q, "heard: no answer") && !seen(p, "elicitation/create"), "%s: never asked, no answer", what);
        fixture_release(&f);
}

#define MODERN_META                                                                       \
        "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","          \
        "\"io.modelcontextprotocol/clientCapabilities\":{\"elicitation\":{\"form\":{}}}," \
        "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}"

/* The requestState in msg, into out. */
static void state_of(const char *msg, char *out, size_t size)
{
        json_object *o = json_tokener_parse(msg), *r, *v;

        out[0] = '\0';
        if (o && json_object_object_get_ex(o, "result", &r) && json_object_object_get_ex(r, "requestState", &v))
                snprintf(out, size, "%s", json_object_get_string(v));
        json_object_put(o);
}

static void modern(void)
{
        static const char accept[] = "{\"egress\":{\"action\":\"accept\",\"content\":{\"decision\":\"allow\"}}}";
        struct fixture f;
        struct dm_mcp_session *s;
        struct peer *p = &f.p;
        int *from = &f.from;
        char state[64];
        const char *q;

        fixture_init(&f, 60000, NULL);
        s = f.s;
        say(s, "{\"jsonrpc\":\"2.0\",\"id\":10,\"method\":\"tools/call\",\"params\":{" MODERN_META
               ",\"name\":\"t_ask\",\"arguments\":{\"a\":1}}}");
        q = wait_for(p, from, "\"id\":10,");
        ok(q && strstr(q, "\"resultType\":\"input_required\"") &&
                   strstr(q, "\"inputRequests\":{\"egress\":{\"method\":\"elicitation/create\"") &&
                   strstr(q, "\"requestState\":\"") && !strstr(q, "heard"),
           "2026-07-28: the call's result is input_required with the question and a requestState: %s",
           q ? q : "(none)");
        state_of(q ? q : "{}", state, sizeof(state));
        say(s,
            "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{" MODERN_META
            ",\"name\":\"t_ask\",\"arguments\":{\"a\":2},\"inputResponses\":%s,\"requestState\":\"%s\"}}",
            accept, state);
        q = wait_for(p, from, "\"id\":11,");
        ok(q && strstr(q, "input_required"), "a requestState carried to other arguments is asked again");
        say(s, "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{" MODERN_META
               ",\"name\":\"t_ask\",\"arguments\":{\"a\":1}}}");
        q = wait_for(p, from, "\"id\":12,");
        state_of(q ? q : "{}", state, sizeof(state));
        for (int i = 13; i <= 14; i++) {
                say(s,
                    "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{" MODERN_META
                    ",\"name\":\"t_ask\",\"arguments\":{\"a\":1},\"inputResponses\":%s,\"requestState\":\"%s\"}}",
                    i, accept, state);
                char id[32];
                snprintf(id, sizeof(id), "\"id\":%d,", i);
                q = wait_for(p, from, id);
                if (i == 13)
                        ok(q && strstr(q, "heard: allow") && strstr(q, "\"resultType\":\"complete\""),
                           "the retry with its state and the answer: allow");
                else
                        ok(q && strstr(q, "input_required"), "the same state again is asked again");
        }
        fixture_release(&f);
}

/* A nested caller's question goes to the host's session, never its own. */
static void nested(void)
{
        struct fixture f;
        struct peer np = { .lock = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER };
        struct dm_mcp_session *n;
        char id[512];
        const char *q;
        int nfrom = 0;

        fixture_init(&f, (int)slack_ms(5000), NULL);
        host_session = 1; /* session ids count from 1 in each server */
        say(f.s, INIT_ELICIT);
        n = dm_mcp_session_new(f.srv, on_send, &np);
        dm_mcp_session_set_principal(n, "local/sbx-0123456789ab");
        say(n, INIT_ELICIT);
        say(n, "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"t_ask_host\"}}");
        q = wait_for(&f.p, &f.from, "\"method\":\"elicitation/create\"");
        ok(q && strstr(q, "open it, tree?") && !strstr(q, " for "),
           "a nested caller's question goes to the host's session, on its own stream: %s", q ? q : "(none)");
        question_id(q ? q : "{}", id, sizeof(id));
        /* The sandbox answering the host's question: not its question. */
        say(n,
            "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"action\":\"accept\",\"content\":{\"decision\":"
            "\"allow\"}}}",
            id);
        say(f.s, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"action\":\"decline\"}}", id);
        q = wait_for(&np, &nfrom, "\"id\":5,\"result\"");
        ok(q && strstr(q, "heard: refuse") && !seen(&np, "elicitation/create"),
           "the sandbox's own session is never asked, and its answer to the host's question does not count");
        host_session = 2; /* the nested session itself */
        say(n, "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":\"t_ask_host\"}}");
        q = wait_for(&np, &nfrom, "\"id\":6,\"result\"");
        ok(q && strstr(q, "heard: no answer") && !seen(&np, "elicitation/create"),
           "a nested session named as the host is never asked either");
        dm_mcp_session_free(n);
        fixture_release(&f);
        for (int i = 0; i < np.n; i++)
                free(np.msgs[i]);
}

int main(void)
{
        ask_ms = (int)slack_ms(1000);
        legacy();
        never_asked("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                    "\"2025-11-25\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}",
                    NULL, 5000, "a client without elicitation");
        never_asked("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                    "\"2025-11-25\",\"capabilities\":{\"elicitation\":{\"url\":{}}},\"clientInfo\":{\"name\":\"t\","
                    "\"version\":\"1\"}}}",
                    NULL, 5000, "a client with url elicitation only");
        never_asked(INIT_ELICIT, "local/sbx-0123456789ab", 5000, "a nested caller");
        never_asked(INIT_ELICIT, NULL, 0, "asking off (DEMESNE_ELICIT=off)");
        modern();
        nested();
        return done_testing();
}
