/* SPDX-License-Identifier: MIT */
/* An MCP client (client.h): one request at a time per server, every answer
 * capped, every wait bounded by the request's deadline and its cancel. The
 * server is not trusted to be well-formed: a malformed, oversized or
 * mismatched answer is an error naming it, and a stdio server that gave
 * one is ended (it is started again on a later request, after a delay:
 * client-start.c). */
#include "config.h"
#include "src/mcp/client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/basic/buf.h"
#include "src/basic/curl-api.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/pidfd.h"
#include "src/basic/timeutil.h"
#include "src/mcp/client-internal.h"
#include "src/mcp/jsonrpc.h"

#define PROTOCOL_VERSION "2025-06-18"
#define STOP_GRACE_MS 2000
#define STDERR_LINE_MAX 4096
#define LIST_PAGES_MAX 100
/* In the errno a child reports: it failed to take on its user, not to exec. */
#define CHILD_AS_USER 0x10000

extern char **environ;

struct dm_mcpclient {
        const struct dm_mcpclient_spec *spec;
        size_t max_message;
        int64_t timeout_ms;
        int turn_fd; /* one request at a time: an eventfd holding 1 while free */
        int64_t next_id;
        char protocol[40]; /* the version initialize agreed on */

        /* stdio */
        int pid, pidfd, in_fd, out_fd;
        struct dm_buf rbuf; /* what was read past the last whole line */
        bool running;
        int64_t started_ms, next_start_ms; /* when it started; when it may start again */
        struct dm_mcpclient_backoff backoff;

        /* Streamable HTTP */
        char *session_id;
};

const char *dm_mcpclient_name(const struct dm_mcpclient *c)
{
        return c->spec->name;
}

/* ---- answers -------------------------------------------------------------------- */

/* One message from the server while request want waits. 1: it is want's
 * answer (*ret_result set, or -EREMOTEIO returned for an error answer); 0:
 * something else to pass over (a notification, an answer to a request
 * given up on); < 0: a protocol error. Server-to-client requests get
 * *ret_reply, an answer to send back (ping: {}, anything else: method not
 * found). */
static int take_answer(struct dm_mcpclient *c, json_object *msg, int64_t want, json_object **ret_result,
                       json_object **ret_reply, struct dm_error *err)
{
        json_object *id = NULL, *v;

        if (!json_object_is_type(msg, json_type_object))
                return dm_error_set(err, -EPROTO, "host MCP server '%s' sent a message that is not an object",
                                    c->spec->name);
        json_object_object_get_ex(msg, "id", &id);
        if (json_object_object_get_ex(msg, "method", &v)) {
                if (id && ret_reply) {
                        bool ping = json_object_is_type(v, json_type_string) &&
                                    strcmp(json_object_get_string(v), "ping") == 0;
                        *ret_reply = ping ? dm_rpc_result(id, json_object_new_object())
                                          : dm_rpc_error(id, DM_RPC_METHOD_NOT_FOUND, "not supported", NULL);
                }
                return 0;
        }
        if (!id || !json_object_is_type(id, json_type_int))
                return dm_error_set(err, -EPROTO, "host MCP server '%s' answered with an id demesne never sent (%.40s)",
                                    c->spec->name, id ? json_object_to_json_string(id) : "none");
        if (json_object_get_int64(id) < want && json_object_get_int64(id) > 0)
                return 0; /* a request that timed out or was cancelled */
        if (json_object_get_int64(id) != want)
                return dm_error_set(err, -EPROTO, "host MCP server '%s' answered request %lld, not %lld", c->spec->name,
                                    (long long)json_object_get_int64(id), (long long)want);
        if (json_object_object_get_ex(msg, "error", &v)) {
                json_object *m = NULL;
                if (json_object_is_type(v, json_type_object))
                        json_object_object_get_ex(v, "message", &m);
                return dm_error_set(err, -EREMOTEIO, "%.1500s",
                                    m && json_object_is_type(m, json_type_string) ? json_object_get_string(m)
                                                                                  : "an error without a message");
        }
        if (!json_object_object_get_ex(msg, "result", &v) || !json_object_is_type(v, json_type_object))
                return dm_error_set(err, -EPROTO, "host MCP server '%s' answered without a result object",
                                    c->spec->name);
        *ret_result = json_object_get(v);
        return 1;
}

