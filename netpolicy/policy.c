/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "netpolicy/policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/blocked.h"
#include "src/basic/cleanup.h"

const char *const dm_egress_names[] = { "none", "package-managers", "open", NULL };

static uint32_t prefix_mask(unsigned prefix)
{
        return prefix == 0 ? 0 : 0xffffffffu << (32 - prefix);
}

static int parse_mode(const char *mode, enum dm_egress *ret, struct dm_error *err)
{
        for (size_t i = 0; dm_egress_names[i]; i++)
                if (strcmp(mode, dm_egress_names[i]) == 0) {
                        *ret = (enum dm_egress)i;
                        return 0;
                }
        return dm_error_set(err, -EINVAL, "unknown egress '%s': use none, package-managers or open", mode);
}

/* A decimal number in [min, max] with nothing else around it. */
static bool parse_uint(const char *s, unsigned long min, unsigned long max, unsigned long *ret)
{
        unsigned long v = 0;

        if (!*s || strlen(s) > 5)
                return false;
        for (const char *c = s; *c; c++) {
                if (*c < '0' || *c > '9')
                        return false;
                v = v * 10 + (unsigned long)(*c - '0');
        }
        if (v < min || v > max)
                return false;
        *ret = v;
        return true;
}

static int parse_cidr(const char *entry, char *host, uint16_t port, struct dm_policy_cidr *ret, struct dm_error *err)
{
        char *slash = strchr(host, '/');
        unsigned long prefix = 32;
        struct in_addr a;
        uint32_t h, mask;

        if (slash) {
                *slash = '\0';
                if (!parse_uint(slash + 1, 0, 32, &prefix))
                        return dm_error_set(err, -EINVAL,
                                            "allow entry '%s': prefix length '%s' is not a number from 0 to 32", entry,
                                            slash + 1);
        }
        if (inet_pton(AF_INET, host, &a) != 1)
                return dm_error_set(err, -EINVAL,
                                    "allow entry '%s': '%s' is not an IPv4 address (four numbers from 0 to 255, "
                                    "no leading zeros)",
                                    entry, host);
        h = ntohl(a.s_addr);
        mask = prefix_mask((unsigned)prefix);
        if (h & ~mask) {
                struct in_addr n = { htonl(h & mask) };
                char buf[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &n, buf, sizeof(buf));
                return dm_error_set(err, -EINVAL,
                                    "allow entry '%s': host bits are set after the /%lu prefix: did you mean "
                                    "'%s/%lu'?",
                                    entry, prefix, buf, prefix);
        }
        /* Containing a blocked range is as bad as lying in one: the filter
         * drops it anyway, and the proxy must never take the entry as leave
         * to reach it. */
        char why[256];
        if (dm_blocked_overlap(h, (unsigned)prefix, why, sizeof(why)))
                return dm_error_set(err, -EINVAL, "allow entry '%s' overlaps %s", entry, why);
        ret->net = a;
        ret->prefix = (uint8_t)prefix;
        ret->port = port;
        return 0;
}

/* RFC 1123 labels: letters, digits and hyphens, 1-63 bytes, no hyphen at
 * either end; 253 bytes in all; the last label not all digits (the egress
 * proxy refuses such a name: a resolver reads "0x7f.1" or "10.1" as an
 * address). Lowercases name in place. */
