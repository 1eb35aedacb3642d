/* SPDX-License-Identifier: MIT */
/* Where a run's output and progress go while it runs: the one place the
 * tools that start runs (sandbox_script, the agent tools, sandbox_exec)
 * turn the core's callbacks into MCP progress, log notes and a background
 * job's output. */
#include "config.h"

#include <stdio.h>

#include "src/core/jobs.h"
#include "src/mcp/server.h"
#include "src/tools/tools.h"

void dm_tools_sink_progress(void *userdata, int64_t elapsed_ms, uint64_t output_bytes)
{
        const struct dm_tools_sink *k = userdata;
        char msg[128];

        if (!k->call)
                return;
        snprintf(msg, sizeof(msg), "%s for %lld s, %llu bytes of %s", k->doing ? k->doing : "running",
                 (long long)(elapsed_ms / 1000), (unsigned long long)output_bytes,
                 k->bytes_of ? k->bytes_of : "output");
        dm_call_progress(k->call, (double)elapsed_ms / 1000.0, 0, msg);
}

void dm_tools_sink_message(void *userdata, const char *message)
{
        const struct dm_tools_sink *k = userdata;

        if (k->call)
                dm_call_note(k->call, message);
}

int dm_tools_sink_output(void *userdata, int stream, const char *data, size_t len)
{
        const struct dm_tools_sink *k = userdata;

        if (k->job)
                dm_job_add_output(k->job, stream, data, len);
        return 0;
}
