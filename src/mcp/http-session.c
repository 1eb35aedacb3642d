/* SPDX-License-Identifier: MIT */
/* Legacy-era sessions of the HTTP transport (Mcp-Session-Id), the routing
 * of what their MCP session sends to the right open request, the end of a
 * request (and of every session, at shutdown), and the janitor thread:
 * connections' request deadlines, idle sessions, quiet refusal logging. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/socket.h>
#include <time.h>

#include "src/mcp/http-guard.h"
#include "src/mcp/http-internal.h"
#include "src/mcp/jsonrpc.h"
#include "src/mcp/server.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

#define JANITOR_TICK_MS 250
#define REFUSAL_WINDOW_MS 10000
#define REFUSALS_PER_WINDOW 5

struct http_session *dm_mcphttp_session_new(struct dm_mcphttp *h, const struct dm_mcphttp_token *owner)
{
        struct http_session *s = calloc(1, sizeof(*s));

        if (!s)
                return NULL;
        s->h = h;
        s->refs = 1;
        s->owner = owner;
        s->last_used_ms = dm_now_ms();
        if (dm_mcphttp_random_id(s->id) < 0 || !(s->mcp = dm_mcp_session_new(h->srv, dm_mcphttp_session_send, s))) {
                free(s);
                return NULL;
        }
        dm_mcp_session_set_principal(s->mcp, dm_mcphttp_principal_of(h, owner));
        return s;
}

struct http_session *dm_mcphttp_session_find(struct dm_mcphttp *h, const char *id, const struct dm_mcphttp_token *owner)
{
        struct http_session *found = NULL;
        size_t len = strlen(id);

        pthread_mutex_lock(&h->lock);
        /* Session ids are bearer secrets of a kind: compare in constant
         * time. Another token's session is as unknown as no session. */
        for (struct http_session *s = h->sessions; s; s = s->next)
                if (dm_mcphttp_secret_equal(id, len, s->id, sizeof(s->id) - 1) && s->owner == owner) {
                        found = s;
                        s->refs++;
                        break;
                }
        pthread_mutex_unlock(&h->lock);
        return found;
}

void dm_mcphttp_session_ref_locked(struct http_session *s)
{
        s->refs++;
}

void dm_mcphttp_session_unref(struct http_session *s)
{
        bool last;

        if (!s)
                return;
        pthread_mutex_lock(&s->h->lock);
        last = --s->refs == 0;
        pthread_mutex_unlock(&s->h->lock);
        if (!last)
                return;
        /* Cancels what still runs and waits for it: the containers are gone
         * when this returns. */
        dm_mcp_session_free(s->mcp);
        free(s);
}

int dm_mcphttp_session_list(struct http_session *s)
{
        struct dm_mcphttp *h = s->h;
        int r = 0;

        pthread_mutex_lock(&h->lock);
        if (h->stopping || h->n_sessions >= h->opt.max_sessions) {
                r = -EBUSY;
        } else {
                s->listed = true;
                s->refs++;
                s->next = h->sessions;
                h->sessions = s;
                h->n_sessions++;
                s->last_used_ms = dm_now_ms();
        }
        pthread_mutex_unlock(&h->lock);
        return r;
}

static bool unlist_locked(struct http_session *s)
{
        struct dm_mcphttp *h = s->h;

        if (!s->listed)
                return false;
        for (struct http_session **pp = &h->sessions; *pp; pp = &(*pp)->next)
                if (*pp == s) {
                        *pp = s->next;
                        break;
                }
        s->listed = false;
        h->n_sessions--;
        return true;
}

void dm_mcphttp_session_end(struct http_session *s)
{
        struct dm_mcphttp *h = s->h;
        bool was_listed;

        pthread_mutex_lock(&h->lock);
        was_listed = unlist_locked(s);
        /* Its open requests end without an answer; ending them cancels
         * their calls (see request_done). */
        for (struct http_exchange *ex = s->exchanges; ex; ex = ex->next)
                dm_mcphttp_ex_abort(ex);
        if (s->get)
                dm_mcphttp_ex_abort(s->get);
        pthread_mutex_unlock(&h->lock);
        if (was_listed)
                dm_mcphttp_session_unref(s);
}

