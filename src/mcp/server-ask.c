/* SPDX-License-Identifier: MIT */
/* Asking the person at the client (MCP elicitation) before a call gets
 * more than the operator allows. Two eras, one question:
 *   2025-11-25  the server sends elicitation/create to the client, on the
 *               call's own stream, and waits for the answer (a timeout);
 *   2026-07-28  the call's result becomes input_required (SEP-2322) with the
 *               question embedded and a requestState that names this exact
 *               call; the client retries with the answer and the state.
 * Whatever goes wrong (no capability, a timeout, a malformed answer, an
 * unknown state) is no answer, and no answer is a refusal. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "src/mcp/server-internal.h"
#include "src/mcp/registry.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/principal.h"
#include "src/basic/timeutil.h"

#define ANSWER_FIELD "decision"

/* A legacy question in flight: its id and, once answered, the answer. */
struct dm_ask {
        char id[DM_MCP_ASK_ID_MAX];
        enum dm_ask_answer answer;
        bool done;
        struct dm_ask *next;
};

void dm_mcp_ask_init(struct dm_mcp_server *srv)
{
        pthread_condattr_t attr;

        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
        pthread_cond_init(&srv->asked, &attr);
        pthread_condattr_destroy(&attr);
}

void dm_mcp_ask_release(struct dm_mcp_server *srv)
{
        pthread_cond_destroy(&srv->asked);
}

