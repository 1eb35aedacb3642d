/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/mcp/http-token.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "src/basic/cleanup.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/paths.h"

int dm_mcphttp_token_check(const char *token, const char *what, struct dm_error *err)
{
        size_t len = strlen(token);

        for (size_t i = 0; i < len; i++)
                if (!isgraph((unsigned char)token[i]))
                        return dm_error_set(err, -EINVAL, "%s: the token must be printable, without spaces", what);
        if (len < DM_MCPHTTP_TOKEN_MIN)
                return dm_error_set(err, -EINVAL,
                                    "%s: the token needs at least %d characters "
                                    "(head -c 32 /dev/urandom | base64 makes one)",
                                    what, DM_MCPHTTP_TOKEN_MIN);
        return 0;
}

static bool name_ok(const char *name)
{
        size_t len = strlen(name);

        if (len == 0 || len > DM_MCPHTTP_TOKEN_NAME_MAX)
                return false;
        for (size_t i = 0; i < len; i++)
                if (!strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-", name[i]))
                        return false;
        return true;
}

int dm_mcphttp_tokens_add(struct dm_mcphttp_tokens *t, const char *name, const char *secret, const char *what,
                          unsigned line, struct dm_error *err)
{
        struct dm_mcphttp_token *tok;
        char where[PATH_MAX + 64];
        int r;

        if (line)
                snprintf(where, sizeof(where), "%s line %u", what, line);
        else
                snprintf(where, sizeof(where), "%s", what);
        /* The name is not quoted: on a garbled line it may be a secret. */
        if (!name_ok(name))
                return dm_error_set(err, -EINVAL, "%s: a token's name is 1 to %d letters, digits, '.', '_' or '-'",
                                    where, DM_MCPHTTP_TOKEN_NAME_MAX);
        if ((r = dm_mcphttp_token_check(secret, where, err)) < 0)
                return r;
        for (size_t i = 0; i < t->n; i++) {
                if (strcmp(t->v[i].name, name) == 0)
                        return dm_error_set(err, -EINVAL, "%s: the name '%s' is on line %u already", where, name,
                                            t->v[i].line);
                if (strcmp(t->v[i].secret, secret) == 0)
                        return dm_error_set(err, -EINVAL,
                                            "%s: the same token as on line %u (each principal needs its own)", where,
                                            t->v[i].line);
        }
        if (t->n >= DM_MCPHTTP_TOKENS_MAX)
                return dm_error_set(err, -EINVAL, "%s: more than %d tokens", where, DM_MCPHTTP_TOKENS_MAX);
        tok = &t->v[t->n];
        if (!(tok->secret = strdup(secret)))
                return dm_error_set(err, -ENOMEM, "out of memory");
        snprintf(tok->name, sizeof(tok->name), "%s", name);
        tok->len = strlen(secret);
        tok->line = line;
        t->n++;
        return 0;
}

int dm_mcphttp_tokens_parse(struct dm_mcphttp_tokens *t, char *text, const char *what, struct dm_error *err)
{
        bool first_bare = false;
        unsigned line = 0;
        char *next = text;
        int r = 0;

        while (next && r == 0) {
                char *p = next, *end, *name, *secret;
                char made[16];

                next = strchr(p, '\n');
                if (next)
                        *next++ = '\0';
                line++;
                end = p + strlen(p);
                while (end > p && isspace((unsigned char)end[-1]))
                        *--end = '\0';
                while (isspace((unsigned char)*p))
                        p++;
                if (*p == '\0' || *p == '#')
                        continue;
                name = p;
                p += strcspn(p, " \t");
                if (*p) {
                        *p++ = '\0';
                        p += strspn(p, " \t");
                }
                if (*p == '\0') {
                        /* A bare token: named by its place among the tokens. */
                        secret = name;
                        snprintf(made, sizeof(made), "token%zu", t->n + 1);
                        name = made;
                        if (t->n == 0)
                                first_bare = true;
                } else {
                        secret = p;
                        if (secret[strcspn(secret, " \t")])
                                r = dm_error_set(err, -EINVAL,
                                                 "%s line %u: write NAME TOKEN or just TOKEN (a token has no blanks)",
                                                 what, line);
                }
                if (r == 0)
                        r = dm_mcphttp_tokens_add(t, name, secret, what, line, err);
        }
        if (r == 0 && t->n == 0)
                r = dm_error_set(err, -EINVAL, "%s holds no token: write one per line, NAME TOKEN or just TOKEN", what);
        if (r < 0) {
                dm_mcphttp_tokens_release(t);
                return r;
        }
        /* A file with one bare token is the single-token server it always was. */
        if (t->n == 1 && first_bare)
                snprintf(t->v[0].name, sizeof(t->v[0].name), "token");
        return 0;
}

void dm_mcphttp_tokens_release(struct dm_mcphttp_tokens *t)
{
        for (size_t i = 0; i < t->n; i++) {
                explicit_bzero(t->v[i].secret, t->v[i].len);
                free(t->v[i].secret);
        }
        memset(t, 0, sizeof(*t));
}

/* Which principals may connect: names only, never a token. A log line
 * holds 2 KiB, so 64 long names end in a count. */
void dm_mcphttp_tokens_log(const struct dm_mcphttp_tokens *t)
{
        char names[1600];
        size_t n = 0, i;

        names[0] = '\0';
        for (i = 0; i < t->n && n + DM_MCPHTTP_TOKEN_NAME_MAX + 4 < sizeof(names); i++)
                n += (size_t)snprintf(names + n, sizeof(names) - n, "%s'%s'", i ? ", " : "", t->v[i].name);
        if (i < t->n)
                snprintf(names + n, sizeof(names) - n, " and %zu more", t->n - i);
        log_info("http: %zu bearer token%s, one principal each: %s", t->n, t->n == 1 ? "" : "s", names);
}

static int random_bytes(unsigned char *buf, size_t n)
{
        size_t got = 0;

        while (got < n) {
                ssize_t r = getrandom(buf + got, n - got, 0);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                got += (size_t)r;
        }
        return 0;
}

int dm_mcphttp_token_generate(char ret[65])
{
        unsigned char raw[32];
        int r = random_bytes(raw, sizeof(raw));

        if (r < 0)
                return r;
        for (size_t i = 0; i < sizeof(raw); i++)
                snprintf(ret + 2 * i, 3, "%02x", raw[i]);
        explicit_bzero(raw, sizeof(raw));
        return 0;
}

int dm_mcphttp_token_write(const char *dir, const char *name, const char *token, char **ret_path, struct stat *ret_st,
                           struct dm_error *err)
{
        _cleanup_close_ int dfd = -1, fd = -1;
        unsigned char rnd[8];
        char tmp[256];
        struct stat st;
        int r;

        if ((r = dm_mkdir_p(dir, 0700, err)) < 0)
                return r;
        dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return dm_error_set(err, -errno, "token file: cannot open the state directory '%s': %s", dir,
                                    strerror(errno));
        if (fstat(dfd, &st) < 0)
                return dm_error_set(err, -errno, "token file: '%s': %s", dir, strerror(errno));
        if (st.st_uid != geteuid() || (st.st_mode & 0022))
                return dm_error_set(err, -EPERM,
                                    "token file: the state directory '%s' must belong to this user and not be "
                                    "writable by others (DEMESNE_STATE_DIR sets it)",
                                    dir);
        if ((r = random_bytes(rnd, sizeof(rnd))) < 0)
                return dm_error_set(err, r, "getrandom: %s", strerror(-r));
        snprintf(tmp, sizeof(tmp), ".%s.%02x%02x%02x%02x%02x%02x%02x%02x", name, rnd[0], rnd[1], rnd[2], rnd[3], rnd[4],
                 rnd[5], rnd[6], rnd[7]);
        /* O_EXCL and O_NOFOLLOW: nothing planted at the name is opened. */
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return dm_error_set(err, -errno, "token file '%s/%s': %s", dir, tmp, strerror(errno));
        if (fchmod(fd, 0600) < 0 || (r = dm_write_all(fd, token, strlen(token))) < 0 ||
            (r = dm_write_all(fd, "\n", 1)) < 0 || fsync(fd) < 0 || fstat(fd, &st) < 0) {
                r = r < 0 ? r : -errno;
                unlinkat(dfd, tmp, 0);
                return dm_error_set(err, r, "token file '%s/%s': %s", dir, tmp, strerror(-r));
        }
        /* rename() replaces a symlink at the name; it does not follow it. */
        if (renameat(dfd, tmp, dfd, name) < 0) {
                r = -errno;
                unlinkat(dfd, tmp, 0);
                return dm_error_set(err, r, "token file '%s/%s': %s", dir, name, strerror(-r));
        }
        if (asprintf(ret_path, "%s/%s", dir, name) < 0) {
                unlinkat(dfd, name, 0);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        *ret_st = st;
        return 0;
}

void dm_mcphttp_token_remove(const char *path, const struct stat *st)
{
        struct stat now;

        if (path && lstat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino)
                unlink(path);
}
