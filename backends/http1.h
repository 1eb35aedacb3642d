/* SPDX-License-Identifier: MIT */
#ifndef DM_BACKENDS_HTTP1_H
#define DM_BACKENDS_HTTP1_H

/* Backends-internal: plain HTTP/1.1 to the engine over a connected stream
 * socket (its unix socket, or loopback tcp without TLS), without libcurl
 * (src/basic/curl-api.h says why). One request and its response at a
 * time per connection; bodies by Content-Length or chunked, either way;
 * connections kept alive in the caller's pool. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/basic/error.h"

/* A response header to capture: name set by the caller ("Server"), value
 * filled (trimmed, truncated to fit) when the response carries it, else "".
 * The libcurl path (backends/curl.c) fills it the same way. */
struct dm_curl_header {
        const char *name;
        char value[128];
};

/* Where a response body goes, piece by piece: 0, or a negative errno that
 * ends the exchange (and the connection). status is the response's. */
typedef int (*dm_http1_sink)(void *userdata, long status, const char *data, size_t len);

struct dm_http1_request {
        const char *method;
        const char *target;       /* "/v1.41/containers/json?all=1" */
        const char *host;         /* the Host header's value */
        const char *const *lines; /* more header lines ("Name: value"); an empty value is left out */
        const char *body;         /* with body_len; NULL: none (see in_fd) */
        size_t body_len;
        int in_fd; /* >= 0: the body is in_len bytes read from it (body NULL) */
        int64_t in_len;
        int64_t deadline_ms; /* dm_now_ms() clock; 0: none */
        struct dm_curl_header *want;
        size_t n_want;
};

/* One exchange on fd. 0 with *ret_status, *ret_reusable (the response was
 * read to its end and the peer keeps the connection) and *ret_started
 * (some of the response arrived: a failure before that, on a kept-alive
 * connection, is the peer having closed it, and the request may be sent
 * again on a new one). Errors: -ETIMEDOUT past the deadline, -EPROTO for
 * a response that is not HTTP/1.x, -EPIPE/-ECONNRESET and the like for the
 * connection, -EIO reading in_fd (with errno kept), or the sink's. */
int dm_http1_exchange(int fd, const struct dm_http1_request *req, dm_http1_sink sink, void *userdata, long *ret_status,
                      bool *ret_reusable, bool *ret_started);

#endif
