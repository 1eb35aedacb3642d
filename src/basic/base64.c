/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/base64.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "src/basic/cleanup.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int value(unsigned char c)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

int dm_base64_decode(const char *in, size_t len, char **ret, size_t *ret_len)
{
        _cleanup_free_ char *out = NULL;
        size_t o = 0;

        if (len % 4 != 0)
                return -EINVAL;
        out = malloc(len / 4 * 3 + 1);
        if (!out)
                return -ENOMEM;
        for (size_t i = 0; i < len; i += 4) {
                int v[4];
                bool last = i + 4 == len;

                for (int k = 0; k < 4; k++) {
                        v[k] = value((unsigned char)in[i + k]);
                        if (v[k] < 0 && !(last && k >= 2 && in[i + k] == '='))
                                return -EINVAL;
                }
                if (in[i + 2] == '=' && in[i + 3] != '=')
                        return -EINVAL;
                out[o++] = (char)(v[0] << 2 | v[1] >> 4);
                if (in[i + 2] != '=')
                        out[o++] = (char)((v[1] & 15) << 4 | v[2] >> 2);
                if (in[i + 3] != '=')
                        out[o++] = (char)((v[2] & 3) << 6 | v[3]);
        }
        out[o] = '\0';
        *ret = TAKE_PTR(out);
        *ret_len = o;
        return 0;
}

char *dm_base64_encode(const void *data, size_t len)
{
        const uint8_t *p = data;
        char *out;
        size_t o = 0;

        if (len > (SIZE_MAX - 1) / 4 * 3)
                return NULL;
        out = malloc((len + 2) / 3 * 4 + 1);
        if (!out)
                return NULL;
        for (size_t i = 0; i < len; i += 3) {
                uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0) |
                             (i + 2 < len ? p[i + 2] : 0);

                out[o++] = alphabet[v >> 18 & 63];
                out[o++] = alphabet[v >> 12 & 63];
                out[o++] = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
                out[o++] = i + 2 < len ? alphabet[v & 63] : '=';
        }
        out[o] = '\0';
        return out;
}
