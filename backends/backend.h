/* SPDX-License-Identifier: MIT */
#ifndef DM_BACKENDS_BACKEND_H
#define DM_BACKENDS_BACKEND_H

/* The container backends behind one table of operations. A backend knows
 * containers, streams and files; it knows nothing of MCP or JSON-RPC.
 *
 * Threading: every operation may be called from several threads at once on
 * the same struct dm_backend (each call uses its own connection).
 * Errors: 0 or a negative errno, with the sentence in *err. -ENOENT means the
 * container (or image) does not exist; -ECONNREFUSED / -ENOENT on the socket
 * path are reported as "engine not reachable at '...'" with -EHOSTDOWN.
 * Engine error answers carry the engine's own message ("create container from
 * 'x': engine answered 404: no such image: x"). Every engine response is capped
 * at response_max (-E2BIG past it). */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "src/basic/error.h"

struct dm_backend;
struct dm_stream;
struct dm_policy;

struct dm_mount {
        const char *host;   /* absolute host path, already checked */
        const char *target; /* absolute path in the container */
        bool readonly;
};

struct dm_container_spec {
        const char *name;              /* engine-side name, may be NULL */
        const char *image;             /* fully qualified, e.g. localhost/demesne/python:latest */
        const char *const *entrypoint; /* NULL-terminated; NULL = image default. When set, the
                                           image's Cmd is dropped too (argv, if any, follows) */
        const char *const *argv;       /* NULL-terminated; NULL = image default */
        const char *const *env;        /* "KEY=VALUE", NULL-terminated, may be NULL */
        const char *workdir;           /* may be NULL */
        const struct dm_mount *mounts;
        size_t n_mounts;
        const char *const *labels;  /* "key=value", NULL-terminated */
        const char *const *cap_add; /* capabilities kept (all others dropped), NULL-terminated */
        int64_t memory_bytes;       /* 0 = unlimited */
        int64_t pids_limit;         /* 0 = engine default */
        int64_t nano_cpus;          /* CPU time in 1e-9 CPUs (1e9 = one CPU); 0 = unlimited */
        int64_t fsize;              /* RLIMIT_FSIZE, bytes one file may reach; 0 = unlimited */
        int64_t nofile;             /* soft=hard; both nofile and nproc are always sent */
        int64_t nproc;              /* (an explicit ulimit replaces the engine's defaults); 0 = 4096 */
        const char *network_mode;   /* "none" until netpolicy lands; NULL = "none" */
        /* For a backend that keeps its sandboxes' network itself (no
         * DM_CAP_HOST_NETNS: OpenSandbox): the egress policy it must enforce
         * or refuse; NULL = network_mode alone. Borrowed. */
        const struct dm_policy *egress;
        const char *const *egress_package_hosts; /* what package-managers allows there (NULL-terminated) */
        /* ... and one address it must reach besides what egress allows
         * (demesne's remote listener, for a nested sandbox); NULL: none. */
        const char *egress_reach;
        bool readonly_rootfs;
        bool init;               /* engine's init as PID 1 (reaps zombies) */
        bool own_seccomp;        /* PID 1 is demesne-shim, which installs demesne's filter on
                                           itself before anything else runs, and every command goes
                                           through it (a run's, never the engine's exec API): the
                                           engine's default profile is left out ("seccomp=unconfined"),
                                           see docs/explanation/seccomp.md */
        bool open_stdin;         /* keep stdin open for attach; the command sees EOF
                                           when the attached stream is half-closed */
        int64_t ttl_s;           /* the backend removes it after this long; 0 = never.
                                           Only backends with DM_CAP_TTL honour it */
        const char *userns_mode; /* HostConfig.UsernsMode, e.g. "auto:size=65536"
                                           (dm_userns.mode); NULL = the engine's default */
};

struct dm_exec_spec {
        const char *const *argv; /* NULL-terminated, required */
        const char *const *env;
        const char *workdir;
        bool attach_stdin;
};

struct dm_container_info {
        char *id;     /* owned */
        char *image;  /* owned */
        char *status; /* owned: "created", "running", "exited", ... */
        bool running;
        int exit_code;        /* valid when status is "exited" */
        int pid;              /* host pid of PID 1 while running, else 0 */
        int64_t created_unix; /* seconds */
        char *upper_dir;      /* owned: the host directory holding what the container wrote to its root
                                   file system (overlay upperdir), NULL when the engine does not say */
        char *hosts_path;     /* owned: the host files bound at /etc/hosts and the container's log */
        char *log_path;       /* (HostsPath, LogPath); NULL when the engine does not say */
        char **labels;        /* owned "key=value" array, NULL-terminated */
        int64_t expires_unix; /* when the engine will remove it by itself (DM_CAP_TTL), else 0 */
};

