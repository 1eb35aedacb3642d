/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_VENDOR_INTERNAL_H
#define DM_NETPOLICY_VENDOR_INTERNAL_H

/* The vendor proxy's pure parts (no sockets, no threads), shared by vendor.c
 * and tests/unit/test-vendor-usage.c: request heads and routes, the token
 * check, upstream headers, the usage meter, prices and usage.json. */

#include <stdbool.h>
#include <stddef.h>

#include "src/basic/curl-api.h"
#include <json-c/json.h>

#include "netpolicy/vendor.h"
#include "src/basic/buf.h"

/* --- requests -------------------------------------------------------------- */

#define DM_VENDOR_MAX_HEADERS 100

struct dm_vendor_header {
        const char *name;
        const char *value; /* blanks trimmed */
};

struct dm_vendor_request {
        char *storage; /* owned copy of the head; the pointers point into it */
        const char *method;
        const char *target; /* origin-form: starts with '/', may carry ?query */
        bool http10;
        struct dm_vendor_header headers[DM_VENDOR_MAX_HEADERS];
        size_t n_headers;
};

/* Parses a complete request head (up to and including the blank line; see
 * dm_proxy_head_end). Origin-form targets only, printable ASCII, HTTP/1.0 or
 * 1.1, at most DM_VENDOR_MAX_HEADERS fields. 0, or -EINVAL with a reason in
 * why. */
int dm_vendor_request_parse(const char *head, size_t len, struct dm_vendor_request *ret, char *why, size_t whylen);
void dm_vendor_request_release(struct dm_vendor_request *r);
/* The value of the first header called name (case-insensitive), or NULL. */
const char *dm_vendor_request_header(const struct dm_vendor_request *r, const char *name);
/* Whether the client wants the connection kept after this request. */
bool dm_vendor_request_keep_alive(const struct dm_vendor_request *r);

/* The path (with query) to append to the upstream base when method target is
 * a model endpoint of provider, else NULL. Paths must match exactly (no
 * percent-escapes, dot segments or doubled slashes); for the ChatGPT backend
 * the /v1 prefix of the OpenAI API paths is dropped. */
const char *dm_vendor_route(enum dm_vendor provider, enum dm_vendor_auth auth, const char *method, const char *target);

enum dm_vendor_token_verdict {
        DM_VENDOR_TOKEN_OK,
        DM_VENDOR_TOKEN_MISSING,
        DM_VENDOR_TOKEN_WRONG,
};

/* Looks for token in x-api-key or Authorization: Bearer, comparing in
 * constant time (for a given length). */
enum dm_vendor_token_verdict dm_vendor_token_check(const struct dm_vendor_request *r, const char *token);

/* The headers for the upstream request: the client's, minus its auth,
 * hop-by-hop, Host, framing, Expect and Accept-Encoding, plus the real
 * credential, "Accept-Encoding: identity" (the meter reads the body) and
 * "Expect:". 0 or -ENOMEM. The list holds the secret: free it with
 * dm_vendor_slist_free_wipe. */
int dm_vendor_upstream_headers(const struct dm_vendor_request *r, enum dm_vendor provider,
                               const struct dm_vendor_cred *cred, struct curl_slist **ret);
void dm_vendor_slist_free_wipe(struct curl_slist *l);

/* Whether an upstream response header goes on to the client (hop-by-hop and
 * framing headers do not: the proxy frames the body itself). */
bool dm_vendor_response_header_keep(const char *name, size_t len);

/* A complete response with a JSON error body
 * {"error":{"type":type,"message":"demesne vendor proxy: message"}} and
 * Connection: close. */
int dm_vendor_error_response(struct dm_buf *out, int status, const char *type, const char *message);
const char *dm_vendor_status_text(int status);

/* --- the request filter (vendor-filter.c) ---------------------------------- */

/* Below open egress, what the vendor proxy forwards of a model request: only
 * what stays between the agent and the model (see vendor-filter.c for what
 * is refused and what is stripped, and why). */
struct dm_vendor_filter {
        int status;         /* when refused: 400 or 415 */
        char why[256];      /* when refused: the reason, for the client and the log */
        char stripped[160]; /* what was taken out ("web_search,beta files-api-2025-04-14"), "" for nothing */
        char *beta;         /* owned: the anthropic-beta value the request now points to, when changed */
};

/* Reads r (its first anthropic-beta header) and, for a POST, body: 0 when the
 * request may go on, with body replaced by the filtered document serialized
 * again and r's anthropic-beta pointing at f->beta when values were taken
 * out; -EACCES when refused (f->status, f->why); -ENOMEM. Release f with
 * dm_vendor_filter_release once r is done with. */
int dm_vendor_filter_apply(struct dm_vendor_filter *f, enum dm_vendor provider, struct dm_vendor_request *r,
                           struct dm_buf *body);
