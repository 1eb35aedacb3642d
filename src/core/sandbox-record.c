/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/sandbox-internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/core/admission.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"

/* A persistent sandbox's record: one JSON file per sandbox in
 * <output root>/.sandboxes, written whole and renamed, so that a later
 * server adopts the sandbox as it was. */

int dm_sandbox_dir(struct dm_context *ctx, char *buf, size_t len, struct dm_error *err)
{
        if ((size_t)snprintf(buf, len, "%s/.sandboxes", ctx->cfg.output_root) >= len)
                return dm_error_set(err, -ENAMETOOLONG, "output root too long");
        return dm_mkdir_p(buf, 0700, err);
}

bool dm_sandbox_valid_id(const char *id)
{
        return id && strncmp(id, "sbx-", 4) == 0 && strlen(id) == 16 && strspn(id + 4, "0123456789abcdef") == 12;
}

int dm_sandbox_record_write(struct dm_context *ctx, const struct dm_sandbox *sb, struct dm_error *err)
{
        char dir[PATH_MAX], tmp[PATH_MAX + 64], final[PATH_MAX + 64];
        json_object *o = json_object_new_object();
        const char *text;
        int fd, r;

        r = dm_sandbox_dir(ctx, dir, sizeof(dir), err);
        if (r < 0) {
                json_object_put(o);
                return r;
        }
        json_object_object_add(o, "sandbox_id", json_object_new_string(sb->id));
        json_object_object_add(o, "container", json_object_new_string(sb->container));
        json_object_object_add(o, "image", json_object_new_string(sb->image));
        json_object_object_add(o, "egress", json_object_new_string(sb->egress));
        json_object_object_add(o, "output_dir", json_object_new_string(sb->output_dir));
        json_object_object_add(o, "workspace", json_object_new_string(sb->workspace));
        json_object_object_add(o, "shim_dir", json_object_new_string(sb->shim_dir));
        json_object_object_add(o, "allow", json_object_new_string(sb->allow));
        if (sb->net_ifname[0]) {
                json_object *net = json_object_new_object();
                char a[INET_ADDRSTRLEN];

                json_object_object_add(net, "ifname", json_object_new_string(sb->net_ifname));
                inet_ntop(AF_INET, &sb->net_host, a, sizeof(a));
                json_object_object_add(net, "host", json_object_new_string(a));
                inet_ntop(AF_INET, &sb->net_peer, a, sizeof(a));
                json_object_object_add(net, "peer", json_object_new_string(a));
                json_object_object_add(o, "net", net);
        }
        json_object_object_add(o, "created_at", json_object_new_int64(sb->created_at));
        json_object_object_add(o, "expires_at", json_object_new_int64(sb->expires_at));
        json_object_object_add(o, "ttl_seconds", json_object_new_int64(sb->ttl_s));
        json_object_object_add(o, "principal", json_object_new_string(sb->principal));
        if (sb->server[0])
                json_object_object_add(o, "server", json_object_new_string(sb->server));
        if (sb->nested)
                json_object_object_add(o, "nested", json_object_new_boolean(true));
        if (sb->paused)
                json_object_object_add(o, "paused", json_object_new_boolean(true));
        text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
        snprintf(tmp, sizeof(tmp), "%s/.%s.%d.%lx.tmp", dir, sb->id, (int)getpid(), (unsigned long)pthread_self());
        snprintf(final, sizeof(final), "%s/%s.json", dir, sb->id);
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
                json_object_put(o);
                return dm_error_set(err, -errno, "cannot write sandbox record '%s': %s", tmp, strerror(errno));
        }
        r = dm_write_all(fd, text, strlen(text));
        close(fd);
        json_object_put(o);
        /* Written whole, then renamed: a reader sees the old record or the new. */
        if (r < 0 || rename(tmp, final) < 0) {
                r = r < 0 ? r : -errno;
                unlink(tmp);
                return dm_error_set(err, r, "cannot write sandbox record '%s': %s", final, strerror(-r));
        }
        return 0;
}

void dm_record_copy_str(json_object *o, const char *key, char *dst, size_t len)
{
        json_object *v;

        dst[0] = '\0';
        if (json_object_object_get_ex(o, key, &v) && json_object_is_type(v, json_type_string))
                snprintf(dst, len, "%s", json_object_get_string(v));
}

int64_t dm_record_int(json_object *o, const char *key)
{
        json_object *v;
        return json_object_object_get_ex(o, key, &v) ? json_object_get_int64(v) : 0;
}

