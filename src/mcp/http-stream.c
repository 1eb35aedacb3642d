/* SPDX-License-Identifier: MIT */
/* The exchange: one request's answer on its way from the MCP server to the
 * client. Messages arrive from any thread (the call's, the log hook's); the
 * connection's own thread reads them out through libmicrohttpd's content
 * reader, which may block here because every connection has its thread. */
#include "config.h"

#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "src/mcp/http-internal.h"
#include "src/mcp/server.h"
#include "src/mcp/jsonrpc.h"
#include "src/basic/timeutil.h"

/* Notifications waiting for a client that does not read are capped; the
 * response itself is kept apart and always delivered. */
#define PENDING_MAX (1024 * 1024)

struct http_exchange *dm_mcphttp_ex_new(struct dm_mcphttp *h, int sock_fd)
{
        struct http_exchange *ex = calloc(1, sizeof(*ex));

        if (!ex)
                return NULL;
        atomic_init(&ex->refs, 1);
        ex->h = h;
        pthread_mutex_init(&ex->lock, NULL);
        /* The cap is enforced by hand for notifications; the response must
         * fit whatever its size. */
        dm_buf_init(&ex->out, SIZE_MAX / 2);
        ex->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        ex->sock_fd = sock_fd;
        ex->keepalive_ms = h->opt.keepalive_s ? h->opt.keepalive_s * 1000 : 15000;
        if (ex->wake_fd < 0) {
                free(ex);
                return NULL;
        }
        return ex;
}

void dm_mcphttp_ex_ref(struct http_exchange *ex)
{
        atomic_fetch_add(&ex->refs, 1);
}

void dm_mcphttp_ex_unref(struct http_exchange *ex)
{
        if (!ex || atomic_fetch_sub(&ex->refs, 1) != 1)
                return;
        dm_buf_release(&ex->out);
        free(ex->final);
        free(ex->id);
        free(ex->progress_token);
        close(ex->wake_fd);
        pthread_mutex_destroy(&ex->lock);
        free(ex);
}

static void wake(struct http_exchange *ex)
{
        uint64_t one = 1;

        if (write(ex->wake_fd, &one, sizeof(one)) < 0) {
                /* EAGAIN: the counter is already non-zero, the reader will wake. */
        }
}

void dm_mcphttp_ex_push(struct http_exchange *ex, const char *json, size_t len, bool is_response, int error_code)
{
        static const char pre[] = "event: message\ndata: ", post[] = "\n\n";

        pthread_mutex_lock(&ex->lock);
        if (ex->aborted || ex->final) {
                /* Nothing follows the response (a cancelled call's late words). */
                pthread_mutex_unlock(&ex->lock);
                return;
        }
        if (is_response) {
                ex->final = malloc(len + 1);
                if (ex->final) {
                        memcpy(ex->final, json, len);
                        ex->final[len] = '\0';
                        ex->final_len = len;
                        ex->final_error = error_code;
                } else {
                        ex->aborted = true;
                }
        } else if (ex->mode != STREAM_JSON &&
                   ex->out.len - ex->out_pos + len + sizeof(pre) + sizeof(post) <= PENDING_MAX) {
                /* Framed at once: a stream that starts later sends these first. */
                if (dm_buf_append(&ex->out, pre, sizeof(pre) - 1) < 0 || dm_buf_append(&ex->out, json, len) < 0 ||
                    dm_buf_append(&ex->out, post, sizeof(post) - 1) < 0)
                        ex->aborted = true;
        } else {
                ex->dropped++;
        }
        pthread_mutex_unlock(&ex->lock);
        wake(ex);
}

void dm_mcphttp_ex_abort(struct http_exchange *ex)
{
        pthread_mutex_lock(&ex->lock);
        ex->aborted = true;
        pthread_mutex_unlock(&ex->lock);
        wake(ex);
}

