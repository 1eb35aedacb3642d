/* SPDX-License-Identifier: MIT */
/* The vendor proxy's HTTP decisions: request heads from the sandbox
 * (untrusted: strict and bounded), which paths are model endpoints, the token
 * check, and the headers that go upstream and come back. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "netpolicy/http-head.h"
#include "netpolicy/vendor-internal.h"
#include "src/basic/cleanup.h"

static int fail(char *why, size_t whylen, const char *msg)
{
        snprintf(why, whylen, "%s", msg);
        return -EINVAL;
}

int dm_vendor_request_parse(const char *head, size_t len, struct dm_vendor_request *r, char *why, size_t whylen)
{
        char *s, *line, *field, *method, *target, *version;

        memset(r, 0, sizeof(*r));
        if (memchr(head, '\0', len))
                return fail(why, whylen, "NUL byte in the request head");
        if (!(r->storage = strndup(head, len)))
                return fail(why, whylen, "out of memory");
        s = r->storage;
        line = dm_httphead_next_line(&s);
        while (line && (field = dm_httphead_next_line(&s))) {
                struct dm_vendor_header *h;

                if (r->n_headers == DM_VENDOR_MAX_HEADERS)
                        return fail(why, whylen, "too many header fields");
                h = &r->headers[r->n_headers];
                switch (dm_httphead_field(field, SIZE_MAX, &h->name, &h->value)) {
                case DM_HTTPHEAD_FIELD_OK: break;
                case DM_HTTPHEAD_FIELD_FOLDED: return fail(why, whylen, "folded header lines are not accepted");
                case DM_HTTPHEAD_FIELD_NO_COLON: return fail(why, whylen, "header line without a colon");
                case DM_HTTPHEAD_FIELD_EMPTY_NAME: return fail(why, whylen, "empty header name");
                case DM_HTTPHEAD_FIELD_BAD_NAME: return fail(why, whylen, "malformed header name");
                case DM_HTTPHEAD_FIELD_CONTROL: return fail(why, whylen, "control character in a header value");
                }
                r->n_headers++;
        }
        if (!line)
                return fail(why, whylen, "empty request");
        if (dm_httphead_request_line(line, &method, &target, &version) < 0)
                return fail(why, whylen, "malformed request line");
        if (!dm_httphead_token_ok(method, 16))
                return fail(why, whylen, "malformed method");
        if (strcmp(version, "HTTP/1.1") != 0 && strcmp(version, "HTTP/1.0") != 0)
                return fail(why, whylen, "unsupported protocol version");
        if (target[0] != '/')
                return fail(why, whylen, "the request target must be a path (this is not a forward proxy)");
        if (!dm_httphead_target_chars_ok(target))
                return fail(why, whylen, "bad character in the request target");
        r->method = method;
        r->target = target;
        r->http10 = strcmp(version, "HTTP/1.0") == 0;
        return 0;
}

void dm_vendor_request_release(struct dm_vendor_request *r)
{
        if (!r)
                return;
        free(r->storage);
        memset(r, 0, sizeof(*r));
}

const char *dm_vendor_request_header(const struct dm_vendor_request *r, const char *name)
{
        for (size_t i = 0; i < r->n_headers; i++)
                if (strcasecmp(r->headers[i].name, name) == 0)
                        return r->headers[i].value;
        return NULL;
}

bool dm_vendor_request_keep_alive(const struct dm_vendor_request *r)
{
        const char *c = dm_vendor_request_header(r, "connection");

        if (r->http10)
                return dm_httphead_list_has(c, "keep-alive");
        return !dm_httphead_list_has(c, "close");
}

/* --- routes ---------------------------------------------------------------- */

struct route {
        const char *method;
        const char *path;
        bool id_suffix; /* path is followed by "/<model id>" */
};

static const struct route anthropic_routes[] = {
        { "POST", "/v1/messages", false },
        { "POST", "/v1/messages/count_tokens", false },
};

static const struct route openai_routes[] = {
        { "POST", "/v1/responses", false },
        { "GET", "/v1/models", false },
        { "GET", "/v1/models", true },
};

static const struct route chatgpt_routes[] = {
        { "POST", "/responses", false },
        { "GET", "/models", false },
};

static bool model_id_ok(const char *s, size_t n)
{
        if (n == 0 || n > 128)
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char)s[i]) && !strchr("._:-", s[i]))
                        return false;
        return s[0] != '.';
}

static bool route_match(const struct route *t, size_t n, const char *method, const char *path, size_t plen)
{
        for (size_t i = 0; i < n; i++) {
                size_t l = strlen(t[i].path);
                if (strcmp(method, t[i].method) != 0 || plen < l || strncmp(path, t[i].path, l) != 0)
                        continue;
                if (!t[i].id_suffix && plen == l)
                        return true;
                if (t[i].id_suffix && plen > l + 1 && path[l] == '/' && model_id_ok(path + l + 1, plen - l - 1))
                        return true;
        }
        return false;
}

