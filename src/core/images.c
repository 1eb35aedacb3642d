/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/images.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/core/settings.h"
#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"

extern char **environ;

const struct dm_image_info dm_images[] = {
        { "base", true, true, "Debian bookworm with bash, coreutils, curl, git" },
        { "python", true, true, "python3 with pip, numpy, pandas, scipy, matplotlib" },
        { "node", true, true, "Node.js 22 and npm" },
        { "go", true, true, "the Go toolchain" },
        { "browser", true, true, "headless Chromium with Playwright, React, Vite" },
        { "media", true, true, "ffmpeg, ImageMagick, vips, sox" },
        { "twine", true, true, "a Twee compiler with story formats and Chromium" },
        { "webgamedev", true, true, "Phaser + Vite + TypeScript template, Chromium" },
        { "claude-code", true, false, "the Claude Code CLI (agents)" },
        { "codex", true, false, "the Codex CLI (agents)" },
};
const size_t dm_images_count = sizeof(dm_images) / sizeof(dm_images[0]);
const char *const dm_image_names[] = {
        "base", "python", "node", "go", "browser", "media", "twine", "webgamedev", NULL
};
/* Accepted but not listed in the schemas: the alias, and the agent CLIs'
 * images (sandbox_agent's, usable by hand, e.g. to check a CLI's version). */
const char *const dm_image_aliases[] = { "anaconda", "claude-code", "codex", NULL };

static char refs[sizeof(dm_images) / sizeof(dm_images[0])][256];
static pthread_once_t refs_once = PTHREAD_ONCE_INIT;

static void refs_init(void)
{
        const char *repo = dm_process_settings()->image_repo;

        for (size_t i = 0; i < dm_images_count; i++)
                snprintf(refs[i], sizeof(refs[i]), "%s/%s:latest", repo, dm_images[i].name);
}

const char *dm_image_ref(const struct dm_image_info *img)
{
        pthread_once(&refs_once, refs_init);
        return refs[img - dm_images];
}

static const struct {
        const char *alias;
        const char *name;
} aliases[] = {
        { "anaconda", "python" },
};

int dm_image_lookup(const char *name, const struct dm_image_info **ret, struct dm_error *err)
{
        struct dm_buf list;

        for (size_t i = 0; i < sizeof(aliases) / sizeof(aliases[0]); i++)
                if (strcmp(name, aliases[i].alias) == 0)
                        name = aliases[i].name;
        for (size_t i = 0; i < dm_images_count; i++)
                if (strcmp(name, dm_images[i].name) == 0) {
                        *ret = &dm_images[i];
                        return 0;
                }
        dm_buf_init(&list, 1024);
        dm_buf_join(&list, dm_image_names, ", ");
        dm_error_set(err, -EINVAL, "unknown image '%s': valid images are %s (and 'anaconda' for python)", name,
                     list.data ? list.data : "");
        dm_buf_release(&list);
        return -EINVAL;
}

/* The engine the backend talks to, for build.sh: "podman 4.3.1 (API 1.41)
 * at unix:///run/podman/podman.sock" gives "podman"; a docker engine also
 * gives its address, which the docker CLI needs as DOCKER_HOST. The podman
 * CLI uses this user's own store, which is the socket's only when the
 * service runs as this user: a socket owned by another (a normal user on
 * root's service, or root on a user's) gives its address too, and build.sh
 * then drives that service with podman --remote (CONTAINER_HOST). */
void dm_image_engine(struct dm_backend *b, char engine[16], char *host, size_t host_size)
{
        struct dm_error err = { 0 };
        char *desc = NULL;
        const char *at;
        struct stat st;

        engine[0] = host[0] = '\0';
        if (b->ops->describe(b, &desc, &err) < 0 || !desc)
                return;
        at = strstr(desc, " at ");
        if (strncmp(desc, "podman ", 7) == 0) {
                snprintf(engine, 16, "podman");
                if (at && strncmp(at + 4, "unix://", 7) == 0 && stat(at + 4 + 7, &st) == 0 && st.st_uid != geteuid())
                        snprintf(host, host_size, "%s", at + 4);
        } else if (strncmp(desc, "docker ", 7) == 0) {
                snprintf(engine, 16, "docker");
                if (at)
                        snprintf(host, host_size, "%s", at + 4);
        }
        free(desc);
}