void dm_container_info_release(struct dm_container_info *info);

/* A container's root file system kept as an image (commit): repo:tag names
 * it, labels ("key=value", NULL-terminated) go on it. A commit that needs
 * a helper container (rootful Podman's shifted ids) names it
 * DM_COMMIT_HELPER_PREFIX tag, so that what a killed server left is found
 * by name (a label would pass into the image). */
#define DM_COMMIT_HELPER_PREFIX "demesne-commit-"
struct dm_commit_spec {
        const char *repo; /* "localhost/demesne-snapshot" */
        const char *tag;
        const char *const *labels;
        const char *const *env_clear; /* variable names ([A-Z0-9_]) set to "" in the image's
                                         environment: secrets of the container's own */
};

/* One image as the engine lists it. */
struct dm_image_entry {
        char *id;        /* owned */
        char *ref;       /* owned: its first repo:tag, "" when untagged */
        int64_t size;    /* bytes, the engine's Size (its layers and its parents') */
        int64_t created; /* unix seconds */
        char **labels;   /* owned "key=value" array, NULL-terminated */
};
void dm_image_entry_release(struct dm_image_entry *e);
void dm_image_entries_free(struct dm_image_entry *e, size_t n);

/* Called for each demultiplexed chunk: stream is 1 (stdout) or 2 (stderr).
 * A negative return stops the pump and is returned by it. */
struct dm_stream_sink {
        int (*on_data)(void *userdata, int stream, const char *data, size_t len);
        void *userdata;
};

/* What a backend can do beyond the operations every backend has. A caller
 * checks the flag before relying on the behaviour, and takes its fallback or
 * reports a clear error; an operation a backend lacks also answers
 * -EOPNOTSUPP with a sentence saying so, never a silent no-op. */
enum {
        /* Host unix sockets bind-mounted into the container reach the server,
         * and the container's PID 1 can be demesne-shim. */
        DM_CAP_SHIM = 1 << 0,
        /* attach/wait on PID 1: a command can be the container's entrypoint. */
        DM_CAP_ATTACH = 1 << 1,
        /* exec passes stdin through its stream. */
        DM_CAP_EXEC_STDIN = 1 << 2,
        /* exec_pid: the host pid of an exec (kill its process group). */
        DM_CAP_EXEC_PID = 1 << 3,
        /* image_exists answers from the backend's own image store. */
        DM_CAP_IMAGES = 1 << 4,
        /* The container's network namespace is on this host (netpolicy). */
        DM_CAP_HOST_NETNS = 1 << 5,
        /* Caps dropped, no-new-privileges, ulimits and pids limits applied
         * as the spec says. */
        DM_CAP_HARDENING = 1 << 6,
        /* The backend expires containers itself (spec ttl_s, renew). */
        DM_CAP_TTL = 1 << 7,
};

/* Who a container's root is on the engine's host. */
enum dm_userns_kind {
        DM_USERNS_HOST_ROOT,     /* no user namespace: the container's root is the host's */
        DM_USERNS_ROOTLESS,      /* a rootless engine: root is the engine's own user */
        DM_USERNS_DAEMON,        /* one daemon-wide map (dockerd --userns-remap): uid, gid */
        DM_USERNS_PER_CONTAINER, /* a range of its own per container (rootful Podman,
                                           userns=auto): container_root tells it after create */
};
struct dm_userns {
        enum dm_userns_kind kind;
        unsigned uid, gid; /* DM_USERNS_DAEMON: the host ids of the container's root */
        const char *mode;  /* what to put in the spec's userns_mode, or NULL */
        char detail[256];  /* one line for people: how the engine was judged */
};

/* An address where a server serves a port of a container to others. */
struct dm_endpoint {
        char *url;      /* "http(s)://host[:port][/path]", no trailing slash */
        char **headers; /* "Name: value" lines every request to it must carry; NULL-terminated */
};
/* Frees what e holds (its header values wiped); e itself is the caller's. */
void dm_endpoint_release(struct dm_endpoint *e);

struct dm_backend_ops {
        const char *name; /* "docker" (also serves Podman), "opensandbox" */
        unsigned caps;    /* DM_CAP_* */

        int (*ping)(struct dm_backend *b, struct dm_error *err);
        /* A one-line human description: "podman 4.3.1 (API 1.41) at unix:///run/podman/podman.sock". */
        int (*describe)(struct dm_backend *b, char **ret_desc, struct dm_error *err);
        int (*image_exists)(struct dm_backend *b, const char *image, bool *ret_exists, struct dm_error *err);