void dm_mcp_server_set_ask_timeout(struct dm_mcp_server *srv, int timeout_ms)
{
        srv->ask_timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

bool dm_mcp_caps_elicit_form(json_object *caps)
{
        json_object *e, *form, *url;

        if (!caps || !json_object_object_get_ex(caps, "elicitation", &e) || !json_object_is_type(e, json_type_object))
                return false;
        /* 2025-11-25: an empty object is form mode (what 2025-06-18 meant). */
        if (json_object_object_get_ex(e, "form", &form))
                return json_object_is_type(form, json_type_object);
        return !json_object_object_get_ex(e, "url", &url);
}

/* The question's schema: one field, an enum of two. */
static json_object *ask_params(const char *message)
{
        json_object *p = json_object_new_object(), *schema = json_object_new_object();
        json_object *props = json_object_new_object(), *field = json_object_new_object();
        json_object *values = json_object_new_array(), *required = json_object_new_array();

        json_object_array_add(values, json_object_new_string("allow"));
        json_object_array_add(values, json_object_new_string("refuse"));
        json_object_object_add(field, "type", json_object_new_string("string"));
        json_object_object_add(field, "title", json_object_new_string("Allow this call once?"));
        json_object_object_add(field, "description",
                               json_object_new_string("allow: this one call proceeds; refuse: it is refused"));
        json_object_object_add(field, "enum", values);
        json_object_object_add(props, ANSWER_FIELD, field);
        json_object_array_add(required, json_object_new_string(ANSWER_FIELD));
        json_object_object_add(schema, "type", json_object_new_string("object"));
        json_object_object_add(schema, "properties", props);
        json_object_object_add(schema, "required", required);
        json_object_object_add(p, "mode", json_object_new_string("form"));
        json_object_object_add(p, "message", json_object_new_string(message));
        json_object_object_add(p, "requestedSchema", schema);
        return p;
}

/* An ElicitResult as an answer; -EINVAL when it is not one. */
static int parse_answer(json_object *result, enum dm_ask_answer *ret)
{
        json_object *action, *content, *v;
        const char *a;

        if (!result || !json_object_is_type(result, json_type_object) ||
            !json_object_object_get_ex(result, "action", &action) || !json_object_is_type(action, json_type_string))
                return -EINVAL;
        a = json_object_get_string(action);
        if (strcmp(a, "decline") == 0)
                *ret = DM_ASK_REFUSE;
        else if (strcmp(a, "cancel") == 0)
                *ret = DM_ASK_CANCEL;
        else if (strcmp(a, "accept") != 0)
                return -EINVAL;
        else if (!json_object_object_get_ex(result, "content", &content) ||
                 !json_object_is_type(content, json_type_object) ||
                 !json_object_object_get_ex(content, ANSWER_FIELD, &v) || !json_object_is_type(v, json_type_string))
                return -EINVAL;
        else if (strcmp(json_object_get_string(v), "allow") == 0)
                *ret = DM_ASK_ALLOW;
        else if (strcmp(json_object_get_string(v), "refuse") == 0)
                *ret = DM_ASK_REFUSE;
        else
                return -EINVAL;
        return 0;
}

const char *dm_ask_answer_name(enum dm_ask_answer a)
{
        switch (a) {
        case DM_ASK_ALLOW: return "allow";
        case DM_ASK_REFUSE: return "refuse";
        case DM_ASK_CANCEL: return "cancel";
        case DM_ASK_PENDING: return "input required";
        default: return "no answer";
        }
}

/* ---- 2025-11-25: elicitation/create, answered by id ---------------------- */

void dm_mcp_ask_answer(struct dm_mcp_session *s, struct dm_rpc_msg *m)
{
        json_object *result = NULL;
        enum dm_ask_answer a = DM_ASK_NO_ANSWER;
        const char *id = json_object_is_type(m->id, json_type_string) ? json_object_get_string(m->id) : NULL;
        struct dm_ask *found = NULL;
        int r = 0;

        if (json_object_object_get_ex(m->root, "result", &result))
                r = parse_answer(result, &a);
        pthread_mutex_lock(&s->srv->lock);
        for (struct dm_ask *q = s->asks; id && q && !found; q = q->next)
                if (!q->done && strcmp(q->id, id) == 0)
                        found = q;
        if (found) {
                /* A malformed answer is no answer: the call is refused now
                 * rather than after the timeout. */
                found->answer = r < 0 ? DM_ASK_NO_ANSWER : a;
                found->done = true;
                pthread_cond_broadcast(&s->srv->asked);
        }
        pthread_mutex_unlock(&s->srv->lock);
        /* Logged outside the lock (the log hook takes it). */
        if (!found)
                log_warning("ignored a response to no question of ours (id %.80s)",
                            m->id ? json_object_to_json_string_ext(m->id, JSON_C_TO_STRING_PLAIN) : "null");
        else if (!result)
                log_info("question '%s': the client answered with an error", id);
        else if (r < 0)
                log_warning("question '%s': the answer is not an ElicitResult with '" ANSWER_FIELD
                            "' allow or refuse; taken as no answer",
                            id);
}

/* Asks session s, which holds a reference the caller took: the call's own
 * session (the question then goes on the call's stream), or the host's
 * session of a nested caller's tree (on the session's own stream). */
static enum dm_ask_answer ask_legacy(struct dm_call *c, struct dm_mcp_session *s, const char *message)
{
        struct dm_mcp_server *srv = s->srv;
        _cleanup_free_ char *related = NULL;
        struct dm_ask q = { .answer = DM_ASK_NO_ANSWER };
        struct timespec deadline;
        json_object *msg, *id;

        related = strdup(json_object_to_json_string_ext(c->id, JSON_C_TO_STRING_PLAIN));
        if (!related)
                return DM_ASK_NO_ANSWER;
        pthread_mutex_lock(&srv->lock);
        if (!s->can_elicit || s->closing) {
                pthread_mutex_unlock(&srv->lock);
                return DM_ASK_NO_ANSWER;
        }
        /* Its own id space: a string prefix no client id needs, and the
         * call's id after it, which the HTTP transport routes on (the
         * question goes out on the call's stream). */
        if (s == c->session)
                snprintf(q.id, sizeof(q.id), DM_MCP_ASK_ID_PREFIX "%" PRIu64 DM_MCP_ASK_FOR "%.200s", ++srv->next_ask,
                         related);
        else
                snprintf(q.id, sizeof(q.id), DM_MCP_ASK_ID_PREFIX "%" PRIu64, ++srv->next_ask);
        q.next = s->asks;
        s->asks = &q;
        pthread_mutex_unlock(&srv->lock);

        id = json_object_new_string(q.id);
        msg = json_object_new_object();
        json_object_object_add(msg, "jsonrpc", json_object_new_string("2.0"));
        json_object_object_add(msg, "id", id);
        json_object_object_add(msg, "method", json_object_new_string("elicitation/create"));
        json_object_object_add(msg, "params", ask_params(message));
        dm_mcp_send_msg(s, msg);

        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += srv->ask_timeout_ms / 1000;
        deadline.tv_nsec += (long)(srv->ask_timeout_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
                deadline.tv_sec++;
                deadline.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&srv->lock);
        while (!q.done && !s->closing && !c->session->closing && !dm_cancel_fired(&c->cancel))
                if (pthread_cond_timedwait(&srv->asked, &srv->lock, &deadline) == ETIMEDOUT)
                        break;
        for (struct dm_ask **pp = &s->asks; *pp; pp = &(*pp)->next)
                if (*pp == &q) {
                        *pp = q.next;
                        break;
                }
        pthread_mutex_unlock(&srv->lock);
        if (!q.done)
                log_info("question '%s': no answer in %d ms", q.id, srv->ask_timeout_ms);
        return q.answer;
}

/* ---- 2026-07-28: input_required and requestState ------------------------- */

/* FNV-1a of the call's tool and arguments: what a requestState is for. The
 * client is the one that answers anyway, so this is to catch a state
 * carried to another call by mistake, not to resist a forger. */
static uint64_t call_digest(struct dm_call *c)
{
        json_object *args = NULL, *copy = NULL;
        uint64_t h = 1469598103934665603ULL;
        const char *parts[2] = { c->tool ? c->tool->name : "", "{}" };

        json_object_object_get_ex(c->params, "arguments", &args);
        if (args && json_object_deep_copy(args, &copy, NULL) == 0)
                parts[1] = json_object_to_json_string_ext(copy, JSON_C_TO_STRING_PLAIN);
        for (int i = 0; i < 2; i++)
                for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++)
                        h = (h ^ *p) * 1099511628211ULL;
        json_object_put(copy);
        return h;
}

