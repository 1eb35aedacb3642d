/* SPDX-License-Identifier: MIT */
/* The egress proxy's decisions: the allowlist, name and address checks, and
 * hosts(5) lookups. Nothing here touches a socket. */
#include "config.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netpolicy/blocked.h"
#include "netpolicy/proxy-internal.h"
#include "src/basic/cleanup.h"

#define HOSTS_FILE_MAX (1024 * 1024)

static const struct {
        int status;
        const char *text;
} statuses[DM_PROXY_CODE_MAX] = {
        [DM_PROXY_OK] = { 200, "OK" },
        [DM_PROXY_BAD_REQUEST] = { 400, "Bad Request" },
        [DM_PROXY_HEADER_TOO_LARGE] = { 431, "Request Header Fields Too Large" },
        [DM_PROXY_UNKNOWN_SOURCE] = { 403, "Forbidden" },
        [DM_PROXY_HOST_NOT_ALLOWED] = { 403, "Forbidden" },
        [DM_PROXY_PORT_NOT_ALLOWED] = { 403, "Forbidden" },
        [DM_PROXY_IP_LITERAL] = { 403, "Forbidden" },
        [DM_PROXY_IPV6] = { 403, "Forbidden" },
        [DM_PROXY_FORBIDDEN_ADDRESS] = { 403, "Forbidden" },
        [DM_PROXY_TOO_MANY] = { 503, "Service Unavailable" },
        [DM_PROXY_RESOLVE_FAILED] = { 502, "Bad Gateway" },
        [DM_PROXY_CONNECT_FAILED] = { 502, "Bad Gateway" },
        [DM_PROXY_CONNECT_TIMEOUT] = { 504, "Gateway Timeout" },
};

int dm_proxy_code_status(enum dm_proxy_code code)
{
        return (unsigned)code < DM_PROXY_CODE_MAX ? statuses[code].status : 500;
}

const char *dm_proxy_status_text(int status)
{
        for (size_t i = 0; i < DM_PROXY_CODE_MAX; i++)
                if (statuses[i].status == status)
                        return statuses[i].text;
        return "Error";
}

int dm_proxy_verdict_set(struct dm_proxy_verdict *v, enum dm_proxy_code code, const char *fmt, ...)
{
        va_list ap;

        v->code = code;
        va_start(ap, fmt);
        vsnprintf(v->reason, sizeof(v->reason), fmt, ap);
        va_end(ap);
        /* The reason goes into a response body and a log line: one line of
         * printable ASCII whatever the request carried. */
        for (char *c = v->reason; *c; c++)
                if (*c < 0x20 || *c > 0x7e)
                        *c = '?';
        return code == DM_PROXY_OK ? 0 : -1;
}

/* --- the allowlist --------------------------------------------------------- */

void dm_proxy_policy_init(struct dm_proxy_policy *p)
{
        memset(p, 0, sizeof(*p));
}

void dm_proxy_policy_release(struct dm_proxy_policy *p)
{
        if (!p)
                return;
        for (size_t i = 0; i < p->n_hosts; i++)
                free(p->hosts[i].pattern);
        free(p->hosts);
        free(p->cidrs);
        dm_proxy_policy_init(p);
}

int dm_proxy_normalize_name(const char *in, char *out, size_t outlen)
{
        size_t n = strlen(in), label = 0;
        bool all_digits = true;

        if (n > 0 && in[n - 1] == '.')
                n--;
        if (n == 0 || n > 253 || n >= outlen)
                return -EINVAL;
        for (size_t i = 0; i < n; i++) {
                char c = (char)tolower((unsigned char)in[i]);
                if (c == '.') {
                        if (label == 0 || label > 63 || out[i - 1] == '-')
                                return -EINVAL;
                        label = 0;
                        all_digits = true;
                } else if (c == '-' && label == 0) {
                        return -EINVAL;
                } else if (isalnum((unsigned char)c) || c == '-' || c == '_') {
                        label++;
                        if (!isdigit((unsigned char)c))
                                all_digits = false;
                } else {
                        return -EINVAL;
                }
                out[i] = c;
        }
        out[n] = '\0';
        /* A numeric last label is an address in some spelling (127.1,
         * 0x7f.1, 2130706433) that the resolver would accept: never a name. */
        if (label == 0 || label > 63 || all_digits || out[n - 1] == '-')
                return -EINVAL;
        return 0;
}