static json_object *parse_json(const char *data, size_t len)
{
        json_tokener *tok = json_tokener_new();
        json_object *o;

        if (!tok)
                return NULL;
        o = json_tokener_parse_ex(tok, data, (int)len);
        if (o && json_tokener_get_parse_end(tok) < len) {
                /* Only whitespace may follow. */
                for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
                        if (!strchr(" \t\r\n", data[i])) {
                                json_object_put(o);
                                o = NULL;
                                break;
                        }
        }
        json_tokener_free(tok);
        return o;
}

static json_object *request_msg(int64_t id, const char *method, json_object *params)
{
        json_object *m = json_object_new_object();

        json_object_object_add(m, "jsonrpc", json_object_new_string("2.0"));
        if (id > 0)
                json_object_object_add(m, "id", json_object_new_int64(id));
        json_object_object_add(m, "method", json_object_new_string(method));
        if (params)
                json_object_object_add(m, "params", json_object_get(params));
        return m;
}

/* ---- stdio ---------------------------------------------------------------------- */

struct stderr_reader {
        char *name;
        int fd;
};

static int log_stderr_line(void *userdata, char *line, size_t len)
{
        struct stderr_reader *r = userdata;

        for (size_t i = 0; i < len; i++)
                if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
                        line[i] = ' ';
        log_info("host mcp '%s': %s", r->name, line);
        return 0;
}

/* Detached: it owns its fd and name, so a grandchild that keeps the pipe
 * open keeps only this thread, never the client. */
static void *stderr_main(void *arg)
{
        struct stderr_reader *r = arg;

        dm_io_for_each_line(r->fd, STDERR_LINE_MAX, UINT64_MAX, log_stderr_line, r);
        close(r->fd);
        free(r->name);
        free(r);
        return NULL;
}

static void stdio_stop(struct dm_mcpclient *c)
{
        if (!c->running)
                return;
        c->running = false;
        if (c->in_fd >= 0)
                close(c->in_fd);
        c->in_fd = -1;
        if (c->out_fd >= 0)
                close(c->out_fd);
        c->out_fd = -1;
        dm_buf_reset(&c->rbuf);
        /* A closed stdin ends a well-behaved server; then SIGTERM, then
         * SIGKILL, to its whole process group (npx and the node it starts:
         * what outlives the leader goes too). The leader stays unreaped
         * until the end, so its group number cannot be reused meanwhile. */
        if (c->pidfd >= 0) {
                struct pollfd p = { .fd = c->pidfd, .events = POLLIN };
                if (poll(&p, 1, STOP_GRACE_MS) != 1) {
                        dm_pidfd_kill_group(c->pidfd, c->pid, SIGTERM);
                        p.revents = 0;
                        poll(&p, 1, STOP_GRACE_MS);
                }
                dm_pidfd_kill_group(c->pidfd, c->pid, SIGKILL);
        } else if (c->pid > 0) {
                kill(-c->pid, SIGKILL);
        }
        if (c->pid > 0)
                while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        if (c->pidfd >= 0)
                close(c->pidfd);
        c->pidfd = -1;
        c->pid = 0;
}

/* Its stderr lines to the log, on a thread that takes *fd (left at -1)
 * when it starts. */
static void start_stderr_reader(const char *name, int *fd)
{
        struct stderr_reader *sr = calloc(1, sizeof(*sr));
        pthread_attr_t attr;
        pthread_t th;

        if (sr && (sr->name = strdup(name))) {
                sr->fd = *fd;
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                if (pthread_create(&th, &attr, stderr_main, sr) == 0)
                        *fd = -1;
                pthread_attr_destroy(&attr);
        }
        if (*fd >= 0 && sr) {
                free(sr->name);
                free(sr);
        }
}

