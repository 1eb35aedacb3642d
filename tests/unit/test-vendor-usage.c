/* SPDX-License-Identifier: MIT */
/* The vendor proxy's pure parts: the usage meter over crafted streams split
 * at every byte boundary, prices, usage.json, credentials from temporary
 * files and the environment, routes, the token check and upstream headers. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netpolicy/vendor-internal.h"
#include "tests/tap.h"

static const char anthropic_sse[] =
        "event: message_start\r\n"
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5-20250929\","
        "\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":100,\"cache_read_input_tokens\":2000,"
        "\"output_tokens\":1}}}\r\n"
        "\r\n"
        ": a comment\n"
        "event: content_block_delta\n"
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n"
        "\n"
        "event: ping\n"
        "data: {\"type\": \"ping\"}\n"
        "\n"
        "event: message_delta\n"
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":40}}\n"
        "\n"
        "event: message_delta\n"
        "data: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"output_tokens\":57}}\n"
        "\n"
        "event: message_stop\n"
        "data: {\"type\":\"message_stop\"}\n"
        "\n";

/* An event whose JSON is spread over two data lines, no event names, and
 * no final blank line. */
static const char openai_sse[] =
        "data: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5-codex\",\"usage\":null}}\n\n"
        "data: {\"type\":\"response.output_text.delta\",\"delta\":\"x\"}\n\n"
        "data: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5-codex\",\n"
        "data: \"usage\":{\"input_tokens\":1000,\"input_tokens_details\":{\"cached_tokens\":600},"
        "\"output_tokens\":50,\"output_tokens_details\":{\"reasoning_tokens\":20},\"total_tokens\":1050}}}\n";

static const char anthropic_json[] =
        "{\"id\":\"msg_2\",\"type\":\"message\",\"model\":\"claude-haiku-4-5\",\"content\":[{\"type\":\"text\","
        "\"text\":\"{\\\"usage\\\": 1}\"}],\"usage\":{\"input_tokens\":7,\"output_tokens\":3,"
        "\"cache_read_input_tokens\":0,\"cache_creation_input_tokens\":0}}";

static const char openai_json[] =
        "{\"id\":\"resp_1\",\"object\":\"response\",\"model\":\"o4-mini-2025-04-16\",\"usage\":{\"input_tokens\":"
        "200,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":9}}";

struct want {
        const char *model;
        uint64_t input, output, cache_read, cache_write;
};

static bool same(const struct dm_vendor_sample *s, const struct want *w)
{
        return strcmp(s->model, w->model) == 0 && s->tokens.input == w->input && s->tokens.output == w->output &&
               s->tokens.cache_read == w->cache_read && s->tokens.cache_write == w->cache_write;
}

/* Feeds text in two pieces split at every offset, and byte by byte; each
 * way must give w. */
static void meter_all_splits(const char *name, enum dm_vendor provider, bool sse, const char *text,
                             const struct want *w)
{
        size_t n = strlen(text), bad = 0;
        struct dm_vendor_sample s;
        struct dm_vendor_meter m;

        for (size_t cut = 0; cut <= n; cut++) {
                dm_vendor_meter_init(&m, provider, sse);
                dm_vendor_meter_feed(&m, text, cut);
                dm_vendor_meter_feed(&m, text + cut, n - cut);
                if (dm_vendor_meter_finish(&m, &s) != 1 || !same(&s, w)) {
                        if (!bad)
                                diag("%s: split at %zu: model '%s' in %llu out %llu", name, cut, s.model,
                                     (unsigned long long)s.tokens.input, (unsigned long long)s.tokens.output);
                        bad++;
                }
                dm_vendor_meter_release(&m);
        }
        ok(bad == 0, "%s: same usage for all %zu two-piece splits", name, n + 1);

        dm_vendor_meter_init(&m, provider, sse);
        for (size_t i = 0; i < n; i++)
                dm_vendor_meter_feed(&m, text + i, 1);
        ok(dm_vendor_meter_finish(&m, &s) == 1 && same(&s, w), "%s: byte by byte", name);
        dm_vendor_meter_release(&m);
}

