/* SPDX-License-Identifier: MIT */
/* OpenSandbox's endpoint API (GET /sandboxes/{id}/endpoints/{port}): where
 * the server serves a port of a sandbox, "host:port/path" without a scheme,
 * and the headers every request to it must carry (an access token in
 * secured mode). Used for the sandbox's execd (opensandbox.c) and for a
 * preview of an app's port (the endpoint op, src/tools/expose-endpoint.c). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "backends/backend.h"
#include "backends/opensandbox-internal.h"

void dm_endpoint_release(struct dm_endpoint *e)
{
        if (!e)
                return;
        for (size_t i = 0; e->headers && e->headers[i]; i++) {
                explicit_bzero(e->headers[i], strlen(e->headers[i]));
                free(e->headers[i]);
        }
        free(e->headers);
        free(e->url);
        e->headers = NULL;
        e->url = NULL;
}

/* The answer's headers as "Name: value" lines. Never let an answer smuggle
 * a header line in, nor make us send the API key on. */
static int headers_of(struct json_object *hdrs, struct dm_endpoint *ret, struct dm_error *err)
{
        size_t n = 0;

        if (hdrs && json_object_is_type(hdrs, json_type_object))
                n = (size_t)json_object_object_length(hdrs);
        ret->headers = calloc(n + 1, sizeof(*ret->headers));
        if (!ret->headers)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (n == 0)
                return 0;
        n = 0;
        json_object_object_foreach(hdrs, key, val)
        {
                const char *v = json_object_get_string(val);

                if (!key[0] || strpbrk(key, "\r\n: \t") || !v || strpbrk(v, "\r\n") ||
                    strcasecmp(key, "OPEN-SANDBOX-API-KEY") == 0)
                        return dm_error_set(err, -EPROTO, "endpoint header '%.64s' refused", key);
                if (asprintf(&ret->headers[n], "%s: %s", key, v) < 0) {
                        ret->headers[n] = NULL;
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                n++;
        }
        return 0;
}

int dm_osb_endpoint_lookup(struct osb *o, const char *id, int port, bool server_proxy, struct dm_endpoint *ret,
                           struct dm_error *err)
{
        _cleanup_free_ char *path = NULL;
        _cleanup_json_ struct json_object *res = NULL;
        struct dm_endpoint e = { 0 };
        const char *ep;
        int r;

        if (asprintf(&path, "/sandboxes/%s/endpoints/%d%s", id, port, server_proxy ? "?use_server_proxy=true" : "") < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_osb_api(o, "GET", path, NULL, 200, &res, err);
        if (r < 0)
                return dm_error_wrap(err, "look up the endpoint of port %d of sandbox '%s'", port, dm_osb_name(o, id));
        ep = get_str(res, "endpoint");
        if (!ep || !ep[0])
                return dm_error_set(err, -EPROTO, "OpenSandbox answered the endpoint of '%s' without a URL",
                                    dm_osb_name(o, id));
        if (strstr(ep, "://")) {
                if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0)
                        return dm_error_set(err, -EPROTO, "endpoint '%.200s' is not http(s)", ep);
                e.url = strdup(ep);
        } else if (asprintf(&e.url, "%s://%s", o->protocol, ep) < 0) {
                e.url = NULL;
        }
        if (!e.url)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (size_t l = strlen(e.url); l && e.url[l - 1] == '/'; l--)
                e.url[l - 1] = '\0';
        if ((r = headers_of(get(res, "headers"), &e, err)) < 0) {
                dm_endpoint_release(&e);
                return r;
        }
        *ret = e;
        return 0;
}

int dm_osb_endpoint(struct dm_backend *b, const char *id, int port, struct dm_endpoint *ret, struct dm_error *err)
{
        struct osb *o = to_osb(b);
        int r = dm_osb_check_id(id, err);

        /* Through the server's proxy when execd is reached that way too
         * (OPEN_SANDBOX_USE_SERVER_PROXY: the sandboxes' own endpoints are
         * not reachable from here). */
        return r < 0 ? r : dm_osb_endpoint_lookup(o, id, port, o->server_proxy, ret, err);
}
