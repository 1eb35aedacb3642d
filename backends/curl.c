/* SPDX-License-Identifier: MIT */
/* Plain requests to the engine, and to other HTTP APIs.
 *
 * An engine on this host without TLS (its unix socket, or loopback tcp) is
 * spoken to directly (backends/http1.c): every local call goes that way, and
 * an idle server never opens libcurl (src/basic/curl-api.h says why). TLS
 * engines and the other APIs (OpenSandbox, execd) go through libcurl.
 *
 * Connections are pooled (at most DM_CURL_POOL_MAX idle): plain sockets for the
 * direct path, easy handles (each keeping its connection) for libcurl, so
 * the next call skips the connect. Measured against Podman 4.3.1 over its
 * unix socket: GET /_ping 0.29 ms pooled vs 0.32 ms with a fresh handle each
 * time; small next to the engine's own 5-150 ms per container call, but
 * free. Raw connections (and the TLS relay) are in curl-connect.c, the
 * hijacked streams in stream.c. */
#include "config.h"
#include "backends/curl.h"
#include "backends/curl-internal.h"
#include "src/basic/io.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

const char *dm_curl_host(const struct dm_curl *h)
{
        return h->host;
}

bool dm_curl_host_is_loopback(const char *host)
{
        struct in_addr a4;
        struct in6_addr a6;

        if (inet_pton(AF_INET, host, &a4) == 1)
                return (ntohl(a4.s_addr) >> 24) == 127;
        return inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

/* Docker's conventions for tcp://: a non-empty DOCKER_TLS_VERIFY turns on
 * TLS, verifying the engine's certificate against ca.pem and presenting
 * cert.pem and key.pem, all in DOCKER_CERT_PATH (default ~/.docker). Unlike
 * the docker CLI, plain tcp is refused unless the address is loopback
 * (127.0.0.0/8, ::1): an unauthenticated engine API is root on its host. */
static int tcp_tls(struct dm_curl *h, const struct dm_engine_env *env, struct dm_error *err)
{
        const char *verify = env ? env->docker_tls_verify : NULL, *dir = env ? env->docker_cert_path : NULL,
                   *home = env ? env->home : NULL;
        _cleanup_free_ char *def = NULL;
        char **slot[] = { &h->tls_ca, &h->tls_cert, &h->tls_key };
        static const char *const names[] = { "ca.pem", "cert.pem", "key.pem" };

        if (!verify || !verify[0]) {
                if (dm_curl_host_is_loopback(h->tcp_host))
                        return 0;
                return dm_error_set(err, -EPERM,
                                    "engine host '%s' without TLS: plain tcp is allowed to a loopback address only "
                                    "(127.0.0.1, ::1; for tests); set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH "
                                    "(a directory with ca.pem, cert.pem and key.pem) for a remote engine",
                                    h->host);
        }
        if (!dir || !dir[0]) {
                if (!home || home[0] != '/')
                        return dm_error_set(err, -EINVAL,
                                            "DOCKER_TLS_VERIFY is set but neither DOCKER_CERT_PATH nor HOME is: "
                                            "set DOCKER_CERT_PATH to the directory with ca.pem, cert.pem and key.pem");
                if (asprintf(&def, "%s/.docker", home) < 0)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                dir = def;
        }
        for (size_t i = 0; i < DM_ARRAY_SIZE(names); i++) {
                if (asprintf(slot[i], "%s/%s", dir, names[i]) < 0) {
                        *slot[i] = NULL;
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                if (access(*slot[i], R_OK) < 0)
                        return dm_error_set(err, -errno, "DOCKER_TLS_VERIFY: cannot read '%s' (from %s): %s", *slot[i],
                                            def ? "~/.docker, DOCKER_CERT_PATH unset" : "DOCKER_CERT_PATH",
                                            strerror(errno));
        }
        h->tls = true;
        return 0;
}

void dm_curl_apply_tls(const struct dm_curl *h, CURL *c)
{
        if (!h->tls)
                return;
        curl_easy_setopt(c, CURLOPT_CAINFO, h->tls_ca);
        curl_easy_setopt(c, CURLOPT_SSLCERT, h->tls_cert);
        curl_easy_setopt(c, CURLOPT_SSLKEY, h->tls_key);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
}

bool dm_curl_tls(const struct dm_curl *h)
{
        return h->tls;
}

bool dm_curl_on_this_host(const struct dm_curl *h)
{
        return h->unix_path || (h->tcp_host && dm_curl_host_is_loopback(h->tcp_host));
}

const char *dm_curl_describe_host(struct dm_curl *h)
{
        if (!h->tcp_host)
                return h->host; /* tests read a socket's path after " at " */
        pthread_mutex_lock(&h->lock);
        if (!h->describe && asprintf(&h->describe, "%s (%s)", h->host,
                                     h->tls ? "TLS, engine verified against its CA, client certificate sent"
                                            : "no TLS: plain tcp, loopback only") < 0)
                h->describe = NULL;
        pthread_mutex_unlock(&h->lock);
        return h->describe ? h->describe : h->host;
}

static int parse_host(struct dm_curl *h, const char *host, const struct dm_engine_env *env, struct dm_error *err)
{
        int r;

        if (strncmp(host, "unix://", 7) == 0) {
                const char *path = host + 7;

                if (path[0] != '/')
                        return dm_error_set(err, -EINVAL, "engine host '%s': unix socket path must be absolute", host);
                if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
                        return dm_error_set(err, -ENAMETOOLONG, "engine host '%s': socket path too long", host);
                h->unix_path = strdup(path);
                h->host_header = strdup("localhost");
                if (!h->unix_path || !h->host_header || asprintf(&h->base_url, "http://localhost" DM_API_PREFIX) < 0)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                return 0;
        }
        if (strncmp(host, "tcp://", 6) == 0) {
                const char *hp = host + 6, *colon;
                size_t hl;

                /* "[v6]:port", "name:port" or "name". */
                if (hp[0] == '[') {
                        const char *close = strchr(hp, ']');
                        if (!close)
                                return dm_error_set(err, -EINVAL, "engine host '%s': unclosed '['", host);
                        h->tcp_host = strndup(hp + 1, (size_t)(close - hp - 1));
                        colon = close[1] == ':' ? close + 1 : NULL;
                } else {
                        colon = strrchr(hp, ':');
                        hl = colon ? (size_t)(colon - hp) : strlen(hp);
                        h->tcp_host = strndup(hp, hl);
                }
                h->tcp_port = strdup(colon && colon[1] ? colon + 1 : "2375");
                if (!h->tcp_host || !h->tcp_port)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                if (!h->tcp_host[0] || strchr(h->tcp_port, '/'))
                        return dm_error_set(err, -EINVAL, "engine host '%s': expected tcp://host:port", host);
                r = tcp_tls(h, env, err);
                if (r < 0)
                        return r;
                if (asprintf(&h->base_url,
                             strchr(h->tcp_host, ':') ? "%s://[%s]:%s" DM_API_PREFIX : "%s://%s:%s" DM_API_PREFIX,
                             h->tls ? "https" : "http", h->tcp_host, h->tcp_port) < 0 ||
                    asprintf(&h->host_header, strchr(h->tcp_host, ':') ? "[%s]:%s" : "%s:%s", h->tcp_host,
                             h->tcp_port) < 0) {
                        h->host_header = NULL;
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                return 0;
        }
        return dm_error_set(err, -EINVAL, "engine host '%s': expected unix:///path or tcp://host:port", host);
}

static int http_alloc(const char *host, size_t response_max, const char *noun, struct dm_curl **ret,
                      struct dm_error *err)
{
        struct dm_curl *h;

        h = calloc(1, sizeof(*h));
        if (!h)
                return dm_error_set(err, -ENOMEM, "out of memory");
        pthread_mutex_init(&h->lock, NULL);
        h->response_max = response_max;
        h->noun = noun;
        h->host = strdup(host);
        if (!h->host) {
                dm_curl_free(h);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        *ret = h;
        return 0;
}

/* The JSON content type, no 100-continue round trip ("Expect:" stops it on
 * bodies > 1 KiB), then the caller's own headers; as libcurl lists too
 * when h is not direct (which opens libcurl, saying why it cannot). */
static int http_headers(struct dm_curl *h, const char *const *extra, struct dm_error *err)
{
        static const char *const base[] = { "Content-Type: application/json", "Expect:" };
        size_t n = 0;
        int r;

        while (extra && extra[n])
                n++;
        h->lines = calloc(n + 3, sizeof(*h->lines));
        if (!h->lines)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < 2 + n; i++) {
                if (!(h->lines[i] = strdup(i < 2 ? base[i] : extra[i - 2])))
                        return dm_error_set(err, -ENOMEM, "out of memory");
                h->n_lines++;
        }
        h->n_base = 2;
        if (h->direct)
                return 0;
        r = dm_curl_api_ready(err);
        if (r < 0)
                return dm_error_wrap(err, "%s at '%s'", h->noun, h->host);
        for (size_t i = 0; i < h->n_lines; i++) {
                struct curl_slist *l = curl_slist_append(h->headers, h->lines[i]), *e;
                if (!l)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                h->headers = l;
                if (i < h->n_base)
                        continue;
                if (!(e = curl_slist_append(h->extra, h->lines[i])))
                        return dm_error_set(err, -ENOMEM, "out of memory");
                h->extra = e;
        }
        return 0;
}

int dm_curl_new(const char *host, size_t response_max, const struct dm_engine_env *env, struct dm_curl **ret,
                struct dm_error *err)
{
        struct dm_curl *h = NULL;
        int r;

        r = http_alloc(host, response_max, "engine", &h, err);
        if (r >= 0)
                r = parse_host(h, host, env, err);
        if (r >= 0) {
                h->direct = !h->tls;
                r = http_headers(h, NULL, err);
        }
        if (r < 0) {
                dm_curl_free(h);
                return r;
        }
        *ret = h;
        return 0;
}

int dm_curl_new_url(const char *base_url, size_t response_max, const char *noun, const char *const *headers,
                    struct dm_curl **ret, struct dm_error *err)
{
        struct dm_curl *h = NULL;
        int r;

        if (strncmp(base_url, "http://", 7) != 0 && strncmp(base_url, "https://", 8) != 0)
                return dm_error_set(err, -EINVAL, "%s URL '%s' must start with http:// or https://", noun, base_url);
        r = http_alloc(base_url, response_max, noun, &h, err);
        if (r >= 0 && !(h->base_url = strdup(base_url)))
                r = dm_error_set(err, -ENOMEM, "out of memory");
        if (r >= 0)
                r = http_headers(h, headers, err);
        if (r < 0) {
                dm_curl_free(h);
                return r;
        }
        *ret = h;
        return 0;
}

void dm_curl_free(struct dm_curl *h)
{
        if (!h)
                return;
        /* Nothing of libcurl's when it was not used: that would open it. */
        for (size_t i = 0; i < h->n_idle; i++)
                curl_easy_cleanup(h->idle[i]);
        for (size_t i = 0; i < h->n_idle_fd; i++)
                close(h->idle_fd[i]);
        if (h->headers)
                curl_slist_free_all(h->headers);
        if (h->extra)
                curl_slist_free_all(h->extra);
        for (size_t i = 0; i < h->n_lines; i++)
                free(h->lines[i]);
        free(h->lines);
        free(h->host_header);
        pthread_mutex_destroy(&h->lock);
        free(h->host);
        free(h->unix_path);
        free(h->tcp_host);
        free(h->tcp_port);
        free(h->tls_ca);
        free(h->tls_cert);
        free(h->tls_key);
        free(h->describe);
        free(h->base_url);
        free(h);
}

/* libcurl makes its sockets without close-on-exec; a container engine we
 * spawn (or any child of the server) must not inherit engine connections. */
curl_socket_t dm_curl_open_socket_cloexec(void *userdata, curlsocktype purpose, struct curl_sockaddr *a)
{
        int fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
        return fd < 0 ? CURL_SOCKET_BAD : fd;
}

struct sink {
        struct dm_buf *buf;
        bool too_big;
};

static size_t on_body(char *p, size_t size, size_t n, void *userdata)
{
        struct sink *s = userdata;

        int r = dm_buf_append(s->buf, p, size * n);

        if (r < 0) {
                s->too_big = r == -E2BIG;
                return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
        }
        return size * n;
}

/* libcurl (7.88 here; still open upstream as curl issue #13618) makes the
 * wakeup socketpair of each easy handle's internal multi handle without
 * close-on-exec, lazily on the handle's first transfer, and offers no way to
 * reach it. So after a fresh handle's first transfer we mark what can only be
 * such a pair: unnamed, non-blocking unix sockets without close-on-exec (every
 * fd of ours is made close-on-exec at creation). Runs once per new handle;
 * the window before it runs is a few microseconds.
 *
 * Since every descriptor of ours is close-on-exec already, one
 * close_range(3, ~0, CLOSE_RANGE_CLOEXEC) (Linux 5.11) does the same in the
 * kernel without looking at each: the walk of /proc/self/fd below, a
 * readdir and four calls per descriptor, grew with the open descriptors and
 * was 42 % of the server's CPU with 200 OpenSandbox sandboxes open, where
 * every sandbox's execd has a handle of its own (bench/RESULTS.md, the
 * scale run). The walk stays for older kernels. */
void dm_curl_mark_pairs_cloexec(void)
{
        DIR *d;
        struct dirent *e;

        if (syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */) == 0)
                return;
        d = opendir("/proc/self/fd");

        while (d && (e = readdir(d))) {
                struct sockaddr_un sa;
                socklen_t sl = sizeof(sa), dl = sizeof(int);
                struct stat st;
                int fd, fdflags, flflags, domain;

                if (e->d_name[0] < '0' || e->d_name[0] > '9')
                        continue;
                fd = atoi(e->d_name);
                if (fd <= 2 || fd == dirfd(d))
                        continue;
                fdflags = fcntl(fd, F_GETFD);
                flflags = fcntl(fd, F_GETFL);
                if (fdflags < 0 || (fdflags & FD_CLOEXEC) || flflags < 0 || !(flflags & O_NONBLOCK))
                        continue;
                if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode) ||
                    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dl) < 0 || domain != AF_UNIX ||
                    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0 || sl > offsetof(struct sockaddr_un, sun_path))
                        continue;
                (void)fcntl(fd, F_SETFD, fdflags | FD_CLOEXEC);
        }
        if (d)
                closedir(d);
}

