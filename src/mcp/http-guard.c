/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/mcp/http-guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/mcp/http-token.h"
#include "src/basic/base64.h"
#include "src/basic/cleanup.h"

#define TOKEN_FILE_MAX (64 * 1024)

/* ---- listening address ------------------------------------------------------- */

static int parse_port(const char *s, uint16_t *ret)
{
        char *end;
        unsigned long v;

        if (!*s || !isdigit((unsigned char)*s))
                return -EINVAL;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno || *end || v > 65535)
                return -EINVAL;
        *ret = (uint16_t)v;
        return 0;
}

int dm_mcphttp_parse_listen(const char *spec, struct sockaddr_storage *ret, socklen_t *ret_len, struct dm_error *err)
{
        const char *colon;
        char addr[64];
        uint16_t port;

        memset(ret, 0, sizeof(*ret));
        if (!spec || !*spec)
                return dm_error_set(err, -EINVAL, "--http wants [ADDR:]PORT, got nothing");
        if (spec[0] == '[') {
                const char *close = strchr(spec, ']');
                if (!close || close[1] != ':' || (size_t)(close - spec - 1) >= sizeof(addr))
                        return dm_error_set(err, -EINVAL, "--http '%s': write IPv6 as [ADDR]:PORT", spec);
                memcpy(addr, spec + 1, (size_t)(close - spec - 1));
                addr[close - spec - 1] = '\0';
                colon = close + 1;
        } else if ((colon = strrchr(spec, ':'))) {
                if ((size_t)(colon - spec) >= sizeof(addr) || memchr(spec, ':', (size_t)(colon - spec)))
                        return dm_error_set(err, -EINVAL, "--http '%s': write IPv6 as [ADDR]:PORT", spec);
                memcpy(addr, spec, (size_t)(colon - spec));
                addr[colon - spec] = '\0';
        } else {
                snprintf(addr, sizeof(addr), "127.0.0.1");
                colon = spec - 1;
        }
        if (parse_port(colon + 1, &port) < 0)
                return dm_error_set(err, -EINVAL, "--http '%s': the port must be a number from 0 to 65535", spec);
        if (strcmp(addr, "localhost") == 0 || addr[0] == '\0')
                snprintf(addr, sizeof(addr), "127.0.0.1");

        if (spec[0] == '[') {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ret;
                if (inet_pton(AF_INET6, addr, &s6->sin6_addr) != 1)
                        return dm_error_set(err, -EINVAL, "--http '%s': '%s' is not an IPv6 address", spec, addr);
                s6->sin6_family = AF_INET6;
                s6->sin6_port = htons(port);
                *ret_len = sizeof(*s6);
        } else {
                struct sockaddr_in *s4 = (struct sockaddr_in *)ret;
                if (inet_pton(AF_INET, addr, &s4->sin_addr) != 1)
                        return dm_error_set(err, -EINVAL,
                                            "--http '%s': '%s' is not an IPv4 address (names are not looked up)", spec,
                                            addr);
                s4->sin_family = AF_INET;
                s4->sin_port = htons(port);
                *ret_len = sizeof(*s4);
        }
        return 0;
}

bool dm_mcphttp_addr_is_loopback(const struct sockaddr *sa)
{
        if (sa->sa_family == AF_INET)
                return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
        if (sa->sa_family == AF_INET6) {
                const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
                return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
        }
        return false;
}

bool dm_mcphttp_addr_is_wildcard(const struct sockaddr *sa)
{
        if (sa->sa_family == AF_INET)
                return ((const struct sockaddr_in *)sa)->sin_addr.s_addr == htonl(INADDR_ANY);
        if (sa->sa_family == AF_INET6)
                return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)sa)->sin6_addr);
        return false;
}

void dm_mcphttp_addr_host(const struct sockaddr *sa, char *ret, size_t n)
{
        char a[INET6_ADDRSTRLEN] = "";

        if (sa->sa_family == AF_INET6) {
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, a, sizeof(a));
                snprintf(ret, n, "[%s]", a);
        } else {
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, a, sizeof(a));
                snprintf(ret, n, "%s", a);
        }
}

/* ---- Host and Origin ---------------------------------------------------------- */

