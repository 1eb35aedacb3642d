/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_PROXY_INTERNAL_H
#define DM_NETPOLICY_PROXY_INTERNAL_H

/* The egress proxy's pure parts (no sockets, no threads), shared by
 * proxy.c and tests/unit/test-proxy-match.c: decisions, request parsing and
 * rewriting, and hosts-file lookup. */

#include <stdbool.h>
#include <stddef.h>

#include "netpolicy/proxy.h"
#include "src/basic/buf.h"

/* Why a request was allowed or refused; each has one HTTP status. */
enum dm_proxy_code {
        DM_PROXY_OK = 0,
        DM_PROXY_BAD_REQUEST,       /* 400 */
        DM_PROXY_HEADER_TOO_LARGE,  /* 431 */
        DM_PROXY_UNKNOWN_SOURCE,    /* 403: connection not from the sandbox's address */
        DM_PROXY_HOST_NOT_ALLOWED,  /* 403 */
        DM_PROXY_PORT_NOT_ALLOWED,  /* 403 */
        DM_PROXY_IP_LITERAL,        /* 403: no allowed CIDR covers it */
        DM_PROXY_IPV6,              /* 403: IPv6 is dropped everywhere */
        DM_PROXY_FORBIDDEN_ADDRESS, /* 403: name resolves to loopback, link-local, own address... */
        DM_PROXY_TOO_MANY,          /* 503: connection cap of the sandbox */
        DM_PROXY_RESOLVE_FAILED,    /* 502 */
        DM_PROXY_CONNECT_FAILED,    /* 502 */
        DM_PROXY_CONNECT_TIMEOUT,   /* 504 */
        DM_PROXY_CODE_MAX,
};

struct dm_proxy_verdict {
        enum dm_proxy_code code;
        char reason[256]; /* one line, printable ASCII */
        /* The rule that allowed it (dm_proxy_check_target): "allow:<entry>",
         * "package:<host>" or "mode:open"; empty otherwise. */
        char rule[128];
};

int dm_proxy_code_status(enum dm_proxy_code code);
const char *dm_proxy_status_text(int status);
/* Fills v and returns -1 (code != OK) or 0, so callers can return it. */
int dm_proxy_verdict_set(struct dm_proxy_verdict *v, enum dm_proxy_code code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

/* Lowercases in into out and drops one trailing dot. -EINVAL when the result
 * is not a host name (letters, digits, '-' inside labels, '_', dots; labels of 1..63;
 * at most 253; last label not all digits). */
int dm_proxy_normalize_name(const char *in, char *out, size_t outlen);

/* First decision on a request's host:port, before any lookup. host as sent;
 * is_connect tells CONNECT from plain HTTP (package hosts take 443 and 80
 * respectively). Returns 0 when host is a name the policy allows (resolve
 * it, then check each address with dm_proxy_check_address), 1 when it is an
 * IPv4 literal an allowed CIDR covers and no blocked range holds
 * (*ret_literal set; still check it against the host's addresses), -1 when
 * refused (v filled). On 0, ret_name (>= 256 bytes) holds the normalised
 * name. */
int dm_proxy_check_target(const struct dm_proxy_policy *p, const char *host, uint16_t port, bool is_connect,
                          char *ret_name, struct in_addr *ret_literal, struct dm_proxy_verdict *v);

/* The rule a journal names for a verdict (src/core/activity.h): v->rule
 * when the policy allowed it, else the refusal's class:
 * "refused:not-allowed", "refused:port-not-allowed", "refused:ip-literal",
 * "refused:bad-request", "refused:too-many-connections",
 * "blocked:<range>" (loopback, link-local, private-range, sandbox-pool,
 * metadata, host-address...), "blocked:ipv6", "blocked:unknown-source". */
const char *dm_proxy_verdict_rule(const struct dm_proxy_verdict *v, bool allowed);

/* Whether a CIDR rule covers addr and port. */
bool dm_proxy_cidr_allows(const struct dm_proxy_policy *p, struct in_addr addr, uint16_t port);

/* The rule for every address the proxy would connect to (what a name
 * resolved to, or a literal): 0 when it may be used, -1 (v filled) when it
 * is in a blocked range (netpolicy/blocked.h: loopback, link-local, the
 * sandbox pool, metadata, private ranges the operator did not allow...) or
 * one of own[] (the host's addresses). No allow rule overrides it. name is
 * for the message. */
int dm_proxy_check_address(const char *name, struct in_addr addr, const struct in_addr *own, size_t n_own,
                           struct dm_proxy_verdict *v);

/* Looks name (normalised) up in a hosts(5) file: IPv4 lines only, names
 * case-insensitive, '#' comments. Returns 1 with up to max addresses in file
 * order, 0 when the file does not name it, -errno when the file cannot be
 * read (missing, larger than 1 MiB: -EFBIG). */
int dm_proxy_hosts_lookup(const char *path, const char *name, struct in_addr *ret, size_t max, size_t *ret_n);

/* --- requests -------------------------------------------------------------- */

#define DM_PROXY_MAX_HEADERS 100

struct dm_proxy_header {
        const char *name;
        const char *value; /* leading and trailing blanks trimmed */
};

struct dm_proxy_request {
        char *storage; /* owned copy of the head that the pointers below point into */
        const char *method;
        const char *host; /* as sent (not yet normalised) */
        uint16_t port;
        const char *path;    /* origin-form ("/" at least); NULL for CONNECT */
        const char *version; /* "HTTP/1.1" or "HTTP/1.0" */
        bool is_connect;
        struct dm_proxy_header headers[DM_PROXY_MAX_HEADERS];
        size_t n_headers;
};

/* Offset just past the blank line that ends a request head in buf (CRLF or
 * bare LF line ends), 0 when the head is not complete yet. */
size_t dm_proxy_head_end(const char *buf, size_t len);

/* Parses a complete head (request line and headers, up to and including the
 * blank line). CONNECT takes host:port (port required); other methods take an
 * absolute http:// URI (default port 80). 0, or -1 with v filled
 * (DM_PROXY_BAD_REQUEST, DM_PROXY_IPV6). */
int dm_proxy_request_parse(const char *head, size_t len, struct dm_proxy_request *ret, struct dm_proxy_verdict *v);
void dm_proxy_request_release(struct dm_proxy_request *r);

/* The head to send upstream: origin-form request line, Host set to the
 * target, hop-by-hop headers (Connection and what it names, Keep-Alive, TE,
 * Trailer, Upgrade, Proxy-*) dropped, Connection: close added. */
int dm_proxy_request_build(const struct dm_proxy_request *r, struct dm_buf *out);

/* Rewrites a response head from upstream in place into out: drops hop-by-hop
 * headers the same way and adds Connection: close (the proxy serves one
 * request per client connection). -EINVAL when head is not an HTTP status
 * line. */
int dm_proxy_response_build(const char *head, size_t len, struct dm_buf *out);

#endif
