/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_PROXY_H
#define DM_NETPOLICY_PROXY_H

/* The egress proxy: an HTTP forward proxy (CONNECT tunnels and plain-HTTP
 * absolute-form requests) that the server runs on the host side of each
 * sandbox's veth. One struct dm_proxy serves the whole process; each sandbox
 * is added to it with its own listener (bound to the host-side address of
 * its veth), its own allowlist, its own source address and its own egress
 * log. A connection whose source is not the sandbox's address is refused.
 *
 * Threads: one accept thread per sandbox and one thread per connection
 * (capped per sandbox). dm_proxy_remove and dm_proxy_free stop accepting,
 * wake every connection, join every thread and close every fd before they
 * return. Every fd is close-on-exec. See docs/reference/egress-proxy.md. */

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "netpolicy/egress-tally.h"
#include "src/basic/error.h"

/* --- the allowlist --------------------------------------------------------- */

/* A name rule: pattern is a lowercase name without trailing dot, either exact
 * ("pypi.org") or a wildcard ("*.debian.org": any name below debian.org, not
 * debian.org itself). port 0 = any port. */
struct dm_proxy_host_rule {
        char *pattern;
        uint16_t port;
        bool web; /* a package host: CONNECT to 443 and plain HTTP to 80 only (port is 0) */
};

/* An address rule: IPv4 network (network byte order, host bits zero) and
 * prefix length; port 0 = any. It allows IP literals it covers. It never
 * opens a blocked address (netpolicy/blocked.h) or one of the host's: those
 * are refused before any rule is looked at. */
struct dm_proxy_cidr_rule {
        struct in_addr net;
        uint8_t prefix;
        uint16_t port;
};

struct dm_proxy_policy {
        struct dm_proxy_host_rule *hosts;
        size_t n_hosts;
        struct dm_proxy_cidr_rule *cidrs;
        size_t n_cidrs;
        /* Every valid host name on any port (`open` in a sandbox whose only
         * way out is the proxy); the resolved address is still checked. */
        bool any_name;
};

void dm_proxy_policy_init(struct dm_proxy_policy *p);
void dm_proxy_policy_release(struct dm_proxy_policy *p);
/* Adds a name rule; pattern is lowercased and a trailing dot dropped.
 * -EINVAL (with a message) for a name that is not a valid host name or an
 * IP literal (those belong in CIDR rules). */
int dm_proxy_policy_add_host(struct dm_proxy_policy *p, const char *pattern, uint16_t port, struct dm_error *err);
/* Adds a package host: a name rule that takes CONNECT to port 443 and
 * plain HTTP to port 80 only. Errors as dm_proxy_policy_add_host. */
int dm_proxy_policy_add_web_host(struct dm_proxy_policy *p, const char *pattern, struct dm_error *err);
/* Adds an address rule; -EINVAL for prefix > 32 or host bits set. */
int dm_proxy_policy_add_cidr(struct dm_proxy_policy *p, struct in_addr net, unsigned prefix, uint16_t port,
                             struct dm_error *err);
/* Adds one entry of the `allow` syntax of TOOLS.md: host, *.host, host:port,
 * A.B.C.D, CIDR, CIDR:port (a bare address is a /32; no port = any). */
int dm_proxy_policy_add_entry(struct dm_proxy_policy *p, const char *entry, struct dm_error *err);
/* Deep copy into an initialised, empty dst. 0 or -ENOMEM. */
int dm_proxy_policy_copy(struct dm_proxy_policy *dst, const struct dm_proxy_policy *src);

/* --- the server ------------------------------------------------------------ */

struct dm_proxy_limits {
        size_t max_header_bytes; /* request head cap; larger → 431 (default 16 KiB) */
        unsigned max_conns;      /* open connections per sandbox; more → 503 (default 64) */
        int connect_timeout_ms;  /* upstream connect; expiry → 504 (default 10 s) */
        int header_timeout_ms;   /* to receive the request head (default 30 s) */
        int idle_timeout_ms;     /* no byte either way for this long closes (default 300 s) */
};

