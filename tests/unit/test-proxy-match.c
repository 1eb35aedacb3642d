/* SPDX-License-Identifier: MIT */
/* The egress proxy's decisions without sockets: allowlist matching, the
 * rebinding rule, hosts(5) lookups, request parsing and head rewriting, and
 * the environment a sandbox gets. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netpolicy/blocked.h"
#include "netpolicy/proxy-internal.h"
#include "src/basic/cleanup.h"
#include "tests/tap.h"

static struct dm_proxy_policy pol;

static struct in_addr ip(const char *s)
{
        struct in_addr a = { 0 };
        inet_pton(AF_INET, s, &a);
        return a;
}

/* The code check_target gives host:port (DM_PROXY_OK for allowed names and
 * literals alike). */
static enum dm_proxy_code target_m(const char *host, uint16_t port, bool is_connect, struct dm_proxy_verdict *v)
{
        char name[256];
        struct in_addr lit;

        memset(v, 0, sizeof(*v));
        dm_proxy_check_target(&pol, host, port, is_connect, name, &lit, v);
        return v->code;
}

static enum dm_proxy_code target(const char *host, uint16_t port, struct dm_proxy_verdict *v)
{
        return target_m(host, port, true, v);
}

static void test_policy(void)
{
        struct dm_error err = { 0 };
        struct dm_proxy_verdict v;
        const char *good[] = { "pypi.org",    "*.debian.org", "GitHub.com:443",       "registry.npmjs.org.",
                               "10.1.0.0/16", "192.0.2.7",    "198.51.100.0/24:8080", "127.0.0.1/32" };
        const char *bad[] = { "",           "*.",           "a..b",   "host:0", "host:70000", "host:x", "10.0.0.1/33",
                              "10.0.0.1/8", "ex ample.com", "foo/24", "1.2.3",  "-" };

        dm_proxy_policy_init(&pol);
        for (size_t i = 0; i < DM_ARRAY_SIZE(good); i++)
                is_int(dm_proxy_policy_add_entry(&pol, good[i], &err), 0, "entry '%s' accepted", good[i]);
        for (size_t i = 0; i < DM_ARRAY_SIZE(bad); i++) {
                struct dm_proxy_policy tmp;
                dm_proxy_policy_init(&tmp);
                dm_error_clear(&err);
                is_int(dm_proxy_policy_add_entry(&tmp, bad[i], &err), -EINVAL, "entry '%s' refused", bad[i]);
                ok(err.msg[0] != '\0', "with a message: %s", err.msg);
                dm_proxy_policy_release(&tmp);
        }
        is_int(pol.n_hosts, 4, "four name rules");
        is_int(pol.n_cidrs, 4, "four CIDR rules");
        is_str(pol.hosts[2].pattern, "github.com", "names are lowercased");
        is_int(pol.hosts[2].port, 443, "host:port keeps its port");
        is_str(pol.hosts[3].pattern, "registry.npmjs.org", "trailing dot dropped");

        is_int(target("pypi.org", 443, &v), DM_PROXY_OK, "exact name, any port");
        ok(strstr(v.reason, "'pypi.org'") != NULL, "reason names the rule: %s", v.reason);
        is_int(target("PyPI.ORG.", 80, &v), DM_PROXY_OK, "case and trailing dot do not matter");
        is_int(target("files.pypi.org", 443, &v), DM_PROXY_HOST_NOT_ALLOWED, "exact rule does not cover subdomains");
        is_int(target("deb.debian.org", 80, &v), DM_PROXY_OK, "wildcard covers a subdomain");
        is_int(target("a.b.DEBIAN.org", 80, &v), DM_PROXY_OK, "wildcard covers deeper names");
        is_int(target("debian.org", 80, &v), DM_PROXY_HOST_NOT_ALLOWED, "wildcard does not cover its apex");
        is_int(target("evildebian.org", 80, &v), DM_PROXY_HOST_NOT_ALLOWED, "wildcard needs a dot boundary");
        is_int(target("github.com", 443, &v), DM_PROXY_OK, "name with its port");
        is_int(target("github.com", 22, &v), DM_PROXY_PORT_NOT_ALLOWED, "name with another port");
        ok(strstr(v.reason, "port 22") != NULL, "reason says the port: %s", v.reason);
        is_int(target("example.com", 443, &v), DM_PROXY_HOST_NOT_ALLOWED, "name not in the list");
        ok(strstr(v.reason, "'example.com' is not in") != NULL, "reason names the host: %s", v.reason);
        is_int(target("10.1.200.3", 443, &v), DM_PROXY_OK, "IP literal inside an allowed CIDR");
        is_int(target("203.0.113.5", 443, &v), DM_PROXY_IP_LITERAL, "IP literal outside every CIDR");
        ok(strstr(v.reason, "not covered by an allowed CIDR") != NULL, "reason: %s", v.reason);
        is_int(target("192.0.2.7", 1, &v), DM_PROXY_OK, "bare address is a /32, any port");
        is_int(target("198.51.100.9", 8080, &v), DM_PROXY_OK, "CIDR:port on its port");
        is_int(target("198.51.100.9", 80, &v), DM_PROXY_PORT_NOT_ALLOWED, "CIDR:port on another port");
        is_int(target("127.1", 80, &v), DM_PROXY_HOST_NOT_ALLOWED, "short-form address is not a name");
        is_int(target("0x7f.0.0.1", 80, &v), DM_PROXY_HOST_NOT_ALLOWED, "hex-form address is not a name");
        is_int(target("2130706433", 80, &v), DM_PROXY_HOST_NOT_ALLOWED, "integer-form address is not a name");
        is_int(target("::1", 443, &v), DM_PROXY_IPV6, "IPv6 literal refused");
        is_int(target("bad_host!", 443, &v), DM_PROXY_HOST_NOT_ALLOWED, "garbage host refused");

        /* Blocked addresses: no CIDR rule opens them (127.0.0.1/32 is in the
         * list above, as 0.0.0.0/0 once let through). */
        is_int(target("127.0.0.1", 80, &v), DM_PROXY_FORBIDDEN_ADDRESS, "loopback literal refused despite its CIDR");
        ok(strstr(v.reason, "loopback") != NULL, "reason names loopback: %s", v.reason);
        is_int(target("169.254.169.254", 80, &v), DM_PROXY_FORBIDDEN_ADDRESS, "metadata address refused");
        is_int(target("100.100.100.200", 80, &v), DM_PROXY_FORBIDDEN_ADDRESS, "Alibaba metadata refused");
        is_int(target("168.63.129.16", 80, &v), DM_PROXY_FORBIDDEN_ADDRESS, "Azure wireserver refused");
        is_int(target("10.213.0.1", 3128, &v), DM_PROXY_FORBIDDEN_ADDRESS, "the sandbox pool refused");
        ok(strstr(v.reason, "sandbox pool") != NULL, "reason names the pool: %s", v.reason);
        is_int(target("10.2.0.1", 443, &v), DM_PROXY_FORBIDDEN_ADDRESS, "a private address the operator did not allow");
        is_int(target("0.0.0.0", 80, &v), DM_PROXY_FORBIDDEN_ADDRESS, "0.0.0.0 refused");
        is_int(target("255.255.255.255", 80, &v), DM_PROXY_FORBIDDEN_ADDRESS, "broadcast refused");
        is_int(target("::ffff:127.0.0.1", 80, &v), DM_PROXY_IPV6, "v4-mapped loopback refused");
        is_int(target("[::ffff:127.0.0.1]", 80, &v), DM_PROXY_IPV6, "bracketed v4-mapped loopback refused");
        is_int(target("fe80::1", 80, &v), DM_PROXY_IPV6, "IPv6 link-local refused");
        is_int(target("fd00:ec2::254", 80, &v), DM_PROXY_IPV6, "AWS IPv6 metadata refused");
        is_int(target("fc00::1", 80, &v), DM_PROXY_IPV6, "IPv6 unique-local refused");

        /* A package host: CONNECT to 443, plain HTTP to 80, nothing else. */
        {
                struct dm_error e2 = { 0 };
                is_int(dm_proxy_policy_add_web_host(&pol, "pkgs.example.net", &e2), 0, "web host added");
        }
        is_int(target_m("pkgs.example.net", 443, true, &v), DM_PROXY_OK, "package host: CONNECT 443");
        is_int(target_m("pkgs.example.net", 80, false, &v), DM_PROXY_OK, "package host: plain HTTP 80");
        is_int(target_m("pkgs.example.net", 22, true, &v), DM_PROXY_PORT_NOT_ALLOWED,
               "package host: CONNECT 22 refused");
        ok(strstr(v.reason, "port 22") && strstr(v.reason, "443"), "reason says which ports: %s", v.reason);
        is_int(target_m("pkgs.example.net", 80, true, &v), DM_PROXY_PORT_NOT_ALLOWED,
               "package host: CONNECT 80 refused");
        is_int(target_m("pkgs.example.net", 443, false, &v), DM_PROXY_PORT_NOT_ALLOWED,
               "package host: plain HTTP to 443 refused");
        {
                char name[256];
                struct in_addr lit = { 0 };
                is_int(dm_proxy_check_target(&pol, "10.1.2.3", 5, true, name, &lit, &v), 1, "literal: returns 1");
                ok(lit.s_addr == ip("10.1.2.3").s_addr, "and the address");
                is_int(dm_proxy_check_target(&pol, "Deb.Debian.Org", 5, true, name, &lit, &v), 0, "name: returns 0");
                is_str(name, "deb.debian.org", "and the normalised name");
        }
}

