/* SPDX-License-Identifier: MIT */
/* Hijacked connections: attach and exec-start turn their HTTP connection into
 * a raw byte stream (Docker frames out, stdin in).
 *
 * Why a plain socket and not libcurl's CONNECT_ONLY: once the response head is
 * read, the connection is no longer HTTP, so all libcurl would do is connect()
 * and wrap send/recv in CURLE_AGAIN codes. A plain socket gives us the fd
 * to poll() together with the cancel fd, shutdown(SHUT_WR) for stdin EOF,
 * SOCK_CLOEXEC at creation, and one less layer on the hot path. TLS engines
 * (tcp:// with DOCKER_TLS_VERIFY) are not supported by demesne, so libcurl's
 * TLS would buy nothing here. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/curl.h"
#include "src/basic/cleanup.h"
#include "src/basic/timeutil.h"

#define HEAD_MAX (64 * 1024)
#define ERROR_BODY_WAIT_MS 2000
#define READ_CHUNK (64 * 1024)

struct dm_stream {
        int fd;
        bool eof;
        bool write_closed;
        struct dm_demux demux;
        char *pending; /* bytes that came with the response head */
        size_t pending_len;
        char rbuf[READ_CHUNK];
};

static int send_all(int fd, const char *p, size_t len)
{
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

/* poll() for fd readable until deadline (monotonic ms); 1 readable, 0 timed out. */
static int wait_readable(int fd, int64_t deadline)
{
        for (;;) {
                int64_t left = deadline - dm_now_ms();
                struct pollfd p = { .fd = fd, .events = POLLIN };
                int r;

                if (left <= 0)
                        return 0;
                r = poll(&p, 1, left > 60000 ? 60000 : (int)left);
                if (r > 0)
                        return 1;
                if (r < 0 && errno != EINTR)
                        return -errno;
        }
}

/* Reads an error response's body (Content-Length or EOF, capped) so the
 * engine's message can go into the error. Best effort: a short wait only. */
static void read_error_body(int fd, struct dm_buf *b, size_t body_off, long content_length)
{
        int64_t deadline = dm_now_ms() + ERROR_BODY_WAIT_MS;
        char tmp[4096];

        while (b->len < b->max && (content_length < 0 || b->len - body_off < (size_t)content_length)) {
                ssize_t n;

                if (wait_readable(fd, deadline) <= 0)
                        return;
                n = recv(fd, tmp, sizeof(tmp), 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0 || dm_buf_append(b, tmp, (size_t)n) < 0)
                        return;
        }
}

static long header_long(const char *head, size_t head_len, const char *name)
{
        size_t nl = strlen(name);

        for (const char *p = head; p && p < head + head_len; p = memchr(p, '\n', head_len - (size_t)(p - head))) {
                if (*p == '\n')
                        p++;
                if (strncasecmp(p, name, nl) == 0 && p[nl] == ':')
                        return strtol(p + nl + 1, NULL, 10);
        }
        return -1;
}

int dm_stream_open(struct dm_curl *h, const char *path, const char *json_body, long head_timeout_ms,
                   struct dm_stream **ret, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;
        _cleanup_free_ char *req = NULL;
        struct dm_buf head;
        int64_t deadline = dm_now_ms() + head_timeout_ms;
        size_t body = strlen(json_body), head_end = 0, scanned = 0;
        struct dm_stream *s;
        int status = 0, r, n;

        r = dm_curl_connect_raw(h, &fd, err);
        if (r < 0)
                return r;
        /* Upgrade: tcp makes both Docker and Podman answer 101; without it
         * both still hijack after a 200, but proxies in between would not know. */
        n = asprintf(&req,
                     "POST " DM_API_PREFIX "%s HTTP/1.1\r\n"
                     "Host: localhost\r\n"
                     "User-Agent: demesne\r\n"
                     "Connection: Upgrade\r\n"
                     "Upgrade: tcp\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\n"
                     "\r\n%s",
                     path, body, json_body);
        if (n < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = send_all(fd, req, (size_t)n);
        if (r < 0)
                return dm_error_set(err, r == -EPIPE ? -EIO : r, "engine at '%s' closed the connection: %s",
                                    dm_curl_host(h), strerror(-r));

        dm_buf_init(&head, HEAD_MAX);
        while (!head_end) {
                char tmp[4096];
                ssize_t got;

                r = wait_readable(fd, deadline);
                if (r <= 0) {
                        dm_buf_release(&head);
                        return r == 0 ? dm_error_set(err, -ETIMEDOUT, "engine at '%s' did not answer in %ld ms",
                                                     dm_curl_host(h), head_timeout_ms)
                                      : dm_error_set(err, -EIO, "poll: %s", strerror(-r));
                }
                got = recv(fd, tmp, sizeof(tmp), 0);
                if (got < 0 && errno == EINTR)
                        continue;
                if (got <= 0) {
                        dm_buf_release(&head);
                        return dm_error_set(err, -EIO, "engine at '%s' closed the connection before answering",
                                            dm_curl_host(h));
                }
                if (dm_buf_append(&head, tmp, (size_t)got) < 0) {
                        dm_buf_release(&head);
                        return dm_error_set(err, -EPROTO, "engine response head larger than %d bytes", HEAD_MAX);
                }
                /* Resume the search 3 bytes back: the blank line may straddle reads. */
                for (size_t i = scanned > 3 ? scanned - 3 : 0; i + 4 <= head.len; i++)
                        if (memcmp(head.data + i, "\r\n\r\n", 4) == 0) {
                                head_end = i + 4;
                                break;
                        }
                scanned = head.len;
        }

        if (sscanf(head.data, "HTTP/1.%*1d %3d", &status) != 1) {
                dm_buf_release(&head);
                return dm_error_set(err, -EPROTO, "engine at '%s' sent no HTTP status line", dm_curl_host(h));
        }
        /* Podman answers 101 when asked to upgrade and 200 otherwise; older
         * Docker releases answered 200 with the stream following. */
        if (status != 101 && status != 200) {
                read_error_body(fd, &head, head_end, header_long(head.data, head_end, "Content-Length"));
                r = dm_curl_status_error(err, status, head.data + head_end, head.len - head_end);
                dm_buf_release(&head);
                return r;
        }

        s = calloc(1, sizeof(*s));
        if (!s) {
                dm_buf_release(&head);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        dm_demux_init(&s->demux);
        /* Frames that arrived with the head belong to the stream. */
        if (head.len > head_end) {
                s->pending_len = head.len - head_end;
                s->pending = malloc(s->pending_len);
                if (!s->pending) {
                        free(s);
                        dm_buf_release(&head);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                memcpy(s->pending, head.data + head_end, s->pending_len);
        }
        dm_buf_release(&head);
        s->fd = TAKE_FD(fd);
        *ret = s;
        return 0;
}

int dm_stream_from_fd(int fd, struct dm_stream **ret, struct dm_error *err)
{
        struct dm_stream *s = calloc(1, sizeof(*s));

        if (!s) {
                close(fd);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        dm_demux_init(&s->demux);
        s->fd = fd;
        *ret = s;
        return 0;
}

int dm_stream_pump(struct dm_stream *s, const struct dm_stream_sink *sink, int cancel_fd, int64_t deadline_ms,
                   struct dm_error *err)
{
        int r;

        if (s->pending) {
                _cleanup_free_ char *p = TAKE_PTR(s->pending);

                r = dm_demux_feed(&s->demux, p, s->pending_len, sink, err);
                s->pending_len = 0;
                if (r < 0)
                        return r;
        }

        while (!s->eof) {
                struct pollfd p[2] = {
                        { .fd = s->fd, .events = POLLIN },
                        { .fd = cancel_fd, .events = POLLIN },
                };
                int timeout = -1;
                ssize_t n;

                /* Checked on every round so a command that never stops
                 * printing still meets its deadline. */
                if (deadline_ms > 0) {
                        int64_t left = deadline_ms - dm_now_ms();

                        if (left <= 0)
                                return dm_error_set(err, -ETIMEDOUT, "deadline passed");
                        timeout = left > 60000 ? 60000 : (int)left;
                }
                r = poll(p, cancel_fd >= 0 ? 2 : 1, timeout);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return dm_error_set(err, -EIO, "poll: %s", strerror(errno));
                }
                if (cancel_fd >= 0 && (p[1].revents & (POLLIN | POLLHUP | POLLERR)))
                        return dm_error_set(err, -ECANCELED, "cancelled");
                if (r == 0 || !p[0].revents)
                        continue;

                n = recv(s->fd, s->rbuf, sizeof(s->rbuf), 0);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        return dm_error_set(err, -EIO, "reading from engine: %s", strerror(errno));
                }
                if (n == 0) {
                        s->eof = true;
                        break;
                }
                r = dm_demux_feed(&s->demux, s->rbuf, (size_t)n, sink, err);
                if (r < 0)
                        return r;
        }
        if (s->demux.remaining || s->demux.hdr_len)
                return dm_error_set(err, -EPROTO, "engine closed the stream inside a frame");
        return 0;
}

int dm_stream_write(struct dm_stream *s, const void *data, size_t len, struct dm_error *err)
{
        int r;

        if (s->write_closed)
                return dm_error_set(err, -EPIPE, "stream input already closed");
        r = send_all(s->fd, data, len);
        if (r < 0)
                return dm_error_set(err, r, "writing to engine: %s", strerror(-r));
        return 0;
}

int dm_stream_close_write(struct dm_stream *s)
{
        if (s->write_closed)
                return 0;
        s->write_closed = true;
        if (shutdown(s->fd, SHUT_WR) < 0 && errno != ENOTCONN)
                return -errno;
        return 0;
}

void dm_stream_free(struct dm_stream *s)
{
        if (!s)
                return;
        if (s->fd >= 0)
                close(s->fd);
        free(s->pending);
        free(s);
}
