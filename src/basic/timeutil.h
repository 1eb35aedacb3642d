/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_TIMEUTIL_H
#define DM_UTIL_TIMEUTIL_H

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds. */
int64_t dm_now_ms(void);
/* CLOCK_REALTIME in milliseconds since the epoch. */
int64_t dm_wall_ms(void);
/* CLOCK_MONOTONIC ms milliseconds from now, for pthread_cond_timedwait on a
 * condition made with pthread_condattr_setclock(CLOCK_MONOTONIC). */
struct timespec;
void dm_monotonic_after(int64_t ms, struct timespec *ret);

/* Seconds since the epoch as RFC 3339 UTC ("2026-12-04T10:00:00Z"). buf
 * holds at least 21 bytes. */
void dm_time_format(int64_t seconds, char *buf, size_t len);
/* RFC 3339 ("2026-12-04T10:00:00Z", an optional fraction, "Z" or an offset
 * "+01:00", none meaning UTC; also a bare date, "2026-12-04", as midnight
 * UTC) to seconds
 * since the epoch, in *ret. -EINVAL when s is anything else, trailing text
 * included. */
int dm_time_parse(const char *s, int64_t *ret);

#endif