static int check_hostname(const char *entry, char *name, struct dm_error *err)
{
        size_t len = strlen(name), label = 0;
        bool all_digits = true;

        if (len > 0 && name[len - 1] == '.')
                name[--len] = '\0';
        if (len == 0)
                return dm_error_set(err, -EINVAL, "allow entry '%s' has no host name", entry);
        if (len > 253)
                return dm_error_set(err, -EINVAL, "allow entry '%s': host name is longer than 253 bytes", entry);
        for (size_t i = 0; i <= len; i++) {
                char c = name[i];
                if (c == '.' || c == '\0') {
                        if (label == 0)
                                return dm_error_set(err, -EINVAL, "allow entry '%s': host name has an empty label",
                                                    entry);
                        if (name[i - 1] == '-')
                                return dm_error_set(err, -EINVAL, "allow entry '%s': a label ends with '-'", entry);
                        if (c == '\0' && all_digits)
                                return dm_error_set(err, -EINVAL,
                                                    "allow entry '%s': the last label is a number, so "
                                                    "this is no host name (addresses go in numeric form: A.B.C.D)",
                                                    entry);
                        label = 0;
                        all_digits = true;
                        continue;
                }
                if (c == '*')
                        return dm_error_set(err, -EINVAL,
                                            "allow entry '%s': '*' is only allowed as the whole first label, as in "
                                            "'*.example.com'",
                                            entry);
                if (!isalnum((unsigned char)c) && c != '-')
                        return dm_error_set(err, -EINVAL,
                                            "allow entry '%s': '%c' is not allowed in a host name (letters, digits, "
                                            "'-' and '.')",
                                            entry, c);
                if (label == 0 && c == '-')
                        return dm_error_set(err, -EINVAL, "allow entry '%s': a label starts with '-'", entry);
                if (!isdigit((unsigned char)c))
                        all_digits = false;
                if (++label > 63)
                        return dm_error_set(err, -EINVAL, "allow entry '%s': a label is longer than 63 bytes", entry);
                name[i] = (char)tolower((unsigned char)c);
        }
        return 0;
}

static bool looks_numeric(const char *s)
{
        return strspn(s, "0123456789./") == strlen(s) && strpbrk(s, "0123456789");
}

static int add_entry(struct dm_policy *p, const char *entry, struct dm_error *err)
{
        _cleanup_free_ char *host = NULL;
        unsigned long port = 0;
        char *colon;
        size_t len;

        if (!entry || !*entry)
                return dm_error_set(err, -EINVAL, "an allow entry is empty");
        len = strnlen(entry, DM_POLICY_ENTRY_MAX + 1);
        if (len > DM_POLICY_ENTRY_MAX)
                return dm_error_set(err, -E2BIG, "allow entry '%.40s...' is longer than %d bytes", entry,
                                    DM_POLICY_ENTRY_MAX);
        colon = strchr(entry, ':');
        if (strchr(entry, '[') || (colon && strchr(colon + 1, ':')))
                return dm_error_set(err, -EINVAL,
                                    "allow entry '%s' is IPv6, which demesne does not route: sandboxes have "
                                    "IPv4 egress only",
                                    entry);
        host = strdup(entry);
        if (!host)
                return dm_error_set(err, -ENOMEM, "out of memory");
        colon = strchr(host, ':');
        if (colon) {
                *colon = '\0';
                if (!parse_uint(colon + 1, 1, 65535, &port))
                        return dm_error_set(err, -EINVAL, "allow entry '%s': port '%s' is not a number from 1 to 65535",
                                            entry, colon + 1);
                if (!*host)
                        return dm_error_set(err, -EINVAL, "allow entry '%s' has a port but no host", entry);
        }

        if (looks_numeric(host)) {
                struct dm_policy_cidr c;
                int r = parse_cidr(entry, host, (uint16_t)port, &c, err);
                if (r < 0)
                        return r;
                p->cidrs[p->n_cidrs++] = c;
                return 0;
        }
        if (strchr(host, '/'))
                return dm_error_set(err, -EINVAL, "allow entry '%s': a '/' prefix needs an IPv4 address before it",
                                    entry);

        struct dm_policy_name *n = &p->names[p->n_names];
        char *name = host;
        if (strcmp(host, "*") == 0)
                return dm_error_set(err, -EINVAL, "allow entry '%s' would allow every host: use egress 'open' instead",
                                    entry);
        if (strncmp(host, "*.", 2) == 0) {
                name += 2;
                n->wildcard = true;
        }
        int r = check_hostname(entry, name, err);
        if (r < 0)
                return r;
        if (n->wildcard && !strchr(name, '.'))
                return dm_error_set(err, -EINVAL,
                                    "allow entry '%s' would allow a whole top-level domain: name at least "
                                    "two labels after '*.'",
                                    entry);
        n->host = strdup(name);
        if (!n->host)
                return dm_error_set(err, -ENOMEM, "out of memory");
        n->port = (uint16_t)port;
        p->n_names++;
        return 0;
}

