/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>

#include "netpolicy/blocked.h"
#include "netpolicy/netpolicy.h"
#include "netpolicy/policy.h"
#include "tests/tap.h"

static struct dm_policy *pol;
static struct dm_error err;

static int parse1(const char *mode, const char *entry)
{
        const char *allow[] = { entry, NULL };
        dm_policy_free(pol);
        pol = NULL;
        dm_error_clear(&err);
        return dm_policy_parse(mode, entry ? allow : NULL, DM_POLICY_CALLER_ALLOWED, &pol, &err);
}

/* An entry is refused with code, and the message quotes it and says `why`. */
static void refused(const char *entry, int code, const char *why)
{
        int r = parse1("package-managers", entry);
        is_int(r, code, "'%s' refused", entry ? entry : "(empty)");
        ok(pol == NULL, "no policy returned for '%s'", entry);
        ok(strstr(err.msg, why) != NULL && (!entry || !*entry || strlen(entry) > 60 || strstr(err.msg, entry)),
           "message for '%s' quotes it and says why: %s", entry, err.msg);
}

static const char *ip(struct in_addr a)
{
        static char b[INET_ADDRSTRLEN];
        return inet_ntop(AF_INET, &a, b, sizeof(b));
}

static void test_modes(void)
{
        is_int(dm_policy_parse("none", NULL, 0, &pol, &err), 0, "none parses");
        ok(pol && pol->mode == DM_EGRESS_NONE && !dm_policy_needs_network(pol), "none needs no network");
        dm_policy_free(pol);
        is_int(dm_policy_parse(NULL, NULL, 0, &pol, &err), 0, "no mode parses");
        ok(pol && pol->mode == DM_EGRESS_NONE, "no mode is none");
        dm_policy_free(pol);
        is_int(dm_policy_parse("package-managers", NULL, 0, &pol, &err), 0, "package-managers parses");
        ok(pol && pol->mode == DM_EGRESS_PACKAGE_MANAGERS && dm_policy_needs_network(pol), "and needs network");
        dm_policy_free(pol);
        pol = NULL;
        is_int(dm_policy_parse("open", NULL, 0, &pol, &err), -EPERM, "open without the operator's permission refused");
        ok(strstr(err.msg, "egress 'open' is refused") && strstr(err.msg, "DEMESNE_ALLOW_CALLER_EGRESS=1"),
           "and the message names the variable: %s", err.msg);
        ok(pol == NULL, "and no policy is returned");
        is_int(dm_policy_parse("open", NULL, DM_POLICY_CALLER_ALLOWED, &pol, &err), 0, "open parses where permitted");
        ok(pol && pol->mode == DM_EGRESS_OPEN, "open is open");
        dm_policy_free(pol);
        pol = NULL;
        is_int(dm_policy_parse("everything", NULL, 0, &pol, &err), -EINVAL, "unknown mode refused");
        ok(strstr(err.msg, "unknown egress 'everything'") && strstr(err.msg, "none, package-managers or open"),
           "message lists the modes: %s", err.msg);
        ok(pol == NULL, "no policy for an unknown mode");
}

static void test_caller_gate(void)
{
        const char *allow[] = { "example.com", NULL };
        const char *empty[] = { NULL };

        is_int(dm_policy_parse("package-managers", allow, 0, &pol, &err), -EPERM,
               "allow entries refused when the server does not permit them");
        ok(strstr(err.msg, "DEMESNE_ALLOW_CALLER_EGRESS=1") && strstr(err.msg, "refused"),
           "message names the setting: %s", err.msg);
        ok(pol == NULL, "no policy returned");
        is_int(dm_policy_parse("package-managers", empty, 0, &pol, &err), 0, "an empty allow list needs no permission");
        dm_policy_free(pol);
        pol = NULL;

        static char many[DM_POLICY_MAX_ENTRIES + 1][24];
        static const char *lots[DM_POLICY_MAX_ENTRIES + 2];
        for (int i = 0; i <= DM_POLICY_MAX_ENTRIES; i++) {
                snprintf(many[i], sizeof(many[i]), "h%d.example.com", i);
                lots[i] = many[i];
        }
        is_int(dm_policy_parse("none", lots, DM_POLICY_CALLER_ALLOWED, &pol, &err), -E2BIG, "too many entries refused");
        ok(strstr(err.msg, "257 allow entries") && strstr(err.msg, "limit of 256"), "message gives count and limit: %s",
           err.msg);
}