struct header_sink {
        struct dm_curl_header *want;
        size_t n_want;
};

static size_t on_header(char *p, size_t size, size_t n, void *userdata)
{
        struct header_sink *hs = userdata;
        size_t len = size * n;

        for (size_t i = 0; i < hs->n_want; i++) {
                size_t nl = strlen(hs->want[i].name), vl;
                const char *v;

                if (len <= nl || p[nl] != ':' || strncasecmp(p, hs->want[i].name, nl) != 0)
                        continue;
                v = p + nl + 1;
                vl = len - nl - 1;
                while (vl && (*v == ' ' || *v == '\t'))
                        v++, vl--;
                while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
                        vl--;
                if (vl >= sizeof(hs->want[i].value))
                        vl = sizeof(hs->want[i].value) - 1;
                memcpy(hs->want[i].value, v, vl);
                hs->want[i].value[vl] = '\0';
        }
        return len;
}

static CURL *take_handle(struct dm_curl *h, bool *ret_fresh)
{
        CURL *c = NULL;

        pthread_mutex_lock(&h->lock);
        if (h->n_idle)
                c = h->idle[--h->n_idle];
        pthread_mutex_unlock(&h->lock);
        *ret_fresh = !c;
        if (c)
                curl_easy_reset(c); /* drops options, keeps the live connection */
        else
                c = curl_easy_init();
        return c;
}