void dm_vendor_filter_release(struct dm_vendor_filter *f);
/* A refusal in the vendor's own error shape (Anthropic's {"type":"error",
 * "error":{...}}, OpenAI's {"error":{"message","type","param","code"}}),
 * type invalid_request_error, with Connection: close (vendor-http.c). */
int dm_vendor_filter_error_response(struct dm_buf *out, enum dm_vendor provider, int status, const char *message);

/* --- usage ----------------------------------------------------------------- */

struct dm_vendor_sample {
        char model[128];
        struct dm_vendor_tokens tokens; /* requests and cost_usd unused */
};

/* Reads one response body as it streams by and finds its token usage:
 * server-sent events (text/event-stream) or one JSON document. Any split of
 * the bytes into feeds gives the same result. Memory is capped: an event or a
 * JSON body larger than DM_VENDOR_METER_MAX is skipped. */
#define DM_VENDOR_METER_MAX (16u * 1024 * 1024)

struct dm_vendor_meter {
        enum dm_vendor provider;
        bool sse;
        bool broken;        /* a cap was hit */
        json_object *doc;   /* JSON mode: the body, parsed at the end */
        struct dm_buf line; /* SSE mode: the current line */
        struct dm_buf data; /* SSE: the current event's data lines; JSON: the body */
        char event[64];
        bool skip_line, skip_event;
        bool found;
        struct dm_vendor_sample sample;
};

void dm_vendor_meter_init(struct dm_vendor_meter *m, enum dm_vendor provider, bool sse);
void dm_vendor_meter_feed(struct dm_vendor_meter *m, const char *p, size_t n);
/* Ends the body: 1 with *ret filled when usage was found, else 0. */
int dm_vendor_meter_finish(struct dm_vendor_meter *m, struct dm_vendor_sample *ret);
void dm_vendor_meter_release(struct dm_vendor_meter *m);

struct dm_vendor_price {
        char *prefix;                                  /* owned */
        double input, output, cache_read, cache_write; /* USD per million tokens */
};

struct dm_vendor_prices {
        struct dm_vendor_price *v;
        size_t n;
};

/* Reads a price table: {"note": "...", "models": {"<prefix>": {"input": n,
 * "output": n, "cache_read": n, "cache_write": n}, ...}} (absent numbers are
 * 0). -errno when unreadable, -EINVAL when malformed, with a message. */
int dm_vendor_prices_load(const char *path, struct dm_vendor_prices *ret, struct dm_error *err);
void dm_vendor_prices_release(struct dm_vendor_prices *p);
/* The entry whose prefix is the longest prefix of model, or NULL. */
const struct dm_vendor_price *dm_vendor_price_lookup(const struct dm_vendor_prices *p, const char *model);

/* Adds one response's sample to u, priced from p (may be NULL). 0 or -ENOMEM. */
int dm_vendor_usage_add(struct dm_vendor_usage *u, const struct dm_vendor_prices *p, const struct dm_vendor_sample *s);
int dm_vendor_usage_copy(struct dm_vendor_usage *dst, const struct dm_vendor_usage *src);
/* Writes it to path through path.tmp and rename. 0 or -errno with a message. */
int dm_vendor_usage_write(const struct dm_vendor_usage *u, const char *path, struct dm_error *err);

/* --- the spending gate -------------------------------------------------------
 * Which requests go upstream under a run's cap, counting those in flight:
 * a request goes when spent + (in flight + 1) x the costliest response so
 * far stays under the cap (largest may be given an estimate to start
 * with). Before any response is priced, with no estimate, nothing says what
 * one costs, so one request goes at a time. A request that may not go now
 * waits while others are in flight (their end may leave room); with none in
 * flight nothing will change, and the cap counts as reached. So the cap is
 * passed only by a response costlier than every one before it. */

struct dm_vendor_gate {
        double cap;         /* USD; 0: none, every request goes */
        unsigned in_flight; /* requests let go that have not ended */
        uint64_t responses; /* responses priced (usage found) */
        double largest;     /* the costliest of them, or the estimate the gate was given to start with */
};

enum dm_vendor_gate_verdict {
        DM_VENDOR_GATE_GO,     /* counted in flight: call dm_vendor_gate_leave when it ends */
        DM_VENDOR_GATE_WAIT,   /* try again when a request in flight ends */
        DM_VENDOR_GATE_CAPPED, /* the cap is reached: refuse (402) */
};

enum dm_vendor_gate_verdict dm_vendor_gate_enter(struct dm_vendor_gate *g, double spent);
/* A request that went has ended; priced: its response was accounted, at
 * cost USD. */
void dm_vendor_gate_leave(struct dm_vendor_gate *g, bool priced, double cost);

#endif