static int stdio_start(struct dm_mcpclient *c, struct dm_error *err)
{
        const struct dm_mcpclient_spec *s = c->spec;
        int in[2] = { -1, -1 }, out[2] = { -1, -1 }, errp[2] = { -1, -1 }, status[2] = { -1, -1 };
        struct dm_mcpclient_identity ident;
        size_t n_args = 0;
        char **argv = NULL, **envp = NULL;
        int r = 0, child_errno = 0;
        pid_t pid;
        sigset_t none;

        while (s->args[n_args])
                n_args++;
        c->started_ms = dm_now_ms();
        if ((r = dm_mcpclient_identity_lookup(s, &ident, err)) < 0)
                return r;
        /* Everything the child needs is made before fork: the process has
         * threads, so the child may only call async-signal-safe functions.
         * Its environment is its own: demesne's holds the keys it lends
         * agents, and nested callers would have them for one call. */
        argv = calloc(n_args + 2, sizeof(*argv));
        envp = dm_mcpclient_env(s, environ, ident.home_env);
        if (!argv || !envp) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto out;
        }
        argv[0] = s->command;
        memcpy(argv + 1, s->args, n_args * sizeof(*argv));
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 ||
            pipe2(status, O_CLOEXEC) < 0) {
                r = dm_error_set(err, -errno, "host MCP server '%s': pipe: %s", s->name, strerror(errno));
                goto out;
        }
        sigemptyset(&none);
        pid = fork();
        if (pid < 0) {
                r = dm_error_set(err, -errno, "host MCP server '%s': fork: %s", s->name, strerror(errno));
                goto out;
        }
        if (pid == 0) {
                int e;
                /* Its own process group, so that stopping it reaches what it
                 * starts. No PR_SET_PDEATHSIG: it fires when the forking
                 * thread ends, and a restart forks on a call's thread; if
                 * demesne dies, the server's stdin closes instead. */
                setpgid(0, 0);
                if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(errp[1], 2) < 0)
                        goto fail;
                signal(SIGPIPE, SIG_DFL);
                sigprocmask(SIG_SETMASK, &none, NULL);
                if ((e = dm_mcpclient_identity_apply(&ident)) < 0) {
                        e = -e | CHILD_AS_USER;
                        goto tell;
                }
                execvpe(argv[0], argv, envp);
fail:
                e = errno;
tell:
                if (write(status[1], &e, sizeof(e)) < 0)
                        _exit(126);
                _exit(127);
        }
        close(status[1]);
        status[1] = -1;
        while ((r = (int)read(status[0], &child_errno, sizeof(child_errno))) < 0 && errno == EINTR)
                ;
        c->pid = pid;
        c->pidfd = dm_pidfd_open(pid);
        c->running = true;
        c->in_fd = in[1];
        c->out_fd = out[0];
        in[1] = out[0] = -1;
        if (r > 0 && (child_errno & CHILD_AS_USER)) {
                stdio_stop(c);
                child_errno &= ~CHILD_AS_USER;
                r = dm_error_set(err, -child_errno, "host MCP server '%s': cannot become user '%s': %s", s->name,
                                 s->user, strerror(child_errno));
                goto out;
        }
        if (r > 0) {
                stdio_stop(c);
                r = dm_error_set(err, -child_errno, "host MCP server '%s': cannot run '%s': %s", s->name, s->command,
                                 strerror(child_errno));
                goto out;
        }
        r = 0;
        fcntl(c->out_fd, F_SETFL, fcntl(c->out_fd, F_GETFL) | O_NONBLOCK);
        start_stderr_reader(s->name, &errp[0]);
out:
        for (int i = 0; i < 2; i++) {
                if (in[i] >= 0)
                        close(in[i]);
                if (out[i] >= 0)
                        close(out[i]);
                if (errp[i] >= 0)
                        close(errp[i]);
                if (status[i] >= 0)
                        close(status[i]);
        }
        free(argv);
        free(envp);
        dm_mcpclient_identity_release(&ident);
        return r;
}

static int stdio_send(struct dm_mcpclient *c, json_object *msg, struct dm_error *err)
{
        size_t len;
        char *line = dm_rpc_serialize(msg, &len);
        int r;

        if (!line)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_write_all(c->in_fd, line, len);
        if (r >= 0)
                r = dm_write_all(c->in_fd, "\n", 1);
        free(line);
        if (r < 0) {
                stdio_stop(c);
                return dm_error_set(err, -EPIPE, "host MCP server '%s' is gone (it closed its input)", c->spec->name);
        }
        return 0;
}

