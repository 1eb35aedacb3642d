/* SPDX-License-Identifier: MIT */
#ifndef DM_SETTINGS_H
#define DM_SETTINGS_H

/* Server settings, read once from the environment at start. Every limit a
 * caller can push against has a default here and a variable to change it. */

#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "netpolicy/blocked.h"
#include "netpolicy/vendor.h"
#include "src/basic/error.h"

struct dm_config {
        char *output_root;            /* DEMESNE_OUTPUT_ROOT, default ~/.demesne/out */
        char *state_dir;              /* DEMESNE_STATE_DIR, default $XDG_RUNTIME_DIR/demesne or ~/.demesne/run */
        char *allowed_paths;          /* DEMESNE_ALLOWED_PATHS, colon-separated, default empty */
        char *allow_credential_paths; /* DEMESNE_ALLOW_CREDENTIAL_PATHS, colon-separated, default empty */
        char *home;                   /* $HOME (else the passwd entry): where the credential folders are */
        char *engine_host;            /* DEMESNE_ENGINE_HOST (else DOCKER_HOST, ... by discovery) */
        bool may_start_podman;        /* DEMESNE_START_PODMAN=0 disables the embedded default */
        bool allow_host_root;         /* DEMESNE_ALLOW_HOST_ROOT=1: run sandboxes on an engine whose
                                     containers' root is the host's root (no user namespace) */
        int64_t memory_bytes;         /* DEMESNE_MEMORY, default 2g */
        int64_t pids_limit;           /* DEMESNE_PIDS_LIMIT, default 512 */
        int64_t nofile;               /* DEMESNE_NOFILE, default 4096 */
        int64_t nproc;                /* DEMESNE_NPROC, default 4096 */
        int64_t pool_size;            /* DEMESNE_POOL, warm containers of the default image kept by
                                         `demesne serve`, default 2; 0 = no pool */
        int64_t nano_cpus;            /* DEMESNE_CPUS (e.g. 1.5) in 1e-9 CPUs, default 1 CPU; 0 = no limit */
        int64_t disk_max;             /* DEMESNE_DISK_MAX, bytes one run or sandbox may write, default 2g; 0 = none */
        double agent_max_usd;         /* DEMESNE_AGENT_MAX_USD, spending cap of one agent run, default 10; 0 = none */
        double tree_max_usd;          /* DEMESNE_TREE_MAX_USD, what the agent runs of one tree of nested sandboxes
                                         may spend together, default 50; 0 = none */
        int64_t max_message;          /* DEMESNE_MAX_MESSAGE, bytes of one JSON-RPC message, default 4 MiB */
        int64_t output_cap;           /* DEMESNE_OUTPUT_CAP, bytes of stdout/stderr in a result, default 64 KiB */
        int64_t engine_response_max;  /* cap on one engine answer, default 16 MiB */
        int64_t max_timeout_s;        /* 172800 */
        int64_t default_timeout_s;    /* 3600 */
        bool egress_in_netns;         /* DEMESNE_EGRESS_NETNS=1: as root too, listeners in the sandbox's
                                     namespace instead of a veth pair (what a normal user gets) */
        bool shim_off;                /* DEMESNE_SHIM=off: no demesne-shim, the engine's seccomp profile only */
        bool shim_warm_off;           /* DEMESNE_SHIM_WARM=off: no shim keeps a warm bash */
        char *shim_path;              /* DEMESNE_SHIM_PATH (or an absolute DEMESNE_SHIM); NULL = search */
        char *http_token;             /* DEMESNE_HTTP_TOKEN: serve --http's bearer token, NULL = none given */
        char *http_token_file;        /* DEMESNE_HTTP_TOKEN_FILE: ... read from this file (like --token-file) */
        uint32_t expose_addr;         /* DEMESNE_EXPOSE_ADDR, the IPv4 address sandbox_expose's previews listen on
                                         (network order), default 127.0.0.1 */
        char *sandbox_subnet;         /* DEMESNE_SANDBOX_SUBNET as given (checked where egress is set up,
                                         and by doctor); NULL = the default pool */
        bool images_autobuild;        /* DEMESNE_IMAGES_AUTOBUILD=0 turns off building a missing image */
        int64_t transfer_max;         /* DEMESNE_TRANSFER_MAX, largest file up or down, default 1g */
        int64_t sweep_s;              /* DEMESNE_SANDBOX_SWEEP_SECONDS, the expired-sandbox sweep, default 60 */
        int64_t task_after_ms;        /* DEMESNE_TASK_AFTER_MS: a task-supporting call still running after
                                         this long answers as a task (SEP-2663), default 1000; 0 = always */
        bool elicit_off;              /* DEMESNE_ELICIT=off: refusals are never asked of the client */
        int64_t elicit_timeout_ms;    /* DEMESNE_ELICIT_TIMEOUT_MS: how long a question waits, default 120000 */
        int64_t snapshot_ttl_s;       /* DEMESNE_SNAPSHOT_TTL, seconds a snapshot is kept, default 7 days */
        int64_t snapshot_max;         /* DEMESNE_SNAPSHOT_MAX, snapshots one principal may hold, default 16 */
        int64_t snapshot_disk_max;    /* DEMESNE_SNAPSHOT_DISK_MAX, bytes their sizes may sum to per principal,
                                         default 10 GiB, 0 = no cap */
        int64_t activity_days;        /* DEMESNE_ACTIVITY_DAYS: a run journal not written for this long is
                                         removed (src/core/activity.h), default 14; 0 = kept */
        char *skills_dir;             /* DEMESNE_SKILLS_DIR: the skills served over MCP; NULL = installed ones */
        char *ui_dir;                 /* DEMESNE_UI_DIR: the activity view's page files; NULL = installed ones */
        /* Nested sandboxes (src/tools/nested.c): */
        int64_t max_depth;    /* DEMESNE_MAX_DEPTH, levels of nested sandboxes, default 3 */
        int64_t max_children; /* DEMESNE_MAX_CHILDREN, live sandboxes and jobs a nested one may have, default 8 */
        int64_t max_tree;     /* DEMESNE_MAX_TREE, live sandboxes and jobs below a top nested one, default 32 */
        /* Read here like the rest; the parts below core get them as arguments. */
        bool allow_caller_egress; /* DEMESNE_ALLOW_CALLER_EGRESS=1: callers' allow entries and egress open */
        bool allowed_paths_given; /* DEMESNE_ALLOWED_PATHS is set, even empty (`demesne run` keeps to it) */
        bool output_root_given;   /* DEMESNE_OUTPUT_ROOT is set (not the default) */
        char *proxy_hosts;        /* DEMESNE_PROXY_HOSTS: a hosts file the egress proxy resolves with first */
        char *vendor_upstream[2]; /* DEMESNE_VENDOR_UPSTREAM_ANTHROPIC, _OPENAI: NULL = the vendor's own */
        char *backend;            /* DEMESNE_BACKEND: docker or opensandbox; NULL = by discovery */
        char *opensandbox_egress; /* DEMESNE_OPENSANDBOX_EGRESS: how OpenSandbox enforces egress */
        /* DEMESNE_REMOTE_LISTEN "ADDR:PORT": where remote sandboxes
         * (OpenSandbox) reach their nested endpoint; NULL: nowhere. TLS with
         * DEMESNE_REMOTE_TLS_CERT and _KEY (PEM files), required when ADDR
         * is not loopback. */
        char *remote_listen;
        char *remote_tls_cert;
        char *remote_tls_key;
        char *remote_tls_ca;      /* DEMESNE_REMOTE_TLS_CA: a PEM file the sandboxes get as DEMESNE_MCP_CA_CERT */
        char *claude_credentials; /* DEMESNE_CLAUDE_CREDENTIALS: NULL = ~/.claude/.credentials.json */
        char *codex_auth;         /* DEMESNE_CODEX_AUTH: NULL = ~/.codex/auth.json */
        char *prices;             /* DEMESNE_PRICES: the price table; NULL = the installed one */
        char *host_mcp;           /* DEMESNE_HOST_MCP: the host MCP servers whose read-only tools nested
                                     callers get (src/tools/hostmcp.c); NULL = none */
        struct dm_engine_env engine_env; /* DOCKER_HOST, OPEN_SANDBOX_* and the rest the engine layer follows */
        /* ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN, OPENAI_API_KEY, HOME: secrets, wiped on release,
         * never logged; for the credential lookup (netpolicy/vendor-cred.c). */
        struct dm_vendor_env vendor_env;
        /* DEMESNE_SANDBOX_SUBNET, DEMESNE_EGRESS_ALLOW_PRIVATE parsed: the server's start hands them to
         * dm_blocked_init, netpolicy's own state. */
        struct dm_blocked_settings blocked;
};

