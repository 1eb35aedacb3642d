/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/headtail.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dm_headtail_init(struct dm_headtail *ht, size_t limit)
{
        memset(ht, 0, sizeof(*ht));
        if (limit < 2)
                limit = 2;
        ht->limit = limit;
        ht->head_max = limit / 2;
        ht->tail_max = limit - ht->head_max;
        ht->head = malloc(ht->head_max);
        ht->tail = malloc(ht->tail_max);
        if (!ht->head || !ht->tail) {
                dm_headtail_release(ht);
                return -ENOMEM;
        }
        return 0;
}

void dm_headtail_feed(struct dm_headtail *ht, const void *p, size_t n)
{
        const char *s = p;

        ht->total += n;
        if (ht->head_len < ht->head_max) {
                size_t k = ht->head_max - ht->head_len;

                if (k > n)
                        k = n;
                memcpy(ht->head + ht->head_len, s, k);
                ht->head_len += k;
                s += k;
                n -= k;
        }
        if (n >= ht->tail_max) {
                /* Only the last tail_max bytes can survive. */
                memcpy(ht->tail, s + n - ht->tail_max, ht->tail_max);
                ht->tail_pos = 0;
                ht->tail_len = ht->tail_max;
                return;
        }
        while (n > 0) {
                size_t k = ht->tail_max - ht->tail_pos;

                if (k > n)
                        k = n;
                memcpy(ht->tail + ht->tail_pos, s, k);
                ht->tail_pos = (ht->tail_pos + k) % ht->tail_max;
                if (ht->tail_len < ht->tail_max)
                        ht->tail_len = ht->tail_len + k > ht->tail_max ? ht->tail_max : ht->tail_len + k;
                s += k;
                n -= k;
        }
}

static bool is_cont(unsigned char c)
{
        return (c & 0xC0) == 0x80;
}

/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8
 * sequence: drop a trailing lead byte whose continuation bytes are missing. */
static size_t utf8_cut_end(const char *s, size_t n)
{
        size_t i = n, back = 0;

        while (i > 0 && back < 4 && is_cont((unsigned char)s[i - 1])) {
                i--;
                back++;
        }
        if (i == 0)
                return n;
        unsigned char lead = (unsigned char)s[i - 1];
        size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (need == 1)
                return n; /* ASCII or stray continuation bytes: keep as they are */
        return back + 1 >= need ? n : i - 1;
}

/* Offset of the first byte in s[0..n) that starts a character. */
static size_t utf8_cut_start(const char *s, size_t n)
{
        size_t i = 0;

        while (i < n && i < 3 && is_cont((unsigned char)s[i]))
                i++;
        return i;
}

char *dm_headtail_finish(const struct dm_headtail *ht, size_t *ret_len, bool *ret_truncated)
{
        uint64_t kept = ht->head_len + ht->tail_len;
        char marker[160];
        char *out, *tail_lin;
        size_t hlen, tstart, mlen;

        tail_lin = malloc(ht->tail_len + 1);
        if (!tail_lin)
                return NULL;
        /* Linearise the ring: oldest byte first. */
        if (ht->tail_len < ht->tail_max) {
                memcpy(tail_lin, ht->tail, ht->tail_len);
        } else {
                size_t first = ht->tail_max - ht->tail_pos;
                memcpy(tail_lin, ht->tail + ht->tail_pos, first);
                memcpy(tail_lin + first, ht->tail, ht->tail_pos);
        }

        if (ht->total <= kept) {
                out = malloc(kept + 1);
                if (out) {
                        memcpy(out, ht->head, ht->head_len);
                        memcpy(out + ht->head_len, tail_lin, ht->tail_len);
                        out[kept] = '\0';
                }
                free(tail_lin);
                if (ret_len)
                        *ret_len = kept;
                if (ret_truncated)
                        *ret_truncated = false;
                return out;
        }

        hlen = utf8_cut_end(ht->head, ht->head_len);
        tstart = utf8_cut_start(tail_lin, ht->tail_len);
        mlen = (size_t)snprintf(marker, sizeof(marker),
                                "\n[... %" PRIu64 " bytes omitted; the whole stream is in the output directory ...]\n",
                                ht->total - hlen - (ht->tail_len - tstart));
        out = malloc(hlen + mlen + (ht->tail_len - tstart) + 1);
        if (out) {
                memcpy(out, ht->head, hlen);
                memcpy(out + hlen, marker, mlen);
                memcpy(out + hlen + mlen, tail_lin + tstart, ht->tail_len - tstart);
                out[hlen + mlen + ht->tail_len - tstart] = '\0';
        }
        free(tail_lin);
        if (ret_len)
                *ret_len = hlen + mlen + ht->tail_len - tstart;
        if (ret_truncated)
                *ret_truncated = true;
        return out;
}

void dm_headtail_release(struct dm_headtail *ht)
{
        free(ht->head);
        free(ht->tail);
        ht->head = ht->tail = NULL;
}
