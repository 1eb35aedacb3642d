/* SPDX-License-Identifier: MIT */
#ifndef DM_BASIC_CURL_API_H
#define DM_BASIC_CURL_API_H

/* libcurl, opened on first use.
 *
 * Every local call goes to the engine's unix socket in plain HTTP, which
 * backends/curl.c speaks itself; libcurl is for TLS engines, OpenSandbox
 * and the vendor proxy's upstreams. Linking it would map its ~30 libraries
 * (OpenSSL, GnuTLS, Kerberos, LDAP, libssh2...) into every server at start:
 * 7 MiB of a 14 MiB idle server (bench/RESULTS.md). So nothing links it:
 * the first call of a curl_ function below opens libcurl.so.4 (dlopen),
 * looks its functions up and runs curl_global_init once. Include this
 * header instead of <curl/curl.h>; the names stay libcurl's.
 *
 * When libcurl cannot be opened, the functions fail as libcurl does when
 * it cannot allocate (curl_easy_init NULL, CURLE_FAILED_INIT, ...); entry
 * points check dm_curl_api_ready() first, for a sentence that says why. */

#define CURL_DISABLE_TYPECHECK 1
#include <curl/curl.h>
#include <stdbool.h>

#include "src/basic/error.h"

struct dm_curl_api {
        CURLcode (*global_init)(long flags);
        CURL *(*easy_init)(void);
        CURLcode (*easy_setopt)(CURL *c, CURLoption option, ...);
        CURLcode (*easy_perform)(CURL *c);
        CURLcode (*easy_getinfo)(CURL *c, CURLINFO info, ...);
        void (*easy_cleanup)(CURL *c);
        void (*easy_reset)(CURL *c);
        const char *(*easy_strerror)(CURLcode code);
        CURLcode (*easy_recv)(CURL *c, void *buf, size_t len, size_t *n);
        CURLcode (*easy_send)(CURL *c, const void *buf, size_t len, size_t *n);
        struct curl_slist *(*slist_append)(struct curl_slist *l, const char *s);
        void (*slist_free_all)(struct curl_slist *l);
        curl_mime *(*mime_init)(CURL *c);
        void (*mime_free)(curl_mime *m);
        curl_mimepart *(*mime_addpart)(curl_mime *m);
        CURLcode (*mime_name)(curl_mimepart *p, const char *name);
        CURLcode (*mime_filename)(curl_mimepart *p, const char *name);
        CURLcode (*mime_type)(curl_mimepart *p, const char *type);
        CURLcode (*mime_data)(curl_mimepart *p, const char *data, size_t len);
        CURLcode (*mime_data_cb)(curl_mimepart *p, curl_off_t size, curl_read_callback read, curl_seek_callback seek,
                                 curl_free_callback free, void *arg);
};

/* The functions, libcurl opened and initialised on the first call
 * (thread-safe); stand-ins that fail when it could not be. */
const struct dm_curl_api *dm_curl_api(void);
/* 0 once libcurl is open and initialised, else -ENOPKG with why. */
int dm_curl_api_ready(struct dm_error *err);
/* Whether anything opened libcurl yet (tests: an idle server has not). */
bool dm_curl_api_opened(void);

/* curl.h makes the two variadic ones macros (to count their arguments). */
#undef curl_easy_setopt
#undef curl_easy_getinfo
#undef curl_share_setopt
#undef curl_multi_setopt

#define curl_global_init(...) (dm_curl_api()->global_init(__VA_ARGS__))
#define curl_easy_init(...) (dm_curl_api()->easy_init(__VA_ARGS__))
#define curl_easy_setopt(...) (dm_curl_api()->easy_setopt(__VA_ARGS__))
#define curl_easy_perform(...) (dm_curl_api()->easy_perform(__VA_ARGS__))
#define curl_easy_getinfo(...) (dm_curl_api()->easy_getinfo(__VA_ARGS__))
#define curl_easy_cleanup(...) (dm_curl_api()->easy_cleanup(__VA_ARGS__))
#define curl_easy_reset(...) (dm_curl_api()->easy_reset(__VA_ARGS__))
#define curl_easy_strerror(...) (dm_curl_api()->easy_strerror(__VA_ARGS__))
#define curl_easy_recv(...) (dm_curl_api()->easy_recv(__VA_ARGS__))
#define curl_easy_send(...) (dm_curl_api()->easy_send(__VA_ARGS__))
#define curl_slist_append(...) (dm_curl_api()->slist_append(__VA_ARGS__))
#define curl_slist_free_all(...) (dm_curl_api()->slist_free_all(__VA_ARGS__))
#define curl_mime_init(...) (dm_curl_api()->mime_init(__VA_ARGS__))
#define curl_mime_free(...) (dm_curl_api()->mime_free(__VA_ARGS__))
#define curl_mime_addpart(...) (dm_curl_api()->mime_addpart(__VA_ARGS__))
#define curl_mime_name(...) (dm_curl_api()->mime_name(__VA_ARGS__))
#define curl_mime_filename(...) (dm_curl_api()->mime_filename(__VA_ARGS__))
#define curl_mime_type(...) (dm_curl_api()->mime_type(__VA_ARGS__))
#define curl_mime_data(...) (dm_curl_api()->mime_data(__VA_ARGS__))
#define curl_mime_data_cb(...) (dm_curl_api()->mime_data_cb(__VA_ARGS__))

#endif