        int (*create)(struct dm_backend *b, const struct dm_container_spec *spec, char **ret_id, struct dm_error *err);
        /* Opens the output stream of a created, not yet started container
         * (stdout + stderr, and stdin when the spec asked for it). Call it
         * before start: nothing the command prints is lost, however fast. */
        int (*attach)(struct dm_backend *b, const char *id, struct dm_stream **ret_stream, struct dm_error *err);
        int (*start)(struct dm_backend *b, const char *id, struct dm_error *err);
        /* Waits for the container to exit and returns its exit code (128+N for signal N).
         * Fast right after the attached stream's EOF (a few ms); no time limit. */
        int (*wait)(struct dm_backend *b, const char *id, int *ret_exit_code, struct dm_error *err);
        /* Sends signo to PID 1. A container that is not running is not an
         * error (0): it has already stopped. */
        int (*kill)(struct dm_backend *b, const char *id, int signo, struct dm_error *err);
        /* Force-removes the container and its anonymous volumes. Gone already = 0. */
        int (*destroy)(struct dm_backend *b, const char *id, struct dm_error *err);
        int (*inspect)(struct dm_backend *b, const char *id, struct dm_container_info *ret_info, struct dm_error *err);
        /* Ids of all containers (running or not) carrying label "key=value". */
        int (*list)(struct dm_backend *b, const char *label, char ***ret_ids, size_t *ret_n, struct dm_error *err);

        /* Runs a command in a running container through the engine's exec API. */
        int (*exec)(struct dm_backend *b, const char *id, const struct dm_exec_spec *spec,
                    struct dm_stream **ret_stream, char **ret_exec_id, struct dm_error *err);
        /* Waits (polling) until the exec has finished, then returns its exit
         * code; meant for after the exec stream's EOF. */
        int (*exec_exit_code)(struct dm_backend *b, const char *exec_id, int *ret_exit_code, struct dm_error *err);

        /* The pid (in the engine host's PID namespace) of a running exec's
         * process, which leads its own process group: how a timeout or a
         * cancel ends an exec and everything it started (the exec API has no
         * kill). 0 when it has ended. Right after exec it waits (up to 10 s)
         * until the engine knows the pid: dockerd reports 0 for ~0.1 s. */
        int (*exec_pid)(struct dm_backend *b, const char *exec_id, int *ret_pid, struct dm_error *err);

        /* Unpacks the tar stream in tar_fd (tar_len bytes) into dir, an
         * existing absolute directory inside the container. */
        int (*put_archive)(struct dm_backend *b, const char *id, const char *dir, int tar_fd, int64_t tar_len,
                           struct dm_error *err);
        /* Writes the engine's tar stream of path inside the container to
         * out_fd: -EFBIG past max bytes, -ENOENT when path does not exist. */
        int (*get_archive)(struct dm_backend *b, const char *id, const char *path, int out_fd, int64_t max,
                           struct dm_error *err);

        /* Optional (NULL when absent). */
        /* Stops a running exec and everything it started (backends without
         * DM_CAP_EXEC_PID). Finished already = 0. */
        int (*exec_interrupt)(struct dm_backend *b, const char *exec_id, struct dm_error *err);
        /* One regular file, without a tar around it: written at path (its
         * directory must exist) with mode, or read into out_fd (-EFBIG past
         * max, -ENOENT when missing, -EISDIR when not a regular file). */
        int (*put_file)(struct dm_backend *b, const char *id, const char *path, int in_fd, int64_t len, unsigned mode,
                        struct dm_error *err);
        int (*get_file)(struct dm_backend *b, const char *id, const char *path, int out_fd, int64_t max,
                        struct dm_error *err);
        /* Pushes the container's expiry (DM_CAP_TTL) to expires_unix. */
        int (*renew)(struct dm_backend *b, const char *id, int64_t expires_unix, struct dm_error *err);
        /* How the engine maps container ids to host ids (asked once, then
         * remembered). A backend without it runs containers elsewhere. */
        int (*userns)(struct dm_backend *b, struct dm_userns *ret, struct dm_error *err);
        /* The host uid and gid of a created container's root. */
        int (*container_root)(struct dm_backend *b, const char *id, unsigned *ret_uid, unsigned *ret_gid,
                              struct dm_error *err);
        /* Freezes every process of a running container (the engine's
         * pause: the cgroup freezer) and thaws them. Paused already, or
         * running already, is not an error. -EOPNOTSUPP when the engine
         * cannot (rootless Podman on cgroup v1), the sentence says why. */
        int (*pause)(struct dm_backend *b, const char *id, struct dm_error *err);
        int (*unpause)(struct dm_backend *b, const char *id, struct dm_error *err);
        /* The container's root file system (not its mounts) as a new image,
         * the container paused while the engine copies it; where the engine
         * cannot pause (rootless Podman, cgroup v1), copied as it runs. */
        int (*commit)(struct dm_backend *b, const char *id, const struct dm_commit_spec *spec, char **ret_image_id,
                      struct dm_error *err);
        /* One image by reference or id; its size and labels. -ENOENT when
         * the engine has none. */
        int (*image_inspect)(struct dm_backend *b, const char *ref, struct dm_image_entry *ret, struct dm_error *err);
        /* Removes an image, never by force (Podman's force would remove the
         * containers made from it): -EBUSY while a container uses it. Gone
         * already = 0. */
        int (*image_remove)(struct dm_backend *b, const char *ref, struct dm_error *err);
        /* The images carrying label "key" or "key=value". */
        int (*image_list)(struct dm_backend *b, const char *label, struct dm_image_entry **ret, size_t *ret_n,
                          struct dm_error *err);