/* The next whole line from the server into *ret (malloc'd). */
static int stdio_read_line(struct dm_mcpclient *c, int64_t deadline, struct dm_cancel *cancel, char **ret,
                           size_t *ret_len, struct dm_error *err)
{
        for (;;) {
                char *nl = c->rbuf.len ? memchr(c->rbuf.data, '\n', c->rbuf.len) : NULL;
                struct pollfd p[2] = { { .fd = c->out_fd, .events = POLLIN },
                                       { .fd = cancel ? cancel->fd : -1, .events = POLLIN } };
                char chunk[16384];
                int64_t left;
                ssize_t n;

                if (nl) {
                        size_t len = (size_t)(nl - c->rbuf.data);
                        if (len > c->max_message)
                                return dm_error_set(err, -E2BIG, "host MCP server '%s' sent a message over %zu bytes",
                                                    c->spec->name, c->max_message);
                        *ret = strndup(c->rbuf.data, len);
                        if (!*ret)
                                return dm_error_set(err, -ENOMEM, "out of memory");
                        *ret_len = len;
                        memmove(c->rbuf.data, nl + 1, c->rbuf.len - len - 1);
                        c->rbuf.len -= len + 1;
                        c->rbuf.data[c->rbuf.len] = '\0';
                        return 0;
                }
                if (c->rbuf.len > c->max_message)
                        return dm_error_set(err, -E2BIG, "host MCP server '%s' sent a message over %zu bytes",
                                            c->spec->name, c->max_message);
                if (cancel && dm_cancel_fired(cancel))
                        return dm_error_set(err, -ECANCELED, "cancelled");
                left = deadline - dm_now_ms();
                if (left <= 0)
                        return dm_error_set(err, -ETIMEDOUT, "host MCP server '%s' did not answer in %lld s",
                                            c->spec->name, (long long)(c->timeout_ms / 1000));
                if (poll(p, 2, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
                        return dm_error_set(err, -errno, "poll: %s", strerror(errno));
                if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                n = read(c->out_fd, chunk, sizeof(chunk));
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                        continue;
                if (n <= 0)
                        return dm_error_set(err, -EPIPE, "host MCP server '%s' exited", c->spec->name);
                if (dm_buf_append(&c->rbuf, chunk, (size_t)n) < 0)
                        return dm_error_set(err, -E2BIG, "host MCP server '%s' sent a message over %zu bytes",
                                            c->spec->name, c->max_message);
        }
}

static int stdio_request(struct dm_mcpclient *c, int64_t id, json_object *msg, struct dm_cancel *cancel,
                         json_object **ret_result, struct dm_error *err)
{
        int64_t deadline = dm_now_ms() + c->timeout_ms;
        int r = stdio_send(c, msg, err);

        while (r == 0 && id > 0) {
                json_object *m, *reply = NULL;
                char *line = NULL;
                size_t len = 0;

                r = stdio_read_line(c, deadline, cancel, &line, &len, err);
                if (r < 0)
                        break;
                if (len == 0 || (len == 1 && line[0] == '\r')) {
                        free(line);
                        continue;
                }
                m = parse_json(line, len);
                free(line);
                if (!m) {
                        r = dm_error_set(err, -EPROTO, "host MCP server '%s' sent malformed JSON", c->spec->name);
                        break;
                }
                r = take_answer(c, m, id, ret_result, &reply, err);
                json_object_put(m);
                if (reply) {
                        struct dm_error e2 = { 0 };
                        stdio_send(c, reply, &e2);
                        json_object_put(reply);
                        if (!c->running)
                                r = dm_error_set(err, -EPIPE, "host MCP server '%s' is gone", c->spec->name);
                }
                if (r == 1)
                        return 0;
        }
        if (r == -ETIMEDOUT || r == -ECANCELED) {
                /* It may still answer: that answer is passed over later. */
                json_object *p = json_object_new_object(), *n;
                struct dm_error e2 = { 0 };

                json_object_object_add(p, "requestId", json_object_new_int64(id));
                json_object_object_add(p, "reason",
                                       json_object_new_string(r == -ECANCELED ? "cancelled" : "timed out"));
                n = request_msg(0, "notifications/cancelled", p);
                json_object_put(p);
                if (c->running)
                        stdio_send(c, n, &e2);
                json_object_put(n);
        } else if (r < 0 && r != -EREMOTEIO) {
                /* Out of step with it (a lie, garbage, an overlong line): end
                 * it, so that the next request starts afresh. */
                stdio_stop(c);
        }
        return r;
}

/* ---- Streamable HTTP ------------------------------------------------------------ */

struct http_reply {
        struct dm_buf body;
        bool too_big, event_stream;
        char *session_id;
        struct dm_cancel *cancel;
};

static size_t http_write(char *p, size_t size, size_t n, void *userdata)
{
        struct http_reply *h = userdata;

        if (dm_buf_append(&h->body, p, size * n) < 0) {
                h->too_big = true;
                return 0;
        }
        return size * n;
}

static size_t http_header(char *p, size_t size, size_t n, void *userdata)
{
        struct http_reply *h = userdata;
        size_t len = size * n;

        if (len > 15 && strncasecmp(p, "Mcp-Session-Id:", 15) == 0) {
                const char *v = p + 15;
                size_t vl = len - 15;
                while (vl && (*v == ' ' || *v == '\t'))
                        v++, vl--;
                while (vl && strchr(" \t\r\n", v[vl - 1]))
                        vl--;
                free(h->session_id);
                h->session_id = vl && vl < 256 ? strndup(v, vl) : NULL;
        } else if (len > 13 && strncasecmp(p, "Content-Type:", 13) == 0) {
                h->event_stream = memmem(p, len, "text/event-stream", 17) != NULL;
        }
        return len;
}

static int http_progress(void *userdata, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
        struct http_reply *h = userdata;

        (void)a, (void)b, (void)c, (void)d;
        return h->cancel && dm_cancel_fired(h->cancel);
}

/* The events of an SSE body: want's answer among them. */
static int take_sse(struct dm_mcpclient *c, char *body, int64_t want, json_object **ret_result, struct dm_error *err)
{
        struct dm_buf data;
        char *save = NULL;
        int r = 0;

        dm_buf_init(&data, c->max_message);
        /* A blank line ends an event; the body ends the last one. */
        for (char *line = body;; line = NULL) {
                char *l = strtok_r(line, "\n", &save), *end;
                bool last = l == NULL;

                if (l && (end = strchr(l, '\r')))
                        *end = '\0';
                if (l && strncmp(l, "data:", 5) == 0) {
                        const char *v = l[5] == ' ' ? l + 6 : l + 5;
                        if ((data.len && dm_buf_append(&data, "\n", 1) < 0) || dm_buf_append(&data, v, strlen(v)) < 0) {
                                r = dm_error_set(err, -E2BIG, "host MCP server '%s' sent an event over %zu bytes",
                                                 c->spec->name, c->max_message);
                                break;
                        }
                        /* strtok_r folds blank lines away: an event ends at
                         * the next line that is not data. */
                        if (!save || *save != '\n')
                                continue;
                }
                if (data.len) {
                        json_object *m = parse_json(data.data, data.len);
                        if (!m) {
                                r = dm_error_set(err, -EPROTO, "host MCP server '%s' sent malformed JSON",
                                                 c->spec->name);
                                break;
                        }
                        r = take_answer(c, m, want, ret_result, NULL, err);
                        json_object_put(m);
                        dm_buf_reset(&data);
                        if (r != 0)
                                break;
                }
                if (last)
                        break;
        }
        dm_buf_release(&data);
        if (r == 0)
                r = dm_error_set(err, -EPROTO, "host MCP server '%s' ended its event stream without an answer",
                                 c->spec->name);
        return r == 1 ? 0 : r;
}

static int http_exchange(struct dm_mcpclient *c, const char *method, int64_t id, json_object *msg,
                         struct dm_cancel *cancel, json_object **ret_result, struct dm_error *err)
{
        struct http_reply h = { .cancel = cancel };
        struct curl_slist *hdr = NULL;
        char *body = NULL, line[320];
        size_t len = 0;
        long status = 0;
        CURLcode cc;
        CURL *curl;
        int r;

        if ((r = dm_curl_api_ready(err)) < 0)
                return r;
        curl = curl_easy_init();
        if (!curl)
                return dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_init(&h.body, c->max_message);
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        hdr = curl_slist_append(hdr, "Accept: application/json, text/event-stream");
        for (char **p = c->spec->headers; *p; p++)
                hdr = curl_slist_append(hdr, *p);
        if (c->session_id) {
                snprintf(line, sizeof(line), "Mcp-Session-Id: %s", c->session_id);
                hdr = curl_slist_append(hdr, line);
        }
        if (c->protocol[0]) {
                snprintf(line, sizeof(line), "MCP-Protocol-Version: %s", c->protocol);
                hdr = curl_slist_append(hdr, line);
        }
        curl_easy_setopt(curl, CURLOPT_URL, c->spec->url);
        curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)c->timeout_ms);
        curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, http_write);
        curl_easy_setopt(curl, CURLOPT_WRITEDATA, &h);
        curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, http_header);
        curl_easy_setopt(curl, CURLOPT_HEADERDATA, &h);
        curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, http_progress);
        curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &h);
        curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
        if (msg) {
                body = dm_rpc_serialize(msg, &len);
                curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
                curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, (long)len);
        } else {
                curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method);
        }
        cc = curl_easy_perform(curl);
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        if (h.too_big)
                r = dm_error_set(err, -E2BIG, "host MCP server '%s' sent an answer over %zu bytes", c->spec->name,
                                 c->max_message);
        else if (cc == CURLE_ABORTED_BY_CALLBACK)
                r = dm_error_set(err, -ECANCELED, "cancelled");
        else if (cc == CURLE_OPERATION_TIMEDOUT)
                r = dm_error_set(err, -ETIMEDOUT, "host MCP server '%s' did not answer in %lld s", c->spec->name,
                                 (long long)(c->timeout_ms / 1000));
        else if (cc != CURLE_OK)
                r = dm_error_set(err, -EPIPE, "host MCP server '%s' cannot be reached: %s", c->spec->name,
                                 curl_easy_strerror(cc));
        else if (!msg || id <= 0)
                r = status >= 200 && status < 300 ? 0
                                                  : dm_error_set(err, -EPROTO, "host MCP server '%s' answered HTTP %ld",
                                                                 c->spec->name, status);
        else if (status != 200)
                r = dm_error_set(err, -EPROTO, "host MCP server '%s' answered HTTP %ld", c->spec->name, status);
        else if (h.event_stream)
                r = take_sse(c, h.body.data ? h.body.data : (char[]){ 0 }, id, ret_result, err);
        else {
                json_object *m = h.body.data ? parse_json(h.body.data, h.body.len) : NULL;
                r = m ? take_answer(c, m, id, ret_result, NULL, err)
                      : dm_error_set(err, -EPROTO, "host MCP server '%s' sent malformed JSON", c->spec->name);
                if (r == 0)
                        r = dm_error_set(err, -EPROTO, "host MCP server '%s' did not answer request %lld",
                                         c->spec->name, (long long)id);
                json_object_put(m);
                if (r == 1)
                        r = 0;
        }
        if (r == 0 && h.session_id && !c->session_id)
                c->session_id = h.session_id, h.session_id = NULL;
        free(h.session_id);
        free(body);
        dm_buf_release(&h.body);
        curl_slist_free_all(hdr);
        curl_easy_cleanup(curl);
        return r;
}

