/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_NETNS_H
#define DM_TESTS_NETNS_H

/* Network-namespace scaffolding for the tests that need real kernel
 * networking (root): a child process standing in for a container, and
 * shell commands (iproute2) that report failures as TAP diagnostics.
 * Include after tests/tap.h. */

#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* A process in a network namespace of its own (a container's stand-in):
 * its pid, or -1. End it with netns_end. */
static inline pid_t netns_spawn(void)
{
        int p[2];
        char c;
        pid_t pid;

        if (pipe(p) < 0)
                return -1;
        pid = fork();
        if (pid == 0) {
                close(p[0]);
                if (unshare(CLONE_NEWNET) < 0 || write(p[1], "x", 1) != 1)
                        _exit(1);
                pause();
                _exit(0);
        }
        close(p[1]);
        if (pid < 0 || read(p[0], &c, 1) != 1) {
                close(p[0]);
                return -1;
        }
        close(p[0]);
        return pid;
}

static inline void netns_end(pid_t pid)
{
        if (pid > 0) {
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
        }
}

/* Runs a shell command; its exit status, with a diagnostic when not 0. */
static inline int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int sh(const char *fmt, ...)
{
        char cmd[1024];
        va_list ap;
        int r;

        va_start(ap, fmt);
        vsnprintf(cmd, sizeof(cmd), fmt, ap);
        va_end(ap);
        r = system(cmd);
        if (r != 0)
                diag("command failed (%d): %s", r, cmd);
        return r;
}

#endif
