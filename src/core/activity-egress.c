/* SPDX-License-Identifier: MIT */
/* The run journal's "egress" and "usage" lines (src/core/activity.h): what
 * the host's proxies decided for a run, counted in a tally
 * (netpolicy/egress-tally.h) and flushed as lines of deltas that a reader
 * sums, and the run's tokens and cost from the vendor proxy's counts.
 * Both are written by this server into its own journal under the state
 * directory, which no sandbox mounts; a reader still checks each field. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/core/activity.h"
#include "src/core/ledger.h"

bool dm_activity_event_known(const char *event)
{
        return strcmp(event, "start") == 0 || strcmp(event, "end") == 0 || strcmp(event, "egress") == 0 ||
               strcmp(event, "usage") == 0 || strcmp(event, "preview") == 0;
}

void dm_activity_format_extra(const struct dm_activity_event *ev, json_object *o)
{
        if (strcmp(ev->event, "egress") == 0 && ev->entries)
                json_object_object_add(o, "entries", json_object_get(ev->entries));
        if (strcmp(ev->event, "usage") == 0) {
                json_object_object_add(o, "input_tokens", json_object_new_int64(ev->input_tokens));
                json_object_object_add(o, "output_tokens", json_object_new_int64(ev->output_tokens));
                json_object_object_add(o, "cost_usd", json_object_new_double(ev->cost_usd));
        }
        if (strcmp(ev->event, "preview") == 0) {
                json_object_object_add(o, "port", json_object_new_int(ev->port));
                json_object_object_add(o, "open", json_object_new_boolean(ev->url != NULL));
                if (ev->url)
                        json_object_object_add(o, "url", json_object_new_string(ev->url));
        }
}

/* ---- writing: a run's tally, flushed into this process's journal ----------------------- */

struct dm_activity_egress {
        struct dm_egress_tally *tally;
        char *state_dir;
        int64_t keep_days;
        char id[DM_ACTIVITY_ID_MAX + 1];
};

static void flush_line(void *userdata, json_object *entries)
{
        struct dm_activity_egress *a = userdata;

        dm_activity_record(a->state_dir, a->keep_days,
                           &(struct dm_activity_event){ .event = "egress", .id = a->id, .entries = entries });
        json_object_put(entries);
}

struct dm_activity_egress *dm_activity_egress_new(const char *state_dir, int64_t keep_days, const char *id)
{
        struct dm_activity_egress *a;

        if (!state_dir || !dm_activity_id_valid(id) || !(a = calloc(1, sizeof(*a))))
                return NULL;
        snprintf(a->id, sizeof(a->id), "%s", id);
        a->keep_days = keep_days;
        a->state_dir = strdup(state_dir);
        a->tally = dm_egress_tally_new(DM_EGRESS_TALLY_INTERVAL_MS, flush_line, a);
        if (!a->state_dir || !a->tally) {
                dm_egress_tally_free(a->tally);
                free(a->state_dir);
                free(a);
                return NULL;
        }
        return a;
}

struct dm_egress_tally *dm_activity_egress_tally(struct dm_activity_egress *a)
{
        return a ? a->tally : NULL;
}

void dm_activity_egress_free(struct dm_activity_egress *a)
{
        if (!a)
                return;
        dm_egress_tally_free(a->tally); /* the last flush */
        free(a->state_dir);
        free(a);
}

/* ---- reading ---------------------------------------------------------------------------- */

static bool get_count(json_object *o, const char *key, int64_t max, int64_t *ret)
{
        json_object *v;

        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
                return false;
        *ret = json_object_get_int64(v);
        return *ret >= 0 && *ret <= max;
}

/* The characters netpolicy/egress-tally.c keeps, and a rule's. */
static bool get_word(json_object *o, const char *key, size_t max, bool spaces, const char **ret)
{
        json_object *v;
        const char *s;
        size_t n;

        if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
                return false;
        s = json_object_get_string(v);
        n = strlen(s);
        if (n == 0 || n > max)
                return false;
        for (size_t i = 0; i < n; i++)
                if (s[i] < 0x21 && !(spaces && s[i] == ' '))
                        return false;
                else if ((unsigned char)s[i] > 0x7e)
                        return false;
        *ret = s;
        return true;
}

struct tally_row {
        const char *host, *decision, *rule;
        int64_t port, count, up, down;
};

/* One entry of an "egress" line, checked; false: not taken. */
static bool row_of(json_object *e, struct tally_row *r)
{
        const int64_t big = INT64_MAX / 4; /* sums of a few such stay in range */

        return json_object_is_type(e, json_type_object) && get_word(e, "host", DM_EGRESS_HOST_MAX, false, &r->host) &&
               get_count(e, "port", 65535, &r->port) && get_word(e, "decision", 16, false, &r->decision) &&
               (strcmp(r->decision, "allowed") == 0 || strcmp(r->decision, "refused") == 0) &&
               get_word(e, "rule", DM_EGRESS_RULE_MAX, true, &r->rule) && get_count(e, "count", big, &r->count) &&
               get_count(e, "bytes_up", big, &r->up) && get_count(e, "bytes_down", big, &r->down);
}

static bool same(json_object *e, const struct tally_row *r)
{
        return json_object_get_int(json_object_object_get(e, "port")) == r->port &&
               strcmp(json_object_get_string(json_object_object_get(e, "host")), r->host) == 0 &&
               strcmp(json_object_get_string(json_object_object_get(e, "decision")), r->decision) == 0 &&
               strcmp(json_object_get_string(json_object_object_get(e, "rule")), r->rule) == 0;
}

