/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "src/basic/utf8.h"
#include "tests/tap.h"

static void check(const char *in, size_t len, const char *want, const char *what)
{
        size_t out_len;
        char *out = dm_utf8_sanitize(in, len, &out_len);

        ok(out && out_len == strlen(want) && memcmp(out, want, out_len) == 0, "%s", what);
        ok(dm_utf8_valid(out, out_len), "%s: result valid", what);
        free(out);
}

int main(void)
{
        const char *mixed = "hi \xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80";
        ok(dm_utf8_valid(mixed, strlen(mixed)), "valid mixed text");
        ok(!dm_utf8_valid("\xC0\xAF", 2), "overlong slash rejected");
        ok(!dm_utf8_valid("\xED\xA0\x80", 3), "UTF-16 surrogate rejected");
        ok(!dm_utf8_valid("\xF4\x90\x80\x80", 4), "above U+10FFFF rejected");
        ok(!dm_utf8_valid("\xE2\x82", 2), "truncated sequence rejected");
        ok(!dm_utf8_valid("a\0b", 3), "NUL rejected (it cannot pass through every client)");
        check("plain", 5, "plain", "ASCII untouched");
        check("\xFF"
              "a",
              2,
              "\xEF\xBF\xBD"
              "a",
              "invalid byte replaced");
        check("\xE2\x82", 2, "\xEF\xBF\xBD\xEF\xBF\xBD", "truncated sequence replaced byte by byte");
        check("x\0y", 3, "x\xEF\xBF\xBDy", "NUL replaced");
        check("\xC3\xA9", 2, "\xC3\xA9", "valid two-byte kept");
        return done_testing();
}