/* ---- both ----------------------------------------------------------------------- */

static int request_locked(struct dm_mcpclient *c, const char *method, json_object *params, bool notification,
                          struct dm_cancel *cancel, json_object **ret_result, struct dm_error *err)
{
        int64_t id = notification ? 0 : ++c->next_id;
        json_object *msg = request_msg(id, method, params);
        int r;

        if (c->spec->url)
                r = http_exchange(c, "POST", id, msg, cancel, ret_result, err);
        else if (!c->running)
                r = dm_error_set(err, -EPIPE, "host MCP server '%s' is not running", c->spec->name);
        else
                r = stdio_request(c, id, msg, cancel, ret_result, err);
        json_object_put(msg);
        return r;
}

static int initialize_locked(struct dm_mcpclient *c, struct dm_cancel *cancel, struct dm_error *err)
{
        json_object *params = json_object_new_object(), *info = json_object_new_object(), *result = NULL, *v;
        int r;

        c->protocol[0] = '\0';
        json_object_object_add(params, "protocolVersion", json_object_new_string(PROTOCOL_VERSION));
        json_object_object_add(params, "capabilities", json_object_new_object());
        json_object_object_add(info, "name", json_object_new_string("demesne"));
        json_object_object_add(info, "version", json_object_new_string(PACKAGE_VERSION));
        json_object_object_add(params, "clientInfo", info);
        r = request_locked(c, "initialize", params, false, cancel, &result, err);
        json_object_put(params);
        if (r < 0)
                return r == -EREMOTEIO ? dm_error_wrap(err, "host MCP server '%s' refused initialize", c->spec->name)
                                       : r;
        if (json_object_object_get_ex(result, "protocolVersion", &v) && json_object_is_type(v, json_type_string) &&
            json_object_get_string_len(v) < (int)sizeof(c->protocol))
                snprintf(c->protocol, sizeof(c->protocol), "%s", json_object_get_string(v));
        json_object_put(result);
        if (!c->protocol[0])
                return dm_error_set(err, -EPROTO, "host MCP server '%s' answered initialize without a protocolVersion",
                                    c->spec->name);
        return request_locked(c, "notifications/initialized", NULL, true, cancel, NULL, err);
}

