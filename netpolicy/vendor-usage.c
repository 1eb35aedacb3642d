/* SPDX-License-Identifier: MIT */
/* Token usage: the meter that reads it out of response bodies as they stream
 * by, the price table, the running totals and usage.json. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "netpolicy/vendor-internal.h"
#include "src/basic/cleanup.h"
#include "src/basic/io.h"

#define SSE_LINE_MAX (1024 * 1024)

/* --- the meter ------------------------------------------------------------- */

void dm_vendor_meter_init(struct dm_vendor_meter *m, enum dm_vendor provider, bool sse)
{
        memset(m, 0, sizeof(*m));
        m->provider = provider;
        m->sse = sse;
        dm_buf_init(&m->line, SSE_LINE_MAX);
        dm_buf_init(&m->data, DM_VENDOR_METER_MAX);
}

void dm_vendor_meter_release(struct dm_vendor_meter *m)
{
        json_object_put(m->doc);
        dm_buf_release(&m->line);
        dm_buf_release(&m->data);
        memset(m, 0, sizeof(*m));
}

static json_object *get(json_object *o, const char *key)
{
        json_object *v;

        return o && json_object_object_get_ex(o, key, &v) ? v : NULL;
}

/* A count from the usage object: absent, null or negative count as none. */
static bool count(json_object *usage, const char *key, uint64_t *ret)
{
        json_object *v = get(usage, key);
        int64_t n;

        if (!v || !json_object_is_type(v, json_type_int))
                return false;
        n = json_object_get_int64(v);
        *ret = n > 0 ? (uint64_t)n : 0;
        return true;
}

static void set_model(struct dm_vendor_meter *m, json_object *model)
{
        if (model && json_object_is_type(model, json_type_string))
                snprintf(m->sample.model, sizeof(m->sample.model), "%s", json_object_get_string(model));
}

/* Anthropic's usage object. In message_delta the counts are cumulative for
 * the message, so later values replace earlier ones. */
static void anthropic_usage(struct dm_vendor_meter *m, json_object *usage)
{
        struct dm_vendor_tokens *t = &m->sample.tokens;

        if (!usage)
                return;
        m->found |= count(usage, "input_tokens", &t->input);
        m->found |= count(usage, "output_tokens", &t->output);
        m->found |= count(usage, "cache_read_input_tokens", &t->cache_read);
        m->found |= count(usage, "cache_creation_input_tokens", &t->cache_write);
}

/* OpenAI's: cached tokens are part of input_tokens; they are reported as
 * cache reads and taken out of input so no token is counted twice. */
static void openai_usage(struct dm_vendor_meter *m, json_object *usage)
{
        struct dm_vendor_tokens *t = &m->sample.tokens;
        uint64_t in = 0, out = 0, cached = 0;

        if (!usage)
                return;
        if (!count(usage, "input_tokens", &in) && !count(usage, "prompt_tokens", &in))
                return;
        if (!count(usage, "output_tokens", &out))
                count(usage, "completion_tokens", &out);
        if (!count(get(usage, "input_tokens_details"), "cached_tokens", &cached))
                count(get(usage, "prompt_tokens_details"), "cached_tokens", &cached);
        if (cached > in)
                cached = in;
        t->input = in - cached;
        t->output = out;
        t->cache_read = cached;
        t->cache_write = 0;
        m->found = true;
}

static void on_event(struct dm_vendor_meter *m, json_object *ev)
{
        const char *type = json_object_get_string(get(ev, "type"));

        if (!type)
                return;
        if (m->provider == DM_VENDOR_ANTHROPIC) {
                if (strcmp(type, "message_start") == 0) {
                        json_object *msg = get(ev, "message");
                        set_model(m, get(msg, "model"));
                        anthropic_usage(m, get(msg, "usage"));
                } else if (strcmp(type, "message_delta") == 0) {
                        anthropic_usage(m, get(ev, "usage"));
                }
        } else if (strcmp(type, "response.completed") == 0 || strcmp(type, "response.incomplete") == 0 ||
                   strcmp(type, "response.failed") == 0) {
                json_object *resp = get(ev, "response");
                set_model(m, get(resp, "model"));
                openai_usage(m, get(resp, "usage"));
        }
}

/* The events that carry usage; others are not parsed at all (most of a
 * stream is text deltas). Events without a name are parsed to be safe. */
static bool event_wanted(const struct dm_vendor_meter *m)
{
        static const char *const names[] = { "message_start", "message_delta", "response.completed",
                                             "response.incomplete", "response.failed" };

        if (!m->event[0])
                return true;
        for (size_t i = 0; i < DM_ARRAY_SIZE(names); i++)
                if (strcmp(m->event, names[i]) == 0)
                        return true;
        return false;
}

