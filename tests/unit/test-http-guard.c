/* SPDX-License-Identifier: MIT */
/* The pure checks of the HTTP transport fed hostile and odd input: where to
 * listen, Host/Origin (DNS rebinding), bearer tokens, Accept and
 * Content-Type, and 2026-07-28 header values. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/mcp/http-guard.h"
#include "src/mcp/http-token.h"
#include "tests/tap.h"

static const char *const loopback[] = { "localhost", "127.0.0.1", "[::1]", NULL };

static int listen_ok(const char *spec, int family, unsigned port)
{
        struct sockaddr_storage a;
        socklen_t len;
        struct dm_error err = { 0 };

        if (dm_mcphttp_parse_listen(spec, &a, &len, &err) < 0)
                return 0;
        if (a.ss_family != family)
                return 0;
        return ntohs(family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                       : ((struct sockaddr_in6 *)&a)->sin6_port) == port;
}

static void listen_specs(void)
{
        struct sockaddr_storage a;
        socklen_t len;
        struct dm_error err = { 0 };
        char host[64];

        ok(listen_ok("8080", AF_INET, 8080), "PORT alone");
        dm_mcphttp_parse_listen("8080", &a, &len, &err);
        dm_mcphttp_addr_host((struct sockaddr *)&a, host, sizeof(host));
        is_str(host, "127.0.0.1", "... means 127.0.0.1");
        ok(dm_mcphttp_addr_is_loopback((struct sockaddr *)&a), "which is loopback");
        ok(listen_ok("127.0.0.2:0", AF_INET, 0), "ADDR:0");
        ok(listen_ok("localhost:9", AF_INET, 9), "localhost:PORT");
        ok(listen_ok("[::1]:8080", AF_INET6, 8080), "[::1]:PORT");
        dm_mcphttp_parse_listen("[::1]:8080", &a, &len, &err);
        ok(dm_mcphttp_addr_is_loopback((struct sockaddr *)&a), "::1 is loopback");
        dm_mcphttp_addr_host((struct sockaddr *)&a, host, sizeof(host));
        is_str(host, "[::1]", "and is named [::1] in a Host header");
        dm_mcphttp_parse_listen("0.0.0.0:80", &a, &len, &err);
        ok(!dm_mcphttp_addr_is_loopback((struct sockaddr *)&a) && dm_mcphttp_addr_is_wildcard((struct sockaddr *)&a),
           "0.0.0.0 is a wildcard, not loopback");
        dm_mcphttp_parse_listen("192.168.1.5:80", &a, &len, &err);
        ok(!dm_mcphttp_addr_is_loopback((struct sockaddr *)&a) && !dm_mcphttp_addr_is_wildcard((struct sockaddr *)&a),
           "a LAN address is neither");
        ok(!listen_ok("example.com:80", AF_INET, 80), "names are not looked up");
        ok(dm_mcphttp_parse_listen("::1:80", &a, &len, &err) < 0 && strstr(err.msg, "[ADDR]"),
           "bare IPv6 is refused, saying how to write it");
        ok(dm_mcphttp_parse_listen("127.0.0.1:99999", &a, &len, &err) < 0, "a port over 65535 is refused");
        ok(dm_mcphttp_parse_listen("127.0.0.1:-1", &a, &len, &err) < 0, "a negative port is refused");
        ok(dm_mcphttp_parse_listen("", &a, &len, &err) < 0, "nothing is refused");
        ok(dm_mcphttp_parse_listen("[::1]", &a, &len, &err) < 0, "[ADDR] without a port is refused");
}

static void hosts_and_origins(void)
{
        const char *const extra[] = { "localhost", "127.0.0.1", "[::1]", "mcp.example", NULL };
        const char *const any[] = { "localhost", "*", NULL };
        const char *const origins[] = { "https://app.example", NULL };

        ok(dm_mcphttp_host_allowed("localhost:8080", loopback), "localhost:PORT");
        ok(dm_mcphttp_host_allowed("LOCALHOST", loopback), "case does not matter");
        ok(dm_mcphttp_host_allowed("127.0.0.1:1", loopback), "127.0.0.1:PORT");
        ok(dm_mcphttp_host_allowed("[::1]:8080", loopback), "[::1]:PORT");
        ok(!dm_mcphttp_host_allowed("evil.example", loopback), "a foreign name is refused");
        ok(!dm_mcphttp_host_allowed("evil.example:8080", loopback), "... with a port too");
        ok(!dm_mcphttp_host_allowed("localhost.evil.example", loopback), "a name that starts like ours is refused");
        ok(!dm_mcphttp_host_allowed("127.0.0.1.nip.io", loopback), "so is one that starts with our address");
        ok(!dm_mcphttp_host_allowed(NULL, loopback), "a missing Host is refused");
        ok(!dm_mcphttp_host_allowed("", loopback), "an empty Host is refused");
        ok(!dm_mcphttp_host_allowed("localhost:80x", loopback), "a port with letters is refused");
        ok(!dm_mcphttp_host_allowed("user@localhost", loopback), "userinfo is refused");
        ok(!dm_mcphttp_host_allowed("localhost/x", loopback), "a path is refused");
        ok(!dm_mcphttp_host_allowed("[::1", loopback), "an unclosed bracket is refused");
        ok(dm_mcphttp_host_allowed("mcp.example:443", extra), "an --allowed-host name");
        ok(dm_mcphttp_host_allowed("anything.example", any), "'*' allows any name");

        ok(dm_mcphttp_origin_allowed(NULL, loopback, NULL), "no Origin (not a browser): allowed");
        ok(dm_mcphttp_origin_allowed("http://localhost:5173", loopback, NULL), "a page on localhost, any port");
        ok(dm_mcphttp_origin_allowed("https://127.0.0.1", loopback, NULL), "https too");
        ok(!dm_mcphttp_origin_allowed("http://evil.example", loopback, NULL), "a foreign page is refused");
        ok(!dm_mcphttp_origin_allowed("null", loopback, NULL), "Origin: null (sandboxed, file:) is refused");
        ok(!dm_mcphttp_origin_allowed("file://", loopback, NULL), "file:// is refused");
        ok(!dm_mcphttp_origin_allowed("http://localhost.evil.example", loopback, NULL), "a look-alike is refused");
        ok(!dm_mcphttp_origin_allowed("http://evil.example", any, NULL),
           "'*' hosts do not open the door to every page");
        ok(dm_mcphttp_origin_allowed("https://app.example", loopback, origins), "an --allowed-origin entry");
        ok(!dm_mcphttp_origin_allowed("https://app.example:8443", loopback, origins), "... matched exactly");
}

static void bearer(void)
{
        struct dm_mcphttp_tokens t = { 0 };
        struct dm_error err = { 0 };

        ok(dm_mcphttp_secret_equal("abc", 3, "abc", 3), "equal secrets");
        ok(!dm_mcphttp_secret_equal("abd", 3, "abc", 3), "a different byte");
        ok(!dm_mcphttp_secret_equal("ab", 2, "abc", 3), "a prefix");
        ok(!dm_mcphttp_secret_equal("abcd", 4, "abc", 3), "a longer guess");
        ok(!dm_mcphttp_secret_equal("", 0, "abc", 3), "an empty guess");
        ok(dm_mcphttp_tokens_add(&t, "token", "0123456789abcdefXYZ", "test", 0, &err) == 0, "one token");
        ok(dm_mcphttp_bearer_match("Bearer 0123456789abcdefXYZ", &t) == &t.v[0], "Bearer TOKEN");
        ok(dm_mcphttp_bearer_match("bearer   0123456789abcdefXYZ  ", &t) == &t.v[0],
           "scheme case and spaces do not matter");
        ok(!dm_mcphttp_bearer_match("Basic 0123456789abcdefXYZ", &t), "another scheme is refused");
        ok(!dm_mcphttp_bearer_match("Bearer0123456789abcdefXYZ", &t), "no space after the scheme is refused");
        ok(!dm_mcphttp_bearer_match(NULL, &t), "no header is refused");
        dm_mcphttp_tokens_release(&t);
        ok(!dm_mcphttp_bearer_match("Bearer 0123456789abcdefXYZ", &t), "no tokens: nothing matches");
}

/* Parses text as a token file; NULL on success, else the message. */
static const char *parse(const char *text, struct dm_mcphttp_tokens *t)
{
        static struct dm_error err;
        char buf[4096];

        memset(&err, 0, sizeof(err));
        snprintf(buf, sizeof(buf), "%s", text);
        return dm_mcphttp_tokens_parse(t, buf, "token file 'f'", &err) < 0 ? err.msg : NULL;
}