static void test_meter(void)
{
        struct want a = { "claude-sonnet-4-5-20250929", 12, 57, 2000, 100 };
        struct want o = { "gpt-5-codex", 400, 50, 600, 0 };
        struct want aj = { "claude-haiku-4-5", 7, 3, 0, 0 };
        struct want oj = { "o4-mini-2025-04-16", 200, 9, 0, 0 };
        struct dm_vendor_sample s;
        struct dm_vendor_meter m;

        meter_all_splits("anthropic sse", DM_VENDOR_ANTHROPIC, true, anthropic_sse, &a);
        meter_all_splits("openai sse", DM_VENDOR_OPENAI, true, openai_sse, &o);
        meter_all_splits("anthropic json", DM_VENDOR_ANTHROPIC, false, anthropic_json, &aj);
        meter_all_splits("openai json", DM_VENDOR_OPENAI, false, openai_json, &oj);
        {
                /* What follows the document started a comment for json-c,
                 * so whole it gave nothing, cut after the '}' it gave the
                 * usage (found by tests/fuzz/fuzz-http-head.c). */
                char trailing[sizeof(openai_json) + 4];
                snprintf(trailing, sizeof(trailing), "%s//u", openai_json);
                meter_all_splits("openai json then '//'", DM_VENDOR_OPENAI, false, trailing, &oj);
        }
        {
                /* Not JSON ("100-"): json-c refused it whole but read 100
                 * when the cut fell inside the number. Now never counted. */
                static const char bad[] = "{\"model\":\"gpt-5\",\"usage\":{\"input_tokens\":100-,\"output_tokens\":7}}";
                size_t n = strlen(bad), counted = 0;

                for (size_t cut = 0; cut <= n; cut++) {
                        dm_vendor_meter_init(&m, DM_VENDOR_OPENAI, false);
                        dm_vendor_meter_feed(&m, bad, cut);
                        dm_vendor_meter_feed(&m, bad + cut, n - cut);
                        counted += dm_vendor_meter_finish(&m, &s) == 1;
                        dm_vendor_meter_release(&m);
                }
                is_int((int)counted, 0, "malformed JSON body: no usage, wherever it is cut");
        }

        dm_vendor_meter_init(&m, DM_VENDOR_ANTHROPIC, true);
        dm_vendor_meter_feed(&m, "event: ping\ndata: {}\n\n", 22);
        ok(dm_vendor_meter_finish(&m, &s) == 0, "a stream without usage gives none");
        dm_vendor_meter_release(&m);

        dm_vendor_meter_init(&m, DM_VENDOR_OPENAI, false);
        dm_vendor_meter_feed(&m, "{\"error\":", 9);
        ok(dm_vendor_meter_finish(&m, &s) == 0, "a cut JSON body gives none");
        dm_vendor_meter_release(&m);

        /* A data line beyond the cap is skipped, and the stream goes on. */
        {
                size_t big = 2 * 1024 * 1024;
                char *line = malloc(big);
                memset(line, 'x', big);
                dm_vendor_meter_init(&m, DM_VENDOR_ANTHROPIC, true);
                dm_vendor_meter_feed(&m, "data: ", 6);
                dm_vendor_meter_feed(&m, line, big);
                dm_vendor_meter_feed(&m, "\n\n", 2);
                dm_vendor_meter_feed(&m, anthropic_sse, strlen(anthropic_sse));
                ok(dm_vendor_meter_finish(&m, &s) == 1 && same(&s, &a), "an oversized line is skipped");
                ok(m.broken, "and marks the meter");
                dm_vendor_meter_release(&m);
                free(line);
        }
}

static char tmpdir[64];

static char *write_tmp(const char *name, const char *text)
{
        char *path;
        FILE *f;

        if (asprintf(&path, "%s/%s", tmpdir, name) < 0)
                abort();
        f = fopen(path, "w");
        fputs(text, f);
        fclose(f);
        return path;
}

