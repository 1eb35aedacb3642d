/* SPDX-License-Identifier: MIT */
#ifndef DM_TOOLS_TOOLS_H
#define DM_TOOLS_TOOLS_H

/* Each tool family registers its tools with the MCP registry. */

void dm_tools_script_register(void);

/* All families, in the order tools/list shows them. */
static inline void dm_tools_register_all(void)
{
        dm_tools_script_register();
}

#endif