        /* Where the server serves port of container id to its clients
         * (OpenSandbox's endpoint API), for a preview's relay to it
         * (src/tools/expose-endpoint.c). NULL on a backend with
         * DM_CAP_HOST_NETNS: its previews are made in the namespace. */
        int (*endpoint)(struct dm_backend *b, const char *id, int port, struct dm_endpoint *ret, struct dm_error *err);

        void (*free)(struct dm_backend *b);
};

struct dm_backend {
        const struct dm_backend_ops *ops;
};

/* True when b offers every capability in caps. */
static inline bool dm_backend_can(const struct dm_backend *b, unsigned caps)
{
        return (b->ops->caps & caps) == caps;
}

/* Streams (hijacked connections), shared by every backend that multiplexes
 * with the Docker 8-byte frame header. */

/* Reads and demultiplexes until the peer closes: 0 at EOF. -ETIMEDOUT when
 * the monotonic deadline_ms passes (0 = none), -ECANCELED when cancel_fd
 * (-1 = none) becomes readable, -EPROTO on a malformed frame (also when the
 * peer closes inside a frame), -EIO on socket errors, or the sink's own
 * negative return. After -ETIMEDOUT or -ECANCELED it may be called again
 * (e.g. after kill, to drain the rest); after EOF it returns 0 at once. */
int dm_stream_pump(struct dm_stream *s, const struct dm_stream_sink *sink, int cancel_fd, int64_t deadline_ms,
                   struct dm_error *err);
/* Blocking write of stdin bytes (no SIGPIPE: -EPIPE when the peer is gone). */
int dm_stream_write(struct dm_stream *s, const void *data, size_t len, struct dm_error *err);
/* Half-closes the sending side so the command sees EOF on stdin. 0 or -errno. */
int dm_stream_close_write(struct dm_stream *s);
void dm_stream_free(struct dm_stream *s);

/* The frame demultiplexer on its own, for tests and fuzzing. */
struct dm_demux {
        unsigned char hdr[8];
        size_t hdr_len;
        uint32_t remaining; /* payload bytes left in the current frame */
        int stream;
};
void dm_demux_init(struct dm_demux *d);
/* Feeds raw bytes; calls sink for each payload piece. 0, -EPROTO (stream
 * byte not 0..2 or non-zero padding), or the sink's negative return. */
int dm_demux_feed(struct dm_demux *d, const char *data, size_t len, const struct dm_stream_sink *sink,
                  struct dm_error *err);

/* Engine discovery and the embedded default. */
/* The environment the engine layer follows, as the docker CLI, Podman and
 * OpenSandbox name it (and the pool demesne's OpenSandbox creates name).
 * src/core/settings.c reads it once
 * (dm_engine_env_read) and passes it down: nothing below src/core reads the
 * environment. NULL or "" is unset. */
struct dm_engine_env {
        char *docker_host;          /* DOCKER_HOST */
        char *container_host;       /* CONTAINER_HOST (Podman's name for it) */
        char *xdg_runtime_dir;      /* XDG_RUNTIME_DIR: where a rootless Podman listens */
        char *path;                 /* PATH: where podman is looked for */
        char *tmpdir;               /* TMPDIR: a private service's directory when there is no state_dir */
        char *docker_tls_verify;    /* DOCKER_TLS_VERIFY: non-empty = TLS to a tcp:// engine */
        char *docker_cert_path;     /* DOCKER_CERT_PATH: ca.pem, cert.pem, key.pem; else $HOME/.docker */
        char *home;                 /* HOME */
        char *osb_domain;           /* OPEN_SANDBOX_DOMAIN */
        char *osb_protocol;         /* OPEN_SANDBOX_PROTOCOL */
        char *osb_api_key;          /* OPEN_SANDBOX_API_KEY */
        char *osb_use_server_proxy; /* OPEN_SANDBOX_USE_SERVER_PROXY */
        char *osb_pool_ref;         /* DEMESNE_OPENSANDBOX_POOL_REF: creates name this pool of the server's */
};