static void test_prices(void)
{
        struct dm_vendor_prices p;
        struct dm_error err = { 0 };
        const struct dm_vendor_price *e;
        char *path =
                write_tmp("prices.json", "{\"note\":\"x\",\"models\":{\"claude-opus-4\":{\"input\":15,\"output\":75,"
                                         "\"cache_read\":1.5,\"cache_write\":18.75},\"claude-opus-4-5\":{"
                                         "\"input\":5,\"output\":25},\"gpt-5\":{\"input\":1.25,\"output\":10,"
                                         "\"cache_read\":0.125}}}");
        char *bad = write_tmp("bad.json", "{\"models\":{\"x\":{\"input\":\"cheap\"}}}");

        ok(dm_vendor_prices_load(path, &p, &err) == 0 && p.n == 3, "price table loads");
        e = dm_vendor_price_lookup(&p, "claude-opus-4-5-20251101");
        ok(e && e->input == 5, "longest prefix wins");
        e = dm_vendor_price_lookup(&p, "claude-opus-4-1-20250805");
        ok(e && e->input == 15, "shorter prefix when the longer does not match");
        ok(dm_vendor_price_lookup(&p, "mystery-1") == NULL, "unknown model: no price");
        ok(dm_vendor_price_lookup(&p, "claude") == NULL, "a model shorter than every prefix: no price");
        ok(dm_vendor_prices_load(bad, &(struct dm_vendor_prices){ 0 }, &err) == -EINVAL && strstr(err.msg, "'x'"),
           "a non-number price is refused by name: %s", err.msg);
        ok(dm_vendor_prices_load("/nonexistent/prices.json", &(struct dm_vendor_prices){ 0 }, &err) == -ENOENT,
           "a missing table is -ENOENT");

        /* The shipped table parses and knows the current families. */
        {
                struct dm_vendor_prices shipped;
                const char *models[] = { "claude-opus-4-1-20250805",
                                         "claude-sonnet-4-5-20250929",
                                         "claude-haiku-4-5",
                                         "gpt-5-codex",
                                         "gpt-4.1-mini",
                                         "o3",
                                         "o4-mini" };
                bool all = true;
                ok(dm_vendor_prices_load(DM_SRCDIR "/data/prices.json", &shipped, &err) == 0, "data/prices.json loads");
                for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++)
                        if (!dm_vendor_price_lookup(&shipped, models[i])) {
                                diag("no price for %s", models[i]);
                                all = false;
                        }
                ok(all, "data/prices.json prices the current Claude and OpenAI models");
                dm_vendor_prices_release(&shipped);
        }

        /* Totals, per model, cost and the file. */
        {
                struct dm_vendor_usage u = { 0 };
                struct dm_vendor_sample s1 = { "claude-opus-4-5", { 1000000, 100000, 2000000, 0, 0, 0 } };
                struct dm_vendor_sample s2 = { "mystery-1", { 10, 20, 0, 0, 0, 0 } };
                char *out;
                json_object *doc, *m, *v;

                ok(dm_vendor_usage_add(&u, &p, &s1) == 0 && dm_vendor_usage_add(&u, &p, &s1) == 0 &&
                           dm_vendor_usage_add(&u, &p, &s2) == 0,
                   "samples add up");
                is_int(u.n_models, 2, "two models");
                is_int(u.total.requests, 3, "three requests");
                is_int(u.total.input, 2000010, "input totals");
                ok(u.total.cost_usd > 14.999 && u.total.cost_usd < 15.001, "cost: 2 x (5 + 2.5) = 15 USD (%f)",
                   u.total.cost_usd);
                ok(!u.models[1].priced && u.models[1].tokens.cost_usd == 0, "unknown model: unpriced, cost 0");
                if (asprintf(&out, "%s/usage.json", tmpdir) < 0)
                        abort();
                ok(dm_vendor_usage_write(&u, out, &err) == 0, "usage.json written");
                ok(access(out, F_OK) == 0 && access(DM_BUILDDIR "/nonexistent.tmp", F_OK) < 0, "no .tmp left over");
                doc = json_object_from_file(out);
                ok(doc && json_object_object_get_ex(doc, "per_model", &m) &&
                           json_object_object_get_ex(m, "mystery-1", &m) &&
                           json_object_object_get_ex(m, "priced", &v) && !json_object_get_boolean(v),
                   "per_model.mystery-1.priced is false");
                ok(doc && json_object_object_get_ex(doc, "cost_usd", &v) && json_object_get_double(v) > 14.999 &&
                           json_object_get_double(v) < 15.001,
                   "cost_usd in the file");
                ok(doc && json_object_object_get_ex(doc, "cache_read_tokens", &v) &&
                           json_object_get_int64(v) == 4000000,
                   "cache_read_tokens in the file");
                ok(doc && json_object_object_get_ex(doc, "input_tokens", &v) &&
                           json_object_object_get_ex(doc, "output_tokens", &v) &&
                           json_object_object_get_ex(doc, "cache_write_tokens", &v),
                   "top-level token fields present");
                json_object_put(doc);
                unlink(out);
                free(out);
                dm_vendor_usage_release(&u);
        }
        dm_vendor_prices_release(&p);
        unlink(path);
        unlink(bad);
        free(path);
        free(bad);
}

