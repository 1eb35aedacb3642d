/* SPDX-License-Identifier: MIT */
/* The OpenSandbox backend: the lifecycle API (create, wait until Running,
 * endpoints, renew, delete, list by metadata) and, for each sandbox, the
 * execd API behind its endpoint (ping, /command, interrupt, upload,
 * download), as published in OpenSandbox's sandbox-lifecycle.yml and
 * execd-api.yaml.
 *
 * What it cannot offer it says (caps): no demesne-shim (no host socket
 * reaches the sandbox), no attach to PID 1 (every command is an execd
 * /command), no stdin, no pids, no local image store, no host netns (egress
 * is OpenSandbox's sidecar), and the hardening is the server's business.
 *
 * /command answers with a stream of events, each a bare JSON object and a
 * blank line (execd also tolerates "data:" framing, so we do too): init
 * (text = the command id), stdout, stderr, ping, then execution_complete
 * (exit 0) or error (error.evalue = the exit code). A thread per exec reads
 * it through libcurl and writes stdout/stderr as Docker frames into a
 * socketpair, whose other end is the dm_stream the caller pumps: the same
 * sink, deadlines and cancel as the docker backend. When the caller lets
 * go of the stream before the final event (timeout, cancel), the thread
 * interrupts the command through execd.
 *
 * The API key goes to the lifecycle server only. execd gets the headers the
 * endpoint answer names (an access token, in secured mode), nothing else. */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "backends/opensandbox-internal.h"
#include "netpolicy/policy.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"
#include "src/basic/uri.h"

/* OpenSandbox's error body is {"code","message"}. */
int dm_osb_status_error(struct dm_error *err, long status, const struct dm_buf *body)
{
        _cleanup_json_ struct json_object *o = NULL;
        const char *code = NULL, *msg = NULL;
        int e;

        switch (status) {
        case 400: e = -EINVAL; break;
        case 401:
        case 403: e = -EACCES; break;
        case 404: e = -ENOENT; break;
        case 409: e = -EBUSY; break;
        case 501: e = -EOPNOTSUPP; break;
        default: e = -EIO; break;
        }
        if (body && body->len)
                o = json_tokener_parse(body->data);
        code = get_str(o, "code");
        msg = get_str(o, "message");
        if (msg)
                return dm_error_set(err, e, "OpenSandbox answered %ld %s: %.300s", status, code ? code : "", msg);
        return dm_error_set(err, e, "OpenSandbox answered %ld: %.200s", status,
                            body && body->len ? body->data : "(no message)");
}

static int parse_json(const struct dm_buf *b, struct json_object **ret, struct dm_error *err)
{
        struct json_object *o = b->len ? json_tokener_parse(b->data) : NULL;

        if (!o)
                return dm_error_set(err, -EPROTO, "OpenSandbox sent invalid JSON");
        *ret = o;
        return 0;
}

/* One lifecycle call; ok_status is the expected answer, anything else is
 * an error; *ret (may be NULL) gets the parsed body. */
int dm_osb_api(struct osb *o, const char *method, const char *path, struct json_object *body, long ok_status,
               struct json_object **ret, struct dm_error *err)
{
        _cleanup_buf_ struct dm_buf out = { 0 };
        long status = 0;
        int r;

        dm_buf_init(&out, o->response_max);
        r = dm_curl_request(o->api, method, path,
                            body ? json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN) : NULL, CALL_TIMEOUT_MS,
                            &status, &out, err);
        if (r < 0)
                return r;
        if (status != ok_status)
                return dm_osb_status_error(err, status, &out);
        return ret ? parse_json(&out, ret, err) : 0;
}

