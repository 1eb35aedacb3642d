/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "src/basic/headtail.h"
#include "src/basic/utf8.h"
#include "tests/tap.h"

static char *run(size_t limit, const char *in, size_t len, size_t chunk, size_t *out_len, bool *trunc)
{
        struct dm_headtail ht;
        char *out;

        dm_headtail_init(&ht, limit);
        for (size_t off = 0; off < len; off += chunk)
                dm_headtail_feed(&ht, in + off, off + chunk > len ? len - off : chunk);
        out = dm_headtail_finish(&ht, out_len, trunc);
        dm_headtail_release(&ht);
        return out;
}

int main(void)
{
        size_t len;
        bool trunc;
        char *out;

        out = run(64, "hello\n", 6, 6, &len, &trunc);
        is_str(out, "hello\n", "short output kept whole");
        ok(!trunc, "short output not truncated");
        free(out);

        out = run(64, "", 0, 1, &len, &trunc);
        ok(out && len == 0 && !trunc, "empty output");
        free(out);

        /* Exactly the limit: whole, in any chunking. */
        char exact[64];
        for (int i = 0; i < 64; i++)
                exact[i] = (char)('a' + i % 26);
        for (size_t chunk = 1; chunk <= 64; chunk *= 4) {
                out = run(64, exact, 64, chunk, &len, &trunc);
                ok(len == 64 && !trunc && memcmp(out, exact, 64) == 0, "exactly the limit, chunk %zu", chunk);
                free(out);
        }

        /* 1 MB of numbered lines: head and tail are the real first and last bytes. */
        size_t big_len = 1 << 20;
        char *big = malloc(big_len);
        for (size_t i = 0; i < big_len; i++)
                big[i] = (char)('0' + i % 10);
        for (size_t chunk = 7; chunk <= 70000; chunk *= 100) {
                out = run(1024, big, big_len, chunk, &len, &trunc);
                ok(trunc, "1 MiB truncated (chunk %zu)", chunk);
                ok(memcmp(out, big, 512) == 0, "head is the first 512 bytes (chunk %zu)", chunk);
                ok(memcmp(out + len - 512, big + big_len - 512, 512) == 0, "tail is the last 512 bytes (chunk %zu)",
                   chunk);
                ok(strstr(out, "bytes omitted") != NULL, "marker line present (chunk %zu)", chunk);
                free(out);
        }
        free(big);

        /* UTF-8: a 3-byte character straddling both cut points is dropped whole. */
        char utf[300];
        size_t n = 0;
        while (n + 3 <= sizeof(utf)) {
                memcpy(utf + n, "\xE2\x82\xAC", 3); /* EURO SIGN */
                n += 3;
        }
        out = run(100, utf, n, 5, &len, &trunc);
        ok(trunc && dm_utf8_valid(out, len), "cut on character boundaries: result is valid UTF-8");
        free(out);

        /* Binary with NUL bytes keeps its length. */
        out = run(64, "a\0b", 3, 1, &len, &trunc);
        ok(len == 3 && out[1] == '\0' && out[2] == 'b', "NUL bytes preserved with the length");
        free(out);
        return done_testing();
}
