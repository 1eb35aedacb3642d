/* SPDX-License-Identifier: MIT */
/* The egress proxy's HTTP parsing: request heads from the sandbox (untrusted:
 * strict, every field bounded by the head cap) and the rewriting of request
 * and response heads for plain-HTTP forwarding. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "netpolicy/http-head.h"
#include "netpolicy/proxy-internal.h"
#include "src/basic/cleanup.h"

size_t dm_proxy_head_end(const char *buf, size_t len)
{
        for (size_t i = 0; i < len; i++) {
                if (buf[i] != '\n')
                        continue;
                if (i + 1 < len && buf[i + 1] == '\n')
                        return i + 2;
                if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
                        return i + 3;
        }
        return 0;
}

/* Splits a NUL-terminated head into lines in place (CRLF or LF), up to the
 * blank line. -1 when there are more than max lines. */
static int split_lines(char *s, char **lines, size_t max, size_t *ret_n)
{
        size_t n = 0;

        for (char *line; (line = dm_httphead_next_line(&s));) {
                if (n == max)
                        return -1;
                lines[n++] = line;
        }
        *ret_n = n;
        return 0;
}

/* Splits host[:port] in place; port stays def when absent. */
static int split_authority(char *auth, bool port_required, uint16_t def, const char **ret_host, uint16_t *ret_port,
                           struct dm_proxy_verdict *v)
{
        char *colon, *end;
        unsigned long port = def;

        if (auth[0] == '[')
                return dm_proxy_verdict_set(v, DM_PROXY_IPV6,
                                            "IPv6 destination '%.80s' refused: sandboxes have no IPv6", auth);
        colon = strrchr(auth, ':');
        if (colon) {
                *colon = '\0';
                errno = 0;
                port = strtoul(colon + 1, &end, 10);
                if (!isdigit((unsigned char)colon[1]) || *end || errno || port == 0 || port > 65535)
                        return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "bad port in '%.80s:%.8s'", auth,
                                                    colon + 1);
        } else if (port_required) {
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "CONNECT needs host:port, got '%.80s'", auth);
        }
        if (auth[0] == '\0')
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "empty host in request target");
        *ret_host = auth;
        *ret_port = (uint16_t)port;
        return 0;
}

/* Takes an absolute-form target apart in place: http://authority[/path]. */
static int parse_absolute(char *target, struct dm_proxy_request *r, struct dm_proxy_verdict *v)
{
        char *auth, *rest;
        size_t alen;

        if (strncasecmp(target, "https://", 8) == 0)
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST,
                                            "https:// URIs go through CONNECT, not as a plain request");
        if (strncasecmp(target, "http://", 7) != 0)
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST,
                                            "this is a forward proxy: send an absolute http:// URI or CONNECT "
                                            "host:port, not '%.80s'",
                                            target);
        auth = target + 7;
        alen = strcspn(auth, "/?#");
        if (memchr(auth, '@', alen))
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "user info in the URI is not accepted");
        rest = auth + alen;
        /* The path is copied before the authority is cut at its end. */
        r->path = NULL;
        if (*rest == '/') {
                r->path = strdup(rest);
        } else if (*rest == '?') {
                char *p = malloc(strlen(rest) + 2);
                if (p) {
                        p[0] = '/';
                        strcpy(p + 1, rest);
                }
                r->path = p;
        } else {
                r->path = strdup("/");
        }
        if (!r->path)
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "out of memory");
        auth[alen] = '\0';
        return split_authority(auth, false, 80, &r->host, &r->port, v);
}

