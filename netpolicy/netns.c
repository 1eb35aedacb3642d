/* SPDX-License-Identifier: MIT */
/* See netns.h. The server is multithreaded and setns(CLONE_NEWUSER) wants a
 * single-threaded caller, so the work happens in a forked child that uses
 * only system calls (async-signal-safe: no malloc, no locks) and reports
 * one status word and the sockets over a SOCK_SEQPACKET pair. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "netpolicy/netns.h"
#include "src/basic/cleanup.h"
#include "src/basic/pidfd.h"

#define CHILD_TIMEOUT_MS 5000

/* Steps the child reports a failure at (the status word is step << 16 | errno). */
enum step { STEP_USERNS = 1, STEP_NETNS, STEP_NETLINK, STEP_LO_UP, STEP_ROUTE, STEP_LISTEN };

static const char *const step_what[] = {
        [STEP_USERNS] = "join the container's user namespace",
        [STEP_NETNS] = "join the container's network namespace",
        [STEP_NETLINK] = "open a netlink socket in it",
        [STEP_LO_UP] = "bring lo up in it",
        [STEP_ROUTE] = "add a local route in it",
        [STEP_LISTEN] = "listen in it",
};

/* One netlink request and its acknowledgement: 0 or -errno. */
static int nl_talk(int fd, struct nlmsghdr *h)
{
        char buf[1024];
        ssize_t n;

        if (send(fd, h, h->nlmsg_len, 0) < 0)
                return -errno;
        n = recv(fd, buf, sizeof(buf), 0);
        if (n < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)))
                return n < 0 ? -errno : -EPROTO;
        struct nlmsghdr *a = (struct nlmsghdr *)buf;
        if (a->nlmsg_type != NLMSG_ERROR)
                return -EPROTO;
        return ((struct nlmsgerr *)NLMSG_DATA(a))->error;
}

static int lo_up(int nl)
{
        struct {
                struct nlmsghdr h;
                struct ifinfomsg i;
        } m = {
                .h = { .nlmsg_len = sizeof(m), .nlmsg_type = RTM_NEWLINK, .nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK },
                .i = { .ifi_family = AF_UNSPEC, .ifi_index = 1, .ifi_flags = IFF_UP, .ifi_change = IFF_UP },
        };
        return nl_talk(nl, &m.h);
}

/* `ip route replace local CIDR dev lo table local` */
static int local_route(int nl, const struct dm_cidr *c)
{
        struct {
                struct nlmsghdr h;
                struct rtmsg r;
                struct rtattr dst_a;
                uint32_t dst;
                struct rtattr oif_a;
                uint32_t oif;
        } m = {
                .h = { .nlmsg_len = sizeof(m),
                       .nlmsg_type = RTM_NEWROUTE,
                       .nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE },
                .r = { .rtm_family = AF_INET,
                       .rtm_dst_len = (unsigned char)c->prefix,
                       .rtm_table = RT_TABLE_LOCAL,
                       .rtm_protocol = RTPROT_STATIC,
                       .rtm_scope = RT_SCOPE_HOST,
                       .rtm_type = RTN_LOCAL },
                .dst_a = { .rta_len = RTA_LENGTH(sizeof(uint32_t)), .rta_type = RTA_DST },
                .dst = c->addr,
                .oif_a = { .rta_len = RTA_LENGTH(sizeof(uint32_t)), .rta_type = RTA_OIF },
                .oif = 1,
        };
        return nl_talk(nl, &m.h);
}

/* addrs NULL: an unconnected socket, for a connect made later. */
static int child_listen(const struct sockaddr_in *a)
{
        int one = 1, fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

        if (fd < 0 || !a)
                return fd < 0 ? -errno : fd;
        if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
            bind(fd, (const struct sockaddr *)a, sizeof(*a)) < 0 || listen(fd, 128) < 0) {
                int e = -errno;
                close(fd);
                return e;
        }
        return fd;
}

/* The child: never returns. */
_Noreturn static void child_main(int sock, int userfd, int netfd, const struct sockaddr_in *addrs, size_t n,
                                 const struct dm_cidr *routes, size_t n_routes)
{
        int fds[DM_NETNS_MAX_LISTEN];
        union {
                char buf[CMSG_SPACE(sizeof(fds))];
                struct cmsghdr align;
        } u;
        uint32_t status = 0;
        int nl = -1, r = 0;
        size_t made = 0;

        memset(&u, 0, sizeof(u));
        if (userfd >= 0 && setns(userfd, CLONE_NEWUSER) < 0)
                status = STEP_USERNS << 16 | (uint32_t)errno;
        else if (setns(netfd, CLONE_NEWNET) < 0)
                status = STEP_NETNS << 16 | (uint32_t)errno;
        else if (!addrs)
                ; /* plain sockets: lo is the engine's */
        else if ((nl = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE)) < 0)
                status = STEP_NETLINK << 16 | (uint32_t)errno;
        else if ((r = lo_up(nl)) < 0)
                status = STEP_LO_UP << 16 | (uint32_t)-r;
        for (size_t i = 0; !status && i < n_routes; i++)
                if ((r = local_route(nl, &routes[i])) < 0)
                        status = STEP_ROUTE << 16 | (uint32_t)-r;
        for (; !status && made < n; made++)
                if ((fds[made] = child_listen(addrs ? &addrs[made] : NULL)) < 0)
                        status = STEP_LISTEN << 16 | (uint32_t)-fds[made];
        struct iovec iov = { .iov_base = &status, .iov_len = sizeof(status) };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
        if (!status && n) {
                struct cmsghdr *c;

                msg.msg_control = u.buf;
                msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
                c = CMSG_FIRSTHDR(&msg);
                c->cmsg_level = SOL_SOCKET;
                c->cmsg_type = SCM_RIGHTS;
                c->cmsg_len = CMSG_LEN(n * sizeof(int));
                memcpy(CMSG_DATA(c), fds, n * sizeof(int));
        }
        _exit(sendmsg(sock, &msg, MSG_NOSIGNAL) < 0 ? 1 : 0);
}

