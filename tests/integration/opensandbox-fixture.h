/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_INTEGRATION_OPENSANDBOX_FIXTURE_H
#define DM_TESTS_INTEGRATION_OPENSANDBOX_FIXTURE_H

/* The OpenSandbox protocol fixture (tests/fixtures/opensandbox/server.mjs,
 * a test double whose sandboxes are real containers of the engine that
 * DOCKER_HOST names, Podman's socket by default), started and stopped for a
 * test: shared by test-opensandbox and test-backend-conformance. */

#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

struct os_fixture {
        pid_t pid;
        int port;          /* the lifecycle API's, on 127.0.0.1 */
        char domain[64];   /* "127.0.0.1:<port>", for OPEN_SANDBOX_DOMAIN */
        char instance[64]; /* the fixture's id */
        char label[128];   /* "opensandbox.fixture=<instance>": on every container it makes */
        char state_file[PATH_MAX];
};

/* SIGTERM: the fixture removes every container it made, then exits. NULL
 * and a stopped fixture are fine. */
static inline void os_fixture_stop(struct os_fixture *fx)
{
        int status;

        if (fx && fx->pid > 0) {
                kill(fx->pid, SIGTERM);
                waitpid(fx->pid, &status, 0);
                fx->pid = 0;
        }
}

/* Starts the fixture with the given API key, its counters in state_file
 * (a path the caller owns), and waits for its "ready" line. egress: as a
 * server with an [egress] sidecar image configured (else a networkPolicy
 * is refused, as the real server does). max_timeout: the server's
 * max_sandbox_timeout_seconds (0: no cap). network_mode: its [docker]
 * network_mode (NULL: "bridge"; "host" or a network's name refuse a
 * networkPolicy, as the server does). 0, or -1 when node is missing or
 * the fixture did not come up (it is stopped then). */
static inline int os_fixture_start_net(struct os_fixture *fx, const char *key, const char *state_file, bool egress,
                                       long max_timeout, const char *network_mode)
{
        char max[32];
        const char *src = getenv("top_srcdir");
        char script[PATH_MAX], line[256] = "";
        int out[2], r = -1;
        FILE *f;

        memset(fx, 0, sizeof(*fx));
        snprintf(fx->state_file, sizeof(fx->state_file), "%s", state_file);
        snprintf(script, sizeof(script), "%s/tests/fixtures/opensandbox/server.mjs", src ? src : DM_SRCDIR);
        if (pipe2(out, O_CLOEXEC) < 0)
                return -1;
        fx->pid = fork();
        if (fx->pid == 0) {
                dup2(out[1], 1);
                snprintf(max, sizeof(max), "%ld", max_timeout);
                execlp("node", "node", script, "--api-key", key, "--state-file", fx->state_file, "--egress",
                       egress ? "1" : "0", "--max-timeout", max, "--network-mode",
                       network_mode ? network_mode : "bridge", (char *)NULL);
                _exit(127);
        }
        close(out[1]);
        f = fdopen(out[0], "r");
        if (fx->pid > 0 && f && fgets(line, sizeof(line), f) &&
            sscanf(line, "ready %d %*d %63s", &fx->port, fx->instance) == 2)
                r = 0;
        if (f)
                fclose(f);
        else
                close(out[0]);
        if (r < 0) {
                os_fixture_stop(fx);
                return -1;
        }
        snprintf(fx->domain, sizeof(fx->domain), "127.0.0.1:%d", fx->port);
        snprintf(fx->label, sizeof(fx->label), "opensandbox.fixture=%s", fx->instance);
        return r;
}

/* The same with the server's [docker] network_mode "bridge". */
static inline int os_fixture_start_with(struct os_fixture *fx, const char *key, const char *state_file, bool egress,
                                        long max_timeout)
{
        return os_fixture_start_net(fx, key, state_file, egress, max_timeout, NULL);
}

/* As a server with egress configured and the default maximum TTL (86400 s,
 * the server's example configuration). */
static inline int os_fixture_start(struct os_fixture *fx, const char *key, const char *state_file)
{
        return os_fixture_start_with(fx, key, state_file, true, 86400);
}

/* The fixture's counters (execd_requests, interrupts, uploads, ...), as it
 * last wrote them; the caller puts the object. */
static inline json_object *os_fixture_stats(const struct os_fixture *fx)
{
        return json_object_from_file(fx->state_file);
}

#endif
