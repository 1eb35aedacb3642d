/* SPDX-License-Identifier: MIT */
/* The host MCP servers file (client.h): read once at start, checked whole,
 * so that a mistake stops the server with one line that names it. */
#include "config.h"
#include "src/mcp/client.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"

#define FILE_MAX (1 << 20)
#define SERVERS_MAX 32
#define TOOLS_MAX 128

bool dm_mcpclient_name_ok(const char *s)
{
        size_t n = 0;

        if (!s)
                return false;
        for (; s[n]; n++) {
                char ch = s[n];
                if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
                      ch == '-'))
                        return false;
        }
        return n > 0 && n <= DM_MCPCLIENT_NAME_MAX;
}

/* A name from the file as an error message may quote it: 80 bytes at most,
 * control characters as '?', so that the message stays one line. */
struct shown {
        char s[81];
};
static struct shown shown(const char *name)
{
        struct shown r = { { 0 } };

        for (size_t i = 0; name[i] && i < sizeof(r.s) - 1; i++)
                r.s[i] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
        return r;
}

static void strv_free(char **v)
{
        if (!v)
                return;
        for (char **p = v; *p; p++)
                free(*p);
        free(v);
}

/* An array of strings → a NULL-terminated copy; "" when a member is no
 * string. */
static int string_array(json_object *a, size_t max, char ***ret, const char **why)
{
        size_t n = json_object_array_length(a);
        char **v;

        if (n > max) {
                *why = "has too many entries";
                return -EINVAL;
        }
        v = calloc(n + 1, sizeof(*v));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                json_object *e = json_object_array_get_idx(a, i);
                if (!json_object_is_type(e, json_type_string)) {
                        strv_free(v);
                        *why = "must hold strings only";
                        return -EINVAL;
                }
                v[i] = strdup(json_object_get_string(e));
                if (!v[i]) {
                        strv_free(v);
                        return -ENOMEM;
                }
        }
        *ret = v;
        return 0;
}

/* An object of strings → "K<sep>V" entries. */
static int string_map(json_object *o, const char *sep, char ***ret, const char **why)
{
        size_t n = (size_t)json_object_object_length(o), i = 0;
        char **v = calloc(n + 1, sizeof(*v));

        if (!v)
                return -ENOMEM;
        json_object_object_foreach(o, k, val)
        {
                if (!json_object_is_type(val, json_type_string) || !*k || strpbrk(k, "=:\r\n") ||
                    strpbrk(json_object_get_string(val), "\r\n")) {
                        strv_free(v);
                        *why = "must map names to strings (no '=', ':' or line breaks in names, no line breaks in "
                               "values)";
                        return -EINVAL;
                }
                if (asprintf(&v[i], "%s%s%s", k, sep, json_object_get_string(val)) < 0) {
                        v[i] = NULL;
                        strv_free(v);
                        return -ENOMEM;
                }
                i++;
        }
        *ret = v;
        return 0;
}

static void spec_release(struct dm_mcpclient_spec *s)
{
        free(s->name);
        free(s->command);
        free(s->url);
        free(s->user);
        strv_free(s->args);
        strv_free(s->env);
        strv_free(s->headers);
        strv_free(s->tools);
        memset(s, 0, sizeof(*s));
}

static int positive(json_object *v, int64_t max, int64_t *ret)
{
        int64_t n;

        if (!json_object_is_type(v, json_type_int))
                return -EINVAL;
        n = json_object_get_int64(v);
        if (n < 1 || n > max)
                return -EINVAL;
        *ret = n;
        return 0;
}

