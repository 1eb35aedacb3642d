/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_VENDOR_H
#define DM_NETPOLICY_VENDOR_H

/* The vendor proxy: a reverse proxy, on the host side of a sandbox's network,
 * that an agent CLI inside the sandbox (Claude Code, Codex) uses as its API
 * base URL. The agent holds a per-run random token, never a key: the proxy
 * accepts only requests carrying that token, forwards only model endpoints,
 * puts the host's real credential on the upstream request, streams the
 * response back as it arrives and counts the tokens the responses report
 * (into the ledger's live file, and usage.json for the user). See
 * docs/reference/vendor-proxy.md.
 *
 * Threads: one accept thread, one thread per connection (capped); a
 * connection may carry several keep-alive requests. dm_vendor_stop wakes and
 * joins every thread and closes every fd before it returns. Every fd is
 * close-on-exec. Credentials live in memory only and are wiped when freed. */

#include <json-c/json.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "netpolicy/egress-tally.h"
#include "src/basic/error.h"

enum dm_vendor {
        DM_VENDOR_ANTHROPIC,
        DM_VENDOR_OPENAI,
};

/* How the credential goes upstream. */
enum dm_vendor_auth {
        DM_VENDOR_AUTH_NONE = 0,
        DM_VENDOR_AUTH_API_KEY, /* Anthropic: x-api-key; OpenAI: Authorization: Bearer */
        DM_VENDOR_AUTH_OAUTH,   /* Anthropic: Authorization: Bearer + anthropic-beta: oauth-2025-04-20 */
        DM_VENDOR_AUTH_CHATGPT, /* OpenAI via a ChatGPT login: Bearer + chatgpt-account-id */
};

struct dm_vendor_cred {
        enum dm_vendor_auth auth;
        char *secret;     /* owned; key or access token */
        char *account_id; /* owned; DM_VENDOR_AUTH_CHATGPT only */
        char source[128]; /* where it came from, for logs: "ANTHROPIC_API_KEY", "~/.codex/auth.json"... */
};

/* The host's environment the credential lookup reads, as the server's
 * settings (src/core/settings.c) read it once at start: netpolicy calls no
 * getenv. The strings are owned copies (NULL: unset or empty); they are
 * secrets, never logged, and dm_vendor_env_release wipes them. */
struct dm_vendor_env {
        char *anthropic_api_key;  /* ANTHROPIC_API_KEY */
        char *claude_oauth_token; /* CLAUDE_CODE_OAUTH_TOKEN */
        char *openai_api_key;     /* OPENAI_API_KEY */
        char *home;               /* HOME: where the default login files are; NULL: none */
};
/* Wipes (explicit_bzero) and frees the strings. NULL is fine. */
void dm_vendor_env_release(struct dm_vendor_env *e);

/* Loads the host's credential for provider from env (NULL: an empty one),
 * in this order:
 *   Anthropic: ANTHROPIC_API_KEY, CLAUDE_CODE_OAUTH_TOKEN, the Claude login
 *     file (login_file, the server's DEMESNE_CLAUDE_CREDENTIALS; NULL:
 *     ~/.claude/.credentials.json), its claudeAiOauth.accessToken.
 *   OpenAI: OPENAI_API_KEY, the Codex login file (login_file, the server's
 *     DEMESNE_CODEX_AUTH; NULL: ~/.codex/auth.json): OPENAI_API_KEY, else
 *     tokens.access_token and tokens.account_id.
 * Empty values count as absent. -ENOENT with dm_vendor_unavailable's sentence
 * when there is none, -EINVAL when a login file is there but malformed,
 * -ENOMEM. *ret is written only on success; release it with
 * dm_vendor_cred_release. Login files larger than 1 MiB are refused. */
int dm_vendor_cred_load(enum dm_vendor provider, const struct dm_vendor_env *env, const char *login_file,
                        struct dm_vendor_cred *ret, struct dm_error *err);
/* Wipes (explicit_bzero) and frees the strings. NULL is fine. */
void dm_vendor_cred_release(struct dm_vendor_cred *c);
/* Deep copy; 0 or -ENOMEM. */
int dm_vendor_cred_copy(struct dm_vendor_cred *dst, const struct dm_vendor_cred *src);
/* NULL when dm_vendor_cred_load would find a credential, else a static
 * sentence saying what is missing ("no ANTHROPIC_API_KEY, ..."), for tool
 * descriptions. Reads env (as dm_vendor_cred_load) and the file system. */
const char *dm_vendor_unavailable(enum dm_vendor provider, const struct dm_vendor_env *env, const char *login_file);
/* "anthropic" or "openai". */
const char *dm_vendor_name(enum dm_vendor provider);

/* 32 bytes from getrandom() as 64 lowercase hex digits and a NUL.
 * 0 or -errno. */
int dm_vendor_token_new(char out[65]);

