/* SPDX-License-Identifier: MIT */
#ifndef DM_BACKENDS_DOCKER_INTERNAL_H
#define DM_BACKENDS_DOCKER_INTERNAL_H

/* What the docker backend's files share, defined in docker.c (the backend
 * and its readers of engine answers), userns.c (id mappings) and archive.c
 * (files in and out of containers). engine.c includes it to make the
 * backend. Never included outside backends/ but by its tests and fuzz
 * targets. */

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/curl.h"
#include "src/basic/error.h"

struct json_object;

/* The docker backend's HTTP client, for the ops that live in other files. */
struct dm_curl *dm_docker_http(struct dm_backend *b);

/* One call to the engine through docker.c's helper: a status not in ok
 * (0-ended) is an error in the engine's words; with ret, the answer parsed
 * as JSON; ret_status (may be NULL) gets the status. path is sent as is. */
int dm_docker_call(struct dm_backend *b, const char *method, const char *body, long timeout_ms, const long *ok,
                   long *ret_status, struct json_object **ret, struct dm_error *err, const char *path);
/* Engine ids are hex, names are [a-zA-Z0-9][a-zA-Z0-9_.-]* (at most 256):
 * anything else is -EINVAL naming what (a caller bug, or an attempt to
 * reach another endpoint). */
int dm_docker_check_ref(const char *what, const char *ref, struct dm_error *err);

/* backends/docker-image.c: pause, unpause, commit and images. */
int dm_docker_pause(struct dm_backend *b, const char *id, struct dm_error *err);
int dm_docker_unpause(struct dm_backend *b, const char *id, struct dm_error *err);
int dm_docker_commit(struct dm_backend *b, const char *id, const struct dm_commit_spec *spec, char **ret_image_id,
                     struct dm_error *err);
int dm_docker_image_inspect(struct dm_backend *b, const char *ref, struct dm_image_entry *ret, struct dm_error *err);
int dm_docker_image_remove(struct dm_backend *b, const char *ref, struct dm_error *err);
int dm_docker_image_list(struct dm_backend *b, const char *label, struct dm_image_entry **ret, size_t *ret_n,
                         struct dm_error *err);

/* backends/userns.c: how the engine maps ids, asked once per backend. */
struct dm_userns_cache {
        pthread_mutex_t lock;
        bool known;
        struct dm_userns value;
        /* archive.c's, asked once too: whether the engine reads an
         * archive's path as a glob (Podman). 0 not asked yet, 1 yes, 2 no. */
        int globs;
};
struct dm_userns_cache *dm_docker_userns_cache(struct dm_backend *b);
int dm_docker_userns(struct dm_backend *b, struct dm_userns *ret, struct dm_error *err);
int dm_docker_container_root(struct dm_backend *b, const char *id, unsigned *ret_uid, unsigned *ret_gid,
                             struct dm_error *err);
int dm_docker_put_archive(struct dm_backend *b, const char *id, const char *dir, int tar_fd, int64_t tar_len,
                          struct dm_error *err);
int dm_docker_get_archive(struct dm_backend *b, const char *id, const char *path, int out_fd, int64_t max,
                          struct dm_error *err);
int dm_docker_exec_pid(struct dm_backend *b, const char *exec_id, int *ret_pid, struct dm_error *err);

/* The docker backend's readers of engine answers, on bodies already read
 * (the fuzz target tests/fuzz/fuzz-engine.c calls them directly). The body
 * is JSON (-EPROTO otherwise); fill_info reads a container inspect (free
 * with dm_container_info_release), list_ids a container list (a
 * NULL-terminated malloc'd array of malloc'd ids), exec_exited an exec
 * inspect (true with the exit code once it ended). describe_from_server
 * reads _ping's Server and Api-Version headers, describe_version /version:
 * both make "engine version (API x) at host", malloc'd. */
int dm_docker_parse_json(const char *data, size_t len, struct json_object **ret, struct dm_error *err);
int dm_docker_fill_info(struct json_object *o, struct dm_container_info *ret_info, struct dm_error *err);
int dm_docker_list_ids(struct json_object *o, char ***ret_ids, size_t *ret_n, struct dm_error *err);
bool dm_docker_exec_exited(struct json_object *o, int *ret_exit_code);
bool dm_docker_describe_from_server(const char *server, const char *api, const char *host, char **ret);
int dm_docker_describe_version(struct json_object *o, const char *host, char **ret);

/* The docker backend, owning `owned` (released by release(owned) after the
 * backend's own teardown): how engine.c ties a private podman service's life
 * to the backend that uses it. */
int dm_docker_backend_new_owning(const char *host, int64_t response_max, const struct dm_engine_env *env,
                                 void (*release)(void *), void *owned, struct dm_backend **ret, struct dm_error *err);

#endif
