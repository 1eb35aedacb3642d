/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_INTEGRATION_HTTP_CLIENT_H
#define DM_TESTS_INTEGRATION_HTTP_CLIENT_H

/* A small HTTP/1.1 client on raw sockets for the HTTP transport tests: the
 * hostile cases need control no library gives (a trickle of header bytes,
 * hundreds of idle sockets, a stream closed mid-call). Also starts
 * `demesne serve --http 127.0.0.1:0` and finds its port and the file of
 * its bearer token in the log. Only loopback addresses are ever used. */

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/basic/timeutil.h"
#include "tests/integration/common.h"

static int hc_port;
/* "Authorization: Bearer TOKEN\r\n" of the server under test, sent with
 * every request whose headers do not name an Authorization of their own;
 * "" sends none. */
static char hc_auth[256];

struct hc {
        int fd;
        char raw[1 << 20]; /* received, not yet decoded */
        size_t raw_len;
};

struct hresp {
        int status;
        char head[16384]; /* status line and headers */
        bool chunked, done;
        long length;           /* Content-Length, -1 if none */
        char *body;            /* decoded body so far (NUL-terminated) */
        size_t body_len, used; /* used: bytes of body consumed as SSE events */
};

static inline void hresp_release(struct hresp *r)
{
        free(r->body);
        memset(r, 0, sizeof(*r));
}

/* Connects to 127.0.0.1:hc_port, from src ("127.0.0.2"...) when given. */
static inline int hc_connect(struct hc *c, const char *src)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)hc_port) };

        c->raw_len = 0;
        c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0)
                return -1;
        if (src) {
                struct sockaddr_in s = { .sin_family = AF_INET };
                inet_pton(AF_INET, src, &s.sin_addr);
                if (bind(c->fd, (struct sockaddr *)&s, sizeof(s)) < 0) {
                        close(c->fd);
                        return -1;
                }
        }
        inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
        if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                close(c->fd);
                c->fd = -1;
                return -1;
        }
        return 0;
}

static inline void hc_close(struct hc *c)
{
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
}

static inline int hc_send(struct hc *c, const void *data, size_t n)
{
        const char *p = data;

        while (n) {
                ssize_t w = send(c->fd, p, n, MSG_NOSIGNAL);
                if (w <= 0)
                        return -1;
                p += w;
                n -= (size_t)w;
        }
        return 0;
}

/* headers: "Name: value\r\n" lines; a Host line there replaces the default. */
static inline int hc_request(struct hc *c, const char *method, const char *headers, const char *body)
{
        char *req;
        size_t blen = body ? strlen(body) : 0;
        int n, r;
        bool own_host = headers && strncasecmp(headers, "Host:", 5) == 0;
        const char *auth = headers && strcasestr(headers, "authorization:") ? "" : hc_auth;

        if (own_host)
                n = asprintf(&req, "%s /mcp HTTP/1.1\r\n%s%sContent-Length: %zu\r\n\r\n", method, headers, auth, blen);
        else
                n = asprintf(&req, "%s /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s%sContent-Length: %zu\r\n\r\n", method,
                             hc_port, headers ? headers : "", auth, blen);
        if (n < 0)
                return -1;
        r = hc_send(c, req, (size_t)n);
        free(req);
        return r < 0 || !blen ? r : hc_send(c, body, blen);
}

/* More bytes into c->raw: 1 read something, 0 EOF, -1 timeout or error. */
static inline int hc_fill(struct hc *c, int64_t deadline)
{
        struct pollfd p = { .fd = c->fd, .events = POLLIN };
        int left = (int)(deadline - dm_now_ms());
        ssize_t n;

        if (c->raw_len >= sizeof(c->raw) || left <= 0 || poll(&p, 1, left) <= 0)
                return -1;
        n = recv(c->fd, c->raw + c->raw_len, sizeof(c->raw) - c->raw_len, 0);
        if (n < 0)
                return errno == ECONNRESET ? 0 : -1;
        c->raw_len += (size_t)n;
        return n > 0;
}

static inline void hc_consume(struct hc *c, size_t n)
{
        memmove(c->raw, c->raw + n, c->raw_len - n);
        c->raw_len -= n;
}

static inline const char *hresp_header(const struct hresp *r, const char *name, char *out, size_t n)
{
        size_t len = strlen(name);

        for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
                if (strncasecmp(p + 2, name, len) == 0 && p[2 + len] == ':') {
                        const char *v = p + 3 + len;
                        size_t vl;
                        while (*v == ' ')
                                v++;
                        vl = strcspn(v, "\r");
                        snprintf(out, n, "%.*s", (int)vl, v);
                        return out;
                }
        return NULL;
}

