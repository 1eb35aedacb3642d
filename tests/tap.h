/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_TAP_H
#define DM_TESTS_TAP_H

/* Minimal TAP producer for automake's tap-driver.sh: the plan comes last
 * (done_testing), so a test file does not have to count its cases. */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

static inline __attribute__((format(printf, 2, 0))) void tap_vok(int cond, const char *fmt, va_list ap)
{
        tap_n++;
        if (!cond)
                tap_failed++;
        printf("%sok %d - ", cond ? "" : "not ", tap_n);
        vprintf(fmt, ap);
        printf("\n");
        fflush(stdout);
}

static inline __attribute__((format(printf, 2, 3))) int ok(int cond, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        tap_vok(cond, fmt, ap);
        va_end(ap);
        return cond;
}

#define is_int(got, want, ...)                                           \
        do {                                                             \
                long long _g = (long long)(got), _w = (long long)(want); \
                if (!ok(_g == _w, __VA_ARGS__))                          \
                        printf("#   got %lld, want %lld\n", _g, _w);     \
        } while (0)

#define is_str(got, want, ...)                                                                       \
        do {                                                                                         \
                const char *_g = (got), *_w = (want);                                                \
                if (!ok(_g && _w && strcmp(_g, _w) == 0, __VA_ARGS__))                               \
                        printf("#   got '%s', want '%s'\n", _g ? _g : "(null)", _w ? _w : "(null)"); \
        } while (0)

static inline void diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void diag(const char *fmt, ...)
{
        va_list ap;
        printf("# ");
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        fflush(stdout);
}

/* A wall-clock bound in a test checks liveness ("it ended, and did not
 * hang"), never speed: speed is measured in bench/. Each bound is written
 * 5-10 times what the step takes on an idle machine, and goes through
 * slack_ms(), which widens it where everything runs slower: 4x under a
 * sanitizer, and DEMESNE_TEST_TIME_SCALE times more (an integer; .ci/run
 * sets it for valgrind, and anyone may on a loaded machine). */
static inline long long slack_ms(long long ms)
{
        const char *s = getenv("DEMESNE_TEST_TIME_SCALE");
        long long scale = s && atoi(s) > 0 ? atoi(s) : 1;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
        scale *= 4;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
        scale *= 4;
#endif
#endif
        return ms * scale;
}

static inline int done_testing(void)
{
        printf("1..%d\n", tap_n);
        return tap_failed ? 1 : 0;
}

/* One check this engine cannot make true, passed over with the reason
 * (which must name what is missing and what covers it instead). */
static inline void skip(const char *reason)
{
        printf("ok %d # SKIP %s\n", ++tap_n, reason);
        fflush(stdout);
}

/* For tests that need something missing: the reason must name it. */
static inline int skip_all(const char *reason)
{
        printf("1..0 # SKIP %s\n", reason);
        return 77;
}

#endif