static void test_good_entries(void)
{
        const char *allow[] = { "Example.COM", "*.Pythonhosted.org:443", "registry.npmjs.org:443",
                                "10.1.0.0/16", "192.0.2.7:8080",         "198.51.100.0/24:53",
                                "8.0.0.0/7",   "host.example.",          NULL };

        is_int(dm_policy_parse("none", allow, DM_POLICY_CALLER_ALLOWED, &pol, &err), 0, "good entries parse: %s",
               err.msg);
        if (!pol)
                return;
        ok(dm_policy_needs_network(pol), "none with entries is an allowlist that needs network");
        is_int(pol->n_names, 4, "four name rules (for the proxy)");
        is_int(pol->n_cidrs, 4, "four address rules (for the filter and routes)");
        is_str(pol->names[0].host, "example.com", "names are lowercased");
        ok(!pol->names[0].wildcard && pol->names[0].port == 0, "plain name: no wildcard, any port");
        is_str(pol->names[1].host, "pythonhosted.org", "wildcard keeps the domain without '*.'");
        ok(pol->names[1].wildcard && pol->names[1].port == 443, "wildcard with port");
        is_int(pol->names[2].port, 443, "host:port keeps the port");
        is_str(pol->names[3].host, "host.example", "a trailing dot is dropped");
        is_str(ip(pol->cidrs[0].net), "10.1.0.0", "CIDR network (a private range the operator allowed)");
        ok(pol->cidrs[0].prefix == 16 && pol->cidrs[0].port == 0, "CIDR prefix, any port");
        is_str(ip(pol->cidrs[1].net), "192.0.2.7", "bare address");
        ok(pol->cidrs[1].prefix == 32 && pol->cidrs[1].port == 8080, "bare address is /32, with its port");
        ok(pol->cidrs[2].prefix == 24 && pol->cidrs[2].port == 53, "CIDR:port");
        ok(pol->cidrs[3].prefix == 7, "a wide range clear of every blocked one is accepted");
        dm_policy_free(pol);
        pol = NULL;
}