static void give_handle(struct dm_curl *h, CURL *c)
{
        pthread_mutex_lock(&h->lock);
        if (h->n_idle < DM_CURL_POOL_MAX) {
                h->idle[h->n_idle++] = c;
                c = NULL;
        }
        pthread_mutex_unlock(&h->lock);
        if (c)
                curl_easy_cleanup(c);
}

int dm_curl_map_error(struct dm_curl *h, CURL *c, CURLcode cc, const char *ebuf, bool too_big, struct dm_error *err)
{
        long os_errno = 0;
        curl_off_t connect_us = 0;
        const char *reason = ebuf[0] ? ebuf : curl_easy_strerror(cc);

        curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &os_errno);
        curl_easy_getinfo(c, CURLINFO_CONNECT_TIME_T, &connect_us);
        if (too_big)
                return dm_error_set(err, -E2BIG, "%s response larger than %zu bytes", h->noun, h->response_max);
        switch (cc) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                /* libcurl's own sentence names "localhost port 80" for unix
                 * sockets; the OS error says what is actually wrong. */
                if (os_errno)
                        reason = strerror((int)os_errno);
                return dm_error_set(err, -EHOSTDOWN, "%s not reachable at '%s': %s", h->noun, h->host, reason);
        case CURLE_OPERATION_TIMEDOUT:
                if (connect_us == 0)
                        return dm_error_set(err, -EHOSTDOWN, "%s not reachable at '%s': %s", h->noun, h->host, reason);
                return dm_error_set(err, -ETIMEDOUT, "%s at '%s' did not answer in time", h->noun, h->host);
        case CURLE_OUT_OF_MEMORY: return dm_error_set(err, -ENOMEM, "out of memory");
        default:
                /* TLS 1.3: an engine that rejects our client certificate just
                 * closes after the handshake, which libcurl reports as a
                 * socket error; say what it most likely means. */
                if (h->tls)
                        return dm_error_set(err, -EIO,
                                            "%s TLS connection to '%s' failed: %s (is ca.pem the engine's CA, and "
                                            "does the engine trust the CA of cert.pem? DOCKER_CERT_PATH '%.*s')",
                                            h->noun, h->host, reason, (int)(strlen(h->tls_ca) - strlen("/ca.pem")),
                                            h->tls_ca);
                return dm_error_set(err, -EIO, "%s connection to '%s' failed: %s", h->noun, h->host, reason);
        }
}

