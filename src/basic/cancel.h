/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_CANCEL_H
#define DM_UTIL_CANCEL_H

/* A one-shot cancellation signal that blocking loops can poll() on: firing it
 * makes fd readable for good. Shared between the thread that runs a call and
 * the thread that reads notifications/cancelled. */

#include <stdatomic.h>
#include <stdbool.h>

struct dm_cancel {
        int fd; /* eventfd, close-on-exec; -1 when init failed */
        atomic_bool fired;
};

/* 0 or negative errno. */
int dm_cancel_init(struct dm_cancel *c);
/* Idempotent and async-signal-safe. */
void dm_cancel_fire(struct dm_cancel *c);
bool dm_cancel_fired(struct dm_cancel *c);
void dm_cancel_release(struct dm_cancel *c);

#endif
