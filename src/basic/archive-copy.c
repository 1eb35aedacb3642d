/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/archive-copy.h"

#include <errno.h>
#include <pthread.h>

static locale_t utf8;
static pthread_once_t utf8_once = PTHREAD_ONCE_INIT;

static void utf8_make(void)
{
        utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

locale_t dm_archive_locale_begin(void)
{
        pthread_once(&utf8_once, utf8_make);
        return utf8 ? uselocale(utf8) : (locale_t)0;
}

void dm_archive_locale_end(locale_t previous)
{
        if (previous)
                uselocale(previous);
}

int dm_archive_copy_data(struct archive *in, const char *in_name, struct archive *out, const char *out_name,
                         struct dm_error *err)
{
        char buf[65536];

        for (;;) {
                la_ssize_t n = archive_read_data(in, buf, sizeof(buf));

                if (n < 0)
                        return dm_error_set(err, -EIO, "cannot read %s: %s", in_name, archive_error_string(in));
                if (n == 0)
                        return 0;
                if (archive_write_data(out, buf, (size_t)n) != n)
                        return dm_error_set(err, -EIO, "cannot write %s: %s", out_name, archive_error_string(out));
        }
}