static json_object *param(struct dm_call *c, const char *name, json_type type)
{
        json_object *v;

        return json_object_object_get_ex(c->params, name, &v) && json_object_is_type(v, type) ? v : NULL;
}

/* The answer the retry carries for key, when its requestState is one this
 * server issued for this principal, tool, arguments and key, unused and
 * in time: -ENOENT otherwise. Uses the state up. */
static int take_state(struct dm_call *c, const char *key, enum dm_ask_answer *ret)
{
        struct dm_mcp_server *srv = c->session->srv;
        json_object *state = param(c, "requestState", json_type_string), *responses, *answer = NULL;
        uint64_t digest = call_digest(c);
        int64_t now = dm_now_ms();
        int r = -ENOENT;

        responses = param(c, "inputResponses", json_type_object);
        if (!state || !responses || !json_object_object_get_ex(responses, key, &answer))
                return -ENOENT;
        pthread_mutex_lock(&srv->lock);
        for (size_t i = 0; i < DM_ARRAY_SIZE(srv->states); i++) {
                struct dm_ask_state *st = &srv->states[i];
                if (!st->token[0] || strcmp(st->token, json_object_get_string(state)) != 0)
                        continue;
                if (st->expires_ms > now && st->digest == digest && strcmp(st->key, key) == 0 &&
                    strcmp(st->principal, c->session->principal) == 0)
                        r = 0;
                st->token[0] = '\0'; /* used up, matched or not */
                break;
        }
        pthread_mutex_unlock(&srv->lock);
        if (r == 0 && parse_answer(answer, ret) < 0) {
                log_warning("question '%s': the retry's answer is not an ElicitResult with '" ANSWER_FIELD
                            "' allow or refuse; taken as no answer",
                            key);
                *ret = DM_ASK_NO_ANSWER;
        }
        return r;
}

/* Records a new state for the call's question; the oldest slot goes when
 * all are taken (its question is then asked again). */
