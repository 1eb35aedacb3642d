/* SPDX-License-Identifier: MIT */
/* The vendor proxy's request filter, for runs whose egress is below open.
 * The vendors run tools of their own on their side of the API (Anthropic's
 * web_fetch, web_search, code_execution and mcp_servers; OpenAI's
 * web_search, mcp, code_interpreter, file_search) and fetch URLs a request
 * names (image and document sources): through the model API a sandbox with
 * no network would reach any URL. Below open, a model request may carry only
 * what stays between the agent and the model: the client's own tools and
 * inline content.
 *
 * What is refused and what is stripped (docs/explanation/egress.md):
 *   - refused (400, in the vendor's error shape, so the agent CLI shows it):
 *     a body that is not one JSON object, a Content-Encoding, a tool the
 *     vendor runs (anything but the client-run types below), mcp_servers,
 *     container, a stored prompt, a URL source. Refusing says why; the
 *     agent CLIs never send these in their main requests (Claude Code's
 *     WebSearch tool sends web_search in a side request of its own, whose
 *     refusal becomes that tool's error).
 *   - stripped: OpenAI's web_search tools (Codex offers web_search in every
 *     request: refusing would stop Codex altogether) and
 *     web_search_options; anthropic-beta values outside the safe list (a
 *     beta only switches a feature on; Claude Code adds new ones often, and
 *     refusing an unknown one would stop it).
 * The body that goes upstream is the document as parsed here, serialized
 * again: the vendor sees exactly what was inspected (duplicate keys, escapes
 * and trailing bytes cannot make the two readings differ). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "netpolicy/vendor-internal.h"
#include "src/basic/cleanup.h"

/* Deep enough for tool schemas and nested tool results. */
#define FILTER_DEPTH 128
/* json-c spends about 800 bytes on an object and 60 on a scalar: a 32 MiB
 * body of "{}," would take gigabytes. An agent CLI's request is far below
 * the caps (Claude Code's first: 370 objects and arrays, 1,100 values;
 * Codex's: 110 and 320; a few more per message); past them a body is refused before it
 * is parsed, and at most FILTER_PARSES bodies are parsed at once in the
 * whole server (every run's proxy): at most about 350 MiB in trees (a body
 * at both caps took 165 MiB, measured). */
#define FILTER_MAX_CONTAINERS 100000
#define FILTER_MAX_VALUES 1000000
#define FILTER_PARSES 2

static pthread_mutex_t parse_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t parse_free = PTHREAD_COND_INITIALIZER;
static unsigned parsing;

static int refuse(struct dm_vendor_filter *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int refuse(struct dm_vendor_filter *f, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(f->why, sizeof(f->why), fmt, ap);
        va_end(ap);
        if (!f->status)
                f->status = 400;
        return -EACCES;
}

static void note(struct dm_vendor_filter *f, const char *what)
{
        size_t n = strlen(f->stripped);

        if (n + strlen(what) + 2 < sizeof(f->stripped))
                snprintf(f->stripped + n, sizeof(f->stripped) - n, "%s%s", n ? "," : "", what);
}

/* name is prefix followed by digits only (a dated version). */
static bool dated(const char *name, const char *prefix)
{
        size_t n = strlen(prefix);

        if (strncmp(name, prefix, n) != 0 || !name[n])
                return false;
        for (const char *c = name + n; *c; c++)
                if (!isdigit((unsigned char)*c))
                        return false;
        return true;
}

static const char *type_of(json_object *o)
{
        json_object *t;

        if (!json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, "type", &t))
                return NULL;
        return json_object_is_type(t, json_type_string) ? json_object_get_string(t) : "";
}

/* --- Anthropic ------------------------------------------------------------- */

/* Tools the client runs: its own (no type, or "custom") and the ones
 * Anthropic defines but hands back as tool_use for the client to execute
 * (bash, text_editor, computer, memory). Tool search runs on Anthropic's side
 * but only over the tools of the same request. Everything else (web_fetch_*,
 * web_search_*, code_execution_*, mcp_toolset, and whatever comes next) runs
 * on Anthropic's side and is refused. */