static void test_rebinding(void)
{
        struct dm_proxy_verdict v;
        struct in_addr own[] = { ip("203.0.113.77") };
        struct {
                const char *addr;
                int want;
                const char *what;
        } cases[] = {
                { "93.184.216.34", 0, "public address" },
                { "10.1.9.9", 0, "private address the operator allowed" },
                { "10.9.9.9", -1, "private address the operator did not allow" },
                { "172.16.0.1", -1, "172.16/12" },
                { "192.168.1.1", -1, "192.168/16" },
                { "100.64.0.1", -1, "100.64/10" },
                { "10.213.0.1", -1, "the sandbox pool (host side of a pair)" },
                { "10.213.0.2", -1, "the sandbox pool (another sandbox)" },
                { "127.0.0.1", -1, "loopback" },
                { "127.53.0.1", -1, "loopback /8" },
                { "169.254.169.254", -1, "link-local (metadata)" },
                { "100.100.100.200", -1, "Alibaba metadata" },
                { "168.63.129.16", -1, "Azure wireserver" },
                { "0.0.0.0", -1, "unspecified" },
                { "224.0.0.1", -1, "multicast" },
                { "255.255.255.255", -1, "broadcast" },
                { "203.0.113.77", -1, "the host's own address" },
        };

        for (size_t i = 0; i < DM_ARRAY_SIZE(cases); i++) {
                memset(&v, 0, sizeof(v));
                is_int(dm_proxy_check_address("x.test", ip(cases[i].addr), own, 1, &v), cases[i].want,
                       "resolved to %s: %s", cases[i].addr, cases[i].what);
                if (cases[i].want)
                        is_int(v.code, DM_PROXY_FORBIDDEN_ADDRESS, "  code is forbidden-address: %s", v.reason);
        }
        is_int(dm_proxy_check_address("x.test", ip("127.0.0.2"), own, 1, &v), -1, "loopback, whatever the rules");
        ok(strstr(v.reason, "127.0.0.2 (loopback") != NULL, "reason: %s", v.reason);
}

