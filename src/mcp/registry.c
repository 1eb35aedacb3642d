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

struct entry {
        struct dm_tool tool; /* a copy of the table's entry, or of add_copy's tool */
        bool owned;          /* add_copy's: tool's strings are the registry's */
        json_object *described;
        char *text; /* described's JSON text, printed once (describe_text) */
        size_t text_len;
};

struct dm_registry {
        /* Entries never move: find, at and dm_call_tool hand out their
         * addresses for the registry's life. */
        struct entry entries[DM_REGISTRY_MAX];
        size_t n_entries;
        char *instructions;
        void **owned; /* dm_registry_own's */
        size_t n_owned, cap_owned;
        pthread_mutex_t lock;
};

struct dm_registry *dm_registry_new(void)
{
        struct dm_registry *reg = calloc(1, sizeof(*reg));

        if (reg)
                pthread_mutex_init(&reg->lock, NULL);
        return reg;
}

static void owned_release(struct dm_tool *t)
{
        free((char *)t->name);
        free((char *)t->title);
        free((char *)t->description);
        free((char *)t->input_schema);
        free((char *)t->output_schema);
}

void dm_registry_free(struct dm_registry *reg)
{
        if (!reg)
                return;
        for (size_t i = 0; i < reg->n_entries; i++) {
                json_object_put(reg->entries[i].described);
                free(reg->entries[i].text);
                if (reg->entries[i].owned)
                        owned_release(&reg->entries[i].tool);
        }
        for (size_t i = 0; i < reg->n_owned; i++)
                free(reg->owned[i]);
        free(reg->owned);
        free(reg->instructions);
        pthread_mutex_destroy(&reg->lock);
        free(reg);
}

void dm_registry_add(struct dm_registry *reg, const struct dm_tool *tools, size_t n)
{
        size_t i;

        pthread_mutex_lock(&reg->lock);
        for (i = 0; i < n && reg->n_entries < DM_REGISTRY_MAX; i++)
                reg->entries[reg->n_entries++].tool = tools[i];
        pthread_mutex_unlock(&reg->lock);
        if (i < n)
                log_error("the tool registry is full (%d tools): '%s' and %zu more left out", DM_REGISTRY_MAX,
                          tools[i].name, n - i - 1);
}

void *dm_registry_own(struct dm_registry *reg, void *s)
{
        if (!s)
                return NULL;
        pthread_mutex_lock(&reg->lock);
        if (reg->n_owned == reg->cap_owned) {
                size_t cap = reg->cap_owned ? 2 * reg->cap_owned : 16;
                void **p = realloc(reg->owned, cap * sizeof(*p));

                if (!p) {
                        pthread_mutex_unlock(&reg->lock);
                        free(s);
                        return NULL;
                }
                reg->owned = p;
                reg->cap_owned = cap;
        }
        reg->owned[reg->n_owned++] = s;
        pthread_mutex_unlock(&reg->lock);
        return s;
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

int dm_registry_add_copy(struct dm_registry *reg, const struct dm_tool *tool)
{
        struct dm_tool t = *tool;
        bool oom = false;
        int r = 0;

        t.name = dup_or_null(tool->name, &oom);
        t.title = dup_or_null(tool->title, &oom);
        t.description = dup_or_null(tool->description, &oom);
        t.input_schema = dup_or_null(tool->input_schema, &oom);
        t.output_schema = dup_or_null(tool->output_schema, &oom);
        if (oom) {
                owned_release(&t);
                return -ENOMEM;
        }
        pthread_mutex_lock(&reg->lock);
        for (size_t i = 0; i < reg->n_entries && r == 0; i++)
                if (strcmp(reg->entries[i].tool.name, t.name) == 0)
                        r = -EEXIST;
        if (r == 0 && reg->n_entries >= DM_REGISTRY_MAX)
                r = -ENOSPC;
        if (r == 0) {
                reg->entries[reg->n_entries].tool = t;
                reg->entries[reg->n_entries++].owned = true;
        }
        pthread_mutex_unlock(&reg->lock);
        if (r < 0)
                owned_release(&t);
        return r;
}

bool dm_registry_visible(const struct dm_tool *tool, const char *principal)
{
        return tool && (!tool->nested_only || dm_principal_depth(principal) >= 1);
}

const struct dm_tool *dm_registry_find(struct dm_registry *reg, const char *name)
{
        const struct dm_tool *t = NULL;

        pthread_mutex_lock(&reg->lock);
        for (size_t i = 0; i < reg->n_entries; i++)
                if (strcmp(reg->entries[i].tool.name, name) == 0) {
                        t = &reg->entries[i].tool;
                        break;
                }
        pthread_mutex_unlock(&reg->lock);
        return t;
}

size_t dm_registry_count(struct dm_registry *reg)
{
        size_t n;

        pthread_mutex_lock(&reg->lock);
        n = reg->n_entries;
        pthread_mutex_unlock(&reg->lock);
        return n;
}

const struct dm_tool *dm_registry_at(struct dm_registry *reg, size_t i)
{
        const struct dm_tool *t;

        pthread_mutex_lock(&reg->lock);
        t = i < reg->n_entries ? &reg->entries[i].tool : NULL;
        pthread_mutex_unlock(&reg->lock);
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

json_object *dm_registry_describe(struct dm_registry *reg, const struct dm_tool *tool)
{
        json_object *d = NULL;

        pthread_mutex_lock(&reg->lock);
        for (size_t i = 0; i < reg->n_entries; i++)
                if (&reg->entries[i].tool == tool) {
                        if (!reg->entries[i].described)
                                reg->entries[i].described = build(tool);
                        /* A copy, never a reference: json-c counts references
                         * without atomics, and the caller's thread drops its
                         * answer while other connections' threads take and
                         * drop theirs (a lost update freed the cache under
                         * a concurrent tools/list: SIGSEGV in json-c). */
                        if (json_object_deep_copy(reg->entries[i].described, &d, NULL) < 0)
                                d = NULL;
                        break;
                }
        pthread_mutex_unlock(&reg->lock);
        return d;
}

const char *dm_registry_describe_text(struct dm_registry *reg, const struct dm_tool *tool, size_t *ret_len)
{
        const char *text = NULL;

        pthread_mutex_lock(&reg->lock);
        for (size_t i = 0; i < reg->n_entries; i++) {
                struct entry *e = &reg->entries[i];
                const char *s;
                size_t len;

                if (&e->tool != tool)
                        continue;
                if (!e->described)
                        e->described = build(tool);
                /* Printed here, under the lock, and never again: the text
                 * is immutable from now on and read without the lock. */
                if (!e->text) {
                        s = json_object_to_json_string_length(
                                e->described, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
                        e->text = s ? strndup(s, len) : NULL;
                        e->text_len = e->text ? len : 0;
                }
                text = e->text;
                *ret_len = e->text_len;
                break;
        }
        pthread_mutex_unlock(&reg->lock);
        return text;
}

void dm_registry_set_instructions(struct dm_registry *reg, const char *text)
{
        pthread_mutex_lock(&reg->lock);
        free(reg->instructions);
        reg->instructions = text ? strdup(text) : NULL;
        pthread_mutex_unlock(&reg->lock);
}

json_object *dm_registry_instructions(struct dm_registry *reg)
{
        json_object *o;

        pthread_mutex_lock(&reg->lock);
        o = json_object_new_string(reg->instructions ? reg->instructions
                                                     : "demesne runs shell commands in disposable Linux containers.");
        pthread_mutex_unlock(&reg->lock);
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
