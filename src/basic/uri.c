/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/uri.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "src/basic/buf.h"

static bool unreserved(unsigned char ch)
{
        return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
               ch == '.' || ch == '_' || ch == '~';
}

/* keep: the reserved characters left as they are ("" for none). */
static int append_encoded(struct dm_buf *b, const char *s, const char *keep)
{
        for (; *s; s++) {
                unsigned char ch = (unsigned char)*s;
                int r = unreserved(ch) || strchr(keep, ch) ? dm_buf_append(b, s, 1) : dm_buf_printf(b, "%%%02X", ch);
                if (r < 0)
                        return r;
        }
        return 0;
}

char *dm_uri_escape(const char *s, const char *keep)
{
        struct dm_buf b;

        dm_buf_init(&b, strlen(s) * 3); /* every byte as %XX at most */
        if (append_encoded(&b, s, keep) < 0) {
                dm_buf_release(&b);
                return NULL;
        }
        return dm_buf_steal(&b);
}

char *dm_uri_make(const char *scheme, const char *dir, const char *path)
{
        struct dm_buf b;

        dm_buf_init(&b, 16384);
        if (dm_buf_printf(&b, "%s", scheme) < 0 || append_encoded(&b, dir, "") < 0 || dm_buf_append(&b, "/", 1) < 0 ||
            append_encoded(&b, path, "/") < 0) {
                dm_buf_release(&b);
                return NULL;
        }
        return dm_buf_steal(&b);
}

static int hexval(char c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}

int dm_uri_decode_in_place(char *s)
{
        char *w = s;

        for (char *r = s; *r; r++) {
                if (*r == '?' || *r == '#')
                        return -EINVAL;
                if (*r != '%') {
                        *w++ = *r;
                        continue;
                }
                int hi = hexval(r[1]), lo = hi < 0 ? -1 : hexval(r[2]);
                if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
                        return -EINVAL;
                *w++ = (char)(hi * 16 + lo);
                r += 2;
        }
        *w = '\0';
        return 0;
}

const char *dm_mime_type(const char *name)
{
        static const struct {
                const char *ext, *type;
        } types[] = {
                { "txt", "text/plain" },
                { "log", "text/plain" },
                { "md", "text/markdown" },
                { "csv", "text/csv" },
                { "tsv", "text/tab-separated-values" },
                { "html", "text/html" },
                { "htm", "text/html" },
                { "css", "text/css" },
                { "js", "text/javascript" },
                { "mjs", "text/javascript" },
                { "ts", "text/x-typescript" },
                { "py", "text/x-python" },
                { "c", "text/x-c" },
                { "h", "text/x-c" },
                { "go", "text/x-go" },
                { "rs", "text/x-rust" },
                { "sh", "text/x-shellscript" },
                { "xml", "application/xml" },
                { "json", "application/json" },
                { "yaml", "application/yaml" },
                { "yml", "application/yaml" },
                { "toml", "application/toml" },
                { "svg", "image/svg+xml" },
                { "png", "image/png" },
                { "jpg", "image/jpeg" },
                { "jpeg", "image/jpeg" },
                { "gif", "image/gif" },
                { "webp", "image/webp" },
                { "pdf", "application/pdf" },
                { "mp3", "audio/mpeg" },
                { "wav", "audio/wav" },
                { "ogg", "audio/ogg" },
                { "flac", "audio/flac" },
                { "mp4", "video/mp4" },
                { "webm", "video/webm" },
                { "zip", "application/zip" },
                { "gz", "application/gzip" },
                { "tar", "application/x-tar" },
                { "wasm", "application/wasm" },
        };
        const char *base = strrchr(name, '/'), *dot;

        base = base ? base + 1 : name;
        dot = strrchr(base, '.');
        if (dot && dot != base)
                for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
                        if (strcasecmp(dot + 1, types[i].ext) == 0)
                                return types[i].type;
        return "application/octet-stream";
}
