/* SPDX-License-Identifier: MIT */
/* A preview's upstream when the sandbox's network namespace is not on this
 * host (OpenSandbox): the server's endpoint of the port (the backend's
 * endpoint op), "http://host:port/path" plus headers every request must
 * carry. The relay (expose-relay.c) connects to host:port and rewrites each
 * connection's first request head: its target under the endpoint's path
 * (so the app is served at the preview's root, as on the other engines),
 * Host the endpoint's, the endpoint's headers added (an access token never
 * shown to the browser), the preview's own cookie taken out (it is not the
 * server's to see), and one request per connection (Connection: close)
 * unless it asks for an Upgrade, whose bytes then pass both ways. A target
 * that could climb out of the endpoint's path is refused. */
#include "config.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "backends/backend.h"
#include "netpolicy/http-head.h"
#include "src/basic/cleanup.h"
#include "src/tools/expose.h"

struct dm_preview_upstream {
        struct sockaddr_storage addr;
        socklen_t addr_len;
        char host[300]; /* the Host header: the endpoint's host[:port] */
        char *prefix;   /* the endpoint's path, "" or "/…" without a trailing slash */
        char **headers; /* "Name: value", NULL-terminated */
};

void dm_preview_upstream_free(struct dm_preview_upstream *u)
{
        struct dm_endpoint e;

        if (!u)
                return;
        e = (struct dm_endpoint){ .url = u->prefix, .headers = u->headers };
        dm_endpoint_release(&e);
        free(u);
}

const struct sockaddr *dm_preview_upstream_addr(const struct dm_preview_upstream *u, socklen_t *ret_len)
{
        *ret_len = u->addr_len;
        return (const struct sockaddr *)&u->addr;
}

/* "http://host[:port][/path]" into u: the address (resolved now, the
 * first answer), Host and the prefix. */
static int parse_url(struct dm_preview_upstream *u, const char *url, struct dm_error *err)
{
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai = NULL;
        char name[256], service[8] = "80";
        const char *rest, *slash, *colon;
        size_t hl;
        int r;

        if (strncmp(url, "https://", 8) == 0)
                return dm_error_set(err, -EPROTONOSUPPORT,
                                    "the server's endpoint is https (%.200s): a preview relays plain http only", url);
        if (strncmp(url, "http://", 7) != 0)
                return dm_error_set(err, -EPROTO, "the server's endpoint '%.200s' is not http", url);
        rest = url + 7;
        slash = rest + strcspn(rest, "/?#");
        hl = (size_t)(slash - rest);
        if (hl == 0 || hl >= sizeof(u->host) || *slash == '?' || *slash == '#')
                return dm_error_set(err, -EPROTO, "the server's endpoint '%.200s' has no usable host", url);
        snprintf(u->host, sizeof(u->host), "%.*s", (int)hl, rest);
        if (!(u->prefix = strdup(slash)))
                return dm_error_set(err, -ENOMEM, "out of memory");
        /* "[v6]:port", "name:port", "name". */
        if (u->host[0] == '[') {
                const char *end = strchr(u->host, ']');

                if (!end)
                        return dm_error_set(err, -EPROTO, "the server's endpoint '%.200s' has a bad host", url);
                snprintf(name, sizeof(name), "%.*s", (int)(end - u->host - 1), u->host + 1);
                colon = end[1] == ':' ? end + 1 : NULL;
        } else {
                colon = strrchr(u->host, ':');
                snprintf(name, sizeof(name), "%.*s", (int)(colon ? (size_t)(colon - u->host) : strlen(u->host)),
                         u->host);
        }
        if (colon && (strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof(service) ||
                      strspn(colon + 1, "0123456789") != strlen(colon + 1)))
                return dm_error_set(err, -EPROTO, "the server's endpoint '%.200s' has a bad port", url);
        if (colon)
                snprintf(service, sizeof(service), "%s", colon + 1);
        r = getaddrinfo(name, service, &hints, &ai);
        if (r != 0 || !ai || ai->ai_addrlen > sizeof(u->addr)) {
                if (ai)
                        freeaddrinfo(ai);
                return dm_error_set(err, -EHOSTUNREACH, "the server's endpoint host '%.200s': %s", name,
                                    r ? gai_strerror(r) : "no address");
        }
        memcpy(&u->addr, ai->ai_addr, ai->ai_addrlen);
        u->addr_len = ai->ai_addrlen;
        freeaddrinfo(ai);
        return 0;
}

