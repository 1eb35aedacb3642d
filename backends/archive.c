/* SPDX-License-Identifier: MIT */
/* File transfer through the engine's archive API, and an exec's pid: the
 * docker backend's ops that docker.c has no room for. */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/curl.h"
#include "backends/docker-internal.h"
#include "src/basic/cleanup.h"
#include "src/basic/timeutil.h"
#include "src/basic/uri.h"

#define ARCHIVE_TIMEOUT_MS (30L * 60 * 1000)
#define ERRBODY_MAX (64 * 1024)

/* Container ids and exec ids: hex or names, never anything a URL would
 * reinterpret. */
static int check_id(const char *what, const char *id, struct dm_error *err)
{
        if (!id || !id[0] || strlen(id) > 128 ||
            strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != strlen(id))
                return dm_error_set(err, -EINVAL, "invalid %s '%s'", what, id ? id : "(null)");
        return 0;
}

/* Podman reads GET .../archive's path as a glob (buildah's copier):
 * "/tmp/a?" sends /tmp/ab as well, "/usr/bin/[" is a 404 (measured, 4.3.1);
 * its PUT takes the path as it is. dockerd takes both as they are. Asked
 * once (_ping's Server header) and kept. */
static bool engine_globs(struct dm_backend *b)
{
        int *cache = &dm_docker_userns_cache(b)->globs, v = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
        struct dm_curl_header hdr = { .name = "Server" };
        struct dm_buf out;
        struct dm_error e = { 0 };
        long status = 0;

        if (v)
                return v == 1;
        dm_buf_init(&out, 4096);
        if (dm_curl_request_headers(dm_docker_http(b), "GET", "/_ping", NULL, 10000, &status, &out, &hdr, 1, &e) < 0)
                v = 0; /* asked again next time */
        else
                v = strncmp(hdr.value, "Libpod/", 7) == 0 ? 1 : 2;
        dm_buf_release(&out);
        if (v)
                __atomic_store_n(cache, v, __ATOMIC_RELEASE);
        return v != 2; /* unknown: escaped, which is right for the engine most likely here */
}

/* path with Podman's glob characters escaped ('\' before each of *?[]\). */
static char *glob_escape(const char *path)
{
        char *out = malloc(strlen(path) * 2 + 1), *o = out;

        if (!out)
                return NULL;
        for (const char *p = path; *p; p++) {
                if (strchr("*?[]\\", *p))
                        *o++ = '\\';
                *o++ = *p;
        }
        *o = '\0';
        return out;
}

static int archive_call(struct dm_backend *b, const char *method, const char *id, const char *path, int in_fd,
                        int64_t in_len, int out_fd, int64_t max, struct dm_error *err)
{
        _cleanup_free_ char *esc = NULL, *url = NULL, *literal = NULL;
        struct dm_buf errbody;
        long status = 0;
        int r;

        r = check_id("container id", id, err);
        if (r < 0)
                return r;
        if (!path || path[0] != '/')
                return dm_error_set(err, -EINVAL, "path '%s' inside the sandbox must be absolute", path ? path : "");
        if (strcmp(method, "GET") == 0 && strpbrk(path, "*?[]\\") && engine_globs(b)) {
                literal = glob_escape(path);
                if (!literal)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                path = literal;
        }
        esc = dm_uri_escape(path, "/:");
        if (!esc || asprintf(&url, "/containers/%s/archive?path=%s", id, esc) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_init(&errbody, ERRBODY_MAX);
        r = dm_curl_transfer(dm_docker_http(b), method, url, "application/x-tar", in_fd, in_len, out_fd, max,
                             ARCHIVE_TIMEOUT_MS, &status, &errbody, err);
        if (r >= 0 && (status < 200 || status > 299))
                r = dm_curl_status_error(err, status, errbody.data, errbody.len);
        dm_buf_release(&errbody);
        return r;
}

int dm_docker_put_archive(struct dm_backend *b, const char *id, const char *dir, int tar_fd, int64_t tar_len,
                          struct dm_error *err)
{
        int r = archive_call(b, "PUT", id, dir, tar_fd, tar_len, -1, 0, err);

        return r < 0 ? dm_error_wrap(err, "copy into '%s'", dir) : 0;
}

int dm_docker_get_archive(struct dm_backend *b, const char *id, const char *path, int out_fd, int64_t max,
                          struct dm_error *err)
{
        int r = archive_call(b, "GET", id, path, -1, 0, out_fd, max, err);

        return r < 0 ? dm_error_wrap(err, "copy '%s' out", path) : 0;
}

/* dockerd answers the exec's start (101) before runc has started the
 * process: for ~100-150 ms (longer on a loaded machine) inspect says
 * Running with Pid 0, or not yet Running with no ExitCode. Podman has the
 * pid at once. So ask until there is a pid or an exit code; 0 means the
 * command is over (or never started within the limit): nothing to kill. */
#define EXEC_PID_WAIT_MS 10000L
int dm_docker_exec_pid(struct dm_backend *b, const char *exec_id, int *ret_pid, struct dm_error *err)
{
        _cleanup_free_ char *url = NULL;
        int64_t give_up = dm_now_ms() + EXEC_PID_WAIT_MS;
        unsigned delay_us = 1000;
        int r;

        r = check_id("exec id", exec_id, err);
        if (r < 0)
                return r;
        if (asprintf(&url, "/exec/%s/json", exec_id) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (;;) {
                struct dm_buf out;
                json_object *o = NULL, *v;
                long status = 0;
                bool running = false, over = false;
                int pid = 0;

                dm_buf_init(&out, 1 << 20);
                r = dm_curl_request(dm_docker_http(b), "GET", url, NULL, 10000, &status, &out, err);
                if (r >= 0 && status != 200)
                        r = dm_curl_status_error(err, status, out.data, out.len);
                if (r >= 0) {
                        o = json_tokener_parse(out.data ? out.data : "");
                        if (!o)
                                r = dm_error_set(err, -EPROTO, "engine sent invalid JSON for exec '%s'", exec_id);
                }
                if (r >= 0) {
                        running = json_object_object_get_ex(o, "Running", &v) && json_object_get_boolean(v);
                        pid = json_object_object_get_ex(o, "Pid", &v) ? json_object_get_int(v) : 0;
                        over = !running && json_object_object_get_ex(o, "ExitCode", &v) &&
                               !json_object_is_type(v, json_type_null);
                }
                json_object_put(o);
                dm_buf_release(&out);
                if (r < 0)
                        return r;
                if ((running && pid > 0) || over || dm_now_ms() >= give_up) {
                        *ret_pid = running ? pid : 0;
                        return 0;
                }
                usleep(delay_us);
                if (delay_us < 20000)
                        delay_us *= 2;
        }
}
