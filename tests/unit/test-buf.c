/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <errno.h>

#include "src/basic/buf.h"
#include "tests/tap.h"

int main(void)
{
        struct dm_buf b;
        char big[300];

        dm_buf_init(&b, 10);
        is_int(dm_buf_append(&b, "hello", 5), 0, "append within the cap");
        is_int(dm_buf_append(&b, "world", 5), 0, "append up to the cap exactly");
        is_str(b.data, "helloworld", "data is NUL-terminated");
        is_int(dm_buf_append(&b, "!", 1), -E2BIG, "one byte past the cap is refused");
        is_int(b.len, 10, "a refused append changes nothing");
        dm_buf_reset(&b);
        is_int(b.len, 0, "reset empties");
        is_int(dm_buf_printf(&b, "%d-%s", 42, "x"), 0, "printf appends");
        is_str(b.data, "42-x", "printf output");
        dm_buf_release(&b);

        dm_buf_init(&b, 1 << 20);
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        is_int(dm_buf_printf(&b, "%s%s", big, big), 0, "printf longer than the stack buffer");
        is_int(b.len, 2 * (sizeof(big) - 1), "long printf length");
        char *s = dm_buf_steal(&b);
        ok(s && strlen(s) == 2 * (sizeof(big) - 1) && b.data == NULL, "steal hands over the data");
        free(s);

        dm_buf_init(&b, 100);
        s = dm_buf_steal(&b);
        is_str(s, "", "steal of an empty buffer gives an empty string");
        free(s);
        static const char *const words[] = { "a", "b", "c", NULL };
        dm_buf_init(&b, 100);
        is_int(dm_buf_join(&b, words, ", "), 0, "join");
        is_str(b.data, "a, b, c", "join puts the separator between items only");
        dm_buf_release(&b);

        dm_buf_init(&b, 4);
        is_int(dm_buf_printf(&b, "%s", "toolong"), -E2BIG, "printf past the cap is refused");
        dm_buf_release(&b);
        return done_testing();
}
