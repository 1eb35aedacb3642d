/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/core/sandbox-internal.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/core/egress.h"
#include "src/core/launch.h"
#include "src/core/limits.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

/* The shim sockets this server holds for persistent sandboxes: one entry
 * per sandbox it has talked to, made at create or taken over from an
 * earlier server at the first exec (with the sandbox's network). */

/* At create, the network made; at adoption, brought back (a new
 * namespace after a restart has no pair). */
int dm_sandbox_net(struct dm_context *ctx, struct dm_sandbox *sb, const struct dm_policy *policy,
                   const struct dm_launched *l, struct dm_egress_run **ret, struct dm_error *err)
{
        struct dm_backend *b = NULL;
        int r;

        *ret = NULL;
        r = dm_context_backend(ctx, &b, err);
        if (r >= 0 && (dm_egress_backend_open(b, policy) || !dm_backend_can(b, DM_CAP_HOST_NETNS)))
                return 0; /* the backend's own network */
        if (r < 0 || !dm_egress_needed(policy))
                return r;
        if (sb->net_ifname[0] && dm_netlink_exists(sb->net_ifname, sb->id)) {
                struct dm_netlink net = { .host_addr = sb->net_host, .peer_addr = sb->net_peer };

                snprintf(net.host_ifname, sizeof(net.host_ifname), "%s", sb->net_ifname);
                r = dm_egress_adopt(ctx, policy, sb->id, &net, l->package_hosts, sb->output_dir, ret, err);
        } else {
                r = dm_egress_start(ctx, policy, sb->id, "-", l->pid, l->package_hosts, sb->output_dir, ret, err);
                if (r >= 0) {
                        const struct dm_netlink *net = dm_egress_net(*ret);

                        snprintf(sb->net_ifname, sizeof(sb->net_ifname), "%s", net->host_ifname);
                        sb->net_host = net->host_addr;
                        sb->net_peer = net->peer_addr;
                }
        }
        return r;
}

void dm_sandbox_shim_put(struct dm_context *ctx, struct dm_sandbox_shim *e)
{
        bool last;

        pthread_mutex_lock(&ctx->sandboxes->shim_lock);
        last = --e->refs == 0;
        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
        if (last) {
                /* The pair lives with the container; only the listener goes. */
                dm_egress_stop(ctx, e->egress, false);
                dm_shimhost_free(e->host);
                free(e);
        }
}

/* Drops the list's reference to sandbox id's entry, if any (not one being
 * adopted: its adopter holds it, and the next exec looks again). */
void dm_sandbox_shim_forget(struct dm_context *ctx, const char *id)
{
        struct dm_sandbox_shim *found = NULL;

        pthread_mutex_lock(&ctx->sandboxes->shim_lock);
        for (struct dm_sandbox_shim **p = &ctx->sandboxes->shims; *p; p = &(*p)->next)
                if (strcmp((*p)->id, id) == 0 && !(*p)->adopting) {
                        found = *p;
                        *p = found->next;
                        break;
                }
        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
        if (found)
                dm_sandbox_shim_put(ctx, found);
}

bool dm_sandbox_shim_target(struct dm_context *ctx, const char *id, struct dm_limits_target *ret, int64_t *ret_used)
{
        bool found = false;

        *ret_used = -1;
        pthread_mutex_lock(&ctx->sandboxes->shim_lock);
        for (struct dm_sandbox_shim *e = ctx->sandboxes->shims; e; e = e->next)
                if (strcmp(e->id, id) == 0) {
                        found = !e->adopting && e->target.pid > 0;
                        if (found) {
                                *ret = e->target;
                                *ret_used = e->disk_used;
                        }
                        break;
                }
        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
        return found;
}

void dm_sandbox_shim_note_usage(struct dm_context *ctx, const char *id, int64_t used)
{
        pthread_mutex_lock(&ctx->sandboxes->shim_lock);
        for (struct dm_sandbox_shim *e = ctx->sandboxes->shims; e; e = e->next)
                if (strcmp(e->id, id) == 0) {
                        e->disk_used = used;
                        break;
                }
        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
}

void dm_sandbox_usage_changed(struct dm_context *ctx, const char *id)
{
        dm_sandbox_shim_note_usage(ctx, id, -1);
}

bool dm_sandbox_shim_ready(struct dm_context *ctx, const char *id)
{
        bool ready = false;

        pthread_mutex_lock(&ctx->sandboxes->shim_lock);
        for (struct dm_sandbox_shim *e = ctx->sandboxes->shims; e; e = e->next)
                if (strcmp(e->id, id) == 0) {
                        ready = !e->adopting && dm_shimhost_ready(e->host);
                        break;
                }
        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
        return ready;
}

static int shim_add(struct dm_context *ctx, const char *id, struct dm_shimhost *host, struct dm_sandbox_shim **ret)
{
        struct dm_sandbox_shim *e = calloc(1, sizeof(*e));

        if (!e)
                return -ENOMEM;
        snprintf(e->id, sizeof(e->id), "%s", id);
        e->host = host;
        e->disk_used = -1;
        e->refs = 2; /* the list's and the caller's */
        e->next = ctx->sandboxes->shims;
        ctx->sandboxes->shims = e;
        *ret = e;
        return 0;
}

