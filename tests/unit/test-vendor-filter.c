/* SPDX-License-Identifier: MIT */
/* The vendor proxy's request filter (netpolicy/vendor-filter.c) as a pure
 * function: the anthropic-beta list taken apart (blanks, empty entries,
 * versions that are not dates), the headers that go upstream after it (an
 * API key and an OAuth login), the client tool types at their edges, the
 * body that goes on (exactly the parsed document), and that a GET is never
 * read. The proxy around it is in tests/security/test-vendor-filter.c. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "netpolicy/vendor-internal.h"
#include "tests/tap.h"

struct run {
        struct dm_vendor_request req;
        struct dm_vendor_filter f;
        struct dm_buf body;
        int r;
};

/* Filters one request: method, extra head lines, body. */
static void run(struct run *x, enum dm_vendor v, const char *method, const char *extra, const char *body)
{
        char head[2048], why[128];

        snprintf(head, sizeof(head), "%s /v1/messages HTTP/1.1\r\nHost: x\r\n%s\r\n", method, extra ? extra : "");
        memset(x, 0, sizeof(*x));
        dm_buf_init(&x->body, 1 << 20);
        if (dm_vendor_request_parse(head, strlen(head), &x->req, why, sizeof(why)) < 0 ||
            dm_buf_append(&x->body, body, strlen(body)) < 0) {
                diag("setup: %s", why);
                exit(1);
        }
        x->r = dm_vendor_filter_apply(&x->f, v, &x->req, &x->body);
}

static void done(struct run *x)
{
        dm_vendor_filter_release(&x->f);
        dm_vendor_request_release(&x->req);
        dm_buf_release(&x->body);
}

/* The anthropic-beta line curl would send, or "" when none. */
static void upstream_beta(struct run *x, enum dm_vendor_auth auth, char *out, size_t max)
{
        struct dm_vendor_cred cred = { .auth = auth, .secret = "REAL" };
        struct curl_slist *l = NULL;

        out[0] = '\0';
        if (dm_vendor_upstream_headers(&x->req, DM_VENDOR_ANTHROPIC, &cred, &l) < 0)
                return;
        for (struct curl_slist *i = l; i; i = i->next)
                if (strncasecmp(i->data, "anthropic-beta:", 15) == 0)
                        snprintf(out, max, "%s", i->data);
        dm_vendor_slist_free_wipe(l);
}

static void test_betas(void)
{
        struct run x;
        char line[512];

        run(&x, DM_VENDOR_ANTHROPIC, "POST",
            "anthropic-beta:  prompt-caching-2024-07-31 , ,files-api-2025-04-14,claude-code-,"
            "claude-code-20250219x,\toauth-2025-04-20,",
            "{}");
        is_int(x.r, 0, "betas: the request goes on");
        upstream_beta(&x, DM_VENDOR_AUTH_API_KEY, line, sizeof(line));
        is_str(line, "anthropic-beta: prompt-caching-2024-07-31,oauth-2025-04-20",
               "only the dated safe ones, blanks and empty entries gone");
        ok(strstr(x.f.stripped, "beta files-api-2025-04-14") && strstr(x.f.stripped, "beta claude-code-,") &&
                   strstr(x.f.stripped, "beta claude-code-20250219x"),
           "the stripped ones named for the log (%s)", x.f.stripped);
        done(&x);

        run(&x, DM_VENDOR_ANTHROPIC, "POST", "anthropic-beta: mcp-client-2025-04-04", "{}");
        upstream_beta(&x, DM_VENDOR_AUTH_API_KEY, line, sizeof(line));
        is_str(line, "", "all stripped, API key: no anthropic-beta at all");
        upstream_beta(&x, DM_VENDOR_AUTH_OAUTH, line, sizeof(line));
        is_str(line, "anthropic-beta: oauth-2025-04-20", "all stripped, OAuth login: the login's beta alone");
        done(&x);

        run(&x, DM_VENDOR_ANTHROPIC, "POST", "anthropic-beta: context-1m-2025-08-07", "{}");
        ok(x.r == 0 && x.f.beta == NULL && x.f.stripped[0] == '\0', "nothing to strip: the header is left as it was");
        done(&x);

        run(&x, DM_VENDOR_ANTHROPIC, "GET", "anthropic-beta: files-api-2025-04-14", "");
        upstream_beta(&x, DM_VENDOR_AUTH_API_KEY, line, sizeof(line));
        ok(x.r == 0 && line[0] == '\0', "a GET: no body is read, and its betas are filtered too");
        done(&x);
}

