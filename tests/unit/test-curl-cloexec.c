/* SPDX-License-Identifier: MIT */
/* Every descriptor of the process is close-on-exec after libcurl's
 * transfers on fresh handles. libcurl 7.88 makes each easy handle's wakeup
 * socketpair without close-on-exec (curl issue #13618), so a child demesne
 * execs (a host MCP server, the podman service, an image build) would
 * inherit it; backends/curl.c marks it after a new handle's first transfer.
 * A one-request-a-connection HTTP server on loopback answers the calls. */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/curl.h"
#include "src/basic/buf.h"
#include "tests/tap.h"

#define HANDLES 3

static int lfd = -1;

static void *serve(void *arg)
{
        (void)arg;
        for (int i = 0; i < HANDLES; i++) {
                char req[4096];
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                static const char ans[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";

                if (c < 0)
                        break;
                (void)!read(c, req, sizeof(req));
                (void)!write(c, ans, sizeof(ans) - 1);
                close(c);
        }
        return NULL;
}

/* The descriptors from 3 up that are not close-on-exec, into buf. */
static int inheritable(char *buf, size_t len)
{
        DIR *d = opendir("/proc/self/fd");
        struct dirent *e;
        int n = 0;

        buf[0] = '\0';
        while (d && (e = readdir(d))) {
                int fd = atoi(e->d_name), fl;

                if (e->d_name[0] < '0' || e->d_name[0] > '9' || fd <= 2 || fd == dirfd(d))
                        continue;
                fl = fcntl(fd, F_GETFD);
                if (fl >= 0 && !(fl & FD_CLOEXEC)) {
                        n++;
                        snprintf(buf + strlen(buf), len - strlen(buf), " %d", fd);
                }
        }
        if (d)
                closedir(d);
        return n;
}

int main(void)
{
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t sl = sizeof(sa);
        struct dm_curl *h[HANDLES] = { 0 };
        char url[64], fds[512];
        pthread_t t;
        int answered = 0;

        lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 8) < 0 ||
            getsockname(lfd, (struct sockaddr *)&sa, &sl) < 0 || pthread_create(&t, NULL, serve, NULL) != 0) {
                printf("Bail out! cannot listen on loopback: %s\n", strerror(errno));
                return 1;
        }
        /* What this process inherited is not the question: made
         * close-on-exec first, so that what is left after is libcurl's. */
        if (inheritable(fds, sizeof(fds)) > 0) {
                diag("inherited, made close-on-exec before the test:%s", fds);
                for (char *p = strtok(fds, " "); p; p = strtok(NULL, " "))
                        (void)fcntl(atoi(p), F_SETFD, FD_CLOEXEC);
        }
        ok(inheritable(fds, sizeof(fds)) == 0, "before: nothing inheritable from 3 up (%s )", fds);
        snprintf(url, sizeof(url), "http://127.0.0.1:%u", (unsigned)ntohs(sa.sin_port));
        /* Handles of their own, each with its first transfer, as each
         * OpenSandbox sandbox's execd has. */
        for (int i = 0; i < HANDLES; i++) {
                struct dm_error err = { 0 };
                struct dm_buf body;
                long status = 0;

                dm_buf_init(&body, 1 << 16);
                if (dm_curl_new_url(url, 1 << 16, "test server", NULL, &h[i], &err) == 0 &&
                    dm_curl_request(h[i], "GET", "/x", NULL, 5000, &status, &body, &err) == 0 && status == 200)
                        answered++;
                else
                        diag("handle %d: %s", i, err.msg);
                dm_buf_release(&body);
        }
        ok(answered == HANDLES, "%d fresh handles each made a transfer", answered);
        ok(inheritable(fds, sizeof(fds)) == 0, "after: every descriptor from 3 up is close-on-exec (inheritable:%s )",
           fds);
        for (int i = 0; i < HANDLES; i++)
                dm_curl_free(h[i]);
        pthread_join(t, NULL);
        close(lfd);
        return done_testing();
}
