/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_TIMEUTIL_H
#define DM_UTIL_TIMEUTIL_H

#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds. */
int64_t dm_now_ms(void);
/* CLOCK_REALTIME in milliseconds since the epoch. */
int64_t dm_wall_ms(void);

#endif
