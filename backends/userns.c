/* SPDX-License-Identifier: MIT */
/* Who a container's root is on the host, for the docker backend: asked of
 * the engine once (GET /info) and remembered.
 *
 * Rootful Podman gets a user namespace per container: UsernsMode
 * "auto:size=65536" (Podman's compat create takes nothing else for it: its
 * UIDMap/GIDMap options are not read from the compat body). Podman then
 * picks a free range from the "containers" lines of /etc/subuid and
 * /etc/subgid, distinct from every other container's, and the libpod
 * inspect (reachable under the compat prefix) tells which. Measured on
 * Podman 4.3.1 + runc 1.1.5, kernel 6.18: create+start of the python image
 * through the API took a median 262 ms without a user namespace, 295 ms
 * with userns=auto plus that inspect, 286 ms with one fixed range for all;
 * the overlay driver maps the image's layers with idmapped mounts, so no
 * chowned copy of a layer is made per range (none appeared in the store).
 * So every sandbox gets its own range.
 *
 * dockerd has no per-container user namespace: with --userns-remap its
 * /info lists "name=userns" among SecurityOptions and its DockerRootDir ends
 * in "<uid>.<gid>", the remapped root. A rootless engine's containers run
 * as the engine's own user. Anything else is a container whose root is the
 * host's root. */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/curl.h"
#include "backends/docker-internal.h"
#include "src/basic/cleanup.h"

#define INFO_TIMEOUT_MS 60000L
/* Enough for every id a Debian image uses (nobody is 65534). */
#define DM_USERNS_AUTO "auto:size=65536"

static void json_putp(struct json_object **o)
{
        json_object_put(*o);
}

static int get_json(struct dm_backend *b, const char *path, struct json_object **ret, struct dm_error *err)
{
        struct dm_buf out;
        long status = 0;
        int r;

        dm_buf_init(&out, 4u << 20);
        r = dm_curl_request(dm_docker_http(b), "GET", path, NULL, INFO_TIMEOUT_MS, &status, &out, err);
        if (r >= 0 && status != 200)
                r = dm_curl_status_error(err, status, out.data, out.len);
        if (r >= 0) {
                *ret = json_tokener_parse(out.data ? out.data : "");
                if (!*ret)
                        r = dm_error_set(err, -EPROTO, "engine sent invalid JSON for '%s'", path);
        }
        dm_buf_release(&out);
        return r;
}

static struct json_object *member(struct json_object *o, const char *key)
{
        struct json_object *v = NULL;