static int add_host(struct dm_proxy_policy *p, const char *pattern, uint16_t port, bool web, struct dm_error *err)
{
        char name[256];
        const char *body = pattern;
        bool wild = strncmp(pattern, "*.", 2) == 0;
        struct dm_proxy_host_rule *h;

        if (wild)
                body = pattern + 2;
        if (dm_proxy_normalize_name(body, name, sizeof(name)) < 0)
                return dm_error_set(err, -EINVAL,
                                    "'%s' is not a host name or '*.' pattern (IP addresses go in CIDR entries)",
                                    pattern);
        h = realloc(p->hosts, (p->n_hosts + 1) * sizeof(*h));
        if (!h)
                return dm_error_set(err, -ENOMEM, "out of memory");
        p->hosts = h;
        h = &p->hosts[p->n_hosts];
        if (asprintf(&h->pattern, "%s%s", wild ? "*." : "", name) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        h->port = port;
        h->web = web;
        p->n_hosts++;
        return 0;
}

int dm_proxy_policy_add_host(struct dm_proxy_policy *p, const char *pattern, uint16_t port, struct dm_error *err)
{
        return add_host(p, pattern, port, false, err);
}

int dm_proxy_policy_add_web_host(struct dm_proxy_policy *p, const char *pattern, struct dm_error *err)
{
        return add_host(p, pattern, 0, true, err);
}

int dm_proxy_policy_add_cidr(struct dm_proxy_policy *p, struct in_addr net, unsigned prefix, uint16_t port,
                             struct dm_error *err)
{
        struct dm_proxy_cidr_rule *c;
        uint32_t mask = prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
        char a[INET_ADDRSTRLEN];

        if (prefix > 32)
                return dm_error_set(err, -EINVAL, "prefix /%u is longer than 32", prefix);
        if (ntohl(net.s_addr) & ~mask)
                return dm_error_set(err, -EINVAL, "'%s/%u' has host bits set", inet_ntop(AF_INET, &net, a, sizeof(a)),
                                    prefix);
        c = realloc(p->cidrs, (p->n_cidrs + 1) * sizeof(*c));
        if (!c)
                return dm_error_set(err, -ENOMEM, "out of memory");
        p->cidrs = c;
        c[p->n_cidrs++] = (struct dm_proxy_cidr_rule){ .net = net, .prefix = (uint8_t)prefix, .port = port };
        return 0;
}

static int parse_port(const char *s, uint16_t *ret)
{
        char *end;
        unsigned long v;

        if (!isdigit((unsigned char)*s))
                return -EINVAL;
        errno = 0;
        v = strtoul(s, &end, 10);
        if (errno || *end || v == 0 || v > 65535)
                return -EINVAL;
        *ret = (uint16_t)v;
        return 0;
}

int dm_proxy_policy_add_entry(struct dm_proxy_policy *p, const char *entry, struct dm_error *err)
{
        char buf[300], *colon, *slash;
        uint16_t port = 0;
        unsigned prefix = 32;
        struct in_addr a;

        if (strlen(entry) >= sizeof(buf))
                return dm_error_set(err, -EINVAL, "allow entry is longer than %zu characters", sizeof(buf) - 1);
        strcpy(buf, entry);
        colon = strrchr(buf, ':');
        if (colon) {
                *colon = '\0';
                if (parse_port(colon + 1, &port) < 0)
                        return dm_error_set(err, -EINVAL, "allow entry '%s': port must be 1..65535", entry);
        }
        slash = strchr(buf, '/');
        if (slash) {
                char *end;
                *slash = '\0';
                errno = 0;
                prefix = (unsigned)strtoul(slash + 1, &end, 10);
                if (errno || *end || slash[1] == '\0' || prefix > 32)
                        return dm_error_set(err, -EINVAL, "allow entry '%s': prefix must be 0..32", entry);
        }
        if (inet_pton(AF_INET, buf, &a) == 1) {
                if (dm_proxy_policy_add_cidr(p, a, prefix, port, err) < 0)
                        return dm_error_wrap(err, "allow entry '%s'", entry);
                return 0;
        }
        if (slash)
                return dm_error_set(err, -EINVAL, "allow entry '%s': a CIDR needs an IPv4 address", entry);
        if (dm_proxy_policy_add_host(p, buf, port, err) < 0)
                return dm_error_wrap(err, "allow entry '%s'", entry);
        return 0;
}

int dm_proxy_policy_copy(struct dm_proxy_policy *dst, const struct dm_proxy_policy *src)
{
        dm_proxy_policy_init(dst);
        dst->any_name = src->any_name;
        if (src->n_hosts) {
                dst->hosts = calloc(src->n_hosts, sizeof(*dst->hosts));
                if (!dst->hosts)
                        return -ENOMEM;
                for (size_t i = 0; i < src->n_hosts; i++) {
                        dst->hosts[i].port = src->hosts[i].port;
                        dst->hosts[i].web = src->hosts[i].web;
                        dst->hosts[i].pattern = strdup(src->hosts[i].pattern);
                        dst->n_hosts++;
                        if (!dst->hosts[i].pattern) {
                                dm_proxy_policy_release(dst);
                                return -ENOMEM;
                        }
                }
        }
        if (src->n_cidrs) {
                dst->cidrs = malloc(src->n_cidrs * sizeof(*dst->cidrs));
                if (!dst->cidrs) {
                        dm_proxy_policy_release(dst);
                        return -ENOMEM;
                }
                memcpy(dst->cidrs, src->cidrs, src->n_cidrs * sizeof(*dst->cidrs));
                dst->n_cidrs = src->n_cidrs;
        }
        return 0;
}

/* --- decisions ------------------------------------------------------------- */

static bool pattern_matches(const char *pattern, const char *name)
{
        size_t pn, nn;

        if (strncmp(pattern, "*.", 2) != 0)
                return strcmp(pattern, name) == 0;
        pattern += 1; /* ".suffix" */
        pn = strlen(pattern);
        nn = strlen(name);
        return nn > pn && strcmp(name + nn - pn, pattern) == 0;
}

static bool cidr_covers(const struct dm_proxy_cidr_rule *c, struct in_addr addr)
{
        uint32_t mask = c->prefix == 0 ? 0 : 0xffffffffu << (32 - c->prefix);
        return (ntohl(addr.s_addr) & mask) == ntohl(c->net.s_addr);
}

bool dm_proxy_cidr_allows(const struct dm_proxy_policy *p, struct in_addr addr, uint16_t port)
{
        for (size_t i = 0; i < p->n_cidrs; i++)
                if (cidr_covers(&p->cidrs[i], addr) && (p->cidrs[i].port == 0 || p->cidrs[i].port == port))
                        return true;
        return false;
}

/* A web-only rule (a package host) takes CONNECT to 443 and plain HTTP to
 * 80: nothing else a package manager needs, and no way to an SSH or SMTP
 * port of a host that happens to be on the list. */
static bool rule_port_ok(const struct dm_proxy_host_rule *h, uint16_t port, bool is_connect)
{
        if (h->web)
                return port == (is_connect ? 443 : 80);
        return h->port == 0 || h->port == port;
}

/* The allow rule's own words, as the caller wrote it (or the package host). */
static void host_rule(const struct dm_proxy_host_rule *h, struct dm_proxy_verdict *v)
{
        if (h->web)
                snprintf(v->rule, sizeof(v->rule), "package:%.100s", h->pattern);
        else if (h->port)
                snprintf(v->rule, sizeof(v->rule), "allow:%.100s:%u", h->pattern, h->port);
        else
                snprintf(v->rule, sizeof(v->rule), "allow:%.100s", h->pattern);
}

static void cidr_rule(const struct dm_proxy_policy *p, struct in_addr a, uint16_t port, struct dm_proxy_verdict *v)
{
        char net[INET_ADDRSTRLEN];

        for (size_t i = 0; i < p->n_cidrs; i++) {
                const struct dm_proxy_cidr_rule *c = &p->cidrs[i];
                if (!cidr_covers(c, a) || (c->port != 0 && c->port != port))
                        continue;
                inet_ntop(AF_INET, &c->net, net, sizeof(net));
                if (c->port)
                        snprintf(v->rule, sizeof(v->rule), "allow:%s/%u:%u", net, c->prefix, c->port);
                else
                        snprintf(v->rule, sizeof(v->rule), "allow:%s/%u", net, c->prefix);
                return;
        }
}

/* The blocked range's class, from the sentence netpolicy/blocked.c gives. */
static const char *blocked_class(const char *reason)
{
        static const struct {
                const char *phrase, *rule;
        } classes[] = {
                { "loopback", "blocked:loopback" },           { "link-local", "blocked:link-local" },
                { "metadata", "blocked:metadata" },           { "Azure host", "blocked:metadata" },
                { "private range", "blocked:private-range" }, { "shared address space", "blocked:private-range" },
                { "sandbox pool", "blocked:sandbox-pool" },   { "address of this host", "blocked:host-address" },
                { "multicast", "blocked:multicast" },         { "reserved or broadcast", "blocked:reserved" },
                { "'this network'", "blocked:reserved" },
        };

        for (size_t i = 0; i < sizeof(classes) / sizeof(classes[0]); i++)
                if (strstr(reason, classes[i].phrase))
                        return classes[i].rule;
        return "blocked:address";
}

const char *dm_proxy_verdict_rule(const struct dm_proxy_verdict *v, bool allowed)
{
        if (allowed)
                return v->rule[0] ? v->rule : "allow";
        switch (v->code) {
        case DM_PROXY_UNKNOWN_SOURCE: return "blocked:unknown-source";
        case DM_PROXY_HOST_NOT_ALLOWED: return "refused:not-allowed";
        case DM_PROXY_PORT_NOT_ALLOWED: return "refused:port-not-allowed";
        case DM_PROXY_IP_LITERAL: return "refused:ip-literal";
        case DM_PROXY_IPV6: return "blocked:ipv6";
        case DM_PROXY_FORBIDDEN_ADDRESS: return blocked_class(v->reason);
        case DM_PROXY_TOO_MANY: return "refused:too-many-connections";
        case DM_PROXY_BAD_REQUEST:
        case DM_PROXY_HEADER_TOO_LARGE: return "refused:bad-request";
        default: return "refused:error";
        }
}

int dm_proxy_check_target(const struct dm_proxy_policy *p, const char *host, uint16_t port, bool is_connect,
                          char *ret_name, struct in_addr *ret_literal, struct dm_proxy_verdict *v)
{
        struct in_addr a;
        bool name_matched = false, web_only = true, covered = false;
        const char *why;

        if (host[0] == '[' || strchr(host, ':'))
                return dm_proxy_verdict_set(v, DM_PROXY_IPV6,
                                            "IPv6 destination '%.80s' refused: sandboxes have no IPv6", host);
        if (inet_pton(AF_INET, host, &a) == 1) {
                /* Before the rules: no CIDR reaches a blocked address. */
                why = dm_blocked_why(ntohl(a.s_addr));
                if (why)
                        return dm_proxy_verdict_set(v, DM_PROXY_FORBIDDEN_ADDRESS,
                                                    "address %s is in %s, which no sandbox "
                                                    "reaches",
                                                    host, why);
                if (dm_proxy_cidr_allows(p, a, port)) {
                        *ret_literal = a;
                        cidr_rule(p, a, port, v);
                        return dm_proxy_verdict_set(v, DM_PROXY_OK, "address %s:%u is covered by an allowed CIDR", host,
                                                    port) +
                               1;
                }
                for (size_t i = 0; i < p->n_cidrs; i++)
                        covered = covered || cidr_covers(&p->cidrs[i], a);
                if (covered)
                        return dm_proxy_verdict_set(v, DM_PROXY_PORT_NOT_ALLOWED,
                                                    "port %u is not allowed for address %s", port, host);
                return dm_proxy_verdict_set(v, DM_PROXY_IP_LITERAL,
                                            "IP address %s is not covered by an allowed CIDR: ask for a host name",
                                            host);
        }
        if (dm_proxy_normalize_name(host, ret_name, 256) < 0)
                return dm_proxy_verdict_set(v, DM_PROXY_HOST_NOT_ALLOWED, "'%.80s' is not a valid host name", host);
        if (p->any_name) {
                snprintf(v->rule, sizeof(v->rule), "mode:open");
                return dm_proxy_verdict_set(v, DM_PROXY_OK, "'%s': this sandbox's egress is open", ret_name);
        }
        for (size_t i = 0; i < p->n_hosts; i++) {
                if (!pattern_matches(p->hosts[i].pattern, ret_name))
                        continue;
                if (rule_port_ok(&p->hosts[i], port, is_connect)) {
                        host_rule(&p->hosts[i], v);
                        return dm_proxy_verdict_set(v, DM_PROXY_OK, "'%s' matches '%s'", ret_name, p->hosts[i].pattern);
                }
                name_matched = true;
                web_only = web_only && p->hosts[i].web;
        }
        if (name_matched && web_only)
                return dm_proxy_verdict_set(v, DM_PROXY_PORT_NOT_ALLOWED,
                                            "port %u is not allowed for '%s': a package "
                                            "host is reached by CONNECT to port 443 or plain HTTP to port 80 only",
                                            port, ret_name);
        if (name_matched)
                return dm_proxy_verdict_set(v, DM_PROXY_PORT_NOT_ALLOWED, "port %u is not allowed for '%s'", port,
                                            ret_name);
        return dm_proxy_verdict_set(v, DM_PROXY_HOST_NOT_ALLOWED, "'%s' is not in this sandbox's egress allowlist",
                                    ret_name);
}

static const char *address_class(struct in_addr addr, const struct in_addr *own, size_t n_own)
{
        const char *why = dm_blocked_why(ntohl(addr.s_addr));

        if (why)
                return why;
        for (size_t i = 0; i < n_own; i++)
                if (own[i].s_addr == addr.s_addr)
                        return "an address of this host";
        return NULL;
}

int dm_proxy_check_address(const char *name, struct in_addr addr, const struct in_addr *own, size_t n_own,
                           struct dm_proxy_verdict *v)
{
        const char *cls = address_class(addr, own, n_own);
        char a[INET_ADDRSTRLEN];

        if (!cls)
                return 0;
        inet_ntop(AF_INET, &addr, a, sizeof(a));
        return dm_proxy_verdict_set(v, DM_PROXY_FORBIDDEN_ADDRESS, "'%s' resolves to %s (%s), which no sandbox reaches",
                                    name, a, cls);
}

/* --- hosts(5) -------------------------------------------------------------- */

static int read_small_file(const char *path, char **ret)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        _cleanup_free_ char *data = NULL;
        struct stat st;
        size_t len = 0;

        if (fd < 0 || fstat(fd, &st) < 0)
                return -errno;
        if (st.st_size > HOSTS_FILE_MAX)
                return -EFBIG;
        data = malloc((size_t)st.st_size + 1);
        if (!data)
                return -ENOMEM;
        while (len < (size_t)st.st_size) {
                ssize_t n = read(fd, data + len, (size_t)st.st_size - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                len += (size_t)n;
        }
        data[len] = '\0';
        *ret = TAKE_PTR(data);
        return 0;
}

int dm_proxy_hosts_lookup(const char *path, const char *name, struct in_addr *ret, size_t max, size_t *ret_n)
{
        _cleanup_free_ char *data = NULL;
        char *save = NULL, *line;
        size_t n = 0;
        int r = read_small_file(path, &data);

        if (r < 0)
                return r;
        for (line = strtok_r(data, "\n", &save); line && n < max; line = strtok_r(NULL, "\n", &save)) {
                char *hash = strchr(line, '#'), *tsave = NULL, *tok;
                struct in_addr a;

                if (hash)
                        *hash = '\0';
                tok = strtok_r(line, " \t\r", &tsave);
                if (!tok || inet_pton(AF_INET, tok, &a) != 1)
                        continue; /* blank, comment, IPv6 or garbage */
                while ((tok = strtok_r(NULL, " \t\r", &tsave))) {
                        char norm[256];
                        if (dm_proxy_normalize_name(tok, norm, sizeof(norm)) == 0 && strcmp(norm, name) == 0) {
                                ret[n++] = a;
                                break;
                        }
                }
        }
        *ret_n = n;
        return n > 0;
}
