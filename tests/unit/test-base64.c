/* SPDX-License-Identifier: MIT */
/* RFC 4648 base64: the RFC's vectors, every byte value, and bad input. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "src/basic/base64.h"
#include "tests/tap.h"

int main(void)
{
        static const char *const vectors[][2] = {
                { "", "" },
                { "f", "Zg==" },
                { "fo", "Zm8=" },
                { "foo", "Zm9v" },
                { "foob", "Zm9vYg==" },
                { "fooba", "Zm9vYmE=" },
                { "foobar", "Zm9vYmFy" },
        };
        static const char *const bad[] = { "Zg=", "Zg", "Z===", "Zm9v\n", "Zm 9", "Zg==Zg==", "=Zg=", "Zm9v*A==" };
        unsigned char all[256];
        char *enc, *dec;
        size_t n;

        for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
                enc = dm_base64_encode(vectors[i][0], strlen(vectors[i][0]));
                is_str(enc, vectors[i][1], "encode '%s'", vectors[i][0]);
                free(enc);
                ok(dm_base64_decode(vectors[i][1], strlen(vectors[i][1]), &dec, &n) == 0 &&
                           n == strlen(vectors[i][0]) && memcmp(dec, vectors[i][0], n) == 0,
                   "decode '%s'", vectors[i][1]);
                free(dec);
        }
        for (int i = 0; i < 256; i++)
                all[i] = (unsigned char)i;
        for (size_t len = 250; len <= 256; len++) {
                enc = dm_base64_encode(all, len);
                ok(enc && dm_base64_decode(enc, strlen(enc), &dec, &n) == 0 && n == len && memcmp(dec, all, n) == 0,
                   "every byte value round-trips (%zu bytes, NULs included)", len);
                free(enc);
                free(dec);
        }
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                dec = NULL;
                is_int(dm_base64_decode(bad[i], strlen(bad[i]), &dec, &n), -EINVAL, "refused: '%s'", bad[i]);
                ok(dec == NULL, "and nothing is returned");
        }
        return done_testing();
}