static void test_bad_entries(void)
{
        char longname[300];

        refused("", -EINVAL, "an allow entry is empty");
        refused("::1", -EINVAL, "is IPv6");
        refused("2001:db8::/32", -EINVAL, "IPv4 egress only");
        refused("[2001:db8::1]:443", -EINVAL, "is IPv6");
        refused("[::1]", -EINVAL, "is IPv6");
        refused("example.com:", -EINVAL, "port '' is not a number from 1 to 65535");
        refused("example.com:0", -EINVAL, "port '0' is not a number from 1 to 65535");
        refused("example.com:65536", -EINVAL, "port '65536'");
        refused("example.com:http", -EINVAL, "port 'http'");
        refused("example.com:+80", -EINVAL, "port '+80'");
        refused(":443", -EINVAL, "has a port but no host");
        refused("10.0.0.0/33", -EINVAL, "prefix length '33' is not a number from 0 to 32");
        refused("10.0.0.0/", -EINVAL, "prefix length ''");
        refused("10.0.0.0/8/8", -EINVAL, "prefix length '8/8'");
        refused("10.0.0.1/8", -EINVAL, "host bits are set after the /8 prefix: did you mean '10.0.0.0/8'?");
        refused("10.0.0", -EINVAL, "'10.0.0' is not an IPv4 address");
        refused("256.1.1.1", -EINVAL, "is not an IPv4 address");
        refused("010.1.1.1", -EINVAL, "no leading zeros");
        refused("/8", -EINVAL, "is not an IPv4 address");
        refused("169.254.169.254", -EINVAL, "link-local");
        refused("169.254.0.0/16:80", -EINVAL, "which a sandbox never reaches");
        refused("127.0.0.1:8080", -EINVAL, "loopback");
        refused("224.0.0.251:5353", -EINVAL, "multicast");
        refused("255.255.255.255", -EINVAL, "broadcast");
        refused("0.0.0.0", -EINVAL, "'this network'");

        /* Entries that contain a blocked range are refused as those inside
         * one: each was a way to the host or to metadata through the proxy. */
        refused("0.0.0.0/0", -EINVAL, "overlaps the 'this network' range 0.0.0.0/8, which a sandbox never reaches");
        refused("126.0.0.0/7", -EINVAL, "overlaps loopback (127.0.0.0/8");
        refused("168.0.0.0/6", -EINVAL, "overlaps link-local (169.254.0.0/16");
        refused("128.0.0.0/1", -EINVAL, "link-local");
        refused("168.63.0.0/16", -EINVAL, "Azure host address 168.63.129.16");
        refused("100.100.100.200", -EINVAL, "Alibaba Cloud metadata");
        refused("10.213.7.0/24", -EINVAL, "overlaps the sandbox pool (10.213.0.0/16");
        refused("10.0.0.0/8", -EINVAL, "sandbox pool");
        refused("10.2.0.0/16", -EINVAL,
                "the private range 10.0.0.0/8, which sandboxes reach only where the operator "
                "allows it in DEMESNE_EGRESS_ALLOW_PRIVATE");
        refused("172.20.0.0/16:443", -EINVAL, "172.16.0.0/12");
        refused("192.168.1.10", -EINVAL, "192.168.0.0/16");
        refused("100.64.0.0/10", -EINVAL, "100.64.0.0/10");
        refused("10.0.0.0/15", -EINVAL, "DEMESNE_EGRESS_ALLOW_PRIVATE");
        refused("example.com/24", -EINVAL, "a '/' prefix needs an IPv4 address");
        refused("*", -EINVAL, "would allow every host: use egress 'open'");
        refused("*:443", -EINVAL, "would allow every host");
        refused("*.com", -EINVAL, "would allow a whole top-level domain");
        refused("a.*.example.com", -EINVAL, "'*' is only allowed as the whole first label");
        refused("*example.com", -EINVAL, "'*' is only allowed as the whole first label");
        refused("exa_mple.com", -EINVAL, "'_' is not allowed in a host name");
        refused("exa mple.com", -EINVAL, "' ' is not allowed in a host name");
        refused("a..example.com", -EINVAL, "host name has an empty label");
        refused(".example.com", -EINVAL, "host name has an empty label");
        refused("-a.example.com", -EINVAL, "a label starts with '-'");
        refused("a-.example.com", -EINVAL, "a label ends with '-'");
        /* The egress proxy refuses these names (an address in some
         * spelling): found by tests/fuzz/fuzz-policy.c. */
        refused("0x7f.1", -EINVAL, "the last label is a number");
        refused("foo.123:443", -EINVAL, "the last label is a number");
        refused("*.example.08", -EINVAL, "the last label is a number");
        refused(".", -EINVAL, "has no host name");
        refused("*.", -EINVAL, "has no host name");
        memset(longname, 'a', 70);
        strcpy(longname + 70, ".example.com");
        refused(longname, -EINVAL, "a label is longer than 63 bytes");
        for (int i = 0; i < 50; i++)
                memcpy(longname + i * 5, "abcd.", 5);
        strcpy(longname + 250, "abcde");
        refused(longname, -EINVAL, "host name is longer than 253 bytes");
        memset(longname, 'a', 280);
        longname[280] = '\0';
        refused(longname, -E2BIG, "is longer than 260 bytes");

        /* One bad entry among good ones fails the whole policy, naming it. */
        const char *mixed[] = { "example.com", "10.1.0.0/16", "bad_host", NULL };
        is_int(dm_policy_parse("package-managers", mixed, DM_POLICY_CALLER_ALLOWED, &pol, &err), -EINVAL,
               "a bad entry among good ones fails the policy");
        ok(strstr(err.msg, "'bad_host'") != NULL, "and the message names it: %s", err.msg);
        dm_policy_free(pol);
        pol = NULL;
}

/* The mode a caller's egress and allow give, as the tools layer reads it
 * off the one policy it parses per call. */
static enum dm_egress mode_of(const char *mode, const char *const *allow, unsigned flags, int *ret_r)
{
        struct dm_policy *p = NULL;
        enum dm_egress e = (enum dm_egress) - 1;

        *ret_r = dm_policy_parse(mode, allow, flags, &p, &err);
        if (p)
                e = p->mode;
        dm_policy_free(p);
        return e;
}

