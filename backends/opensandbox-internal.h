/* SPDX-License-Identifier: MIT */
#ifndef DM_BACKENDS_OPENSANDBOX_INTERNAL_H
#define DM_BACKENDS_OPENSANDBOX_INTERNAL_H

/* Shared by opensandbox.c (the lifecycle API) and opensandbox-exec.c
 * (execd: commands and files). Never included outside backends/. */

#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>

#include "backends/curl.h"
#include "backends/json.h"
#include "src/basic/cleanup.h"

#define EXECD_PORT 44772
#define CALL_TIMEOUT_MS 60000L
#define RUNNING_WAIT_MS 180000
#define EXECD_WAIT_MS 60000
#define EVENT_MAX (4u << 20) /* one stream event; execd sends output in small pieces */
#define ERRBODY_MAX 65536
#define LIST_PAGE 100

struct execd;
struct osb_exec;

/* What the server's egress sidecar is, as DEMESNE_OPENSANDBOX_EGRESS says
 * (the server's API does not tell): none, mode "dns" (the server's default
 * mode, and demesne's default) or mode "dns+nft". */
enum osb_egress {
        OSB_EGRESS_DNS,
        OSB_EGRESS_OFF,
        OSB_EGRESS_DNS_NFT,
};

struct osb {
        struct dm_backend base;
        struct dm_curl *api; /* lifecycle, with the API key */
        char *protocol;      /* "http" or "https", also for execd */
        bool server_proxy;   /* reach execd through the server (OPEN_SANDBOX_USE_SERVER_PROXY) */
        size_t response_max;
        enum osb_egress egress;
        char *pool_ref; /* DEMESNE_OPENSANDBOX_POOL_REF: sent as extensions.poolRef (NULL: none) */
        /* The server's max_sandbox_timeout_seconds, once a create was
         * refused for asking more (0: not known yet): later creates ask for
         * it straight away. */
        _Atomic long long max_ttl_s;

        pthread_mutex_t lock; /* guards execds and execs */
        struct execd *execds;
        struct execd *retired; /* forgotten, freed with the backend */
        struct osb_exec *execs;
        struct osb_name *names; /* demesne's names of the sandboxes, as learned */
};

/* OpenSandbox's id of a sandbox and the name demesne gave it ("sbx-…"). */
struct osb_name {
        struct osb_name *next;
        char id[64];
        char name[64];
};

/* The execd of one sandbox, found through its endpoint. */
struct execd {
        struct execd *next;
        char *sandbox;
        struct dm_curl *http;
};

struct osb_exec {
        struct osb_exec *next;
        struct osb *o;
        char *sandbox;
        struct dm_curl *execd; /* borrowed from the execd list, which outlives it */
        char *body;            /* the /command request */
        int fd;                /* our end of the socketpair; -1 once closed */
        pthread_t thread;

        pthread_mutex_t lock;
        pthread_cond_t cond;
        char id[128]; /* from init */
        bool started; /* init seen, or the request failed */
        bool done;
        int64_t done_ms; /* monotonic, when done */
        bool final;      /* execution_complete or error seen */
        int exit_code;
        int err_code; /* when the request failed */
        char err_msg[512];
        atomic_bool abandoned;   /* the reader let go of the stream */
        atomic_bool interrupted; /* demesne asked execd to stop it */

        long status;
        struct dm_buf event;   /* the event being read */
        struct dm_buf errbody; /* a non-200 answer's body */
};

static inline struct osb *to_osb(struct dm_backend *b)
{
        return (struct osb *)b;
}

static inline void dm_osb_json_putp(struct json_object **o)
{
        json_object_put(*o);
}
#define _cleanup_json_ _cleanup_(dm_osb_json_putp)

static inline void dm_osb_buf_releasep(struct dm_buf *b)
{
        dm_buf_release(b);
}
#define _cleanup_buf_ _cleanup_(dm_osb_buf_releasep)