/* Status line and headers. 0, or -1 (timeout, EOF: the server closed). */
static inline int hc_read_head(struct hc *c, struct hresp *r, int timeout_ms)
{
        int64_t deadline = dm_now_ms() + timeout_ms;
        char v[64];
        char *end;

        memset(r, 0, sizeof(*r));
        r->length = -1;
        for (;;) {
                if (c->raw_len && (end = memmem(c->raw, c->raw_len, "\r\n\r\n", 4))) {
                        size_t hl = (size_t)(end - c->raw) + 4;
                        if (hl >= sizeof(r->head))
                                return -1;
                        memcpy(r->head, c->raw, hl);
                        r->head[hl] = '\0';
                        hc_consume(c, hl);
                        break;
                }
                if (hc_fill(c, deadline) <= 0)
                        return -1;
        }
        if (sscanf(r->head, "HTTP/1.%*d %d", &r->status) != 1)
                return -1;
        if (hresp_header(r, "Transfer-Encoding", v, sizeof(v)) && strcasecmp(v, "chunked") == 0)
                r->chunked = true;
        else if (hresp_header(r, "Content-Length", v, sizeof(v)))
                r->length = atol(v);
        r->body = calloc(1, 1);
        if (r->status == 204 || r->status == 304 || (!r->chunked && r->length <= 0 && r->length != -1))
                r->done = true;
        if (!r->chunked && r->length == 0)
                r->done = true;
        return 0;
}

