/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/log.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static enum dm_log_level log_level = DM_LOG_INFO;
static int log_fd = STDERR_FILENO; /* --log-file's, or stderr */
static pthread_cond_t hook_idle = PTHREAD_COND_INITIALIZER;

/* The sinks, guarded by log_lock. A slot is free when handle is 0; a
 * removed one keeps its handle (hook NULL: no new calls) until its running
 * calls end, so it is never reused under a call that still reads it. */
static struct {
        dm_log_hook hook;
        void *data;
        int handle;
        unsigned calls; /* running */
} hooks[DM_LOG_HOOKS_MAX];
static int next_handle;

static const struct {
        const char *name;
        enum dm_log_level level;
} level_names[] = {
        { "debug", DM_LOG_DEBUG },     { "info", DM_LOG_INFO },    { "notice", DM_LOG_NOTICE },
        { "warning", DM_LOG_WARNING }, { "warn", DM_LOG_WARNING }, { "error", DM_LOG_ERROR },
        { "critical", DM_LOG_ERROR },  { "alert", DM_LOG_ERROR },  { "emergency", DM_LOG_ERROR },
};

void dm_log_set_level(enum dm_log_level level)
{
        pthread_mutex_lock(&log_lock);
        log_level = level;
        pthread_mutex_unlock(&log_lock);
}

enum dm_log_level dm_log_get_level(void)
{
        enum dm_log_level l;

        pthread_mutex_lock(&log_lock);
        l = log_level;
        pthread_mutex_unlock(&log_lock);
        return l;
}

int dm_log_level_parse(const char *name, enum dm_log_level *ret)
{
        for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
                if (strcasecmp(name, level_names[i].name) == 0) {
                        *ret = level_names[i].level;
                        return 0;
                }
        return -EINVAL;
}

const char *dm_log_level_name(enum dm_log_level level)
{
        switch (level) {
        case DM_LOG_DEBUG: return "debug";
        case DM_LOG_INFO: return "info";
        case DM_LOG_NOTICE: return "notice";
        case DM_LOG_WARNING: return "warning";
        default: return "error";
        }
}

int dm_log_hook_add(dm_log_hook hook, void *userdata)
{
        int r = -ENOSPC;

        if (!hook)
                return -EINVAL;
        pthread_mutex_lock(&log_lock);
        for (size_t i = 0; i < DM_LOG_HOOKS_MAX; i++)
                if (!hooks[i].handle) {
                        if (++next_handle <= 0) /* after INT_MAX adds: start over */
                                next_handle = 1;
                        hooks[i].hook = hook;
                        hooks[i].data = userdata;
                        hooks[i].handle = r = next_handle;
                        break;
                }
        pthread_mutex_unlock(&log_lock);
        return r;
}

void dm_log_hook_remove(int handle)
{
        if (handle <= 0)
                return;
        pthread_mutex_lock(&log_lock);
        for (size_t i = 0; i < DM_LOG_HOOKS_MAX; i++)
                if (hooks[i].handle == handle) {
                        hooks[i].hook = NULL;
                        /* A call may still run on another thread (a log
                         * line of the engine probe while the server quits at
                         * start): its userdata, the MCP server, is freed as
                         * soon as this returns. */
                        while (hooks[i].calls)
                                pthread_cond_wait(&hook_idle, &log_lock);
                        hooks[i].data = NULL;
                        hooks[i].handle = 0;
                        break;
                }
        pthread_mutex_unlock(&log_lock);
}

int dm_log_open_file(const char *path)
{
        struct stat st;
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
                close(fd);
                return -EINVAL;
        }
        /* Blocking writes again: O_NONBLOCK only kept open() from hanging on a FIFO. */
        fcntl(fd, F_SETFL, O_APPEND);
        pthread_mutex_lock(&log_lock);
        if (log_fd != STDERR_FILENO)
                close(log_fd); /* a second --log-file wins */
        log_fd = fd;
        pthread_mutex_unlock(&log_lock);
        return 0;
}

void dm_log(enum dm_log_level level, const char *fmt, ...)
{
        char line[2048];
        struct {
                dm_log_hook hook;
                void *data;
                size_t slot;
        } call[DM_LOG_HOOKS_MAX];
        size_t n_calls = 0;
        int fd;
        va_list ap;
        int saved = errno;

        pthread_mutex_lock(&log_lock);
        if (level < log_level) {
                pthread_mutex_unlock(&log_lock);
                errno = saved;
                return;
        }
        for (size_t i = 0; i < DM_LOG_HOOKS_MAX; i++)
                if (hooks[i].hook) {
                        hooks[i].calls++;
                        call[n_calls].hook = hooks[i].hook;
                        call[n_calls].data = hooks[i].data;
                        call[n_calls++].slot = i;
                }
        fd = log_fd;
        pthread_mutex_unlock(&log_lock);

        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        if (fd == STDERR_FILENO) {
                fprintf(stderr, "demesne: %s: %s\n", dm_log_level_name(level), line);
        } else {
                char out[sizeof(line) + 64];
                int n = snprintf(out, sizeof(out), "demesne: %s: %s\n", dm_log_level_name(level), line);

                /* One write per line: O_APPEND keeps lines whole across threads. */
                if (n > 0 && write(fd, out, (size_t)n < sizeof(out) ? (size_t)n : sizeof(out) - 1) < 0) {
                        /* Nowhere else to say it. */
                }
        }
        for (size_t i = 0; i < n_calls; i++) {
                call[i].hook(level, line, call[i].data);
                pthread_mutex_lock(&log_lock);
                if (--hooks[call[i].slot].calls == 0)
                        pthread_cond_broadcast(&hook_idle);
                pthread_mutex_unlock(&log_lock);
        }
        errno = saved;
}
