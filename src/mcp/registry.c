/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/mcp/registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/basic/log.h"
#include "src/basic/principal.h"

static struct {
        const struct dm_tool *tool;
        struct dm_tool *owned; /* dm_registry_add_copy's: tool, with its strings */
        json_object *described;
} entries[DM_REGISTRY_MAX];
static size_t n_entries;
static char *instructions;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

void dm_registry_add(const struct dm_tool *tools, size_t n)
{
        size_t i;

        pthread_mutex_lock(&reg_lock);
        for (i = 0; i < n && n_entries < DM_REGISTRY_MAX; i++)
                entries[n_entries++].tool = &tools[i];
        pthread_mutex_unlock(&reg_lock);
        if (i < n)
                log_error("the tool registry is full (%d tools): '%s' and %zu more left out", DM_REGISTRY_MAX,
                          tools[i].name, n - i - 1);
}

static void owned_free(struct dm_tool *t)
{
        if (!t)
                return;
        free((char *)t->name);
        free((char *)t->title);
        free((char *)t->description);
        free((char *)t->input_schema);
        free((char *)t->output_schema);
        free(t);
}

static char *dup_or_null(const char *s, bool *oom)
{
        char *c;

        if (!s)
                return NULL;
        c = strdup(s);
        if (!c)
                *oom = true;
        return c;
}

int dm_registry_add_copy(const struct dm_tool *tool)
{
        struct dm_tool *t = malloc(sizeof(*t));
        bool oom = !t;
        int r = 0;

        if (t) {
                *t = *tool;
                t->name = dup_or_null(tool->name, &oom);
                t->title = dup_or_null(tool->title, &oom);
                t->description = dup_or_null(tool->description, &oom);
                t->input_schema = dup_or_null(tool->input_schema, &oom);
                t->output_schema = dup_or_null(tool->output_schema, &oom);
        }
        if (oom) {
                owned_free(t);
                return -ENOMEM;
        }
        pthread_mutex_lock(&reg_lock);
        for (size_t i = 0; i < n_entries && r == 0; i++)
                if (strcmp(entries[i].tool->name, t->name) == 0)
                        r = -EEXIST;
        if (r == 0 && n_entries >= DM_REGISTRY_MAX)
                r = -ENOSPC;
        if (r == 0) {
                entries[n_entries].tool = t;
                entries[n_entries++].owned = t;
        }
        pthread_mutex_unlock(&reg_lock);
        if (r < 0)
                owned_free(t);
        return r;
}

bool dm_registry_visible(const struct dm_tool *tool, const char *principal)
{
        return tool && (!tool->nested_only || dm_principal_depth(principal) >= 1);
}

const struct dm_tool *dm_registry_find(const char *name)
{
        const struct dm_tool *t = NULL;

        pthread_mutex_lock(&reg_lock);
        for (size_t i = 0; i < n_entries; i++)
                if (strcmp(entries[i].tool->name, name) == 0) {
                        t = entries[i].tool;
                        break;
                }
        pthread_mutex_unlock(&reg_lock);
        return t;
}

size_t dm_registry_count(void)
{
        size_t n;

        pthread_mutex_lock(&reg_lock);
        n = n_entries;
        pthread_mutex_unlock(&reg_lock);
        return n;
}

const struct dm_tool *dm_registry_at(size_t i)
{
        const struct dm_tool *t;

        pthread_mutex_lock(&reg_lock);
        t = i < n_entries ? entries[i].tool : NULL;
        pthread_mutex_unlock(&reg_lock);
        return t;
}

static json_object *build(const struct dm_tool *t)
{
        json_object *o = json_object_new_object(), *ann = json_object_new_object(), *schema;

        json_object_object_add(o, "name", json_object_new_string(t->name));
        if (t->title)
                json_object_object_add(o, "title", json_object_new_string(t->title));
        json_object_object_add(o, "description", json_object_new_string(t->description));
        schema = json_tokener_parse(t->input_schema);
        if (!schema) {
                fprintf(stderr, "demesne: error: tool '%s' has an invalid input schema\n", t->name);
                abort();
        }
        json_object_object_add(o, "inputSchema", schema);
        if (t->output_schema) {
                schema = json_tokener_parse(t->output_schema);
                if (!schema) {
                        fprintf(stderr, "demesne: error: tool '%s' has an invalid output schema\n", t->name);
                        abort();
                }
                json_object_object_add(o, "outputSchema", schema);
        }
        if (t->title)
                json_object_object_add(ann, "title", json_object_new_string(t->title));
        json_object_object_add(ann, "readOnlyHint", json_object_new_boolean(t->read_only));
        json_object_object_add(ann, "destructiveHint", json_object_new_boolean(t->destructive));
        json_object_object_add(ann, "idempotentHint", json_object_new_boolean(t->idempotent));
        json_object_object_add(ann, "openWorldHint", json_object_new_boolean(t->open_world));
        json_object_object_add(o, "annotations", ann);
        return o;
}

json_object *dm_registry_describe(const struct dm_tool *tool)
{
        json_object *d = NULL;

        pthread_mutex_lock(&reg_lock);
        for (size_t i = 0; i < n_entries; i++)
                if (entries[i].tool == tool) {
                        if (!entries[i].described)
                                entries[i].described = build(tool);
                        /* A copy, never a reference: json-c counts references
                         * without atomics, and the caller's thread drops its
                         * answer while other connections' threads take and
                         * drop theirs (a lost update freed the cache under
                         * a concurrent tools/list: SIGSEGV in json-c). */
                        if (json_object_deep_copy(entries[i].described, &d, NULL) < 0)
                                d = NULL;
                        break;
                }
        pthread_mutex_unlock(&reg_lock);
        return d;
}

void dm_registry_clear(void)
{
        pthread_mutex_lock(&reg_lock);
        for (size_t i = 0; i < n_entries; i++) {
                json_object_put(entries[i].described);
                owned_free(entries[i].owned);
        }
        memset(entries, 0, sizeof(entries));
        n_entries = 0;
        free(instructions);
        instructions = NULL;
        pthread_mutex_unlock(&reg_lock);
}

void dm_registry_set_instructions(const char *text)
{
        pthread_mutex_lock(&reg_lock);
        free(instructions);
        instructions = text ? strdup(text) : NULL;
        pthread_mutex_unlock(&reg_lock);
}

json_object *dm_registry_instructions(void)
{
        json_object *o;

        pthread_mutex_lock(&reg_lock);
        o = json_object_new_string(instructions ? instructions
                                                : "demesne runs shell commands in disposable Linux containers.");
        pthread_mutex_unlock(&reg_lock);
        return o;
}

static json_object *text_block(const char *text)
{
        json_object *content = json_object_new_array(), *block = json_object_new_object();

        json_object_object_add(block, "type", json_object_new_string("text"));
        json_object_object_add(block, "text", json_object_new_string(text));
        json_object_array_add(content, block);
        return content;
}

json_object *dm_tool_result_ok(json_object *structured)
{
        json_object *r = json_object_new_object();
        const char *text =
                json_object_to_json_string_ext(structured, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);

        json_object_object_add(r, "content", text_block(text));
        json_object_object_add(r, "structuredContent", structured);
        json_object_object_add(r, "isError", json_object_new_boolean(0));
        return r;
}

json_object *dm_tool_result_error(const char *fmt, ...)
{
        char msg[2048];
        json_object *r = json_object_new_object();
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        json_object_object_add(r, "content", text_block(msg));
        json_object_object_add(r, "isError", json_object_new_boolean(1));
        return r;
}