/* ---- the direct path (backends/http1.c) ------------------------------------ */

static int take_fd(struct dm_curl *h)
{
        int fd = -1;

        pthread_mutex_lock(&h->lock);
        if (h->n_idle_fd)
                fd = h->idle_fd[--h->n_idle_fd];
        pthread_mutex_unlock(&h->lock);
        return fd;
}

static void give_fd(struct dm_curl *h, int fd)
{
        pthread_mutex_lock(&h->lock);
        if (h->n_idle_fd < DM_CURL_POOL_MAX) {
                h->idle_fd[h->n_idle_fd++] = fd;
                fd = -1;
        }
        pthread_mutex_unlock(&h->lock);
        if (fd >= 0)
                close(fd);
}

/* One exchange, on a kept-alive connection when there is one; a kept-alive
 * connection the peer closed meanwhile (nothing of the response came) is
 * replaced by a new one, once. A body from a file always gets a new one. */
static int direct_exchange(struct dm_curl *h, struct dm_http1_request *rq, dm_http1_sink sink, void *ud,
                           long *ret_status, struct dm_error *err)
{
        for (int attempt = 0;; attempt++) {
                int fd = attempt == 0 && rq->in_fd < 0 ? take_fd(h) : -1, r;
                bool pooled = fd >= 0, reusable = false, started = false;

                if (fd < 0 && (r = dm_curl_plain_connect(h, &fd, err)) < 0)
                        return r;
                r = dm_http1_exchange(fd, rq, sink, ud, ret_status, &reusable, &started);
                if (r >= 0 && reusable)
                        give_fd(h, fd);
                else
                        close(fd);
                if (r >= 0)
                        return 0;
                if (pooled && !started && r != -ETIMEDOUT && r != -ENOMEM)
                        continue;
                return r;
        }
}