static void dispatch(struct dm_vendor_meter *m)
{
        if (!m->skip_event && m->data.len > 0 && event_wanted(m)) {
                json_object *ev = json_tokener_parse(m->data.data);
                on_event(m, ev);
                json_object_put(ev);
        }
        dm_buf_reset(&m->data);
        m->event[0] = '\0';
        m->skip_event = false;
}

/* One SSE line (without its end), per the WHATWG event-stream grammar. */
static void sse_line(struct dm_vendor_meter *m, const char *s, size_t n)
{
        const char *colon, *v;
        size_t fl, vl;

        if (n == 0) {
                dispatch(m);
                return;
        }
        if (s[0] == ':')
                return;
        colon = memchr(s, ':', n);
        fl = colon ? (size_t)(colon - s) : n;
        v = colon ? colon + 1 : s + n;
        vl = n - (size_t)(v - s);
        if (vl && *v == ' ')
                v++, vl--;
        if (fl == 5 && memcmp(s, "event", 5) == 0) {
                snprintf(m->event, sizeof(m->event), "%.*s", (int)vl, v);
        } else if (fl == 4 && memcmp(s, "data", 4) == 0 && !m->skip_event) {
                if ((m->data.len && dm_buf_append(&m->data, "\n", 1) < 0) || dm_buf_append(&m->data, v, vl) < 0) {
                        m->skip_event = true;
                        m->broken = true;
                }
        }
}

static void sse_feed(struct dm_vendor_meter *m, const char *p, size_t n)
{
        while (n > 0) {
                const char *nl = memchr(p, '\n', n);
                size_t k = nl ? (size_t)(nl - p) : n;

                if (!m->skip_line && dm_buf_append(&m->line, p, k) < 0) {
                        /* A line beyond the cap cannot be a usage event we
                         * can afford: drop it and the event it belongs to. */
                        m->skip_line = true;
                        m->skip_event = true;
                        m->broken = true;
                }
                if (!nl)
                        return;
                if (!m->skip_line) {
                        size_t len = m->line.len;
                        if (len && m->line.data[len - 1] == '\r')
                                len--;
                        sse_line(m, m->line.data ? m->line.data : "", len);
                }
                dm_buf_reset(&m->line);
                m->skip_line = false;
                p += k + 1;
                n -= k + 1;
        }
}

/* A JSON body is kept (up to the cap) and parsed once, at its end: json-c's
 * incremental parser answers differently for the same bytes cut in other
 * places (fuzz-http-head: '"n":100-' is refused whole but read as 100 when
 * the cut falls inside the number; a '/' after the document left it
 * waiting for a comment to end). */
static void json_feed(struct dm_vendor_meter *m, const char *p, size_t n)
{
        if (m->broken)
                return;
        if (dm_buf_append(&m->data, p, n) < 0) {
                m->broken = true;
                dm_buf_release(&m->data);
        }
}

/* Strict (no comments), and what follows the document is ignored. */
static json_object *json_parse_body(const struct dm_buf *b)
{
        json_tokener *tok = json_tokener_new();
        json_object *o = NULL;

        if (tok && b->len <= INT_MAX) {
                json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
                o = json_tokener_parse_ex(tok, b->data, (int)b->len);
        }
        if (tok)
                json_tokener_free(tok);
        return o;
}

void dm_vendor_meter_feed(struct dm_vendor_meter *m, const char *p, size_t n)
{
        if (m->sse)
                sse_feed(m, p, n);
        else
                /* json-c takes an int length: feed big buffers in slices. */
                while (n > 0) {
                        size_t k = n > (1u << 20) ? (1u << 20) : n;
                        json_feed(m, p, k);
                        p += k;
                        n -= k;
                }
}

int dm_vendor_meter_finish(struct dm_vendor_meter *m, struct dm_vendor_sample *ret)
{
        if (m->sse) {
                /* A stream that ends without a blank line still ends its
                 * last event. */
                if (m->line.len && !m->skip_line)
                        sse_line(m, m->line.data, m->line.len);
                dm_buf_reset(&m->line);
                dispatch(m);
        } else if (!m->broken && m->data.len && (m->doc = json_parse_body(&m->data))) {
                set_model(m, get(m->doc, "model"));
                if (m->provider == DM_VENDOR_ANTHROPIC)
                        anthropic_usage(m, get(m->doc, "usage"));
                else
                        openai_usage(m, get(m->doc, "usage"));
        }
        if (!m->found)
                return 0;
        *ret = m->sample;
        return 1;
}

/* --- prices ---------------------------------------------------------------- */