int dm_preview_upstream_new(const struct dm_endpoint *ep, struct dm_preview_upstream **ret, struct dm_error *err)
{
        struct dm_preview_upstream *u = calloc(1, sizeof(*u));
        size_t n = 0;
        int r;

        if (!u)
                return dm_error_set(err, -ENOMEM, "out of memory");
        while (ep->headers && ep->headers[n])
                n++;
        u->headers = calloc(n + 1, sizeof(*u->headers));
        r = u->headers ? parse_url(u, ep->url, err) : dm_error_set(err, -ENOMEM, "out of memory");
        for (size_t i = 0; r >= 0 && i < n; i++)
                if (!(u->headers[i] = strdup(ep->headers[i])))
                        r = dm_error_set(err, -ENOMEM, "out of memory");
        if (r < 0) {
                dm_preview_upstream_free(u);
                return r;
        }
        *ret = u;
        return 0;
}

/* Whether target's path could leave the endpoint's path: a "." or ".."
 * segment, or an encoded dot, slash or backslash a server might decode. */
static bool target_climbs(const char *target)
{
        size_t pl = strcspn(target, "?#");

        for (size_t i = 0; i < pl; i++) {
                if (target[i] == '\\')
                        return true;
                if (target[i] == '%' && i + 3 <= pl &&
                    (strncasecmp(target + i, "%2e", 3) == 0 || strncasecmp(target + i, "%2f", 3) == 0 ||
                     strncasecmp(target + i, "%5c", 3) == 0))
                        return true;
                if (target[i] == '/' && target[i + 1] == '.') {
                        size_t k = i + 1 + (target[i + 2] == '.' ? 2 : 1);

                        if (k >= pl || target[k] == '/')
                                return true;
                }
        }
        return false;
}

/* The Cookie value without name=...; "" when nothing else is left. */
static void strip_cookie(const char *value, const char *name, char *out, size_t size)
{
        size_t nl = strlen(name), used = 0;

        out[0] = '\0';
        while (*value) {
                size_t k;

                while (*value == ' ' || *value == '\t' || *value == ';')
                        value++;
                k = strcspn(value, ";");
                if (k && !(k > nl && strncmp(value, name, nl) == 0 && value[nl] == '=') && used + k + 3 < size)
                        used += (size_t)snprintf(out + used, size - used, "%s%.*s", used ? "; " : "", (int)k, value);
                value += k;
        }
}

/* Whether the endpoint's headers name this field (the browser's is dropped). */
static bool endpoint_names(const struct dm_preview_upstream *u, const char *name)
{
        size_t nl = strlen(name);

        for (size_t i = 0; u->headers[i]; i++)
                if (strncasecmp(u->headers[i], name, nl) == 0 && u->headers[i][nl] == ':')
                        return true;
        return false;
}

int dm_preview_upstream_head(const struct dm_preview_upstream *u, const char *cookie_name, const char *head, char **ret,
                             size_t *ret_len)
{
        _cleanup_free_ char *copy = strdup(head);
        char *s = copy, *line, *method, *target, *version, *out = NULL, cookies[DM_PREVIEW_HEAD_MAX];
        const char *name, *value;
        bool upgrade = false;
        size_t len = 0;
        FILE *f;

        if (!copy)
                return -ENOMEM;
        line = dm_httphead_next_line(&s);
        if (!line || dm_httphead_request_line(line, &method, &target, &version) < 0 || target[0] != '/' ||
            target_climbs(target))
                return -EINVAL;
        f = open_memstream(&out, &len);
        if (!f)
                return -ENOMEM;
        fprintf(f, "%s %s%s %s\r\nHost: %s\r\n", method, u->prefix, target, version, u->host);
        for (char *t = s; (line = dm_httphead_next_line(&t));) {
                char raw[DM_PREVIEW_HEAD_MAX];

                snprintf(raw, sizeof(raw), "%s", line);
                if (dm_httphead_field(line, 64, &name, &value) != DM_HTTPHEAD_FIELD_OK)
                        continue; /* the check passed it; nothing malformed goes on */
                if (strcasecmp(name, "Upgrade") == 0)
                        upgrade = true;
                if (strcasecmp(name, "Host") == 0 || endpoint_names(u, name) || strcasecmp(name, "Connection") == 0 ||
                    strcasecmp(name, "Keep-Alive") == 0)
                        continue;
                if (strcasecmp(name, "Cookie") == 0) {
                        strip_cookie(value, cookie_name, cookies, sizeof(cookies));
                        if (cookies[0])
                                fprintf(f, "Cookie: %s\r\n", cookies);
                        continue;
                }
                fprintf(f, "%s\r\n", raw);
        }
        for (size_t i = 0; u->headers[i]; i++)
                fprintf(f, "%s\r\n", u->headers[i]);
        fprintf(f, "Connection: %s\r\n\r\n", upgrade ? "Upgrade" : "close");
        if (fclose(f) != 0) {
                free(out);
                return -ENOMEM;
        }
        *ret = out;
        *ret_len = len;
        return 0;
}
