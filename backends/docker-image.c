/* SPDX-License-Identifier: MIT */
/* The docker backend's pause, unpause, commit and image calls (Podman's
 * compat service and dockerd alike), through docker.c's one call helper. */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/docker-commit-ids.h"
#include "backends/docker-internal.h"
#include "backends/json.h"
#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"
#include "src/basic/uri.h"

#define CALL_TIMEOUT_MS 120000L
/* A commit copies the container's whole writable layer. */
#define COMMIT_TIMEOUT_MS 600000L
#define OK(...) ((const long[]){ __VA_ARGS__, 0 })

static void json_putp(struct json_object **o)
{
        json_object_put(*o);
}
#define _cleanup_json_ _cleanup_(json_putp)

static void buf_releasep(struct dm_buf *b)
{
        dm_buf_release(b);
}

int dm_docker_check_ref(const char *what, const char *ref, struct dm_error *err)
{
        if (!ref || !ref[0] || strlen(ref) > 256)
                return dm_error_set(err, -EINVAL, "invalid %s '%s'", what, ref ? ref : "(null)");
        for (const char *p = ref; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
                      *p == '.' || *p == '-'))
                        return dm_error_set(err, -EINVAL, "invalid %s '%s'", what, ref);
        return 0;
}

/* An image reference as we make them: "localhost/repo/name:tag" or an id. */
static int check_image_ref(const char *ref, struct dm_error *err)
{
        if (!ref || !ref[0] || strlen(ref) > 256 || ref[0] == '/' || ref[0] == '.' || strstr(ref, ".."))
                return dm_error_set(err, -EINVAL, "invalid image reference '%s'", ref ? ref : "(null)");
        for (const char *p = ref; *p; p++)
                if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_' ||
                      *p == '.' || *p == '-' || *p == '/' || *p == ':'))
                        return dm_error_set(err, -EINVAL, "invalid image reference '%s'", ref);
        return 0;
}

static const char *state_status(struct dm_backend *b, const char *id)
{
        static const char *const known[] = { "paused", "running", NULL };
        struct dm_container_info info;
        const char *s = "";

        if (b->ops->inspect(b, id, &info, NULL) < 0)
                return "";
        for (size_t i = 0; known[i]; i++)
                if (strcmp(info.status, known[i]) == 0)
                        s = known[i];
        dm_container_info_release(&info);
        return s;
}

/* Rootless Podman on cgroup v1 has no freezer it may use: the engine's
 * words name cgroups; ours say what would make it work. */
static int pause_refused(const char *id, bool pause, struct dm_error *err)
{
        char said[320];

        if (!strstr(err->msg, "cgroup") && !strstr(err->msg, "rootless") && !strstr(err->msg, "freezer"))
                return dm_error_wrap(err, "%s container '%s'", pause ? "pause" : "unpause", id);
        /* The engine's words, copied: err is written below. */
        snprintf(said, sizeof(said), "%.300s", err->msg);
        return dm_error_set(err, -EOPNOTSUPP,
                            "this engine cannot %s containers: it needs the cgroup freezer, which rootless Podman "
                            "only has on cgroup v2 (this host runs cgroup v1 or a hybrid layout); use rootful Podman "
                            "or dockerd, or boot with systemd.unified_cgroup_hierarchy=1 (engine said: %s)",
                            pause ? "pause" : "unpause", said);
}

static int pause_call(struct dm_backend *b, const char *id, bool pause, struct dm_error *err)
{
        char path[320];
        int r = dm_docker_check_ref("container id", id, err);

        if (r < 0)
                return r;
        snprintf(path, sizeof(path), "/containers/%s/%s", id, pause ? "pause" : "unpause");
        r = dm_docker_call(b, "POST", NULL, CALL_TIMEOUT_MS, OK(204, 200), NULL, NULL, err, path);
        if (r == -ENOENT)
                return dm_error_wrap(err, "%s container '%s'", pause ? "pause" : "unpause", id);
        /* Both engines refuse to pause a paused container and to unpause a
         * running one: the state wanted is the state there. */
        if (r < 0 && strcmp(state_status(b, id), pause ? "paused" : "running") == 0) {
                dm_error_clear(err);
                return 0;
        }
        return r < 0 ? pause_refused(id, pause, err) : 0;
}

int dm_docker_pause(struct dm_backend *b, const char *id, struct dm_error *err)
{
        return pause_call(b, id, true, err);
}

int dm_docker_unpause(struct dm_backend *b, const char *id, struct dm_error *err)
{
        return pause_call(b, id, false, err);
}

/* "changes=LABEL key=\"value\"" for each label, "changes=ENV NAME=\"\"" for
 * each variable to clear: Podman 4.3's compat commit ignores the body's
 * Labels, and both engines take Dockerfile changes. */