        return o && json_object_is_type(o, json_type_object) && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

static bool has_secopt(struct json_object *info, const char *name)
{
        struct json_object *a = member(info, "SecurityOptions");
        size_t len = strlen(name);

        for (size_t i = 0; a && json_object_is_type(a, json_type_array) && i < json_object_array_length(a); i++) {
                const char *s = json_object_get_string(json_object_array_get_idx(a, i));

                /* "name=userns" or "name=seccomp,profile=default". */
                if (s && strncmp(s, name, len) == 0 && (s[len] == '\0' || s[len] == ','))
                        return true;
        }
        return false;
}

static int judge(struct dm_backend *b, struct dm_userns *u, struct dm_error *err)
{
        _cleanup_(json_putp) struct json_object *info = NULL;
        struct json_object *v;
        const char *root;
        int r;

        memset(u, 0, sizeof(*u));
        r = get_json(b, "/info", &info, err);
        if (r < 0)
                return dm_error_wrap(err, "ask the engine how it maps user ids");
        /* Podman's compat /info has a top-level Rootless; dockerd's has not. */
        if ((v = member(info, "Rootless")) && json_object_is_type(v, json_type_boolean)) {
                if (json_object_get_boolean(v)) {
                        u->kind = DM_USERNS_ROOTLESS;
                        snprintf(u->detail, sizeof(u->detail),
                                 "rootless Podman: a sandbox's root is the user who runs Podman");
                } else {
                        u->kind = DM_USERNS_PER_CONTAINER;
                        u->mode = DM_USERNS_AUTO;
                        snprintf(u->detail, sizeof(u->detail),
                                 "rootful Podman: each sandbox gets its own range of host ids (userns=auto)");
                }
                return 0;
        }
        if (has_secopt(info, "name=rootless")) {
                u->kind = DM_USERNS_ROOTLESS;
                snprintf(u->detail, sizeof(u->detail), "rootless dockerd: a sandbox's root is the user who runs it");
                return 0;
        }
        if (has_secopt(info, "name=userns")) {
                const char *base;

                root = json_object_get_string(member(info, "DockerRootDir"));
                base = root ? strrchr(root, '/') : NULL;
                if (!base || sscanf(base, "/%u.%u", &u->uid, &u->gid) != 2 || u->uid == 0)
                        return dm_error_set(err, -EPROTO,
                                            "dockerd runs with --userns-remap but its DockerRootDir '%s' does not "
                                            "end in <uid>.<gid>",
                                            root ? root : "");
                u->kind = DM_USERNS_DAEMON;
                snprintf(u->detail, sizeof(u->detail),
                         "dockerd with --userns-remap: a sandbox's root is host uid %u, gid %u", u->uid, u->gid);
                return 0;
        }
        u->kind = DM_USERNS_HOST_ROOT;
        snprintf(u->detail, sizeof(u->detail),
                 "dockerd without --userns-remap: a sandbox's root would be the host's root");
        return 0;
}

int dm_docker_userns(struct dm_backend *b, struct dm_userns *ret, struct dm_error *err)
{
        struct dm_userns_cache *c = dm_docker_userns_cache(b);
        int r = 0;

        pthread_mutex_lock(&c->lock);
        if (!c->known && (r = judge(b, &c->value, err)) >= 0)
                c->known = true;
        if (r >= 0)
                *ret = c->value;
        pthread_mutex_unlock(&c->lock);
        return r;
}

/* "0:2147483647:65536": the host id of container id 0. */
static int map_root(struct json_object *list, unsigned *ret)
{
        for (size_t i = 0; list && json_object_is_type(list, json_type_array) && i < json_object_array_length(list);
             i++) {
                const char *s = json_object_get_string(json_object_array_get_idx(list, i));
                unsigned c, h, n;

                if (s && sscanf(s, "%u:%u:%u", &c, &h, &n) == 3 && c == 0 && n > 0) {
                        *ret = h;
                        return 0;
                }
        }
        return -ENOENT;
}

int dm_docker_container_root(struct dm_backend *b, const char *id, unsigned *ret_uid, unsigned *ret_gid,
                             struct dm_error *err)
{
        _cleanup_(json_putp) struct json_object *o = NULL;
        _cleanup_free_ char *path = NULL;
        struct json_object *maps;
        struct dm_userns u;
        int r;

        r = dm_docker_userns(b, &u, err);
        if (r < 0)
                return r;
        switch (u.kind) {
        case DM_USERNS_DAEMON:
                *ret_uid = u.uid;
                *ret_gid = u.gid;
                return 0;
        case DM_USERNS_HOST_ROOT: *ret_uid = *ret_gid = 0; return 0;
        case DM_USERNS_ROOTLESS: return dm_error_set(err, -EOPNOTSUPP, "a rootless engine's ids are its user's own");
        case DM_USERNS_PER_CONTAINER: break;
        }
        if (!id || strspn(id, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_.-") != strlen(id) ||
            asprintf(&path, "/libpod/containers/%s/json", id) < 0)
                return dm_error_set(err, -EINVAL, "invalid container id '%s'", id ? id : "");
        r = get_json(b, path, &o, err);
        if (r < 0)
                return dm_error_wrap(err, "read the user namespace of container '%.12s'", id);
        maps = member(member(o, "HostConfig"), "IDMappings");
        if (map_root(member(maps, "UidMap"), ret_uid) < 0 || map_root(member(maps, "GidMap"), ret_gid) < 0 ||
            *ret_uid == 0 || *ret_gid == 0)
                return dm_error_set(err, -EPROTO,
                                    "container '%.12s' has no user namespace mapping its root away from the host's",
                                    id);
        return 0;
}