static int parse_server(const char *path, const char *name, json_object *o, struct dm_mcpclient_spec *s,
                        struct dm_error *err)
{
        json_object *command = NULL, *url = NULL, *v;
        const char *why = NULL;
        int r;

#define BAD(...) dm_error_set(err, -EINVAL, "%s: server '%s': " __VA_ARGS__)
        if (!dm_mcpclient_name_ok(name))
                return dm_error_set(err, -EINVAL, "%s: server name '%s' must be 1 to %d of [A-Za-z0-9_-]", path,
                                    shown(name).s, DM_MCPCLIENT_NAME_MAX);
        if (!json_object_is_type(o, json_type_object))
                return BAD("must be an object", path, name);
        s->name = strdup(name);
        if (!s->name)
                return -ENOMEM;
        json_object_object_foreach(o, key, val)
        {
                (void)val;
                if (strcmp(key, "command") && strcmp(key, "args") && strcmp(key, "env") && strcmp(key, "url") &&
                    strcmp(key, "headers") && strcmp(key, "tools") && strcmp(key, "max_message") &&
                    strcmp(key, "timeout_seconds") && strcmp(key, "type") && strcmp(key, "description") &&
                    strcmp(key, "user"))
                        return BAD("unknown member '%s'", path, name, shown(key).s);
        }
        json_object_object_get_ex(o, "command", &command);
        json_object_object_get_ex(o, "url", &url);
        if (command && url)
                return BAD("has both command and url: give one", path, name);
        if (!command && !url)
                return BAD("has neither command nor url: give one", path, name);
        if (command) {
                if (!json_object_is_type(command, json_type_string) || !*json_object_get_string(command))
                        return BAD("command must be a non-empty string", path, name);
                if (json_object_object_get_ex(o, "headers", &v))
                        return BAD("headers are for url servers", path, name);
                s->command = strdup(json_object_get_string(command));
        } else {
                const char *u = json_object_is_type(url, json_type_string) ? json_object_get_string(url) : "";
                if (strncmp(u, "http://", 7) != 0 && strncmp(u, "https://", 8) != 0)
                        return BAD("url must be an http:// or https:// URL", path, name);
                if (json_object_object_get_ex(o, "args", &v) || json_object_object_get_ex(o, "env", &v) ||
                    json_object_object_get_ex(o, "user", &v))
                        return BAD("args, env and user are for command servers", path, name);
                s->url = strdup(u);
        }
        if (!s->command && !s->url)
                return -ENOMEM;

        if (json_object_object_get_ex(o, "args", &v)) {
                if (!json_object_is_type(v, json_type_array))
                        return BAD("args must be an array of strings", path, name);
                if ((r = string_array(v, 1024, &s->args, &why)) < 0)
                        return r == -EINVAL ? BAD("args %s", path, name, why) : r;
        } else if (!(s->args = calloc(1, sizeof(char *))))
                return -ENOMEM;
        if (json_object_object_get_ex(o, "env", &v)) {
                if (!json_object_is_type(v, json_type_object))
                        return BAD("env must be an object of strings", path, name);
                if ((r = string_map(v, "=", &s->env, &why)) < 0)
                        return r == -EINVAL ? BAD("env %s", path, name, why) : r;
        } else if (!(s->env = calloc(1, sizeof(char *))))
                return -ENOMEM;
        if (json_object_object_get_ex(o, "user", &v)) {
                const char *u = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : "";
                if (!*u || strlen(u) > 64 || strpbrk(u, ":/\n\r"))
                        return BAD("user must be a user name (1 to 64 characters, no ':' or '/')", path, name);
                if (!(s->user = strdup(u)))
                        return -ENOMEM;
        }
        if (json_object_object_get_ex(o, "headers", &v)) {
                if (!json_object_is_type(v, json_type_object))
                        return BAD("headers must be an object of strings", path, name);
                if ((r = string_map(v, ": ", &s->headers, &why)) < 0)
                        return r == -EINVAL ? BAD("headers %s", path, name, why) : r;
        } else if (!(s->headers = calloc(1, sizeof(char *))))
                return -ENOMEM;

        if (!json_object_object_get_ex(o, "tools", &v))
                return BAD("has no tools: list the tools to offer (\"tools\": [\"name\", ...])", path, name);
        if (!json_object_is_type(v, json_type_array))
                return BAD("tools must be an array of tool names", path, name);
        if ((r = string_array(v, TOOLS_MAX, &s->tools, &why)) < 0)
                return r == -EINVAL ? BAD("tools %s", path, name, why) : r;
        for (char **t = s->tools; *t; t++)
                if (!dm_mcpclient_name_ok(*t))
                        return BAD("tool name '%s' must be 1 to %d of [A-Za-z0-9_-]", path, name, shown(*t).s,
                                   DM_MCPCLIENT_NAME_MAX);

