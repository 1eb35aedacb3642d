/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/mcp/stdio.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "src/mcp/jsonrpc.h"
#include "src/mcp/server.h"
#include "src/basic/io.h"
#include "src/basic/log.h"

#define READ_CHUNK 65536

struct out {
        int fd;
        pthread_mutex_t lock;
        bool broken;
};

static int send_line(void *transport, json_object *msg)
{
        struct out *o = transport;
        size_t len;
        char *line = dm_rpc_serialize(msg, &len);
        int r = 0;

        if (!line)
                return -ENOMEM;
        line[len] = '\n'; /* replaces the NUL: one write per message */
        pthread_mutex_lock(&o->lock);
        if (!o->broken && (r = dm_write_all(o->fd, line, len + 1)) < 0)
                o->broken = true;
        if (o->broken && r == 0)
                r = -EPIPE;
        pthread_mutex_unlock(&o->lock);
        free(line);
        return r;
}

static void handle_line(struct dm_mcp_session *s, char *line, size_t len)
{
        /* Tolerate CRLF and blank lines between messages. */
        while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
                len--;
        if (len == 0)
                return;
        dm_mcp_session_handle(s, line, len);
}

int dm_mcp_stdio_serve(struct dm_mcp_server *srv, int in_fd, int out_fd, size_t max_message)
{
        struct out o = { .fd = out_fd, .lock = PTHREAD_MUTEX_INITIALIZER };
        struct dm_mcp_session *s;
        sigset_t mask;
        char *buf;
        size_t len = 0, cap = max_message + 1;
        bool discarding = false;
        int sfd, r = 0;

        buf = malloc(cap);
        s = dm_mcp_session_new(srv, send_line, &o);
        if (!buf || !s) {
                free(buf);
                dm_mcp_session_free(s);
                return -ENOMEM;
        }

        /* SIGTERM/SIGINT end the loop like EOF does: through a signalfd, so
         * the clean-up runs in ordinary code, not in a handler. The mask is
         * set before any worker thread exists, so they inherit it. */
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        pthread_sigmask(SIG_BLOCK, &mask, NULL);
        sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

        for (;;) {
                struct pollfd pfd[2] = { { .fd = in_fd, .events = POLLIN }, { .fd = sfd, .events = POLLIN } };
                ssize_t n;
                char *start, *nl;

                if (poll(pfd, sfd >= 0 ? 2 : 1, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        r = -errno;
                        break;
                }
                if (sfd >= 0 && (pfd[1].revents & POLLIN)) {
                        struct signalfd_siginfo si;
                        if (read(sfd, &si, sizeof(si)) > 0)
                                log_info("signal %u: shutting down", si.ssi_signo);
                        break;
                }
                if (!(pfd[0].revents & (POLLIN | POLLHUP | POLLERR)))
                        continue;
                n = read(in_fd, buf + len, cap - len);
                if (n < 0) {
                        if (errno == EINTR || errno == EAGAIN)
                                continue;
                        r = -errno;
                        log_error("reading stdin: %s", strerror(errno));
                        break;
                }
                if (n == 0) {
                        /* A last message without a newline still counts. */
                        if (len && !discarding)
                                handle_line(s, buf, len);
                        log_info("stdin closed: shutting down");
                        break;
                }
                len += (size_t)n;

                start = buf;
                while ((nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
                        if (discarding)
                                discarding = false;
                        else
                                handle_line(s, start, (size_t)(nl - start));
                        start = nl + 1;
                }
                len -= (size_t)(start - buf);
                memmove(buf, start, len);
                if (len == cap) {
                        /* No newline within max_message bytes: refuse the
                         * message and skip the rest of it. */
                        if (!discarding) {
                                char msg[160];
                                snprintf(msg, sizeof(msg),
                                         "message too large: over %zu bytes (DEMESNE_MAX_MESSAGE sets the limit)",
                                         max_message);
                                log_warning("%s", msg);
                                dm_mcp_session_send_error(s, DM_RPC_INVALID_REQUEST, msg);
                        }
                        discarding = true;
                        len = 0;
                }
        }

        dm_mcp_session_free(s);
        if (sfd >= 0)
                close(sfd);
        free(buf);
        return r;
}