int dm_image_require(struct dm_backend *b, const struct dm_image_info *img, bool autobuild,
                     const struct dm_image_build_watch *watch, struct dm_error *err)
{
        const char *names[2] = { img->name, NULL };
        char engine[16], host[512];
        bool exists = false;
        int r;

        /* A backend without an image store of ours (OpenSandbox pulls at
         * create) reports a missing image when the sandbox is made. */
        if (!dm_backend_can(b, DM_CAP_IMAGES))
                return 0;
        r = b->ops->image_exists(b, dm_image_ref(img), &exists, err);
        if (r < 0)
                return dm_error_wrap(err, "look up image '%s'", img->name);
        if (exists)
                return 0;
        if (!img->buildable || !autobuild)
                return dm_error_set(err, -ENOENT, "image '%s' is not built: run `demesne images build %s`", img->name,
                                    img->name);
        dm_image_engine(b, engine, host, sizeof(host));
        log_info("image %s is missing: building it now (first use)", img->name);
        if (watch && watch->on_line) {
                char line[160];

                snprintf(line, sizeof(line), "image %s is not built yet: building it (first use; minutes)", img->name);
                watch->on_line(watch->userdata, line);
        }
        r = dm_images_build(names, false, engine[0] ? engine : NULL, host[0] ? host : NULL, watch, err);
        if (r < 0)
                return r == -ECANCELED ? r
                                       : dm_error_wrap(err, "image '%s' was missing and building it failed", img->name);
        r = b->ops->image_exists(b, dm_image_ref(img), &exists, err);
        if (r < 0)
                return dm_error_wrap(err, "look up image '%s'", img->name);
        if (!exists)
                return dm_error_set(err, -ENOENT,
                                    "image '%s' was built but the engine does not have %s: does build.sh use the "
                                    "same engine (DEMESNE_ENGINE)?",
                                    img->name, dm_image_ref(img));
        log_info("image %s built", img->name);
        return 0;
}
const char *dm_images_dir(void)
{
        static char found[PATH_MAX];
        const char *env = dm_process_settings()->images_dir;
        const char *candidates[] = { DM_PKGDATADIR "/images", DM_SRCDIR "/images" };
        struct stat st;

        if (env && *env)
                return env;
        for (size_t i = 0; i < sizeof(candidates) / sizeof(candidates[0]); i++) {
                snprintf(found, sizeof(found), "%s/build.sh", candidates[i]);
                if (stat(found, &st) == 0) {
                        snprintf(found, sizeof(found), "%s", candidates[i]);
                        return found;
                }
        }
        return DM_PKGDATADIR "/images";
}

/* Spawns build.sh with args, its stdout and stderr into one pipe. */
static int spawn_build(const char *const *args, const char *engine, const char *engine_host, pid_t *ret_pid,
                       int *ret_fd, struct dm_error *err)
{
        char script[PATH_MAX];
        const char *argv[80];
        size_t n = 0, nenv = 0;
        _cleanup_free_ char **env = NULL;
        _cleanup_free_ char *engine_var = NULL, *host_var = NULL;
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        int fds[2], r;

        snprintf(script, sizeof(script), "%s/build.sh", dm_images_dir());
        if (access(script, R_OK) < 0)
                return dm_error_set(err, -ENOENT, "image build script '%s' not found (set DEMESNE_IMAGES_DIR)", script);
        argv[n++] = "/bin/bash";
        argv[n++] = script;
        for (size_t i = 0; args[i] && n < 78; i++)
                argv[n++] = args[i];
        argv[n] = NULL;

        for (char **e = environ; *e; e++)
                nenv++;
        env = calloc(nenv + 3, sizeof(*env));
        if (!env)
                return dm_error_set(err, -ENOMEM, "out of memory");
        nenv = 0;
        for (char **e = environ; *e; e++)
                if (!(engine && strncmp(*e, "DEMESNE_ENGINE=", 15) == 0) &&
                    !(engine_host && strncmp(*e, "DOCKER_HOST=", 12) == 0) &&
                    !(engine_host && strncmp(*e, "CONTAINER_HOST=", 15) == 0))
                        env[nenv++] = *e;
        if (engine) {
                if (asprintf(&engine_var, "DEMESNE_ENGINE=%s", engine) < 0)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                env[nenv++] = engine_var;
        }
        /* The docker CLI reads DOCKER_HOST; podman takes CONTAINER_HOST as
         * --remote --url. */
        if (engine_host) {
                if (asprintf(&host_var, "%s=%s",
                             engine && strcmp(engine, "podman") == 0 ? "CONTAINER_HOST" : "DOCKER_HOST",
                             engine_host) < 0)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                env[nenv++] = host_var;
        }

        if (pipe2(fds, O_CLOEXEC) < 0)
                return dm_error_set(err, -errno, "pipe: %s", strerror(errno));
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
        posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
        /* Its own process group: a cancel stops podman build too. */
        /* The server blocks and ignores signals its threads do not handle;
         * the script starts with none blocked and default dispositions. */
        posix_spawnattr_init(&attr);
        {
                sigset_t none, def;

                sigemptyset(&none);
                sigemptyset(&def);
                sigaddset(&def, SIGPIPE);
                sigaddset(&def, SIGINT);
                sigaddset(&def, SIGTERM);
                sigaddset(&def, SIGHUP);
                posix_spawnattr_setsigmask(&attr, &none);
                posix_spawnattr_setsigdefault(&attr, &def);
        }
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        posix_spawnattr_setpgroup(&attr, 0);
        r = posix_spawn(ret_pid, argv[0], &fa, &attr, (char *const *)argv, env);
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&fa);
        close(fds[1]);
        if (r != 0) {
                close(fds[0]);
                return dm_error_set(err, -r, "cannot run '%s': %s", script, strerror(r));
        }
        *ret_fd = fds[0];
        return 0;
}