static bool anthropic_client_tool(const char *type)
{
        static const char *const prefixes[] = {
                "bash_", "text_editor_", "computer_", "memory_", "tool_search_tool_regex_", "tool_search_tool_bm25_"
        };

        if (!type || strcmp(type, "custom") == 0)
                return true;
        for (size_t i = 0; i < DM_ARRAY_SIZE(prefixes); i++)
                if (dated(type, prefixes[i]))
                        return true;
        return false;
}

/* Visits every object under o (arrays walked through); visit says 0 to go
 * on into the object's members, 1 to skip them, -EACCES to refuse. */
static int walk(struct dm_vendor_filter *f, json_object *o, int depth,
                int (*visit)(struct dm_vendor_filter *f, json_object *o))
{
        int r;

        if (depth > FILTER_DEPTH)
                return refuse(f, "the request nests deeper than %d levels", FILTER_DEPTH);
        if (json_object_is_type(o, json_type_array)) {
                for (size_t i = 0; i < json_object_array_length(o); i++)
                        if (walk(f, json_object_array_get_idx(o, i), depth + 1, visit) < 0)
                                return -EACCES;
                return 0;
        }
        if (!json_object_is_type(o, json_type_object) || (r = visit(f, o)) > 0)
                return 0;
        if (r < 0)
                return r;
        json_object_object_foreach(o, key, val)
        {
                (void)key;
                if (walk(f, val, depth + 1, visit) < 0)
                        return -EACCES;
        }
        return 0;
}

/* Content the vendor would fetch: a source of type "url" (images,
 * documents), anywhere in messages and system, tool results included. The
 * input of a tool call is the model's own data and is not looked into. */
static int anthropic_source(struct dm_vendor_filter *f, json_object *o)
{
        const char *type = type_of(o);
        json_object *src;

        if (type && (strcmp(type, "tool_use") == 0 || strcmp(type, "server_tool_use") == 0))
                return 1;
        if (json_object_object_get_ex(o, "source", &src) && (type = type_of(src)) && strcasecmp(type, "url") == 0)
                return refuse(f, "a content block with a URL source (the vendor would fetch the URL); send the "
                                 "content inline (base64 or text) instead");
        return 0;
}

static int anthropic_body(struct dm_vendor_filter *f, json_object *doc)
{
        json_object *tools, *v;

        json_object_object_foreach(doc, key, val)
        {
                if ((strcasecmp(key, "mcp_servers") == 0 || strcasecmp(key, "container") == 0) &&
                    !json_object_is_type(val, json_type_null) &&
                    !(json_object_is_type(val, json_type_array) && json_object_array_length(val) == 0))
                        return refuse(f, "'%s' lets the vendor connect to servers or run code with network access",
                                      key);
                if (strcasecmp(key, "tools") == 0 && strcmp(key, "tools") != 0)
                        return refuse(f, "member '%s' is not 'tools'", key);
        }
        if (json_object_object_get_ex(doc, "tools", &tools)) {
                if (!json_object_is_type(tools, json_type_array))
                        return refuse(f, "'tools' is not an array");
                for (size_t i = 0; i < json_object_array_length(tools); i++) {
                        json_object *t = json_object_array_get_idx(tools, i);
                        const char *type = type_of(t);

                        if (!json_object_is_type(t, json_type_object))
                                return refuse(f, "tools[%zu] is not an object", i);
                        if (!anthropic_client_tool(type))
                                return refuse(f,
                                              "tools[%zu] is of type '%.60s', a tool Anthropic runs on its side "
                                              "with network access",
                                              i, type);
                }
        }
        if (json_object_object_get_ex(doc, "messages", &v) && walk(f, v, 1, anthropic_source) < 0)
                return -EACCES;
        if (json_object_object_get_ex(doc, "system", &v) && walk(f, v, 1, anthropic_source) < 0)
                return -EACCES;
        return 0;
}

/* --- OpenAI ---------------------------------------------------------------- */

/* Tools the client runs (function, custom, Codex's namespace of functions,
 * the local shell and patch tools, computer use), tool search (over the
 * request's own tools) and image generation (no fetch of its own: the images
 * it reads are checked as URLs below). A shell tool with a hosted
 * environment runs in OpenAI's containers and is refused. */