void dm_mcphttp_session_cancel(struct http_session *s, const char *id)
{
        char *msg = NULL;
        int n = asprintf(&msg,
                         "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                         "{\"requestId\":%s,\"reason\":\"the HTTP stream was closed\"}}",
                         id);

        if (n > 0)
                dm_mcp_session_handle(s->mcp, msg, (size_t)n);
        free(msg);
}

/* ---- routing ------------------------------------------------------------------ */

int dm_mcphttp_session_send(void *transport, json_object *msg)
{
        struct http_session *s = transport;
        struct http_exchange *target = NULL;
        char *id, *token;
        int code;
        size_t len;
        char *line = dm_rpc_serialize(msg, &len);
        bool response = dm_mcphttp_msg_route(msg, &id, &token, &code);

        if (!line) {
                free(id);
                free(token);
                return -ENOMEM;
        }
        pthread_mutex_lock(&s->h->lock);
        /* Newest first: a reused id finds its new request, not the
         * answered one whose stream is still ending. */
        for (struct http_exchange *ex = s->exchanges; ex && !target; ex = ex->next)
                if ((id && ex->id && strcmp(ex->id, id) == 0) ||
                    (token && ex->progress_token && strcmp(ex->progress_token, token) == 0))
                        target = ex;
        /* What belongs to no request (log records, a job's end) goes to the
         * GET stream; without one it is dropped, as the spec allows. */
        if (!target && !response)
                target = s->get;
        if (target)
                dm_mcphttp_ex_push(target, line, len, response, code);
        pthread_mutex_unlock(&s->h->lock);
        free(line);
        free(id);
        free(token);
        return target ? 0 : -ENOENT;
}

int dm_mcphttp_session_register(struct http_session *s, struct http_exchange *ex)
{
        pthread_mutex_lock(&s->h->lock);
        /* An answered request's id is free at once, though its stream may
         * still be sending the answer: the client may reuse it as soon as
         * it has read it (CI, the dockerd step: a 400 in that gap). */
        for (struct http_exchange *o = s->exchanges; o; o = o->next)
                if (ex->id && o->id && strcmp(o->id, ex->id) == 0 && !dm_mcphttp_ex_answered(o)) {
                        pthread_mutex_unlock(&s->h->lock);
                        return -EEXIST;
                }
        s->refs++;
        s->busy++;
        ex->session = s;
        ex->next = s->exchanges;
        s->exchanges = ex;
        ex->registered = true;
        pthread_mutex_unlock(&s->h->lock);
        return 0;
}

int dm_mcphttp_session_attach_get(struct http_session *s, struct http_exchange *ex)
{
        int r = 0;

        pthread_mutex_lock(&s->h->lock);
        if (s->get || !s->listed) {
                r = s->get ? -EEXIST : -ENOENT;
        } else {
                s->refs++;
                s->get = ex;
                ex->session = s;
                ex->registered = true;
        }
        pthread_mutex_unlock(&s->h->lock);
        return r;
}

void dm_mcphttp_session_unregister(struct http_exchange *ex)
{
        struct http_session *s = ex->session;

        pthread_mutex_lock(&s->h->lock);
        if (ex->registered) {
                if (s->get == ex) {
                        s->get = NULL;
                } else {
                        for (struct http_exchange **pp = &s->exchanges; *pp; pp = &(*pp)->next)
                                if (*pp == ex) {
                                        *pp = ex->next;
                                        break;
                                }
                        s->busy--;
                }
                ex->registered = false;
                s->last_used_ms = dm_now_ms();
        }
        pthread_mutex_unlock(&s->h->lock);
}

/* ---- stream slots ------------------------------------------------------------- */

int dm_mcphttp_slot_take(struct dm_mcphttp *h, struct http_session *s, struct http_exchange *ex)
{
        int r = 0;

        pthread_mutex_lock(&h->lock);
        if (h->n_streams >= h->opt.max_streams)
                r = -EBUSY;
        else if (s && s->n_streams >= h->opt.max_session_streams)
                r = -EAGAIN;
        else {
                h->n_streams++;
                if (s)
                        s->n_streams++;
                ex->counted = true;
                ex->slot_session = s;
                ex->all_next = h->streams;
                if (h->streams)
                        h->streams->all_pprev = &ex->all_next;
                ex->all_pprev = &h->streams;
                h->streams = ex;
        }
        pthread_mutex_unlock(&h->lock);
        return r;
}

void dm_mcphttp_slot_put(struct http_exchange *ex)
{
        struct dm_mcphttp *h = ex->h;

        pthread_mutex_lock(&h->lock);
        if (ex->counted) {
                h->n_streams--;
                if (ex->slot_session)
                        ex->slot_session->n_streams--;
                *ex->all_pprev = ex->all_next;
                if (ex->all_next)
                        ex->all_next->all_pprev = ex->all_pprev;
                ex->counted = false;
        }
        pthread_mutex_unlock(&h->lock);
}

/* ---- the janitor ----------------------------------------------------------------- */

void dm_mcphttp_refused(struct dm_mcphttp *h, const char *fmt, ...)
{
        char msg[512];
        va_list ap;
        bool say;
        int64_t now = dm_now_ms();

        pthread_mutex_lock(&h->lock);
        if (now - h->refused_window_ms >= REFUSAL_WINDOW_MS && !h->refused_quiet) {
                h->refused_window_ms = now;
                h->refused_logged = 0;
        }
        say = h->refused_logged < REFUSALS_PER_WINDOW;
        if (say)
                h->refused_logged++;
        else
                h->refused_quiet++;
        pthread_mutex_unlock(&h->lock);
        if (!say)
                return;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        log_warning("http: refused: %s", msg);
}

/* ---- connections and their deadlines (the janitor enforces them) ---- */

void dm_mcphttp_conn_deadline(struct dm_mcphttp *h, struct http_conn *conn, bool running)
{
        if (!conn)
                return;
        pthread_mutex_lock(&h->lock);
        conn->deadline_ms = running ? 0 : dm_now_ms() + (int64_t)h->opt.request_timeout_s * 1000;
        pthread_mutex_unlock(&h->lock);
}

void dm_mcphttp_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode code)
{
        struct dm_mcphttp *h = cls;
        struct http_conn *conn = *socket_context;

        if (code == MHD_CONNECTION_NOTIFY_STARTED) {
                const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
                const union MHD_ConnectionInfo *peer = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
                conn = calloc(1, sizeof(*conn));
                if (!conn || !info) {
                        free(conn);
                        return;
                }
                conn->fd = info->connect_fd;
                if (!peer || !peer->client_addr ||
                    getnameinfo(peer->client_addr,
                                peer->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                         : sizeof(struct sockaddr_in),
                                conn->addr, sizeof(conn->addr), NULL, 0, NI_NUMERICHOST) != 0)
                        snprintf(conn->addr, sizeof(conn->addr), "?");
                pthread_mutex_lock(&h->lock);
                conn->deadline_ms = dm_now_ms() + (int64_t)h->opt.request_timeout_s * 1000;
                conn->next = h->conns;
                if (h->conns)
                        h->conns->pprev = &conn->next;
                conn->pprev = &h->conns;
                h->conns = conn;
                pthread_mutex_unlock(&h->lock);
                *socket_context = conn;
        } else if (conn) {
                /* libmicrohttpd closes the socket only after this returns, so
                 * the janitor never shuts down a reused descriptor. */
                pthread_mutex_lock(&h->lock);
                if (conn->calling)
                        pthread_cond_broadcast(&h->slot_freed);
                *conn->pprev = conn->next;
                if (conn->next)
                        conn->next->pprev = conn->pprev;
                pthread_mutex_unlock(&h->lock);
                free(conn);
                *socket_context = NULL;
        }
}

