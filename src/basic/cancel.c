/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/cancel.h"

#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

int dm_cancel_init(struct dm_cancel *c)
{
        atomic_init(&c->fired, false);
        c->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        return c->fd < 0 ? -errno : 0;
}

void dm_cancel_fire(struct dm_cancel *c)
{
        uint64_t one = 1;

        if (atomic_exchange(&c->fired, true))
                return;
        if (c->fd >= 0 && write(c->fd, &one, sizeof(one)) < 0) {
                /* The counter cannot overflow from one write; nothing to do. */
        }
}

bool dm_cancel_fired(struct dm_cancel *c)
{
        return atomic_load(&c->fired);
}

void dm_cancel_release(struct dm_cancel *c)
{
        if (c->fd >= 0)
                close(c->fd);
        c->fd = -1;
}