int dm_policy_parse(const char *mode, const char *const *allow, unsigned flags, struct dm_policy **ret_policy,
                    struct dm_error *err)
{
        struct dm_policy *p;
        size_t n = 0;
        int r;

        p = calloc(1, sizeof(*p));
        if (!p)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = parse_mode(mode ? mode : "none", &p->mode, err);
        if (r < 0)
                goto fail;
        /* The tool contract: open egress only for sandbox_research (which
         * passes the flag) or where the operator permits it. */
        if (p->mode == DM_EGRESS_OPEN && !(flags & DM_POLICY_CALLER_ALLOWED)) {
                r = dm_error_set(err, -EPERM,
                                 "egress 'open' is refused: this server does not let callers open the "
                                 "network (its operator can permit it with DEMESNE_ALLOW_CALLER_EGRESS=1; "
                                 "sandbox_research always has open egress)");
                goto fail;
        }
        while (allow && allow[n])
                n++;
        if (n > 0 && !(flags & DM_POLICY_CALLER_ALLOWED)) {
                r = dm_error_set(err, -EPERM,
                                 "'allow' entries are refused: this server does not accept caller-supplied "
                                 "egress entries (its operator can permit them with DEMESNE_ALLOW_CALLER_EGRESS=1)");
                goto fail;
        }
        if (n > DM_POLICY_MAX_ENTRIES) {
                r = dm_error_set(err, -E2BIG, "%zu allow entries is more than the limit of %d", n,
                                 DM_POLICY_MAX_ENTRIES);
                goto fail;
        }
        if (n > 0) {
                p->cidrs = calloc(n, sizeof(*p->cidrs));
                p->names = calloc(n, sizeof(*p->names));
                if (!p->cidrs || !p->names) {
                        r = dm_error_set(err, -ENOMEM, "out of memory");
                        goto fail;
                }
        }
        for (size_t i = 0; i < n; i++) {
                r = add_entry(p, allow[i], err);
                if (r < 0)
                        goto fail;
        }
        *ret_policy = p;
        return 0;
fail:
        dm_policy_free(p);
        return r;
}

bool dm_policy_needs_network(const struct dm_policy *p)
{
        return p->mode != DM_EGRESS_NONE || p->n_cidrs > 0 || p->n_names > 0;
}

void dm_policy_free(struct dm_policy *p)
{
        if (!p)
                return;
        for (size_t i = 0; i < p->n_names; i++)
                free(p->names[i].host);
        free(p->names);
        free(p->cidrs);
        free(p);
}

int dm_policy_dup(const struct dm_policy *p, struct dm_policy **ret_policy)
{
        struct dm_policy *d = calloc(1, sizeof(*d));

        if (!d)
                return -ENOMEM;
        d->mode = p->mode;
        if (p->n_cidrs && !(d->cidrs = calloc(p->n_cidrs, sizeof(*d->cidrs))))
                goto fail;
        if (p->n_cidrs)
                memcpy(d->cidrs, p->cidrs, p->n_cidrs * sizeof(*d->cidrs));
        d->n_cidrs = p->n_cidrs;
        if (p->n_names && !(d->names = calloc(p->n_names, sizeof(*d->names))))
                goto fail;
        for (size_t i = 0; i < p->n_names; i++, d->n_names++) {
                d->names[i] = p->names[i];
                if (!(d->names[i].host = strdup(p->names[i].host)))
                        goto fail;
        }
        *ret_policy = d;
        return 0;
fail:
        dm_policy_free(d);
        return -ENOMEM;
}