/* The login files the server's settings would name (DEMESNE_CLAUDE_CREDENTIALS,
 * DEMESNE_CODEX_AUTH); NULL: the defaults under HOME. */
static const char *claude_file, *codex_file;
/* What the settings would read from the environment: the lookup takes only
 * this, never the process's environment. */
static struct dm_vendor_env venv;

static void venv_set(char **field, const char *v)
{
        free(*field);
        *field = v ? strdup(v) : NULL;
        if (v && !*field)
                abort();
}

static void clear_env(void)
{
        claude_file = codex_file = NULL;
        dm_vendor_env_release(&venv);
        venv_set(&venv.home, tmpdir); /* no real login file is ever read */
}

static void test_creds(void)
{
        struct dm_vendor_cred c;
        struct dm_error err = { 0 };
        char *claude = write_tmp("claude.json", "{\"claudeAiOauth\":{\"accessToken\":\"sk-ant-oat01-file\","
                                                "\"refreshToken\":\"r\",\"expiresAt\":1}}");
        char *codex_key = write_tmp("codex-key.json", "{\"OPENAI_API_KEY\":\"sk-file\",\"tokens\":null}");
        char *codex_tok = write_tmp("codex-tok.json", "{\"OPENAI_API_KEY\":null,\"tokens\":{\"id_token\":\"i\","
                                                      "\"access_token\":\"eyJ-access\",\"refresh_token\":\"r\","
                                                      "\"account_id\":\"acct-1\"}}");
        char *broken = write_tmp("broken.json", "{\"claudeAiOauth\":");

        clear_env();
        ok(dm_vendor_cred_load(DM_VENDOR_ANTHROPIC, &venv, claude_file, &c, &err) == -ENOENT,
           "anthropic: nothing → -ENOENT");
        ok(strstr(err.msg, "ANTHROPIC_API_KEY") && strstr(err.msg, "CLAUDE_CODE_OAUTH_TOKEN") &&
                   strstr(err.msg, ".claude/.credentials.json"),
           "the message names all three: %s", err.msg);
        ok(dm_vendor_unavailable(DM_VENDOR_ANTHROPIC, &venv, claude_file) != NULL, "unavailable says why");
        ok(dm_vendor_cred_load(DM_VENDOR_OPENAI, &venv, codex_file, &c, &err) == -ENOENT &&
                   strstr(err.msg, "OPENAI_API_KEY"),
           "openai: nothing → -ENOENT: %s", err.msg);

        claude_file = claude;
        ok(dm_vendor_unavailable(DM_VENDOR_ANTHROPIC, &venv, claude_file) == NULL,
           "login file makes anthropic available");
        ok(dm_vendor_cred_load(DM_VENDOR_ANTHROPIC, &venv, claude_file, &c, &err) == 0 &&
                   c.auth == DM_VENDOR_AUTH_OAUTH && strcmp(c.secret, "sk-ant-oat01-file") == 0,
           "claude login file: OAuth access token");
        dm_vendor_cred_release(&c);
        venv_set(&venv.claude_oauth_token, "oat-env");
        ok(dm_vendor_cred_load(DM_VENDOR_ANTHROPIC, &venv, claude_file, &c, &err) == 0 &&
                   c.auth == DM_VENDOR_AUTH_OAUTH && strcmp(c.secret, "oat-env") == 0,
           "CLAUDE_CODE_OAUTH_TOKEN before the file");
        dm_vendor_cred_release(&c);
        venv_set(&venv.anthropic_api_key, "sk-ant-env");
        ok(dm_vendor_cred_load(DM_VENDOR_ANTHROPIC, &venv, claude_file, &c, &err) == 0 &&
                   c.auth == DM_VENDOR_AUTH_API_KEY && strcmp(c.secret, "sk-ant-env") == 0 &&
                   strcmp(c.source, "ANTHROPIC_API_KEY") == 0,
           "ANTHROPIC_API_KEY first");
        dm_vendor_cred_release(&c);
        ok(c.secret == NULL, "release clears");
        clear_env();
        claude_file = broken;
        ok(dm_vendor_cred_load(DM_VENDOR_ANTHROPIC, &venv, claude_file, &c, &err) == -EINVAL,
           "malformed login file: -EINVAL: %s", err.msg);

        codex_file = codex_tok;
        ok(dm_vendor_cred_load(DM_VENDOR_OPENAI, &venv, codex_file, &c, &err) == 0 &&
                   c.auth == DM_VENDOR_AUTH_CHATGPT && strcmp(c.secret, "eyJ-access") == 0 &&
                   strcmp(c.account_id, "acct-1") == 0,
           "codex tokens: ChatGPT access token and account");
        dm_vendor_cred_release(&c);
        codex_file = codex_key;
        ok(dm_vendor_cred_load(DM_VENDOR_OPENAI, &venv, codex_file, &c, &err) == 0 &&
                   c.auth == DM_VENDOR_AUTH_API_KEY && strcmp(c.secret, "sk-file") == 0,
           "codex file with OPENAI_API_KEY");
        dm_vendor_cred_release(&c);
        venv_set(&venv.openai_api_key, "sk-env");
        ok(dm_vendor_cred_load(DM_VENDOR_OPENAI, &venv, codex_file, &c, &err) == 0 && strcmp(c.secret, "sk-env") == 0,
           "OPENAI_API_KEY first");
        dm_vendor_cred_release(&c);
        clear_env();

        /* The lookup reads the struct it is given, never the process's
         * environment: settings.c reads that once. */
        setenv("ANTHROPIC_API_KEY", "sk-ant-process", 1);
        setenv("CLAUDE_CODE_OAUTH_TOKEN", "oat-process", 1);
        setenv("OPENAI_API_KEY", "sk-process", 1);
        ok(dm_vendor_cred_load(DM_VENDOR_ANTHROPIC, &venv, NULL, &c, &err) == -ENOENT,
           "anthropic: the process's ANTHROPIC_API_KEY is not read");
        ok(dm_vendor_cred_load(DM_VENDOR_OPENAI, &venv, NULL, &c, &err) == -ENOENT,
           "openai: the process's OPENAI_API_KEY is not read");
        ok(dm_vendor_unavailable(DM_VENDOR_ANTHROPIC, NULL, NULL) != NULL &&
                   dm_vendor_unavailable(DM_VENDOR_OPENAI, NULL, NULL) != NULL,
           "no struct: no credential");
        unsetenv("ANTHROPIC_API_KEY");
        unsetenv("CLAUDE_CODE_OAUTH_TOKEN");
        unsetenv("OPENAI_API_KEY");
        venv_set(&venv.anthropic_api_key, "");
        ok(dm_vendor_cred_load(DM_VENDOR_ANTHROPIC, &venv, NULL, &c, &err) == -ENOENT,
           "an empty ANTHROPIC_API_KEY counts as absent");
        venv_set(&venv.anthropic_api_key, "sk-ant-struct");
        venv_set(&venv.openai_api_key, "sk-struct");
        ok(dm_vendor_cred_load(DM_VENDOR_ANTHROPIC, &venv, NULL, &c, &err) == 0 &&
                   strcmp(c.secret, "sk-ant-struct") == 0,
           "anthropic: the struct's key");
        dm_vendor_cred_release(&c);
        ok(dm_vendor_cred_load(DM_VENDOR_OPENAI, &venv, NULL, &c, &err) == 0 && strcmp(c.secret, "sk-struct") == 0,
           "openai: the struct's key");
        dm_vendor_cred_release(&c);
        dm_vendor_env_release(&venv);
        ok(!venv.anthropic_api_key && !venv.claude_oauth_token && !venv.openai_api_key && !venv.home,
           "dm_vendor_env_release clears the struct");

        for (const char **p = (const char *[]){ claude, codex_key, codex_tok, broken, NULL }; *p; p++) {
                unlink(*p);
                free((char *)*p);
        }
}

