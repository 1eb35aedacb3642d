/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "backends/http1.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "src/basic/timeutil.h"

#define HEAD_LINE_MAX 8192
#define HEAD_LINES_MAX 128

struct reader {
        int fd;
        int64_t deadline;
        char buf[16384];
        size_t pos, len;
        bool got_any;
};

/* Waits for fd to be ready for events before the deadline. */
static int wait_fd(int fd, short events, int64_t deadline)
{
        for (;;) {
                struct pollfd p = { .fd = fd, .events = events };
                int timeout = -1, r;

                if (deadline > 0) {
                        int64_t left = deadline - dm_now_ms();

                        if (left <= 0)
                                return -ETIMEDOUT;
                        timeout = left > 60000 ? 60000 : (int)left;
                }
                r = poll(&p, 1, timeout);
                if (r > 0)
                        return 0;
                if (r < 0 && errno != EINTR)
                        return -errno;
        }
}

static int fill(struct reader *rd)
{
        ssize_t n;
        int r;

        if (rd->pos < rd->len)
                return 0;
        rd->pos = rd->len = 0;
        for (;;) {
                r = wait_fd(rd->fd, POLLIN, rd->deadline);
                if (r < 0)
                        return r;
                n = recv(rd->fd, rd->buf, sizeof(rd->buf), MSG_DONTWAIT);
                if (n > 0) {
                        rd->len = (size_t)n;
                        rd->got_any = true;
                        return 0;
                }
                if (n == 0)
                        return -ECONNRESET; /* closed before the response ended */
                if (errno != EINTR && errno != EAGAIN)
                        return -errno;
        }
}

/* One line without its CRLF (or LF), NUL-terminated in line. */
static int read_line(struct reader *rd, char *line, size_t max)
{
        size_t n = 0;

        for (;;) {
                char *nl;
                size_t take;
                int r = fill(rd);

                if (r < 0)
                        return r;
                nl = memchr(rd->buf + rd->pos, '\n', rd->len - rd->pos);
                take = nl ? (size_t)(nl - (rd->buf + rd->pos)) + 1 : rd->len - rd->pos;
                if (n + take >= max)
                        return -EPROTO; /* a header line longer than anything an engine sends */
                memcpy(line + n, rd->buf + rd->pos, take);
                n += take;
                rd->pos += take;
                if (nl) {
                        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                                n--;
                        line[n] = '\0';
                        return 0;
                }
        }
}

/* Up to len body bytes (len -1: until the peer closes) to the sink. */
static int read_body(struct reader *rd, int64_t len, dm_http1_sink sink, void *ud, long status)
{
        while (len != 0) {
                size_t take;
                int r = fill(rd);

                if (r == -ECONNRESET && len < 0)
                        return 0; /* the end of a body without a length */
                if (r < 0)
                        return r;
                take = rd->len - rd->pos;
                if (len > 0 && (int64_t)take > len)
                        take = (size_t)len;
                r = sink(ud, status, rd->buf + rd->pos, take);
                if (r < 0)
                        return r;
                rd->pos += take;
                if (len > 0)
                        len -= (int64_t)take;
        }
        return 0;
}

static int read_chunked(struct reader *rd, dm_http1_sink sink, void *ud, long status)
{
        char line[HEAD_LINE_MAX];

        for (;;) {
                char *end;
                unsigned long long size;
                int r = read_line(rd, line, sizeof(line));

                if (r < 0)
                        return r;
                errno = 0;
                size = strtoull(line, &end, 16);
                if (end == line || errno || (*end && *end != ';' && *end != ' ' && *end != '\t'))
                        return -EPROTO;
                if (size == 0)
                        break;
                if (size > (unsigned long long)INT64_MAX)
                        return -EPROTO;
                r = read_body(rd, (int64_t)size, sink, ud, status);
                if (r < 0)
                        return r;
                r = read_line(rd, line, sizeof(line)); /* the CRLF after the data */
                if (r < 0)
                        return r;
                if (line[0])
                        return -EPROTO;
        }
        /* Trailers, then the empty line. */
        for (int i = 0; i < HEAD_LINES_MAX; i++) {
                int r = read_line(rd, line, sizeof(line));

                if (r < 0)
                        return r;
                if (!line[0])
                        return 0;
        }
        return -EPROTO;
}

static int send_all(int fd, const char *p, size_t len, int64_t deadline)
{
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);

                if (n > 0) {
                        p += n;
                        len -= (size_t)n;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        int r = wait_fd(fd, POLLOUT, deadline);
                        if (r < 0)
                                return r;
                        continue;
                }
                return n < 0 ? -errno : -EPIPE;
        }
        return 0;
}

static int send_from_fd(int fd, int in_fd, int64_t len, int64_t deadline)
{
        char buf[65536];

        while (len > 0) {
                ssize_t n = read(in_fd, buf, len < (int64_t)sizeof(buf) ? (size_t)len : sizeof(buf));
                int r;

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -EIO;
                if (n == 0) {
                        errno = ENODATA;
                        return -EIO; /* shorter than it said */
                }
                r = send_all(fd, buf, (size_t)n, deadline);
                if (r < 0)
                        return r;
                len -= n;
        }
        return 0;
}

