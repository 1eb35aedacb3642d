/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/mcp/skills.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <nettle/sha2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/basic/base64.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/uri.h"
#include "src/basic/utf8.h"

#define NAME_MAX_LEN 64
#define WALK_DEPTH_MAX 8

struct skill_file {
        char *uri;  /* skill://<name>/<path> */
        char *path; /* below the skill's folder */
        char *data;
        size_t len;
        char digest[8 + 64 + 1]; /* "sha256:" + hex */
};

struct skill {
        char name[NAME_MAX_LEN + 1];
        char *uri;                /* skill://<name>/SKILL.md */
        json_object *frontmatter; /* every key: value of SKILL.md's frontmatter, as strings */
        struct skill_file *files;
        size_t n_files;
        size_t bytes;
};

struct dm_skills {
        struct skill *v;
        size_t n;
};

/* ---- names and frontmatter ------------------------------------------------ */

/* Lowercase letters and digits, single hyphens inside: what the extension
 * (and the Agent Skills format) allow as a name. */
static bool name_ok(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > NAME_MAX_LEN || s[0] == '-' || s[n - 1] == '-' || strstr(s, "--"))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
                        return false;
        return true;
}

static char *trim(char *s)
{
        char *e;

        while (*s == ' ' || *s == '\t')
                s++;
        e = s + strlen(s);
        while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
                *--e = '\0';
        return s;
}

/* The frontmatter: "---\n", then "key: value" lines, then "---". Only
 * plain scalars: a value that YAML would read as something other than its
 * own text (quoted, a list, a block, a comment, a nested key) is refused,
 * so the entry's frontmatter is exactly what a YAML parser of the file
 * finds. */
static int parse_frontmatter(const char *text, size_t len, json_object **ret, char *why, size_t why_len)
{
        _cleanup_free_ char *copy = NULL;
        char *line, *save = NULL;
        json_object *o;
        bool closed = false;

        if (len < 4 || strncmp(text, "---\n", 4) != 0) {
                snprintf(why, why_len, "SKILL.md does not start with a '---' frontmatter line");
                return -EINVAL;
        }
        copy = strndup(text + 4, len - 4);
        if (!copy)
                return -ENOMEM;
        o = json_object_new_object();
        for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                char *colon, *key, *value;

                if (strcmp(trim(line), "---") == 0) {
                        closed = true;
                        break;
                }
                colon = strchr(line, ':');
                if (!colon || line[0] == ' ' || line[0] == '\t' || line[0] == '#') {
                        snprintf(why, why_len, "frontmatter line '%.60s' is not 'key: value'", line);
                        json_object_put(o);
                        return -EINVAL;
                }
                *colon = '\0';
                key = trim(line);
                value = trim(colon + 1);
                if (!*key || !*value || strchr("\"'[{>|&*!%@`#-", value[0]) || strstr(value, ": ") ||
                    strstr(value, " #")) {
                        snprintf(why, why_len, "frontmatter '%.40s' needs a plain one-line value", key);
                        json_object_put(o);
                        return -EINVAL;
                }
                json_object_object_add(o, key, json_object_new_string(value));
        }
        if (!closed) {
                snprintf(why, why_len, "the frontmatter has no closing '---' line");
                json_object_put(o);
                return -EINVAL;
        }
        *ret = o;
        return 0;
}

/* ---- loading ------------------------------------------------------------------ */

static void skill_release(struct skill *k)
{
        for (size_t i = 0; i < k->n_files; i++) {
                free(k->files[i].uri);
                free(k->files[i].path);
                free(k->files[i].data);
        }
        free(k->files);
        free(k->uri);
        json_object_put(k->frontmatter);
}

static int add_file(struct skill *k, int dirfd, const char *path, char *why, size_t why_len)
{
        struct skill_file *f, *v;
        struct sha256_ctx sha;
        uint8_t d[SHA256_DIGEST_SIZE];
        int r;

        if (k->n_files >= DM_SKILL_FILES_MAX) {
                snprintf(why, why_len, "more than %d files", DM_SKILL_FILES_MAX);
                return -EFBIG;
        }
        v = realloc(k->files, (k->n_files + 1) * sizeof(*v));
        if (!v)
                return -ENOMEM;
        k->files = v;
        f = &k->files[k->n_files];
        memset(f, 0, sizeof(*f));
        r = dm_io_read_capped(dirfd, path, DM_SKILL_BYTES_MAX - k->bytes, &f->data, &f->len);
        if (r < 0) {
                snprintf(why, why_len, "%.200s: %s", path,
                         r == -EFBIG ? "the skill's files are over 16 MiB together" : strerror(-r));
                return r;
        }
        f->path = strdup(path);
        f->uri = dm_uri_make("skill://", k->name, path);
        if (!f->path || !f->uri) {
                free(f->path);
                free(f->uri);
                free(f->data);
                return -ENOMEM;
        }
        sha256_init(&sha);
        sha256_update(&sha, f->len, (const uint8_t *)f->data);
        sha256_digest(&sha, sizeof(d), d);
        memcpy(f->digest, "sha256:", 7);
        for (size_t i = 0; i < sizeof(d); i++)
                snprintf(f->digest + 7 + 2 * i, 3, "%02x", d[i]);
        k->bytes += f->len;
        k->n_files++;
        return 0;
}