bool dm_mcphttp_ex_take_final(struct http_exchange *ex, char **ret_json, size_t *ret_len, int *ret_error)
{
        bool have;

        pthread_mutex_lock(&ex->lock);
        have = ex->final && ex->mode == STREAM_NONE;
        if (have) {
                *ret_json = ex->final;
                *ret_len = ex->final_len;
                *ret_error = ex->final_error;
        }
        pthread_mutex_unlock(&ex->lock);
        return have;
}

bool dm_mcphttp_ex_answered(struct http_exchange *ex)
{
        bool r;

        pthread_mutex_lock(&ex->lock);
        r = ex->final != NULL;
        pthread_mutex_unlock(&ex->lock);
        return r;
}

void dm_mcphttp_ex_set_mode(struct http_exchange *ex, enum stream_mode mode)
{
        pthread_mutex_lock(&ex->lock);
        ex->mode = mode;
        if (mode == STREAM_JSON) {
                /* A JSON answer carries only the response. */
                ex->out.len = 0;
                ex->out_pos = 0;
        }
        pthread_mutex_unlock(&ex->lock);
}

static bool is_response_msg(json_object *msg, int *ret_code)
{
        json_object *v, *e, *code;

        *ret_code = 0;
        if (!json_object_object_get_ex(msg, "id", &v) || json_object_object_get_ex(msg, "method", &v))
                return false;
        if (json_object_object_get_ex(msg, "error", &e)) {
                if (json_object_object_get_ex(e, "code", &code))
                        *ret_code = json_object_get_int(code);
                return true;
        }
        return json_object_object_get_ex(msg, "result", &v);
}

int dm_mcphttp_ex_send(void *transport, json_object *msg)
{
        struct http_exchange *ex = transport;
        size_t len;
        char *line = dm_rpc_serialize(msg, &len);
        int code;
        bool response = is_response_msg(msg, &code);

        if (!line)
                return -ENOMEM;
        dm_mcphttp_ex_push(ex, line, len, response, code);
        free(line);
        return 0;
}

/* The JSON text of a member, printed from a copy: printing an object caches
 * the text inside it, and the original may be read by another thread (the
 * call's id, when a cancellation looks for it). */
static char *text_of(json_object *v)
{
        json_object *copy = NULL;
        char *text = NULL;

        if (!v)
                return strdup("null");
        if (json_object_deep_copy(v, &copy, NULL) == 0) {
                text = strdup(json_object_to_json_string_ext(copy, JSON_C_TO_STRING_PLAIN));
                json_object_put(copy);
        }
        return text;
}

bool dm_mcphttp_msg_route(json_object *msg, char **ret_id, char **ret_token, int *ret_code)
{
        json_object *v, *params;
        bool response = is_response_msg(msg, ret_code);

        *ret_id = *ret_token = NULL;
        if (response) {
                json_object_object_get_ex(msg, "id", &v);
                *ret_id = text_of(v);
        } else if (json_object_object_get_ex(msg, "id", &v) && json_object_is_type(v, json_type_string) &&
                   strncmp(json_object_get_string(v), DM_MCP_ASK_ID_PREFIX, strlen(DM_MCP_ASK_ID_PREFIX)) == 0 &&
                   strstr(json_object_get_string(v), DM_MCP_ASK_FOR)) {
                /* A question of a call (src/mcp/server-ask.c) goes out on that
                 * call's stream: its id ends with the call's id. */
                *ret_id = strdup(strstr(json_object_get_string(v), DM_MCP_ASK_FOR) + strlen(DM_MCP_ASK_FOR));
        } else if (json_object_object_get_ex(msg, "method", &v) &&
                   strcmp(json_object_get_string(v), "notifications/progress") == 0 &&
                   json_object_object_get_ex(msg, "params", &params) &&
                   json_object_object_get_ex(params, "progressToken", &v)) {
                *ret_token = text_of(v);
        }
        return response;
}

/* Waits for something to send. 1 = look again, 0 = a keep-alive is due,
 * -1 = the client hung up. */
