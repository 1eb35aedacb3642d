/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/error.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int dm_error_set(struct dm_error *err, int code, const char *fmt, ...)
{
        va_list ap;

        if (code >= 0)
                code = -EIO;
        if (!err)
                return code;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        return code;
}

int dm_error_wrap(struct dm_error *err, const char *fmt, ...)
{
        char prefix[DM_ERROR_MSG_MAX], joined[2 * DM_ERROR_MSG_MAX + 4];
        va_list ap;

        if (!err)
                return -EIO;
        if (err->code == 0)
                err->code = -EIO;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof(prefix), fmt, ap);
        va_end(ap);
        snprintf(joined, sizeof(joined), "%s: %s", prefix, err->msg);
        /* Too long a chain keeps its start: the outermost context. */
        memcpy(err->msg, joined, sizeof(err->msg) - 1);
        err->msg[sizeof(err->msg) - 1] = '\0';
        return err->code;
}

void dm_error_clear(struct dm_error *err)
{
        if (!err)
                return;
        err->code = 0;
        err->msg[0] = '\0';
}
