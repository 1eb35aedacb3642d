/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_EGRESS_TALLY_H
#define DM_NETPOLICY_EGRESS_TALLY_H

/* A run's egress decisions, counted where they are made (the egress
 * proxy's and the vendor proxy's threads) and handed to the server in
 * bounded pieces: one entry per (host, port, decision, rule) with a count
 * and byte totals, at most DM_EGRESS_TALLY_MAX distinct entries between two
 * flushes (the rest fold into one "*" entry per decision). So a run that
 * opens 100,000 connections costs at most one flush of
 * DM_EGRESS_TALLY_MAX + 2 entries per interval, whatever it asks for.
 *
 * A flush hands the entries gathered since the last one (a delta: a reader
 * sums them) to the callback, outside the tally's lock: when an add finds
 * the interval passed, and from dm_egress_tally_flush (the server calls it
 * at release). The tally is the host's memory: nothing a sandbox writes
 * reaches it except the names it asks the proxy for, which are normalised
 * and cut here. Thread-safe. */

#include <json-c/json.h>
#include <stdbool.h>
#include <stdint.h>

#define DM_EGRESS_TALLY_MAX 24 /* distinct entries between two flushes */
#define DM_EGRESS_HOST_MAX 253 /* bytes of a host kept (a DNS name's maximum) */
#define DM_EGRESS_RULE_MAX 96  /* bytes of a rule kept */
#define DM_EGRESS_TALLY_INTERVAL_MS 10000

struct dm_egress_tally;

/* entries: a JSON array of {host, port, decision ("allowed" or "refused"),
 * rule, count, bytes_up, bytes_down}, owned by the callee. */
typedef void (*dm_egress_tally_flush_fn)(void *userdata, json_object *entries);

/* A new tally; interval_ms <= 0: flush only when asked. NULL on ENOMEM. */
struct dm_egress_tally *dm_egress_tally_new(int64_t interval_ms, dm_egress_tally_flush_fn fn, void *userdata);
/* Flushes what is left, then frees. NULL is fine. No add may run. */
void dm_egress_tally_free(struct dm_egress_tally *t);

/* One decision: host as asked (normalised: lowercase, [a-z0-9.-_:] kept,
 * others '?', cut at DM_EGRESS_HOST_MAX), port, allowed or refused, the
 * rule that decided ("allow:*.pypi.org", "refused:not-allowed"...), the
 * bytes relayed each way (0 for a refusal). NULL t does nothing. */
void dm_egress_tally_add(struct dm_egress_tally *t, const char *host, uint16_t port, bool allowed, const char *rule,
                         uint64_t up, uint64_t down);

/* The entries since the last flush (NULL when there are none); the tally
 * starts empty again. For tests and dm_egress_tally_flush. */
json_object *dm_egress_tally_take(struct dm_egress_tally *t);

/* Hands the entries since the last flush to the callback, if any. */
void dm_egress_tally_flush(struct dm_egress_tally *t);

#endif