int dm_mcphttp_host_part(const char *authority, size_t len, char *ret, size_t n)
{
        size_t host_len;

        if (len == 0 || n == 0)
                return -EINVAL;
        if (authority[0] == '[') {
                const char *close = memchr(authority, ']', len);
                if (!close)
                        return -EINVAL;
                host_len = (size_t)(close - authority) + 1;
                for (size_t i = 1; i + 1 < host_len; i++)
                        if (!isxdigit((unsigned char)authority[i]) && authority[i] != ':' && authority[i] != '.')
                                return -EINVAL;
        } else {
                const char *colon = memchr(authority, ':', len);
                host_len = colon ? (size_t)(colon - authority) : len;
                for (size_t i = 0; i < host_len; i++) {
                        unsigned char ch = (unsigned char)authority[i];
                        if (!isalnum(ch) && ch != '-' && ch != '.' && ch != '_')
                                return -EINVAL;
                }
        }
        if (host_len == 0 || host_len >= n)
                return -EINVAL;
        if (host_len < len) {
                /* What follows the host can only be ":PORT". */
                if (authority[host_len] != ':' || host_len + 1 == len)
                        return -EINVAL;
                for (size_t i = host_len + 1; i < len; i++)
                        if (!isdigit((unsigned char)authority[i]))
                                return -EINVAL;
        }
        for (size_t i = 0; i < host_len; i++)
                ret[i] = (char)tolower((unsigned char)authority[i]);
        ret[host_len] = '\0';
        return 0;
}

static bool in_list(const char *name, const char *const *list)
{
        for (size_t i = 0; list && list[i]; i++)
                if (strcmp(list[i], "*") == 0 || strcasecmp(list[i], name) == 0)
                        return true;
        return false;
}

bool dm_mcphttp_host_allowed(const char *host_header, const char *const *allowed_hosts)
{
        char host[256];

        if (!host_header)
                return false;
        if (dm_mcphttp_host_part(host_header, strlen(host_header), host, sizeof(host)) < 0)
                return in_list("*", allowed_hosts) && strchr(host_header, '\n') == NULL;
        return in_list(host, allowed_hosts);
}

bool dm_mcphttp_origin_allowed(const char *origin, const char *const *allowed_hosts, const char *const *allowed_origins)
{
        const char *authority;
        char host[256];

        if (!origin)
                return true;
        for (size_t i = 0; allowed_origins && allowed_origins[i]; i++)
                if (strcmp(allowed_origins[i], "*") == 0 || strcasecmp(allowed_origins[i], origin) == 0)
                        return true;
        if (strncasecmp(origin, "http://", 7) == 0)
                authority = origin + 7;
        else if (strncasecmp(origin, "https://", 8) == 0)
                authority = origin + 8;
        else
                return false; /* "null", file:, chrome-extension:, garbage */
        if (dm_mcphttp_host_part(authority, strlen(authority), host, sizeof(host)) < 0)
                return false;
        /* An Origin names a page, so its host must be one of ours even when
         * the Host check itself is off: "*" in the host list does not count. */
        for (size_t i = 0; allowed_hosts && allowed_hosts[i]; i++)
                if (strcmp(allowed_hosts[i], "*") != 0 && strcasecmp(allowed_hosts[i], host) == 0)
                        return true;
        return false;
}

/* ---- bearer token ------------------------------------------------------------ */

bool dm_mcphttp_secret_equal(const char *given, size_t given_len, const char *want, size_t want_len)
{
        volatile unsigned char diff = given_len != want_len;

        for (size_t i = 0; i < want_len; i++)
                diff |= (unsigned char)(want[i] ^ (i < given_len ? given[i] : 0));
        return diff == 0;
}

/* The token an Authorization header carries: NULL if it is not
 * "Bearer TOKEN" (the scheme case-insensitive, blanks around TOKEN). */
static const char *bearer_value(const char *authorization, size_t *ret_len)
{
        const char *p = authorization;
        size_t len;

        if (!p || strncasecmp(p, "Bearer", 6) != 0 || (p[6] != ' ' && p[6] != '\t'))
                return NULL;
        p += 6;
        while (*p == ' ' || *p == '\t')
                p++;
        len = strlen(p);
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
                len--;
        *ret_len = len;
        return p;
}

const struct dm_mcphttp_token *dm_mcphttp_bearer_match(const char *authorization,
                                                       const struct dm_mcphttp_tokens *tokens)
{
        size_t len, found = 0; /* 1 + the index of the match */
        const char *p = bearer_value(authorization, &len);

        if (!p)
                return NULL;
        /* No early exit and no branch on a comparison: the tokens are
         * distinct, so at most one sets found. */
        for (size_t i = 0; i < tokens->n; i++) {
                size_t eq = dm_mcphttp_secret_equal(p, len, tokens->v[i].secret, tokens->v[i].len);
                found |= (i + 1) & (0 - eq);
        }
        return found ? &tokens->v[found - 1] : NULL;
}