/* Calls from addr holding a slot now; h->lock held. */
static unsigned calls_from(struct dm_mcphttp *h, const char *addr)
{
        unsigned n = 0;

        for (struct http_conn *x = h->conns; x; x = x->next)
                n += x->calling && strcmp(x->addr, addr) == 0;
        return n;
}

int dm_mcphttp_gate_enter(struct dm_mcphttp *h, struct http_conn *conn)
{
        unsigned max = h->opt.max_connections_per_ip;
        struct timespec until;
        int r = 0;

        if (!conn)
                return 0;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += h->opt.request_timeout_s ? h->opt.request_timeout_s : 30;
        pthread_mutex_lock(&h->lock);
        /* Waiting here holds this connection's thread, nothing else: the
         * connections are bounded by their own limits. */
        while (max && !h->stopping && calls_from(h, conn->addr) >= max && r != ETIMEDOUT)
                r = pthread_cond_timedwait(&h->slot_freed, &h->lock, &until);
        if (h->stopping) {
                r = -ESHUTDOWN;
        } else if (max && calls_from(h, conn->addr) >= max) {
                r = -EAGAIN;
        } else {
                conn->calling = true;
                r = 0;
        }
        pthread_mutex_unlock(&h->lock);
        return r;
}

void dm_mcphttp_gate_leave(struct dm_mcphttp *h, struct http_conn *conn)
{
        if (!conn)
                return;
        pthread_mutex_lock(&h->lock);
        if (conn->calling) {
                conn->calling = false;
                pthread_cond_broadcast(&h->slot_freed);
        }
        pthread_mutex_unlock(&h->lock);
}

void dm_mcphttp_gate_wake(struct dm_mcphttp *h)
{
        pthread_mutex_lock(&h->lock);
        pthread_cond_broadcast(&h->slot_freed);
        pthread_mutex_unlock(&h->lock);
}

/* ---- the end of a request ---- */

void dm_mcphttp_ex_end(struct dm_mcphttp *h, struct MHD_Connection *c, struct http_exchange *ex,
                       enum MHD_RequestTerminationCode toe)
{
        bool answered = dm_mcphttp_ex_answered(ex);