static int direct_error(struct dm_curl *h, int r, struct dm_error *err)
{
        if (r == -ETIMEDOUT)
                return dm_error_set(err, -ETIMEDOUT, "%s at '%s' did not answer in time", h->noun, h->host);
        if (r == -ENOMEM)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (r == -EPROTO)
                return dm_error_set(err, -EIO, "%s at '%s' answered something that is not HTTP/1.1", h->noun, h->host);
        return dm_error_set(err, -EIO, "%s connection to '%s' failed: %s", h->noun, h->host, strerror(-r));
}

static int direct_target(const char *path, char **ret)
{
        return asprintf(ret, DM_API_PREFIX "%s", path) < 0 ? -ENOMEM : 0;
}

static int body_to_buf(void *userdata, long status, const char *data, size_t len)
{
        return dm_buf_append(userdata, data, len);
}

static int direct_request(struct dm_curl *h, const char *method, const char *path, const char *json_body,
                          long timeout_ms, long *ret_status, struct dm_buf *body, struct dm_curl_header *want,
                          size_t n_want, struct dm_error *err)
{
        _cleanup_free_ char *target = NULL;
        struct dm_http1_request rq = {
                .method = method,
                .host = h->host_header,
                .lines = (const char *const *)h->lines,
                .body = json_body,
                .body_len = json_body ? strlen(json_body) : 0,
                .in_fd = -1,
                .deadline_ms = timeout_ms > 0 ? dm_now_ms() + timeout_ms : 0,
                .want = want,
                .n_want = n_want,
        };
        int r;

        if (direct_target(path, &target) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        rq.target = target;
        dm_buf_reset(body);
        r = direct_exchange(h, &rq, body_to_buf, body, ret_status, err);
        if (r == -E2BIG)
                return dm_error_set(err, -E2BIG, "%s response larger than %zu bytes", h->noun, h->response_max);
        if (r < 0 && r != -EHOSTDOWN)
                return direct_error(h, r, err);
        return r;
}

struct direct_transfer {
        int out_fd;
        int64_t out_max, out_len;
        struct dm_buf *errbody;
        bool too_big, io_failed;
        int saved_errno;
};

static int transfer_sink(void *userdata, long status, const char *data, size_t len)
{
        struct direct_transfer *t = userdata;

        if (status < 200 || status > 299) {
                (void)dm_buf_append(t->errbody, data, len); /* keep what fits */
                return 0;
        }
        if (t->out_max > 0 && t->out_len + (int64_t)len > t->out_max) {
                t->too_big = true;
                return -EFBIG;
        }
        if (dm_write_all(t->out_fd, data, len) < 0) {
                t->io_failed = true;
                t->saved_errno = errno;
                return -EIO;
        }
        t->out_len += (int64_t)len;
        return 0;
}

static int direct_transfer(struct dm_curl *h, const char *method, const char *path, const char *content_type, int in_fd,
                           int64_t in_len, int out_fd, int64_t out_max, long timeout_ms, long *ret_status,
                           struct dm_buf *errbody, struct dm_error *err)
{
        struct direct_transfer t = { .out_fd = out_fd, .out_max = out_max, .errbody = errbody };
        _cleanup_free_ char *target = NULL, *ct = NULL;
        _cleanup_free_ const char **lines = calloc(h->n_lines + 3, sizeof(*lines));
        struct dm_http1_request rq = {
                .method = method,
                .host = h->host_header,
                .in_fd = in_fd,
                .in_len = in_len,
                .deadline_ms = timeout_ms > 0 ? dm_now_ms() + timeout_ms : 0,
        };
        size_t n = 0;
        int r;

        if (!lines || direct_target(path, &target) < 0 ||
            asprintf(&ct, "Content-Type: %s", content_type ? content_type : "application/x-tar") < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        lines[n++] = ct;
        lines[n++] = "Expect:";
        for (size_t i = h->n_base; i < h->n_lines; i++)
                lines[n++] = h->lines[i];
        rq.target = target;
        rq.lines = lines;
        dm_buf_reset(errbody);
        r = direct_exchange(h, &rq, transfer_sink, &t, ret_status, err);
        if (r >= 0 || r == -EHOSTDOWN)
                return r;
        if (t.too_big)
                return dm_error_set(err, -EFBIG, "larger than %lld bytes", (long long)out_max);
        if (t.io_failed)
                return dm_error_set(err, -EIO, "local file error: %s", strerror(t.saved_errno));
        if (r == -EIO) /* reading in_fd */
                return dm_error_set(err, -EIO, "local file error: %s", strerror(errno));
        return direct_error(h, r, err);
}

/* ---- libcurl ------------------------------------------------------------------ */

int dm_curl_request(struct dm_curl *h, const char *method, const char *path, const char *json_body, long timeout_ms,
                    long *ret_status, struct dm_buf *body, struct dm_error *err)
{
        return dm_curl_request_headers(h, method, path, json_body, timeout_ms, ret_status, body, NULL, 0, err);
}

int dm_curl_request_headers(struct dm_curl *h, const char *method, const char *path, const char *json_body,
                            long timeout_ms, long *ret_status, struct dm_buf *body, struct dm_curl_header *want,
                            size_t n_want, struct dm_error *err)
{
        struct header_sink hs = { want, n_want };
        char ebuf[CURL_ERROR_SIZE] = "";
        _cleanup_free_ char *url = NULL;
        struct sink s = { .buf = body };
        CURLcode cc;
        CURL *c;
        long status = 0;
        bool fresh;
        int r;

        if (h->direct)
                return direct_request(h, method, path, json_body, timeout_ms, ret_status, body, want, n_want, err);
        if (asprintf(&url, "%s%s", h->base_url, path) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        c = take_handle(h, &fresh);
        if (!c)
                return dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_reset(body);

        curl_easy_setopt(c, CURLOPT_URL, url);
        if (h->unix_path)
                curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, h->unix_path);
        /* The server's environment may name an HTTP proxy (even our own egress
         * proxy); the engine is always reached directly. */
        curl_easy_setopt(c, CURLOPT_PROXY, "");
        dm_curl_apply_tls(h, c);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, dm_curl_open_socket_cloexec);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->headers);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
        if (n_want) {
                for (size_t i = 0; i < n_want; i++)
                        want[i].value[0] = '\0';
                curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
                curl_easy_setopt(c, CURLOPT_HEADERDATA, &hs);
        }
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
                         timeout_ms > 0 && timeout_ms < DM_CURL_CONNECT_TIMEOUT_MS ? timeout_ms
                                                                                   : DM_CURL_CONNECT_TIMEOUT_MS);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
        if (strcmp(method, "GET") == 0) {
                curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
        } else if (strcmp(method, "HEAD") == 0) {
                curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        } else if (strcmp(method, "POST") == 0) {
                curl_easy_setopt(c, CURLOPT_POST, 1L);
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, json_body ? json_body : "");
                curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, json_body ? (long)strlen(json_body) : 0L);
        } else {
                curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
                if (json_body) {
                        curl_easy_setopt(c, CURLOPT_POSTFIELDS, json_body);
                        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(json_body));
                }
        }

        cc = curl_easy_perform(c);
        if (fresh)
                dm_curl_mark_pairs_cloexec();
        if (cc != CURLE_OK) {
                r = dm_curl_map_error(h, c, cc, ebuf, s.too_big, err);
                /* A handle whose transfer failed may hold a broken connection. */
                curl_easy_cleanup(c);
                return r;
        }
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        give_handle(h, c);
        *ret_status = status;
        return 0;
}