static void test_hosts_file(void)
{
        char path[] = "/tmp/dm-test-hosts-XXXXXX";
        struct in_addr a[4];
        size_t n = 0;
        int fd = mkstemp(path);
        const char text[] = "# pinned names\n"
                            "127.0.0.1\tlocalhost\n"
                            "::1 ip6-only.test\n"
                            "garbage line here\n"
                            "10.0.0.5  Mirror.Test.  alias.test # comment\n"
                            "10.0.0.6 mirror.test\n"
                            "   \n"
                            "10.0.0.7 #commented.test\n";

        if (fd < 0 || write(fd, text, sizeof(text) - 1) != (ssize_t)(sizeof(text) - 1)) {
                ok(0, "write hosts file");
                return;
        }
        close(fd);
        is_int(dm_proxy_hosts_lookup(path, "mirror.test", a, 4, &n), 1, "name found");
        is_int(n, 2, "every line that names it, in order");
        ok(n == 2 && a[0].s_addr == ip("10.0.0.5").s_addr && a[1].s_addr == ip("10.0.0.6").s_addr, "addresses");
        is_int(dm_proxy_hosts_lookup(path, "alias.test", a, 4, &n), 1, "alias found");
        is_int(dm_proxy_hosts_lookup(path, "ip6-only.test", a, 4, &n), 0, "IPv6 lines are skipped");
        is_int(dm_proxy_hosts_lookup(path, "commented.test", a, 4, &n), 0, "comments are skipped");
        is_int(dm_proxy_hosts_lookup(path, "absent.test", a, 4, &n), 0, "absent name: 0");
        is_int(dm_proxy_hosts_lookup(path, "mirror.test", a, 1, &n), 1, "max respected");
        is_int(n, 1, "one address");
        unlink(path);
        is_int(dm_proxy_hosts_lookup(path, "mirror.test", a, 4, &n), -ENOENT, "missing file is an error");
}

