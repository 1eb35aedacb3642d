/* SPDX-License-Identifier: MIT */
/* How the docker backend's wait rides out the engine's race with a
 * container's exit. Podman 4.3 under load answers an inspect (and a POST
 * /wait) of a container whose PID just ended with a 500, "read
 * /proc/PID/cgroup: no such process" (seen in CI, tests/integration/test-shim
 * under TSan): that answer means "ask again", not "failed". An engine that
 * goes on failing is still reported, with its words.
 *
 * The engine here answers on a Unix socket of its own, one request per
 * connection, with the bodies Podman sends (its error shape: cause, message,
 * response). */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "backends/backend.h"
#include "tests/tap.h"

#define RACE "{\"cause\":\"no such process\",\"message\":\"read /proc/13299/cgroup: no such process\",\"response\":500}"
#define EXITED "{\"Id\":\"c1\",\"State\":{\"Status\":\"exited\",\"Running\":false,\"ExitCode\":%d}}"
#define RUNNING "{\"Id\":\"c1\",\"State\":{\"Status\":\"running\",\"Running\":true,\"ExitCode\":0}}"

/* What the engine answers: the first inspect_fail inspects and the first
 * wait_fail waits get the race's 500; inspect says running while
 * inspect_running is set; then the exit code. */
struct script {
        int inspect_fail, wait_fail, delete_fail, exit_code;
        int inspect_running;
        int inspects, waits, deletes;
};

static int listen_fd = -1;
static char sock_path[108];
static struct script S;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void answer(int fd, int status, const char *body)
{
        char head[256];
        int n = snprintf(head, sizeof(head),
                         "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                         "Connection: close\r\n\r\n",
                         status, status == 200 ? "OK" : "Internal Server Error", strlen(body));

        /* The client may have closed already (it read what it needed):
         * no SIGPIPE for the test. */
        if (send(fd, head, (size_t)n, MSG_NOSIGNAL) != n ||
            send(fd, body, strlen(body), MSG_NOSIGNAL) != (ssize_t)strlen(body))
                return;
}

static void *engine(void *arg)
{
        (void)arg;
        for (;;) {
                char req[4096], body[256];
                size_t len = 0;
                int fd = accept(listen_fd, NULL, NULL);

                if (fd < 0)
                        return NULL;
                while (len < sizeof(req) - 1) {
                        ssize_t n = read(fd, req + len, sizeof(req) - 1 - len);

                        if (n <= 0)
                                break;
                        len += (size_t)n;
                        req[len] = '\0';
                        if (strstr(req, "\r\n\r\n"))
                                break;
                }
                req[len] = '\0';
                pthread_mutex_lock(&lock);
                if (strncmp(req, "GET /", 5) == 0 && strstr(req, "/containers/c1/json ")) {
                        S.inspects++;
                        if (S.inspects <= S.inspect_fail)
                                answer(fd, 500, RACE);
                        else if (S.inspect_running)
                                answer(fd, 200, RUNNING);
                        else {
                                snprintf(body, sizeof(body), EXITED, S.exit_code);
                                answer(fd, 200, body);
                        }
                } else if (strncmp(req, "POST /", 6) == 0 && strstr(req, "/containers/c1/wait ")) {
                        S.waits++;
                        if (S.waits <= S.wait_fail)
                                answer(fd, 500, RACE);
                        else {
                                snprintf(body, sizeof(body), "{\"StatusCode\":%d,\"Error\":null}", S.exit_code);
                                answer(fd, 200, body);
                        }
                } else if (strncmp(req, "DELETE /", 8) == 0 && strstr(req, "/containers/c1?force=1&v=1 ")) {
                        S.deletes++;
                        if (S.deletes <= S.delete_fail)
                                answer(fd, 500, RACE);
                        else
                                answer(fd, 204, "");
                } else
                        answer(fd, 404, "{\"cause\":\"no such route\",\"message\":\"not here\",\"response\":404}");
                pthread_mutex_unlock(&lock);
                close(fd);
        }
}

/* wait (or, with code NULL, destroy with no error to fill) against s. */
static int wait_with(struct script s, int *code, struct dm_error *err, struct script *seen)
{
        struct dm_backend *b = NULL;
        char host[160];
        int r;

        pthread_mutex_lock(&lock);
        S = s;
        pthread_mutex_unlock(&lock);
        snprintf(host, sizeof(host), "unix://%s", sock_path);
        r = dm_docker_backend_new(host, 0, NULL, &b, err);
        if (r == 0) {
                r = code ? b->ops->wait(b, "c1", code, err) : b->ops->destroy(b, "c1", NULL);
                b->ops->free(b);
        }
        pthread_mutex_lock(&lock);
        *seen = S;
        pthread_mutex_unlock(&lock);
        return r;
}

int main(void)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        struct dm_error err = { 0 };
        struct script seen;
        pthread_t t;
        int code = -1, r;

        snprintf(sock_path, sizeof(sock_path), "/tmp/dm-docker-wait-%d.sock", (int)getpid());
        snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
        unlink(sock_path);
        listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(listen_fd, 16) < 0) {
                printf("Bail out! engine socket: %s\n", strerror(errno));
                return 1;
        }
        pthread_create(&t, NULL, engine, NULL);

        r = wait_with((struct script){ .exit_code = 3 }, &code, &err, &seen);
        ok(r == 0 && code == 3 && seen.inspects == 1 && seen.waits == 0,
           "an exited container: one inspect, its code (%d, %d, %d inspects)", r, code, seen.inspects);

        code = -1;
        r = wait_with((struct script){ .inspect_fail = 2, .exit_code = 7 }, &code, &err, &seen);
        ok(r == 0 && code == 7 && seen.inspects == 3,
           "two racing inspects answered 500, then the exit code (%d, %d, %d inspects: %s)", r, code, seen.inspects,
           err.msg);

        code = -1;
        dm_error_clear(&err);
        r = wait_with((struct script){ .inspect_fail = 1 << 20, .wait_fail = 2, .exit_code = 9 }, &code, &err, &seen);
        ok(r == 0 && code == 9 && seen.waits == 3,
           "inspect keeps failing: the blocking wait, through two racing 500s (%d, %d, %d waits: %s)", r, code,
           seen.waits, err.msg);

        code = -1;
        dm_error_clear(&err);
        r = wait_with((struct script){ .inspect_running = 1, .wait_fail = 1 << 20, .exit_code = 1 }, &code, &err,
                      &seen);
        ok(r == -EIO && strstr(err.msg, "no such process") && strstr(err.msg, "wait for container 'c1'") &&
                   seen.waits == 4,
           "an engine that goes on failing is reported in its words after 4 waits (%d, %d waits: %s)", r, seen.waits,
           err.msg);

        /* A caller that only cleans up passes no error: the 500 is logged
         * without one (this crashed, reading the NULL error's message). */
        r = wait_with((struct script){ .delete_fail = 2 }, NULL, &err, &seen);
        ok(r == 0 && seen.deletes == 3, "destroy with no error to fill, through two 500s (%d, %d deletes)", r,
           seen.deletes);

        shutdown(listen_fd, SHUT_RDWR);
        close(listen_fd);
        pthread_join(t, NULL);
        unlink(sock_path);
        return done_testing();
}