void dm_proxy_limits_default(struct dm_proxy_limits *l);

struct dm_proxy;
struct dm_proxy_sandbox;

/* Makes the process-wide proxy. limits NULL = defaults. hosts_file (the
 * server's DEMESNE_PROXY_HOSTS; NULL or empty: none): a hosts(5) file
 * consulted before DNS on every lookup, so pinning takes effect without a
 * restart.
 * Starts no thread. */
int dm_proxy_new(const struct dm_proxy_limits *limits, const char *hosts_file, struct dm_proxy **ret,
                 struct dm_error *err);
/* Removes every sandbox (as dm_proxy_remove) and frees. NULL is fine. */
void dm_proxy_free(struct dm_proxy *p);

struct dm_proxy_sandbox_conf {
        const char *id;            /* the sandbox's name in logs; copied */
        struct sockaddr_in listen; /* host side of the veth; port 0 = the kernel picks */
        /* > 0: a socket listening already (made in the sandbox's own network
         * namespace, netns.h), served instead of binding listen; dup'ed.
         * 0: bind listen. */
        int listen_fd;
        struct in_addr source;                /* the sandbox's address; INADDR_ANY = any source */
        const struct dm_proxy_policy *policy; /* copied */
        int log_fd;                           /* egress.log, opened O_APPEND by the caller; dup'ed; -1 = none */
        /* No HTTP: each connection is relayed to the address it was made to
         * (getsockname of the accepted socket: a listener on 0.0.0.0 behind
         * an AnyIP route in the sandbox's namespace), when that address and
         * port pass the CIDR rules and the blocked ranges; else it is reset
         * at once, nothing sent. Logged as method TCP. */
        bool transparent;
        /* Where each connection's decision is counted for the run's journal
         * (netpolicy/egress-tally.h), or NULL; borrowed: it must outlive
         * dm_proxy_remove of this sandbox. */
        struct dm_egress_tally *tally;
};

/* Binds the listener and starts its accept thread. The sandbox belongs to p;
 * *ret stays valid until dm_proxy_remove or dm_proxy_free. Errors: bind
 * failures (-EADDRINUSE, -EADDRNOTAVAIL...) and -ENOMEM, with a message. */
int dm_proxy_add(struct dm_proxy *p, const struct dm_proxy_sandbox_conf *conf, struct dm_proxy_sandbox **ret,
                 struct dm_error *err);
/* The address the sandbox's listener is bound to (the port the kernel chose). */
void dm_proxy_sandbox_address(const struct dm_proxy_sandbox *s, struct sockaddr_in *ret);
/* Number of connections of the sandbox still open (for tests and `doctor`). */
unsigned dm_proxy_sandbox_connections(struct dm_proxy_sandbox *s);
/* Closes the listener and every connection of s, joins their threads, logs
 * the open connections' byte counts and frees s. NULL is fine. */
void dm_proxy_remove(struct dm_proxy *p, struct dm_proxy_sandbox *s);

/* --- what the sandbox is told ---------------------------------------------- */

/* The environment of a sandbox that reaches the network through the proxy at
 * addr: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY in upper and lower
 * case, PIP_PROXY, npm_config_proxy, npm_config_https_proxy and git's
 * http.proxy as GIT_CONFIG_COUNT/KEY_0/VALUE_0. *ret is a NULL-terminated
 * array of "NAME=value" strings, freed by dm_proxy_env_free. 0 or -ENOMEM. */
int dm_proxy_env(const struct sockaddr_in *addr, char ***ret);
void dm_proxy_env_free(char **env);
/* The apt.conf(5) lines (Acquire::http::Proxy and Acquire::https::Proxy) for
 * /etc/apt/apt.conf.d/; malloc'ed, NULL on ENOMEM. */
char *dm_proxy_apt_conf(const struct sockaddr_in *addr);

#endif