static int parse(const char *head, struct dm_proxy_request *r, struct dm_proxy_verdict *v)
{
        memset(v, 0, sizeof(*v));
        dm_proxy_request_release(r);
        return dm_proxy_request_parse(head, strlen(head), r, v);
}

static void test_requests(void)
{
        struct dm_proxy_request r = { 0 };
        struct dm_proxy_verdict v;
        struct dm_buf b;
        const char *bad[] = {
                "\r\n\r\n",
                "GET\r\n\r\n",
                "GET http://a.test/\r\n\r\n",
                "GET http://a.test/ HTTP/2.0\r\n\r\n",
                "G(T http://a.test/ HTTP/1.1\r\n\r\n",
                "GET /relative HTTP/1.1\r\nHost: a.test\r\n\r\n",
                "GET https://a.test/ HTTP/1.1\r\n\r\n",
                "GET ftp://a.test/ HTTP/1.1\r\n\r\n",
                "GET http://user@a.test/ HTTP/1.1\r\n\r\n",
                "GET http://a.test:99999/ HTTP/1.1\r\n\r\n",
                "GET http://a.test:/ HTTP/1.1\r\n\r\n",
                "GET http:/// HTTP/1.1\r\n\r\n",
                "CONNECT a.test HTTP/1.1\r\n\r\n",
                "CONNECT :443 HTTP/1.1\r\n\r\n",
                "GET http://a.test/ HTTP/1.1\r\nNoColon\r\n\r\n",
                "GET http://a.test/ HTTP/1.1\r\nA: b\r\n folded\r\n\r\n",
                "GET http://a.test/ HTTP/1.1\r\nBad Name: b\r\n\r\n",
                "GET http://a.test/ HTTP/1.1\r\nA: b\x01\r\n\r\n",
        };

        ok(dm_proxy_head_end("GET / HTTP/1.1\r\nA: b\r\n", 23) == 0, "incomplete head: 0");
        is_int(dm_proxy_head_end("GET / HTTP/1.1\r\n\r\nbody", 22), 18, "CRLF head end");
        is_int(dm_proxy_head_end("GET / HTTP/1.1\n\nbody", 20), 16, "bare LF head end");

        is_int(parse("CONNECT Pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n", &r, &v), 0, "CONNECT parses");
        ok(r.is_connect && r.port == 443, "CONNECT, port 443");
        is_str(r.host, "Pypi.org", "host as sent");
        is_int(parse("GET http://a.test:8080/p/q?x=1 HTTP/1.0\r\nUser-Agent: t\r\n\r\n", &r, &v), 0,
               "absolute GET parses");
        ok(!r.is_connect && r.port == 8080, "port from URI");
        is_str(r.path, "/p/q?x=1", "origin-form path");
        is_str(r.version, "HTTP/1.0", "version kept");
        is_int(parse("HEAD HTTP://a.test HTTP/1.1\r\n\r\n", &r, &v), 0, "scheme case-insensitive, no path");
        is_str(r.path, "/", "empty path becomes /");
        is_int(r.port, 80, "default port 80");
        is_int(parse("GET http://a.test?q HTTP/1.1\r\n\r\n", &r, &v), 0, "query without path");
        is_str(r.path, "/?q", "query gets a /");
        is_int(parse("CONNECT [::1]:443 HTTP/1.1\r\n\r\n", &r, &v), -1, "IPv6 CONNECT refused");
        is_int(v.code, DM_PROXY_IPV6, "as IPv6");
        is_int(parse("GET http://[::1]/ HTTP/1.1\r\n\r\n", &r, &v), -1, "IPv6 URI refused");
        is_int(v.code, DM_PROXY_IPV6, "as IPv6");
        for (size_t i = 0; i < DM_ARRAY_SIZE(bad); i++) {
                is_int(parse(bad[i], &r, &v), -1, "malformed request %zu refused", i);
                is_int(v.code, DM_PROXY_BAD_REQUEST, "  as bad request: %s", v.reason);
        }
        {
                char many[8192] = "GET http://a.test/ HTTP/1.1\r\n";
                for (int i = 0; i <= DM_PROXY_MAX_HEADERS; i++)
                        strcat(many, "X: y\r\n");
                strcat(many, "\r\n");
                is_int(parse(many, &r, &v), -1, "too many header fields refused");
                is_int(v.code, DM_PROXY_BAD_REQUEST, "as bad request: %s", v.reason);
        }
        dm_proxy_request_release(&r);
        is_int(dm_proxy_request_parse("GET http://a/ HTTP/1.1\0\r\n\r\n", 27, &r, &v), -1, "NUL byte refused");

        is_int(parse("POST http://a.test:81/up HTTP/1.1\r\nHost: evil.test\r\nConnection: keep-alive, X-Secret\r\n"
                     "X-Secret: s\r\nProxy-Authorization: Basic x\r\nProxy-Connection: keep-alive\r\n"
                     "Keep-Alive: 5\r\nTE: trailers\r\nUpgrade: h2c\r\nContent-Length: 3\r\nAccept: */*\r\n\r\n",
                     &r, &v),
               0, "request with hop-by-hop headers parses");
        dm_buf_init(&b, 4096);
        is_int(dm_proxy_request_build(&r, &b), 0, "forward head built");
        is_str(b.data,
               "POST /up HTTP/1.1\r\nHost: a.test:81\r\nContent-Length: 3\r\nAccept: */*\r\nConnection: close\r\n\r\n",
               "origin-form, Host from the URI, hop-by-hop and Proxy-* dropped");
        dm_buf_release(&b);

        dm_buf_init(&b, 4096);
        {
                const char resp[] = "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
                                    "Content-Length: 2\r\n\r\n";
                is_int(dm_proxy_response_build(resp, sizeof(resp) - 1, &b), 0, "response head rewritten");
                is_str(b.data, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
                       "keep-alive dropped, close added");
                dm_buf_reset(&b);
                is_int(dm_proxy_response_build("SSH-2.0\r\n\r\n", 11, &b), -EINVAL, "not HTTP: refused");
        }
        dm_buf_release(&b);
        dm_proxy_request_release(&r);
}

