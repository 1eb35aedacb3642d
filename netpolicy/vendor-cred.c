/* SPDX-License-Identifier: MIT */
/* The host's vendor credentials (environment and the CLIs' login files), the
 * per-run token and where the price table lives. Secrets are wiped from
 * every buffer they pass through. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "netpolicy/vendor.h"
#include "src/basic/cleanup.h"

#define LOGIN_FILE_MAX (1024 * 1024)

const char *dm_vendor_name(enum dm_vendor provider)
{
        return provider == DM_VENDOR_ANTHROPIC ? "anthropic" : "openai";
}

static void wipe_free(char **s)
{
        if (*s) {
                explicit_bzero(*s, strlen(*s));
                free(*s);
        }
        *s = NULL;
}

void dm_vendor_cred_release(struct dm_vendor_cred *c)
{
        if (!c)
                return;
        wipe_free(&c->secret);
        wipe_free(&c->account_id);
        memset(c, 0, sizeof(*c));
}

int dm_vendor_cred_copy(struct dm_vendor_cred *dst, const struct dm_vendor_cred *src)
{
        struct dm_vendor_cred c = { .auth = src->auth };

        memcpy(c.source, src->source, sizeof(c.source));
        if ((src->secret && !(c.secret = strdup(src->secret))) ||
            (src->account_id && !(c.account_id = strdup(src->account_id)))) {
                dm_vendor_cred_release(&c);
                return -ENOMEM;
        }
        *dst = c;
        return 0;
}

void dm_vendor_env_release(struct dm_vendor_env *e)
{
        if (!e)
                return;
        wipe_free(&e->anthropic_api_key);
        wipe_free(&e->claude_oauth_token);
        wipe_free(&e->openai_api_key);
        wipe_free(&e->home);
}

/* A value of env, NULL when env is NULL or the value unset or empty. */
#define ENV(env, field) ((env) && (env)->field && *(env)->field ? (env)->field : NULL)

/* The login file: the operator's (login_file), else ~/rel. NULL without HOME. */
static const char *login_path(const struct dm_vendor_env *env, const char *login_file, const char *rel, char *buf,
                              size_t len)
{
        const char *home = ENV(env, home);

        if (login_file && *login_file)
                return login_file;
        if (!home)
                return NULL;
        snprintf(buf, len, "%s/%s", home, rel);
        return buf;
}

/* Reads a small JSON file, wiping the raw text afterwards. NULL with errno
 * (ENOENT when absent, EFBIG, EINVAL for bad JSON). */
static json_object *read_login_file(const char *path)
{
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        json_object *o;
        struct stat st;
        char *text;
        size_t len = 0;

        if (fd < 0 || fstat(fd, &st) < 0)
                return NULL;
        if (!S_ISREG(st.st_mode) || st.st_size > LOGIN_FILE_MAX) {
                errno = S_ISREG(st.st_mode) ? EFBIG : EINVAL;
                return NULL;
        }
        if (!(text = malloc((size_t)st.st_size + 1)))
                return NULL;
        while (len < (size_t)st.st_size) {
                ssize_t n = read(fd, text + len, (size_t)st.st_size - len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                len += (size_t)n;
        }
        text[len] = '\0';
        o = json_tokener_parse(text);
        explicit_bzero(text, len);
        free(text);
        if (!o)
                errno = EINVAL;
        return o;
}

static const char *str_at(json_object *o, const char *a, const char *b)
{
        json_object *v;

        if (!o || !json_object_object_get_ex(o, a, &v))
                return NULL;
        if (b && !json_object_object_get_ex(v, b, &v))
                return NULL;
        if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v) == 0)
                return NULL;
        return json_object_get_string(v);
}

/* Wipes every string the login document holds before freeing it. */
static void wipe_json(json_object *o)
{
        if (!o)
                return;
        if (json_object_is_type(o, json_type_string)) {
                explicit_bzero((char *)json_object_get_string(o), (size_t)json_object_get_string_len(o));
        } else if (json_object_is_type(o, json_type_object)) {
                json_object_object_foreach(o, k, v)
                {
                        (void)k;
                        wipe_json(v);
                }
        } else if (json_object_is_type(o, json_type_array)) {
                for (size_t i = 0; i < json_object_array_length(o); i++)
                        wipe_json(json_object_array_get_idx(o, i));
        }
}

static int set(struct dm_vendor_cred *c, enum dm_vendor_auth auth, const char *secret, const char *account,
               const char *source)
{
        memset(c, 0, sizeof(*c));
        c->auth = auth;
        /* A long login file's path is cut short: it is only for logs. */
        memcpy(c->source, source, strnlen(source, sizeof(c->source) - 1));
        if (!(c->secret = strdup(secret)) || (account && !(c->account_id = strdup(account)))) {
                dm_vendor_cred_release(c);
                return -ENOMEM;
        }
        return 0;
}

static int load_anthropic(const struct dm_vendor_env *env, const char *login_file, struct dm_vendor_cred *c,
                          struct dm_error *err)
{
        char buf[PATH_MAX];
        const char *path, *tok;
        json_object *doc;
        int r;

