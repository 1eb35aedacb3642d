/* SPDX-License-Identifier: MIT */
#ifndef DM_TOOLS_TOOLS_H
#define DM_TOOLS_TOOLS_H

/* Each tool family registers its tools with the MCP registry. */

#include <stdbool.h>
#include <stdint.h>

#include "src/jobs.h"

struct dm_mcp_server;

void dm_tools_script_register(void);
void dm_tools_jobs_register(void);
void dm_tools_sandbox_register(void);
void dm_tools_agent_register(void);

/* A command's output as a result string: invalid UTF-8 replaced (U+FFFD). */
json_object *dm_tools_text_field(const char *s, size_t len);
/* The fields sandbox_script and sandbox_exec results share (TOOLS.md). */
json_object *dm_tools_exec_result(int exit_code, const char *out, size_t out_len, bool out_truncated,
                                  const char *err, size_t err_len, bool err_truncated, bool timed_out,
                                  int64_t duration_ms);

/* Tells the session that started a background job that it ended: a
 * notifications/message at level notice, logger demesne.jobs, whose data
 * holds job_id, tool, status and exit_code. */
void dm_tools_job_notify_end(struct dm_job *job, struct dm_mcp_server *srv, uint64_t session,
                             enum dm_job_status status, bool has_exit, int exit_code);

/* All families, in the order tools/list shows them. */
static inline void dm_tools_register_all(void)
{
        dm_tools_script_register();
        dm_tools_sandbox_register();
        dm_tools_agent_register();
        dm_tools_jobs_register();
}

#endif