static int commit_query(const char *id, const struct dm_commit_spec *spec, bool pause, char **ret, struct dm_error *err)
{
        _cleanup_free_ char *repo = dm_uri_escape(spec->repo, "/"), *tag = dm_uri_escape(spec->tag, "");
        _cleanup_(buf_releasep) struct dm_buf q = { 0 };
        int r;

        if (!repo || !tag)
                return dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_init(&q, 64 << 10);
        r = dm_buf_printf(&q, "/commit?container=%s&repo=%s&tag=%s&pause=%s", id, repo, tag, pause ? "true" : "false");
        for (size_t i = 0; r >= 0 && spec->labels && spec->labels[i]; i++) {
                const char *kv = spec->labels[i], *eq = strchr(kv, '=');
                _cleanup_free_ char *change = NULL, *esc = NULL;

                /* Values are ours (ids, principals, names checked above us):
                 * refuse what would need quoting rather than quote it. */
                if (!eq || eq == kv || strpbrk(kv, "\"\\\n\r\t"))
                        return dm_error_set(err, -EINVAL, "invalid image label '%s'", kv);
                if (asprintf(&change, "LABEL %.*s=\"%s\"", (int)(eq - kv), kv, eq + 1) < 0 ||
                    !(esc = dm_uri_escape(change, "")))
                        return dm_error_set(err, -ENOMEM, "out of memory");
                r = dm_buf_printf(&q, "&changes=%s", esc);
        }
        for (size_t i = 0; r >= 0 && spec->env_clear && spec->env_clear[i]; i++) {
                const char *name = spec->env_clear[i];

                if (!name[0] || strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(name))
                        return dm_error_set(err, -EINVAL, "invalid environment variable name '%s'", name);
                /* "ENV NAME=\"\"", escaped. */
                r = dm_buf_printf(&q, "&changes=ENV%%20%s%%3D%%22%%22", name);
        }
        if (r < 0 || !(*ret = dm_buf_steal(&q)))
                return dm_error_set(err, -E2BIG, "image labels too long");
        return 0;
}

/* Rootless Podman on cgroup v1 cannot pause, so neither can it commit
 * with pause=true; it commits a running container. */
static bool cannot_pause(const struct dm_error *err)
{
        return strstr(err->msg, "pause") && (strstr(err->msg, "cgroup") || strstr(err->msg, "rootless"));
}

static int commit_once(struct dm_backend *b, const char *id, const struct dm_commit_spec *spec, bool may_pause,
                       char **ret_image_id, struct dm_error *err)
{
        _cleanup_json_ struct json_object *o = NULL;
        const char *image_id;
        int r = 0;

        /* Paused for the copy where the engine can (a consistent file
         * system), else taken as it runs. Podman wants a body (its decoder
         * fails on none); {} is an empty container config for both. */
        for (int pause = may_pause; r >= 0; pause = 0) {
                _cleanup_free_ char *path = NULL;

                r = commit_query(id, spec, pause, &path, err);
                if (r >= 0)
                        r = dm_docker_call(b, "POST", "{}", COMMIT_TIMEOUT_MS, OK(201, 200), NULL, &o, err, path);
                if (r >= 0 || !pause || !cannot_pause(err))
                        break;
                log_info("commit container '%.12s': the engine cannot pause it (%s); committing it running", id,
                         err->msg);
                dm_error_clear(err);
                r = 0;
        }
        if (r < 0)
                return dm_error_wrap(err, "commit container '%s'", id);
        image_id = json_object_get_string(json_object_object_get(o, "Id"));
        if (!image_id || !image_id[0])
                return dm_error_set(err, -EPROTO, "commit container '%s': the engine named no image", id);
        *ret_image_id = strdup(image_id);
        return *ret_image_id ? 0 : dm_error_set(err, -ENOMEM, "out of memory");
}

/* Rootful Podman with a range per sandbox: a commit keeps the source's
 * host ids (backends/docker-commit-ids.c), so the changes are shifted back
 * into a helper container, whose commit is the image. The source stays
 * paused while they are read, where it can be. */
static int commit_shifted(struct dm_backend *b, const char *id, const struct dm_commit_spec *spec, char **ret_image_id,
                          struct dm_error *err)
{
        _cleanup_free_ char *helper = NULL, *name = NULL;
        struct dm_error perr = { 0 };
        unsigned uid, gid;
        bool paused;
        int r;

        r = dm_docker_container_root(b, id, &uid, &gid, err);
        if (r < 0)
                return dm_error_wrap(err, "commit container '%s'", id);
        paused = dm_docker_pause(b, id, &perr) >= 0;
        if (!paused)
                log_info("commit container '%.12s': cannot pause it (%s); reading it running", id, perr.msg);
        if (spec->tag && asprintf(&name, DM_COMMIT_HELPER_PREFIX "%s", spec->tag) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_docker_commit_shift(b, id, uid, gid, name, &helper, err);
        if (paused && dm_docker_unpause(b, id, &perr) < 0)
                log_warning("commit container '%.12s': cannot unpause it: %s", id, perr.msg);
        if (r < 0)
                return dm_error_wrap(err, "commit container '%s'", id);
        r = commit_once(b, helper, spec, false, ret_image_id, err);
        dm_docker_commit_helper_remove(b, helper);
        return r;
}

int dm_docker_commit(struct dm_backend *b, const char *id, const struct dm_commit_spec *spec, char **ret_image_id,
                     struct dm_error *err)
{
        struct dm_userns u;
        int r = dm_docker_check_ref("container id", id, err);