static inline void body_append(struct hresp *r, const char *p, size_t n)
{
        r->body = realloc(r->body, r->body_len + n + 1);
        memcpy(r->body + r->body_len, p, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
}

/* Decodes what arrived; waits for more until deadline. 1 = some body came
 * (or the body is complete), 0 = EOF before the end, -1 = timeout. */
static inline int hc_pull(struct hc *c, struct hresp *r, int64_t deadline)
{
        for (;;) {
                size_t before = r->body_len;

                if (r->chunked) {
                        for (;;) {
                                char *crlf = c->raw_len ? memmem(c->raw, c->raw_len, "\r\n", 2) : NULL;
                                unsigned long size;
                                size_t hl;
                                if (!crlf)
                                        break;
                                size = strtoul(c->raw, NULL, 16);
                                hl = (size_t)(crlf - c->raw) + 2;
                                if (size == 0) {
                                        if (c->raw_len >= hl + 2) {
                                                hc_consume(c, hl + 2);
                                                r->done = true;
                                        }
                                        break;
                                }
                                if (c->raw_len < hl + size + 2)
                                        break;
                                body_append(r, c->raw + hl, size);
                                hc_consume(c, hl + size + 2);
                        }
                } else if (c->raw_len) {
                        size_t take = c->raw_len;
                        if (r->length >= 0 && take > (size_t)r->length - r->body_len)
                                take = (size_t)r->length - r->body_len;
                        body_append(r, c->raw, take);
                        hc_consume(c, take);
                        if (r->length >= 0 && r->body_len == (size_t)r->length)
                                r->done = true;
                }
                if (r->done || r->body_len > before)
                        return 1;
                int f = hc_fill(c, deadline);
                if (f < 0)
                        return -1;
                if (f == 0) {
                        if (!r->chunked && r->length < 0)
                                r->done = true;
                        return r->done ? 1 : 0;
                }
        }
}

/* The whole body. 0, or -1 when it did not complete in time. */
static inline int hc_read_body(struct hc *c, struct hresp *r, int timeout_ms)
{
        int64_t deadline = dm_now_ms() + timeout_ms;

        while (!r->done)
                if (hc_pull(c, r, deadline) <= 0)
                        return -1;
        return 0;
}

/* The next SSE event's data parsed as JSON (comments skipped); NULL when
 * none came in time or the stream ended. */
static inline json_object *hc_next_event(struct hc *c, struct hresp *r, int timeout_ms)
{
        int64_t deadline = dm_now_ms() + timeout_ms;

        for (;;) {
                char *start = r->body + r->used, *end = strstr(start, "\n\n");
                if (end) {
                        json_object *o = NULL;
                        *end = '\0';
                        for (char *line = start; line && *line;
                             line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
                                if (strncmp(line, "data:", 5) == 0) {
                                        char *nl = strchr(line, '\n');
                                        if (nl)
                                                *nl = '\0';
                                        o = json_tokener_parse(line + 5 + (line[5] == ' '));
                                        if (nl)
                                                *nl = '\n';
                                        break;
                                }
                        r->used = (size_t)(end - r->body) + 2;
                        if (o)
                                return o;
                        continue;
                }
                if (r->done || hc_pull(c, r, deadline) <= 0)
                        return NULL;
        }
}

/* One request on a fresh connection, the whole answer read. */
static inline int http_call(const char *method, const char *headers, const char *body, struct hresp *r)
{
        struct hc *c = malloc(sizeof(*c));
        int ret = -1;

        memset(r, 0, sizeof(*r));
        if (c && hc_connect(c, NULL) == 0) {
                if (hc_request(c, method, headers, body) == 0 && hc_read_head(c, r, 60000) == 0)
                        ret = hc_read_body(c, r, 60000);
                hc_close(c);
        }
        free(c);
        return ret;
}

static inline json_object *hresp_json(const struct hresp *r)
{
        return r->body ? json_tokener_parse(r->body) : NULL;
}

static inline json_object *jget(json_object *o, const char *a, const char *b, const char *c)
{
        return path(o, a, b, c);
}

/* The string at a path, "" when it is missing: a failing check reports
 * "not ok" instead of crashing on NULL. */
static inline const char *jstr(json_object *o, const char *a, const char *b, const char *c)
{
        const char *s = json_object_get_string(jget(o, a, b, c));
        return s ? s : "";
}

static inline int rpc_code(json_object *m)
{
        json_object *v = jget(m, "error", "code", NULL);
        return v ? json_object_get_int(v) : 0;
}

/* ---- the server under test ---------------------------------------------------- */

struct server {
        pid_t pid;
        int port;
        char log[4096];
        char token_file[4096]; /* the token the server made, "" if it was given one */
        char auth[256];        /* "Authorization: Bearer TOKEN\r\n" with that token */
};

/* The token file the log names ("bearer token in '...'"), read into s->auth. */
static inline void server_read_token(struct server *s, const char *line)
{
        const char *p = strstr(line, "bearer token in '");
        char tok[200] = "";
        FILE *f;

        if (!p)
                return;
        p += strlen("bearer token in '");
        snprintf(s->token_file, sizeof(s->token_file), "%.*s", (int)strcspn(p, "'"), p);
        f = fopen(s->token_file, "r");
        if (f && fgets(tok, sizeof(tok), f)) {
                tok[strcspn(tok, "\r\n")] = '\0';
                snprintf(s->auth, sizeof(s->auth), "Authorization: Bearer %s\r\n", tok);
        }
        if (f)
                fclose(f);
}

/* Points the client at s: its port and its token. */
static inline void hc_use(const struct server *s)
{
        hc_port = s->port;
        snprintf(hc_auth, sizeof(hc_auth), "%s", s->auth);
}

/* Starts $DEMESNE serve --http 127.0.0.1:0 ARGS..., stderr to log, and
 * waits for the "serving MCP on http://..." line. -1 if it did not come
 * (then *exit_code has the exit status, if it exited). */
static inline int server_start(struct server *s, const char *log_path, const char *const *args, int *exit_code)
{
        const char *bin = getenv("DEMESNE");
        /* A liveness bound: the server answers or exits within a second
         * on an idle machine; at a load of 24 on two cores, one that
         * refused a readable token file took 36 s to say so and exit. */
        int64_t deadline = dm_now_ms() + slack_ms(120000);

        snprintf(s->log, sizeof(s->log), "%s", log_path);
        s->token_file[0] = s->auth[0] = '\0';
        s->pid = fork();
        if (s->pid == 0) {
                /* args may bring their own --http (then it comes first). */
                bool own = args && args[0] && strcmp(args[0], "--http") == 0;
                const char *argv[32] = { bin, "serve", "--http", "127.0.0.1:0" };
                int n = own ? 2 : 4, fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                for (size_t i = 0; args && args[i] && n < 31; i++)
                        argv[n++] = args[i];
                argv[n] = NULL;
                dup2(fd, 2);
                execv(bin, (char *const *)argv);
                _exit(127);
        }
        while (dm_now_ms() < deadline) {
                char line[1024];
                FILE *f = fopen(log_path, "r");
                int status;
                while (f && fgets(line, sizeof(line), f)) {
                        char *p = strstr(line, "serving MCP on http://127.0.0.1:");
                        server_read_token(s, line);
                        if (p) {
                                s->port = atoi(p + strlen("serving MCP on http://127.0.0.1:"));
                                fclose(f);
                                return 0;
                        }
                }
                if (f)
                        fclose(f);
                if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
                        if (exit_code)
                                *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                        s->pid = 0;
                        return -1;
                }
                usleep(50 * 1000);
        }
        return -1;
}

/* SIGTERM, then the exit code (-1 if it took longer than timeout_ms). */
static inline int server_stop(struct server *s, int timeout_ms, int64_t *ret_ms)
{
        int64_t t0 = dm_now_ms();
        int status;

        if (s->pid <= 0)
                return -1;
        kill(s->pid, SIGTERM);
        while (dm_now_ms() - t0 < timeout_ms) {
                if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
                        if (ret_ms)
                                *ret_ms = dm_now_ms() - t0;
                        s->pid = 0;
                        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                }
                usleep(20 * 1000);
        }
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &status, 0);
        s->pid = 0;
        return -1;
}

/* Polls the containers whose owner label names pid until there are want. */
static inline long wait_containers(struct dm_backend *b, pid_t pid, long want, int timeout_ms)
{
        int64_t t0 = dm_now_ms();
        long n;

        while ((n = containers_of(b, pid)) != want && dm_now_ms() - t0 < timeout_ms)
                usleep(100 * 1000);
        return n;
}

static inline bool log_has(const struct server *s, const char *needle)
{
        char cmd[4700];

        snprintf(cmd, sizeof(cmd), "grep -qF -- '%s' '%s'", needle, s->log);
        return system(cmd) == 0;
}

#endif
