/* SPDX-License-Identifier: MIT */
/* The body of OpenSandbox's POST /sandboxes (sandbox-lifecycle.yml's
 * CreateSandboxRequest) for a container spec: image, entrypoint, resource
 * limits, TTL, env, metadata, host volumes, the networkPolicy for the
 * run's egress, and extensions.poolRef when DEMESNE_OPENSANDBOX_POOL_REF
 * names one of the server's pools. */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "backends/opensandbox-internal.h"
#include "netpolicy/policy.h"
#include "src/basic/cleanup.h"

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

int dm_osb_create_body(enum osb_egress egress, const char *pool_ref, const struct dm_container_spec *spec,
                       struct json_object **ret, struct dm_error *err)
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
        /* A pool of the server's (sandbox-lifecycle.yml, "Pool mode"): the
         * pool's template decides what image, entrypoint and resource limits
         * do not; the server takes them as optional there, so they are sent
         * as in any create. snapshotId, which must not come with it, demesne
         * never sends. */
        if (pool_ref) {
                struct json_object *ext = json_object_new_object();

                if (!ext || dm_json_add(ext, "poolRef", json_object_new_string(pool_ref)) < 0) {
                        json_object_put(ext);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                r |= dm_json_add(o, "extensions", ext);
        }
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
