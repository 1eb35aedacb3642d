/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the HTTP transport's checks of request heads
 * (src/mcp/http-guard.c): Host and Origin (DNS-rebinding protection), the
 * bearer tokens and token files, Accept and Content-Type, the 2026-07-28 header values
 * (=?base64?...?=) and the operator's listen address.
 *
 * Input: byte 0 picks the check (mod 6); the rest is the header value. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>

#include "src/mcp/http-guard.h"
#include "src/mcp/http-token.h"
#include "tests/fuzz/fuzz.h"

#define TOKEN "0123456789abcdef0123456789abcdef"

static const char *const hosts[] = { "localhost", "127.0.0.1", "[::1]", "mcp.example.test", NULL };
static const char *const any_host[] = { "*", NULL };
static const char *const origins[] = { "https://app.example.test", NULL };

static void host(const char *v, size_t len)
{
        char part[256];

        if (dm_mcphttp_host_part(v, len, part, sizeof(part)) == 0) {
                FUZZ_CHECK(part[0] && strlen(part) < sizeof(part) && strlen(part) <= len);
                for (const char *c = part; *c; c++)
                        FUZZ_CHECK(!isupper((unsigned char)*c) && *c > 0x20 && *c < 0x7f && *c != '/' && *c != '@');
        }
        if (dm_mcphttp_host_allowed(v, hosts))
                FUZZ_CHECK(dm_mcphttp_host_part(v, len, part, sizeof(part)) == 0);
        (void)dm_mcphttp_host_allowed(v, any_host);
}

static void origin(const char *v)
{
        bool ok = dm_mcphttp_origin_allowed(v, hosts, NULL);

        /* A wildcard host list never lets an Origin through by itself. */
        FUZZ_CHECK(!dm_mcphttp_origin_allowed(v, any_host, NULL));
        if (ok)
                FUZZ_CHECK(strncasecmp(v, "http://", 7) == 0 || strncasecmp(v, "https://", 8) == 0);
        FUZZ_CHECK(!ok || dm_mcphttp_origin_allowed(v, hosts, origins));
}

/* The Authorization header against two tokens, then the value read as a
 * token file (which splits it in place). */
static void bearer(char *v)
{
        static struct dm_mcphttp_tokens two;
        struct dm_mcphttp_tokens t = { 0 };
        struct dm_error err = { 0 };
        const struct dm_mcphttp_token *m;

        if (!two.n && (dm_mcphttp_tokens_add(&two, "a", TOKEN, "fuzz", 0, &err) < 0 ||
                       dm_mcphttp_tokens_add(&two, "b", TOKEN "b", "fuzz", 0, &err) < 0))
                abort();
        m = dm_mcphttp_bearer_match(v, &two);
        if (m)
                FUZZ_CHECK(strstr(v, m->secret) && strncasecmp(v, "bearer", 6) == 0 && strlen(v) >= 7 + m->len);

        if (dm_mcphttp_tokens_parse(&t, v, "token file 'f'", &err) == 0) {
                FUZZ_CHECK(t.n >= 1 && t.n <= DM_MCPHTTP_TOKENS_MAX);
                for (size_t i = 0; i < t.n; i++) {
                        FUZZ_CHECK(t.v[i].name[0] && strlen(t.v[i].secret) == t.v[i].len &&
                                   t.v[i].len >= DM_MCPHTTP_TOKEN_MIN);
                        for (size_t j = 0; j < i; j++)
                                FUZZ_CHECK(strcmp(t.v[i].name, t.v[j].name) && strcmp(t.v[i].secret, t.v[j].secret));
                }
                dm_mcphttp_tokens_release(&t);
        } else {
                FUZZ_CHECK(t.n == 0 && err.code == -EINVAL && strncmp(err.msg, "token file 'f'", 14) == 0);
        }
}

static void media(const char *v)
{
        (void)dm_mcphttp_accepts(v, "application/json");
        (void)dm_mcphttp_accepts(v, "text/event-stream");
        if (dm_mcphttp_media_is(v, "application/json"))
                FUZZ_CHECK(strcasestr(v, "application/json"));
}

static void header_value(const char *v)
{
        char *out = NULL;
        int r = dm_mcphttp_header_value(v, &out);

        if (r == 0) {
                FUZZ_CHECK(out);
                /* Plain values only lose their blanks; decoded ones are shorter. */
                FUZZ_CHECK(strlen(out) <= strlen(v));
                free(out);
        } else {
                FUZZ_CHECK(r == -EINVAL && strncmp(v + strspn(v, " \t"), "=?base64?", 9) == 0);
        }
}

static void listen_spec(const char *v)
{
        struct sockaddr_storage ss;
        struct dm_error err = { 0 };
        socklen_t len = 0;
        char h[64];

        if (dm_mcphttp_parse_listen(v, &ss, &len, &err) == 0) {
                FUZZ_CHECK((ss.ss_family == AF_INET && len == sizeof(struct sockaddr_in)) ||
                           (ss.ss_family == AF_INET6 && len == sizeof(struct sockaddr_in6)));
                dm_mcphttp_addr_host((struct sockaddr *)&ss, h, sizeof(h));
                FUZZ_CHECK(h[0]);
                (void)dm_mcphttp_addr_is_loopback((struct sockaddr *)&ss);
                (void)dm_mcphttp_addr_is_wildcard((struct sockaddr *)&ss);
        } else {
                FUZZ_CHECK(err.code == -EINVAL && err.msg[0]);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *v;

        if (size < 1)
                return 0;
        v = fuzz_strndup(data + 1, size - 1);
        switch (data[0] % 6) {
        case 0: host(v, strlen(v)); break; /* header values are C strings */
        case 1: origin(v); break;
        case 2: bearer(v); break;
        case 3: media(v); break;
        case 4: header_value(v); break;
        default: listen_spec(v); break;
        }
        free(v);
        return 0;
}