static int openai_tool(struct dm_vendor_filter *f, json_object *t, const char *where, int depth)
{
        static const char *const client[] = { "function",    "custom",   "tool_search",          "local_shell",
                                              "apply_patch", "computer", "computer_use_preview", "image_generation" };
        const char *type = type_of(t);
        json_object *v;

        if (!type)
                return refuse(f, "%s has no type", where);
        if (strcmp(type, "namespace") == 0) {
                if (json_object_object_get_ex(t, "tools", &v) && json_object_is_type(v, json_type_array))
                        for (size_t i = 0; i < json_object_array_length(v); i++) {
                                char sub[96];

                                snprintf(sub, sizeof(sub), "%.60s.tools[%zu]", where, i);
                                if (depth > 4)
                                        return refuse(f, "%s: namespaces nest too deep", where);
                                if (openai_tool(f, json_object_array_get_idx(v, i), sub, depth + 1) < 0)
                                        return -EACCES;
                        }
                return 0;
        }
        if (strcmp(type, "shell") == 0) {
                const char *env = json_object_object_get_ex(t, "environment", &v) ? type_of(v) : NULL;

                if (v && !json_object_is_type(v, json_type_null) && (!env || strcmp(env, "local") != 0))
                        return refuse(f, "%s: a shell with a hosted environment runs on OpenAI's side", where);
                return 0;
        }
        for (size_t i = 0; i < DM_ARRAY_SIZE(client); i++)
                if (strcmp(type, client[i]) == 0)
                        return 0;
        return refuse(f, "%s is of type '%.60s', a tool OpenAI runs on its side with network access", where, type);
}

/* Input the vendor would fetch: image_url (a string, or Chat Completions'
 * {"url": ...}) that is not a data: URL, and any file_url. */
static int openai_url(struct dm_vendor_filter *f, json_object *o)
{
        json_object_object_foreach(o, key, val)
        {
                json_object *u = val;

                if (strcasecmp(key, "file_url") == 0 && !json_object_is_type(val, json_type_null))
                        return refuse(f, "a file_url input (the vendor would fetch the URL); send the file inline");
                if (strcasecmp(key, "image_url") != 0)
                        continue;
                if (json_object_is_type(val, json_type_object))
                        json_object_object_get_ex(val, "url", &u);
                if (u && json_object_is_type(u, json_type_string) &&
                    strncasecmp(json_object_get_string(u), "data:", 5) != 0)
                        return refuse(f, "an image_url that is not a data: URL (the vendor would fetch it); send the "
                                         "image inline");
        }
        return 0;
}

static bool web_search(const char *type)
{
        return type && strncmp(type, "web_search", 10) == 0;
}

static int openai_body(struct dm_vendor_filter *f, json_object *doc)
{
        json_object *tools, *kept, *choice;

        json_object_object_foreach(doc, key, val)
        {
                if (strcasecmp(key, "prompt") == 0 && !json_object_is_type(val, json_type_null))
                        return refuse(f, "a stored prompt ('prompt') may carry tools that reach the network");
                if (strcasecmp(key, "tools") == 0 && strcmp(key, "tools") != 0)
                        return refuse(f, "member '%s' is not 'tools'", key);
                if (strcasecmp(key, "web_search_options") == 0 && strcmp(key, "web_search_options") != 0)
                        return refuse(f, "member '%s' is not 'web_search_options'", key);
        }
        if (json_object_object_get_ex(doc, "web_search_options", NULL)) {
                json_object_object_del(doc, "web_search_options");
                note(f, "web_search_options");
        }
        if (json_object_object_get_ex(doc, "tools", &tools) && !json_object_is_type(tools, json_type_null)) {
                if (!json_object_is_type(tools, json_type_array))
                        return refuse(f, "'tools' is not an array");
                if (!(kept = json_object_new_array()))
                        return -ENOMEM;
                for (size_t i = 0; i < json_object_array_length(tools); i++) {
                        json_object *t = json_object_array_get_idx(tools, i);
                        char where[32];

                        snprintf(where, sizeof(where), "tools[%zu]", i);
                        if (web_search(type_of(t))) {
                                note(f, type_of(t));
                                continue;
                        }
                        if (openai_tool(f, t, where, 0) < 0 || json_object_array_add(kept, json_object_get(t)) < 0) {
                                json_object_put(kept);
                                return f->why[0] ? -EACCES : -ENOMEM;
                        }
                }
                json_object_object_add(doc, "tools", kept);
        }
        /* A tool_choice that names a stripped tool would be the vendor's
         * error: the default choice instead. */
        if (json_object_object_get_ex(doc, "tool_choice", &choice) && web_search(type_of(choice)))
                json_object_object_del(doc, "tool_choice");
        if (json_object_object_get_ex(doc, "input", &choice) && walk(f, choice, 1, openai_url) < 0)
                return -EACCES;
        if (json_object_object_get_ex(doc, "messages", &choice) && walk(f, choice, 1, openai_url) < 0)
                return -EACCES;
        if (json_object_object_get_ex(doc, "tools", &choice) && walk(f, choice, 1, openai_url) < 0)
                return -EACCES;
        return 0;
}