        if (r >= 0)
                r = dm_docker_check_ref("image tag", spec->tag, err);
        if (r >= 0)
                r = check_image_ref(spec->repo, err);
        if (r >= 0)
                r = dm_docker_userns(b, &u, err);
        if (r < 0)
                return r;
        if (u.kind == DM_USERNS_PER_CONTAINER)
                return commit_shifted(b, id, spec, ret_image_id, err);
        return commit_once(b, id, spec, true, ret_image_id, err);
}

void dm_image_entry_release(struct dm_image_entry *e)
{
        if (!e)
                return;
        free(e->id);
        free(e->ref);
        for (char **l = e->labels; l && *l; l++)
                free(*l);
        free(e->labels);
        memset(e, 0, sizeof(*e));
}

void dm_image_entries_free(struct dm_image_entry *e, size_t n)
{
        for (size_t i = 0; e && i < n; i++)
                dm_image_entry_release(&e[i]);
        free(e);
}

/* An image list item or an image inspect: labels are Labels at the top
 * (list) or in Config (inspect), Created a number (list) or a time
 * (inspect). */
static int fill_entry(struct json_object *o, struct dm_image_entry *e, struct dm_error *err)
{
        struct json_object *tags = json_object_object_get(o, "RepoTags"),
                           *created = json_object_object_get(o, "Created"),
                           *labels = json_object_object_get(o, "Labels");
        const char *id = json_object_get_string(json_object_object_get(o, "Id"));
        const char *ref = tags && json_object_is_type(tags, json_type_array) && json_object_array_length(tags) > 0
                                  ? json_object_get_string(json_object_array_get_idx(tags, 0))
                                  : "";

        memset(e, 0, sizeof(*e));
        if (!labels || json_object_is_type(labels, json_type_null))
                labels = json_object_object_get(json_object_object_get(o, "Config"), "Labels");
        e->id = strdup(id ? id : "");
        e->ref = strdup(ref ? ref : "");
        e->size = json_object_get_int64(json_object_object_get(o, "Size"));
        if (created && json_object_is_type(created, json_type_string))
                dm_time_parse(json_object_get_string(created), &e->created);
        else
                e->created = json_object_get_int64(created);
        e->labels = dm_labels_from_json(labels);
        if (!e->id || !e->ref || !e->labels) {
                dm_image_entry_release(e);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        return 0;
}

int dm_docker_image_inspect(struct dm_backend *b, const char *ref, struct dm_image_entry *ret, struct dm_error *err)
{
        _cleanup_json_ struct json_object *o = NULL;
        _cleanup_free_ char *path = NULL;
        int r = check_image_ref(ref, err);

        if (r < 0)
                return r;
        /* Slashes stay: the route is /images/{name:.*}/json. */
        if (asprintf(&path, "/images/%s/json", ref) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_docker_call(b, "GET", NULL, CALL_TIMEOUT_MS, OK(200), NULL, &o, err, path);
        if (r < 0)
                return dm_error_wrap(err, "inspect image '%s'", ref);
        return fill_entry(o, ret, err);
}

int dm_docker_image_remove(struct dm_backend *b, const char *ref, struct dm_error *err)
{
        _cleanup_free_ char *path = NULL;
        long status = 0;
        int r = check_image_ref(ref, err);

        if (r < 0)
                return r;
        if (asprintf(&path, "/images/%s", ref) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_docker_call(b, "DELETE", NULL, CALL_TIMEOUT_MS, OK(200, 404), &status, NULL, err, path);
        if (r < 0)
                return dm_error_wrap(err, "remove image '%s'", ref);
        return 0;
}

int dm_docker_image_list(struct dm_backend *b, const char *label, struct dm_image_entry **ret, size_t *ret_n,
                         struct dm_error *err)
{
        _cleanup_json_ struct json_object *o = NULL;
        _cleanup_free_ char *filter = NULL, *esc = NULL, *path = NULL;
        struct dm_image_entry *v;
        size_t n;
        int r;

        if (!label || strpbrk(label, "\"\\"))
                return dm_error_set(err, -EINVAL, "invalid label filter '%s'", label ? label : "(null)");
        if (asprintf(&filter, "{\"label\":[\"%s\"]}", label) < 0 || !(esc = dm_uri_escape(filter, "")) ||
            asprintf(&path, "/images/json?filters=%s", esc) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_docker_call(b, "GET", NULL, CALL_TIMEOUT_MS, OK(200), NULL, &o, err, path);
        if (r < 0)
                return dm_error_wrap(err, "list images labelled '%s'", label);
        if (!json_object_is_type(o, json_type_array))
                return dm_error_set(err, -EPROTO, "list images: the engine's answer is not a list");
        n = json_object_array_length(o);
        v = calloc(n + 1, sizeof(*v));
        if (!v)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++)
                if ((r = fill_entry(json_object_array_get_idx(o, i), &v[i], err)) < 0) {
                        dm_image_entries_free(v, i);
                        return r;
                }
        *ret = v;
        *ret_n = n;
        return 0;
}
