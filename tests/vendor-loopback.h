/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_VENDOR_LOOPBACK_H
#define DM_TESTS_VENDOR_LOOPBACK_H

/* Shared by the vendor proxy's tests: a listening socket on loopback for an
 * in-test upstream, a proxy started from a conf, a reader for a whole
 * answer, and an entry count of a directory (fds, threads, files a fixture
 * kept). Exits on a socket error:
 * a test without its upstream has nothing to say. */

#include <arpa/inet.h>
#include <dirent.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "netpolicy/vendor.h"
#include "src/basic/timeutil.h"
#include "tests/tap.h"

static inline int test_listen_loopback(uint16_t *ret_port)
{
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        socklen_t len = sizeof(a);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 64) < 0 ||
            getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
                perror("listen on loopback");
                exit(1);
        }
        *ret_port = ntohs(a.sin_port);
        return fd;
}

/* A connected socket to port on loopback, or -1. */
static inline int test_dial(uint16_t port)
{
        struct sockaddr_in a = { .sin_family = AF_INET,
                                 .sin_port = htons(port),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                close(fd);
                fd = -1;
        }
        return fd;
}

/* Reads into buf (NUL-terminated) until the peer closes, buf is full, stop
 * (when not NULL) appears or timeout_ms pass. The length read. */
static inline size_t test_read_until(int fd, char *buf, size_t max, const char *stop, int timeout_ms)
{
        int64_t end = dm_now_ms() + timeout_ms;
        size_t len = 0;

        buf[0] = '\0';
        while (len < max - 1 && dm_now_ms() < end) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                ssize_t n;

                if (poll(&p, 1, 100) <= 0)
                        continue;
                if ((n = read(fd, buf + len, max - 1 - len)) <= 0)
                        break;
                len += (size_t)n;
                buf[len] = '\0';
                if (stop && strstr(buf, stop))
                        break;
        }
        return len;
}

/* Entries other than dot-files; -1 when it cannot be read. */
static inline int test_count_dir(const char *path)
{
        DIR *d = opendir(path);
        struct dirent *e;
        int n = 0;

        if (!d)
                return -1;
        while ((e = readdir(d)))
                n += e->d_name[0] != '.';
        closedir(d);
        return n;
}

/* dm_vendor_start, and the port it listens on; exits when it fails. */
static inline struct dm_vendor_proxy *test_vendor_start(const struct dm_vendor_conf *conf, uint16_t *ret_port)
{
        struct dm_vendor_proxy *p;
        struct dm_error err = { 0 };
        struct sockaddr_in a;

        if (dm_vendor_start(conf, &p, &err) < 0) {
                diag("start: %s", err.msg);
                exit(1);
        }
        dm_vendor_address(p, &a);
        *ret_port = ntohs(a.sin_port);
        return p;
}

#endif
