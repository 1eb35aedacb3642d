/* SPDX-License-Identifier: MIT */
/* The docker backend: the Docker Engine API, as served by dockerd and by
 * Podman's compat service. Podman's deviations are noted where they matter. */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/curl.h"
#include "backends/docker-internal.h"
#include "backends/json.h"
#include "netpolicy/policy.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"
#include "src/basic/uri.h"

/* Ordinary calls finish in well under a second; the limit only turns a hung
 * engine into an error. wait is the one call without a limit. */
#define CALL_TIMEOUT_MS 120000L
#define STREAM_HEAD_TIMEOUT_MS 120000L
/* An explicit ulimit replaces the engine's defaults (Podman), so both are
 * always sent; these are the values used when the spec leaves them at 0. */
#define DEFAULT_NOFILE 4096
#define DEFAULT_NPROC 4096

struct docker {
        struct dm_backend base;
        struct dm_curl *http;
        size_t response_max;
        void (*release)(void *);
        void *owned;
        struct dm_userns_cache userns; /* backends/userns.c */
        int globs;                     /* archive.c: 0 not asked yet, 1 Podman (GET .../archive globs), 2 not */
        /* Images the engine said it has: a cold run asks once, not each time
         * (a round trip of 3-5 ms). A create that finds one gone forgets it. */
        pthread_mutex_t images_lock;
        char *images_seen[8];
        size_t n_images_seen;
};

static struct docker *to_docker(struct dm_backend *b)
{
        return (struct docker *)b;
}

static void json_putp(struct json_object **o)
{
        json_object_put(*o);
}
#define _cleanup_json_ _cleanup_(json_putp)

static void buf_releasep(struct dm_buf *b)
{
        dm_buf_release(b);
}
#define _cleanup_buf_ _cleanup_(buf_releasep)

/* ---- small helpers ------------------------------------------------------ */

#define ENGINE_RACE_TRIES 3 /* calls in all while Podman answers 500 (request_again) */

/* The statuses a call accepts, 0-ended: OK(204, 200). */
#define OK(...) ((const long[]){ __VA_ARGS__, 0 })

static int parse_json(const struct dm_buf *b, struct json_object **ret, struct dm_error *err);

/* One call to the endpoint fmt names: a status not in ok is an error in
 * the engine's words; with ret, the answer parsed as JSON. ret_status (may
 * be NULL) gets the status, 0 when no answer came. */
static int __attribute__((format(printf, 9, 10)))
request(struct docker *d, const char *method, const char *body, long timeout_ms, const long *ok, long *ret_status,
        struct json_object **ret, struct dm_error *err, const char *fmt, ...)
{
        _cleanup_buf_ struct dm_buf out = { 0 };
        _cleanup_free_ char *path = NULL;
        long status = 0;
        va_list ap;
        int r;