const char *dm_vendor_route(enum dm_vendor provider, enum dm_vendor_auth auth, const char *method, const char *target)
{
        size_t plen = strcspn(target, "?#");

        /* No fragment, after the path or inside the query (fuzz-http-head
         * found "?x#y" passing): a request target has none. */
        if (strchr(target + plen, '#'))
                return NULL;
        if (provider == DM_VENDOR_ANTHROPIC)
                return route_match(anthropic_routes, DM_ARRAY_SIZE(anthropic_routes), method, target, plen) ? target
                                                                                                            : NULL;
        if (auth != DM_VENDOR_AUTH_CHATGPT)
                return route_match(openai_routes, DM_ARRAY_SIZE(openai_routes), method, target, plen) ? target : NULL;
        /* Codex pointed at a base URL ending in /v1 sends the API's paths;
         * the ChatGPT backend serves the same endpoints without the prefix. */
        if (strncmp(target, "/v1/", 4) == 0)
                target += 3, plen -= 3;
        return route_match(chatgpt_routes, DM_ARRAY_SIZE(chatgpt_routes), method, target, plen) ? target : NULL;
}

/* --- the token ------------------------------------------------------------- */

/* Constant time for a given length: the token's length is no secret. */
static bool token_equal(const char *got, const char *want)
{
        size_t n = strlen(want);
        unsigned char d = 0;

        if (strlen(got) != n)
                return false;
        for (size_t i = 0; i < n; i++)
                d |= (unsigned char)got[i] ^ (unsigned char)want[i];
        return d == 0;
}

enum dm_vendor_token_verdict dm_vendor_token_check(const struct dm_vendor_request *r, const char *token)
{
        bool presented = false;

        for (size_t i = 0; i < r->n_headers; i++) {
                const char *name = r->headers[i].name, *v = r->headers[i].value;

                if (strcasecmp(name, "x-api-key") == 0) {
                        /* handled below */
                } else if (strcasecmp(name, "authorization") == 0 && strncasecmp(v, "bearer ", 7) == 0) {
                        v += 7;
                        while (*v == ' ')
                                v++;
                } else {
                        continue;
                }
                if (!*v)
                        continue;
                presented = true;
                if (token_equal(v, token))
                        return DM_VENDOR_TOKEN_OK;
        }
        return presented ? DM_VENDOR_TOKEN_WRONG : DM_VENDOR_TOKEN_MISSING;
}

/* --- headers --------------------------------------------------------------- */

static bool hop_by_hop(const char *name, size_t len)
{
        static const char *const fixed[] = { "connection", "keep-alive",    "te", "trailer", "transfer-encoding",
                                             "upgrade",    "content-length" };

        if (len >= 6 && strncasecmp(name, "proxy-", 6) == 0)
                return true;
        for (size_t i = 0; i < DM_ARRAY_SIZE(fixed); i++)
                if (strlen(fixed[i]) == len && strncasecmp(name, fixed[i], len) == 0)
                        return true;
        return false;
}

static bool dropped_upstream(const struct dm_vendor_request *r, const char *name)
{
        static const char *const fixed[] = {
                "host",   "x-api-key",          "authorization", "expect", "accept-encoding",
                "cookie", "chatgpt-account-id", "anthropic-beta"
        };
        const char *conn = dm_vendor_request_header(r, "connection");

        if (hop_by_hop(name, strlen(name)) || dm_httphead_list_has(conn, name))
                return true;
        for (size_t i = 0; i < DM_ARRAY_SIZE(fixed); i++)
                if (strcasecmp(name, fixed[i]) == 0)
                        return true;
        return false;
}

