/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the HTTP heads the sandboxes send to the egress
 * proxy and the vendor proxy, and what those proxies make of them:
 *   - netpolicy/proxy-request.c: the head's end, request parsing, the head
 *     rebuilt for upstream, response heads rewritten for the sandbox, and
 *     the first policy decision on the target (proxy-policy.c);
 *   - netpolicy/vendor-http.c: request parsing, routes, the token check and
 *     the headers sent upstream with the real credential;
 *   - netpolicy/vendor-usage.c: the usage meter over a response body, fed
 *     in pieces (any split must give the same result).
 * Both share netpolicy/http-head.c.
 *
 * Input: byte 0 picks the reader (mod 4), byte 1 a parameter (provider and
 * auth kind, chunk size); the rest is what the sandbox (or upstream) sent. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>

#include "netpolicy/proxy-internal.h"
#include "netpolicy/vendor-internal.h"
#include "tests/fuzz/fuzz.h"

#define TOKEN "dm-run-token-0123456789abcdef"
#define SECRET "sk-real-secret"

/* A head we send on: CRLF line ends only, no bare CR or LF, and the blank
 * line only at its end. */
static void check_head(const char *h, size_t len)
{
        FUZZ_CHECK(len >= 4 && memcmp(h + len - 4, "\r\n\r\n", 4) == 0);
        FUZZ_CHECK(strlen(h) == len);
        for (size_t i = 0; i < len; i++) {
                if (h[i] == '\r')
                        FUZZ_CHECK(i + 1 < len && h[i + 1] == '\n');
                if (h[i] == '\n')
                        FUZZ_CHECK(i > 0 && h[i - 1] == '\r');
        }
        FUZZ_CHECK((const char *)memmem(h, len, "\r\n\r\n", 4) == h + len - 4);
}

static void egress_request(const char *data, size_t len)
{
        struct dm_proxy_request r;
        struct dm_proxy_verdict v;
        size_t end = dm_proxy_head_end(data, len);

        FUZZ_CHECK(end <= len);
        if (dm_proxy_request_parse(data, end ? end : len, &r, &v) == 0) {
                struct dm_proxy_policy p;
                struct dm_buf out;
                struct in_addr lit;
                char name[256];
                int dec;

                FUZZ_CHECK(r.method && r.host && r.host[0] && r.version && r.port > 0);
                FUZZ_CHECK(r.is_connect ? !r.path : r.path && r.path[0] == '/');
                FUZZ_CHECK(r.n_headers <= DM_PROXY_MAX_HEADERS);
                if (!r.is_connect) {
                        dm_buf_init(&out, 1 << 20);
                        FUZZ_CHECK(dm_proxy_request_build(&r, &out) == 0);
                        check_head(out.data, out.len);
                        dm_buf_release(&out);
                }
                dm_proxy_policy_init(&p);
                FUZZ_CHECK(dm_proxy_policy_add_entry(&p, "*.pythonhosted.org", NULL) == 0);
                FUZZ_CHECK(dm_proxy_policy_add_entry(&p, "pypi.org:443", NULL) == 0);
                FUZZ_CHECK(dm_proxy_policy_add_entry(&p, "198.51.100.0/24:80", NULL) == 0);
                dec = dm_proxy_check_target(&p, r.host, r.port, r.is_connect, name, &lit, &v);
                FUZZ_CHECK(dec >= -1 && dec <= 1 && (dec < 0) == (v.code != DM_PROXY_OK));
                if (dec == 0)
                        FUZZ_CHECK(strcmp(name, "pypi.org") == 0
                                           ? r.port == 443
                                           : strlen(name) > 17 &&
                                                     strcmp(name + strlen(name) - 17, ".pythonhosted.org") == 0);
                if (dec == 1)
                        FUZZ_CHECK((ntohl(lit.s_addr) >> 8) == 0xc63364 && r.port == 80);
                dm_proxy_policy_release(&p);
        } else {
                FUZZ_CHECK(v.code != DM_PROXY_OK && dm_proxy_code_status(v.code) >= 400);
        }
        /* The reason goes into a response and a log line. */
        for (const char *c = v.reason; *c; c++)
                FUZZ_CHECK(*c >= 0x20 && *c <= 0x7e);
        dm_proxy_request_release(&r);
}

static void egress_response(const char *data, size_t len)
{
        struct dm_buf out;
        size_t end = dm_proxy_head_end(data, len);

        dm_buf_init(&out, 1 << 20);
        if (dm_proxy_response_build(data, end ? end : len, &out) == 0)
                FUZZ_CHECK(out.len >= 4 && memcmp(out.data + out.len - 4, "\r\n\r\n", 4) == 0);
        dm_buf_release(&out);
}

