/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/curl-api.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "src/basic/log.h"

/* Debian's libcurl4 (OpenSSL) and libcurl3-gnutls both provide the
 * libcurl.so.4 ABI; the second name is the -dev package's link. */
static const char *const sonames[] = { "libcurl.so.4", "libcurl.so" };

static struct dm_curl_api api;
static char load_error[256];
static bool opened;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static CURLcode stub_global_init(long flags)
{
        return CURLE_FAILED_INIT;
}
static CURL *stub_easy_init(void)
{
        return NULL;
}
static CURLcode stub_easy_setopt(CURL *c, CURLoption option, ...)
{
        return CURLE_FAILED_INIT;
}
static CURLcode stub_easy_perform(CURL *c)
{
        return CURLE_FAILED_INIT;
}
static CURLcode stub_easy_getinfo(CURL *c, CURLINFO info, ...)
{
        return CURLE_FAILED_INIT;
}
static void stub_easy_cleanup(CURL *c)
{
}
static void stub_easy_reset(CURL *c)
{
}
static const char *stub_easy_strerror(CURLcode code)
{
        return load_error[0] ? load_error : "libcurl is not available";
}
static CURLcode stub_easy_recv(CURL *c, void *buf, size_t len, size_t *n)
{
        return CURLE_FAILED_INIT;
}
static CURLcode stub_easy_send(CURL *c, const void *buf, size_t len, size_t *n)
{
        return CURLE_FAILED_INIT;
}
static struct curl_slist *stub_slist_append(struct curl_slist *l, const char *s)
{
        return NULL;
}
static void stub_slist_free_all(struct curl_slist *l)
{
}
static curl_mime *stub_mime_init(CURL *c)
{
        return NULL;
}
static void stub_mime_free(curl_mime *m)
{
}
static curl_mimepart *stub_mime_addpart(curl_mime *m)
{
        return NULL;
}
static CURLcode stub_mime_str(curl_mimepart *p, const char *s)
{
        return CURLE_FAILED_INIT;
}
static CURLcode stub_mime_data(curl_mimepart *p, const char *data, size_t len)
{
        return CURLE_FAILED_INIT;
}
static CURLcode stub_mime_data_cb(curl_mimepart *p, curl_off_t size, curl_read_callback read, curl_seek_callback seek,
                                  curl_free_callback free_cb, void *arg)
{
        return CURLE_FAILED_INIT;
}

static const struct dm_curl_api stubs = {
        .global_init = stub_global_init,
        .easy_init = stub_easy_init,
        .easy_setopt = stub_easy_setopt,
        .easy_perform = stub_easy_perform,
        .easy_getinfo = stub_easy_getinfo,
        .easy_cleanup = stub_easy_cleanup,
        .easy_reset = stub_easy_reset,
        .easy_strerror = stub_easy_strerror,
        .easy_recv = stub_easy_recv,
        .easy_send = stub_easy_send,
        .slist_append = stub_slist_append,
        .slist_free_all = stub_slist_free_all,
        .mime_init = stub_mime_init,
        .mime_free = stub_mime_free,
        .mime_addpart = stub_mime_addpart,
        .mime_name = stub_mime_str,
        .mime_filename = stub_mime_str,
        .mime_type = stub_mime_str,
        .mime_data = stub_mime_data,
        .mime_data_cb = stub_mime_data_cb,
};

static void load(void)
{
        struct dm_curl_api got;
        void *lib = NULL;
        CURLcode cc;
        struct {
                const char *name;
                void **slot;
        } syms[] = {
                { "curl_global_init", (void **)&got.global_init },
                { "curl_easy_init", (void **)&got.easy_init },
                { "curl_easy_setopt", (void **)&got.easy_setopt },
                { "curl_easy_perform", (void **)&got.easy_perform },
                { "curl_easy_getinfo", (void **)&got.easy_getinfo },
                { "curl_easy_cleanup", (void **)&got.easy_cleanup },
                { "curl_easy_reset", (void **)&got.easy_reset },
                { "curl_easy_strerror", (void **)&got.easy_strerror },
                { "curl_easy_recv", (void **)&got.easy_recv },
                { "curl_easy_send", (void **)&got.easy_send },
                { "curl_slist_append", (void **)&got.slist_append },
                { "curl_slist_free_all", (void **)&got.slist_free_all },
                { "curl_mime_init", (void **)&got.mime_init },
                { "curl_mime_free", (void **)&got.mime_free },
                { "curl_mime_addpart", (void **)&got.mime_addpart },
                { "curl_mime_name", (void **)&got.mime_name },
                { "curl_mime_filename", (void **)&got.mime_filename },
                { "curl_mime_type", (void **)&got.mime_type },
                { "curl_mime_data", (void **)&got.mime_data },
                { "curl_mime_data_cb", (void **)&got.mime_data_cb },
        };

        api = stubs;
        __atomic_store_n(&opened, true, __ATOMIC_RELEASE);
        for (size_t i = 0; !lib && i < sizeof(sonames) / sizeof(sonames[0]); i++)
                lib = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
        if (!lib) {
                snprintf(load_error, sizeof(load_error), "cannot open libcurl (%s): %s", sonames[0], dlerror());
                return;
        }
        for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
                *syms[i].slot = dlsym(lib, syms[i].name);
                if (!*syms[i].slot) {
                        snprintf(load_error, sizeof(load_error), "libcurl (%s) has no %s: too old (7.56 or later)",
                                 sonames[0], syms[i].name);
                        return;
                }
        }
        cc = got.global_init(CURL_GLOBAL_DEFAULT);
        if (cc != CURLE_OK) {
                snprintf(load_error, sizeof(load_error), "libcurl init: %s", got.easy_strerror(cc));
                return;
        }
        api = got;
        log_debug("libcurl opened (first use)");
}

const struct dm_curl_api *dm_curl_api(void)
{
        pthread_once(&once, load);
        return &api;
}

int dm_curl_api_ready(struct dm_error *err)
{
        pthread_once(&once, load);
        if (load_error[0])
                return dm_error_set(err, -ENOPKG, "%s", load_error);
        return 0;
}

bool dm_curl_api_opened(void)
{
        /* Written once, inside pthread_once, before any reader can see it. */
        return __atomic_load_n(&opened, __ATOMIC_ACQUIRE);
}