int dm_sandbox_record_read(struct dm_context *ctx, const char *id, struct dm_sandbox *sb, struct dm_error *err)
{
        char dir[PATH_MAX], name[DM_SANDBOX_ID_LEN + 8];
        _cleanup_free_ char *text = NULL;
        _cleanup_close_ int dirfd = -1;
        json_object *o = NULL;

        if (!dm_sandbox_valid_id(id))
                return dm_error_set(err, -ENOENT,
                                    "unknown sandbox '%.64s': ids look like sbx-0123456789ab "
                                    "(sandbox_list shows the live ones)",
                                    id ? id : "");
        /* Only read here: no directory made (dm_sandbox_dir makes it). */
        if ((size_t)snprintf(dir, sizeof(dir), "%s/.sandboxes", ctx->cfg.output_root) >= sizeof(dir))
                return dm_error_set(err, -ENAMETOOLONG, "output root too long");
        /* Read by hand, not json_object_from_file: that one writes its
         * error into a global buffer of json-c's, which concurrent calls for
         * an unknown sandbox race on (ThreadSanitizer). A record is small. */
        snprintf(name, sizeof(name), "%s.json", id);
        dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd >= 0 && dm_io_read_capped(dirfd, name, 1 << 20, &text, NULL) == 0)
                o = json_tokener_parse(text);
        if (!o)
                return dm_error_set(err, -ENOENT,
                                    "unknown sandbox '%s': it was destroyed, expired, or never "
                                    "existed (sandbox_list shows the live ones)",
                                    id);
        memset(sb, 0, sizeof(*sb));
        dm_record_copy_str(o, "sandbox_id", sb->id, sizeof(sb->id));
        dm_record_copy_str(o, "container", sb->container, sizeof(sb->container));
        dm_record_copy_str(o, "image", sb->image, sizeof(sb->image));
        dm_record_copy_str(o, "egress", sb->egress, sizeof(sb->egress));
        dm_record_copy_str(o, "output_dir", sb->output_dir, sizeof(sb->output_dir));
        dm_record_copy_str(o, "workspace", sb->workspace, sizeof(sb->workspace));
        dm_record_copy_str(o, "shim_dir", sb->shim_dir, sizeof(sb->shim_dir));
        dm_record_copy_str(o, "allow", sb->allow, sizeof(sb->allow));
        /* Records from before owners were kept belong to the local caller. */
        dm_record_copy_str(o, "principal", sb->principal, sizeof(sb->principal));
        if (!sb->principal[0])
                snprintf(sb->principal, sizeof(sb->principal), "local");
        dm_record_copy_str(o, "server", sb->server, sizeof(sb->server));
        {
                json_object *v;

                sb->nested = json_object_object_get_ex(o, "nested", &v) && json_object_get_boolean(v);
                sb->paused = json_object_object_get_ex(o, "paused", &v) && json_object_get_boolean(v);
        }
        {
                json_object *net;
                char a[INET_ADDRSTRLEN];

                if (json_object_object_get_ex(o, "net", &net)) {
                        dm_record_copy_str(net, "ifname", sb->net_ifname, sizeof(sb->net_ifname));
                        dm_record_copy_str(net, "host", a, sizeof(a));
                        inet_pton(AF_INET, a, &sb->net_host);
                        dm_record_copy_str(net, "peer", a, sizeof(a));
                        inet_pton(AF_INET, a, &sb->net_peer);
                }
        }
        sb->created_at = dm_record_int(o, "created_at");
        sb->expires_at = dm_record_int(o, "expires_at");
        sb->ttl_s = dm_record_int(o, "ttl_seconds");
        json_object_put(o);
        if (strcmp(sb->id, id) != 0 || !sb->container[0])
                return dm_error_set(err, -EIO, "sandbox record '%s/%s' is damaged", dir, name);
        return 0;
}

/* ---- the kept policies ---------------------------------------------------- */

struct dm_sandbox_policy {
        struct dm_sandbox_policy *next;
        char id[DM_SANDBOX_ID_LEN];
        struct dm_policy *policy;
};

static struct dm_sandbox_policy *policy_find_locked(struct dm_sandboxes *s, const char *id)
{
        struct dm_sandbox_policy *k = s->policies;

        while (k && strcmp(k->id, id) != 0)
                k = k->next;
        return k;
}

/* Takes p (freed on failure). */
static int policy_add_locked(struct dm_sandboxes *s, const char *id, struct dm_policy *p)
{
        struct dm_sandbox_policy *k = calloc(1, sizeof(*k));

        if (!k) {
                dm_policy_free(p);
                return -ENOMEM;
        }
        snprintf(k->id, sizeof(k->id), "%s", id);
        k->policy = p;
        k->next = s->policies;
        s->policies = k;
        return 0;
}

int dm_sandbox_policy_keep(struct dm_context *ctx, const char *id, const struct dm_policy *p, struct dm_error *err)
{
        struct dm_sandboxes *s = ctx->sandboxes;
        struct dm_policy *copy = NULL;
        int r = dm_policy_dup(p, &copy);

        if (r < 0)
                return dm_error_set(err, r, "out of memory");
        pthread_mutex_lock(&s->policy_lock);
        r = policy_find_locked(s, id) ? -EEXIST : policy_add_locked(s, id, TAKE_PTR(copy));
        pthread_mutex_unlock(&s->policy_lock);
        dm_policy_free(copy);
        return r < 0 ? dm_error_set(err, r, "cannot keep the policy of sandbox '%s'", id) : 0;
}

