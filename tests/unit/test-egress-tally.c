/* SPDX-License-Identifier: MIT */
/* A run's egress decisions (netpolicy/egress-tally.h) and the journal's
 * "egress" and "usage" lines (src/core/activity-egress.c): a run that
 * opens 100,000 connections to as many hosts leaves one bounded line per
 * flush, counts and bytes add up, concurrent proxy threads lose nothing, a
 * reader sums the deltas per (host, port, decision, rule), keeps at most
 * DM_ACTIVITY_EGRESS_MAX entries per run and skips every entry it cannot
 * trust. */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/egress-tally.h"
#include "netpolicy/proxy-internal.h"
#include "src/basic/cleanup.h"
#include "src/core/activity.h"
#include "tests/tap.h"

static int64_t sum_of(json_object *arr, const char *key)
{
        int64_t n = 0;

        for (size_t i = 0; arr && i < json_object_array_length(arr); i++)
                n += json_object_get_int64(json_object_object_get(json_object_array_get_idx(arr, i), key));
        return n;
}

static json_object *entry(json_object *arr, const char *host, const char *decision)
{
        for (size_t i = 0; arr && i < json_object_array_length(arr); i++) {
                json_object *e = json_object_array_get_idx(arr, i);
                if (strcmp(json_object_get_string(json_object_object_get(e, "host")), host) == 0 &&
                    strcmp(json_object_get_string(json_object_object_get(e, "decision")), decision) == 0)
                        return e;
        }
        return NULL;
}

static void test_aggregate(void)
{
        struct dm_egress_tally *t = dm_egress_tally_new(0, NULL, NULL);
        json_object *arr, *e;

        dm_egress_tally_add(t, "Files.PythonHosted.org", 443, true, "allow:*.pythonhosted.org", 100, 2000);
        dm_egress_tally_add(t, "files.pythonhosted.org", 443, true, "allow:*.pythonhosted.org", 50, 1000);
        dm_egress_tally_add(t, "evil.example", 443, false, "refused:not-allowed", 0, 0);
        dm_egress_tally_add(t, "a\"b<script>\n", 80, false, "refused:not-allowed", 0, 0);
        arr = dm_egress_tally_take(t);
        is_int(arr ? json_object_array_length(arr) : 0, 3, "one entry per (host, port, decision, rule)");
        e = entry(arr, "files.pythonhosted.org", "allowed");
        ok(e && json_object_get_int(json_object_object_get(e, "count")) == 2 &&
                   json_object_get_int(json_object_object_get(e, "bytes_up")) == 150 &&
                   json_object_get_int(json_object_object_get(e, "bytes_down")) == 3000,
           "the same host, any case, counted twice with its bytes summed");
        ok(entry(arr, "a?b?script??", "refused") != NULL, "what is not a name's character is kept as '?'");
        json_object_put(arr);
        ok(dm_egress_tally_take(t) == NULL, "taken: the tally starts empty");
        dm_egress_tally_free(t);
}

static void test_bounded(void)
{
        struct dm_egress_tally *t = dm_egress_tally_new(0, NULL, NULL);
        char host[DM_EGRESS_HOST_MAX + 64], rule[DM_EGRESS_RULE_MAX + 64];
        _cleanup_free_ char *line = NULL;
        size_t len = 0;
        json_object *arr, *other;

        memset(rule, 'r', sizeof(rule) - 1);
        rule[sizeof(rule) - 1] = '\0';
        for (int i = 0; i < 100000; i++) {
                /* Names longer than any DNS name, each one different. */
                memset(host, 'h', sizeof(host) - 1);
                host[sizeof(host) - 1] = '\0';
                snprintf(host, 12, "%08d.", i);
                host[strlen(host)] = 'x';
                dm_egress_tally_add(t, host, (uint16_t)(i % 65536), i % 2, rule, 10, 20);
        }
        arr = dm_egress_tally_take(t);
        ok(arr && json_object_array_length(arr) <= DM_EGRESS_TALLY_MAX + 2, "100,000 hosts: %zu entries kept",
           arr ? json_object_array_length(arr) : 0);
        is_int(sum_of(arr, "count"), 100000, "every connection counted");
        is_int(sum_of(arr, "bytes_down"), 2000000, "every byte counted");
        other = entry(arr, "*", "refused");
        ok(other && json_object_get_int(json_object_object_get(other, "count")) > 40000,
           "the rest in one '*' entry per decision");
        ok(strlen(json_object_get_string(json_object_object_get(json_object_array_get_idx(arr, 0), "host"))) ==
                   DM_EGRESS_HOST_MAX,
           "a host is cut at %d bytes", DM_EGRESS_HOST_MAX);
        int r = dm_activity_format(&(struct dm_activity_event){ .event = "egress", .id = "run-1", .entries = arr },
                                   &line, &len);
        ok(r == 0 && len <= DM_ACTIVITY_LINE_MAX, "the largest flush is one journal line (%zu bytes)", len);
        json_object_put(arr);
        dm_egress_tally_free(t);
}