static inline struct json_object *get(struct json_object *o, const char *key)
{
        struct json_object *v = NULL;

        return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* Borrowed; NULL when missing or not a string. */
static inline const char *get_str(struct json_object *o, const char *key)
{
        struct json_object *v = get(o, key);

        return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* Fills err from OpenSandbox's {"code","message"} error body; returns the
 * errno the status maps to (400 -EINVAL, 401/403 -EACCES, 404 -ENOENT, 409
 * -EBUSY, 501 -EOPNOTSUPP, others -EIO). */
int dm_osb_status_error(struct dm_error *err, long status, const struct dm_buf *body);
/* One lifecycle call expecting ok_status; *ret (may be NULL) gets the body. */
int dm_osb_api(struct osb *o, const char *method, const char *path, struct json_object *body, long ok_status,
               struct json_object **ret, struct dm_error *err);
/* Remembers that sandbox id is demesne's name (at create, and from the
 * demesne.sandbox metadata at inspect). */
void dm_osb_name_learn(struct osb *o, const char *id, const char *name);
/* For messages: "sbx-… (OpenSandbox <id>)" when the name is
 * known, else id. A per-thread buffer, good until the next call. */
const char *dm_osb_name(struct osb *o, const char *id);
/* -EINVAL unless id is safe inside a URL path. */
int dm_osb_check_id(const char *id, struct dm_error *err);

/* POST /sandboxes' body for spec (opensandbox-create.c); pool_ref: a pool
 * of the server's to create from (NULL: none). */
int dm_osb_create_body(enum osb_egress egress, const char *pool_ref, const struct dm_container_spec *spec,
                       struct json_object **ret, struct dm_error *err);
/* backends/opensandbox-pause.c: the lifecycle API's pause and resume,
 * waiting until the state is Paused or Running again. */
int dm_osb_pause(struct dm_backend *b, const char *id, struct dm_error *err);
int dm_osb_resume(struct dm_backend *b, const char *id, struct dm_error *err);
/* backends/opensandbox-endpoint.c: the endpoint of port of sandbox id
 * (through the server's proxy when server_proxy), and the endpoint op. */
int dm_osb_endpoint_lookup(struct osb *o, const char *id, int port, bool server_proxy, struct dm_endpoint *ret,
                           struct dm_error *err);
int dm_osb_endpoint(struct dm_backend *b, const char *id, int port, struct dm_endpoint *ret, struct dm_error *err);
/* The execd client of sandbox id (endpoint looked up once, then kept until
 * the sandbox is deleted or the backend freed). */
int dm_osb_execd(struct osb *o, const char *id, struct dm_curl **ret, struct dm_error *err);
void dm_osb_execd_free(struct execd *e);

/* opensandbox-exec.c */
int dm_osb_exec(struct dm_backend *b, const char *id, const struct dm_exec_spec *spec, struct dm_stream **ret_stream,
                char **ret_exec_id, struct dm_error *err);
int dm_osb_exec_exit_code(struct dm_backend *b, const char *exec_id, int *ret_exit_code, struct dm_error *err);
int dm_osb_exec_interrupt(struct dm_backend *b, const char *exec_id, struct dm_error *err);
/* libcurl's write callback for execd's /command answer (server-sent events
 * from inside the sandbox: untrusted): userdata is the osb_exec, whose
 * event buffer is capped; stdout and stderr go to x->fd as Docker frames.
 * Returns n * size, or 0 to stop the transfer (x->err_code and err_msg
 * say why, or x->abandoned). Used by tests/fuzz/fuzz-engine.c. */
size_t dm_osb_exec_on_body(char *data, size_t size, size_t n, void *userdata);
/* Interrupts every command this backend runs in sandbox id. */
int dm_osb_kill(struct dm_backend *b, const char *id, int signo, struct dm_error *err);
int dm_osb_put_file(struct dm_backend *b, const char *id, const char *path, int in_fd, int64_t len, unsigned mode,
                    struct dm_error *err);
int dm_osb_get_file(struct dm_backend *b, const char *id, const char *path, int out_fd, int64_t max,
                    struct dm_error *err);
/* Waits for every exec thread and frees the records (at backend free). */
void dm_osb_execs_release(struct osb *o);

#endif