static void test_codes(void)
{
        struct dm_proxy_verdict v;

        is_int(dm_proxy_code_status(DM_PROXY_BAD_REQUEST), 400, "bad request is 400");
        is_int(dm_proxy_code_status(DM_PROXY_HEADER_TOO_LARGE), 431, "header too large is 431");
        is_int(dm_proxy_code_status(DM_PROXY_UNKNOWN_SOURCE), 403, "unknown source is 403");
        is_int(dm_proxy_code_status(DM_PROXY_HOST_NOT_ALLOWED), 403, "host not allowed is 403");
        is_int(dm_proxy_code_status(DM_PROXY_PORT_NOT_ALLOWED), 403, "port not allowed is 403");
        is_int(dm_proxy_code_status(DM_PROXY_IP_LITERAL), 403, "IP literal is 403");
        is_int(dm_proxy_code_status(DM_PROXY_IPV6), 403, "IPv6 is 403");
        is_int(dm_proxy_code_status(DM_PROXY_FORBIDDEN_ADDRESS), 403, "forbidden address is 403");
        is_int(dm_proxy_code_status(DM_PROXY_TOO_MANY), 503, "too many connections is 503");
        is_int(dm_proxy_code_status(DM_PROXY_RESOLVE_FAILED), 502, "resolve failure is 502");
        is_int(dm_proxy_code_status(DM_PROXY_CONNECT_FAILED), 502, "connect failure is 502");
        is_int(dm_proxy_code_status(DM_PROXY_CONNECT_TIMEOUT), 504, "connect timeout is 504");
        is_str(dm_proxy_status_text(431), "Request Header Fields Too Large", "status text");
        dm_proxy_verdict_set(&v, DM_PROXY_HOST_NOT_ALLOWED, "a\r\nb\x80");
        is_str(v.reason, "a??b?", "reason is one printable line");
}