/* The shim of sandbox sb, with a reference for the caller: the one this
 * server holds, or its socket taken over from the server that made it (the
 * running shim reconnects by itself). -EBUSY when another live server holds
 * it: the exec core then refuses the command (src/core/exec.c). */
int dm_sandbox_shim_get(struct dm_context *ctx, struct dm_backend *b, const struct dm_sandbox *sb,
                        struct dm_sandbox_shim **ret, struct dm_error *err)
{
        struct dm_shimhost *host = NULL;
        struct dm_egress_run *egress = NULL;
        struct dm_sandbox_shim *e;
        struct dm_policy *policy = NULL;
        struct dm_sandbox copy;
        struct dm_launched l;
        int r;

        pthread_mutex_lock(&ctx->sandboxes->shim_lock);
        for (;;) {
                for (e = ctx->sandboxes->shims; e && strcmp(e->id, sb->id) != 0; e = e->next)
                        ;
                if (!e)
                        break;
                if (!e->adopting) {
                        e->refs++;
                        *ret = e;
                        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
                        return 0;
                }
                /* Another exec is taking this sandbox over: wait, then use
                 * what it made (or try anew if it failed). Execs into other
                 * sandboxes go on meanwhile. */
                pthread_cond_wait(&ctx->sandboxes->shim_changed, &ctx->sandboxes->shim_lock);
        }
        /* A place held in the list while the slow part runs unlocked. */
        e = calloc(1, sizeof(*e));
        if (!e) {
                pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        snprintf(e->id, sizeof(e->id), "%s", sb->id);
        e->refs = 1; /* the list's */
        e->adopting = true;
        e->next = ctx->sandboxes->shims;
        ctx->sandboxes->shims = e;
        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);

        r = dm_shimhost_new(sb->shim_dir, dm_shim_binary_find(ctx->cfg.shim_path), &host, err);
        if (r >= 0)
                r = dm_launch_shim_ready(b, sb->container, host, dm_now_ms() + DM_SHIM_READY_MS, &l, err);
        /* Its network by the policy this server keeps for it (parsed from
         * the record at the first adoption), not by what the record says
         * now. */
        if (r >= 0)
                r = dm_sandbox_policy_get(ctx, sb, &policy, err);
        if (r >= 0) {
                copy = *sb;
                r = dm_sandbox_net(ctx, &copy, policy, &l, &egress, err);
                if (r >= 0 && copy.net_host != sb->net_host)
                        r = dm_sandbox_record_write(ctx, &copy, err);
        }
        dm_policy_free(policy);
        /* The placeholder is ours alone until it is marked adopted. */
        if (r >= 0)
                e->target = l.target;

        pthread_mutex_lock(&ctx->sandboxes->shim_lock);
        if (r >= 0) {
                e->host = host;
                e->egress = egress;
                e->adopting = false;
                e->refs++; /* the caller's */
                *ret = e;
        } else {
                for (struct dm_sandbox_shim **p = &ctx->sandboxes->shims; *p; p = &(*p)->next)
                        if (*p == e) {
                                *p = e->next;
                                break;
                        }
        }
        pthread_cond_broadcast(&ctx->sandboxes->shim_changed);
        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
        if (r < 0) {
                free(e);
                dm_egress_stop(ctx, egress, false);
                dm_shimhost_free(host);
        } else
                log_info("sandbox %s: took its shim over from an earlier server", sb->id);
        return r;
}

static bool any_adopting(struct dm_context *ctx)
{
        for (struct dm_sandbox_shim *e = ctx->sandboxes->shims; e; e = e->next)
                if (e->adopting)
                        return true;
        return false;
}

void dm_sandbox_shims_release(struct dm_context *ctx)
{
        pthread_mutex_lock(&ctx->sandboxes->shim_lock);
        /* An adoption still under way owns its entry until it ends. */
        while (any_adopting(ctx))
                pthread_cond_wait(&ctx->sandboxes->shim_changed, &ctx->sandboxes->shim_lock);
        struct dm_sandbox_shim *e = ctx->sandboxes->shims;
        ctx->sandboxes->shims = NULL;
        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
        while (e) {
                struct dm_sandbox_shim *next = e->next;
                dm_sandbox_shim_put(ctx, e);
                e = next;
        }
}

/* A new sandbox's shim into the list (host and *egress taken): execs
 * find it there. */
void dm_sandbox_shim_keep(struct dm_context *ctx, const char *id, struct dm_shimhost *host,
                          struct dm_egress_run **egress, const struct dm_limits_target *target)
{
        struct dm_sandbox_shim *entry = NULL;
        int r;

        pthread_mutex_lock(&ctx->sandboxes->shim_lock);
        r = shim_add(ctx, id, host, &entry);
        if (r == 0) {
                entry->refs--; /* only the list's */
                entry->egress = *egress;
                *egress = NULL;
                entry->target = *target; /* from the inspect dm_launch_shim_ready made */
        }
        pthread_mutex_unlock(&ctx->sandboxes->shim_lock);
        if (r < 0)
                dm_shimhost_free(host); /* the next exec takes the socket over */
}