/* Copies what the engine layer follows of the environment into *ret
 * (backends/backend.h names the variables); -ENOMEM. Servers get it in
 * dm_config; tests that set a variable read it again after. */
int dm_engine_env_read(struct dm_engine_env *ret);
/* Frees the copies (and wipes them: OPEN_SANDBOX_API_KEY is a secret). NULL is fine. */
void dm_engine_env_release(struct dm_engine_env *env);

/* What every part of the process reads the same way, whether or not it has
 * a dm_config (the image names, build.sh's folder, the package hosts):
 * read from the environment once, on first use, here. */
struct dm_process_settings {
        const char *image_repo;           /* DEMESNE_IMAGE_REPO, default localhost/demesne */
        const char *images_dir;           /* DEMESNE_IMAGES_DIR: NULL = the installed build.sh's */
        const char *egress_package_hosts; /* DEMESNE_EGRESS_PACKAGE_HOSTS: more package hosts; NULL = none */
};
const struct dm_process_settings *dm_process_settings(void);

/* Fills cfg from the environment. Bad values are errors naming the variable. */
int dm_config_load(struct dm_config *cfg, struct dm_error *err);
void dm_config_release(struct dm_config *cfg);

/* Parses "123", "64k", "2m", "2g" (binary units). -EINVAL when malformed. */
int dm_parse_size(const char *s, int64_t *ret);

#endif
