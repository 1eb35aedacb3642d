/* SPDX-License-Identifier: MIT */
/* The log hook outlives no one: dm_log_set_hook returns only once no call
 * of the old hook runs. The MCP server is the hook's userdata and is freed
 * right after it unhooks itself; a log line from another thread (the
 * engine probe, while a server refused at start quits) used it after the
 * free (ThreadSanitizer: heap-use-after-free in log_hook). */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "src/basic/log.h"
#include "tests/tap.h"

struct owner {
        atomic_bool freed; /* stands for free() of the userdata */
        atomic_bool in_hook;
        atomic_int used_after_free;
};

static void hook(enum dm_log_level level, const char *line, void *userdata)
{
        struct owner *o = userdata;

        (void)level;
        (void)line;
        atomic_store(&o->in_hook, true);
        usleep(300 * 1000); /* a slow send to a client */
        if (atomic_load(&o->freed))
                atomic_fetch_add(&o->used_after_free, 1);
}

static void *logger(void *arg)
{
        (void)arg;
        dm_log(DM_LOG_INFO, "a line from another thread");
        return NULL;
}

int main(void)
{
        struct owner o = { 0 };
        pthread_t th;

        dm_log_set_hook(hook, &o);
        pthread_create(&th, NULL, logger, NULL);
        while (!atomic_load(&o.in_hook))
                usleep(1000);
        dm_log_set_hook(NULL, NULL);
        atomic_store(&o.freed, true);
        pthread_join(th, NULL);
        is_int(atomic_load(&o.used_after_free), 0, "unhooking waits for a running hook call before its userdata goes");
        dm_log(DM_LOG_INFO, "after unhooking");
        is_int(atomic_load(&o.used_after_free), 0, "no call of the old hook after unhooking");
        return done_testing();
}