void dm_vendor_prices_release(struct dm_vendor_prices *p)
{
        if (!p)
                return;
        for (size_t i = 0; i < p->n; i++)
                free(p->v[i].prefix);
        free(p->v);
        memset(p, 0, sizeof(*p));
}

static int price_field(json_object *entry, const char *key, double *ret)
{
        json_object *v = get(entry, key);

        if (!v) {
                *ret = 0;
                return 0;
        }
        if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
                return -EINVAL;
        *ret = json_object_get_double(v);
        return *ret < 0 ? -EINVAL : 0;
}

int dm_vendor_prices_load(const char *path, struct dm_vendor_prices *ret, struct dm_error *err)
{
        struct dm_vendor_prices p = { 0 };
        json_object *doc, *models;
        struct stat st;
        int r = 0;

        if (stat(path, &st) < 0)
                return dm_error_set(err, -errno, "price table '%s': %s", path, strerror(errno));
        if (st.st_size > 4 * 1024 * 1024)
                return dm_error_set(err, -EFBIG, "price table '%s' is larger than 4 MiB", path);
        if (!(doc = json_object_from_file(path)))
                return dm_error_set(err, -EINVAL, "price table '%s' is not valid JSON: %s", path,
                                    json_util_get_last_err());
        models = get(doc, "models");
        if (!models || !json_object_is_type(models, json_type_object)) {
                json_object_put(doc);
                return dm_error_set(err, -EINVAL, "price table '%s' has no \"models\" object", path);
        }
        p.v = calloc((size_t)json_object_object_length(models) + 1, sizeof(*p.v));
        if (!p.v) {
                json_object_put(doc);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        json_object_object_foreach(models, key, entry)
        {
                struct dm_vendor_price *e = &p.v[p.n];

                if (!json_object_is_type(entry, json_type_object) || price_field(entry, "input", &e->input) < 0 ||
                    price_field(entry, "output", &e->output) < 0 ||
                    price_field(entry, "cache_read", &e->cache_read) < 0 ||
                    price_field(entry, "cache_write", &e->cache_write) < 0) {
                        r = dm_error_set(err, -EINVAL, "price table '%s': entry '%s' needs non-negative numbers", path,
                                         key);
                        break;
                }
                if (!(e->prefix = strdup(key))) {
                        r = dm_error_set(err, -ENOMEM, "out of memory");
                        break;
                }
                p.n++;
        }
        json_object_put(doc);
        if (r < 0) {
                dm_vendor_prices_release(&p);
                return r;
        }
        *ret = p;
        return 0;
}

const struct dm_vendor_price *dm_vendor_price_lookup(const struct dm_vendor_prices *p, const char *model)
{
        const struct dm_vendor_price *best = NULL;
        size_t best_len = 0;

        for (size_t i = 0; p && model && i < p->n; i++) {
                size_t l = strlen(p->v[i].prefix);
                if (l >= best_len && l > 0 && strncmp(model, p->v[i].prefix, l) == 0) {
                        best = &p->v[i];
                        best_len = l;
                }
        }
        return best;
}

/* --- totals ---------------------------------------------------------------- */

static void tokens_add(struct dm_vendor_tokens *t, const struct dm_vendor_tokens *s, double cost)
{
        t->input += s->input;
        t->output += s->output;
        t->cache_read += s->cache_read;
        t->cache_write += s->cache_write;
        t->requests++;
        t->cost_usd += cost;
}

int dm_vendor_usage_add(struct dm_vendor_usage *u, const struct dm_vendor_prices *p, const struct dm_vendor_sample *s)
{
        const char *model = s->model[0] ? s->model : "unknown";
        const struct dm_vendor_price *price = dm_vendor_price_lookup(p, s->model[0] ? s->model : NULL);
        struct dm_vendor_model_usage *m = NULL;
        double cost = 0;

        for (size_t i = 0; i < u->n_models && !m; i++)
                if (strcmp(u->models[i].model, model) == 0)
                        m = &u->models[i];
        if (!m) {
                struct dm_vendor_model_usage *v = realloc(u->models, (u->n_models + 1) * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                u->models = v;
                m = &v[u->n_models];
                memset(m, 0, sizeof(*m));
                if (!(m->model = strdup(model)))
                        return -ENOMEM;
                m->priced = price != NULL;
                u->n_models++;
        }
        if (price)
                cost = ((double)s->tokens.input * price->input + (double)s->tokens.output * price->output +
                        (double)s->tokens.cache_read * price->cache_read +
                        (double)s->tokens.cache_write * price->cache_write) /
                       1e6;
        tokens_add(&m->tokens, &s->tokens, cost);
        tokens_add(&u->total, &s->tokens, cost);
        return 0;
}

void dm_vendor_usage_release(struct dm_vendor_usage *u)
{
        if (!u)
                return;
        for (size_t i = 0; i < u->n_models; i++)
                free(u->models[i].model);
        free(u->models);
        memset(u, 0, sizeof(*u));
}

int dm_vendor_usage_copy(struct dm_vendor_usage *dst, const struct dm_vendor_usage *src)
{
        memset(dst, 0, sizeof(*dst));
        dst->total = src->total;
        if (src->n_models == 0)
                return 0;
        if (!(dst->models = calloc(src->n_models, sizeof(*dst->models))))
                return -ENOMEM;
        for (size_t i = 0; i < src->n_models; i++) {
                dst->models[i] = src->models[i];
                if (!(dst->models[i].model = strdup(src->models[i].model))) {
                        dst->n_models = i;
                        dm_vendor_usage_release(dst);
                        return -ENOMEM;
                }
        }
        dst->n_models = src->n_models;
        return 0;
}

static void tokens_json(json_object *o, const struct dm_vendor_tokens *t)
{
        char cost[48];

        json_object_object_add(o, "input_tokens", json_object_new_int64((int64_t)t->input));
        json_object_object_add(o, "output_tokens", json_object_new_int64((int64_t)t->output));
        json_object_object_add(o, "cache_read_tokens", json_object_new_int64((int64_t)t->cache_read));
        json_object_object_add(o, "cache_write_tokens", json_object_new_int64((int64_t)t->cache_write));
        /* Rounded to a millionth of a dollar: no float noise in the file. */
        snprintf(cost, sizeof(cost), "%.6f", t->cost_usd);
        json_object_object_add(o, "cost_usd", json_object_new_double_s(strtod(cost, NULL), cost));
        json_object_object_add(o, "requests", json_object_new_int64((int64_t)t->requests));
}

json_object *dm_vendor_usage_json(const struct dm_vendor_usage *u)
{
        json_object *o = json_object_new_object(), *per = json_object_new_object();

        if (!o || !per) {
                json_object_put(o);
                json_object_put(per);
                return NULL;
        }
        tokens_json(o, &u->total);
        for (size_t i = 0; i < u->n_models; i++) {
                json_object *m = json_object_new_object();
                if (!m)
                        break;
                tokens_json(m, &u->models[i].tokens);
                json_object_object_add(m, "priced", json_object_new_boolean(u->models[i].priced));
                json_object_object_add(per, u->models[i].model, m);
        }
        json_object_object_add(o, "per_model", per);
        return o;
}

int dm_vendor_usage_write(const struct dm_vendor_usage *u, const char *path, struct dm_error *err)
{
        json_object *o = dm_vendor_usage_json(u);
        _cleanup_free_ char *text = NULL;
        const char *base;
        int dirfd, r;

        if (!o || asprintf(&text, "%s\n",
                           json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                                     JSON_C_TO_STRING_NOSLASHESCAPE)) < 0) {
                json_object_put(o);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        json_object_put(o);
        /* usage.json is in the agent's /out, written under the proxy's lock:
         * a fresh randomly named temporary file (O_EXCL, no link followed,
         * no FIFO opened), renamed over whatever the sandbox left there. */
        dirfd = dm_io_open_parent(path, &base);
        r = dirfd < 0 ? dirfd : dm_io_replace(dirfd, base, text, strlen(text), 0644);
        if (dirfd >= 0)
                close(dirfd);
        if (r < 0)
                return dm_error_set(err, r, "cannot write '%s': %s", path, dm_io_strerror(r));
        return 0;
}

/* --- the spending gate ---------------------------------------------------- */

enum dm_vendor_gate_verdict dm_vendor_gate_enter(struct dm_vendor_gate *g, double spent)
{
        if (g->cap <= 0) {
                g->in_flight++;
                return DM_VENDOR_GATE_GO;
        }
        if (!(spent < g->cap))
                return DM_VENDOR_GATE_CAPPED;
        if (g->responses == 0 && g->largest <= 0 ? g->in_flight == 0
                                                 : spent + (double)(g->in_flight + 1) * g->largest < g->cap) {
                g->in_flight++;
                return DM_VENDOR_GATE_GO;
        }
        return g->in_flight > 0 ? DM_VENDOR_GATE_WAIT : DM_VENDOR_GATE_CAPPED;
}

void dm_vendor_gate_leave(struct dm_vendor_gate *g, bool priced, double cost)
{
        if (g->in_flight > 0)
                g->in_flight--;
        if (!priced)
                return;
        g->responses++;
        if (cost > g->largest)
                g->largest = cost;
}