static int add(struct curl_slist **l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int add(struct curl_slist **l, const char *fmt, ...)
{
        struct curl_slist *n;
        char *s;
        va_list ap;
        int len;

        va_start(ap, fmt);
        len = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (len < 0)
                return -ENOMEM;
        n = curl_slist_append(*l, s);
        explicit_bzero(s, (size_t)len);
        free(s);
        if (!n)
                return -ENOMEM;
        *l = n;
        return 0;
}

void dm_vendor_slist_free_wipe(struct curl_slist *l)
{
        for (struct curl_slist *i = l; i; i = i->next)
                explicit_bzero(i->data, strlen(i->data));
        curl_slist_free_all(l);
}

int dm_vendor_upstream_headers(const struct dm_vendor_request *r, enum dm_vendor provider,
                               const struct dm_vendor_cred *cred, struct curl_slist **ret)
{
        struct curl_slist *l = NULL;
        const char *beta = NULL;
        int k = 0;

        for (size_t i = 0; i < r->n_headers && k == 0; i++) {
                if (strcasecmp(r->headers[i].name, "anthropic-beta") == 0 && !beta)
                        beta = r->headers[i].value;
                if (!dropped_upstream(r, r->headers[i].name))
                        k = add(&l, "%s: %s", r->headers[i].name, r->headers[i].value);
        }
        if (k == 0)
                k = add(&l, "Accept-Encoding: identity");
        if (k == 0)
                k = add(&l, "Expect:");
        if (k == 0 && provider == DM_VENDOR_ANTHROPIC && cred->auth == DM_VENDOR_AUTH_API_KEY)
                k = add(&l, "x-api-key: %s", cred->secret);
        else if (k == 0)
                k = add(&l, "Authorization: Bearer %s", cred->secret);
        if (k == 0 && cred->auth == DM_VENDOR_AUTH_CHATGPT && cred->account_id)
                k = add(&l, "chatgpt-account-id: %s", cred->account_id);
        if (k == 0 && provider == DM_VENDOR_ANTHROPIC && cred->auth == DM_VENDOR_AUTH_OAUTH) {
                if (beta && *beta && !dm_httphead_list_has(beta, "oauth-2025-04-20"))
                        k = add(&l, "anthropic-beta: %s,oauth-2025-04-20", beta);
                else if (beta && *beta)
                        k = add(&l, "anthropic-beta: %s", beta);
                else
                        k = add(&l, "anthropic-beta: oauth-2025-04-20");
        } else if (k == 0 && beta && *beta) {
                k = add(&l, "anthropic-beta: %s", beta);
        }
        if (k < 0) {
                dm_vendor_slist_free_wipe(l);
                return k;
        }
        *ret = l;
        return 0;
}

bool dm_vendor_response_header_keep(const char *name, size_t len)
{
        return !hop_by_hop(name, len);
}

const char *dm_vendor_status_text(int status)
{
        static const struct {
                int status;
                const char *text;
        } t[] = {
                { 200, "OK" },
                { 400, "Bad Request" },
                { 401, "Unauthorized" },
                { 402, "Payment Required" },
                { 403, "Forbidden" },
                { 404, "Not Found" },
                { 408, "Request Timeout" },
                { 411, "Length Required" },
                { 413, "Content Too Large" },
                { 415, "Unsupported Media Type" },
                { 429, "Too Many Requests" },
                { 431, "Request Header Fields Too Large" },
                { 500, "Internal Server Error" },
                { 501, "Not Implemented" },
                { 502, "Bad Gateway" },
                { 503, "Service Unavailable" },
                { 504, "Gateway Timeout" },
                { 529, "Overloaded" },
        };

        for (size_t i = 0; i < DM_ARRAY_SIZE(t); i++)
                if (t[i].status == status)
                        return t[i].text;
        return status < 400 ? "OK" : "Error";
}

/* The generic shape {"error":{"type","message"}} (shape -1), or a vendor's
 * own: Anthropic's {"type":"error","error":{"type","message"}}, OpenAI's
 * {"error":{"message","type","param","code"}}. */
static int error_response(struct dm_buf *out, int shape, int status, const char *type, const char *message)
{
        _cleanup_free_ char *msg = NULL;
        json_object *o = json_object_new_object(), *e = json_object_new_object();
        const char *body;
        int r = -ENOMEM;

        if (!o || !e || asprintf(&msg, "demesne vendor proxy: %s", message) < 0) {
                json_object_put(o);
                json_object_put(e);
                return -ENOMEM;
        }
        if (shape == DM_VENDOR_ANTHROPIC)
                json_object_object_add(o, "type", json_object_new_string("error"));
        json_object_object_add(e, "type", json_object_new_string(type));
        json_object_object_add(e, "message", json_object_new_string(msg));
        if (shape == DM_VENDOR_OPENAI) {
                json_object_object_add(e, "param", NULL);
                json_object_object_add(e, "code", json_object_new_string("egress_not_allowed"));
        }
        json_object_object_add(o, "error", e);
        body = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        if (body)
                r = dm_buf_printf(out,
                                  "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                                  "Connection: close\r\n\r\n%s",
                                  status, dm_vendor_status_text(status), strlen(body), body);
        json_object_put(o);
        return r;
}

int dm_vendor_error_response(struct dm_buf *out, int status, const char *type, const char *message)
{
        return error_response(out, -1, status, type, message);
}

int dm_vendor_filter_error_response(struct dm_buf *out, enum dm_vendor provider, int status, const char *message)
{
        return error_response(out, (int)provider, status, "invalid_request_error", message);
}