struct transfer {
        CURL *c;
        int in_fd, out_fd;
        int64_t out_max, out_len;
        struct dm_buf *errbody;
        bool too_big, io_failed;
};

static size_t on_transfer_read(char *p, size_t size, size_t n, void *userdata)
{
        struct transfer *t = userdata;
        ssize_t r;

        do
                r = read(t->in_fd, p, size * n);
        while (r < 0 && errno == EINTR);
        if (r < 0) {
                t->io_failed = true;
                return CURL_READFUNC_ABORT;
        }
        return (size_t)r;
}

static size_t on_transfer_write(char *p, size_t size, size_t n, void *userdata)
{
        struct transfer *t = userdata;
        long status = 0;
        size_t len = size * n;

        curl_easy_getinfo(t->c, CURLINFO_RESPONSE_CODE, &status);
        if (status < 200 || status > 299)
                return dm_buf_append(t->errbody, p, len) < 0 ? len : len; /* keep what fits */
        if (t->out_max > 0 && t->out_len + (int64_t)len > t->out_max) {
                t->too_big = true;
                return 0;
        }
        if (dm_write_all(t->out_fd, p, len) < 0) {
                t->io_failed = true;
                return 0;
        }
        t->out_len += (int64_t)len;
        return len;
}

int dm_curl_transfer(struct dm_curl *h, const char *method, const char *path, const char *content_type, int in_fd,
                     int64_t in_len, int out_fd, int64_t out_max, long timeout_ms, long *ret_status,
                     struct dm_buf *errbody, struct dm_error *err)
{
        struct transfer t = { .in_fd = in_fd, .out_fd = out_fd, .out_max = out_max, .errbody = errbody };
        char ebuf[CURL_ERROR_SIZE] = "", ct[128];
        _cleanup_free_ char *url = NULL;
        struct curl_slist *headers = NULL;
        CURLcode cc;
        long status = 0;
        bool fresh;
        int r;