/* Sandbox ids go into URL paths: nothing that would change the path. */
int dm_osb_check_id(const char *id, struct dm_error *err)
{
        if (!id || !id[0] || strlen(id) > 128 ||
            strspn(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") != strlen(id))
                return dm_error_set(err, -EINVAL, "invalid sandbox id '%.64s'", id ? id : "(null)");
        return 0;
}

static int64_t parse_time(const char *s)
{
        struct tm tm = { 0 };

        if (!s || !strptime(s, "%Y-%m-%dT%H:%M:%S", &tm))
                return 0;
        return (int64_t)timegm(&tm);
}

/* ---- the lifecycle API ---------------------------------------------------------- */

static int osb_ping(struct dm_backend *b, struct dm_error *err)
{
        int r = dm_osb_api(to_osb(b), "GET", "/sandboxes?page=1&pageSize=1", NULL, 200, NULL, err);

        return r < 0 ? dm_error_wrap(err, "ping") : 0;
}

static int osb_describe(struct dm_backend *b, char **ret_desc, struct dm_error *err)
{
        int r = osb_ping(b, err);

        /* The lifecycle API publishes no version; say what we know. */
        if (r >= 0 && asprintf(ret_desc, "opensandbox (lifecycle API v1) at %s", dm_curl_host(to_osb(b)->api)) < 0)
                r = dm_error_set(err, -ENOMEM, "out of memory");
        return r;
}

static int osb_image_exists(struct dm_backend *b, const char *image, bool *ret_exists, struct dm_error *err)
{
        (void)b;
        (void)ret_exists;
        return dm_error_set(err, -EOPNOTSUPP,
                            "the opensandbox backend cannot look up image '%s': the server pulls it at create", image);
}

static int add_rule(struct json_object *rules, const char *target);

/* The networkPolicy for spec (OpenSandbox 4db3a99: {defaultAction, egress:
 * [{action, target}]}, target a name, "*.name", an IP or a CIDR, no port;
 * first match wins, defaultAction when none does). The server only hands it
 * to its egress sidecar, whose [egress] mode decides what holds: in "dns"
 * only name lookups are filtered and any address stays reachable, so no
 * policy holds there but "open"; in "dns+nft" nftables drop what is not
 * allowed (the sidecar lets the nameservers of its resolv.conf through).
 * *ret = NULL: no policy (the server's own network, "open"). */
static int egress_policy(enum osb_egress egress, const struct dm_container_spec *spec, struct json_object **ret,
                         struct dm_error *err)
{
        _cleanup_json_ struct json_object *np = NULL;
        struct json_object *rules;
        const struct dm_policy *p = spec->egress;
        const char *mode = spec->network_mode ? spec->network_mode : "none";
        char target[DM_POLICY_ENTRY_MAX + 8], addr[INET_ADDRSTRLEN];
        int r = 0;

        *ret = NULL;
        if (p)
                mode = p->mode == DM_EGRESS_OPEN               ? "open"
                       : p->mode == DM_EGRESS_PACKAGE_MANAGERS ? "package-managers"
                                                               : "none";
        if (strcmp(mode, "open") == 0)
                return 0; /* the server's default network: no sidecar */
        if (!p && strcmp(mode, "none") != 0)
                return dm_error_set(err, -EOPNOTSUPP, "the opensandbox backend has no network mode '%s'", mode);
        if (p && p->mode == DM_EGRESS_NONE && (p->n_names || p->n_cidrs))
                mode = "allow list";
        if (egress == OSB_EGRESS_OFF)
                return dm_error_set(err, -EOPNOTSUPP,
                                    "egress '%s' needs the OpenSandbox server's egress sidecar, and "
                                    "DEMESNE_OPENSANDBOX_EGRESS=none says it has none: set image = \"<the egress "
                                    "sidecar image>\" and mode = \"dns+nft\" in the [egress] section of the server's "
                                    "config.toml (with docker network_mode = \"bridge\"), then "
                                    "DEMESNE_OPENSANDBOX_EGRESS=dns+nft; or ask for egress 'open'",
                                    mode);
        if (egress == OSB_EGRESS_DNS)
                return dm_error_set(err, -EOPNOTSUPP,
                                    "egress '%s' cannot hold on an OpenSandbox server whose egress sidecar runs in "
                                    "mode \"dns\" (DEMESNE_OPENSANDBOX_EGRESS=dns, the default): that mode filters "
                                    "name lookups only and a command can still reach any IP address; set mode = "
                                    "\"dns+nft\" in the [egress] section of the server's config.toml and "
                                    "DEMESNE_OPENSANDBOX_EGRESS=dns+nft, or ask for egress 'open'",
                                    mode);
        np = json_object_new_object();
        rules = json_object_new_array();
        if (!np || !rules) {
                json_object_put(rules);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        r |= dm_json_add(np, "defaultAction", json_object_new_string("deny"));
        r |= dm_json_add(np, "egress", rules);
        for (size_t i = 0; p && i < p->n_names; i++) {
                if (p->names[i].port)
                        return dm_error_set(err, -EOPNOTSUPP,
                                            "egress allow entry '%s%s:%u': OpenSandbox's egress rules carry no port, "
                                            "so it would allow every port; give the host without ':%u'",
                                            p->names[i].wildcard ? "*." : "", p->names[i].host,
                                            (unsigned)p->names[i].port, (unsigned)p->names[i].port);
                snprintf(target, sizeof(target), "%s%s", p->names[i].wildcard ? "*." : "", p->names[i].host);
                r |= add_rule(rules, target);
        }
        for (size_t i = 0; p && i < p->n_cidrs; i++) {
                inet_ntop(AF_INET, &p->cidrs[i].net, addr, sizeof(addr));
                if (p->cidrs[i].port)
                        return dm_error_set(err, -EOPNOTSUPP,
                                            "egress allow entry '%s/%u:%u': OpenSandbox's egress rules carry no "
                                            "port, so it would allow every port; give the address without ':%u'",
                                            addr, (unsigned)p->cidrs[i].prefix, (unsigned)p->cidrs[i].port,
                                            (unsigned)p->cidrs[i].port);
                if (p->cidrs[i].prefix == 32)
                        snprintf(target, sizeof(target), "%s", addr);
                else
                        snprintf(target, sizeof(target), "%s/%u", addr, (unsigned)p->cidrs[i].prefix);
                r |= add_rule(rules, target);
        }
        /* The same hosts as the proxy's package-managers, from the caller
         * (the image's demesne.package-hosts label is not known here:
         * OpenSandbox pulls the image itself). */
        for (const char *const *h = p && p->mode == DM_EGRESS_PACKAGE_MANAGERS ? spec->egress_package_hosts : NULL;
             h && *h; h++) {
                /* "host:port" (DEMESNE_EGRESS_PACKAGE_HOSTS): the rule
                 * cannot say the port, so the host is reached on every
                 * port, as the how-to says. */
                snprintf(target, sizeof(target), "%.*s", (int)strcspn(*h, ":"), *h);
                r |= add_rule(rules, target);
        }
        /* demesne's own listener (a nested sandbox's endpoint): the address
         * alone, as a rule carries no port; an IPv6 one without brackets. */
        if (spec->egress_reach) {
                const char *a = spec->egress_reach + (spec->egress_reach[0] == '[');

                snprintf(target, sizeof(target), "%.*s", (int)strcspn(a, "]"), a);
                r |= add_rule(rules, target);
        }
        if (r)
                return dm_error_set(err, -ENOMEM, "out of memory");
        *ret = TAKE_PTR(np);
        return 0;
}

static int add_rule(struct json_object *rules, const char *target)
{
        struct json_object *rule = json_object_new_object();

        if (!rule || json_object_array_add(rules, rule) < 0) {
                json_object_put(rule);
                return -ENOMEM;
        }
        return dm_json_add(rule, "action", json_object_new_string("allow")) |
               dm_json_add(rule, "target", json_object_new_string(target));
}

static int create_body(enum osb_egress egress, const struct dm_container_spec *spec, struct json_object **ret,
                       struct dm_error *err)
{
        _cleanup_json_ struct json_object *o = json_object_new_object(), *np = NULL;
        struct json_object *img = json_object_new_object(), *limits = json_object_new_object(), *env = NULL,
                           *meta = NULL, *vols = json_object_new_array();
        char mem[32];
        int r = 0;

        if (!o || !img || !limits || !vols) {
                json_object_put(img);
                json_object_put(limits);
                json_object_put(vols);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        r |= dm_json_add(o, "image", img);
        r |= dm_json_add(img, "uri", json_object_new_string(spec->image));
        /* OpenSandbox needs an entrypoint; the command's own argv follows. */
        {
                size_t n = 0, k = 0;
                const char *const *ep = spec->entrypoint;
                const char **all;

                for (size_t i = 0; ep && ep[i]; i++)
                        n++;
                for (size_t i = 0; spec->argv && spec->argv[i]; i++)
                        n++;
                if (n == 0)
                        return dm_error_set(err, -EINVAL,
                                            "the opensandbox backend needs an entrypoint or argv: "
                                            "it cannot use the image's default command");
                all = calloc(n + 1, sizeof(*all));
                if (!all)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                for (size_t i = 0; ep && ep[i]; i++)
                        all[k++] = ep[i];
                for (size_t i = 0; spec->argv && spec->argv[i]; i++)
                        all[k++] = spec->argv[i];
                r |= dm_json_add(o, "entrypoint", dm_json_strv(all));
                free(all);
        }
        r |= dm_json_add(o, "resourceLimits", limits);
        if (spec->memory_bytes > 0) {
                snprintf(mem, sizeof(mem), "%lld", (long long)spec->memory_bytes);
                r |= dm_json_add(limits, "memory", json_object_new_string(mem));
        }
        /* Kubernetes quantities: millicores. */
        if (spec->nano_cpus > 0) {
                snprintf(mem, sizeof(mem), "%lldm", (long long)((spec->nano_cpus + 999999) / 1000000));
                r |= dm_json_add(limits, "cpu", json_object_new_string(mem));
        }
        /* OpenSandbox's minimum is 60 s; 0 = no expiry (null). */
        if (spec->ttl_s > 0)
                r |= dm_json_add(o, "timeout", json_object_new_int64(spec->ttl_s < 60 ? 60 : spec->ttl_s));
        if (spec->env) {
                if (dm_json_kv(spec->env, "environment variable", &env, err) < 0)
                        return err->code;
                r |= dm_json_add(o, "env", env);
        }
        if (dm_json_kv(spec->labels, "label", &meta, err) < 0)
                return err->code;
        r |= dm_json_add(o, "metadata", meta);
        for (size_t i = 0; i < spec->n_mounts; i++) {
                struct json_object *v = json_object_new_object(), *host = json_object_new_object();
                char name[32];

                if (!spec->mounts[i].host || spec->mounts[i].host[0] != '/' || !spec->mounts[i].target ||
                    spec->mounts[i].target[0] != '/') {
                        json_object_put(v);
                        json_object_put(host);
                        return dm_error_set(err, -EINVAL, "mount %zu: host and target must be absolute paths", i);
                }
                snprintf(name, sizeof(name), "v%zu", i);
                if (!v || !host || json_object_array_add(vols, v) < 0) {
                        json_object_put(v);
                        json_object_put(host);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                r |= dm_json_add(v, "name", json_object_new_string(name));
                r |= dm_json_add(v, "host", host);
                r |= dm_json_add(host, "path", json_object_new_string(spec->mounts[i].host));
                r |= dm_json_add(v, "mountPath", json_object_new_string(spec->mounts[i].target));
                r |= dm_json_add(v, "readOnly", json_object_new_boolean(spec->mounts[i].readonly));
        }
        r |= dm_json_add(o, "volumes", vols);
        if (r)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = egress_policy(egress, spec, &np, err);
        if (r < 0)
                return r;
        if (np && dm_json_add(o, "networkPolicy", TAKE_PTR(np)) < 0)
                r = -ENOMEM;
        if (r)
                return dm_error_set(err, -ENOMEM, "out of memory");
        *ret = TAKE_PTR(o);
        return 0;
}

static int osb_create(struct dm_backend *b, const struct dm_container_spec *spec, char **ret_id, struct dm_error *err)
{
        struct osb *o = to_osb(b);
        _cleanup_json_ struct json_object *body = NULL, *res = NULL;
        const char *id, *m;
        char answer[DM_ERROR_MSG_MAX];
        long long max;
        int r;

        r = create_body(o->egress, spec, &body, err);
        /* A maximum learned from an earlier refusal: ask for it now. */
        max = atomic_load(&o->max_ttl_s);
        if (r >= 0 && max > 0 && spec->ttl_s > max &&
            dm_json_add(body, "timeout", json_object_new_int64(max < 60 ? 60 : max)) < 0)
                r = dm_error_set(err, -ENOMEM, "out of memory");
        if (r >= 0)
                r = dm_osb_api(o, "POST", "/sandboxes", body, 202, &res, err);
        /* The server's max_sandbox_timeout_seconds (86400 in its example
         * configuration): ask once more for what it allows, and remember it
         * for the creates after this one. The sandbox's expiresAt says what
         * was granted; sandbox.c reads it back. */
        if (r == -EINVAL && spec->ttl_s > 0 && (m = strstr(err->msg, "exceeds configured maximum of ")) &&
            sscanf(m + strlen("exceeds configured maximum of "), "%lld", &max) == 1 && max >= 60 && max < spec->ttl_s) {
                log_info("OpenSandbox allows sandboxes %lld s at most: asking for that instead of %lld s", max,
                         (long long)spec->ttl_s);
                atomic_store(&o->max_ttl_s, max);
                dm_error_clear(err);
                r = dm_json_add(body, "timeout", json_object_new_int64(max)) < 0
                            ? dm_error_set(err, -ENOMEM, "out of memory")
                            : dm_osb_api(o, "POST", "/sandboxes", body, 202, &res, err);
        }
        /* DEMESNE_OPENSANDBOX_EGRESS said there is a sidecar and the
         * server says there is none: without one the sandbox would have the
         * server's network, so refuse, and say what to configure. */
        /* err->msg is also the answer quoted: copy it out first (the
         * format's output must not be its own input). */
        if (r == -EINVAL && strstr(err->msg, "egress.image must be configured")) {
                snprintf(answer, sizeof(answer), "%s", err->msg);
                return dm_error_set(err, -EOPNOTSUPP,
                                    "the OpenSandbox server has no egress sidecar configured, so it cannot enforce "
                                    "egress other than 'open', and demesne will not create a sandbox with the "
                                    "server's default network: set image = \"<the egress sidecar image>\" and mode = "
                                    "\"dns+nft\" in the [egress] section of the server's config.toml, or set "
                                    "DEMESNE_OPENSANDBOX_EGRESS=none to be refused before asking (OpenSandbox "
                                    "answered: %.200s)",
                                    answer);
        }
        if (r >= 0 && (!(id = get_str(res, "id")) || dm_osb_check_id(id, err) < 0))
                r = dm_error_set(err, -EPROTO, "OpenSandbox answered the create without a valid id");
        if (r < 0)
                return dm_error_wrap(err, "create sandbox from '%s'", spec->image);
        dm_osb_name_learn(o, id, spec->name);
        *ret_id = strdup(id);
        return *ret_id ? 0 : dm_error_set(err, -ENOMEM, "out of memory");
}

void dm_osb_name_learn(struct osb *o, const char *id, const char *name)
{
        struct osb_name *n;

        if (!id || !name || !name[0] || strlen(id) >= sizeof(n->id) || strlen(name) >= sizeof(n->name))
                return;
        pthread_mutex_lock(&o->lock);
        for (n = o->names; n && strcmp(n->id, id) != 0; n = n->next)
                ;
        if (!n && (n = calloc(1, sizeof(*n)))) {
                n->next = o->names;
                o->names = n;
        }
        if (n) {
                snprintf(n->id, sizeof(n->id), "%s", id);
                snprintf(n->name, sizeof(n->name), "%s", name);
        }
        pthread_mutex_unlock(&o->lock);
}

const char *dm_osb_name(struct osb *o, const char *id)
{
        static __thread char buf[160];
        const size_t size = sizeof(buf);
        bool found = false;

        pthread_mutex_lock(&o->lock);
        for (struct osb_name *n = o->names; n && !found; n = n->next)
                if (strcmp(n->id, id) == 0) {
                        snprintf(buf, size, "%s (OpenSandbox %s)", n->name, id);
                        found = true;
                }
        pthread_mutex_unlock(&o->lock);
        return found ? buf : id;
}

/* method /sandboxes/<id><suffix>, id checked first. */
static int on_sandbox(struct osb *o, const char *method, const char *id, const char *suffix, struct json_object *body,
                      long ok_status, struct json_object **ret, struct dm_error *err)
{
        _cleanup_free_ char *path = NULL;
        int r = dm_osb_check_id(id, err);

        if (r < 0)
                return r;
        if (asprintf(&path, "/sandboxes/%s%s", id, suffix) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        return dm_osb_api(o, method, path, body, ok_status, ret, err);
}

static int get_sandbox(struct osb *o, const char *id, struct json_object **ret, struct dm_error *err)
{
        return on_sandbox(o, "GET", id, "", NULL, 200, ret, err);
}

static const char *state_of(struct json_object *sb)
{
        const char *s = get_str(get(sb, "status"), "state");
        return s ? s : "";
}

/* ---- execd endpoints ------------------------------------------------------------- */

void dm_osb_execd_free(struct execd *e)
{
        if (!e)
                return;
        dm_curl_free(e->http);
        free(e->sandbox);
        free(e);
}

/* The endpoint of the sandbox's execd: "host:port/path", no scheme (the
 * protocol is ours), plus headers every request to it must carry. */
static int execd_lookup(struct osb *o, const char *id, struct execd **ret, struct dm_error *err)
{
        _cleanup_free_ char *path = NULL, *url = NULL;
        _cleanup_json_ struct json_object *res = NULL;
        struct json_object *hdrs;
        const char **headers = NULL;
        size_t n = 0;
        struct execd *e;
        const char *ep;
        int r;

        /* Through the server's proxy when the sandboxes' own endpoints are
         * not reachable from here (a cluster network, say). */
        if (asprintf(&path, "/sandboxes/%s/endpoints/%d%s", id, EXECD_PORT,
                     o->server_proxy ? "?use_server_proxy=true" : "") < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_osb_api(o, "GET", path, NULL, 200, &res, err);
        if (r < 0)
                return dm_error_wrap(err, "look up the execd endpoint of sandbox '%s'", dm_osb_name(o, id));
        ep = get_str(res, "endpoint");
        if (!ep || !ep[0])
                return dm_error_set(err, -EPROTO, "OpenSandbox answered the endpoint of '%s' without a URL",
                                    dm_osb_name(o, id));
        if (strstr(ep, "://")) {
                if (strncmp(ep, "http://", 7) != 0 && strncmp(ep, "https://", 8) != 0)
                        return dm_error_set(err, -EPROTO, "execd endpoint '%.200s' is not http(s)", ep);
                url = strdup(ep);
        } else if (asprintf(&url, "%s://%s", o->protocol, ep) < 0) {
                url = NULL;
        }
        if (!url)
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (size_t l = strlen(url); l && url[l - 1] == '/'; l--)
                url[l - 1] = '\0';
        hdrs = get(res, "headers");
        if (hdrs && json_object_is_type(hdrs, json_type_object))
                n = (size_t)json_object_object_length(hdrs);
        headers = calloc(n + 1, sizeof(*headers));
        e = calloc(1, sizeof(*e));
        if (!headers || !e) {
                free(headers);
                free(e);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        r = 0;
        n = 0;
        if (hdrs && json_object_is_type(hdrs, json_type_object)) {
                json_object_object_foreach(hdrs, key, val)
                {
                        const char *v = json_object_get_string(val);
                        char *line = NULL;

                        /* Never let an answer smuggle a header line in, nor
                         * make us send the API key to execd. */
                        if (strpbrk(key, "\r\n:") || !v || strpbrk(v, "\r\n") ||
                            strcasecmp(key, "OPEN-SANDBOX-API-KEY") == 0) {
                                r = dm_error_set(err, -EPROTO, "execd endpoint header '%.64s' refused", key);
                                break;
                        }
                        if (asprintf(&line, "%s: %s", key, v) < 0) {
                                r = dm_error_set(err, -ENOMEM, "out of memory");
                                break;
                        }
                        headers[n++] = line;
                }
        }
        if (r >= 0)
                r = dm_curl_new_url(url, o->response_max, "execd", headers, &e->http, err);
        for (size_t i = 0; i < n; i++)
                free((char *)headers[i]);
        free(headers);
        if (r >= 0 && !(e->sandbox = strdup(id)))
                r = dm_error_set(err, -ENOMEM, "out of memory");
        if (r < 0) {
                dm_osb_execd_free(e);
                return r;
        }
        *ret = e;
        return 0;
}

/* The execd client of sandbox id, looked up once and kept. */
int dm_osb_execd(struct osb *o, const char *id, struct dm_curl **ret, struct dm_error *err)
{
        struct execd *e = NULL;
        int r;

        pthread_mutex_lock(&o->lock);
        for (struct execd *x = o->execds; x; x = x->next)
                if (strcmp(x->sandbox, id) == 0)
                        e = x;
        pthread_mutex_unlock(&o->lock);
        if (e) {
                *ret = e->http;
                return 0;
        }
        r = dm_osb_check_id(id, err);
        if (r >= 0)
                r = execd_lookup(o, id, &e, err);
        if (r < 0)
                return r;
        pthread_mutex_lock(&o->lock);
        e->next = o->execds;
        o->execds = e;
        pthread_mutex_unlock(&o->lock);
        *ret = e->http;
        return 0;
}

/* Unlinked, not freed: an exec running now may still use it. Retired
 * clients go with the backend; a reused id looks its execd up anew. */
static void execd_forget(struct osb *o, const char *id)
{
        pthread_mutex_lock(&o->lock);
        for (struct execd **p = &o->execds; *p; p = &(*p)->next)
                if (strcmp((*p)->sandbox, id) == 0) {
                        struct execd *e = *p;
                        *p = e->next;
                        e->next = o->retired;
                        o->retired = e;
                        break;
                }
        pthread_mutex_unlock(&o->lock);
}

/* Waits until the sandbox is Running and its execd answers /ping. */
static int osb_start(struct dm_backend *b, const char *id, struct dm_error *err)
{
        struct osb *o = to_osb(b);
        int64_t give_up = dm_now_ms() + RUNNING_WAIT_MS;
        unsigned delay_ms = 50;
        struct dm_curl *x;
        int r;

        for (;;) {
                _cleanup_json_ struct json_object *sb = NULL;
                const char *state;

                r = get_sandbox(o, id, &sb, err);
                if (r < 0)
                        return dm_error_wrap(err, "wait for sandbox '%s'", dm_osb_name(o, id));
                state = state_of(sb);
                if (strcmp(state, "Running") == 0)
                        break;
                if (strcmp(state, "Failed") == 0 || strcmp(state, "Terminated") == 0 ||
                    strcmp(state, "Stopping") == 0) {
                        const char *msg = get_str(get(sb, "status"), "message");
                        return dm_error_set(err, -EIO, "sandbox '%s' is %s: %.300s", dm_osb_name(o, id), state,
                                            msg ? msg : "");
                }
                if (dm_now_ms() >= give_up)
                        return dm_error_set(err, -ETIMEDOUT, "sandbox '%s' still %s after %d s", dm_osb_name(o, id),
                                            state, RUNNING_WAIT_MS / 1000);
                usleep(delay_ms * 1000);
                if (delay_ms < 500)
                        delay_ms *= 2;
        }

        r = dm_osb_execd(o, id, &x, err);
        if (r < 0)
                return r;
        give_up = dm_now_ms() + EXECD_WAIT_MS;
        for (delay_ms = 20;;) {
                _cleanup_buf_ struct dm_buf out = { 0 };
                long status = 0;

                dm_buf_init(&out, 4096);
                r = dm_curl_request(x, "GET", "/ping", NULL, 5000, &status, &out, err);
                if (r >= 0 && status == 200)
                        return 0;
                if (r >= 0)
                        r = dm_osb_status_error(err, status, &out);
                if (dm_now_ms() >= give_up)
                        return dm_error_wrap(err, "execd of sandbox '%s' did not answer /ping within %d s",
                                             dm_osb_name(o, id), EXECD_WAIT_MS / 1000);
                dm_error_clear(err);
                usleep(delay_ms * 1000);
                if (delay_ms < 500)
                        delay_ms *= 2;
        }
}

static int osb_attach(struct dm_backend *b, const char *id, struct dm_stream **ret_stream, struct dm_error *err)
{
        (void)b;
        (void)ret_stream;
        return dm_error_set(err, -EOPNOTSUPP,
                            "the opensandbox backend cannot attach to sandbox '%s': run commands "
                            "through exec",
                            id);
}

static int osb_wait(struct dm_backend *b, const char *id, int *ret_exit_code, struct dm_error *err)
{
        (void)b;
        (void)ret_exit_code;
        return dm_error_set(err, -EOPNOTSUPP,
                            "the opensandbox backend cannot wait for sandbox '%s' to exit: "
                            "wait for its commands instead",
                            id);
}

static int osb_destroy(struct dm_backend *b, const char *id, struct dm_error *err)
{
        struct osb *o = to_osb(b);
        int r = on_sandbox(o, "DELETE", id, "", NULL, 204, NULL, err);

        /* Gone already; or the server's own TTL removed the container
         * first, and its DELETE answers 500 SANDBOX_DELETE_FAILED naming
         * the missing container. */
        if (r == -ENOENT || (r == -EIO && strstr(err->msg, "SANDBOX_DELETE_FAILED") &&
                             (strcasestr(err->msg, "no container") || strcasestr(err->msg, "no such container") ||
                              strcasestr(err->msg, "not found")))) {
                if (r == -EIO)
                        log_debug("delete sandbox '%s': the server had removed it already (%s)", id, err->msg);
                dm_error_clear(err);
                r = 0;
        }
        execd_forget(o, id);
        if (r < 0)
                return dm_error_wrap(err, "delete sandbox '%s'", dm_osb_name(o, id));
        pthread_mutex_lock(&o->lock);
        for (struct osb_name **p = &o->names; *p; p = &(*p)->next)
                if (strcmp((*p)->id, id) == 0) {
                        struct osb_name *gone = *p;
                        *p = gone->next;
                        free(gone);
                        break;
                }
        pthread_mutex_unlock(&o->lock);
        return 0;
}

/* The server mixes the image's labels into metadata: keep demesne's own. */
static char **demesne_labels(struct json_object *meta)
{
        _cleanup_json_ struct json_object *own = json_object_new_object();

        if (!own)
                return NULL;
        if (meta && json_object_is_type(meta, json_type_object)) {
                json_object_object_foreach(meta, key, val)
                {
                        if (strncmp(key, "demesne.", 8) == 0 &&
                            json_object_object_add(own, key, json_object_get(val)) < 0)
                                return NULL;
                }
        }
        return dm_labels_from_json(own);
}

static int osb_inspect(struct dm_backend *b, const char *id, struct dm_container_info *info, struct dm_error *err)
{
        _cleanup_json_ struct json_object *sb = NULL;
        const char *state, *uri;
        int r;

        r = get_sandbox(to_osb(b), id, &sb, err);
        if (r < 0)
                return dm_error_wrap(err, "inspect sandbox '%s'", dm_osb_name(to_osb(b), id));
        memset(info, 0, sizeof(*info));
        state = state_of(sb);
        uri = get_str(get(sb, "image"), "uri");
        info->id = strdup(id);
        info->image = strdup(uri ? uri : "");
        /* Docker's words, for callers: Pending is "created", gone is "exited". */
        info->status = strdup(
                strcmp(state, "Pending") == 0   ? "created"
                : strcmp(state, "Running") == 0 ? "running"
                : strcmp(state, "Paused") == 0  ? "paused"
                : (strcmp(state, "Terminated") == 0 || strcmp(state, "Failed") == 0 || strcmp(state, "Stopping") == 0)
                        ? "exited"
                        : state);
        info->running = strcmp(state, "Running") == 0;
        info->exit_code = strcmp(state, "Failed") == 0 ? 1 : 0;
        info->created_unix = parse_time(get_str(sb, "createdAt"));
        info->expires_unix = parse_time(get_str(sb, "expiresAt"));
        dm_osb_name_learn(to_osb(b), id, get_str(get(sb, "metadata"), "demesne.sandbox"));
        info->labels = demesne_labels(get(sb, "metadata"));
        if (!info->id || !info->image || !info->status || !info->labels) {
                dm_container_info_release(info);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        return 0;
}

/* "key=value" filters on the server; a bare "key" (any value) is filtered
 * here, since the metadata filter wants both. */
static int osb_list(struct dm_backend *b, const char *label, char ***ret_ids, size_t *ret_n, struct dm_error *err)
{
        struct osb *o = to_osb(b);
        _cleanup_free_ char *filter = NULL;
        const char *eq = strchr(label, '=');
        size_t klen = eq ? (size_t)(eq - label) : strlen(label), n = 0;
        char **ids = NULL;
        int r = 0;

        if (eq && !(filter = dm_uri_escape(label, "")))
                return dm_error_set(err, -ENOMEM, "out of memory");
        for (int page = 1;; page++) {
                _cleanup_json_ struct json_object *res = NULL;
                _cleanup_free_ char *path = NULL;
                struct json_object *items, *more;

                if (asprintf(&path, "/sandboxes?page=%d&pageSize=%d%s%s", page, LIST_PAGE, filter ? "&metadata=" : "",
                             filter ? filter : "") < 0) {
                        r = dm_error_set(err, -ENOMEM, "out of memory");
                        break;
                }
                r = dm_osb_api(o, "GET", path, NULL, 200, &res, err);
                if (r < 0)
                        break;
                items = get(res, "items");
                if (!items || !json_object_is_type(items, json_type_array)) {
                        r = dm_error_set(err, -EPROTO, "OpenSandbox answered the list without items");
                        break;
                }
                for (size_t i = 0; i < json_object_array_length(items); i++) {
                        struct json_object *sb = json_object_array_get_idx(items, i), *meta = get(sb, "metadata");
                        const char *id = get_str(sb, "id"), *st = state_of(sb);
                        bool match = !!eq;
                        char **grown;

                        if (!id || strcmp(st, "Terminated") == 0)
                                continue;
                        if (!eq && meta && json_object_is_type(meta, json_type_object)) {
                                json_object_object_foreach(meta, key, val)
                                {
                                        (void)val;
                                        if (strlen(key) == klen && strncmp(key, label, klen) == 0)
                                                match = true;
                                }
                        }
                        if (!match)
                                continue;
                        grown = realloc(ids, (n + 2) * sizeof(char *));
                        if (!grown || !(grown[n] = strdup(id))) {
                                ids = grown ? grown : ids;
                                r = dm_error_set(err, -ENOMEM, "out of memory");
                                break;
                        }
                        ids = grown;
                        ids[++n] = NULL;
                }
                more = get(get(res, "pagination"), "hasNextPage");
                if (r < 0 || !more || !json_object_get_boolean(more))
                        break;
        }
        if (r >= 0 && !ids && !(ids = calloc(1, sizeof(char *))))
                r = dm_error_set(err, -ENOMEM, "out of memory");
        if (r < 0) {
                for (size_t i = 0; i < n; i++)
                        free(ids[i]);
                free(ids);
                return dm_error_wrap(err, "list sandboxes with metadata '%s'", label);
        }
        *ret_ids = ids;
        *ret_n = n;
        return 0;
}

static int osb_renew(struct dm_backend *b, const char *id, int64_t expires_unix, struct dm_error *err)
{
        _cleanup_json_ struct json_object *body = json_object_new_object();
        char t[32];
        int r;

        dm_time_format(expires_unix, t, sizeof(t));
        if (!body || dm_json_add(body, "expiresAt", json_object_new_string(t)) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = on_sandbox(to_osb(b), "POST", id, "/renew-expiration", body, 200, NULL, err);
        /* The spec's 400 for a well-formed time in the future: it is not
         * after the current expiresAt, so another exec of this sandbox
         * (another thread, another server) renewed it as far already. */
        if (r == -EINVAL && expires_unix > dm_wall_ms() / 1000 + 1) {
                log_debug("renew sandbox '%s' until %s: already as late (%s)", id, t, err->msg);
                memset(err, 0, sizeof(*err));
                return 0;
        }
        return r < 0 ? dm_error_wrap(err, "renew sandbox '%s' until %s", dm_osb_name(to_osb(b), id), t) : 0;
}

/* ---- lifetime ---------------------------------------------------------------------- */

static void osb_free(struct dm_backend *b)
{
        struct osb *o = to_osb(b);

        if (!o)
                return;
        dm_osb_execs_release(o);
        for (struct execd *lists[2] = { o->execds, o->retired }, **l = lists; l < lists + 2; l++)
                while (*l) {
                        struct execd *next = (*l)->next;
                        dm_osb_execd_free(*l);
                        *l = next;
                }
        while (o->names) {
                struct osb_name *next = o->names->next;
                free(o->names);
                o->names = next;
        }
        dm_curl_free(o->api);
        free(o->protocol);
        pthread_mutex_destroy(&o->lock);
        free(o);
}

static const struct dm_backend_ops osb_ops = {
        .name = "opensandbox",
        .caps = DM_CAP_TTL,
        .ping = osb_ping,
        .describe = osb_describe,
        .image_exists = osb_image_exists,
        .create = osb_create,
        .attach = osb_attach,
        .start = osb_start,
        .wait = osb_wait,
        .kill = dm_osb_kill,
        .destroy = osb_destroy,
        .inspect = osb_inspect,
        .list = osb_list,
        .exec = dm_osb_exec,
        .exec_exit_code = dm_osb_exec_exit_code,
        .exec_pid = NULL,
        .put_archive = NULL,
        .get_archive = NULL,
        .exec_interrupt = dm_osb_exec_interrupt,
        .put_file = dm_osb_put_file,
        .get_file = dm_osb_get_file,
        .renew = osb_renew,
        .pause = dm_osb_pause,
        .unpause = dm_osb_resume,
        .free = osb_free,
};

int dm_opensandbox_backend_new(int64_t response_max, const char *egress, const struct dm_engine_env *env,
                               struct dm_backend **ret, struct dm_error *err)
{
        const char *domain = env ? env->osb_domain : NULL, *proto = env ? env->osb_protocol : NULL,
                   *key = env ? env->osb_api_key : NULL, *proxy = env ? env->osb_use_server_proxy : NULL;
        _cleanup_free_ char *url = NULL, *key_header = NULL;
        const char *headers[2] = { NULL, NULL };
        struct osb *o;
        int r;

        if (!domain || !domain[0])
                return dm_error_set(err, -EINVAL,
                                    "the opensandbox backend needs OPEN_SANDBOX_DOMAIN "
                                    "(host:port of the OpenSandbox server, e.g. localhost:8080)");
        if (strstr(domain, "://") || strpbrk(domain, " \t\r\n?#"))
                return dm_error_set(err, -EINVAL,
                                    "OPEN_SANDBOX_DOMAIN '%s': give host[:port] only; the scheme goes "
                                    "in OPEN_SANDBOX_PROTOCOL",
                                    domain);
        if (!proto || !proto[0])
                proto = "http";
        if (strcmp(proto, "http") != 0 && strcmp(proto, "https") != 0)
                return dm_error_set(err, -EINVAL, "OPEN_SANDBOX_PROTOCOL '%s': expected http or https", proto);
        if (proxy && *proxy && strcmp(proxy, "0") != 0 && strcmp(proxy, "1") != 0 && strcmp(proxy, "true") != 0 &&
            strcmp(proxy, "false") != 0)
                return dm_error_set(err, -EINVAL, "OPEN_SANDBOX_USE_SERVER_PROXY '%s': expected 1/true or 0/false",
                                    proxy);
        if (egress && *egress && strcmp(egress, "none") != 0 && strcmp(egress, "dns") != 0 &&
            strcmp(egress, "dns+nft") != 0)
                return dm_error_set(err, -EINVAL,
                                    "DEMESNE_OPENSANDBOX_EGRESS '%s': expected none, dns or dns+nft (the [egress] "
                                    "of the OpenSandbox server: no image, mode \"dns\", mode \"dns+nft\")",
                                    egress);
        if (key && strpbrk(key, "\r\n"))
                return dm_error_set(err, -EINVAL, "OPEN_SANDBOX_API_KEY holds a line break");
        {
                int dl = (int)strlen(domain);

                while (dl > 0 && domain[dl - 1] == '/')
                        dl--;
                if (asprintf(&url, "%s://%.*s/v1", proto, dl, domain) < 0)
                        return dm_error_set(err, -ENOMEM, "out of memory");
        }
        if (key && key[0]) {
                if (asprintf(&key_header, "OPEN-SANDBOX-API-KEY: %s", key) < 0)
                        return dm_error_set(err, -ENOMEM, "out of memory");
                headers[0] = key_header;
        }
        o = calloc(1, sizeof(*o));
        if (!o || !(o->protocol = strdup(proto))) {
                free(o);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        o->egress = !egress || !*egress || strcmp(egress, "dns") == 0 ? OSB_EGRESS_DNS
                    : strcmp(egress, "none") == 0                     ? OSB_EGRESS_OFF
                                                                      : OSB_EGRESS_DNS_NFT;
        o->server_proxy = proxy && (strcmp(proxy, "1") == 0 || strcmp(proxy, "true") == 0);
        pthread_mutex_init(&o->lock, NULL);
        o->base.ops = &osb_ops;
        o->response_max = response_max > 0 ? (size_t)response_max : 16u << 20;
        r = dm_curl_new_url(url, o->response_max, "OpenSandbox server", headers, &o->api, err);
        if (r < 0) {
                osb_free(&o->base);
                return r;
        }
        log_debug("opensandbox backend at '%s'%s", url, key_header ? " (with an API key)" : " (no API key)");
        *ret = &o->base;
        return 0;
}