/* Reads the build's lines until EOF: each goes to our stderr and to watch;
 * the last one is kept for the error message. Returns -ECANCELED when the
 * cancel fired (the group was sent SIGTERM). */
static int pump_build(pid_t pid, int fd, const struct dm_image_build_watch *watch, char *last, size_t last_size)
{
        char buf[4096];
        size_t have = 0;
        bool cancelled = false;

        last[0] = '\0';
        for (;;) {
                struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = -1, .events = POLLIN } };
                ssize_t k;
                char *nl;

                if (watch && watch->cancel && !cancelled)
                        p[1].fd = watch->cancel->fd;
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (p[1].revents && !cancelled) {
                        cancelled = true;
                        kill(-pid, SIGTERM);
                }
                if (!p[0].revents)
                        continue;
                k = read(fd, buf + have, sizeof(buf) - 1 - have);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        break;
                have += (size_t)k;
                buf[have] = '\0';
                /* Whole lines; a line longer than the buffer is cut. */
                while ((nl = memchr(buf, '\n', have)) || have == sizeof(buf) - 1) {
                        size_t len = nl ? (size_t)(nl - buf) : have;

                        buf[len] = '\0';
                        fprintf(stderr, "%s\n", buf);
                        snprintf(last, last_size, "%.*s", (int)(last_size - 1), buf);
                        if (watch && watch->on_line && !cancelled)
                                watch->on_line(watch->userdata, buf);
                        len = nl ? len + 1 : len;
                        memmove(buf, buf + len, have - len);
                        have -= len;
                }
        }
        return cancelled ? -ECANCELED : 0;
}

static int wait_build(pid_t pid, struct dm_error *err, int *ret_status)
{
        while (waitpid(pid, ret_status, 0) < 0)
                if (errno != EINTR)
                        return dm_error_set(err, -errno, "waiting for the image build: %s", strerror(errno));
        return 0;
}

int dm_images_build(const char *const *names, bool force, const char *engine, const char *engine_host,
                    const struct dm_image_build_watch *watch, struct dm_error *err)
{
        const char *args[64];
        char last[512];
        size_t n = 0;
        pid_t pid;
        int fd, status, r, pumped;

        if (force)
                args[n++] = "--force";
        if (!names || !names[0]) {
                args[n++] = "--all";
        } else {
                for (size_t i = 0; names[i] && n < 60; i++) {
                        const struct dm_image_info *img;

                        if (dm_image_lookup(names[i], &img, err) < 0)
                                return -EINVAL;
                        if (!img->buildable)
                                return dm_error_set(err, -ENOTSUP,
                                                    "image '%s' cannot be built by this version of demesne", img->name);
                        args[n++] = img->name;
                }
        }
        args[n] = NULL;

        r = spawn_build(args, engine, engine_host, &pid, &fd, err);
        if (r < 0)
                return r;
        pumped = pump_build(pid, fd, watch, last, sizeof(last));
        close(fd);
        r = wait_build(pid, err, &status);
        if (r < 0)
                return r;
        if (pumped == -ECANCELED)
                return dm_error_set(err, -ECANCELED, "image build cancelled");
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return 0;
        if (WIFEXITED(status))
                return dm_error_set(err, -EIO, "image build failed (exit %d): %s", WEXITSTATUS(status),
                                    last[0] ? last : "see the server's log");
        return dm_error_set(err, -EIO, "image build killed by signal %d", WTERMSIG(status));
}

int dm_images_list(const char *engine, const char *engine_host, char **ret, struct dm_error *err)
{
        static const char *const args[] = { "--list", NULL };
        struct dm_buf out;
        char buf[4096];
        pid_t pid;
        int fd, status, r;
        ssize_t k;

        *ret = NULL;
        r = spawn_build(args, engine, engine_host, &pid, &fd, err);
        if (r < 0)
                return r;
        dm_buf_init(&out, 1 << 20);
        while ((k = read(fd, buf, sizeof(buf))) != 0) {
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 || dm_buf_append(&out, buf, (size_t)k) < 0)
                        break;
        }
        close(fd);
        r = wait_build(pid, err, &status);
        if (r >= 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
                r = dm_error_set(err, -EIO, "build.sh --list failed: %.300s", out.data ? out.data : "");
        if (r < 0) {
                dm_buf_release(&out);
                return r;
        }
        *ret = out.data ? out.data : strdup("");
        return *ret ? 0 : dm_error_set(err, -ENOMEM, "out of memory");
}