static void add_to(json_object *e, const char *key, int64_t n)
{
        int64_t had = json_object_get_int64(json_object_object_get(e, key));

        json_object_object_add(e, key, json_object_new_int64(had > INT64_MAX - n ? INT64_MAX : had + n));
}

static json_object *find_row(json_object *list, const struct tally_row *r)
{
        for (size_t i = 0; i < json_object_array_length(list); i++)
                if (same(json_object_array_get_idx(list, i), r))
                        return json_object_array_get_idx(list, i);
        return NULL;
}

static void merge_row(json_object *list, struct tally_row *r)
{
        json_object *e = find_row(list, r);

        if (!e && json_object_array_length(list) >= DM_ACTIVITY_EGRESS_MAX - 2) {
                /* The rest fold into one entry per decision, as the tally does. */
                r->host = "*";
                r->port = 0;
                r->rule = "other: past the entries kept per run";
                e = find_row(list, r);
        }
        if (!e) {
                e = json_object_new_object();
                json_object_object_add(e, "host", json_object_new_string(r->host));
                json_object_object_add(e, "port", json_object_new_int((int)r->port));
                json_object_object_add(e, "decision", json_object_new_string(r->decision));
                json_object_object_add(e, "rule", json_object_new_string(r->rule));
                json_object_array_add(list, e);
        }
        add_to(e, "count", r->count);
        add_to(e, "bytes_up", r->up);
        add_to(e, "bytes_down", r->down);
}

static bool take_egress(json_object *o, json_object *run)
{
        json_object *entries, *list;

        if (!json_object_object_get_ex(o, "entries", &entries) || !json_object_is_type(entries, json_type_array) ||
            json_object_array_length(entries) > DM_EGRESS_TALLY_MAX + 2)
                return false;
        if (!json_object_object_get_ex(run, "egress_decisions", &list)) {
                list = json_object_new_array();
                json_object_object_add(run, "egress_decisions", list);
        }
        for (size_t i = 0; i < json_object_array_length(entries); i++) {
                struct tally_row r;
                if (row_of(json_object_array_get_idx(entries, i), &r))
                        merge_row(list, &r);
        }
        return true;
}

static bool take_usage(json_object *o, json_object *run)
{
        json_object *v, *u;
        int64_t in, out;
        double usd;

        if (!get_count(o, "input_tokens", (int64_t)DM_LEDGER_TOKENS_MAX, &in) ||
            !get_count(o, "output_tokens", (int64_t)DM_LEDGER_TOKENS_MAX, &out) ||
            !json_object_object_get_ex(o, "cost_usd", &v) ||
            !(json_object_is_type(v, json_type_double) || json_object_is_type(v, json_type_int)))
                return false;
        usd = json_object_get_double(v);
        if (!isfinite(usd) || usd < 0 || usd > DM_LEDGER_USD_MAX)
                return false;
        u = json_object_new_object();
        json_object_object_add(u, "input_tokens", json_object_new_int64(in));
        json_object_object_add(u, "output_tokens", json_object_new_int64(out));
        json_object_object_add(u, "cost_usd", json_object_new_double(usd));
        v = json_object_new_object();
        json_object_object_add(v, "own", u);
        json_object_object_add(run, "usage", v);
        return true;
}

/* A preview's URL as expose.c makes it: http://<IPv4>:<port>/, no code. */
static bool preview_url(const char *u)
{
        size_t n = strlen(u);

        if (strncmp(u, "http://", 7) != 0 || n > 64 || u[n - 1] != '/')
                return false;
        for (size_t i = 7; i + 1 < n; i++)
                if (!((u[i] >= '0' && u[i] <= '9') || u[i] == '.' || u[i] == ':'))
                        return false;
        return n > 9;
}

/* "preview": opened (port, url) or closed (port); run's previews[] kept. */
static bool take_preview(json_object *o, json_object *run)
{
        json_object *v, *list, *keep;
        const char *url = NULL;
        int64_t port;
        bool open;

        if (!get_count(o, "port", 65535, &port) || port == 0 || !json_object_object_get_ex(o, "open", &v) ||
            !json_object_is_type(v, json_type_boolean))
                return false;
        open = json_object_get_boolean(v);
        if (open && !get_word(o, "url", 64, false, &url))
                return false;
        if (url && !preview_url(url))
                return false;
        keep = json_object_new_array();
        if (json_object_object_get_ex(run, "previews", &list))
                for (size_t i = 0; i < json_object_array_length(list); i++) {
                        json_object *e = json_object_array_get_idx(list, i);
                        if (json_object_get_int(json_object_object_get(e, "port")) != port)
                                json_object_array_add(keep, json_object_get(e));
                }
        if (open && json_object_array_length(keep) < DM_ACTIVITY_PREVIEWS_MAX) {
                json_object *e = json_object_new_object();
                json_object_object_add(e, "port", json_object_new_int((int)port));
                json_object_object_add(e, "url", json_object_new_string(url));
                json_object_array_add(keep, e);
        }
        json_object_object_add(run, "previews", keep);
        return true;
}

bool dm_activity_take_extra(const char *event, json_object *o, json_object *run)
{
        if (strcmp(event, "preview") == 0)
                return take_preview(o, run);
        if (strcmp(event, "egress") == 0)
                return take_egress(o, run);
        if (strcmp(event, "usage") == 0)
                return take_usage(o, run);
        return false;
}