/* What the flushes handed over: the callback runs on the adders' threads. */
static _Atomic int64_t flushed_count;
static atomic_int flushed_calls;

static void on_flush(void *userdata, json_object *entries)
{
        (void)userdata;
        flushed_count += sum_of(entries, "count");
        flushed_calls++;
        json_object_put(entries);
}

static void *adder(void *arg)
{
        char host[32];

        for (int i = 0; i < 20000; i++) {
                snprintf(host, sizeof(host), "h%d.example", i % 50);
                dm_egress_tally_add(arg, host, 443, true, "allow:*.example", 1, 1);
        }
        return NULL;
}

static void test_threads_and_flush(void)
{
        struct dm_egress_tally *t = dm_egress_tally_new(1, on_flush, NULL);
        pthread_t th[4];

        for (int i = 0; i < 4; i++)
                pthread_create(&th[i], NULL, adder, t);
        for (int i = 0; i < 4; i++)
                pthread_join(th[i], NULL);
        dm_egress_tally_free(t); /* the last flush */
        is_int(flushed_count, 80000, "four proxy threads at once: nothing lost across %d flushes", (int)flushed_calls);
        ok(flushed_calls >= 1, "flushed on the interval and at free");

        flushed_calls = 0;
        t = dm_egress_tally_new(0, on_flush, NULL);
        dm_egress_tally_free(t);
        is_int(flushed_calls, 0, "nothing counted, no line");
}

static void test_reader(void)
{
        struct dm_activity_stats st = { 0 };
        json_object *runs = json_object_new_object(), *run, *list, *e, *u;
        char text[8192];
        int n = 0;

        n += snprintf(text + n, sizeof(text) - n,
                      "{\"event\":\"start\",\"id\":\"run-a\",\"kind\":\"run\",\"egress\":\"allow\",\"time_ms\":1}\n");
        for (int i = 0; i < 2; i++)
                n += snprintf(text + n, sizeof(text) - n,
                              "{\"event\":\"egress\",\"id\":\"run-a\",\"time_ms\":2,\"entries\":["
                              "{\"host\":\"ok.test\",\"port\":8080,\"decision\":\"allowed\",\"rule\":\"allow:ok.test\","
                              "\"count\":2,\"bytes_up\":10,\"bytes_down\":100},"
                              "{\"host\":\"no.test\",\"port\":8080,\"decision\":\"refused\",\"rule\":"
                              "\"refused:not-allowed\",\"count\":1,\"bytes_up\":0,\"bytes_down\":0},"
                              "{\"host\":\"neg.test\",\"port\":1,\"decision\":\"allowed\",\"rule\":\"x\",\"count\":-5,"
                              "\"bytes_up\":0,\"bytes_down\":0},"
                              "{\"host\":\"bad.test\",\"port\":1,\"decision\":\"maybe\",\"rule\":\"x\",\"count\":1,"
                              "\"bytes_up\":0,\"bytes_down\":0},"
                              "{\"host\":\"port.test\",\"port\":70000,\"decision\":\"allowed\",\"rule\":\"x\","
                              "\"count\":1,\"bytes_up\":0,\"bytes_down\":0},"
                              "\"not an object\"]}\n");
        n += snprintf(text + n, sizeof(text) - n, "{\"event\":\"egress\",\"id\":\"run-a\",\"time_ms\":3}\n");
        n += snprintf(text + n, sizeof(text) - n,
                      "{\"event\":\"usage\",\"id\":\"run-a\",\"time_ms\":4,\"input_tokens\":12,\"output_tokens\":"
                      "34,\"cost_usd\":0.5}\n"
                      "{\"event\":\"usage\",\"id\":\"run-b\",\"time_ms\":4,\"input_tokens\":-1,\"output_tokens\":"
                      "34,\"cost_usd\":0.5}\n"
                      "{\"event\":\"usage\",\"id\":\"run-c\",\"time_ms\":4,\"input_tokens\":1,\"output_tokens\":"
                      "1,\"cost_usd\":1e300}\n");
        dm_activity_parse(text, (size_t)n, "j.jsonl", runs, &st);
        is_int(st.lines, 4, "start, two egress lines and a usage line taken");
        is_int(st.skipped, 3, "an egress line without entries and two usage lines with impossible figures skipped");
        run = json_object_object_get(runs, "run-a");
        list = json_object_object_get(run, "egress_decisions");
        is_int(list ? json_object_array_length(list) : 0, 2, "only the entries that check out");
        e = entry(list, "ok.test", "allowed");
        ok(e && json_object_get_int(json_object_object_get(e, "count")) == 4 &&
                   json_object_get_int(json_object_object_get(e, "bytes_down")) == 200 &&
                   strcmp(json_object_get_string(json_object_object_get(e, "rule")), "allow:ok.test") == 0,
           "the deltas of two lines summed, with the rule");
        ok(entry(list, "no.test", "refused") != NULL, "the refusal kept");
        is_str(json_object_get_string(json_object_object_get(run, "egress")), "allow",
               "the mode string stays as it was");
        u = json_object_object_get(json_object_object_get(run, "usage"), "own");
        ok(u && json_object_get_int(json_object_object_get(u, "input_tokens")) == 12 &&
                   json_object_get_int(json_object_object_get(u, "output_tokens")) == 34 &&
                   json_object_get_double(json_object_object_get(u, "cost_usd")) == 0.5,
           "the run's own tokens and cost");
        json_object_put(runs);
}

