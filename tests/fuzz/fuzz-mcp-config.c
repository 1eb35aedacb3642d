/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the host MCP servers file (DEMESNE_HOST_MCP,
 * src/mcp/client-config.c): whatever the operator's file holds, the parser
 * either refuses it with one line that names the file, or gives servers
 * that the client and the proxy can use as they are: names of
 * [A-Za-z0-9_-], exactly one of command and url, an http(s) url, arrays
 * that end, limits within their ranges.
 *
 * Input: the file's bytes. */
#include "config.h"

#include <errno.h>

#include "src/mcp/client.h"
#include "tests/fuzz/fuzz.h"

#define PATH "/fuzz/host-mcp.json"

static void check_strv(char **v, int names)
{
        FUZZ_CHECK(v);
        for (size_t i = 0; v[i]; i++) {
                FUZZ_CHECK(i < 4096);
                if (names)
                        FUZZ_CHECK(dm_mcpclient_name_ok(v[i]));
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct dm_mcpclient_config cfg = { 0 };
        struct dm_error err = { 0 };
        int r;

        r = dm_mcpclient_config_parse(PATH, (const char *)data, size, &cfg, &err);
        if (r < 0) {
                FUZZ_CHECK(r == -EINVAL || r == -ENOMEM);
                FUZZ_CHECK(strncmp(err.msg, PATH ": ", strlen(PATH) + 2) == 0 || r == -ENOMEM);
                FUZZ_CHECK(fuzz_one_line(err.msg));
                FUZZ_CHECK(cfg.servers == NULL && cfg.n == 0);
                return 0;
        }
        FUZZ_CHECK(cfg.n <= 32);
        for (size_t i = 0; i < cfg.n; i++) {
                const struct dm_mcpclient_spec *s = &cfg.servers[i];

                FUZZ_CHECK(dm_mcpclient_name_ok(s->name));
                FUZZ_CHECK(!s->command != !s->url);
                FUZZ_CHECK(!s->command || s->command[0]);
                FUZZ_CHECK(!s->url || strncmp(s->url, "http://", 7) == 0 || strncmp(s->url, "https://", 8) == 0);
                check_strv(s->args, 0);
                check_strv(s->env, 0);
                check_strv(s->headers, 0);
                check_strv(s->tools, 1);
                for (char **h = s->headers; *h; h++)
                        FUZZ_CHECK(fuzz_one_line(*h) && strstr(*h, ": "));
                for (char **e = s->env; *e; e++)
                        FUZZ_CHECK(strchr(*e, '=') && strchr(*e, '=') != *e);
                FUZZ_CHECK(s->max_message >= 0 && s->max_message <= (1LL << 30));
                FUZZ_CHECK(s->timeout_ms >= 0 && s->timeout_ms <= 86400LL * 1000);
        }
        dm_mcpclient_config_release(&cfg);
        return 0;
}
