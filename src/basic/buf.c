/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void dm_buf_init(struct dm_buf *b, size_t max)
{
        b->data = NULL;
        b->len = 0;
        b->alloc = 0;
        b->max = max;
}

static int reserve(struct dm_buf *b, size_t need)
{
        size_t alloc;
        char *p;

        if (need + 1 <= b->alloc)
                return 0;
        alloc = b->alloc ? b->alloc : 256;
        while (alloc < need + 1)
                alloc *= 2;
        if (alloc > b->max + 1)
                alloc = b->max + 1;
        p = realloc(b->data, alloc);
        if (!p)
                return -ENOMEM;
        b->data = p;
        b->alloc = alloc;
        return 0;
}

int dm_buf_append(struct dm_buf *b, const void *p, size_t n)
{
        int r;

        if (n > b->max || b->len > b->max - n)
                return -E2BIG;
        r = reserve(b, b->len + n);
        if (r < 0)
                return r;
        if (n)
                memcpy(b->data + b->len, p, n);
        b->len += n;
        b->data[b->len] = '\0';
        return 0;
}

int dm_buf_printf(struct dm_buf *b, const char *fmt, ...)
{
        char small[512];
        va_list ap;
        int n, r;

        va_start(ap, fmt);
        n = vsnprintf(small, sizeof(small), fmt, ap);
        va_end(ap);
        if (n < 0)
                return -EINVAL;
        if ((size_t)n < sizeof(small))
                return dm_buf_append(b, small, (size_t)n);
        if ((size_t)n > b->max || b->len > b->max - (size_t)n)
                return -E2BIG;
        r = reserve(b, b->len + (size_t)n);
        if (r < 0)
                return r;
        va_start(ap, fmt);
        vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
        va_end(ap);
        b->len += (size_t)n;
        return 0;
}

int dm_buf_join(struct dm_buf *b, const char *const *strv, const char *sep)
{
        int r = 0;

        for (size_t i = 0; strv && strv[i] && r >= 0; i++)
                r = dm_buf_printf(b, "%s%s", i ? sep : "", strv[i]);
        return r;
}

void dm_buf_reset(struct dm_buf *b)
{
        b->len = 0;
        if (b->data)
                b->data[0] = '\0';
}

char *dm_buf_steal(struct dm_buf *b)
{
        char *p = b->data;

        if (!p)
                p = strdup("");
        b->data = NULL;
        b->len = 0;
        b->alloc = 0;
        return p;
}

void dm_buf_release(struct dm_buf *b)
{
        free(b->data);
        b->data = NULL;
        b->len = 0;
        b->alloc = 0;
}
