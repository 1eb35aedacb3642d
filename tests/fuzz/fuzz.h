/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_FUZZ_H
#define DM_TESTS_FUZZ_H

/* What the fuzz targets share. Each target is one file defining
 * LLVMFuzzerTestOneInput; replay.c runs it under `make check`, run.sh under
 * libFuzzer. A broken property aborts in every build (assert would vanish
 * under NDEBUG): libFuzzer then saves the input, make check fails. */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_CHECK(cond)                                                                                 \
        do {                                                                                             \
                if (!(cond)) {                                                                           \
                        fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
                        abort();                                                                         \
                }                                                                                        \
        } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated malloc'd copy of data (the parsers under test take C
 * strings or need a terminator past the end); aborts on ENOMEM. */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
        char *s = malloc(size + 1);

        FUZZ_CHECK(s);
        memcpy(s, data, size);
        s[size] = '\0';
        return s;
}

/* Whether s is one line (what every message bound for a log or a client is). */
static inline int fuzz_one_line(const char *s)
{
        return !strpbrk(s, "\r\n");
}

#endif