static int give_state(struct dm_call *c, const char *key)
{
        struct dm_mcp_server *srv = c->session->srv;
        unsigned char raw[16];
        struct dm_ask_state *st;
        size_t oldest = 0;

        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
                return -EIO;
        pthread_mutex_lock(&srv->lock);
        for (size_t i = 0; i < DM_ARRAY_SIZE(srv->states); i++) {
                if (!srv->states[i].token[0] || srv->states[i].expires_ms < dm_now_ms()) {
                        oldest = i;
                        break;
                }
                if (srv->states[i].expires_ms < srv->states[oldest].expires_ms)
                        oldest = i;
        }
        st = &srv->states[oldest];
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(st->token + 2 * i, 3, "%02x", raw[i]);
        snprintf(st->key, sizeof(st->key), "%s", key);
        snprintf(st->principal, sizeof(st->principal), "%s", c->session->principal);
        st->digest = call_digest(c);
        st->expires_ms = dm_now_ms() + srv->ask_timeout_ms;
        snprintf(c->request_state, sizeof(c->request_state), "%s", st->token);
        pthread_mutex_unlock(&srv->lock);
        return 0;
}

static enum dm_ask_answer ask_modern(struct dm_call *c, const char *key, const char *message)
{
        json_object *meta = dm_mcp_get_meta(c->params), *caps = NULL, *req;
        enum dm_ask_answer a;

        if (!meta || !json_object_object_get_ex(meta, META_CAPS, &caps) || !dm_mcp_caps_elicit_form(caps))
                return DM_ASK_NO_ANSWER;
        if (take_state(c, key, &a) == 0)
                return a;
        if (c->input_required || give_state(c, key) < 0)
                return DM_ASK_NO_ANSWER;
        req = json_object_new_object();
        json_object_object_add(req, "method", json_object_new_string("elicitation/create"));
        json_object_object_add(req, "params", ask_params(message));
        c->input_required = json_object_new_object();
        json_object_object_add(c->input_required, key, req);
        return DM_ASK_PENDING;
}

enum dm_ask_answer dm_call_ask(struct dm_call *call, const char *key, const char *message)
{
        struct dm_mcp_session *s = call->session;
        enum dm_ask_answer a;

        /* A nested caller is a sandbox: it never answers for the person. */
        if (!s->srv->ask_timeout_ms || dm_principal_depth(s->principal) > 0 || strlen(key) >= DM_MCP_ASK_KEY_MAX)
                return DM_ASK_NO_ANSWER;
        a = call->modern ? ask_modern(call, key, message) : ask_legacy(call, s, message);
        log_info("asked the client (%s): %s: %s", key, message, dm_ask_answer_name(a));
        return a;
}

enum dm_ask_answer dm_call_ask_host(struct dm_call *call, uint64_t session_id, const char *key, const char *message)
{
        struct dm_mcp_server *srv = call->session->srv;
        struct dm_mcp_session *host = NULL;
        enum dm_ask_answer a = DM_ASK_NO_ANSWER;

        if (!srv->ask_timeout_ms || !session_id)
                return DM_ASK_NO_ANSWER;
        pthread_mutex_lock(&srv->lock);
        for (struct dm_mcp_session *s = srv->sessions; s && !host; s = s->next)
                /* Only a host caller's: never a sandbox's, whatever id. */
                if (s->id == session_id && !s->closing && !dm_principal_depth(s->principal)) {
                        host = s;
                        s->refs++;
                }
        pthread_mutex_unlock(&srv->lock);
        if (host) {
                a = ask_legacy(call, host, message);
                pthread_mutex_lock(&srv->lock);
                host->refs--;
                pthread_cond_broadcast(&srv->idle);
                pthread_mutex_unlock(&srv->lock);
        }
        log_info("asked the host's client for '%s' (%s): %s: %s", call->session->principal, key, message,
                 dm_ask_answer_name(a));
        return a;
}

json_object *dm_mcp_ask_result(struct dm_call *c, json_object *result)
{
        json_object *ir;

        if (!c->input_required || !result)
                return result;
        json_object_put(result);
        ir = json_object_new_object();
        json_object_object_add(ir, "resultType", json_object_new_string("input_required"));
        json_object_object_add(ir, "inputRequests", c->input_required);
        json_object_object_add(ir, "requestState", json_object_new_string(c->request_state));
        c->input_required = NULL;
        return ir;
}