static void token_files(void)
{
        struct dm_mcphttp_tokens t = { 0 };
        const struct dm_mcphttp_token *m;
        const char *msg;
        char big[4096];

        ok(!parse("  sekrit-0123456789abcdef  \n", &t) && t.n == 1 && strcmp(t.v[0].name, "token") == 0 &&
                   strcmp(t.v[0].secret, "sekrit-0123456789abcdef") == 0,
           "one bare token, trimmed: principal 'token'");
        dm_mcphttp_tokens_release(&t);
        ok(t.n == 0, "released: empty");
        ok(!parse("# who may connect\r\n\r\nalice  alice-0123456789abcdef\r\n\tbob\tbob-0123456789abcdef", &t) &&
                   t.n == 2 && strcmp(t.v[0].name, "alice") == 0 && strcmp(t.v[1].name, "bob") == 0 &&
                   strcmp(t.v[1].secret, "bob-0123456789abcdef") == 0 && t.v[1].line == 4,
           "NAME TOKEN lines, comments, blank lines, CRLF, tabs");
        m = dm_mcphttp_bearer_match("Bearer bob-0123456789abcdef", &t);
        ok(m && strcmp(m->name, "bob") == 0, "the bearer matches bob's token");
        m = dm_mcphttp_bearer_match("bearer alice-0123456789abcdef ", &t);
        ok(m && strcmp(m->name, "alice") == 0, "... and alice's");
        ok(!dm_mcphttp_bearer_match("Bearer bob-0123456789abcdeX", &t), "a wrong byte: no match");
        ok(!dm_mcphttp_bearer_match("Bearer alice", &t), "a prefix: no match");
        ok(!dm_mcphttp_bearer_match("Basic bob-0123456789abcdef", &t), "another scheme: no match");
        ok(!dm_mcphttp_bearer_match(NULL, &t), "no header: no match");
        dm_mcphttp_tokens_release(&t);

        ok(!parse("first-0123456789abcdef\nsecond-0123456789abcdef\nnamed named-0123456789abcdef\n"
                  "fourth-0123456789abcdef\n",
                  &t) &&
                   t.n == 4 && strcmp(t.v[0].name, "token1") == 0 && strcmp(t.v[1].name, "token2") == 0 &&
                   strcmp(t.v[2].name, "named") == 0 && strcmp(t.v[3].name, "token4") == 0,
           "bare tokens among several: token1, token2... by their place");
        dm_mcphttp_tokens_release(&t);
        ok(!parse("only only-0123456789abcdef\n", &t) && t.n == 1 && strcmp(t.v[0].name, "only") == 0,
           "one named token keeps its name");
        dm_mcphttp_tokens_release(&t);

        msg = parse("a a-0123456789abcdef\n\n# c\na b-0123456789abcdef\n", &t);
        ok(msg && strstr(msg, "line 4") && strstr(msg, "'a'") && strstr(msg, "line 1") && t.n == 0,
           "a duplicate name: refused, naming both lines (%s)", msg ? msg : "accepted");
        msg = parse("a same-0123456789abcdef\nb same-0123456789abcdef\n", &t);
        ok(msg && strstr(msg, "line 2") && strstr(msg, "line 1") && !strstr(msg, "same-0123"),
           "a duplicate token: refused, naming the lines, not the token (%s)", msg ? msg : "accepted");
        msg = parse("token2 x-0123456789abcdef\ny-0123456789abcdef\n", &t);
        ok(msg && strstr(msg, "line 2"), "a bare token's name taken already: refused (%s)", msg ? msg : "accepted");
        msg = parse("a a-0123456789abcdef\nb short\n", &t);
        ok(msg && strstr(msg, "line 2") && strstr(msg, "16"), "a short token: refused, naming the line (%s)",
           msg ? msg : "accepted");
        msg = parse("a a-0123456789abcdef extra\n", &t);
        ok(msg && strstr(msg, "line 1") && !strstr(msg, "a-0123"), "three fields: refused (%s)",
           msg ? msg : "accepted");
        msg = parse("not/a/name name-0123456789abcdef\n", &t);
        ok(msg && strstr(msg, "line 1") && !strstr(msg, "not/a"), "a bad name: refused, not quoted (%s)",
           msg ? msg : "accepted");
        msg = parse("a2345678901234567890123456789012345678901 x-0123456789abcdef\n", &t);
        ok(msg && strstr(msg, "line 1"), "a name of 41 characters: refused");
        ok(!parse("a234567890123456789012345678901234567890 x-0123456789abcdef\n", &t) && t.n == 1,
           "a name of 40 characters: accepted");
        dm_mcphttp_tokens_release(&t);
        msg = parse("", &t);
        ok(msg && strstr(msg, "no token"), "an empty file: refused (%s)", msg ? msg : "accepted");
        msg = parse("# nothing\n\n  \n", &t);
        ok(msg && strstr(msg, "no token"), "only comments: refused");

        big[0] = '\0';
        for (int i = 0; i < DM_MCPHTTP_TOKENS_MAX; i++)
                snprintf(big + strlen(big), sizeof(big) - strlen(big), "n%d secret-%08d-abcdef\n", i, i);
        ok(!parse(big, &t) && t.n == DM_MCPHTTP_TOKENS_MAX, "%d tokens: accepted", DM_MCPHTTP_TOKENS_MAX);
        m = dm_mcphttp_bearer_match("Bearer secret-00000063-abcdef", &t);
        ok(m && strcmp(m->name, "n63") == 0, "the last of them matches");
        dm_mcphttp_tokens_release(&t);
        snprintf(big + strlen(big), sizeof(big) - strlen(big), "one-more one-more-0123456789abcdef\n");
        msg = parse(big, &t);
        ok(msg && strstr(msg, "line 65") && strstr(msg, "64"), "one more: refused (%s)", msg ? msg : "accepted");
}