        if (h->direct)
                return direct_transfer(h, method, path, content_type, in_fd, in_len, out_fd, out_max, timeout_ms,
                                       ret_status, errbody, err);
        if (asprintf(&url, "%s%s", h->base_url, path) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        t.c = take_handle(h, &fresh);
        if (!t.c)
                return dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_reset(errbody);
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type ? content_type : "application/x-tar");
        headers = curl_slist_append(headers, ct);
        headers = curl_slist_append(headers, "Expect:");
        for (struct curl_slist *e = h->extra; e; e = e->next)
                headers = curl_slist_append(headers, e->data);

        curl_easy_setopt(t.c, CURLOPT_URL, url);
        if (h->unix_path)
                curl_easy_setopt(t.c, CURLOPT_UNIX_SOCKET_PATH, h->unix_path);
        curl_easy_setopt(t.c, CURLOPT_PROXY, "");
        dm_curl_apply_tls(h, t.c);
        curl_easy_setopt(t.c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(t.c, CURLOPT_OPENSOCKETFUNCTION, dm_curl_open_socket_cloexec);
        curl_easy_setopt(t.c, CURLOPT_ERRORBUFFER, ebuf);
        curl_easy_setopt(t.c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(t.c, CURLOPT_WRITEFUNCTION, on_transfer_write);
        curl_easy_setopt(t.c, CURLOPT_WRITEDATA, &t);
        curl_easy_setopt(t.c, CURLOPT_CONNECTTIMEOUT_MS, (long)DM_CURL_CONNECT_TIMEOUT_MS);
        curl_easy_setopt(t.c, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 0L);
        curl_easy_setopt(t.c, CURLOPT_CUSTOMREQUEST, method);
        if (in_fd >= 0) {
                curl_easy_setopt(t.c, CURLOPT_UPLOAD, 1L);
                curl_easy_setopt(t.c, CURLOPT_READFUNCTION, on_transfer_read);
                curl_easy_setopt(t.c, CURLOPT_READDATA, &t);
                curl_easy_setopt(t.c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)in_len);
        } else if (strcmp(method, "GET") == 0) {
                curl_easy_setopt(t.c, CURLOPT_HTTPGET, 1L);
        }

        cc = curl_easy_perform(t.c);
        if (fresh)
                dm_curl_mark_pairs_cloexec();
        curl_slist_free_all(headers);
        if (cc != CURLE_OK) {
                if (t.too_big)
                        r = dm_error_set(err, -EFBIG, "larger than %lld bytes", (long long)out_max);
                else if (t.io_failed)
                        r = dm_error_set(err, -EIO, "local file error: %s", strerror(errno));
                else
                        r = dm_curl_map_error(h, t.c, cc, ebuf, false, err);
                curl_easy_cleanup(t.c);
                return r;
        }
        curl_easy_getinfo(t.c, CURLINFO_RESPONSE_CODE, &status);
        give_handle(h, t.c);
        *ret_status = status;
        return 0;
}

CURL *dm_curl_easy(struct dm_curl *h, const char *path, struct curl_slist **ret_headers, char *ebuf)
{
        _cleanup_free_ char *url = NULL;
        struct curl_slist *headers = NULL;
        CURL *c;

        if (asprintf(&url, "%s%s", h->base_url, path) < 0)
                return NULL;
        for (struct curl_slist *e = h->extra; e; e = e->next) {
                struct curl_slist *l = curl_slist_append(headers, e->data);
                if (!l) {
                        curl_slist_free_all(headers);
                        return NULL;
                }
                headers = l;
        }
        c = curl_easy_init();
        if (!c) {
                curl_slist_free_all(headers);
                return NULL;
        }
        ebuf[0] = '\0';
        curl_easy_setopt(c, CURLOPT_URL, url);
        if (h->unix_path)
                curl_easy_setopt(c, CURLOPT_UNIX_SOCKET_PATH, h->unix_path);
        curl_easy_setopt(c, CURLOPT_PROXY, "");
        dm_curl_apply_tls(h, c);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, dm_curl_open_socket_cloexec);
        curl_easy_setopt(c, CURLOPT_ERRORBUFFER, ebuf);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)DM_CURL_CONNECT_TIMEOUT_MS);
        if (headers)
                curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        *ret_headers = headers;
        return c;
}