static void capture(struct dm_curl_header *want, size_t n_want, const char *name, size_t nl, const char *v)
{
        for (size_t i = 0; i < n_want; i++) {
                size_t vl = strlen(v);

                if (strlen(want[i].name) != nl || strncasecmp(want[i].name, name, nl) != 0)
                        continue;
                while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
                        vl--;
                if (vl >= sizeof(want[i].value))
                        vl = sizeof(want[i].value) - 1;
                memcpy(want[i].value, v, vl);
                want[i].value[vl] = '\0';
        }
}

static bool has_token(const char *v, const char *token)
{
        size_t tl = strlen(token);

        for (const char *p = v; *p;) {
                while (*p == ' ' || *p == '\t' || *p == ',')
                        p++;
                if (strncasecmp(p, token, tl) == 0 && (p[tl] == '\0' || p[tl] == ',' || p[tl] == ' '))
                        return true;
                while (*p && *p != ',')
                        p++;
        }
        return false;
}

int dm_http1_exchange(int fd, const struct dm_http1_request *req, dm_http1_sink sink, void *userdata, long *ret_status,
                      bool *ret_reusable, bool *ret_started)
{
        struct reader *rd = NULL;
        char *head = NULL, line[HEAD_LINE_MAX];
        size_t head_len = 0;
        FILE *f;
        bool has_body = req->body || req->in_fd >= 0, chunked = false, close_after = false, http10 = false;
        int64_t content_length = -1;
        long status = 0;
        int r;

        *ret_reusable = false;
        *ret_started = false;
        for (size_t i = 0; i < req->n_want; i++)
                req->want[i].value[0] = '\0';

        /* The request head. */
        f = open_memstream(&head, &head_len);
        if (!f)
                return -ENOMEM;
        fprintf(f, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: demesne\r\nAccept: */*\r\n", req->method, req->target,
                req->host);
        for (size_t i = 0; req->lines && req->lines[i]; i++) {
                const char *colon = strchr(req->lines[i], ':');

                /* "Name:" with no value takes a header out (libcurl's way). */
                if (colon && colon[1 + strspn(colon + 1, " \t")] == '\0')
                        continue;
                fprintf(f, "%s\r\n", req->lines[i]);
        }
        if (has_body || strcmp(req->method, "POST") == 0 || strcmp(req->method, "PUT") == 0)
                fprintf(f, "Content-Length: %lld\r\n",
                        req->body         ? (long long)req->body_len
                        : req->in_fd >= 0 ? (long long)req->in_len
                                          : 0LL);
        fputs("\r\n", f);
        if (fclose(f) != 0 || !head) {
                free(head);
                return -ENOMEM;
        }
        r = send_all(fd, head, head_len, req->deadline_ms);
        free(head);
        if (r >= 0 && req->body && req->body_len)
                r = send_all(fd, req->body, req->body_len, req->deadline_ms);
        if (r >= 0 && !req->body && req->in_fd >= 0)
                r = send_from_fd(fd, req->in_fd, req->in_len, req->deadline_ms);
        if (r < 0)
                return r;

        rd = calloc(1, sizeof(*rd));
        if (!rd)
                return -ENOMEM;
        rd->fd = fd;
        rd->deadline = req->deadline_ms;
        /* The status line; 1xx answers come before the real one. */
        for (;;) {
                char *sp;

                r = read_line(rd, line, sizeof(line));
                *ret_started = rd->got_any;
                if (r < 0)
                        goto out;
                if (strncmp(line, "HTTP/1.", 7) != 0 || !(sp = strchr(line, ' '))) {
                        r = -EPROTO;
                        goto out;
                }
                http10 = line[7] == '0';
                status = strtol(sp + 1, NULL, 10);
                if (status < 100 || status > 999) {
                        r = -EPROTO;
                        goto out;
                }
                if (status >= 200)
                        break;
                do /* the 1xx's own headers */
                        if ((r = read_line(rd, line, sizeof(line))) < 0)
                                goto out;
                while (line[0]);
        }
        close_after = http10;
        for (int i = 0;; i++) {
                char *colon, *v;

                if (i == HEAD_LINES_MAX) {
                        r = -EPROTO;
                        goto out;
                }
                r = read_line(rd, line, sizeof(line));
                if (r < 0)
                        goto out;
                if (!line[0])
                        break;
                colon = strchr(line, ':');
                if (!colon)
                        continue;
                v = colon + 1 + strspn(colon + 1, " \t");
                capture(req->want, req->n_want, line, (size_t)(colon - line), v);
                *colon = '\0';
                if (strcasecmp(line, "Content-Length") == 0) {
                        char *end;
                        long long cl = strtoll(v, &end, 10);

                        if (end == v || cl < 0) {
                                r = -EPROTO;
                                goto out;
                        }
                        content_length = cl;
                } else if (strcasecmp(line, "Transfer-Encoding") == 0) {
                        chunked = has_token(v, "chunked");
                } else if (strcasecmp(line, "Connection") == 0) {
                        if (has_token(v, "close"))
                                close_after = true;
                        else if (has_token(v, "keep-alive"))
                                close_after = false;
                }
        }
        *ret_status = status;
        if (strcmp(req->method, "HEAD") == 0 || status == 204 || status == 304)
                r = 0;
        else if (chunked)
                r = read_chunked(rd, sink, userdata, status);
        else if (content_length >= 0)
                r = read_body(rd, content_length, sink, userdata, status);
        else {
                r = read_body(rd, -1, sink, userdata, status);
                close_after = true;
        }
        /* Bytes past the response would be a pipelining peer: not ours. */
        if (r >= 0 && !close_after && rd->pos == rd->len)
                *ret_reusable = true;
out:
        free(rd);
        return r;
}