/* --- anthropic-beta -------------------------------------------------------- */

/* Betas that change how the model answers, never what the vendor reaches:
 * Claude Code's own (every one the claude-code image sends) and the
 * caching, counting, thinking, context and output ones. Not here, and so stripped: mcp-client-*, web-fetch-*,
 * web-search-*, code-execution-*, files-api-*, skills-*, and every beta not
 * known yet. */
static bool beta_safe(const char *v, size_t n)
{
        static const char *const families[] = {
                "claude-code",
                "oauth",
                "interleaved-thinking",
                "fine-grained-tool-streaming",
                "context-management",
                "context-1m",
                "prompt-caching",
                "prompt-caching-scope",
                "extended-cache-ttl",
                "token-counting",
                "token-efficient-tools",
                "output-128k",
                "effort",
                "structured-outputs",
                "advanced-tool-use",
                "tool-search-tool",
                "tool-examples",
                "model-context-window-exceeded",
                "computer-use",
                "pdfs",
                "dev-full-thinking",
                "redact-thinking",
                "fast-mode",
                /* Sent by Claude Code 2.1.332 (the claude-code image): how
                 * thinking is counted and shown, per-turn settings, and the
                 * tool list changing within a conversation. */
                "per-turn-control",
                "mid-conversation-tool-changes",
                "thinking-token-count",
                "thinking-display-updates",
        };

        for (size_t i = 0; i < DM_ARRAY_SIZE(families); i++) {
                size_t l = strlen(families[i]);
                size_t k = l + 1;

                if (n <= k || strncmp(v, families[i], l) != 0 || v[l] != '-')
                        continue;
                while (k < n && (isdigit((unsigned char)v[k]) || v[k] == '-'))
                        k++;
                if (k == n)
                        return true;
        }
        return false;
}

static int filter_beta(struct dm_vendor_filter *f, struct dm_vendor_request *r)
{
        struct dm_vendor_header *h = NULL;
        struct dm_buf out;
        bool changed = false;

        for (size_t i = 0; i < r->n_headers && !h; i++)
                if (strcasecmp(r->headers[i].name, "anthropic-beta") == 0)
                        h = &r->headers[i];
        if (!h)
                return 0;
        dm_buf_init(&out, strlen(h->value) + 1);
        for (const char *s = h->value; *s;) {
                size_t n = strcspn(s, ","), a = 0, b = n;

                while (a < b && (s[a] == ' ' || s[a] == '\t'))
                        a++;
                while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t'))
                        b--;
                if (b > a && beta_safe(s + a, b - a)) {
                        if ((out.len && dm_buf_append(&out, ",", 1) < 0) || dm_buf_append(&out, s + a, b - a) < 0) {
                                dm_buf_release(&out);
                                return -ENOMEM;
                        }
                } else if (b > a) {
                        char what[80];

                        snprintf(what, sizeof(what), "beta %.*s", (int)(b - a < 60 ? b - a : 60), s + a);
                        note(f, what);
                        changed = true;
                }
                s += n + (s[n] == ',');
        }
        if (!changed) {
                dm_buf_release(&out);
                return 0;
        }
        f->beta = dm_buf_steal(&out);
        if (!f->beta)
                return -ENOMEM;
        h->value = f->beta;
        return 0;
}