struct walk {
        struct skill *k;
        int rootfd;
        char *why;
        size_t why_len;
};

static int walk_one(void *userdata, const char *path, const struct stat *st)
{
        struct walk *w = userdata;

        (void)st;
        return add_file(w->k, w->rootfd, path, w->why, w->why_len);
}

static int cmp_files(const void *a, const void *b)
{
        const struct skill_file *x = a, *y = b;
        bool xm = strcmp(x->path, "SKILL.md") == 0, ym = strcmp(y->path, "SKILL.md") == 0;

        if (xm != ym)
                return xm ? -1 : 1; /* SKILL.md first */
        return strcmp(x->path, y->path);
}

/* One skill folder; 0 and *ok false when it is skipped (why says why). */
static int load_one(int dirfd, const char *name, struct skill *k, bool *ok, char *why, size_t why_len)
{
        _cleanup_close_ int fd = -1;
        struct skill_file *md = NULL;
        json_object *v;
        int r;

        *ok = false;
        memset(k, 0, sizeof(*k));
        if (!name_ok(name)) {
                snprintf(why, why_len, "the folder name is not a skill name (lowercase letters, digits, hyphens)");
                return 0;
        }
        snprintf(k->name, sizeof(k->name), "%s", name);
        fd = dm_io_open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0);
        if (fd < 0) {
                snprintf(why, why_len, "not a plain directory");
                return 0;
        }
        /* Hidden files (.name) are not part of a skill. */
        r = dm_io_walk_files(fd, WALK_DEPTH_MAX, true, walk_one,
                             &(struct walk){ .k = k, .rootfd = fd, .why = why, .why_len = why_len });
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                goto skip;
        qsort(k->files, k->n_files, sizeof(*k->files), cmp_files);
        if (k->n_files && strcmp(k->files[0].path, "SKILL.md") == 0)
                md = &k->files[0];
        if (!md) {
                snprintf(why, why_len, "no SKILL.md");
                goto skip;
        }
        if (memchr(md->data, '\0', md->len) || !dm_utf8_valid(md->data, md->len)) {
                snprintf(why, why_len, "SKILL.md is not UTF-8 text");
                goto skip;
        }
        r = parse_frontmatter(md->data, md->len, &k->frontmatter, why, why_len);
        if (r == -ENOMEM)
                return r;
        if (r < 0)
                goto skip;
        if (!json_object_object_get_ex(k->frontmatter, "name", &v) || strcmp(json_object_get_string(v), name) != 0) {
                snprintf(why, why_len, "the frontmatter's name is not the folder's name '%s'", name);
                goto skip;
        }
        if (!json_object_object_get_ex(k->frontmatter, "description", &v)) {
                snprintf(why, why_len, "the frontmatter has no description");
                goto skip;
        }
        k->uri = strdup(md->uri);
        if (!k->uri)
                return -ENOMEM;
        *ok = true;
        return 0;
skip:
        skill_release(k);
        memset(k, 0, sizeof(*k));
        return 0;
}

static int cmp_names(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

int dm_skills_load(const char *dir, struct dm_skills **ret, struct dm_error *err)
{
        struct dm_skills *s = calloc(1, sizeof(*s));
        _cleanup_close_ int fd = -1;
        char **names = NULL;
        size_t n = 0;
        DIR *d;
        struct dirent *e;
        int r = 0;

        if (!s)
                return dm_error_set(err, -ENOMEM, "out of memory");
        *ret = s;
        fd = dm_io_open_dir(dir);
        if (fd < 0) {
                log_debug("skills: no folder '%s' (%s): no skills", dir, strerror(-fd));
                return 0;
        }
        d = fdopendir(dup(fd));
        if (!d)
                return 0;
        while ((e = readdir(d))) {
                struct stat st;
                char **v;

                /* Files beside the skills (a README) are not skills. */
                if (e->d_name[0] == '.' ||
                    (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)))
                        continue;
                v = realloc(names, (n + 1) * sizeof(*names));
                if (!v || !(v[n] = strdup(e->d_name))) {
                        names = v ? v : names;
                        r = -ENOMEM;
                        break;
                }
                names = v;
                n++;
        }
        closedir(d);
        if (n)
                qsort(names, n, sizeof(*names), cmp_names);
        for (size_t i = 0; r >= 0 && i < n; i++) {
                struct skill k;
                char why[512] = "";
                bool ok;
                struct skill *v;

                r = load_one(fd, names[i], &k, &ok, why, sizeof(why));
                if (r < 0)
                        break;
                if (!ok) {
                        log_warning("skills: '%s/%s' skipped: %s", dir, names[i], why);
                        continue;
                }
                v = realloc(s->v, (s->n + 1) * sizeof(*v));
                if (!v) {
                        skill_release(&k);
                        r = -ENOMEM;
                        break;
                }
                s->v = v;
                s->v[s->n++] = k;
        }
        for (size_t i = 0; i < n; i++)
                free(names[i]);
        free(names);
        if (r < 0) {
                dm_skills_free(s);
                *ret = NULL;
                return dm_error_set(err, r, "load skills from '%s': %s", dir, strerror(-r));
        }
        log_debug("skills: %zu from '%s'", s->n, dir);
        return 0;
}