void dm_curl_easy_performed(void)
{
        dm_curl_mark_pairs_cloexec();
}

int dm_curl_easy_error(struct dm_curl *h, CURL *c, CURLcode cc, const char *ebuf, struct dm_error *err)
{
        return dm_curl_map_error(h, c, cc, ebuf, false, err);
}

int dm_curl_status_error(struct dm_error *err, long status, const char *body, size_t len)
{
        char text[512] = "";
        struct json_tokener *tok;
        struct json_object *o = NULL, *m;
        int code;

        switch (status) {
        case 400: code = -EINVAL; break;
        case 401:
        case 403: code = -EACCES; break;
        case 404: code = -ENOENT; break;
        case 409: code = -EBUSY; break;
        default: code = -EIO; break;
        }

        /* Docker answers {"message": ...}; Podman adds "cause" and "response". */
        if (body && len) {
                const char *brace = memchr(body, '{', len);

                tok = json_tokener_new();
                if (tok && brace)
                        o = json_tokener_parse_ex(tok, brace, (int)(len - (size_t)(brace - body)));
                if (o && json_object_object_get_ex(o, "message", &m) && json_object_is_type(m, json_type_string))
                        snprintf(text, sizeof(text), "%s", json_object_get_string(m));
                json_object_put(o);
                json_tokener_free(tok);
                if (!text[0])
                        snprintf(text, sizeof(text), "%.*s", (int)(len < 300 ? len : 300), body);
        }
        /* One line: engines end their messages with newlines now and then. */
        for (char *p = text; *p; p++)
                if (*p == '\n' || *p == '\r')
                        *p = ' ';
        for (size_t n = strlen(text); n && text[n - 1] == ' '; n--)
                text[n - 1] = '\0';
        return dm_error_set(err, code, "engine answered %ld: %s", status, text[0] ? text : "(no message)");
}
