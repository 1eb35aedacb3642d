/* SPDX-License-Identifier: MIT */
#ifndef DM_UTIL_LOG_H
#define DM_UTIL_LOG_H

/* One line per event on stderr or the --log-file (never stdout: stdout carries MCP only).
 * The logger is one per process, by nature: it writes to the process's
 * stderr (or the one --log-file), at one level, and every layer logs
 * without being handed a logger. What is not one per process is who else
 * wants the records: each MCP server adds its own sink (a hook) to forward
 * them as notifications/message, and removes it when it goes. */

enum dm_log_level {
        DM_LOG_DEBUG = 0,
        DM_LOG_INFO,
        DM_LOG_NOTICE,
        DM_LOG_WARNING,
        DM_LOG_ERROR,
};

typedef void (*dm_log_hook)(enum dm_log_level level, const char *line, void *userdata);

void dm_log_set_level(enum dm_log_level level);
enum dm_log_level dm_log_get_level(void);
/* Parses "debug".."error" (also MCP's syslog names); -EINVAL if unknown. */
int dm_log_level_parse(const char *name, enum dm_log_level *ret);
const char *dm_log_level_name(enum dm_log_level level);
/* Adds a sink that gets every record logged at or above the level, from
 * the logging thread, after the line is written. Returns a handle (> 0) for
 * dm_log_hook_remove, -EINVAL for a NULL hook, -ENOSPC past DM_LOG_HOOKS_MAX
 * sinks. */
#define DM_LOG_HOOKS_MAX 16
int dm_log_hook_add(dm_log_hook hook, void *userdata);
/* Removes the sink; returns once no call of it runs, so its userdata may be
 * freed then. The other sinks are untouched. Never call it from a hook (it
 * would wait for itself). An unknown handle does nothing. */
void dm_log_hook_remove(int handle);

/* Sends every later line to PATH instead of stderr: appended, created 0600,
 * O_CLOEXEC, never through a symlink, a regular file only. -errno on failure
 * (stderr stays the destination). */
int dm_log_open_file(const char *path);

void dm_log(enum dm_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...) dm_log(DM_LOG_DEBUG, __VA_ARGS__)
#define log_info(...) dm_log(DM_LOG_INFO, __VA_ARGS__)
#define log_warning(...) dm_log(DM_LOG_WARNING, __VA_ARGS__)
#define log_error(...) dm_log(DM_LOG_ERROR, __VA_ARGS__)

#endif
