/* SPDX-License-Identifier: MIT */
/* A preview's first request head as a server's endpoint gets it
 * (src/tools/expose-endpoint.c, sandbox_expose on OpenSandbox): the target
 * under the endpoint's path, Host the endpoint's, the endpoint's headers
 * added and the browser's of the same names dropped, the preview's cookie
 * taken out of Cookie and the others kept, Connection: close unless the
 * request upgrades; targets that could climb out of the endpoint's path
 * refused; URLs it cannot relay to refused when the preview opens. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "src/tools/expose.h"
#include "tests/tap.h"

static struct dm_preview_upstream *upstream(const char *url, char **headers, int *ret)
{
        struct dm_endpoint ep = { .url = (char *)url, .headers = headers };
        struct dm_preview_upstream *u = NULL;
        struct dm_error err = { 0 };

        *ret = dm_preview_upstream_new(&ep, &u, &err);
        return u;
}

/* The rewritten head, or NULL (*ret the error). */
static char *head_of(struct dm_preview_upstream *u, const char *head, int *ret)
{
        char *out = NULL;
        size_t len = 0;

        *ret = dm_preview_upstream_head(u, "demesne_preview_4000", head, &out, &len);
        if (*ret == 0 && strlen(out) != len) {
                free(out);
                *ret = -EPROTO;
                return NULL;
        }
        return out;
}

int main(void)
{
        char *token[] = { "X-EXECD-ACCESS-TOKEN: secret", NULL }, *none[] = { NULL };
        struct dm_preview_upstream *u;
        char *h;
        int r;

        u = upstream("http://127.0.0.1:44772/sandboxes/abc/port/44772/proxy/5173", token, &r);
        ok(r == 0 && u, "an http endpoint with a path and a header opens");
        h = head_of(u,
                    "GET /src/main.ts?t=1 HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nAccept: */*\r\n"
                    "Cookie: a=1; demesne_preview_4000=s3cret; b=2\r\nX-Execd-Access-Token: forged\r\n"
                    "Connection: keep-alive\r\nKeep-Alive: timeout=5\r\n\r\n",
                    &r);
        is_str(h,
               "GET /sandboxes/abc/port/44772/proxy/5173/src/main.ts?t=1 HTTP/1.1\r\nHost: 127.0.0.1:44772\r\n"
               "Accept: */*\r\nCookie: a=1; b=2\r\nX-EXECD-ACCESS-TOKEN: secret\r\nConnection: close\r\n\r\n",
               "the target under the endpoint's path, its Host and header, the preview's cookie out, one request");
        free(h);
        h = head_of(u, "GET / HTTP/1.1\r\nHost: x\r\nCookie: demesne_preview_4000=s3cret\r\n\r\n", &r);
        is_str(h,
               "GET /sandboxes/abc/port/44772/proxy/5173/ HTTP/1.1\r\nHost: 127.0.0.1:44772\r\n"
               "X-EXECD-ACCESS-TOKEN: secret\r\nConnection: close\r\n\r\n",
               "a Cookie of the preview's cookie alone goes");
        free(h);
        h = head_of(u,
                    "GET /?token=x HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Protocol: vite-hmr\r\n\r\n",
                    &r);
        is_str(h,
               "GET /sandboxes/abc/port/44772/proxy/5173/?token=x HTTP/1.1\r\nHost: 127.0.0.1:44772\r\n"
               "Upgrade: websocket\r\nSec-WebSocket-Protocol: vite-hmr\r\nX-EXECD-ACCESS-TOKEN: secret\r\n"
               "Connection: Upgrade\r\n\r\n",
               "an Upgrade keeps its connection");
        free(h);
        {
                static const char *const climbing[] = {
                        "/..",   "/../x",  "/a/../../b",           "/.", "/a/./b", "/%2e%2e", "/%2E./x", "/a%2fb",
                        "/a\\b", "/a%5cb", "http://evil.example/", "*"
                };
                static const char *const fine[] = { "/..x", "/.vite/deps/a.js", "/a.b/c", "/?q=../x", "/a?p=%2e" };
                int bad = 0, good = 0;

                for (size_t i = 0; i < sizeof(climbing) / sizeof(climbing[0]); i++) {
                        char req[128];

                        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", climbing[i]);
                        h = head_of(u, req, &r);
                        if (r == -EINVAL)
                                bad++;
                        else
                                diag("not refused: %s", climbing[i]);
                        free(h);
                }
                for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
                        char req[128];

                        snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", fine[i]);
                        h = head_of(u, req, &r);
                        if (r == 0)
                                good++;
                        else
                                diag("refused: %s", fine[i]);
                        free(h);
                }
                is_int(bad, 12, "'.', '..', encoded dots, slashes and backslashes, and non-path targets are refused");
                is_int(good, 5, "names that only start with dots, and dots in the query, pass");
        }
        dm_preview_upstream_free(u);

        u = upstream("http://localhost:8080", none, &r);
        h = u ? head_of(u, "POST /api HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n", &r) : NULL;
        is_str(h, "POST /api HTTP/1.1\r\nHost: localhost:8080\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
               "a host mode endpoint (no path, no header): the target as it is");
        free(h);
        dm_preview_upstream_free(u);

        upstream("https://endpoint.example/x", none, &r);
        is_int(r, -EPROTONOSUPPORT, "an https endpoint is refused");
        upstream("ftp://x/", none, &r);
        is_int(r, -EPROTO, "another scheme is refused");
        upstream("http://127.0.0.1:port/", none, &r);
        is_int(r, -EPROTO, "a bad port is refused");
        upstream("http:///path", none, &r);
        is_int(r, -EPROTO, "no host is refused");
        return done_testing();
}