static void vendor_request(const char *data, size_t len, unsigned param)
{
        enum dm_vendor provider = param & 1 ? DM_VENDOR_OPENAI : DM_VENDOR_ANTHROPIC;
        struct dm_vendor_cred cred = { .auth = 1 + (param >> 1) % 3, .secret = SECRET, .account_id = "acct-1" };
        struct dm_vendor_request r;
        size_t end = dm_proxy_head_end(data, len);
        char why[128] = "";

        if (dm_vendor_request_parse(data, end ? end : len, &r, why, sizeof(why)) == 0) {
                const char *route = dm_vendor_route(provider, cred.auth, r.method, r.target);
                struct curl_slist *l = NULL;
                int creds = 0;

                FUZZ_CHECK(r.target[0] == '/' && r.n_headers <= DM_VENDOR_MAX_HEADERS);
                if (route) {
                        /* A path without dot segments, empty segments or
                         * escapes, then at most a query. */
                        size_t plen = strcspn(route, "?");
                        FUZZ_CHECK(route[0] == '/' && !strchr(route, '#') && !memchr(route, '%', plen));
                        for (size_t i = 0; i < plen; i++) {
                                size_t seg;
                                if (route[i] != '/')
                                        continue;
                                seg = strcspn(route + i + 1, "/?");
                                FUZZ_CHECK(seg > 0 && !(seg == 1 && route[i + 1] == '.') &&
                                           !(seg == 2 && route[i + 1] == '.' && route[i + 2] == '.'));
                        }
                }
                (void)dm_vendor_request_keep_alive(&r);
                if (dm_vendor_token_check(&r, TOKEN) == DM_VENDOR_TOKEN_OK)
                        FUZZ_CHECK(memmem(data, len, TOKEN, strlen(TOKEN)));
                FUZZ_CHECK(dm_vendor_upstream_headers(&r, provider, &cred, &l) == 0);
                /* Exactly one credential goes upstream, and it is the real one. */
                for (struct curl_slist *i = l; i; i = i->next) {
                        FUZZ_CHECK(!strpbrk(i->data, "\r\n"));
                        if (strncasecmp(i->data, "authorization:", 14) == 0 ||
                            strncasecmp(i->data, "x-api-key:", 10) == 0) {
                                FUZZ_CHECK(strstr(i->data, SECRET));
                                creds++;
                        }
                }
                FUZZ_CHECK(creds == 1);
                dm_vendor_slist_free_wipe(l);
        } else {
                FUZZ_CHECK(why[0]);
        }
        dm_vendor_request_release(&r);
}

static int meter(enum dm_vendor provider, bool sse, const char *data, size_t len, size_t chunk,
                 struct dm_vendor_sample *ret)
{
        struct dm_vendor_meter m;
        int found;

        dm_vendor_meter_init(&m, provider, sse);
        for (size_t off = 0; off < len; off += chunk)
                dm_vendor_meter_feed(&m, data + off, len - off < chunk ? len - off : chunk);
        memset(ret, 0, sizeof(*ret));
        found = dm_vendor_meter_finish(&m, ret);
        dm_vendor_meter_release(&m);
        return found;
}

static void usage_body(const char *data, size_t len, unsigned param)
{
        enum dm_vendor provider = param & 1 ? DM_VENDOR_OPENAI : DM_VENDOR_ANTHROPIC;
        bool sse = param & 2;
        struct dm_vendor_sample a, b;
        int fa = meter(provider, sse, data, len, len ? len : 1, &a);
        int fb = meter(provider, sse, data, len, 1 + (param >> 2) % 61, &b);

        FUZZ_CHECK(fa == fb);
        if (fa) {
                FUZZ_CHECK(memchr(a.model, '\0', sizeof(a.model)) && strcmp(a.model, b.model) == 0);
                FUZZ_CHECK(memcmp(&a.tokens, &b.tokens, sizeof(a.tokens)) == 0);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *s;
        size_t len;

        if (size < 2)
                return 0;
        len = size - 2;
        s = fuzz_strndup(data + 2, len);
        switch (data[0] % 4) {
        case 0: egress_request(s, len); break;
        case 1: egress_response(s, len); break;
        case 2: vendor_request(s, len, data[1]); break;
        default: usage_body(s, len, data[1]); break;
        }
        free(s);
        return 0;
}