/* The price table: given (the server's DEMESNE_PRICES) when not NULL, else
 * prices.json in pkgdatadir, else data/prices.json in the source tree
 * (uninstalled runs and tests). */
const char *dm_vendor_prices_path(const char *given);

struct dm_vendor_conf {
        enum dm_vendor provider;
        struct sockaddr_in bind;    /* port 0: the kernel picks */
        int listen_fd;              /* > 0: a listening socket to serve instead of binding (dup'ed); 0: bind */
        const char *upstream;       /* base URL without trailing slash; NULL: the provider's (and the
                                       * ChatGPT backend for DM_VENDOR_AUTH_CHATGPT). http:// is for tests. */
        const char *token;          /* the per-run token the agent presents; required; copied */
        struct dm_vendor_cred cred; /* copied; the caller still owns and releases its own */
        const char *usage_path;     /* usage.json, rewritten (tmp + rename) after each response; NULL: none.
                                       * It is in the agent's /out: output for the user, never read back */
        const char *live_path;      /* the same figures, where only demesne writes (the run ledger's
                                       * <run_id>.live), which accounting reads; NULL: none */
        const char *log_path;       /* one line per request decision, O_APPEND; NULL: none */
        const char *prices_path;    /* NULL: dm_vendor_prices_path(NULL); a missing default file only warns */
        unsigned max_conns;         /* open connections at once; more → 503; 0: 32 */
        size_t max_body;            /* request body cap; larger → 413; 0: 32 MiB */
        /* The run's spending cap in USD (0: none), counting requests in
         * flight: a request goes upstream only while the spend so far plus
         * (requests in flight + 1) x the costliest response so far stays
         * under it; before the first priced response, one at a time. A
         * request that may not go yet waits for those in flight; when none
         * is in flight (or the priced usage reaches the cap) the cap is
         * reached: every further request is refused (402 billing_error
         * naming the cap and cap_name) and on_cap is called once, from a
         * proxy thread. Only a response costlier than every one before it
         * can pass the cap. */
        double max_usd;
        const char *cap_name; /* the setting the cap comes from, for messages; NULL: DEMESNE_AGENT_MAX_USD */
        double estimate_usd;  /* what one request is expected to cost before any is priced (0: unknown) */
        void (*on_cap)(void *userdata);
        void *cap_userdata;
        /* The run's egress is open: the vendor may reach the network on the
         * agent's behalf (server-side tools, MCP connectors, URL sources), and
         * requests go upstream as sent. false (the default): below open, each
         * model request is read and such members are refused or stripped
         * (netpolicy/vendor-filter.c, docs/explanation/egress.md). */
        bool vendor_network;
        /* Where each request's decision is counted for the run's journal
         * (netpolicy/egress-tally.h), or NULL; borrowed: it must outlive
         * the proxy's free. */
        struct dm_egress_tally *tally;
};

struct dm_vendor_proxy;

/* Loads the prices, binds, and starts the accept thread. Errors with a
 * message: -EINVAL (no token, no credential, bad upstream URL, malformed
 * prices file), bind failures (-EADDRINUSE...), -ENOMEM. */
int dm_vendor_start(const struct dm_vendor_conf *conf, struct dm_vendor_proxy **ret, struct dm_error *err);
/* The address the listener is bound to (with the port the kernel chose). */
void dm_vendor_address(const struct dm_vendor_proxy *p, struct sockaddr_in *ret);

struct dm_vendor_tokens {
        uint64_t input; /* uncached input tokens */
        uint64_t output;
        uint64_t cache_read;
        uint64_t cache_write;
        uint64_t requests; /* responses that reported usage */
        double cost_usd;
};

struct dm_vendor_model_usage {
        char *model; /* owned */
        struct dm_vendor_tokens tokens;
        bool priced; /* false: no price table entry matched; cost 0 */
};

struct dm_vendor_usage {
        struct dm_vendor_tokens total;
        struct dm_vendor_model_usage *models; /* owned, n_models entries, in first-seen order */
        size_t n_models;
};

/* A snapshot of the counts so far. 0 or -ENOMEM; release with
 * dm_vendor_usage_release. */
int dm_vendor_usage(struct dm_vendor_proxy *p, struct dm_vendor_usage *ret);
/* The usage.json document (see docs/reference/vendor-proxy.md). NULL on ENOMEM. */
json_object *dm_vendor_usage_json(const struct dm_vendor_usage *u);
void dm_vendor_usage_release(struct dm_vendor_usage *u);

/* Whether the spending cap was reached; *ret_spent (may be NULL) is the
 * cost so far. */
bool dm_vendor_cap_reached(struct dm_vendor_proxy *p, double *ret_spent);

/* Stops accepting, aborts requests in flight (client and upstream sockets
 * shut down), joins every thread, writes usage.json a last time, wipes the
 * credential and frees. NULL is fine. */
void dm_vendor_stop(struct dm_vendor_proxy *p);

#endif