/* Whether the user namespace behind fd is the one this process is in. */
static bool same_userns(int fd)
{
        struct stat a, b;

        return fstat(fd, &a) == 0 && stat("/proc/self/ns/user", &b) == 0 && a.st_ino == b.st_ino &&
               a.st_dev == b.st_dev;
}

static int receive(int sock, size_t n, int *ret_fds, uint32_t *ret_status)
{
        union {
                char buf[CMSG_SPACE(sizeof(int) * DM_NETNS_MAX_LISTEN)];
                struct cmsghdr align;
        } u;
        struct iovec iov = { .iov_base = ret_status, .iov_len = sizeof(*ret_status) };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
        struct pollfd p = { .fd = sock, .events = POLLIN };
        struct cmsghdr *c;
        size_t got = 0;
        int r;

        do
                r = poll(&p, 1, CHILD_TIMEOUT_MS);
        while (r < 0 && errno == EINTR);
        if (r <= 0)
                return r < 0 ? -errno : -ETIMEDOUT;
        if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) != sizeof(*ret_status))
                return -EPROTO; /* the child died before it could say */
        for (c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        for (size_t i = 0; i < k; i++) {
                                int fd;
                                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                                if (got < n)
                                        ret_fds[got++] = fd;
                                else
                                        close(fd);
                        }
                }
        if (*ret_status == 0 && got != n) {
                for (size_t i = 0; i < got; i++)
                        close(ret_fds[i]);
                return (msg.msg_flags & MSG_CTRUNC) ? -EMFILE : -EPROTO;
        }
        return 0;
}

int dm_netns_listen(int pid, const struct sockaddr_in *addrs, size_t n, const struct dm_cidr *routes, size_t n_routes,
                    int *ret_fds, struct dm_error *err)
{
        _cleanup_close_ int pidfd = -1, userfd = -1, netfd = -1;
        int sv[2], r, e;
        char path[64];
        uint32_t status = 0;
        pid_t child;

        if (n > DM_NETNS_MAX_LISTEN || n_routes > DM_NETNS_MAX_ROUTES)
                return dm_error_set(err, -E2BIG, "too many listeners or routes for one sandbox (at most %d and %d)",
                                    DM_NETNS_MAX_LISTEN, DM_NETNS_MAX_ROUTES);
        /* Pin the process, open its namespaces, and check that it is still
         * the same process: the files are then its. */
        pidfd = dm_pidfd_open(pid);
        if (pidfd < 0)
                return dm_error_set(err, pidfd, "the container's process %d: %s", pid, strerror(-pidfd));
        snprintf(path, sizeof(path), "/proc/%d/ns/user", pid);
        userfd = open(path, O_RDONLY | O_CLOEXEC);
        snprintf(path, sizeof(path), "/proc/%d/ns/net", pid);
        netfd = open(path, O_RDONLY | O_CLOEXEC);
        if (userfd < 0 || netfd < 0)
                return dm_error_set(err, -errno, "open the namespaces of the container's process %d: %s", pid,
                                    strerror(errno));
        if (dm_pidfd_alive(pidfd) < 0)
                return dm_error_set(err, -ESRCH, "the container's process %d ended", pid);
        if (same_userns(userfd)) {
                close(userfd);
                userfd = -1;
        }
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
                return dm_error_set(err, -errno, "socketpair: %s", strerror(errno));
        child = fork();
        if (child < 0) {
                e = errno;
                close(sv[0]);
                close(sv[1]);
                return dm_error_set(err, -e, "fork: %s", strerror(e));
        }
        if (child == 0) {
                close(sv[0]);
                child_main(sv[1], userfd, netfd, addrs, n, routes, n_routes);
        }
        close(sv[1]);
        r = receive(sv[0], n, ret_fds, &status);
        close(sv[0]);
        if (r < 0)
                kill(child, SIGKILL);
        while (waitpid(child, NULL, 0) < 0 && errno == EINTR)
                ;
        if (r < 0)
                return dm_error_set(err, r, "make the sandbox's listeners in its network namespace: %s",
                                    r == -ETIMEDOUT ? "the helper process did not answer in time" : strerror(-r));
        if (status) {
                unsigned step = status >> 16;
                e = (int)(status & 0xffff);
                return dm_error_set(err, -e, "cannot %s (process %d): %s",
                                    step < sizeof(step_what) / sizeof(step_what[0]) && step_what[step]
                                            ? step_what[step]
                                            : "set up the namespace",
                                    pid, strerror(e));
        }
        return 0;
}