        if (json_object_object_get_ex(o, "max_message", &v) && positive(v, 1LL << 30, &s->max_message) < 0)
                return BAD("max_message must be a number of bytes from 1 to 1073741824", path, name);
        if (json_object_object_get_ex(o, "timeout_seconds", &v)) {
                if (positive(v, 86400, &s->timeout_ms) < 0)
                        return BAD("timeout_seconds must be a whole number from 1 to 86400", path, name);
                s->timeout_ms *= 1000;
        }
#undef BAD
        return 0;
}

int dm_mcpclient_config_parse(const char *path, const char *text, size_t len, struct dm_mcpclient_config *ret,
                              struct dm_error *err)
{
        struct dm_mcpclient_config cfg = { 0 };
        json_tokener *tok = json_tokener_new();
        json_object *root, *servers;
        int r = 0;

        if (!tok)
                return dm_error_set(err, -ENOMEM, "out of memory");
        root = json_tokener_parse_ex(tok, text, (int)len);
        if (!root || json_tokener_get_parse_end(tok) != len) {
                size_t end = json_tokener_get_parse_end(tok);
                bool trailing = root != NULL;

                /* Whitespace after the value is fine. */
                while (trailing && end < len && strchr(" \t\r\n", text[end]))
                        end++;
                if (!root || end != len) {
                        enum json_tokener_error e = json_tokener_get_error(tok);
                        r = dm_error_set(err, -EINVAL, "%s: not JSON: %s", path,
                                         root                         ? "text after the value"
                                         : e == json_tokener_continue ? "it ends too early"
                                                                      : json_tokener_error_desc(e));
                        json_object_put(root);
                        json_tokener_free(tok);
                        return r;
                }
        }
        json_tokener_free(tok);
        if (!json_object_is_type(root, json_type_object) || !json_object_object_get_ex(root, "mcpServers", &servers) ||
            !json_object_is_type(servers, json_type_object)) {
                json_object_put(root);
                return dm_error_set(err, -EINVAL, "%s: must be an object with \"mcpServers\": {name: server, ...}",
                                    path);
        }
        if (json_object_object_length(servers) > SERVERS_MAX) {
                json_object_put(root);
                return dm_error_set(err, -EINVAL, "%s: more than %d servers", path, SERVERS_MAX);
        }
        cfg.servers = calloc((size_t)json_object_object_length(servers) + 1, sizeof(*cfg.servers));
        if (!cfg.servers) {
                json_object_put(root);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        json_object_object_foreach(servers, name, entry)
        {
                r = parse_server(path, name, entry, &cfg.servers[cfg.n++], err);
                if (r < 0)
                        break;
        }
        json_object_put(root);
        if (r < 0) {
                if (r == -ENOMEM)
                        dm_error_set(err, r, "out of memory");
                dm_mcpclient_config_release(&cfg);
                return r;
        }
        *ret = cfg;
        return 0;
}

/* The operator's file: symlinks followed (it is the operator's own), a
 * regular file only, capped. */
static int read_file(const char *path, struct dm_buf *b)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        struct stat st;
        char chunk[8192];

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0)
                return -errno;
        if (!S_ISREG(st.st_mode))
                return -DM_IO_EBADTYPE;
        for (;;) {
                ssize_t n = read(fd, chunk, sizeof(chunk));
                int r;

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return 0;
                if ((r = dm_buf_append(b, chunk, (size_t)n)) < 0)
                        return r;
        }
}

int dm_mcpclient_config_load(const char *path, struct dm_mcpclient_config *ret, struct dm_error *err)
{
        struct dm_buf b;
        int r;

        dm_buf_init(&b, FILE_MAX);
        r = read_file(path, &b);
        if (r < 0) {
                dm_buf_release(&b);
                return dm_error_set(err, r, "%s: cannot read it: %s", path,
                                    r == -E2BIG            ? "larger than 1 MiB"
                                    : r == -DM_IO_EBADTYPE ? "not a regular file"
                                                           : strerror(-r));
        }
        r = dm_mcpclient_config_parse(path, b.data ? b.data : "", b.len, ret, err);
        dm_buf_release(&b);
        return r;
}

void dm_mcpclient_config_release(struct dm_mcpclient_config *cfg)
{
        if (!cfg)
                return;
        for (size_t i = 0; i < cfg->n; i++)
                spec_release(&cfg->servers[i]);
        free(cfg->servers);
        memset(cfg, 0, sizeof(*cfg));
}
