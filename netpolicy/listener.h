/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_LISTENER_H
#define DM_NETPOLICY_LISTENER_H

/* The TCP server under the egress proxy (proxy.c) and the vendor proxy
 * (vendor.c): a listening socket, an accept thread, one thread per
 * connection up to a cap, and the joining of finished connection threads.
 * What a connection is for is the owner's: the listener calls back.
 *
 * Stopping: every wait of a connection thread should be dm_listener_wait (or
 * poll dm_listener_stop_fd), which returns at once when the listener stops.
 * Sockets a connection opens besides its client socket and that it does not
 * wait on that way (e.g. curl's) are registered with dm_listener_track so
 * that stop can shut them down. dm_listener_free joins every thread before it
 * returns. Every fd is close-on-exec and non-blocking. */

#include <netinet/in.h>
#include <stdbool.h>

struct dm_listener;
struct dm_listener_conn;

/* Why a connection was refused before it got a thread. */
enum dm_listener_refusal {
        DM_LISTENER_FULL,      /* max_conns connections are open */
        DM_LISTENER_NO_THREAD, /* no memory or thread for it */
};

/* Sockets of one connection that stop shuts down, besides the client's. */
#define DM_LISTENER_MAX_TRACKED 4

struct dm_listener_conf {
        const char *what; /* log prefix, e.g. "vendor proxy" (copied) */
        unsigned max_conns;
        int backlog;
        /* Stop also shuts the client sockets down (for waits that do not
         * watch the stop fd). */
        bool shutdown_on_stop;
        void *owner; /* passed to the callbacks */
        /* On the accept thread, optional: whether to serve a new connection.
         * false after answering it; the listener then closes fd. */
        bool (*admit)(void *owner, int fd, const struct sockaddr_in *peer);
        /* On the accept thread: answer a connection refused for why. The
         * listener then closes fd. */
        void (*refuse)(void *owner, int fd, enum dm_listener_refusal why);
        /* On the connection's own thread: serve fd until done. The listener
         * closes fd afterwards. */
        void (*serve)(void *owner, struct dm_listener_conn *c, int fd);
};

/* Creates the eventfds and the socket, binds to addr and listens; starts no
 * thread. 0 or -errno. */
int dm_listener_new(const struct dm_listener_conf *conf, const struct sockaddr_in *addr, struct dm_listener **ret);
/* The same with fd, a socket that listens already (e.g. made in another
 * network namespace, netns.h): fd is taken over, closed on error too. */
int dm_listener_new_fd(const struct dm_listener_conf *conf, int fd, struct dm_listener **ret);
/* Starts the accept thread. 0 or -errno. */
int dm_listener_start(struct dm_listener *l);
/* Stops accepting, wakes every connection (the stop fd becomes readable for
 * good, tracked sockets are shut down), joins every thread, closes every fd
 * and frees. NULL is fine. */
void dm_listener_free(struct dm_listener *l);

/* The address the listener is bound to (with the port the kernel chose). */
void dm_listener_address(const struct dm_listener *l, struct sockaddr_in *ret);
/* Number of connections whose thread has not finished. */
unsigned dm_listener_connections(struct dm_listener *l);
/* Whether dm_listener_free has begun. */
bool dm_listener_stopping(const struct dm_listener *l);

/* Waits for events on fd (fd < 0: just sleeps) for at most timeout_ms (a
 * negative one counts as 0). 1 when ready, 0 on timeout, -ECANCELED when the
 * listener is stopping, other -errno. */
int dm_listener_wait(const struct dm_listener *l, int fd, short events, int timeout_ms);
/* Sends all n bytes of data on a nonblocking fd, waiting with
 * dm_listener_wait at most timeout_ms for each stall. 0, -ETIMEDOUT,
 * -ECANCELED when the listener is stopping, other -errno. */
int dm_listener_send_all(const struct dm_listener *l, int fd, const void *data, size_t n, int timeout_ms);
/* An fd that becomes readable, and stays so, when the listener stops. */
int dm_listener_stop_fd(const struct dm_listener *l);

/* Registers a socket of c for stop to shut down (at once when the listener
 * is already stopping). 0, or -EMFILE when c has DM_LISTENER_MAX_TRACKED. */
int dm_listener_track(struct dm_listener_conn *c, int fd);
void dm_listener_untrack(struct dm_listener_conn *c, int fd);

#endif