/* --- the request ----------------------------------------------------------- */

/* Objects and arrays, and values (roughly: containers and commas), outside
 * strings. */
static bool too_many_values(const char *s, size_t n)
{
        size_t containers = 0, values = 0;
        bool in_string = false;

        for (size_t i = 0; i < n; i++) {
                if (in_string) {
                        if (s[i] == '\\')
                                i++;
                        else if (s[i] == '"')
                                in_string = false;
                } else if (s[i] == '"') {
                        in_string = true;
                } else if (s[i] == '{' || s[i] == '[') {
                        containers++;
                        values++;
                } else if (s[i] == ',') {
                        values++;
                }
        }
        return containers > FILTER_MAX_CONTAINERS || values > FILTER_MAX_VALUES;
}

static json_object *parse_locked(const struct dm_buf *body, struct json_tokener *tok)
{
        json_object *doc;
        size_t end;

        pthread_mutex_lock(&parse_lock);
        while (parsing >= FILTER_PARSES)
                pthread_cond_wait(&parse_free, &parse_lock);
        parsing++;
        pthread_mutex_unlock(&parse_lock);
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
        doc = json_tokener_parse_ex(tok, body->data, (int)body->len);
        end = json_tokener_get_parse_end(tok);
        if (doc && json_tokener_get_error(tok) == json_tokener_success)
                while (end < body->len && body->data[end] && strchr(" \t\r\n", body->data[end]))
                        end++;
        if (doc && (json_tokener_get_error(tok) != json_tokener_success || end != body->len ||
                    !json_object_is_type(doc, json_type_object))) {
                json_object_put(doc);
                doc = NULL;
        }
        pthread_mutex_lock(&parse_lock);
        parsing--;
        pthread_cond_signal(&parse_free);
        pthread_mutex_unlock(&parse_lock);
        return doc;
}

static int parse(struct dm_vendor_filter *f, const struct dm_buf *body, json_object **ret)
{
        struct json_tokener *tok;
        json_object *doc;

        if (!body->len)
                return refuse(f, "the request body is empty (below open egress every body is read)");
        if (too_many_values(body->data, body->len))
                return refuse(f, "the request body holds more than %d objects and arrays or %d values",
                              FILTER_MAX_CONTAINERS, FILTER_MAX_VALUES);
        if (!(tok = json_tokener_new_ex(FILTER_DEPTH)))
                return -ENOMEM;
        doc = parse_locked(body, tok);
        json_tokener_free(tok);
        if (!doc)
                return refuse(f, "the request body is not one JSON object (below open egress every body is read)");
        *ret = doc;
        return 0;
}

int dm_vendor_filter_apply(struct dm_vendor_filter *f, enum dm_vendor provider, struct dm_vendor_request *r,
                           struct dm_buf *body)
{
        const char *enc = dm_vendor_request_header(r, "content-encoding");
        json_object *doc = NULL;
        const char *s;
        size_t len;
        int k;

        memset(f, 0, sizeof(*f));
        if ((k = filter_beta(f, r)) < 0)
                return k;
        if (strcmp(r->method, "POST") != 0)
                return 0;
        if (enc && *enc && strcasecmp(enc, "identity") != 0) {
                f->status = 415;
                return refuse(f, "content-encoding '%.40s': below open egress the body must be plain JSON", enc);
        }
        if ((k = parse(f, body, &doc)) < 0)
                return k;
        k = provider == DM_VENDOR_ANTHROPIC ? anthropic_body(f, doc) : openai_body(f, doc);
        if (k == 0) {
                s = json_object_to_json_string_length(doc, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE,
                                                      &len);
                dm_buf_reset(body);
                if (!s)
                        k = -ENOMEM;
                else if (len > body->max)
                        k = refuse(f, "the request body is too large once re-encoded");
                else if (dm_buf_append(body, s, len) < 0)
                        k = -ENOMEM;
        }
        json_object_put(doc);
        return k;
}

void dm_vendor_filter_release(struct dm_vendor_filter *f)
{
        if (!f)
                return;
        free(f->beta);
        f->beta = NULL;
}
