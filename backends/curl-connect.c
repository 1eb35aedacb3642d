/* SPDX-License-Identifier: MIT */
/* Raw connections to the engine, for the direct path and the hijacked
 * streams: a plain socket (unix, or tcp without TLS), or for TLS one end of
 * a socket pair that a thread relays over libcurl. */
#include "config.h"
#include "backends/curl.h"
#include "backends/curl-internal.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "src/basic/cleanup.h"

/* A hijacked stream over TLS: stream.c works on a plain socket (poll with
 * the cancel fd, shutdown for stdin EOF), so it gets one end of a socket
 * pair and a detached thread carries the bytes between the other end and a
 * libcurl TLS connection (CONNECT_ONLY, same verification as requests).
 * The thread ends when either side is done; it owns both. */
struct tls_relay {
        CURL *c;
        int local;
};

static bool local_send(int fd, const char *p, size_t len)
{
        while (len > 0) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return false;
                p += n;
                len -= (size_t)n;
        }
        return true;
}

static bool relay_send(CURL *c, curl_socket_t sock, const char *p, size_t len)
{
        while (len > 0) {
                size_t sent = 0;
                CURLcode cc = curl_easy_send(c, p, len, &sent);

                if (cc == CURLE_AGAIN) {
                        struct pollfd pf = { .fd = sock, .events = POLLOUT };
                        if (poll(&pf, 1, 60000) <= 0)
                                return false;
                        continue;
                }
                if (cc != CURLE_OK)
                        return false;
                p += sent;
                len -= sent;
        }
        return true;
}

static void *relay_thread(void *userdata)
{
        struct tls_relay *r = userdata;
        curl_socket_t sock = CURL_SOCKET_BAD;
        bool local_eof = false;
        char buf[16384];

        curl_easy_getinfo(r->c, CURLINFO_ACTIVESOCKET, &sock);
        while (sock != CURL_SOCKET_BAD) {
                struct pollfd p[2] = { { .fd = sock, .events = POLLIN },
                                       { .fd = r->local, .events = local_eof ? 0 : POLLIN } };
                bool done = false;

                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (p[0].revents) {
                        /* Drain: TLS may hold decrypted bytes the socket no longer shows. */
                        for (;;) {
                                size_t got = 0;
                                CURLcode cc = curl_easy_recv(r->c, buf, sizeof(buf), &got);

                                if (cc == CURLE_AGAIN)
                                        break;
                                if (cc != CURLE_OK || got == 0 || !local_send(r->local, buf, got)) {
                                        done = true;
                                        break;
                                }
                        }
                }
                if (!done && (p[1].revents & POLLIN)) {
                        ssize_t n = recv(r->local, buf, sizeof(buf), 0);

                        if (n > 0)
                                done = !relay_send(r->c, sock, buf, (size_t)n);
                        else if (n == 0) {
                                /* stdin EOF: half-close towards the engine. */
                                local_eof = true;
                                (void)shutdown(sock, SHUT_WR);
                        } else if (errno != EINTR && errno != EAGAIN)
                                done = true;
                } else if (!done && (p[1].revents & (POLLHUP | POLLERR)))
                        done = true; /* the stream was freed */
                if (done)
                        break;
        }
        curl_easy_cleanup(r->c);
        close(r->local);
        free(r);
        return NULL;
}

static int tls_connect_raw(struct dm_curl *h, int *ret_fd, struct dm_error *err)
{
        struct tls_relay *r = calloc(1, sizeof(*r));
        char ebuf[CURL_ERROR_SIZE] = "";
        int sv[2] = { -1, -1 }, e;
        sigset_t all, old;
        pthread_t t;
        CURLcode cc;

        if (!r || !(r->c = curl_easy_init())) {
                free(r);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        curl_easy_setopt(r->c, CURLOPT_URL, h->base_url);
        curl_easy_setopt(r->c, CURLOPT_PROXY, "");
        dm_curl_apply_tls(h, r->c);
        curl_easy_setopt(r->c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(r->c, CURLOPT_OPENSOCKETFUNCTION, dm_curl_open_socket_cloexec);
        curl_easy_setopt(r->c, CURLOPT_ERRORBUFFER, ebuf);
        curl_easy_setopt(r->c, CURLOPT_CONNECTTIMEOUT_MS, (long)DM_CURL_CONNECT_TIMEOUT_MS);
        curl_easy_setopt(r->c, CURLOPT_CONNECT_ONLY, 1L);
        cc = curl_easy_perform(r->c);
        dm_curl_mark_pairs_cloexec();
        if (cc != CURLE_OK) {
                e = dm_curl_map_error(h, r->c, cc, ebuf, false, err);
                curl_easy_cleanup(r->c);
                free(r);
                return e;
        }
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
                e = dm_error_set(err, -errno, "socketpair: %s", strerror(errno));
                curl_easy_cleanup(r->c);
                free(r);
                return e;
        }
        r->local = sv[1];
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        e = pthread_create(&t, NULL, relay_thread, r);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (e != 0) {
                close(sv[0]);
                close(sv[1]);
                curl_easy_cleanup(r->c);
                free(r);
                return dm_error_set(err, -e, "start a thread: %s", strerror(e));
        }
        pthread_detach(t);
        *ret_fd = sv[0];
        return 0;
}

/* A plain connection to the engine: its unix socket, or tcp without TLS. */
int dm_curl_plain_connect(struct dm_curl *h, int *ret_fd, struct dm_error *err)
{
        _cleanup_close_ int fd = -1;

        if (h->unix_path) {
                struct sockaddr_un sa = { .sun_family = AF_UNIX };

                memcpy(sa.sun_path, h->unix_path, strlen(h->unix_path) + 1);
                fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        return dm_error_set(err, -errno, "socket: %s", strerror(errno));
                if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                        return dm_error_set(err, -EHOSTDOWN, "engine not reachable at '%s': %s", h->host,
                                            strerror(errno));
        } else {
                struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
                int saved = 0, one = 1, gr;

                gr = getaddrinfo(h->tcp_host, h->tcp_port, &hints, &res);
                if (gr != 0)
                        return dm_error_set(err, -EHOSTDOWN, "engine not reachable at '%s': %s", h->host,
                                            gai_strerror(gr));
                for (struct addrinfo *a = res; a; a = a->ai_next) {
                        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
                        if (fd < 0) {
                                saved = errno;
                                continue;
                        }
                        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0)
                                break;
                        saved = errno;
                        close(fd);
                        fd = -1;
                }
                freeaddrinfo(res);
                if (fd < 0)
                        return dm_error_set(err, -EHOSTDOWN, "engine not reachable at '%s': %s", h->host,
                                            strerror(saved ? saved : ECONNREFUSED));
                /* stdin goes out in small writes; don't let Nagle sit on them. */
                (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        *ret_fd = TAKE_FD(fd);
        return 0;
}

int dm_curl_connect_raw(struct dm_curl *h, int *ret_fd, struct dm_error *err)
{
        if (h->tls)
                return tls_connect_raw(h, ret_fd, err);
        return dm_curl_plain_connect(h, ret_fd, err);
}