struct dm_engine_config {
        const struct dm_engine_env *env; /* what the environment says; NULL = nothing set */
        const char *host;                /* "unix:///path" or "tcp://h:p"; NULL or "" = discover */
        bool may_start_podman;           /* start `podman system service` when none answers */
        const char *state_dir;           /* where a started service's socket lives (server-owned);
                                           NULL = a fresh directory under $TMPDIR, removed after */
        int64_t response_max;            /* cap on one engine JSON response, bytes; 0 = 16 MiB */
        bool private_only;               /* skip host, DOCKER_HOST, CONTAINER_HOST and the
                                           well-known sockets: always start the private service
                                           (needs may_start_podman). For tests, and for users who
                                           want their own engine left alone. */
        const char *backend;             /* the server's DEMESNE_BACKEND: "docker", "opensandbox"; NULL or "" = by
                                  OPEN_SANDBOX_DOMAIN, else docker */
        const char *opensandbox_egress;  /* the server's DEMESNE_OPENSANDBOX_EGRESS (dm_opensandbox_backend_new) */
};

/* cfg->backend "opensandbox", or OPEN_SANDBOX_DOMAIN set while
 * cfg->backend is NULL or empty, selects the OpenSandbox backend (no
 * discovery); "docker" the engine below; anything else is -EINVAL.
 * Order: cfg->host, DOCKER_HOST, CONTAINER_HOST, /run/podman/podman.sock,
 * $XDG_RUNTIME_DIR/podman/podman.sock, /var/run/docker.sock; then, when
 * allowed and podman is on PATH, a private `podman system service` whose
 * socket is under state_dir, stopped by dm_backend_free().
 * The first of cfg->host / DOCKER_HOST / CONTAINER_HOST that is set (non-empty)
 * is the user's choice and the only one tried (as with the docker CLI): it
 * must answer _ping within 5 s or the open fails with -EHOSTDOWN. A
 * well-known socket that exists but does not answer within 1 s is skipped.
 * The private service runs as `podman system service --time=0
 * unix://<state_dir>/podman-<pid>.sock` in its own process group (log next to
 * the socket), gets SIGTERM if the server dies, and is stopped (SIGTERM, 5 s,
 * SIGKILL) with its socket and log removed by dm_backend_free(). Start-up
 * waits at most 15 s for _ping. When nothing is found: -EHOSTDOWN naming every
 * place tried. The caller must not reap children it did not start
 * (waitpid(-1, ...)): a thread waits for the service. */
int dm_backend_open(const struct dm_engine_config *cfg, struct dm_backend **ret, struct dm_error *err);
/* Whether dm_backend_open would open the OpenSandbox backend: DEMESNE_BACKEND
 * (which) says "opensandbox", or is unset and OPEN_SANDBOX_DOMAIN is set. */
bool dm_backend_is_opensandbox(const char *which, const struct dm_engine_env *env);
/* NULL is fine. Stops a private service the backend started. */
void dm_backend_free(struct dm_backend *b);

/* The OpenSandbox backend (backends/opensandbox.c), configured from the
 * environment (env, NULL = nothing set) as the original tool was: OPEN_SANDBOX_DOMAIN (host[:port],
 * the lifecycle server; its API is below /v1), OPEN_SANDBOX_PROTOCOL (http,
 * the default, or https), OPEN_SANDBOX_API_KEY (sent to the lifecycle
 * server only, never to execd); egress is how its egress sidecar enforces a
 * policy (the server's DEMESNE_OPENSANDBOX_EGRESS: none, dns, the default
 * for NULL, or dns+nft). -EINVAL with a sentence on a bad value. */
int dm_opensandbox_backend_new(int64_t response_max, const char *egress, const struct dm_engine_env *env,
                               struct dm_backend **ret, struct dm_error *err);

/* The docker backend on an explicit host, no discovery; env (NULL = nothing
 * set) gives the TLS settings of a tcp:// host (dm_curl_new). */
int dm_docker_backend_new(const char *host, int64_t response_max, const struct dm_engine_env *env,
                          struct dm_backend **ret, struct dm_error *err);

#endif