void dm_skills_free(struct dm_skills *s)
{
        if (!s)
                return;
        for (size_t i = 0; i < s->n; i++)
                skill_release(&s->v[i]);
        free(s->v);
        free(s);
}

size_t dm_skills_count(const struct dm_skills *s)
{
        return s ? s->n : 0;
}

/* ---- answers -------------------------------------------------------------------- */

static json_object *entry(const struct skill *k)
{
        json_object *o = json_object_new_object(), *files = json_object_new_array();

        for (size_t i = 0; i < k->n_files; i++) {
                json_object *f = json_object_new_object();

                json_object_object_add(f, "uri", json_object_new_string(k->files[i].uri));
                json_object_object_add(f, "digest", json_object_new_string(k->files[i].digest));
                json_object_object_add(f, "size", json_object_new_int64((int64_t)k->files[i].len));
                json_object_array_add(files, f);
        }
        json_object_object_add(o, "uri", json_object_new_string(k->uri));
        json_object_object_add(o, "frontmatter", json_object_get(k->frontmatter));
        json_object_object_add(o, "resources", files);
        return o;
}

json_object *dm_skills_list(const struct dm_skills *s)
{
        json_object *a = json_object_new_array();

        for (size_t i = 0; s && i < s->n; i++)
                json_object_array_add(a, entry(&s->v[i]));
        return a;
}

json_object *dm_skills_get(const struct dm_skills *s, const char *uri)
{
        for (size_t i = 0; s && uri && i < s->n; i++)
                if (strcmp(s->v[i].uri, uri) == 0)
                        return entry(&s->v[i]);
        return NULL;
}

static const char *fm(const struct skill *k, const char *key)
{
        json_object *v;

        return json_object_object_get_ex(k->frontmatter, key, &v) ? json_object_get_string(v) : "";
}

json_object *dm_skills_resources(const struct dm_skills *s)
{
        json_object *a = json_object_new_array();

        for (size_t i = 0; s && i < s->n; i++) {
                json_object *o = json_object_new_object();

                json_object_object_add(o, "uri", json_object_new_string(s->v[i].uri));
                json_object_object_add(o, "name", json_object_new_string(fm(&s->v[i], "name")));
                json_object_object_add(o, "description", json_object_new_string(fm(&s->v[i], "description")));
                json_object_object_add(o, "mimeType", json_object_new_string("text/markdown"));
                json_object_object_add(o, "size", json_object_new_int64((int64_t)s->v[i].files[0].len));
                json_object_array_add(a, o);
        }
        return a;
}

json_object *dm_skills_read(const struct dm_skills *s, const char *uri)
{
        for (size_t i = 0; s && uri && i < s->n; i++)
                for (size_t j = 0; j < s->v[i].n_files; j++) {
                        const struct skill_file *f = &s->v[i].files[j];
                        json_object *a, *c;

                        if (strcmp(f->uri, uri) != 0)
                                continue;
                        a = json_object_new_array();
                        c = json_object_new_object();
                        json_object_object_add(c, "uri", json_object_new_string(uri));
                        if (strcmp(f->path, "SKILL.md") == 0)
                                json_object_object_add(c, "mimeType", json_object_new_string("text/markdown"));
                        else
                                json_object_object_add(c, "mimeType", json_object_new_string(dm_mime_type(f->path)));
                        if (!memchr(f->data, '\0', f->len) && dm_utf8_valid(f->data, f->len))
                                json_object_object_add(c, "text", json_object_new_string_len(f->data, (int)f->len));
                        else {
                                _cleanup_free_ char *b64 = dm_base64_encode(f->data, f->len);
                                json_object_object_add(c, "blob", json_object_new_string(b64 ? b64 : ""));
                        }
                        json_object_array_add(a, c);
                        return a;
                }
        return NULL;
}

const char *dm_skills_dir(const char *dir_setting)
{
        static const char *const candidates[] = { DM_PKGDATADIR "/skills", DM_SRCDIR "/examples/skills" };
        struct stat st;

        if (dir_setting && *dir_setting)
                return dir_setting;
        for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++)
                if (stat(candidates[i], &st) == 0 && S_ISDIR(st.st_mode))
                        return candidates[i];
        return candidates[0];
}
