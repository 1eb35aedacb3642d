/* SPDX-License-Identifier: MIT */
#ifndef DM_BACKENDS_CURL_INTERNAL_H
#define DM_BACKENDS_CURL_INTERNAL_H

/* What the HTTP client's files share, defined in curl.c (requests, the
 * libcurl settings every handle gets, error mapping) and curl-connect.c (raw
 * connections to the engine: plain sockets, and TLS through a relay thread).
 * Never included outside those files. */

#include "src/basic/curl-api.h"
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "backends/curl.h"
#include "src/basic/error.h"

#define DM_CURL_POOL_MAX 8
#define DM_CURL_CONNECT_TIMEOUT_MS 10000L

struct dm_curl {
        char *host;      /* as given */
        char *unix_path; /* set for unix:// */
        char *tcp_host;  /* set for tcp:// */
        char *tcp_port;
        char *base_url; /* "http://localhost/v1.41" or "http://h:p/v1.41" */
        bool tls;       /* tcp:// with DOCKER_TLS_VERIFY: https, both sides verified */
        char *tls_ca, *tls_cert, *tls_key;
        char *describe; /* host plus "(TLS ...)" for describe, lazily */
        size_t response_max;
        const char *noun;           /* "engine", "OpenSandbox server", "execd": for messages */
        char **lines;               /* every request's header lines, the caller's extra ones last */
        size_t n_lines, n_base;     /* ... of which the first n_base are ours */
        bool direct;                /* spoken to without libcurl (backends/http1.c) */
        char *host_header;          /* direct: the Host header's value */
        struct curl_slist *headers; /* libcurl: lines */
        struct curl_slist *extra;   /* libcurl: the caller's extra lines alone (for transfers) */

        pthread_mutex_t lock;
        CURL *idle[DM_CURL_POOL_MAX];
        size_t n_idle;
        int idle_fd[DM_CURL_POOL_MAX]; /* direct: kept-alive connections */
        size_t n_idle_fd;
};

/* The client's TLS files and verification on c (nothing without TLS). */
void dm_curl_apply_tls(const struct dm_curl *h, CURL *c);
/* CURLOPT_OPENSOCKETFUNCTION: libcurl's sockets, made close-on-exec. */
curl_socket_t dm_curl_open_socket_cloexec(void *userdata, curlsocktype purpose, struct curl_sockaddr *a);
/* After a fresh handle's first transfer: its internal wakeup pair made
 * close-on-exec (curl.c says why). */
void dm_curl_mark_pairs_cloexec(void);
/* A failed libcurl call on c as an error naming the peer. */
int dm_curl_map_error(struct dm_curl *h, CURL *c, CURLcode cc, const char *ebuf, bool too_big, struct dm_error *err);

/* A plain connection to the engine (its unix socket, or tcp without TLS),
 * close-on-exec, blocking. */
int dm_curl_plain_connect(struct dm_curl *h, int *ret_fd, struct dm_error *err);

#endif