static void token_file_reads(void)
{
        char path[] = "/tmp/dm-token-XXXXXX";
        struct dm_mcphttp_tokens t = { 0 };
        struct dm_error err = { 0 };
        int fd = mkstemp(path);

        ok(write(fd, "  sekrit-0123456789abcdef  \n", 28) == 28, "token file written");
        close(fd);
        chmod(path, 0644);
        ok(dm_mcphttp_read_tokens(path, &t, &err) < 0 && strstr(err.msg, "chmod 600"), "readable by others: refused");
        chmod(path, 0600);
        ok(dm_mcphttp_read_tokens(path, &t, &err) == 0 && t.n == 1 &&
                   strcmp(t.v[0].secret, "sekrit-0123456789abcdef") == 0,
           "the token, trimmed");
        dm_mcphttp_tokens_release(&t);
        fd = open(path, O_WRONLY | O_TRUNC);
        ok(write(fd, "short\n", 6) == 6, "a short token written");
        close(fd);
        ok(dm_mcphttp_read_tokens(path, &t, &err) < 0 && strstr(err.msg, "16") && strstr(err.msg, "line 1"),
           "too short: refused");
        fd = open(path, O_WRONLY | O_TRUNC);
        ok(write(fd, "a a-0123456789abcdef\0\n", 22) == 22, "a NUL byte written");
        close(fd);
        ok(dm_mcphttp_read_tokens(path, &t, &err) < 0 && strstr(err.msg, "NUL"), "a NUL byte: refused");
        fd = open(path, O_WRONLY | O_TRUNC);
        for (int i = 0; i < 64 * 1024 / 32 + 1; i++)
                if (write(fd, "# padding padding padding paddi\n", 32) != 32)
                        break;
        close(fd);
        ok(dm_mcphttp_read_tokens(path, &t, &err) < 0 && strstr(err.msg, "64 KiB"), "over 64 KiB: refused");
        unlink(path);
        ok(dm_mcphttp_read_tokens(path, &t, &err) < 0, "a missing file: an error");
}