        if (ENV(env, anthropic_api_key))
                return set(c, DM_VENDOR_AUTH_API_KEY, ENV(env, anthropic_api_key), NULL, "ANTHROPIC_API_KEY");
        if (ENV(env, claude_oauth_token))
                return set(c, DM_VENDOR_AUTH_OAUTH, ENV(env, claude_oauth_token), NULL, "CLAUDE_CODE_OAUTH_TOKEN");
        path = login_path(env, login_file, ".claude/.credentials.json", buf, sizeof(buf));
        if (!path || !(doc = read_login_file(path))) {
                if (!path || errno == ENOENT)
                        return dm_error_set(err, -ENOENT, "%s",
                                            dm_vendor_unavailable(DM_VENDOR_ANTHROPIC, env, login_file));
                return dm_error_set(err, -EINVAL, "Claude login file '%s': %s", path,
                                    errno == EINVAL ? "not a JSON file" : strerror(errno));
        }
        tok = str_at(doc, "claudeAiOauth", "accessToken");
        r = tok ? set(c, DM_VENDOR_AUTH_OAUTH, tok, NULL, path)
                : dm_error_set(err, -EINVAL, "Claude login file '%s' has no claudeAiOauth.accessToken", path);
        wipe_json(doc);
        json_object_put(doc);
        return r;
}

static int load_openai(const struct dm_vendor_env *env, const char *login_file, struct dm_vendor_cred *c,
                       struct dm_error *err)
{
        char buf[PATH_MAX];
        const char *path, *key, *tok, *account;
        json_object *doc;
        int r;

        if (ENV(env, openai_api_key))
                return set(c, DM_VENDOR_AUTH_API_KEY, ENV(env, openai_api_key), NULL, "OPENAI_API_KEY");
        path = login_path(env, login_file, ".codex/auth.json", buf, sizeof(buf));
        if (!path || !(doc = read_login_file(path))) {
                if (!path || errno == ENOENT)
                        return dm_error_set(err, -ENOENT, "%s",
                                            dm_vendor_unavailable(DM_VENDOR_OPENAI, env, login_file));
                return dm_error_set(err, -EINVAL, "Codex login file '%s': %s", path,
                                    errno == EINVAL ? "not a JSON file" : strerror(errno));
        }
        key = str_at(doc, "OPENAI_API_KEY", NULL);
        tok = str_at(doc, "tokens", "access_token");
        account = str_at(doc, "tokens", "account_id");
        if (key)
                r = set(c, DM_VENDOR_AUTH_API_KEY, key, NULL, path);
        else if (tok && account)
                r = set(c, DM_VENDOR_AUTH_CHATGPT, tok, account, path);
        else
                r = dm_error_set(err, -EINVAL,
                                 "Codex login file '%s' has neither OPENAI_API_KEY nor tokens.access_token and "
                                 "tokens.account_id",
                                 path);
        wipe_json(doc);
        json_object_put(doc);
        return r;
}

int dm_vendor_cred_load(enum dm_vendor provider, const struct dm_vendor_env *env, const char *login_file,
                        struct dm_vendor_cred *ret, struct dm_error *err)
{
        struct dm_vendor_cred c;
        int r = provider == DM_VENDOR_ANTHROPIC ? load_anthropic(env, login_file, &c, err)
                                                : load_openai(env, login_file, &c, err);

        if (r == -ENOMEM)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (r < 0)
                return r;
        *ret = c;
        return 0;
}

const char *dm_vendor_unavailable(enum dm_vendor provider, const struct dm_vendor_env *env, const char *login_file)
{
        char buf[PATH_MAX];
        const char *path;

        if (provider == DM_VENDOR_ANTHROPIC) {
                if (ENV(env, anthropic_api_key) || ENV(env, claude_oauth_token))
                        return NULL;
                path = login_path(env, login_file, ".claude/.credentials.json", buf, sizeof(buf));
                if (path && access(path, R_OK) == 0)
                        return NULL;
                return "no ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN or ~/.claude/.credentials.json "
                       "(DEMESNE_CLAUDE_CREDENTIALS) on the host";
        }
        if (ENV(env, openai_api_key))
                return NULL;
        path = login_path(env, login_file, ".codex/auth.json", buf, sizeof(buf));
        if (path && access(path, R_OK) == 0)
                return NULL;
        return "no OPENAI_API_KEY or ~/.codex/auth.json (DEMESNE_CODEX_AUTH) on the host";
}

int dm_vendor_token_new(char out[65])
{
        unsigned char rnd[32];
        size_t got = 0;

        while (got < sizeof(rnd)) {
                ssize_t n = getrandom(rnd + got, sizeof(rnd) - got, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                got += (size_t)n;
        }
        for (size_t i = 0; i < sizeof(rnd); i++)
                snprintf(out + 2 * i, 3, "%02x", rnd[i]);
        explicit_bzero(rnd, sizeof(rnd));
        return 0;
}

const char *dm_vendor_prices_path(const char *given)
{
        static const char *const candidates[] = { DM_PKGDATADIR "/prices.json", DM_SRCDIR "/data/prices.json" };

        if (given && *given)
                return given;
        for (size_t i = 0; i < DM_ARRAY_SIZE(candidates); i++)
                if (access(candidates[i], R_OK) == 0)
                        return candidates[i];
        return candidates[0];
}