int dm_mcphttp_read_tokens(const char *path, struct dm_mcphttp_tokens *ret, struct dm_error *err)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        _cleanup_free_ char *buf = NULL;
        char what[PATH_MAX + 16];
        struct stat st;
        size_t len = 0;
        ssize_t n;
        int r;

        if (fd < 0)
                return dm_error_set(err, -errno, "token file '%s': %s", path, strerror(errno));
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
                return dm_error_set(err, -EINVAL, "token file '%s' is not a regular file", path);
        if (st.st_mode & 0044)
                return dm_error_set(err, -EPERM, "token file '%s' is readable by other users: chmod 600 it", path);
        if (!(buf = malloc(TOKEN_FILE_MAX + 2)))
                return dm_error_set(err, -ENOMEM, "out of memory");
        /* One byte more than allowed: a file that fills it is too long,
         * rather than cut in the middle of a token. */
        while (len <= TOKEN_FILE_MAX && (n = read(fd, buf + len, TOKEN_FILE_MAX + 1 - len)) != 0) {
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        r = dm_error_set(err, -errno, "token file '%s': %s", path, strerror(errno));
                        explicit_bzero(buf, len);
                        return r;
                }
                len += (size_t)n;
        }
        buf[len] = '\0';
        snprintf(what, sizeof(what), "token file '%s'", path);
        if (len > TOKEN_FILE_MAX)
                r = dm_error_set(err, -EFBIG, "%s is over %d KiB", what, TOKEN_FILE_MAX / 1024);
        else if (memchr(buf, '\0', len))
                r = dm_error_set(err, -EINVAL, "%s holds a NUL byte: it must be text", what);
        else
                r = dm_mcphttp_tokens_parse(ret, buf, what, err);
        explicit_bzero(buf, len);
        return r;
}

/* ---- content negotiation -------------------------------------------------- */

static bool media_eq(const char *a, size_t alen, const char *b)
{
        return strlen(b) == alen && strncasecmp(a, b, alen) == 0;
}

bool dm_mcphttp_accepts(const char *accept, const char *type)
{
        const char *slash = strchr(type, '/');
        size_t major = slash ? (size_t)(slash - type) : strlen(type);
        const char *p = accept;

        if (!accept || !*accept)
                return true;
        while (*p) {
                size_t len = strcspn(p, ",");
                const char *item = p, *semi;
                size_t ilen;
                bool zero_q = false;

                p += len + (p[len] == ',');
                while (len && (*item == ' ' || *item == '\t'))
                        item++, len--;
                semi = memchr(item, ';', len);
                ilen = semi ? (size_t)(semi - item) : len;
                while (ilen && (item[ilen - 1] == ' ' || item[ilen - 1] == '\t'))
                        ilen--;
                for (const char *q = semi; q && q < item + len; q = memchr(q + 1, ';', (size_t)(item + len - q - 1))) {
                        const char *v = q + 1;
                        while (*v == ' ')
                                v++;
                        if ((v[0] == 'q' || v[0] == 'Q') && v[1] == '=' && strtod(v + 2, NULL) <= 0.0)
                                zero_q = true;
                }
                if (zero_q)
                        continue;
                if (media_eq(item, ilen, "*/*") || media_eq(item, ilen, type))
                        return true;
                if (ilen == major + 2 && strncasecmp(item, type, major + 1) == 0 && item[major + 1] == '*')
                        return true;
        }
        return false;
}

bool dm_mcphttp_media_is(const char *content_type, const char *type)
{
        size_t len;

        if (!content_type)
                return false;
        while (*content_type == ' ')
                content_type++;
        len = strcspn(content_type, "; \t");
        return media_eq(content_type, len, type);
}

/* ---- 2026-07-28 header values ----------------------------------------------- */

/* Header values that must be text: a decoded NUL is refused. */
static int b64_decode(const char *in, size_t len, char **ret)
{
        size_t n;
        int r = dm_base64_decode(in, len, ret, &n);

        if (r < 0)
                return r;
        if (memchr(*ret, '\0', n)) {
                free(*ret);
                *ret = NULL;
                return -EINVAL;
        }
        return 0;
}

int dm_mcphttp_header_value(const char *raw, char **ret)
{
        size_t len;

        while (*raw == ' ' || *raw == '\t')
                raw++;
        len = strlen(raw);
        while (len && (raw[len - 1] == ' ' || raw[len - 1] == '\t'))
                len--;
        if (len >= 11 && strncmp(raw, "=?base64?", 9) == 0 && strncmp(raw + len - 2, "?=", 2) == 0)
                return b64_decode(raw + 9, len - 11, ret);
        *ret = strndup(raw, len);
        return *ret ? 0 : -ENOMEM;
}

int dm_mcphttp_random_id(char ret[33])
{
        unsigned char b[16];
        size_t got = 0;

        while (got < sizeof(b)) {
                ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)n;
        }
        for (size_t i = 0; i < sizeof(b); i++)
                snprintf(ret + 2 * i, 3, "%02x", b[i]);
        return 0;
}
