/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid/truncated.
 * Rejects overlongs, surrogates and code points above U+10FFFF (RFC 3629). */
static size_t seq_len(const unsigned char *s, size_t avail)
{
        unsigned char c = s[0];

        if (c >= 0x01 && c < 0x80)
                return 1;
        if (c >= 0xC2 && c <= 0xDF) {
                if (avail < 2 || (s[1] & 0xC0) != 0x80)
                        return 0;
                return 2;
        }
        if (c >= 0xE0 && c <= 0xEF) {
                if (avail < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80)
                        return 0;
                if (c == 0xE0 && s[1] < 0xA0)
                        return 0;
                if (c == 0xED && s[1] >= 0xA0)
                        return 0;
                return 3;
        }
        if (c >= 0xF0 && c <= 0xF4) {
                if (avail < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
                        return 0;
                if (c == 0xF0 && s[1] < 0x90)
                        return 0;
                if (c == 0xF4 && s[1] >= 0x90)
                        return 0;
                return 4;
        }
        return 0;
}

bool dm_utf8_valid(const char *s, size_t len)
{
        const unsigned char *p = (const unsigned char *)s;
        size_t i = 0;

        while (i < len) {
                size_t k = seq_len(p + i, len - i);
                if (!k)
                        return false;
                i += k;
        }
        return true;
}

char *dm_utf8_sanitize(const char *s, size_t len, size_t *ret_len)
{
        const unsigned char *p = (const unsigned char *)s;
        size_t i = 0, o = 0;
        char *out;

        /* Worst case: every byte becomes the 3-byte replacement character. */
        if (len > (SIZE_MAX - 1) / 3)
                return NULL;
        out = malloc(len * 3 + 1);
        if (!out)
                return NULL;
        while (i < len) {
                size_t k = seq_len(p + i, len - i);
                if (k) {
                        memcpy(out + o, p + i, k);
                        o += k;
                        i += k;
                } else {
                        memcpy(out + o, "\xEF\xBF\xBD", 3);
                        o += 3;
                        i++;
                }
        }
        out[o] = '\0';
        if (ret_len)
                *ret_len = o;
        return out;
}