int dm_proxy_request_parse(const char *head, size_t len, struct dm_proxy_request *r, struct dm_proxy_verdict *v)
{
        char *lines[DM_PROXY_MAX_HEADERS + 1], *method, *target, *version;
        size_t n;

        memset(r, 0, sizeof(*r));
        if (memchr(head, '\0', len))
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "NUL byte in the request head");
        r->storage = strndup(head, len);
        if (!r->storage)
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "out of memory");
        if (split_lines(r->storage, lines, DM_ARRAY_SIZE(lines), &n) < 0)
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "more than %d header fields",
                                            DM_PROXY_MAX_HEADERS);
        if (n == 0)
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "empty request");

        if (dm_httphead_request_line(lines[0], &method, &target, &version) < 0)
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "malformed request line");
        if (!dm_httphead_token_ok(method, 32))
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "malformed method");
        if (strcmp(version, "HTTP/1.1") != 0 && strcmp(version, "HTTP/1.0") != 0)
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "unsupported protocol version '%.16s'", version);
        if (!dm_httphead_target_chars_ok(target))
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "bad character in request target");
        if (target[0] == '\0')
                return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "empty request target");
        r->method = method;
        r->version = version;
        r->is_connect = strcmp(method, "CONNECT") == 0;
        if (r->is_connect) {
                if (split_authority(target, true, 0, &r->host, &r->port, v) < 0)
                        return -1;
        } else if (parse_absolute(target, r, v) < 0) {
                return -1;
        }

        for (size_t i = 1; i < n; i++) {
                struct dm_proxy_header *h = &r->headers[r->n_headers];

                switch (dm_httphead_field(lines[i], 256, &h->name, &h->value)) {
                case DM_HTTPHEAD_FIELD_OK: break;
                case DM_HTTPHEAD_FIELD_FOLDED:
                        return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "folded header lines are not accepted");
                case DM_HTTPHEAD_FIELD_NO_COLON:
                        return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "header line without a colon");
                case DM_HTTPHEAD_FIELD_EMPTY_NAME:
                case DM_HTTPHEAD_FIELD_BAD_NAME:
                        return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "malformed header name");
                case DM_HTTPHEAD_FIELD_CONTROL:
                        return dm_proxy_verdict_set(v, DM_PROXY_BAD_REQUEST, "control character in header '%s'",
                                                    h->name);
                }
                r->n_headers++;
        }
        return dm_proxy_verdict_set(v, DM_PROXY_OK, "parsed");
}

void dm_proxy_request_release(struct dm_proxy_request *r)
{
        if (!r)
                return;
        free(r->storage);
        free((char *)r->path);
        memset(r, 0, sizeof(*r));
}

/* --- forwarding heads ------------------------------------------------------ */

static bool hop_by_hop(const char *name, const struct dm_proxy_header *h, size_t n)
{
        static const char *const fixed[] = { "connection", "keep-alive", "te", "trailer", "upgrade" };

        if (strncasecmp(name, "proxy-", 6) == 0)
                return true;
        for (size_t i = 0; i < DM_ARRAY_SIZE(fixed); i++)
                if (strcasecmp(name, fixed[i]) == 0)
                        return true;
        for (size_t i = 0; i < n; i++)
                if (strcasecmp(h[i].name, "connection") == 0 && dm_httphead_list_has(h[i].value, name))
                        return true;
        return false;
}

static int append_headers(struct dm_buf *out, const struct dm_proxy_header *h, size_t n, bool drop_host)
{
        int r;

        for (size_t i = 0; i < n; i++) {
                if (hop_by_hop(h[i].name, h, n) || (drop_host && strcasecmp(h[i].name, "host") == 0))
                        continue;
                r = dm_buf_printf(out, "%s: %s\r\n", h[i].name, h[i].value);
                if (r < 0)
                        return r;
        }
        return dm_buf_printf(out, "Connection: close\r\n\r\n");
}

int dm_proxy_request_build(const struct dm_proxy_request *r, struct dm_buf *out)
{
        int ret;

        if (r->port == 80)
                ret = dm_buf_printf(out, "%s %s %s\r\nHost: %s\r\n", r->method, r->path, r->version, r->host);
        else
                ret = dm_buf_printf(out, "%s %s %s\r\nHost: %s:%u\r\n", r->method, r->path, r->version, r->host,
                                    r->port);
        if (ret < 0)
                return ret;
        return append_headers(out, r->headers, r->n_headers, true);
}

int dm_proxy_response_build(const char *head, size_t len, struct dm_buf *out)
{
        char *copy = strndup(head, len), *lines[DM_PROXY_MAX_HEADERS + 1];
        struct dm_proxy_header h[DM_PROXY_MAX_HEADERS];
        size_t n, nh = 0;
        int ret = -EINVAL;

        if (!copy)
                return -ENOMEM;
        if (split_lines(copy, lines, DM_ARRAY_SIZE(lines), &n) < 0 || n == 0 || strncmp(lines[0], "HTTP/1.", 7) != 0)
                goto out;
        for (size_t i = 1; i < n; i++) {
                char *colon = strchr(lines[i], ':');
                if (!colon || lines[i][0] == ' ' || lines[i][0] == '\t')
                        goto out;
                *colon = '\0';
                h[nh].name = lines[i];
                h[nh].value = dm_httphead_trim(colon + 1);
                nh++;
        }
        ret = dm_buf_printf(out, "%s\r\n", lines[0]);
        if (ret == 0)
                ret = append_headers(out, h, nh, false);
out:
        free(copy);
        return ret;
}