static int wait_for_news(struct http_exchange *ex, int64_t deadline_ms)
{
        struct pollfd p[2] = {
                { .fd = ex->wake_fd, .events = POLLIN },
                /* POLLRDHUP: the client closed its end. Not POLLIN: a
                 * pipelined next request must not count as news. */
                { .fd = ex->sock_fd, .events = POLLRDHUP },
        };
        int timeout = (int)(deadline_ms - dm_now_ms()), n;
        uint64_t count;

        if (timeout <= 0)
                return 0;
        n = poll(p, ex->sock_fd >= 0 ? 2 : 1, timeout);
        if (n < 0)
                return errno == EINTR ? 1 : -1;
        if (n == 0)
                return 0;
        if (p[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
                return -1;
        if (p[0].revents & POLLIN && read(ex->wake_fd, &count, sizeof(count)) < 0) {
                /* EAGAIN: another wake-up was consumed already. */
        }
        return 1;
}

ssize_t dm_mcphttp_ex_read(void *cls, uint64_t pos, char *buf, size_t max)
{
        struct http_exchange *ex = cls;
        int64_t keepalive_at = dm_now_ms() + ex->keepalive_ms;

        (void)pos;
        for (;;) {
                int r;

                pthread_mutex_lock(&ex->lock);
                if (ex->out_pos < ex->out.len) {
                        size_t n = ex->out.len - ex->out_pos;
                        if (n > max)
                                n = max;
                        memcpy(buf, ex->out.data + ex->out_pos, n);
                        ex->out_pos += n;
                        if (ex->out_pos == ex->out.len)
                                ex->out.len = ex->out_pos = 0;
                        pthread_mutex_unlock(&ex->lock);
                        return (ssize_t)n;
                }
                if (ex->final_framed) {
                        pthread_mutex_unlock(&ex->lock);
                        /* The answer is all written: the stream's slot is
                         * free now, not when libmicrohttpd's completion
                         * callback runs, which can come after the client
                         * has read the end and sent its next request. */
                        dm_mcphttp_slot_put(ex);
                        return MHD_CONTENT_READER_END_OF_STREAM;
                }
                if (ex->final) {
                        int fail = ex->mode == STREAM_SSE
                                           ? dm_buf_printf(&ex->out, "event: message\ndata: %s\n\n", ex->final)
                                           : dm_buf_append(&ex->out, ex->final, ex->final_len);
                        ex->final_framed = true;
                        pthread_mutex_unlock(&ex->lock);
                        if (fail < 0)
                                return MHD_CONTENT_READER_END_WITH_ERROR;
                        continue;
                }
                if (ex->aborted) {
                        pthread_mutex_unlock(&ex->lock);
                        return MHD_CONTENT_READER_END_OF_STREAM;
                }
                pthread_mutex_unlock(&ex->lock);

                r = wait_for_news(ex, keepalive_at);
                if (r < 0) {
                        pthread_mutex_lock(&ex->lock);
                        ex->client_gone = true;
                        pthread_mutex_unlock(&ex->lock);
                        return MHD_CONTENT_READER_END_WITH_ERROR;
                }
                if (r == 0) {
                        /* Idle-timeouts in proxies and clients (Node's fetch gives
                         * up after 300 s without a byte) must not end a long call:
                         * an SSE comment, or whitespace before a JSON answer. */
                        pthread_mutex_lock(&ex->lock);
                        dm_buf_append(&ex->out, ex->mode == STREAM_SSE ? ": keepalive\n\n" : "\n",
                                      ex->mode == STREAM_SSE ? 13 : 1);
                        pthread_mutex_unlock(&ex->lock);
                        keepalive_at = dm_now_ms() + ex->keepalive_ms;
                }
        }
}

void dm_mcphttp_ex_release_cb(void *cls)
{
        dm_mcphttp_ex_unref(cls);
}