/* ---- turns and restarts -------------------------------------------------------- */

/* The server's turn, waited for until deadline or cancel: a pollable lock,
 * so that a caller who gives up is not stuck behind a slow call. */
static int take_turn(struct dm_mcpclient *c, int64_t deadline, struct dm_cancel *cancel, struct dm_error *err)
{
        for (;;) {
                struct pollfd p[2] = { { .fd = c->turn_fd, .events = POLLIN },
                                       { .fd = cancel ? cancel->fd : -1, .events = POLLIN } };
                uint64_t v;
                int64_t left;

                if (read(c->turn_fd, &v, sizeof(v)) == (ssize_t)sizeof(v))
                        return 0;
                if (cancel && dm_cancel_fired(cancel))
                        return dm_error_set(err, -ECANCELED, "cancelled");
                left = deadline - dm_now_ms();
                if (left <= 0)
                        return dm_error_set(err, -ETIMEDOUT,
                                            "host MCP server '%s' was busy with other calls for %lld s: try again",
                                            c->spec->name, (long long)(c->timeout_ms / 1000));
                if (poll(p, 2, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
                        return dm_error_set(err, -errno, "poll: %s", strerror(errno));
        }
}

static void give_turn(struct dm_mcpclient *c)
{
        uint64_t one = 1;

        while (write(c->turn_fd, &one, sizeof(one)) < 0 && errno == EINTR)
                ;
}

/* The server failed: when it may start again. */
static void schedule_start(struct dm_mcpclient *c, bool by_answer)
{
        int64_t now = dm_now_ms(), delay = dm_mcpclient_backoff_failed(&c->backoff, now - c->started_ms, by_answer);

        c->next_start_ms = now + delay;
        log_info("host mcp '%s': ended after a fault; it starts again on the next call, %lld ms from now at the "
                 "earliest",
                 c->spec->name, (long long)delay);
}

/* A stdio server that is not running, started again once its delay is
 * over: a request that comes sooner waits for that within its deadline. */
static int restart_locked(struct dm_mcpclient *c, int64_t deadline, struct dm_cancel *cancel, struct dm_error *err)
{
        int64_t wait = c->next_start_ms - dm_now_ms();
        int r;

        if (wait > 0 && c->next_start_ms > deadline)
                return dm_error_set(err, -EAGAIN,
                                    "host MCP server '%s' failed and starts again in %lld s: try again then",
                                    c->spec->name, (long long)((wait + 999) / 1000));
        if (wait > 0) {
                struct pollfd p = { .fd = cancel ? cancel->fd : -1, .events = POLLIN };
                int64_t left;

                while ((left = c->next_start_ms - dm_now_ms()) > 0 && !(cancel && dm_cancel_fired(cancel)))
                        poll(&p, 1, (int)left);
                if (cancel && dm_cancel_fired(cancel))
                        return dm_error_set(err, -ECANCELED, "cancelled");
        }
        log_info("host mcp '%s': starting it again", c->spec->name);
        r = stdio_start(c, err);
        if (r == 0)
                r = initialize_locked(c, cancel, err);
        if (r < 0) {
                stdio_stop(c);
                /* A cancelled initialize is not the server's fault. */
                schedule_start(c, r == -ECANCELED);
        }
        return r;
}

int dm_mcpclient_open(const struct dm_mcpclient_spec *spec, struct dm_mcpclient **ret, struct dm_error *err)
{
        struct dm_mcpclient *c = calloc(1, sizeof(*c));
        int r;

        if (!c)
                return dm_error_set(err, -ENOMEM, "out of memory");
        c->spec = spec;
        c->max_message = spec->max_message > 0 ? (size_t)spec->max_message : DM_MCPCLIENT_MAX_MESSAGE;
        c->timeout_ms = spec->timeout_ms > 0 ? spec->timeout_ms : DM_MCPCLIENT_TIMEOUT_MS;
        c->pidfd = c->in_fd = c->out_fd = -1;
        /* Room for a whole message and the read that overran it. */
        dm_buf_init(&c->rbuf, c->max_message + 16384);
        c->turn_fd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
        r = c->turn_fd < 0 ? dm_error_set(err, -errno, "eventfd: %s", strerror(errno)) : 0;
        if (r == 0 && spec->command)
                r = stdio_start(c, err);
        if (r == 0)
                r = initialize_locked(c, NULL, err);
        if (r < 0) {
                dm_mcpclient_free(c);
                return r;
        }
        *ret = c;
        return 0;
}

int dm_mcpclient_request(struct dm_mcpclient *c, const char *method, json_object *params, struct dm_cancel *cancel,
                         json_object **ret_result, struct dm_error *err)
{
        int64_t deadline = dm_now_ms() + c->timeout_ms;
        bool was_running;
        int r;

        if ((r = take_turn(c, deadline, cancel, err)) < 0)
                return r;
        if (c->spec->command && !c->running)
                r = restart_locked(c, deadline, cancel, err);
        was_running = c->running;
        if (r == 0)
                r = request_locked(c, method, params, false, cancel, ret_result, err);
        if (c->spec->command && was_running && !c->running)
                schedule_start(c, true);
        give_turn(c);
        return r;
}

int dm_mcpclient_list_tools(struct dm_mcpclient *c, json_object **ret_tools, struct dm_error *err)
{
        json_object *all = json_object_new_array(), *params = NULL;
        int r = 0;

        for (int page = 0; page < LIST_PAGES_MAX; page++) {
                json_object *result = NULL, *tools, *cursor;

                r = dm_mcpclient_request(c, "tools/list", params, NULL, &result, err);
                json_object_put(params);
                params = NULL;
                if (r < 0)
                        break;
                if (!json_object_object_get_ex(result, "tools", &tools) ||
                    !json_object_is_type(tools, json_type_array)) {
                        json_object_put(result);
                        r = dm_error_set(err, -EPROTO, "host MCP server '%s' answered tools/list without tools[]",
                                         c->spec->name);
                        break;
                }
                for (size_t i = 0; i < json_object_array_length(tools); i++)
                        json_object_array_add(all, json_object_get(json_object_array_get_idx(tools, i)));
                if (!json_object_object_get_ex(result, "nextCursor", &cursor) ||
                    !json_object_is_type(cursor, json_type_string)) {
                        json_object_put(result);
                        *ret_tools = all;
                        return 0;
                }
                params = json_object_new_object();
                json_object_object_add(params, "cursor", json_object_get(cursor));
                json_object_put(result);
        }
        json_object_put(params);
        json_object_put(all);
        if (r == 0)
                r = dm_error_set(err, -EPROTO, "host MCP server '%s' has more than %d pages of tools", c->spec->name,
                                 LIST_PAGES_MAX);
        return r;
}

void dm_mcpclient_free(struct dm_mcpclient *c)
{
        if (!c)
                return;
        stdio_stop(c);
        if (c->spec->url && c->session_id) {
                struct dm_error err = { 0 };
                if (http_exchange(c, "DELETE", 0, NULL, NULL, NULL, &err) < 0)
                        log_debug("host mcp '%s': ending its session: %s", c->spec->name, err.msg);
        }
        free(c->session_id);
        dm_buf_release(&c->rbuf);
        if (c->turn_fd >= 0)
                close(c->turn_fd);
        free(c);
}