        dm_mcphttp_slot_put(ex);
        if (ex->session) {
                dm_mcphttp_session_unregister(ex);
                if (!answered && ex->id)
                        dm_mcphttp_session_cancel(ex->session, ex->id);
                dm_mcphttp_session_unref(ex->session);
        } else if (ex->ephemeral) {
                /* Cancels the call if it still runs, and waits for it. */
                dm_mcp_session_free(ex->ephemeral);
                ex->ephemeral = NULL;
        }
        if (ex->mode != STREAM_NONE) {
                bool stopping;
                pthread_mutex_lock(&h->lock);
                stopping = h->stopping;
                pthread_mutex_unlock(&h->lock);
                MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, h->opt.request_timeout_s);
                if (!answered && ex->id && !stopping)
                        log_info("http: request %s ended before its answer (%s): cancelled", ex->id,
                                 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "stream ended"
                                                                            : "client closed the stream");
        }
        if (ex->dropped)
                log_warning("http: %u notifications dropped for request %s: the client did not read them", ex->dropped,
                            ex->id ? ex->id : "(GET stream)");
        dm_mcphttp_ex_unref(ex);
}

void dm_mcphttp_sessions_end_all(struct dm_mcphttp *h)
{
        struct http_session *list[64];
        size_t n;

        do {
                pthread_mutex_lock(&h->lock);
                for (struct http_exchange *ex = h->streams; ex; ex = ex->all_next)
                        dm_mcphttp_ex_abort(ex);
                /* Unlisted here, so the table's reference becomes ours. */
                for (n = 0; h->sessions && n < DM_ARRAY_SIZE(list); n++) {
                        list[n] = h->sessions;
                        h->sessions = list[n]->next;
                        list[n]->listed = false;
                        h->n_sessions--;
                }
                pthread_mutex_unlock(&h->lock);
                for (size_t i = 0; i < n; i++) {
                        dm_mcphttp_session_end(list[i]);
                        dm_mcphttp_session_unref(list[i]);
                }
        } while (n == DM_ARRAY_SIZE(list));
}

static void *janitor_main(void *arg)
{
        struct dm_mcphttp *h = arg;

        pthread_mutex_lock(&h->lock);
        while (!h->janitor_stop) {
                struct http_session *expired = NULL;
                unsigned quiet = 0, slow = 0;
                int64_t now = dm_now_ms();
                struct timespec until;

                /* A request must arrive whole in time; libmicrohttpd's idle
                 * timeout alone restarts with each byte of a trickle. */
                for (struct http_conn *c = h->conns; c; c = c->next)
                        if (c->deadline_ms && now > c->deadline_ms) {
                                shutdown(c->fd, SHUT_RDWR);
                                c->deadline_ms = 0;
                                slow++;
                        }
                for (struct http_session **pp = &h->sessions; *pp;) {
                        struct http_session *s = *pp;
                        if (s->busy == 0 && !s->get && now - s->last_used_ms > (int64_t)h->opt.session_idle_s * 1000) {
                                unlist_locked(s);
                                s->next = expired;
                                expired = s;
                                continue;
                        }
                        pp = &s->next;
                }
                if (h->refused_quiet && now - h->refused_window_ms >= REFUSAL_WINDOW_MS) {
                        quiet = h->refused_quiet;
                        h->refused_quiet = 0;
                        h->refused_logged = 0;
                        h->refused_window_ms = now;
                }
                pthread_mutex_unlock(&h->lock);

                if (slow)
                        dm_mcphttp_refused(h, "%u connection%s sent no whole request within %u s: closed", slow,
                                           slow == 1 ? "" : "s", h->opt.request_timeout_s);
                if (quiet)
                        log_warning("http: refused %u more requests in the last %d s (not logged one by one)", quiet,
                                    REFUSAL_WINDOW_MS / 1000);
                while (expired) {
                        struct http_session *s = expired;
                        expired = s->next;
                        log_info("http: session %.8s... ended after %u s without requests", s->id,
                                 h->opt.session_idle_s);
                        dm_mcphttp_session_unref(s);
                }

                pthread_mutex_lock(&h->lock);
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += JANITOR_TICK_MS * 1000000L;
                if (until.tv_nsec >= 1000000000L) {
                        until.tv_sec++;
                        until.tv_nsec -= 1000000000L;
                }
                if (!h->janitor_stop)
                        pthread_cond_timedwait(&h->tick, &h->lock, &until);
        }
        pthread_mutex_unlock(&h->lock);
        return NULL;
}

int dm_mcphttp_janitor_start(struct dm_mcphttp *h, pthread_t *ret)
{
        return -pthread_create(ret, NULL, janitor_main, h);
}

void dm_mcphttp_janitor_stop(struct dm_mcphttp *h, pthread_t th)
{
        pthread_mutex_lock(&h->lock);
        h->janitor_stop = true;
        pthread_cond_broadcast(&h->tick);
        pthread_mutex_unlock(&h->lock);
        pthread_join(th, NULL);
}
