/* SPDX-License-Identifier: MIT */
/* The engine going away under a running call, and coming back: a call in
 * flight goes on through the shim (which needs no engine) and ends with
 * its real result, new calls say the engine is unreachable, and
 * the server works again once the engine answers, with nothing left over.
 * The test runs its own Podman API service on a private socket, so it
 * stops and starts only what it started. */
#include "config.h"

#include <dirent.h>

#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/integration/stdio-client.h"
#include "tests/integration/engine-env.h"

extern char **environ;

static char sock_path[PATH_MAX], host[PATH_MAX + 16];

static pid_t start_service(void)
{
        char *argv[] = { "podman", "system", "service", "--time=0", host, NULL };
        struct dm_engine_config ec = { .env = test_engine_env(), .host = host, .response_max = 1 << 20 };
        struct dm_error err = { 0 };
        struct dm_backend *b;
        posix_spawn_file_actions_t fa;
        pid_t pid;

        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        if (posix_spawnp(&pid, "podman", &fa, NULL, argv, environ) != 0)
                return -1;
        posix_spawn_file_actions_destroy(&fa);
        for (int i = 0; i < 150; i++) {
                if (dm_backend_open(&ec, &b, &err) == 0) {
                        dm_backend_free(b);
                        return pid;
                }
                usleep(100 * 1000);
        }
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
}

static void stop_service(pid_t pid)
{
        int64_t t0 = dm_now_ms();

        kill(pid, SIGTERM);
        while (waitpid(pid, NULL, WNOHANG) == 0) {
                if (dm_now_ms() - t0 > 10000) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        break;
                }
                usleep(50 * 1000);
        }
        unlink(sock_path);
}

/* Whether the one run's stdout.log says its command printed "started". */
static bool run_started(void)
{
        char path[PATH_MAX + 300], line[64] = "";
        struct dirent *e;
        bool found = false;
        DIR *d;

        snprintf(path, sizeof(path), "%s/out", test_root);
        d = opendir(path);
        while (d && !found && (e = readdir(d))) {
                FILE *f;

                if (strncmp(e->d_name, "run-", 4) != 0)
                        continue;
                snprintf(path, sizeof(path), "%s/out/%s/stdout.log", test_root, e->d_name);
                f = fopen(path, "r");
                found = f && fgets(line, sizeof(line), f) && strcmp(line, "started\n") == 0;
                if (f)
                        fclose(f);
        }
        if (d)
                closedir(d);
        return found;
}

int main(void)
{
        struct child *c = calloc(1, sizeof(*c));
        struct dm_engine_config ec = { .env = test_engine_env(), .host = host, .response_max = 16 << 20 };
        struct dm_error err = { 0 };
        struct dm_backend *b;
        char env_host[PATH_MAX + 64];
        const char *env[] = { env_host, "DEMESNE_START_PODMAN=0", NULL };
        json_object *m;
        pid_t service, server;
        int64_t t0;

        test_env_setup("engine");
        snprintf(sock_path, sizeof(sock_path), "%s/podman.sock", test_root);
        snprintf(host, sizeof(host), "unix://%s", sock_path);
        snprintf(env_host, sizeof(env_host), "DEMESNE_ENGINE_HOST=%s", host);
        service = start_service();
        if (service < 0 || dm_backend_open(&ec, &b, &err) < 0) {
                printf("Bail out! cannot start a Podman API service at %s\n", host);
                return 1;
        }
        spawn(c, env);
        server = c->pid;

        /* Held until the engine is down (at most 8 s, as the sleep was). */
        send_call(c, 1, "sandbox_script", "{\"command\":\"echo started; " TEST_HOLD(80) "; echo finished\"}");
        t0 = dm_now_ms();
        /* A first container on a fresh service is slow on a loaded machine. */
        while (containers_of(b, server) < 1 && dm_now_ms() - t0 < 60000)
                usleep(100 * 1000);
        is_int(containers_of(b, server), 1, "a call is running");
        dm_backend_free(b);
        /* Its command has started (not only its container been made: the
         * start and the shim's first connection still ask the engine). */
        t0 = dm_now_ms();
        while (!run_started() && dm_now_ms() - t0 < 60000)
                usleep(100 * 1000);

        stop_service(service);
        test_release();
        t0 = dm_now_ms();
        m = recv_response(c, 1, 30000, NULL);
        ok(m && !json_object_get_boolean(path(m, "result", "isError", NULL)),
           "the call in flight is not harmed: the shim needs no engine");
        if (!m || json_object_get_boolean(path(m, "result", "isError", NULL)))
                diag("the call answered %s", m ? json_object_to_json_string(m) : "nothing");
        is_str(str_at(structured(m), "stdout"), "started\nfinished\n", "it ends with its whole output");
        is_int(json_object_get_int(path(structured(m), "exit_code", NULL, NULL)), 0, "and its exit code");
        json_object_put(m);

        t0 = dm_now_ms();
        send_call(c, 2, "sandbox_script", "{\"command\":\"true\"}");
        m = recv_response(c, 2, 30000, NULL);
        ok(m && json_object_get_boolean(path(m, "result", "isError", NULL)) &&
                   strstr(json_object_to_json_string(m), "not reachable"),
           "a new call while the engine is down: 'not reachable'");
        /* The engine stays down until below: an answer at all is the check. */
        diag("answered in %lld ms", (long long)(dm_now_ms() - t0));
        json_object_put(m);

        service = start_service();
        ok(service > 0, "the engine comes back on the same socket");
        send_call(c, 3, "sandbox_script", "{\"command\":\"echo back; exit 5\"}");
        m = recv_response(c, 3, 60000, NULL);
        is_int(json_object_get_int(path(structured(m), "exit_code", NULL, NULL)), 5, "the server works again: exit 5");
        is_str(str_at(structured(m), "stdout"), "back\n", "with its output");
        json_object_put(m);

        is_int(finish(c, 30000), 0, "clean exit");
        dm_backend_open(&ec, &b, &err);
        is_int(containers_of(b, server), 0, "no container left, the one orphaned by the outage included");
        dm_backend_free(b);
        stop_service(service);
        free(c);
        dm_remove_tree(test_root);
        return done_testing();
}
