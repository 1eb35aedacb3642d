/* SPDX-License-Identifier: MIT */
/* What a stdio host server starts with (client.h): an environment of its
 * own rather than demesne's (which holds the vendor keys demesne lends its
 * agents), the user the operator named rather than root, and restarts
 * spaced so that a caller who makes it fail cannot keep it down. */
#include "config.h"
#include "src/mcp/client-internal.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What every program expects and no secret lives in. */
static const char *const base_env[] = { "PATH", "HOME", "LANG", "TZ" };

static bool names(char *const *env, const char *name)
{
        size_t n = strlen(name);

        for (char *const *p = env; *p; p++)
                if (strncmp(*p, name, n) == 0 && (*p)[n] == '=')
                        return true;
        return false;
}

static char *lookup(char *const *environ_, const char *name)
{
        size_t n = strlen(name);

        for (char *const *p = environ_; p && *p; p++)
                if (strncmp(*p, name, n) == 0 && (*p)[n] == '=')
                        return *p;
        return NULL;
}

char **dm_mcpclient_env(const struct dm_mcpclient_spec *spec, char *const *environ_, const char *home_env)
{
        size_t n_env = 0, k = 0;
        char **envp;

        while (spec->env[n_env])
                n_env++;
        envp = calloc(n_env + sizeof(base_env) / sizeof(base_env[0]) + 1, sizeof(*envp));
        if (!envp)
                return NULL;
        for (size_t i = 0; i < n_env; i++)
                envp[k++] = spec->env[i];
        for (size_t i = 0; i < sizeof(base_env) / sizeof(base_env[0]); i++) {
                char *v;
                if (names(spec->env, base_env[i]))
                        continue;
                v = strcmp(base_env[i], "HOME") == 0 && home_env ? (char *)home_env : lookup(environ_, base_env[i]);
                if (v)
                        envp[k++] = v;
        }
        return envp;
}

int64_t dm_mcpclient_backoff_failed(struct dm_mcpclient_backoff *b, int64_t ran_ms, bool by_answer)
{
        if (ran_ms >= DM_MCPCLIENT_HEALTHY_MS)
                b->delay_ms = 0;
        /* A bad answer to one call is that call's doing: doubling the delay
         * would let its caller keep the server from everyone. */
        if (by_answer)
                return DM_MCPCLIENT_BACKOFF_MIN_MS;
        if (b->delay_ms <= 0)
                b->delay_ms = DM_MCPCLIENT_BACKOFF_MIN_MS;
        else
                b->delay_ms =
                        b->delay_ms * 2 > DM_MCPCLIENT_BACKOFF_MAX_MS ? DM_MCPCLIENT_BACKOFF_MAX_MS : b->delay_ms * 2;
        return b->delay_ms;
}

int dm_mcpclient_identity_lookup(const struct dm_mcpclient_spec *spec, struct dm_mcpclient_identity *ret,
                                 struct dm_error *err)
{
        struct passwd pw, *found = NULL;
        char buf[16384];
        int n = 64, r;

        memset(ret, 0, sizeof(*ret));
        if (!spec->user)
                return 0;
        if (geteuid() != 0)
                return dm_error_set(err, -EPERM,
                                    "host MCP server '%s': \"user\": \"%s\" needs demesne to run as root (it runs as "
                                    "uid %u); remove \"user\" or run demesne as root",
                                    spec->name, spec->user, (unsigned)geteuid());
        r = getpwnam_r(spec->user, &pw, buf, sizeof(buf), &found);
        if (r != 0 || !found)
                return dm_error_set(err, r ? -r : -ENOENT, "host MCP server '%s': no user '%s' on this host%s%s",
                                    spec->name, spec->user, r ? ": " : "", r ? strerror(r) : "");
        ret->uid = pw.pw_uid;
        ret->gid = pw.pw_gid;
        if (asprintf(&ret->home_env, "HOME=%s", pw.pw_dir && *pw.pw_dir ? pw.pw_dir : "/") < 0)
                ret->home_env = NULL;
        for (;;) {
                int got = n;
                gid_t *g = realloc(ret->groups, (size_t)n * sizeof(*g));
                if (!g)
                        break;
                ret->groups = g;
                if (getgrouplist(spec->user, pw.pw_gid, g, &got) >= 0) {
                        ret->n_groups = got;
                        break;
                }
                if (got <= n || got > 65536)
                        break;
                n = got;
        }
        if (!ret->home_env || !ret->groups || ret->n_groups < 1) {
                dm_mcpclient_identity_release(ret);
                return dm_error_set(err, -ENOMEM, "host MCP server '%s': the groups of user '%s': out of memory",
                                    spec->name, spec->user);
        }
        ret->set = true;
        return 0;
}

void dm_mcpclient_identity_release(struct dm_mcpclient_identity *id)
{
        free(id->groups);
        free(id->home_env);
        memset(id, 0, sizeof(*id));
}

int dm_mcpclient_identity_apply(const struct dm_mcpclient_identity *id)
{
        if (!id->set)
                return 0;
        if (setgroups((size_t)id->n_groups, id->groups) < 0 || setgid(id->gid) < 0 || setuid(id->uid) < 0)
                return -errno;
        /* Root must not be regained. */
        if (id->uid != 0 && setuid(0) == 0)
                return -EPERM;
        return 0;
}
