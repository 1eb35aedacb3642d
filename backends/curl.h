/* SPDX-License-Identifier: MIT */
#ifndef DM_BACKENDS_CURL_H
#define DM_BACKENDS_CURL_H

/* Backends-internal: the HTTP client for the Docker Engine API and the
 * OpenSandbox API, defined in curl.c (plain requests through libcurl),
 * curl-connect.c (raw connections, the TLS relay) and stream.c (hijacked
 * streams over raw sockets). What curl.c and curl-connect.c share is in
 * curl-internal.h, what only the docker backend's files share in
 * docker-internal.h. Never included outside backends/
 * (and its tests). */

#include "src/basic/curl-api.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/http1.h"
#include "src/basic/buf.h"
#include "src/basic/error.h"

/* Every path is sent under this API version: 1.41 is served by dockerd >= 20.10
 * and by Podman >= 3 (4.3.1 here). */
#define DM_API_PREFIX "/v1.41"

struct dm_curl;

/* host is "unix:///abs/path" or "tcp://host[:port]" (port 2375 when left out).
 * response_max caps every response body. -EINVAL on a malformed host. For
 * tcp://, Docker's DOCKER_TLS_VERIFY and DOCKER_CERT_PATH (ca.pem, cert.pem,
 * key.pem; default ~/.docker), as env (NULL = unset) has them, turn on TLS;
 * without TLS only a loopback address is accepted (-EPERM naming the
 * variables), before any connection. */
int dm_curl_new(const char *host, size_t response_max, const struct dm_engine_env *env, struct dm_curl **ret,
                struct dm_error *err);
/* A client for a plain HTTP(S) API at base_url ("https://host:8080/v1"),
 * every path appended to it as is. headers ("Name: value", NULL-terminated,
 * may be NULL) go with every request, transfers included; noun names the
 * peer in messages ("OpenSandbox server not reachable at ..."). */
int dm_curl_new_url(const char *base_url, size_t response_max, const char *noun, const char *const *headers,
                    struct dm_curl **ret, struct dm_error *err);
void dm_curl_free(struct dm_curl *h);
/* The host exactly as given to dm_curl_new, for messages. */
const char *dm_curl_host(const struct dm_curl *h);
/* tcp:// with DOCKER_TLS_VERIFY (https, engine and client verified). */
bool dm_curl_tls(const struct dm_curl *h);
/* unix:// or tcp:// to a loopback address: the engine shares this host
 * (its containers' pids, netns and bind sources are ours). */
bool dm_curl_on_this_host(const struct dm_curl *h);
bool dm_curl_host_is_loopback(const char *host);
/* The host, for tcp:// plus "(TLS, ...)" or "(no TLS: ...)", for describe. */
const char *dm_curl_describe_host(struct dm_curl *h);

/* One request: path is below DM_API_PREFIX ("/containers/create?name=x"),
 * json_body may be NULL (no body). timeout_ms 0 = no limit (wait). On success
 * (any HTTP status) *ret_status is the status and body holds the response,
 * capped at response_max (-E2BIG past it). -EHOSTDOWN when the engine cannot
 * be reached ("engine not reachable at '...': reason"), -ETIMEDOUT, -EIO.
 * Thread-safe; connections are kept alive in a small pool. */
int dm_curl_request(struct dm_curl *h, const char *method, const char *path, const char *json_body, long timeout_ms,
                    long *ret_status, struct dm_buf *body, struct dm_error *err);

/* struct dm_curl_header, a response header to capture: backends/http1.h. */

/* dm_curl_request, also capturing the n_want headers in want. */
int dm_curl_request_headers(struct dm_curl *h, const char *method, const char *path, const char *json_body,
                            long timeout_ms, long *ret_status, struct dm_buf *body, struct dm_curl_header *want,
                            size_t n_want, struct dm_error *err);

/* Fills err with "engine answered <status>: <message>" (the `message` field of
 * the engine's JSON error body, or the body itself) and returns the errno the
 * status maps to: 400 -EINVAL, 401/403 -EACCES, 404 -ENOENT, 409 -EBUSY,
 * others -EIO. */
int dm_curl_status_error(struct dm_error *err, long status, const char *body, size_t len);

/* A connected stream socket to the engine, close-on-exec, blocking. */
int dm_curl_connect_raw(struct dm_curl *h, int *ret_fd, struct dm_error *err);

/* Sends POST path with json_body on a fresh connection, reads the response
 * head (at most 64 KiB, within head_timeout_ms) and, on 101 or 200, hands the
 * connection over as a stream; bytes read past the head stay in the stream.
 * Other statuses: dm_curl_status_error's mapping. */
int dm_stream_open(struct dm_curl *h, const char *path, const char *json_body, long head_timeout_ms,
                   struct dm_stream **ret, struct dm_error *err);

/* A request whose body comes from in_fd (in_len bytes; in_fd -1 = none) and
 * whose 2xx response body goes to out_fd (-EFBIG past out_max bytes, 0 = no
 * limit); a non-2xx response body lands in errbody instead (capped) for
 * dm_curl_status_error. For archives, which can be far larger than any
 * JSON answer. */
int dm_curl_transfer(struct dm_curl *h, const char *method, const char *path, const char *content_type, int in_fd,
                     int64_t in_len, int out_fd, int64_t out_max, long timeout_ms, long *ret_status,
                     struct dm_buf *errbody, struct dm_error *err);

/* A fresh easy handle for a request the helpers above cannot make
 * (multipart uploads, streamed responses): URL, no proxy, no signals,
 * close-on-exec sockets, the client's extra headers (returned in
 * *ret_headers, the caller frees them after the transfer and may append
 * first), errors into ebuf (CURL_ERROR_SIZE). NULL on ENOMEM. After the
 * first perform call dm_curl_easy_performed(); map failures with
 * dm_curl_easy_error. */
CURL *dm_curl_easy(struct dm_curl *h, const char *path, struct curl_slist **ret_headers, char *ebuf);
void dm_curl_easy_performed(void);
int dm_curl_easy_error(struct dm_curl *h, CURL *c, CURLcode cc, const char *ebuf, struct dm_error *err);

/* A stream over fd (a socket carrying Docker frames), taking it over. */
int dm_stream_from_fd(int fd, struct dm_stream **ret, struct dm_error *err);

#endif