/* What an earlier server made it with, from its record. */
static int policy_parse(const struct dm_sandbox *sb, struct dm_policy **ret, struct dm_error *err)
{
        char buf[sizeof(sb->allow)];
        const char *allow[DM_POLICY_MAX_ENTRIES + 1];
        size_t n = 0;

        snprintf(buf, sizeof(buf), "%s", sb->allow);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < DM_POLICY_MAX_ENTRIES;
             t = strtok_r(NULL, ",", &save))
                allow[n++] = t;
        allow[n] = NULL;
        /* Accepted when the sandbox was made: the server's setting then counts. */
        if (dm_policy_parse(sb->egress[0] ? sb->egress : "none", allow, DM_POLICY_CALLER_ALLOWED, ret, err) < 0)
                return dm_error_wrap(err, "the egress policy in the record of sandbox '%s'", sb->id);
        return 0;
}

int dm_sandbox_policy_get(struct dm_context *ctx, const struct dm_sandbox *sb, struct dm_policy **ret,
                          struct dm_error *err)
{
        struct dm_sandboxes *s = ctx->sandboxes;
        struct dm_sandbox_policy *k;
        struct dm_policy *parsed = NULL;
        int r = 0;

        /* Parsed under the lock (a few microseconds): two first execs into
         * an adopted sandbox parse it once between them. */
        pthread_mutex_lock(&s->policy_lock);
        k = policy_find_locked(s, sb->id);
        if (!k) {
                r = policy_parse(sb, &parsed, err);
                if (r >= 0 && (r = policy_add_locked(s, sb->id, parsed)) < 0)
                        dm_error_set(err, r, "out of memory");
                k = r < 0 ? NULL : s->policies;
        }
        if (k && (r = dm_policy_dup(k->policy, ret)) < 0)
                dm_error_set(err, r, "out of memory");
        pthread_mutex_unlock(&s->policy_lock);
        return r;
}

enum dm_egress dm_sandbox_egress(struct dm_context *ctx, const struct dm_sandbox *sb)
{
        struct dm_policy *p = NULL;
        struct dm_error err = { 0 };
        enum dm_egress mode = DM_EGRESS_NONE;

        if (dm_sandbox_policy_get(ctx, sb, &p, &err) == 0)
                mode = p->mode;
        dm_policy_free(p);
        return mode;
}

void dm_sandbox_policy_forget(struct dm_context *ctx, const char *id)
{
        struct dm_sandboxes *s = ctx->sandboxes;
        struct dm_sandbox_policy *found = NULL;

        pthread_mutex_lock(&s->policy_lock);
        for (struct dm_sandbox_policy **p = &s->policies; *p; p = &(*p)->next)
                if (strcmp((*p)->id, id) == 0) {
                        found = *p;
                        *p = found->next;
                        break;
                }
        pthread_mutex_unlock(&s->policy_lock);
        if (found)
                dm_policy_free(found->policy);
        free(found);
}

void dm_sandbox_policies_free(struct dm_sandboxes *s)
{
        while (s && s->policies) {
                struct dm_sandbox_policy *k = s->policies;

                s->policies = k->next;
                dm_policy_free(k->policy);
                free(k);
        }
}

/* The sandbox is gone: its record, its kept policy, and the admission slot
 * bound to it. */
void dm_sandbox_record_remove(struct dm_context *ctx, const char *id)
{
        char dir[PATH_MAX], path[PATH_MAX + 64];
        struct dm_error err = { 0 };

        dm_admission_release_key(ctx->admission, id);
        dm_sandbox_policy_forget(ctx, id);
        if (dm_sandbox_dir(ctx, dir, sizeof(dir), &err) < 0)
                return;
        snprintf(path, sizeof(path), "%s/%s.json", dir, id);
        unlink(path);
}

/* Calls fn for each record in the directory. */
void dm_sandbox_record_each(struct dm_context *ctx, void (*fn)(struct dm_context *, const char *, void *), void *ud)
{
        char dir[PATH_MAX];
        DIR *d;
        struct dirent *e;

        /* Not made when missing: a sweep in `demesne run` must leave no
         * directory of its own in the output root (it would be root's in a
         * user's root). */
        if ((size_t)snprintf(dir, sizeof(dir), "%s/.sandboxes", ctx->cfg.output_root) >= sizeof(dir) ||
            !(d = opendir(dir)))
                return;
        while ((e = readdir(d))) {
                char id[DM_SANDBOX_ID_LEN];
                size_t n = strlen(e->d_name);
                if (n != 21 || strcmp(e->d_name + 16, ".json") != 0)
                        continue;
                memcpy(id, e->d_name, 16);
                id[16] = '\0';
                if (dm_sandbox_valid_id(id))
                        fn(ctx, id, ud);
        }
        closedir(d);
}
