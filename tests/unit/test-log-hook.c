/* SPDX-License-Identifier: MIT */
/* The log sinks outlive no one: dm_log_hook_remove returns only once no
 * call of the removed hook runs. The MCP server is the hook's userdata and
 * is freed right after it removes its sink; a log line from another thread
 * (the engine probe, while a server refused at start quits) used it after
 * the free (ThreadSanitizer: heap-use-after-free in log_hook).
 * And sinks are many: one removed, the others keep receiving (two MCP
 * servers in one process each get the records). */
#include "config.h"

#include <errno.h>
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

static void count(enum dm_log_level level, const char *line, void *userdata)
{
        (void)level;
        (void)line;
        atomic_fetch_add((atomic_int *)userdata, 1);
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
        atomic_int first = 0, second = 0;
        pthread_t th;
        int h, h1, h2, full = 0;

        h = dm_log_hook_add(hook, &o);
        ok(h > 0, "a sink is added (handle %d)", h);
        pthread_create(&th, NULL, logger, NULL);
        while (!atomic_load(&o.in_hook))
                usleep(1000);
        dm_log_hook_remove(h);
        atomic_store(&o.freed, true);
        pthread_join(th, NULL);
        is_int(atomic_load(&o.used_after_free), 0, "removing waits for a running hook call before its userdata goes");
        dm_log(DM_LOG_INFO, "after unhooking");
        is_int(atomic_load(&o.used_after_free), 0, "no call of the removed hook after removing it");

        h1 = dm_log_hook_add(count, &first);
        h2 = dm_log_hook_add(count, &second);
        ok(h1 > 0 && h2 > 0 && h1 != h2 && h1 != h, "two sinks, two handles, none reused");
        dm_log(DM_LOG_INFO, "to both");
        ok(atomic_load(&first) == 1 && atomic_load(&second) == 1, "each sink gets the record");
        dm_log_hook_remove(h1);
        dm_log(DM_LOG_INFO, "to the second only");
        dm_log(DM_LOG_DEBUG, "below the level: to none");
        is_int(atomic_load(&first), 1, "the removed sink gets nothing more");
        is_int(atomic_load(&second), 2, "the other keeps receiving");
        dm_log_hook_remove(h1); /* twice: nothing */
        dm_log_hook_remove(0);
        dm_log(DM_LOG_WARNING, "still there");
        is_int(atomic_load(&second), 3, "removing an unknown handle touches no other sink");
        dm_log_hook_remove(h2);

        is_int(dm_log_hook_add(NULL, NULL), -EINVAL, "a NULL hook is refused");
        for (int i = 0; i < DM_LOG_HOOKS_MAX; i++)
                full += dm_log_hook_add(count, &first) > 0;
        is_int(full, DM_LOG_HOOKS_MAX, "%d sinks fit", DM_LOG_HOOKS_MAX);
        is_int(dm_log_hook_add(count, &first), -ENOSPC, "one more is refused");
        return done_testing();
}