/* The token the server makes, and the file it goes to. */
static void made_tokens(void)
{
        char dir[] = "/tmp/dm-tokdir-XXXXXX", a[65], b[65], link[PATH_MAX], victim[PATH_MAX], buf[128] = "";
        char *path = NULL;
        struct dm_error err = { 0 };
        struct stat st, now;
        FILE *f;

        ok(dm_mcphttp_token_generate(a) == 0 && dm_mcphttp_token_generate(b) == 0 && strlen(a) == 64 &&
                   strspn(a, "0123456789abcdef") == 64 && strcmp(a, b) != 0,
           "made tokens: 64 hex digits, different each time");
        ok(dm_mcphttp_token_check(a, "x", &err) == 0, "a made token passes the check");
        ok(dm_mcphttp_token_check("has space 0123456789", "DEMESNE_HTTP_TOKEN", &err) < 0 &&
                   strstr(err.msg, "DEMESNE_HTTP_TOKEN"),
           "a token with a blank: refused, naming its source");
        if (!mkdtemp(dir)) {
                ok(0, "mkdtemp");
                return;
        }
        snprintf(victim, sizeof(victim), "%s/victim", dir);
        snprintf(link, sizeof(link), "%s/http-127.0.0.1-1.token", dir);
        f = fopen(victim, "w");
        fputs("precious\n", f);
        fclose(f);
        ok(symlink(victim, link) == 0, "a symlink planted at the token's name");
        ok(dm_mcphttp_token_write(dir, "http-127.0.0.1-1.token", a, &path, &st, &err) == 0, "the token is written (%s)",
           err.msg);
        ok(lstat(link, &now) == 0 && S_ISREG(now.st_mode) && (now.st_mode & 0777) == 0600,
           "the name is now a regular file, mode 600");
        f = fopen(victim, "r");
        ok(f && fgets(buf, sizeof(buf), f) && strcmp(buf, "precious\n") == 0, "the link's target is untouched");
        if (f)
                fclose(f);
        f = fopen(link, "r");
        buf[0] = '\0';
        ok(f && fgets(buf, sizeof(buf), f) && strncmp(buf, a, 64) == 0, "the file holds the token");
        if (f)
                fclose(f);
        dm_mcphttp_token_remove(path, &st);
        ok(access(link, F_OK) < 0, "removed at the end");
        free(path);
        path = NULL;
        chmod(dir, 0777);
        ok(dm_mcphttp_token_write(dir, "t.token", a, &path, &st, &err) == -EPERM &&
                   strstr(err.msg, "writable by others"),
           "a directory others can write: refused");
        chmod(dir, 0700);
        unlink(victim);
        rmdir(dir);
        free(path);
}