static void test_http(void)
{
        struct dm_vendor_request r;
        char why[128], tok[65], tok2[65];
        const char *head = "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nx-api-key: "
                           "0123456789abcdef0123456789abcdef\r\nanthropic-beta: a,b\r\nConnection: keep-alive, "
                           "x-secret\r\nx-secret: 1\r\nContent-Length: 2\r\n\r\n";
        struct dm_vendor_cred oauth = { .auth = DM_VENDOR_AUTH_OAUTH, .secret = "REAL" };
        struct curl_slist *l = NULL;
        bool saw_key = false, saw_beta = false, saw_auth = false, saw_secret_hdr = false;

        ok(dm_vendor_token_new(tok) == 0 && strlen(tok) == 64 && strspn(tok, "0123456789abcdef") == 64,
           "token: 64 hex digits");
        ok(dm_vendor_token_new(tok2) == 0 && strcmp(tok, tok2) != 0, "tokens differ");

        ok(dm_vendor_request_parse(head, strlen(head), &r, why, sizeof(why)) == 0, "request parses");
        is_str(r.target, "/v1/messages?beta=true", "target kept with its query");
        ok(dm_vendor_request_keep_alive(&r), "keep-alive");
        ok(dm_vendor_token_check(&r, "0123456789abcdef0123456789abcdef") == DM_VENDOR_TOKEN_OK, "token in x-api-key");
        ok(dm_vendor_token_check(&r, "0123456789abcdef0123456789abcdeF") == DM_VENDOR_TOKEN_WRONG, "wrong token");
        ok(dm_vendor_upstream_headers(&r, DM_VENDOR_ANTHROPIC, &oauth, &l) == 0, "upstream headers");
        for (struct curl_slist *i = l; i; i = i->next) {
                saw_key |= strncasecmp(i->data, "x-api-key", 9) == 0;
                saw_beta |= strcmp(i->data, "anthropic-beta: a,b,oauth-2025-04-20") == 0;
                saw_auth |= strcmp(i->data, "Authorization: Bearer REAL") == 0;
                saw_secret_hdr |= strncasecmp(i->data, "x-secret", 8) == 0 || strncasecmp(i->data, "host", 4) == 0 ||
                                  strncasecmp(i->data, "connection", 10) == 0;
        }
        ok(!saw_key && saw_auth, "OAuth: the client's x-api-key replaced by Authorization: Bearer");
        ok(saw_beta, "oauth beta appended to the client's anthropic-beta");
        ok(!saw_secret_hdr, "Host, Connection and what it names are dropped");
        dm_vendor_slist_free_wipe(l);
        dm_vendor_request_release(&r);

        head = "GET /v1/models HTTP/1.0\nAuthorization: Bearer  abc\n\n";
        ok(dm_vendor_request_parse(head, strlen(head), &r, why, sizeof(why)) == 0 && r.http10 &&
                   !dm_vendor_request_keep_alive(&r) && dm_vendor_token_check(&r, "abc") == DM_VENDOR_TOKEN_OK,
           "HTTP/1.0, LF lines, bearer token");
        dm_vendor_request_release(&r);
        head = "GET /v1/models HTTP/1.1\r\n\r\n";
        ok(dm_vendor_request_parse(head, strlen(head), &r, why, sizeof(why)) == 0 &&
                   dm_vendor_token_check(&r, "abc") == DM_VENDOR_TOKEN_MISSING,
           "no token: missing");
        dm_vendor_request_release(&r);
        head = "GET http://evil/ HTTP/1.1\r\n\r\n";
        ok(dm_vendor_request_parse(head, strlen(head), &r, why, sizeof(why)) == -EINVAL, "absolute-form refused: %s",
           why);
        dm_vendor_request_release(&r);

        {
                struct {
                        enum dm_vendor v;
                        enum dm_vendor_auth a;
                        const char *method, *target, *want;
                } cases[] = {
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/messages", "/v1/messages" },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_OAUTH, "POST", "/v1/messages?beta=true",
                          "/v1/messages?beta=true" },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/messages/count_tokens",
                          "/v1/messages/count_tokens" },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "GET", "/v1/messages", NULL },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/complete", NULL },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "GET", "/v1/files", NULL },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_OAUTH, "POST", "/api/oauth/token", NULL },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/messages/batches", NULL },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/messages/../files", NULL },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/messages%2f", NULL },
                        { DM_VENDOR_ANTHROPIC, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/messages#x", NULL },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/responses?..#admin", NULL },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/responses", "/v1/responses" },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "GET", "/v1/models", "/v1/models" },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "GET", "/v1/models/gpt-5", "/v1/models/gpt-5" },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "GET", "/v1/models/..", NULL },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "GET", "/v1/models/a/b", NULL },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/files", NULL },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "POST", "/v1/chat/completions", NULL },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_API_KEY, "POST", "/responses", NULL },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_CHATGPT, "POST", "/responses", "/responses" },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_CHATGPT, "POST", "/v1/responses", "/responses" },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_CHATGPT, "GET", "/models?client_version=0.1",
                          "/models?client_version=0.1" },
                        { DM_VENDOR_OPENAI, DM_VENDOR_AUTH_CHATGPT, "GET", "/wham/usage", NULL },
                };
                for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                        const char *got = dm_vendor_route(cases[i].v, cases[i].a, cases[i].method, cases[i].target);
                        ok(cases[i].want ? got && strcmp(got, cases[i].want) == 0 : got == NULL, "route %s %s %s: %s",
                           dm_vendor_name(cases[i].v), cases[i].method, cases[i].target, got ? got : "refused");
                }
        }
}

