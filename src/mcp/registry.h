/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_REGISTRY_H
#define DM_MCP_REGISTRY_H

/* The tool registry: each tool family registers its tools into one at
 * start; tools/list pages through them, tools/call finds one by name. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>

struct dm_call;

/* Returns a CallToolResult object (owned by the caller), built with
 * dm_tool_result_ok / dm_tool_result_error; NULL = cancelled, send nothing. */
typedef json_object *(*dm_tool_handler)(struct dm_call *call, json_object *args);

struct dm_tool {
        const char *name;
        const char *title;
        const char *description;
        const char *input_schema;  /* JSON text */
        const char *output_schema; /* JSON text, may be NULL */
        bool read_only, destructive, idempotent, open_world;
        /* Offered only to callers inside a nested sandbox (a principal of
         * depth >= 1): tools/list leaves it out and tools/call does not know
         * it for the host's own clients. */
        bool nested_only;
        dm_tool_handler handler;
        void *data; /* the family's, borrowed: the handler finds it with dm_call_tool */
};

/* A set of tools one or more MCP servers serve (dm_mcp_server_new borrows
 * it: it must outlive them). Each tool family registers into the registry
 * it is given; two registries in one process share nothing. Thread-safe
 * once made; tools are added before serving. */
struct dm_registry;

/* NULL when out of memory. */
struct dm_registry *dm_registry_new(void);
/* Frees the registry, its copies, its owned strings and its cached
 * descriptions; tables given to dm_registry_add are not touched. NULL is
 * fine. No server may still serve it. */
void dm_registry_free(struct dm_registry *reg);

/* The entries are copied; their strings and data stay borrowed and must
 * outlive the registry (static text, or what was given to dm_registry_own).
 * Past the registry's room (DM_REGISTRY_MAX tools), the rest are left out
 * with an error log. */
#define DM_REGISTRY_MAX 256
void dm_registry_add(struct dm_registry *reg, const struct dm_tool *tools, size_t n);
/* For tools made at run time (a host MCP server's): the registry copies
 * tool's strings and frees them with itself; data stays borrowed.
 * 0, -ENOSPC when the registry is full, -EEXIST when the name is taken,
 * -ENOMEM. */
int dm_registry_add_copy(struct dm_registry *reg, const struct dm_tool *tool);
/* Takes s (malloc'd: a schema, description or argument table a family
 * built for this registry's tools) and free()s it with the registry.
 * Returns s; NULL when s is NULL or when out of memory (s is freed then). */
void *dm_registry_own(struct dm_registry *reg, void *s);

const struct dm_tool *dm_registry_find(struct dm_registry *reg, const char *name);
/* Whether principal's calls may see and call tool (nested_only). */
bool dm_registry_visible(const struct dm_tool *tool, const char *principal);
size_t dm_registry_count(struct dm_registry *reg);
const struct dm_tool *dm_registry_at(struct dm_registry *reg, size_t i);
/* The tool's tools/list entry, parsed once and cached. Returns a new
 * object, the caller's alone; NULL when tool is not reg's. */
json_object *dm_registry_describe(struct dm_registry *reg, const struct dm_tool *tool);
/* The same entry as JSON text (plain, slashes unescaped, as dm_rpc_serialize
 * prints), printed once and kept for the registry's life: the caller may
 * read it from any thread without a lock and must not free it. Its length
 * in *ret_len. NULL when tool is not reg's or memory ran out. */
const char *dm_registry_describe_text(struct dm_registry *reg, const struct dm_tool *tool, size_t *ret_len);
/* The initialize result's instructions: set once at start (before serving),
 * a copy kept; NULL until then. */
void dm_registry_set_instructions(struct dm_registry *reg, const char *text);
/* A new json string of the instructions (a fallback sentence when unset). */
json_object *dm_registry_instructions(struct dm_registry *reg);

/* CallToolResult builders: structuredContent plus the same JSON as text. */
json_object *dm_tool_result_ok(json_object *structured);
json_object *dm_tool_result_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