        if (ret_status)
                *ret_status = 0;
        va_start(ap, fmt);
        r = vasprintf(&path, fmt, ap);
        va_end(ap);
        if (r < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_init(&out, d->response_max);
        r = dm_curl_request(d->http, method, path, body, timeout_ms, &status, &out, err);
        if (r < 0)
                return r;
        if (ret_status)
                *ret_status = status;
        while (*ok && *ok != status)
                ok++;
        if (!*ok)
                return dm_curl_status_error(err, status, out.data, out.len);
        return ret ? parse_json(&out, ret, err) : 0;
}

/* request(), made up to tries times, pause_ms apart, while the engine
 * answers a 5xx: Podman's 500 for a container being torn down ("read
 * /proc/PID/cgroup: no such process") is gone a moment later. */
static int __attribute__((format(printf, 11, 12)))
request_again(struct docker *d, int tries, int pause_ms, const char *method, const char *body, long timeout_ms,
              const long *ok, long *ret_status, struct json_object **ret, struct dm_error *err, const char *fmt, ...)
{
        _cleanup_free_ char *path = NULL;
        long status = 0;
        va_list ap;
        int r;

        va_start(ap, fmt);
        r = vasprintf(&path, fmt, ap);
        va_end(ap);
        if (r < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (int i = 1;; i++) {
                r = request(d, method, body, timeout_ms, ok, &status, ret, err, "%s", path);
                if (r >= 0 || status < 500 || i >= tries)
                        break;
                /* err may be NULL: callers that only clean up pass none. */
                log_info("%s %s: engine answered %ld%s%s; asking again", method, path, status, err ? ": " : "",
                         err ? err->msg : "");
                dm_error_clear(err);
                usleep((useconds_t)pause_ms * 1000);
        }
        if (ret_status)
                *ret_status = status;
        return r;
}

int dm_docker_parse_json(const char *data, size_t len, struct json_object **ret, struct dm_error *err)
{
        struct json_tokener *tok = json_tokener_new();
        struct json_object *o;
        enum json_tokener_error je;

        if (!tok)
                return dm_error_set(err, -ENOMEM, "out of memory");
        o = json_tokener_parse_ex(tok, data ? data : "", (int)len);
        je = json_tokener_get_error(tok);
        json_tokener_free(tok);
        if (!o || je != json_tokener_success) {
                json_object_put(o);
                return dm_error_set(err, -EPROTO, "engine sent invalid JSON: %s",
                                    je == json_tokener_success ? "empty body" : json_tokener_error_desc(je));
        }
        *ret = o;
        return 0;
}

static int parse_json(const struct dm_buf *b, struct json_object **ret, struct dm_error *err)
{
        return dm_docker_parse_json(b->data, b->len, ret, err);
}

static struct json_object *get(struct json_object *o, const char *key)
{
        struct json_object *v = NULL;

        return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* Borrowed string, or NULL when missing or not a string. */
static const char *get_str(struct json_object *o, const char *key)
{
        struct json_object *v = get(o, key);

        return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static int dup_json_string(struct json_object *o, char **ret, struct dm_error *err)
{
        const char *s = json_object_get_string(o);

        *ret = strdup(s ? s : "");
        return *ret ? 0 : dm_error_set(err, -ENOMEM, "out of memory");
}

int dm_docker_call(struct dm_backend *b, const char *method, const char *body, long timeout_ms, const long *ok,
                   long *ret_status, struct json_object **ret, struct dm_error *err, const char *path)
{
        return request(to_docker(b), method, body, timeout_ms, ok, ret_status, ret, err, "%s", path);
}

/* ---- engine-level calls -------------------------------------------------- */

static int docker_ping(struct dm_backend *b, struct dm_error *err)
{
        if (request(to_docker(b), "GET", NULL, 5000, OK(200), NULL, NULL, err, "/_ping") < 0)
                return dm_error_wrap(err, "ping");
        return 0;
}

/* "Server: Libpod/4.3.1 (linux)" or "Server: Docker/20.10.24 (linux)". */
bool dm_docker_describe_from_server(const char *server, const char *api, const char *host, char **ret)
{
        const char *slash = strchr(server, '/'), *end;
        const char *engine = strncmp(server, "Libpod/", 7) == 0   ? "podman"
                             : strncmp(server, "Docker/", 7) == 0 ? "docker"
                                                                  : NULL;
        size_t len;

        if (!engine || !slash || !api[0])
                return false;
        end = strchr(slash, ' ');
        len = end ? (size_t)(end - slash - 1) : strlen(slash + 1);
        return asprintf(ret, "%s %.*s (API %s) at %s", engine, (int)len, slash + 1, api, host) >= 0;
}

/* From _ping's headers when the engine names itself there (both do): Podman
 * 4.3.1 takes ~1.2 s for GET /version (it asks the package manager about
 * conmon and runc), _ping takes 0.3 ms. /version is the fallback. */
static int docker_describe(struct dm_backend *b, char **ret_desc, struct dm_error *err)
{
        struct docker *d = to_docker(b);
        _cleanup_buf_ struct dm_buf out = { 0 };
        _cleanup_json_ struct json_object *o = NULL;
        struct dm_curl_header hdr[2] = { { .name = "Server" }, { .name = "Api-Version" } };
        long status;
        int r;

        dm_buf_init(&out, d->response_max);
        r = dm_curl_request_headers(d->http, "GET", "/_ping", NULL, CALL_TIMEOUT_MS, &status, &out, hdr, 2, err);
        if (r >= 0 && status == 200 &&
            dm_docker_describe_from_server(hdr[0].value, hdr[1].value, dm_curl_describe_host(d->http), ret_desc))
                return 0;

        if (request(d, "GET", NULL, CALL_TIMEOUT_MS, OK(200), NULL, &o, err, "/version") < 0)
                return dm_error_wrap(err, "engine version");
        if (dm_docker_describe_version(o, dm_curl_describe_host(d->http), ret_desc) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        return 0;
}

int dm_docker_describe_version(struct json_object *o, const char *host, char **ret_desc)
{
        struct json_object *comps;
        const char *engine = "docker", *version, *api;

        /* Podman names itself in Components ("Podman Engine"); its
         * Platform.Name is the OS ("linux/amd64/debian-12"). */
        comps = get(o, "Components");
        for (size_t i = 0; comps && json_object_is_type(comps, json_type_array) && i < json_object_array_length(comps);
             i++) {
                const char *name = get_str(json_object_array_get_idx(comps, i), "Name");
                if (name && strstr(name, "Podman"))
                        engine = "podman";
        }
        version = get_str(o, "Version");
        api = get_str(o, "ApiVersion");
        return asprintf(ret_desc, "%s %s (API %s) at %s", engine, version ? version : "?", api ? api : "?", host) < 0
                       ? -ENOMEM
                       : 0;
}

static bool image_seen(struct docker *d, const char *image, int change)
{
        bool found = false;

        pthread_mutex_lock(&d->images_lock);
        for (size_t i = 0; i < d->n_images_seen && !found; i++) {
                if (strcmp(d->images_seen[i], image) != 0)
                        continue;
                found = true;
                if (change < 0) {
                        free(d->images_seen[i]);
                        d->images_seen[i] = d->images_seen[--d->n_images_seen];
                }
        }
        if (!found && change > 0 && d->n_images_seen < sizeof(d->images_seen) / sizeof(d->images_seen[0])) {
                char *copy = strdup(image);

                if (copy)
                        d->images_seen[d->n_images_seen++] = copy;
        }
        pthread_mutex_unlock(&d->images_lock);
        return found;
}

static int docker_image_exists(struct dm_backend *b, const char *image, bool *ret_exists, struct dm_error *err)
{
        struct docker *d = to_docker(b);
        _cleanup_free_ char *esc = NULL;
        long status;

        if (image_seen(d, image, 0)) {
                *ret_exists = true;
                return 0;
        }

        /* Slashes stay: the route is /images/{name:.*}/json. */
        esc = dm_uri_escape(image, "/:");
        if (!esc)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (request(d, "GET", NULL, CALL_TIMEOUT_MS, OK(200, 404), &status, NULL, err, "/images/%s/json", esc) < 0)
                return dm_error_wrap(err, "look up image '%s'", image);
        *ret_exists = status == 200;
        if (*ret_exists)
                image_seen(d, image, 1);
        return 0;
}

/* ---- containers ----------------------------------------------------------- */

static struct json_object *ulimit_json(const char *name, int64_t value)
{
        struct json_object *u = json_object_new_object();

        if (u && (dm_json_add(u, "Name", json_object_new_string(name)) < 0 ||
                  dm_json_add(u, "Soft", json_object_new_int64(value)) < 0 ||
                  dm_json_add(u, "Hard", json_object_new_int64(value)) < 0)) {
                json_object_put(u);
                return NULL;
        }
        return u;
}

/* Mounts rather than Binds: a "host:target:ro" string cannot carry a path
 * that contains ':' or ','; Mounts takes both paths as separate fields and
 * behaves the same on Docker and Podman 4.3 (checked: ReadOnly honoured). */
static struct json_object *mounts_json(const struct dm_container_spec *spec)
{
        struct json_object *a = json_object_new_array();

        for (size_t i = 0; a && i < spec->n_mounts; i++) {
                struct json_object *m = json_object_new_object();

                if (!m || dm_json_add(m, "Type", json_object_new_string("bind")) < 0 ||
                    dm_json_add(m, "Source", json_object_new_string(spec->mounts[i].host)) < 0 ||
                    dm_json_add(m, "Target", json_object_new_string(spec->mounts[i].target)) < 0 ||
                    dm_json_add(m, "ReadOnly", json_object_new_boolean(spec->mounts[i].readonly)) < 0 ||
                    json_object_array_add(a, m) < 0) {
                        json_object_put(m);
                        json_object_put(a);
                        return NULL;
                }
        }
        return a;
}

static int create_body(const struct dm_container_spec *spec, char **ret, struct dm_error *err)
{
        _cleanup_json_ struct json_object *o = json_object_new_object();
        struct json_object *hc = json_object_new_object(), *labels = NULL, *ulimits;
        int r = 0;

        if (!o || !hc) {
                json_object_put(hc);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < spec->n_mounts; i++)
                if (!spec->mounts[i].host || spec->mounts[i].host[0] != '/' || !spec->mounts[i].target ||
                    spec->mounts[i].target[0] != '/') {
                        json_object_put(hc);
                        return dm_error_set(err, -EINVAL, "mount %zu: host and target must be absolute paths", i);
                }
        if (dm_json_add(o, "HostConfig", hc) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_json_kv(spec->labels, "label", &labels, err);
        if (r < 0)
                return r;
        r |= dm_json_add(o, "Labels", labels);
        r |= dm_json_add(o, "Image", json_object_new_string(spec->image));
        if (spec->entrypoint)
                r |= dm_json_add(o, "Entrypoint", dm_json_strv(spec->entrypoint));
        if (spec->argv || spec->entrypoint)
                r |= dm_json_add(o, "Cmd", dm_json_strv(spec->argv ? spec->argv : (const char *const[]){ NULL }));
        if (spec->env)
                r |= dm_json_add(o, "Env", dm_json_strv(spec->env));
        if (spec->workdir)
                r |= dm_json_add(o, "WorkingDir", json_object_new_string(spec->workdir));
        r |= dm_json_add(o, "Tty", json_object_new_boolean(false));
        /* StdinOnce: the container's stdin closes when the attached client
         * half-closes, which is how a command sees EOF. */
        r |= dm_json_add(o, "OpenStdin", json_object_new_boolean(spec->open_stdin));
        r |= dm_json_add(o, "StdinOnce", json_object_new_boolean(spec->open_stdin));
        r |= dm_json_add(o, "AttachStdin", json_object_new_boolean(spec->open_stdin));
        r |= dm_json_add(o, "AttachStdout", json_object_new_boolean(true));
        r |= dm_json_add(o, "AttachStderr", json_object_new_boolean(true));

        r |= dm_json_add(hc, "Mounts", mounts_json(spec));
        /* A sandbox gets no network unless asked: the safe default. */
        /* "open" is the engine's own default network (the caller's choice,
         * where the operator allows it). */
        r |= dm_json_add(hc, "NetworkMode",
                         json_object_new_string(!spec->network_mode                   ? "none"
                                                : !strcmp(spec->network_mode, "open") ? "bridge"
                                                                                      : spec->network_mode));
        if (spec->memory_bytes > 0) {
                r |= dm_json_add(hc, "Memory", json_object_new_int64(spec->memory_bytes));
                r |= dm_json_add(hc, "MemorySwap", json_object_new_int64(spec->memory_bytes));
        }
        if (spec->pids_limit > 0)
                r |= dm_json_add(hc, "PidsLimit", json_object_new_int64(spec->pids_limit));
        /* Both engines turn it into the CFS quota (cpu.cfs_quota_us over a
         * 100 ms period on cgroup v1, cpu.max on v2). */
        if (spec->nano_cpus > 0)
                r |= dm_json_add(hc, "NanoCpus", json_object_new_int64(spec->nano_cpus));
        r |= dm_json_add(hc, "CapDrop", dm_json_strv((const char *const[]){ "ALL", NULL }));
        if (spec->cap_add)
                r |= dm_json_add(hc, "CapAdd", dm_json_strv(spec->cap_add));
        /* With demesne's own filter in force on every process (a run's
         * container), the engine's profile would be a second one that adds
         * nothing (ours denies all Docker's does, docs/explanation/
         * seccomp.md) and costs each start about 20 ms: runc compiles
         * Podman's 400-rule allowlist anew for every container. */
        r |= dm_json_add(hc, "SecurityOpt",
                         dm_json_strv(spec->own_seccomp
                                              ? (const char *const[]){ "no-new-privileges", "seccomp=unconfined", NULL }
                                              : (const char *const[]){ "no-new-privileges", NULL }));
        r |= dm_json_add(hc, "ReadonlyRootfs", json_object_new_boolean(spec->readonly_rootfs));
        if (spec->userns_mode)
                r |= dm_json_add(hc, "UsernsMode", json_object_new_string(spec->userns_mode));
        if (spec->init)
                r |= dm_json_add(hc, "Init", json_object_new_boolean(true));
        ulimits = json_object_new_array();
        r |= dm_json_add(hc, "Ulimits", ulimits);
        if (ulimits) {
                r |= dm_json_append(ulimits, ulimit_json("nofile", spec->nofile > 0 ? spec->nofile : DEFAULT_NOFILE));
                r |= dm_json_append(ulimits, ulimit_json("nproc", spec->nproc > 0 ? spec->nproc : DEFAULT_NPROC));
                if (spec->fsize > 0)
                        r |= dm_json_append(ulimits, ulimit_json("fsize", spec->fsize));
        }
        if (r)
                return dm_error_set(err, -ENOMEM, "out of memory");
        *ret = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        return *ret ? 0 : dm_error_set(err, -ENOMEM, "out of memory");
}

static int inspect_json(struct docker *d, const char *id, struct json_object **ret, struct dm_error *err);

static int docker_create(struct dm_backend *b, const struct dm_container_spec *spec, char **ret_id,
                         struct dm_error *err)
{
        struct docker *d = to_docker(b);
        _cleanup_free_ char *body = NULL, *esc = NULL;
        _cleanup_json_ struct json_object *o = NULL;
        struct json_object *id, *warnings;
        long status;
        int r;

        if (!spec->image || !spec->image[0])
                return dm_error_set(err, -EINVAL, "create container: no image given");
        if (spec->name) {
                r = dm_docker_check_ref("container name", spec->name, err);
                if (r < 0)
                        return dm_error_wrap(err, "create container");
                esc = dm_uri_escape(spec->name, "");
        }
        /* A bind source names a path on the engine's host: on another host
         * it would be whatever is there (dockerd makes an empty directory). */
        if (spec->n_mounts && !dm_curl_on_this_host(d->http))
                return dm_error_set(err, -EOPNOTSUPP,
                                    "create container: the engine at '%s' is not on this host, so host paths "
                                    "('%s', inputs, outputs) cannot be mounted; use sandbox uploads instead, or "
                                    "an engine on this host",
                                    dm_curl_host(d->http), spec->mounts[0].host);
        /* An engine off this host has no namespace demesne can reach, so
         * it can give a sandbox no network or its own; it enforces no
         * policy (the caller only hands one over in that case). */
        if (spec->egress && (spec->egress->mode != DM_EGRESS_NONE || spec->egress->n_cidrs || spec->egress->n_names))
                return dm_error_set(err, -EOPNOTSUPP,
                                    "create container: the engine at '%s' is not on this host, so demesne cannot "
                                    "enforce an egress policy there: use egress 'none'",
                                    dm_curl_host(d->http));
        if (spec->name && !esc)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = create_body(spec, &body, err);
        if (r < 0)
                return dm_error_wrap(err, "create container");

        r = request(d, "POST", body, CALL_TIMEOUT_MS, OK(201, 200), &status, &o, err, "/containers/create%s%s",
                    esc ? "?name=" : "", esc ? esc : "");
        if (r < 0 && status >= 400) {
                _cleanup_json_ struct json_object *other = NULL;

                if (status == 404)
                        image_seen(d, spec->image, -1); /* removed since it was seen */
                /* The name is taken: Docker answers 409, Podman 4.3 500 ("the
                 * container name ... is already in use"); ask rather than
                 * parse prose. */
                if (status == 409 || (status == 500 && spec->name && inspect_json(d, spec->name, &other, NULL) == 0))
                        r = err ? (err->code = -EEXIST) : -EEXIST;
        }
        if (r >= 0 && !(id = get(o, "Id")))
                r = dm_error_set(err, -EPROTO, "engine answered without an Id");
        if (r < 0)
                return dm_error_wrap(err, "create container from '%s'", spec->image);
        warnings = get(o, "Warnings");
        for (size_t i = 0;
             warnings && json_object_is_type(warnings, json_type_array) && i < json_object_array_length(warnings); i++)
                log_warning("create container from '%s': engine warns '%s'", spec->image,
                            json_object_get_string(json_object_array_get_idx(warnings, i)));
        return dup_json_string(id, ret_id, err);
}

static int docker_attach(struct dm_backend *b, const char *id, struct dm_stream **ret_stream, struct dm_error *err)
{
        struct docker *d = to_docker(b);
        _cleanup_free_ char *path = NULL;
        int r;

        r = dm_docker_check_ref("container id", id, err);
        if (r < 0)
                return r;
        /* stdin=1 is harmless for a container created without OpenStdin:
         * both engines then simply attach no input. Podman initialises a
         * created container here (runc create), so the output pipe exists
         * before start and nothing printed after start can be lost; it
         * answers only once its attach socket is connected. */
        if (asprintf(&path, "/containers/%s/attach?stream=1&stdout=1&stderr=1&stdin=1", id) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_stream_open(d->http, path, "", STREAM_HEAD_TIMEOUT_MS, ret_stream, err);
        if (r < 0)
                return dm_error_wrap(err, "attach to container '%s'", id);
        return 0;
}

static int docker_start(struct dm_backend *b, const char *id, struct dm_error *err)
{
        int r = dm_docker_check_ref("container id", id, err);

        if (r < 0)
                return r;
        /* 304: already started, which is what the caller wanted. */
        r = request(to_docker(b), "POST", NULL, CALL_TIMEOUT_MS, OK(204, 200, 304), NULL, NULL, err,
                    "/containers/%s/start", id);
        if (r < 0)
                return dm_error_wrap(err, "start container '%s'", id);
        return 0;
}

static int docker_kill(struct dm_backend *b, const char *id, int signo, struct dm_error *err)
{
        struct docker *d = to_docker(b);
        long status;
        int r;

        r = dm_docker_check_ref("container id", id, err);
        if (r < 0)
                return r;
        r = request(d, "POST", NULL, CALL_TIMEOUT_MS, OK(204, 200), &status, NULL, err, "/containers/%s/kill?signal=%d",
                    id, signo);
        if (r < 0 && status >= 400) {
                _cleanup_json_ struct json_object *o = NULL;
                struct json_object *running;

                /* Not running: Docker answers 409, Podman 500 ("container
                 * state improper"). The caller kills to stop it and it has
                 * stopped, so that is success; ask rather than parse prose. */
                if ((status == 409 || status == 500) && inspect_json(d, id, &o, NULL) == 0 &&
                    (running = get(get(o, "State"), "Running")) && !json_object_get_boolean(running)) {
                        dm_error_clear(err);
                        r = 0;
                }
        }
        if (r < 0)
                return dm_error_wrap(err, "kill container '%s'", id);
        return 0;
}

static int docker_destroy(struct dm_backend *b, const char *id, struct dm_error *err)
{
        struct docker *d = to_docker(b);
        int64_t give_up = dm_now_ms() + CALL_TIMEOUT_MS;
        long status;
        int r;

        r = dm_docker_check_ref("container id", id, err);
        if (r < 0)
                return r;
        /* A removal already under way (another thread, another server's
         * sweep): Podman waits for it and answers 204, dockerd answers 409
         * "removal of container ... is already in progress" at once, and
         * also 409 when the container stops between its check and its kill.
         * Both pass: ask again until the container is gone (404). Podman
         * 4.3 also answers 500 now and then while a user-namespaced
         * container's storage is still being torn down by its exit: asked
         * again, it removes it or says it is gone; three tries. */
        for (unsigned delay_us = 1000;;) {
                r = request_again(d, ENGINE_RACE_TRIES, 200, "DELETE", NULL, CALL_TIMEOUT_MS, OK(204, 200, 404),
                                  &status, NULL, err, "/containers/%s?force=1&v=1", id);
                if (r >= 0 || status != 409 || dm_now_ms() >= give_up)
                        break;
                dm_error_clear(err);
                usleep(delay_us);
                if (delay_us < 50000)
                        delay_us *= 2;
        }
        if (r < 0)
                return dm_error_wrap(err, "remove container '%s'", id);
        return 0;
}

void dm_container_info_release(struct dm_container_info *info)
{
        if (!info)
                return;
        free(info->id);
        free(info->image);
        free(info->status);
        free(info->upper_dir);
        free(info->hosts_path);
        free(info->log_path);
        for (char **l = info->labels; l && *l; l++)
                free(*l);
        free(info->labels);
        memset(info, 0, sizeof(*info));
}

/* RFC 3339 with optional fraction and offset ("2024-05-01T10:00:00.123456789Z"). */
static int64_t parse_rfc3339(const char *s)
{
        struct tm tm = { 0 };
        const char *p = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
        int64_t t;

        if (!p)
                return 0;
        t = (int64_t)timegm(&tm);
        if (*p == '.')
                for (p++; *p >= '0' && *p <= '9'; p++)
                        ;
        if ((*p == '+' || *p == '-') && strlen(p) >= 6) {
                int64_t off = ((p[1] - '0') * 10 + (p[2] - '0')) * 3600 + ((p[4] - '0') * 10 + (p[5] - '0')) * 60;
                t += *p == '+' ? -off : off;
        }
        return t;
}

int dm_docker_fill_info(struct json_object *o, struct dm_container_info *info, struct dm_error *err)
{
        struct json_object *state = get(o, "State"), *config = get(o, "Config"), *labels, *v;
        const char *status = get_str(state, "Status");

        memset(info, 0, sizeof(*info));
        info->id = strdup(get_str(o, "Id") ? get_str(o, "Id") : "");
        /* Config.Image is the name the container was made from; the top-level
         * Image is the image id. */
        info->image = strdup(get_str(config, "Image") ? get_str(config, "Image") : "");
        /* Podman reports "stopped" between the exit and its cleanup; for
         * callers that is "exited" (the exit code is already valid). */
        info->status = strdup(status && strcmp(status, "stopped") == 0 ? "exited" : status ? status : "");
        info->running = (v = get(state, "Running")) && json_object_get_boolean(v);
        info->exit_code = (v = get(state, "ExitCode")) ? json_object_get_int(v) : 0;
        info->pid = info->running && (v = get(state, "Pid")) ? json_object_get_int(v) : 0;
        info->created_unix = parse_rfc3339(get_str(o, "Created"));
        /* overlay and overlay2 say where the container's own writes go
         * (the disk cap counts them); vfs and others do not. */
        {
                const char *upper = get_str(get(get(o, "GraphDriver"), "Data"), "UpperDir");

                const char *hosts = get_str(o, "HostsPath"), *log = get_str(o, "LogPath");

                if ((upper && upper[0] == '/' && !(info->upper_dir = strdup(upper))) ||
                    (hosts && hosts[0] == '/' && !(info->hosts_path = strdup(hosts))) ||
                    (log && log[0] == '/' && !(info->log_path = strdup(log))))
                        goto oom;
        }

        labels = get(config, "Labels");
        info->labels = dm_labels_from_json(labels);
        if (!info->id || !info->image || !info->status || !info->labels)
                goto oom;
        return 0;
oom:
        dm_container_info_release(info);
        return dm_error_set(err, -ENOMEM, "out of memory");
}

static int inspect_json(struct docker *d, const char *id, struct json_object **ret, struct dm_error *err)
{
        int r = dm_docker_check_ref("container id", id, err);

        if (r < 0)
                return r;
        return request(d, "GET", NULL, CALL_TIMEOUT_MS, OK(200), NULL, ret, err, "/containers/%s/json", id);
}

static int docker_inspect(struct dm_backend *b, const char *id, struct dm_container_info *ret_info,
                          struct dm_error *err)
{
        _cleanup_json_ struct json_object *o = NULL;
        int r;

        r = inspect_json(to_docker(b), id, &o, err);
        if (r >= 0)
                r = dm_docker_fill_info(o, ret_info, err);
        if (r < 0)
                return dm_error_wrap(err, "inspect container '%s'", id);
        return 0;
}

/* How wait learns the exit code, and why.
 *
 * Measured on Podman 4.3.1 (2 cores, loaded by parallel image builds): called
 * right after the attach stream's EOF of `echo hi`, POST /wait answered after
 * 266-2969 ms (median ~600 ms), far more than the whole rest of a run; GET
 * /json, which syncs the state with the runtime on every call, reported the
 * exit after 1-3 inspects in 6-21 ms (median ~10 ms). Podman reports the
 * transient state "stopped" there, with the exit code already valid. So we
 * poll inspect, 1 ms apart doubling to 16 ms, for up to 150 ms; a container
 * still running then (it closed its output but goes on, or nobody attached)
 * gets the blocking POST /wait, which costs the engine nothing while it waits. */
#define WAIT_POLL_BUDGET_MS 150
static int docker_wait(struct dm_backend *b, const char *id, int *ret_exit_code, struct dm_error *err)
{
        struct docker *d = to_docker(b);
        int64_t give_up = dm_now_ms() + WAIT_POLL_BUDGET_MS;
        unsigned delay_us = 1000;
        _cleanup_json_ struct json_object *o = NULL;
        struct json_object *code;
        int r;

        for (;;) {
                struct json_object *state;
                const char *s;

                r = inspect_json(d, id, &o, err);
                if (r == -EIO) {
                        /* Podman answers 500 ("read /proc/PID/cgroup: no
                         * such process") when the inspect races the
                         * container's exit: seen in CI under TSan load.
                         * Poll on, then ask the blocking wait. */
                        dm_error_clear(err);
                        if (dm_now_ms() >= give_up)
                                break;
                        usleep(delay_us);
                        continue;
                }
                if (r < 0)
                        return dm_error_wrap(err, "wait for container '%s'", id);
                state = get(o, "State");
                s = get_str(state, "Status");
                if (s && (strcmp(s, "exited") == 0 || strcmp(s, "stopped") == 0 || strcmp(s, "dead") == 0)) {
                        code = get(state, "ExitCode");
                        *ret_exit_code = code ? json_object_get_int(code) : -1;
                        return 0;
                }
                json_object_put(TAKE_PTR(o));
                if (dm_now_ms() >= give_up)
                        break;
                usleep(delay_us);
                if (delay_us < 16000)
                        delay_us *= 2;
        }

        /* The same race on the blocking wait. */
        r = request_again(d, ENGINE_RACE_TRIES + 1, 50, "POST", NULL, 0, OK(200), NULL, &o, err, "/containers/%s/wait",
                          id);
        if (r >= 0 && !(code = get(o, "StatusCode")))
                r = dm_error_set(err, -EPROTO, "engine answered without a StatusCode");
        if (r < 0)
                return dm_error_wrap(err, "wait for container '%s'", id);
        *ret_exit_code = json_object_get_int(code);
        return 0;
}

static int docker_list(struct dm_backend *b, const char *label, char ***ret_ids, size_t *ret_n, struct dm_error *err)
{
        _cleanup_free_ char *esc = NULL;
        _cleanup_json_ struct json_object *filters = json_object_new_object(), *o = NULL;
        int r;

        if (!filters || dm_json_add(filters, "label", dm_json_strv((const char *const[]){ label, NULL })) < 0 ||
            !(esc = dm_uri_escape(json_object_to_json_string_ext(filters, JSON_C_TO_STRING_PLAIN), "")))
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = request(to_docker(b), "GET", NULL, CALL_TIMEOUT_MS, OK(200), NULL, &o, err,
                    "/containers/json?all=1&filters=%s", esc);
        if (r >= 0)
                r = dm_docker_list_ids(o, ret_ids, ret_n, err);
        if (r < 0)
                return dm_error_wrap(err, "list containers labelled '%s'", label);
        return 0;
}

int dm_docker_list_ids(struct json_object *o, char ***ret_ids, size_t *ret_n, struct dm_error *err)
{
        char **ids;
        size_t n;

        if (!json_object_is_type(o, json_type_array))
                return dm_error_set(err, -EPROTO, "engine answered with something other than a list");
        n = json_object_array_length(o);
        ids = calloc(n + 1, sizeof(char *));
        if (!ids)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (size_t i = 0; i < n; i++) {
                const char *id = get_str(json_object_array_get_idx(o, i), "Id");

                ids[i] = strdup(id ? id : "");
                if (!ids[i]) {
                        for (size_t j = 0; j < i; j++)
                                free(ids[j]);
                        free(ids);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
        }
        *ret_ids = ids;
        *ret_n = n;
        return 0;
}

/* ---- exec ------------------------------------------------------------------ */

static int docker_exec(struct dm_backend *b, const char *id, const struct dm_exec_spec *spec,
                       struct dm_stream **ret_stream, char **ret_exec_id, struct dm_error *err)
{
        struct docker *d = to_docker(b);
        _cleanup_free_ char *path = NULL, *exec_id = NULL;
        _cleanup_json_ struct json_object *body = json_object_new_object(), *o = NULL;
        struct json_object *eid;
        int r = 0;

        r = dm_docker_check_ref("container id", id, err);
        if (r < 0)
                return r;
        if (!spec->argv || !spec->argv[0])
                return dm_error_set(err, -EINVAL, "exec in container '%s': no command given", id);
        if (!body)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r |= dm_json_add(body, "AttachStdin", json_object_new_boolean(spec->attach_stdin));
        r |= dm_json_add(body, "AttachStdout", json_object_new_boolean(true));
        r |= dm_json_add(body, "AttachStderr", json_object_new_boolean(true));
        r |= dm_json_add(body, "Tty", json_object_new_boolean(false));
        r |= dm_json_add(body, "Cmd", dm_json_strv(spec->argv));
        if (spec->env)
                r |= dm_json_add(body, "Env", dm_json_strv(spec->env));
        if (spec->workdir)
                r |= dm_json_add(body, "WorkingDir", json_object_new_string(spec->workdir));
        if (r)
                return dm_error_set(err, -ENOMEM, "out of memory");

        r = request(d, "POST", json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN), CALL_TIMEOUT_MS,
                    OK(201, 200), NULL, &o, err, "/containers/%s/exec", id);
        if (r >= 0 && !(eid = get(o, "Id")))
                r = dm_error_set(err, -EPROTO, "engine answered without an Id");
        if (r >= 0)
                r = dup_json_string(eid, &exec_id, err);
        if (r >= 0)
                r = dm_docker_check_ref("exec id", exec_id, err);
        if (r < 0)
                return dm_error_wrap(err, "exec in container '%s'", id);

        if (asprintf(&path, "/exec/%s/start", exec_id) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_stream_open(d->http, path, "{\"Detach\":false,\"Tty\":false}", STREAM_HEAD_TIMEOUT_MS, ret_stream, err);
        if (r < 0)
                return dm_error_wrap(err, "start exec in container '%s'", id);
        *ret_exec_id = TAKE_PTR(exec_id);
        return 0;
}

/* The exit code is recorded a moment after the stream's EOF; poll briefly
 * (1 ms, doubling to 50 ms) while the engine still reports it running. */
static int docker_exec_exit_code(struct dm_backend *b, const char *exec_id, int *ret_exit_code, struct dm_error *err)
{
        unsigned delay_us = 1000;
        int r;

        r = dm_docker_check_ref("exec id", exec_id, err);
        if (r < 0)
                return r;
        for (;;) {
                _cleanup_json_ struct json_object *o = NULL;

                r = request(to_docker(b), "GET", NULL, CALL_TIMEOUT_MS, OK(200), NULL, &o, err, "/exec/%s/json",
                            exec_id);
                if (r < 0)
                        return dm_error_wrap(err, "inspect exec '%s'", exec_id);
                if (dm_docker_exec_exited(o, ret_exit_code))
                        return 0;
                usleep(delay_us);
                if (delay_us < 50000)
                        delay_us *= 2;
        }
}

bool dm_docker_exec_exited(struct json_object *o, int *ret_exit_code)
{
        struct json_object *running = get(o, "Running"), *code = get(o, "ExitCode");

        if ((running && json_object_get_boolean(running)) || !code || json_object_is_type(code, json_type_null))
                return false;
        *ret_exit_code = json_object_get_int(code);
        return true;
}

/* ---- lifetime ---------------------------------------------------------------- */

static void docker_free(struct dm_backend *b)
{
        struct docker *d = to_docker(b);

        if (!d)
                return;
        dm_curl_free(d->http);
        pthread_mutex_destroy(&d->userns.lock);
        for (size_t i = 0; i < d->n_images_seen; i++)
                free(d->images_seen[i]);
        pthread_mutex_destroy(&d->images_lock);
        if (d->release)
                d->release(d->owned);
        free(d);
}

static const struct dm_backend_ops docker_ops = {
        .name = "docker",
        .caps = DM_CAP_SHIM | DM_CAP_ATTACH | DM_CAP_EXEC_STDIN | DM_CAP_EXEC_PID | DM_CAP_IMAGES | DM_CAP_HOST_NETNS |
                DM_CAP_HARDENING,
        .ping = docker_ping,
        .describe = docker_describe,
        .image_exists = docker_image_exists,
        .create = docker_create,
        .attach = docker_attach,
        .start = docker_start,
        .wait = docker_wait,
        .kill = docker_kill,
        .destroy = docker_destroy,
        .inspect = docker_inspect,
        .list = docker_list,
        .exec = docker_exec,
        .exec_exit_code = docker_exec_exit_code,
        .exec_pid = dm_docker_exec_pid,
        .put_archive = dm_docker_put_archive,
        .get_archive = dm_docker_get_archive,
        .userns = dm_docker_userns,
        .container_root = dm_docker_container_root,
        .pause = dm_docker_pause,
        .unpause = dm_docker_unpause,
        .commit = dm_docker_commit,
        .image_inspect = dm_docker_image_inspect,
        .image_remove = dm_docker_image_remove,
        .image_list = dm_docker_image_list,
        .free = docker_free,
};

/* An engine on another host (tcp:// to a non-loopback address, TLS): its
 * containers' pids and network namespaces are not ours, so no shim (its
 * SO_PEERCRED check and host socket bind), no exec pid, no egress veths. */
#define DM_REMOTE_LACKS (DM_CAP_SHIM | DM_CAP_EXEC_PID | DM_CAP_HOST_NETNS)
static struct dm_backend_ops docker_remote_ops;
static pthread_once_t remote_once = PTHREAD_ONCE_INIT;

static void remote_ops_init(void)
{
        docker_remote_ops = docker_ops;
        docker_remote_ops.caps &= ~(unsigned)DM_REMOTE_LACKS;
}

struct dm_curl *dm_docker_http(struct dm_backend *b)
{
        return to_docker(b)->http;
}

struct dm_userns_cache *dm_docker_userns_cache(struct dm_backend *b)
{
        return &to_docker(b)->userns;
}

int dm_docker_backend_new_owning(const char *host, int64_t response_max, const struct dm_engine_env *env,
                                 void (*release)(void *), void *owned, struct dm_backend **ret, struct dm_error *err)
{
        struct docker *d = calloc(1, sizeof(*d));
        int r;

        if (!d)
                return dm_error_set(err, -ENOMEM, "out of memory");
        d->base.ops = &docker_ops;
        d->response_max = response_max > 0 ? (size_t)response_max : 16u << 20;
        r = dm_curl_new(host, d->response_max, env, &d->http, err);
        if (r < 0) {
                free(d);
                return r;
        }
        if (!dm_curl_on_this_host(d->http)) {
                pthread_once(&remote_once, remote_ops_init);
                d->base.ops = &docker_remote_ops;
        }
        d->release = release;
        d->owned = owned;
        pthread_mutex_init(&d->userns.lock, NULL);
        pthread_mutex_init(&d->images_lock, NULL);
        *ret = &d->base;
        return 0;
}

int dm_docker_backend_new(const char *host, int64_t response_max, const struct dm_engine_env *env,
                          struct dm_backend **ret, struct dm_error *err)
{
        return dm_docker_backend_new_owning(host, response_max, env, NULL, NULL, ret, err);
}