/* The spending gate: requests in flight count against the cap. */
static void test_gate(void)
{
        struct dm_vendor_gate g = { .cap = 1.0 };
        struct dm_vendor_gate none = { 0 };
        double spent = 0;

        for (int i = 0; i < 40; i++)
                dm_vendor_gate_enter(&none, 1e9);
        is_int(none.in_flight, 40, "no cap: every request goes, whatever was spent");

        is_int(dm_vendor_gate_enter(&g, spent), DM_VENDOR_GATE_GO, "the first request goes");
        is_int(dm_vendor_gate_enter(&g, spent), DM_VENDOR_GATE_WAIT,
               "before a response is priced, a second one waits: nothing says what one costs");
        dm_vendor_gate_leave(&g, true, 0.2);
        spent += 0.2;
        is_int(g.in_flight, 0, "the first ended");
        /* 0.2 spent, 0.2 the costliest: 0.2 + 3 x 0.2 < 1, 0.2 + 4 x 0.2 = 1. */
        is_int(dm_vendor_gate_enter(&g, spent), DM_VENDOR_GATE_GO, "then one goes (0.2 + 0.2)");
        is_int(dm_vendor_gate_enter(&g, spent), DM_VENDOR_GATE_GO, "two in flight (0.2 + 2 x 0.2)");
        is_int(dm_vendor_gate_enter(&g, spent), DM_VENDOR_GATE_GO, "three in flight (0.2 + 3 x 0.2)");
        is_int(dm_vendor_gate_enter(&g, spent), DM_VENDOR_GATE_WAIT,
               "a fourth waits: with it, the cap would be reached if each cost as much as the costliest");
        dm_vendor_gate_leave(&g, false, 0);
        is_int(dm_vendor_gate_enter(&g, spent), DM_VENDOR_GATE_GO, "a request that failed unpriced made room");
        for (int i = 0; i < 3; i++) {
                dm_vendor_gate_leave(&g, true, 0.2);
                spent += 0.2;
        }
        /* 0.8 spent, nothing in flight: 0.8 + 0.2 is the cap itself. */
        is_int(g.in_flight, 0, "all ended");
        is_int(dm_vendor_gate_enter(&g, spent), DM_VENDOR_GATE_CAPPED,
               "nothing in flight and the next would reach the cap: capped, not waiting forever");
        is_int(dm_vendor_gate_enter(&g, 1.0), DM_VENDOR_GATE_CAPPED, "spent at the cap: capped");
        is_int(dm_vendor_gate_enter(&g, NAN), DM_VENDOR_GATE_CAPPED, "a spend that is no number: capped");

        /* Given an estimate to start with: no request goes that it says
         * would pass the cap, even the first. */
        {
                struct dm_vendor_gate s = { .cap = 0.003, .largest = 0.004 };
                struct dm_vendor_gate t = { .cap = 1.0, .largest = 0.3 };

                is_int(dm_vendor_gate_enter(&s, 0), DM_VENDOR_GATE_CAPPED,
                       "a reservation smaller than one request's estimate: capped before any request");
                is_int(dm_vendor_gate_enter(&t, 0), DM_VENDOR_GATE_GO, "with room: the first goes");
                is_int(dm_vendor_gate_enter(&t, 0), DM_VENDOR_GATE_GO, "and, the cost known, others beside it");
                is_int(dm_vendor_gate_enter(&t, 0), DM_VENDOR_GATE_GO, "three (3 x 0.3)");
                is_int(dm_vendor_gate_enter(&t, 0), DM_VENDOR_GATE_WAIT, "not four");
        }

        /* A flood at once: 32 requests against a cap of 1 with responses at
         * 0.3; whatever the order, the spend stays under the cap. */
        {
                struct dm_vendor_gate f = { .cap = 1.0 };
                double total = 0;
                int went = 0;

                for (int round = 0; round < 10; round++) {
                        int now = 0;

                        for (int i = 0; i < 32; i++)
                                if (dm_vendor_gate_enter(&f, total) == DM_VENDOR_GATE_GO)
                                        now++;
                        went += now;
                        for (int i = 0; i < now; i++) {
                                dm_vendor_gate_leave(&f, true, 0.3);
                                total += 0.3;
                        }
                }
                ok(total <= 1.0 && went == 3, "32 at once, ten times: %d went, $%.2f spent, under the $1 cap", went,
                   total);
        }
}

int main(void)
{
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/dm-vendor-XXXXXX");
        if (!mkdtemp(tmpdir))
                return 1;
        test_meter();
        test_prices();
        test_creds();
        test_http();
        test_gate();
        rmdir(tmpdir);
        return done_testing();
}