static void test_tools(void)
{
        static const struct {
                enum dm_vendor v;
                const char *tool;
                bool pass;
        } cases[] = {
                { DM_VENDOR_ANTHROPIC, "{\"name\":\"a\",\"input_schema\":{}}", true },
                { DM_VENDOR_ANTHROPIC, "{\"type\":\"custom\",\"name\":\"a\"}", true },
                { DM_VENDOR_ANTHROPIC, "{\"type\":\"bash_20250124\"}", true },
                { DM_VENDOR_ANTHROPIC, "{\"type\":\"tool_search_tool_regex_20251119\"}", true },
                { DM_VENDOR_ANTHROPIC, "{\"type\":\"bash_\"}", false },
                { DM_VENDOR_ANTHROPIC, "{\"type\":\"bash_2025x\"}", false },
                { DM_VENDOR_ANTHROPIC, "{\"type\":\"Custom\"}", false },
                { DM_VENDOR_ANTHROPIC, "{\"type\":null,\"name\":\"a\"}", false },
                { DM_VENDOR_ANTHROPIC, "{\"type\":7}", false },
                { DM_VENDOR_ANTHROPIC, "\"web_search\"", false },
                { DM_VENDOR_OPENAI, "{\"type\":\"function\",\"name\":\"f\"}", true },
                { DM_VENDOR_OPENAI, "{\"type\":\"shell\"}", true },
                { DM_VENDOR_OPENAI, "{\"type\":\"shell\",\"environment\":{\"type\":\"local\"}}", true },
                { DM_VENDOR_OPENAI, "{\"type\":\"shell\",\"environment\":{\"type\":\"container_reference\"}}", false },
                { DM_VENDOR_OPENAI, "{\"name\":\"f\"}", false },
                { DM_VENDOR_OPENAI,
                  "{\"type\":\"namespace\",\"tools\":[{\"type\":\"namespace\",\"tools\":[{\"type\":\"namespace\","
                  "\"tools\":[{\"type\":\"namespace\",\"tools\":[{\"type\":\"namespace\",\"tools\":[{\"type\":"
                  "\"namespace\",\"tools\":[{\"type\":\"function\"}]}]}]}]}]}]}",
                  false },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char body[1024];
                struct run x;

                snprintf(body, sizeof(body), "{\"tools\":[%s]}", cases[i].tool);
                run(&x, cases[i].v, "POST", NULL, body);
                ok((x.r == 0) == cases[i].pass, "%s tool %s: %s%s%s", dm_vendor_name(cases[i].v), cases[i].tool,
                   cases[i].pass ? "passes" : "refused", x.r ? ": " : "", x.r ? x.f.why : "");
                done(&x);
        }
}

static void test_body(void)
{
        struct run x;

        run(&x, DM_VENDOR_OPENAI, "POST", NULL,
            " {\"model\" : \"m\", \"temperature\": 0.70, \"tools\":[{\"type\":\"web_search_preview\"},"
            "{\"type\":\"function\",\"name\":\"f\"}], \"t\":\"\\u00e9\\/\"}\r\n");
        is_int(x.r, 0, "openai body: forwarded");
        is_str(x.body.data,
               "{\"model\":\"m\",\"temperature\":0.70,\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],"
               "\"t\":\"\xc3\xa9/\"}",
               "as the parsed document: blanks gone, numbers as written, web search out");
        is_str(x.f.stripped, "web_search_preview", "and the log says so");
        done(&x);

        run(&x, DM_VENDOR_ANTHROPIC, "POST", "Content-Encoding: identity", "{\"a\":1}");
        is_int(x.r, 0, "Content-Encoding: identity is no encoding");
        done(&x);
        run(&x, DM_VENDOR_ANTHROPIC, "POST", "Content-Encoding: br", "{\"a\":1}");
        ok(x.r == -EACCES && x.f.status == 415, "Content-Encoding: br: 415 (%s)", x.f.why);
        done(&x);
        run(&x, DM_VENDOR_ANTHROPIC, "POST", NULL, "{\"a\":1,}");
        ok(x.r == -EACCES && x.f.status == 400, "a trailing comma: 400");
        done(&x);
        run(&x, DM_VENDOR_ANTHROPIC, "POST", NULL, "{\"a\":'x'}");
        ok(x.r == -EACCES && x.f.status == 400, "single quotes: 400");
        done(&x);
}

int main(void)
{
        test_betas();
        test_tools();
        test_body();
        return done_testing();
}
