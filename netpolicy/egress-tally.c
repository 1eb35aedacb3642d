/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "netpolicy/egress-tally.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/basic/timeutil.h"

struct entry {
        char host[DM_EGRESS_HOST_MAX + 1];
        char rule[DM_EGRESS_RULE_MAX + 1];
        uint16_t port;
        bool allowed;
        uint64_t count, up, down;
};

struct dm_egress_tally {
        pthread_mutex_t lock;
        struct entry e[DM_EGRESS_TALLY_MAX];
        size_t n;
        struct entry other[2]; /* what did not fit: [0] refused, [1] allowed */
        int64_t interval_ms, last_ms;
        dm_egress_tally_flush_fn fn;
        void *userdata;
};

struct dm_egress_tally *dm_egress_tally_new(int64_t interval_ms, dm_egress_tally_flush_fn fn, void *userdata)
{
        struct dm_egress_tally *t = calloc(1, sizeof(*t));

        if (!t)
                return NULL;
        pthread_mutex_init(&t->lock, NULL);
        t->interval_ms = interval_ms;
        t->last_ms = dm_now_ms();
        t->fn = fn;
        t->userdata = userdata;
        return t;
}

void dm_egress_tally_free(struct dm_egress_tally *t)
{
        if (!t)
                return;
        dm_egress_tally_flush(t);
        pthread_mutex_destroy(&t->lock);
        free(t);
}

/* What a sandbox asked for, made safe to keep and show: the characters of
 * a host name or an address, lowercased, anything else '?'. */
static void clean(char *dst, size_t max, const char *src)
{
        size_t i = 0;

        for (; src && src[i] && i < max; i++) {
                char c = src[i];
                if (c >= 'A' && c <= 'Z')
                        c = (char)(c - 'A' + 'a');
                dst[i] = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_' ||
                                         c == ':' || c == '*' || c == '/'
                                 ? c
                                 : '?';
        }
        dst[i] = '\0';
        if (i == 0)
                snprintf(dst, max + 1, "-");
}

static void count(struct entry *e, uint64_t up, uint64_t down)
{
        e->count++;
        e->up += up;
        e->down += down;
}

static bool due(struct dm_egress_tally *t)
{
        return t->interval_ms > 0 && dm_now_ms() - t->last_ms >= t->interval_ms;
}

void dm_egress_tally_add(struct dm_egress_tally *t, const char *host, uint16_t port, bool allowed, const char *rule,
                         uint64_t up, uint64_t down)
{
        struct entry k = { .port = port, .allowed = allowed };
        bool flush;

        if (!t)
                return;
        clean(k.host, DM_EGRESS_HOST_MAX, host);
        clean(k.rule, DM_EGRESS_RULE_MAX, rule);
        pthread_mutex_lock(&t->lock);
        size_t i = 0;
        while (i < t->n && !(t->e[i].port == k.port && t->e[i].allowed == k.allowed &&
                             strcmp(t->e[i].host, k.host) == 0 && strcmp(t->e[i].rule, k.rule) == 0))
                i++;
        if (i == t->n && t->n < DM_EGRESS_TALLY_MAX)
                t->e[t->n++] = k;
        count(i < t->n ? &t->e[i] : &t->other[allowed], up, down);
        flush = due(t);
        pthread_mutex_unlock(&t->lock);
        if (flush)
                dm_egress_tally_flush(t);
}

static json_object *entry_json(const struct entry *e, const char *host, const char *rule)
{
        json_object *o = json_object_new_object();

        json_object_object_add(o, "host", json_object_new_string(host));
        json_object_object_add(o, "port", json_object_new_int(e->port));
        json_object_object_add(o, "decision", json_object_new_string(e->allowed ? "allowed" : "refused"));
        json_object_object_add(o, "rule", json_object_new_string(rule));
        json_object_object_add(o, "count", json_object_new_int64((int64_t)e->count));
        json_object_object_add(o, "bytes_up", json_object_new_int64((int64_t)e->up));
        json_object_object_add(o, "bytes_down", json_object_new_int64((int64_t)e->down));
        return o;
}

json_object *dm_egress_tally_take(struct dm_egress_tally *t)
{
        json_object *arr = NULL;

        pthread_mutex_lock(&t->lock);
        t->last_ms = dm_now_ms();
        if (t->n > 0 || t->other[0].count > 0 || t->other[1].count > 0) {
                arr = json_object_new_array();
                for (size_t i = 0; arr && i < t->n; i++)
                        json_object_array_add(arr, entry_json(&t->e[i], t->e[i].host, t->e[i].rule));
                for (int a = 0; arr && a < 2; a++)
                        if (t->other[a].count > 0)
                                json_object_array_add(arr,
                                                      entry_json(&(struct entry){ .allowed = a,
                                                                                  .count = t->other[a].count,
                                                                                  .up = t->other[a].up,
                                                                                  .down = t->other[a].down },
                                                                 "*", "other: past the entries kept per interval"));
        }
        t->n = 0;
        memset(t->other, 0, sizeof(t->other));
        pthread_mutex_unlock(&t->lock);
        return arr;
}

void dm_egress_tally_flush(struct dm_egress_tally *t)
{
        json_object *arr;

        if (!t || !(arr = dm_egress_tally_take(t)))
                return;
        if (t->fn)
                t->fn(t->userdata, arr);
        else
                json_object_put(arr);
}