static void negotiation(void)
{
        char *v = NULL;

        ok(dm_mcphttp_accepts("application/json, text/event-stream", "text/event-stream"), "Accept lists it");
        ok(dm_mcphttp_accepts(NULL, "application/json"), "no Accept: anything");
        ok(dm_mcphttp_accepts("*/*", "text/event-stream"), "*/*");
        ok(dm_mcphttp_accepts("text/*;q=0.5", "text/event-stream"), "text/*");
        ok(!dm_mcphttp_accepts("text/html", "application/json"), "another type only: no");
        ok(!dm_mcphttp_accepts("text/event-stream;q=0, application/json", "text/event-stream"), "q=0 means no");
        ok(dm_mcphttp_accepts("TEXT/EVENT-STREAM", "text/event-stream"), "case-insensitive");
        ok(dm_mcphttp_media_is("application/json; charset=utf-8", "application/json"), "Content-Type with parameters");
        ok(!dm_mcphttp_media_is("application/jsonx", "application/json"), "no prefix matches");
        ok(!dm_mcphttp_media_is(NULL, "application/json"), "no Content-Type");

        ok(dm_mcphttp_header_value("  tools/call \t", &v) == 0 && strcmp(v, "tools/call") == 0,
           "whitespace around a value");
        free(v);
        ok(dm_mcphttp_header_value("=?base64?c2FuZGJveF9zY3JpcHQ=?=", &v) == 0 && strcmp(v, "sandbox_script") == 0,
           "=?base64?...?= decoded");
        free(v);
        ok(dm_mcphttp_header_value("=?base64?w6nDqA==?=", &v) == 0 && strcmp(v, "\xc3\xa9\xc3\xa8") == 0,
           "... to UTF-8");
        free(v);
        ok(dm_mcphttp_header_value("=?base64?c2FuZGJveF9zY3JpcHQ?=", &v) < 0, "missing padding: refused");
        ok(dm_mcphttp_header_value("=?base64?c2Fu!GJv?=", &v) < 0, "a stray character: refused");
        ok(dm_mcphttp_header_value("=?base64?AA==?=", &v) < 0, "a NUL inside: refused");
        ok(dm_mcphttp_header_value("plain=?base64?", &v) == 0 && strcmp(v, "plain=?base64?") == 0,
           "no wrapper: literal");
        free(v);
}

int main(void)
{
        char a[33], b[33];

        listen_specs();
        hosts_and_origins();
        bearer();
        token_files();
        token_file_reads();
        made_tokens();
        negotiation();
        ok(dm_mcphttp_random_id(a) == 0 && dm_mcphttp_random_id(b) == 0 && strlen(a) == 32 && strcmp(a, b) != 0,
           "session ids: 32 hex digits, different each time");
        return done_testing();
}