/* A nested caller's run names its parent by its principal, as the ledger does. */
static void test_parent_of_nested(void)
{
        _cleanup_free_ char *line = NULL;
        size_t len = 0;

        dm_activity_format(&(struct dm_activity_event){ .event = "start", .id = "sbx-1", .principal = "local/run-p" },
                           &line, &len);
        ok(line && strstr(line, "\"parent_id\":\"run-p\""), "a nested principal's leaf is the parent");
}

static void test_reader_bounded(void)
{
        struct dm_activity_stats st = { 0 };
        json_object *runs = json_object_new_object(), *list;
        char line[1024];

        for (int i = 0; i < 3 * DM_ACTIVITY_EGRESS_MAX; i++) {
                int n = snprintf(line, sizeof(line),
                                 "{\"event\":\"egress\",\"id\":\"run-z\",\"time_ms\":2,\"entries\":["
                                 "{\"host\":\"h%d.test\",\"port\":443,\"decision\":\"refused\",\"rule\":"
                                 "\"refused:not-allowed\",\"count\":1,\"bytes_up\":0,\"bytes_down\":0}]}\n",
                                 i);
                dm_activity_parse(line, (size_t)n, "j.jsonl", runs, &st);
        }
        list = json_object_object_get(json_object_object_get(runs, "run-z"), "egress_decisions");
        ok(list && json_object_array_length(list) <= DM_ACTIVITY_EGRESS_MAX, "a reader keeps at most %d entries",
           DM_ACTIVITY_EGRESS_MAX);
        is_int(sum_of(list, "count"), 3 * DM_ACTIVITY_EGRESS_MAX, "and counts every decision");
        json_object_put(runs);
}

/* The rule a decision is recorded with is the one that decided it. */
static void test_rules(void)
{
        struct dm_proxy_policy p;
        struct dm_proxy_verdict v;
        struct dm_error err = { 0 };
        struct in_addr lit;
        char name[256];

        dm_proxy_policy_init(&p);
        dm_proxy_policy_add_entry(&p, "*.pypi.org", &err);
        dm_proxy_policy_add_entry(&p, "api.test:8443", &err);
        dm_proxy_policy_add_entry(&p, "203.0.113.0/24:80", &err);
        dm_proxy_policy_add_web_host(&p, "deb.debian.org", &err);
#define RULE(host, port, connect)  \
        (memset(&v, 0, sizeof(v)), \
         dm_proxy_verdict_rule(&v, dm_proxy_check_target(&p, host, port, connect, name, &lit, &v) >= 0))
        is_str(RULE("files.pypi.org", 443, true), "allow:*.pypi.org", "a wildcard rule by its pattern");
        is_str(RULE("api.test", 8443, true), "allow:api.test:8443", "a host:port rule with its port");
        is_str(RULE("203.0.113.9", 80, true), "allow:203.0.113.0/24:80", "a CIDR rule as written");
        is_str(RULE("deb.debian.org", 443, true), "package:deb.debian.org", "a package host");
        is_str(RULE("evil.test", 443, true), "refused:not-allowed", "a host on no list");
        is_str(RULE("api.test", 22, true), "refused:port-not-allowed", "a port the rule does not give");
        is_str(RULE("198.51.100.1", 443, true), "refused:ip-literal", "an address no CIDR covers");
        is_str(RULE("192.168.1.1", 80, true), "blocked:private-range", "a private address");
        is_str(RULE("127.0.0.1", 80, true), "blocked:loopback", "loopback");
        is_str(RULE("169.254.169.254", 80, true), "blocked:link-local", "the metadata service's range");
        is_str(RULE("[::1]", 80, true), "blocked:ipv6", "IPv6");
#undef RULE
        dm_proxy_policy_release(&p);
}

int main(void)
{
        test_rules();
        test_aggregate();
        test_bounded();
        test_threads_and_flush();
        test_reader();
        test_reader_bounded();
        test_parent_of_nested();
        return done_testing();
}