static void test_env(void)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(3128), .sin_addr = ip("10.200.0.1") };
        const char *want[] = { "HTTP_PROXY=http://10.200.0.1:3128",
                               "http_proxy=http://10.200.0.1:3128",
                               "HTTPS_PROXY=http://10.200.0.1:3128",
                               "https_proxy=http://10.200.0.1:3128",
                               "ALL_PROXY=http://10.200.0.1:3128",
                               "all_proxy=http://10.200.0.1:3128",
                               "NO_PROXY=localhost,127.0.0.1",
                               "no_proxy=localhost,127.0.0.1",
                               "PIP_PROXY=http://10.200.0.1:3128",
                               "npm_config_proxy=http://10.200.0.1:3128",
                               "npm_config_https_proxy=http://10.200.0.1:3128",
                               "GIT_CONFIG_COUNT=1",
                               "GIT_CONFIG_KEY_0=http.proxy",
                               "GIT_CONFIG_VALUE_0=http://10.200.0.1:3128" };
        char **env = NULL, *apt;
        size_t n = 0;

        is_int(dm_proxy_env(&a, &env), 0, "environment built");
        while (env && env[n])
                n++;
        is_int(n, DM_ARRAY_SIZE(want), "%zu variables", DM_ARRAY_SIZE(want));
        for (size_t i = 0; i < DM_ARRAY_SIZE(want); i++) {
                bool found = false;
                for (size_t k = 0; k < n; k++)
                        found = found || strcmp(env[k], want[i]) == 0;
                ok(found, "%s", want[i]);
        }
        dm_proxy_env_free(env);
        apt = dm_proxy_apt_conf(&a);
        is_str(apt,
               "Acquire::http::Proxy \"http://10.200.0.1:3128\";\nAcquire::https::Proxy \"http://10.200.0.1:3128\";\n",
               "apt.conf lines");
        free(apt);
}

int main(void)
{
        struct dm_error err = { 0 };
        struct dm_blocked_settings bs;

        /* As DEMESNE_EGRESS_ALLOW_PRIVATE=10.1.0.0/16 would. */
        is_int(dm_blocked_settings_parse(NULL, "10.1.0.0/16", &bs, &err), 0, "operator's private range parsed");
        dm_blocked_init(&bs);
        test_policy();
        test_rebinding();
        test_hosts_file();
        test_requests();
        test_codes();
        test_env();
        dm_proxy_policy_release(&pol);
        return done_testing();
}