static void test_caller_modes(void)
{
        const char *allow[] = { "example.com", NULL };
        const char *bad[] = { "::1", NULL };
        int r;

        is_int(mode_of("none", NULL, 0, &r), DM_EGRESS_NONE, "none");
        is_int(r, 0, "none parses without the setting");
        mode_of("open", NULL, 0, &r);
        is_int(r, -EPERM, "open needs the setting");
        mode_of("nope", NULL, 0, &r);
        is_int(r, -EINVAL, "unknown mode");
        mode_of("none", allow, 0, &r);
        is_int(r, -EPERM, "allow needs the setting");
        is_int(mode_of("open", NULL, DM_POLICY_CALLER_ALLOWED, &r), DM_EGRESS_OPEN, "open with the setting");
        is_int(mode_of("none", allow, DM_POLICY_CALLER_ALLOWED, &r), DM_EGRESS_NONE,
               "with the setting, allow is accepted, as an allowlist on top of none");
        is_int(mode_of("package-managers", NULL, DM_POLICY_CALLER_ALLOWED, &r), DM_EGRESS_PACKAGE_MANAGERS,
               "package-managers");
        mode_of("none", bad, DM_POLICY_CALLER_ALLOWED, &r);
        is_int(r, -EINVAL, "a bad entry is reported first");
}

/* A copy is whole and the copy's own: it outlives the policy it came from
 * (a sandbox's record keeps one past the call that parsed it). */
static void test_dup(void)
{
        const char *allow[] = { "*.example.com:443", "pypi.org", "93.184.216.0/24:80", "1.1.1.1", NULL };
        struct dm_policy *p = NULL, *d = NULL, *e = NULL;
        char host0[64];

        is_int(dm_policy_parse("package-managers", allow, DM_POLICY_CALLER_ALLOWED, &p, &err), 0, "parsed");
        is_int(dm_policy_dup(p, &d), 0, "dm_policy_dup");
        ok(d != p && d->names != p->names && d->cidrs != p->cidrs, "the copy shares no array");
        snprintf(host0, sizeof(host0), "%s", p->names[0].host);
        ok(d->names[0].host != p->names[0].host, "nor a name");
        dm_policy_free(p);
        is_int(d->mode, DM_EGRESS_PACKAGE_MANAGERS, "mode kept after the original is freed");
        is_int((int)d->n_names, 2, "both names");
        is_str(d->names[0].host, host0, "the first name");
        ok(d->names[0].wildcard && d->names[0].port == 443, "its wildcard and port");
        is_int((int)d->n_cidrs, 2, "both address rules");
        ok(d->cidrs[0].prefix == 24 && d->cidrs[0].port == 80 && d->cidrs[1].prefix == 32 && d->cidrs[1].port == 0,
           "their prefixes and ports");
        ok(dm_policy_needs_network(d), "and it still needs a network");
        dm_policy_free(d);

        is_int(dm_policy_parse("none", NULL, 0, &p, &err), 0, "an empty policy");
        is_int(dm_policy_dup(p, &e), 0, "copied");
        ok(e->mode == DM_EGRESS_NONE && !e->n_names && !e->n_cidrs && !dm_policy_needs_network(e),
           "the copy is as empty");
        dm_policy_free(p);
        dm_policy_free(e);
}

int main(void)
{
        /* As DEMESNE_EGRESS_ALLOW_PRIVATE=10.1.0.0/16 would. */
        struct dm_blocked_settings bs, bad;

        is_int(dm_blocked_settings_parse(NULL, "10.1.0.0/16", &bs, &err), 0, "operator's private range parsed");
        dm_blocked_init(&bs);
        is_int(dm_blocked_settings_parse(NULL, "10.1.0.0/16,8.8.8.0/24", &bad, &err), -EINVAL,
               "a public range is refused");
        ok(strstr(err.msg, "DEMESNE_EGRESS_ALLOW_PRIVATE") && strstr(err.msg, "'8.8.8.0/24' is not inside a private"),
           "message names the variable and the entry: %s", err.msg);
        is_int(dm_blocked_settings_parse(NULL, "10.1.0.0/16,bogus", &bad, &err), -EINVAL,
               "a malformed range is refused");
        ok(strstr(err.msg, "DEMESNE_EGRESS_ALLOW_PRIVATE") != NULL, "naming the variable: %s", err.msg);
        test_modes();
        test_caller_gate();
        test_good_entries();
        test_bad_entries();
        test_caller_modes();
        test_dup();
        dm_policy_free(pol);
        dm_policy_free(NULL);
        ok(1, "dm_policy_free(NULL) is harmless");
        return done_testing();
}
