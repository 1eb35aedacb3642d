/* SPDX-License-Identifier: MIT */
/* Load on both MCP transports, bounded so it runs in every `make check`
 * (and so under ASan and TSan through tests/run.sh):
 *
 *   HTTP: a burst of tools/list (and a few sandbox_script) in the first
 *   second after start, then
 *   thousands of requests over 64 connections at once: tools/list in both
 *   eras, sandbox_status and sandbox_wait on a running job, short
 *   sandbox_script runs, background jobs that are cancelled, and clients
 *   that hang up while their SSE answer streams. Every answer is checked,
 *   the server must live through it, leave no container behind, hold its
 *   memory (RSS grows by at most a few MiB over a second round after the
 *   main one, when malloc's arenas have filled) and
 *   exit 0 on SIGTERM.
 *
 *   stdio: the same mix pipelined on one session, 64 requests in flight,
 *   with notifications/cancelled for some calls while they run; then EOF.
 *
 * Only loopback addresses are used. */
#include "config.h"

#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>

#include "src/basic/paths.h"
#include "tests/integration/common.h"
#include "tests/integration/http-client.h"
#include "tests/tap.h"
#include "tests/integration/engine-env.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

/* ThreadSanitizer makes every thread start and every lock many times
 * dearer (the server starts a thread per connection): its run does a
 * quarter of the requests, at the same concurrency, to stay well under two
 * minutes on two cores. The start-up burst is the incident's, always. */
#if defined(__SANITIZE_THREAD__)
#define SCALE 4
#else
#define SCALE 1
#endif
#define CONC 64
#define EARLY_N 600
#define EARLY_CONC 50
#define WARM_N (1000 / SCALE)
#define HTTP_N (5000 / SCALE)
#define STDIO_N (2000 / SCALE)
/* One request in CONTAINER_EVERY of each container kind: a container costs
 * ~0.5 s of the engine's time, everything else milliseconds. */
#define CONTAINER_EVERY 200
#define RSS_SLACK_KB (8 * 1024)

#define CT "Content-Type: application/json\r\n"
#define ACCEPT_BOTH "Accept: application/json, text/event-stream\r\n"
#define MODERN_META                                                              \
        "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
        "\"io.modelcontextprotocol/clientCapabilities\":{}}"
#define MODERN_HDRS CT ACCEPT_BOTH "MCP-Protocol-Version: 2026-07-28\r\n"
#define INIT_BODY                                                                                                 \
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-11-25\"," \
        "\"capabilities\":{},\"clientInfo\":{\"name\":\"test-http-load\",\"version\":\"1\"}}}"

enum op {
        OP_LIST,        /* 2026-07-28 tools/list, a JSON answer */
        OP_LEGACY,      /* initialize, tools/list in the session, DELETE */
        OP_STATUS,      /* sandbox_status of the long job: an SSE answer */
        OP_WAIT_DROP,   /* sandbox_wait on the long job; hang up mid-stream */
        OP_SCRIPT,      /* sandbox_script 'echo N' */
        OP_JOB,         /* background sandbox_script, sandbox_status, sandbox_cancel */
        OP_SCRIPT_DROP, /* sandbox_script 'sleep 8'; hang up while it runs */
        OP_N
};
static const char *const op_name[OP_N] = {
        "tools/list",     "legacy session",           "sandbox_status",        "sandbox_wait dropped",
        "sandbox_script", "background job cancelled", "sandbox_script dropped"
};

static enum op op_for(int i, bool containers)
{
        if (containers && i % CONTAINER_EVERY == 7)
                return OP_SCRIPT;
        if (containers && i % CONTAINER_EVERY == 77)
                return OP_JOB;
        if (containers && i % CONTAINER_EVERY == 147)
                return OP_SCRIPT_DROP;
        if (i % 10 == 3)
                return OP_WAIT_DROP;
        if (i % 10 == 5)
                return OP_STATUS;
        if (i % 25 == 11)
                return OP_LEGACY;
        return OP_LIST;
}

static __thread char why[128]; /* what the last failed step saw */
static size_t n_tools;         /* what tools/list says, learnt once */
static char long_job[64];      /* a background job that runs through the load */

/* ---- one HTTP exchange ------------------------------------------------------ */

struct worker {
        struct hc *c;
        const char *src; /* client address: the per-IP limit is the server's default */
};

static int call_tool_hdrs(char *hdrs, size_t n, const char *tool)
{
        return snprintf(hdrs, n, MODERN_HDRS "Mcp-Method: tools/call\r\nMcp-Name: %s\r\n", tool);
}

/* Sends a tools/call (2026-07-28) and reads the answer head. */
static int start_tool(struct worker *w, struct hresp *r, const char *tool, const char *args)
{
        char hdrs[512], *body = NULL;
        int ret = -1;

        memset(r, 0, sizeof(*r));
        call_tool_hdrs(hdrs, sizeof(hdrs), tool);
        if (asprintf(&body,
                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                     "\"arguments\":%s," MODERN_META "}}",
                     tool, args) < 0)
                return -1;
        if (hc_connect(w->c, w->src) < 0)
                snprintf(why, sizeof(why), "%s: connect: %s", tool, strerror(errno));
        else if (hc_request(w->c, "POST", hdrs, body) < 0)
                snprintf(why, sizeof(why), "%s: send: %s", tool, strerror(errno));
        else if ((ret = hc_read_head(w->c, r, 120000)) < 0)
                snprintf(why, sizeof(why), "%s: no answer (%s)", tool, strerror(errno));
        else if (r->status != 200)
                snprintf(why, sizeof(why), "%s: HTTP %d", tool, r->status);
        free(body);
        return ret;
}

/* The tools/call result's structuredContent (a new reference), or NULL. */
static json_object *tool_result(struct worker *w, const char *tool, const char *args)
{
        struct hresp r;
        json_object *m = NULL, *sc = NULL;

        if (start_tool(w, &r, tool, args) == 0 && r.status == 200) {
                while ((m = hc_next_event(w->c, &r, 120000)) && !jget(m, "result", NULL, NULL) &&
                       !jget(m, "error", NULL, NULL))
                        json_object_put(m);
                /* A JSON answer (the call ended before the stream began). */
                if (!m && !strstr(r.head, "text/event-stream") && hc_read_body(w->c, &r, 1000) == 0)
                        m = hresp_json(&r);
        }
        if (m && (sc = jget(m, "result", "structuredContent", NULL)))
                json_object_get(sc);
        json_object_put(m);
        hresp_release(&r);
        hc_close(w->c);
        return sc;
}

static bool tools_list_ok(json_object *m)
{
        json_object *tools = jget(m, "result", "tools", NULL);
        return tools && json_object_is_type(tools, json_type_array) && json_object_array_length(tools) == n_tools;
}

static int exchange(struct worker *w, const char *method, const char *hdrs, const char *body, struct hresp *r)
{
        int ret = -1;

        memset(r, 0, sizeof(*r));
        if (hc_connect(w->c, w->src) < 0)
                snprintf(why, sizeof(why), "%s: connect: %s", method, strerror(errno));
        else if (hc_request(w->c, method, hdrs, body) < 0)
                snprintf(why, sizeof(why), "%s: send: %s", method, strerror(errno));
        else if (hc_read_head(w->c, r, 60000) < 0)
                snprintf(why, sizeof(why), "%s: no answer (%s)", method, strerror(errno));
        else if ((ret = hc_read_body(w->c, r, 60000)) < 0)
                snprintf(why, sizeof(why), "%s: body incomplete (HTTP %d)", method, r->status);
        else if (r->status / 100 != 2)
                snprintf(why, sizeof(why), "%s: HTTP %d", method, r->status);
        hc_close(w->c);
        return ret;
}

static bool do_list(struct worker *w)
{
        static const char body[] =
                "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}";
        struct hresp r;
        json_object *m = NULL;
        bool good;

        if (exchange(w, "POST", MODERN_HDRS "Mcp-Method: tools/list\r\n", body, &r) == 0 && r.status == 200)
                m = hresp_json(&r);
        good = tools_list_ok(m);
        if (!good && r.status == 200)
                snprintf(why, sizeof(why), "tools/list: %.100s", r.body ? r.body : "(no body)");
        json_object_put(m);
        hresp_release(&r);
        return good;
}

static bool do_legacy(struct worker *w)
{
        struct hresp r;
        char sid[64] = "", hdrs[512];
        json_object *m = NULL;
        bool good;

        good = exchange(w, "POST", CT ACCEPT_BOTH, INIT_BODY, &r) == 0 && r.status == 200 &&
               hresp_header(&r, "Mcp-Session-Id", sid, sizeof(sid));
        hresp_release(&r);
        if (!good)
                return false;
        snprintf(hdrs, sizeof(hdrs), CT ACCEPT_BOTH "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\n", sid);
        if (exchange(w, "POST", hdrs, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}", &r) == 0 &&
            r.status == 200)
                m = hresp_json(&r);
        good = tools_list_ok(m);
        json_object_put(m);
        hresp_release(&r);
        good = exchange(w, "DELETE", hdrs, NULL, &r) == 0 && r.status / 100 == 2 && good;
        hresp_release(&r);
        return good;
}

/* Starts a call whose answer streams, then hangs up once the stream began. */
static bool do_drop(struct worker *w, const char *tool, const char *args)
{
        struct hresp r;
        bool good = start_tool(w, &r, tool, args) == 0 && r.status == 200 && strstr(r.head, "text/event-stream");

        hresp_release(&r);
        hc_close(w->c);
        return good;
}

static bool do_status(struct worker *w)
{
        char args[128];
        json_object *sc;
        bool good;

        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", long_job);
        sc = tool_result(w, "sandbox_status", args);
        good = strcmp(jstr(sc, "status", NULL, NULL), "running") == 0;
        json_object_put(sc);
        return good;
}

static bool do_script(struct worker *w, int i)
{
        char args[128], want[32];
        json_object *sc;
        bool good;

        snprintf(args, sizeof(args), "{\"command\":\"echo %d\",\"image\":\"base\",\"egress\":\"none\"}", i);
        snprintf(want, sizeof(want), "%d\n", i);
        sc = tool_result(w, "sandbox_script", args);
        good = sc && json_object_get_int(jget(sc, "exit_code", NULL, NULL)) == 0 &&
               strcmp(jstr(sc, "stdout", NULL, NULL), want) == 0;
        json_object_put(sc);
        return good;
}

static bool do_job(struct worker *w)
{
        char args[128], id[64];
        json_object *sc;
        bool good;

        sc = tool_result(w, "sandbox_script",
                         "{\"command\":\"sleep 30\",\"image\":\"base\",\"egress\":\"none\",\"background\":true}");
        snprintf(id, sizeof(id), "%s", jstr(sc, "job_id", NULL, NULL));
        json_object_put(sc);
        if (!id[0])
                return false;
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", id);
        sc = tool_result(w, "sandbox_status", args);
        good = sc != NULL;
        json_object_put(sc);
        sc = tool_result(w, "sandbox_cancel", args);
        good = good && strcmp(jstr(sc, "status", NULL, NULL), "cancelled") == 0;
        json_object_put(sc);
        return good;
}

static bool run_op(struct worker *w, enum op op, int i)
{
        char args[160];

        switch (op) {
        case OP_LIST: return do_list(w);
        case OP_LEGACY: return do_legacy(w);
        case OP_STATUS: return do_status(w);
        case OP_WAIT_DROP:
                snprintf(args, sizeof(args), "{\"job_id\":\"%s\",\"timeout_seconds\":30}", long_job);
                return do_drop(w, "sandbox_wait", args);
        case OP_SCRIPT: return do_script(w, i);
        case OP_JOB: return do_job(w);
        case OP_SCRIPT_DROP:
                /* Long enough to be running when the client hangs up (300 ms
                 * on), short enough that the end's wait for the server's
                 * containers is not mostly this sleep: the server sees a
                 * hang-up when it next writes to the stream (a keepalive every
                 * 15 s) and cancels then, so until then the run goes on. */
                return do_drop(w, "sandbox_script", "{\"command\":\"sleep 8\",\"image\":\"base\",\"egress\":\"none\"}");
        default: return false;
        }
}

/* ---- a phase: n requests over conc connections -------------------------------- */

struct phase {
        int n, conc;
        bool containers, early;
        atomic_int next;
        atomic_int tried[OP_N], good[OP_N];
        char first_bad[OP_N][160];
        pthread_mutex_t lock;
};

static void *phase_main(void *arg)
{
        static const char *const srcs[] = { "127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4" };
        struct phase *p = arg;
        struct worker w = { .c = malloc(sizeof(struct hc)) };
        int i;

        if (!w.c)
                return NULL;
        w.c->fd = -1;
        while ((i = atomic_fetch_add(&p->next, 1)) < p->n) {
                /* At start: tools/list as in the incident, and a few calls
                 * while the server still finds its engine. */
                enum op op = p->early ? (i % 50 == 25 ? OP_SCRIPT : OP_LIST) : op_for(i, p->containers);
                bool good;

                w.src = srcs[i % 4];
                good = run_op(&w, op, i);
                atomic_fetch_add(&p->tried[op], 1);
                if (good) {
                        atomic_fetch_add(&p->good[op], 1);
                } else {
                        pthread_mutex_lock(&p->lock);
                        if (!p->first_bad[op][0])
                                snprintf(p->first_bad[op], sizeof(p->first_bad[op]), "request %d: %s", i, why);
                        pthread_mutex_unlock(&p->lock);
                }
        }
        free(w.c);
        return NULL;
}

static int64_t run_phase(struct phase *p)
{
        pthread_t th[CONC];
        int64_t t0 = dm_now_ms();
        int started = 0;

        pthread_mutex_init(&p->lock, NULL);
        for (int k = 0; k < p->conc && k < CONC; k++)
                if (pthread_create(&th[k], NULL, phase_main, p) == 0)
                        started++;
        for (int k = 0; k < started; k++)
                pthread_join(th[k], NULL);
        pthread_mutex_destroy(&p->lock);
        return dm_now_ms() - t0;
}

static void report_phase(const char *name, struct phase *p, int64_t ms)
{
        diag("%s: %d requests over %d connections in %lld ms", name, p->n, p->conc, (long long)ms);
        for (int op = 0; op < OP_N; op++)
                if (p->tried[op])
                        ok(p->good[op] == p->tried[op], "%s: %s: %d of %d answered right%s%s", name, op_name[op],
                           p->good[op], p->tried[op], p->first_bad[op][0] ? ", first wrong: " : "", p->first_bad[op]);
}

/* ---- the server ------------------------------------------------------------------ */

static long rss_kb(pid_t pid)
{
        char path[64], line[256];
        long kb = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        f = fopen(path, "r");
        while (f && fgets(line, sizeof(line), f))
                if (strncmp(line, "VmRSS:", 6) == 0)
                        kb = atol(line + 6);
        if (f)
                fclose(f);
        return kb;
}

static bool alive(pid_t pid)
{
        int status;
        return waitpid(pid, &status, WNOHANG) == 0;
}

/* Waits until the server's thread count settles (streams closed, calls
 * ended) so that RSS compares like with like. */
static void settle(pid_t pid)
{
        char path[64], line[256];
        long last = -1, n = 0;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        for (int i = 0; i < 100; i++) {
                FILE *f = fopen(path, "r");
                while (f && fgets(line, sizeof(line), f))
                        if (strncmp(line, "Threads:", 8) == 0)
                                n = atol(line + 8);
                if (f)
                        fclose(f);
                if (n == last)
                        break;
                last = n;
                usleep(300 * 1000);
        }
}

static void http_load(struct dm_backend *b)
{
        struct server s = { 0 };
        struct worker w = { .c = malloc(sizeof(struct hc)), .src = "127.0.0.1" };
        struct phase early = { .n = EARLY_N, .conc = EARLY_CONC, .early = true };
        /* Every kind of request, containers too, before RSS is measured. */
        struct phase warm = { .n = WARM_N, .conc = CONC, .containers = true };
        struct phase main_ = { .n = HTTP_N, .conc = CONC, .containers = true };
        /* A second round after the main one: malloc's per-thread arenas
         * and caches fill during the first rounds and then hold, so what
         * still grows over this one is a leak. */
        struct phase again = { .n = WARM_N * 2, .conc = CONC, .containers = true };
        char log[PATH_MAX], cancel_args[128];
        long rss_warm, rss_mid, rss_after;
        int64_t ms, t0;
        json_object *sc;

        snprintf(log, sizeof(log), "%s/http-server.log", test_root);
        t0 = dm_now_ms();
        /* Connections the client closed count against the limits until
         * the server's thread for them has ended, which on a loaded
         * machine can take a moment; the limits themselves are
         * test-http-hostile's business, so they are out of the way here. */
        static const char *const args[] = { "--max-connections", "512", "--max-connections-per-ip", "512", NULL };

        if (server_start(&s, log, args, NULL) < 0 || !s.auth[0]) {
                ok(0, "demesne serve --http starts and names its token file (log: %s)", log);
                free(w.c);
                return;
        }
        hc_use(&s);
        diag("server pid %d on port %d, up after %lld ms", (int)s.pid, s.port, (long long)(dm_now_ms() - t0));
        /* The incident: 600 tools/list, 50 at a time, right after start. */
        {
                static const char body[] =
                        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}";
                struct hresp r;
                json_object *m = exchange(&w, "POST", MODERN_HDRS "Mcp-Method: tools/list\r\n", body, &r) == 0
                                         ? hresp_json(&r)
                                         : NULL;
                n_tools = json_object_array_length(jget(m, "result", "tools", NULL));
                json_object_put(m);
                hresp_release(&r);
        }
        ok(n_tools >= 10, "tools/list names the tools (%zu)", n_tools);
        ms = run_phase(&early);
        report_phase("first second", &early, ms);
        ok(alive(s.pid), "the server lives through the start-up burst");

        sc = tool_result(&w, "sandbox_script",
                         "{\"command\":\"sleep 600\",\"image\":\"base\",\"egress\":\"none\",\"background\":true}");
        snprintf(long_job, sizeof(long_job), "%s", jstr(sc, "job_id", NULL, NULL));
        json_object_put(sc);
        ok(long_job[0], "a long background job runs through the load (%s)", long_job);

        ms = run_phase(&warm);
        report_phase("warm-up", &warm, ms);
        settle(s.pid);
        rss_warm = rss_kb(s.pid);

        ms = run_phase(&main_);
        report_phase("load", &main_, ms);
        ok(alive(s.pid), "the server lives through %d requests", HTTP_N);
        settle(s.pid);
        rss_mid = rss_kb(s.pid);
        ms = run_phase(&again);
        report_phase("again", &again, ms);

        snprintf(cancel_args, sizeof(cancel_args), "{\"job_id\":\"%s\"}", long_job);
        sc = tool_result(&w, "sandbox_cancel", cancel_args);
        ok(strcmp(jstr(sc, "status", NULL, NULL), "cancelled") == 0, "the long job is cancelled");
        json_object_put(sc);
        ms = dm_now_ms();
        is_int(wait_containers(b, s.pid, 0, slack_ms(180000)), 0,
               "no container of the server is left (dropped calls removed theirs)");
        diag("the server's containers gone %lld ms after the last call", (long long)(dm_now_ms() - ms));
        settle(s.pid);
        rss_after = rss_kb(s.pid);
        diag("server RSS: %ld KiB after warm-up, %ld KiB after the load (%+ld KiB), %ld KiB after %d more (%+ld KiB)",
             rss_warm, rss_mid, rss_mid - rss_warm, rss_after, WARM_N * 2, rss_after - rss_mid);
        if (SANITIZED)
                /* ASan's quarantine and TSan's shadow memory grow with use:
                 * the numbers say nothing about leaks there. */
                ok(rss_after > 0, "RSS measured (not compared under sanitizers)");
        else
                ok(rss_mid > 0 && rss_after - rss_mid <= RSS_SLACK_KB,
                   "memory holds: RSS grew %ld KiB over the second round of %d requests (at most %d)",
                   rss_after - rss_mid, WARM_N * 2, RSS_SLACK_KB);

        is_int(server_stop(&s, slack_ms(90000), NULL), 0, "the server exits 0 on SIGTERM after the load");
        ok(access(s.token_file, F_OK) < 0, "its token file is gone");
        free(w.c);
}

/* ---- stdio ------------------------------------------------------------------------- */

struct stdio_run {
        int to, from; /* the server's stdin, stdout */
        pid_t pid;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        int in_flight;
        int answered, good, expected;
        bool eof;
        char job[64];
};

static void *stdio_reader(void *arg)
{
        struct stdio_run *st = arg;
        size_t cap = 1 << 22, len = 0;
        char *buf = malloc(cap);

        for (;;) {
                char *nl;
                ssize_t n;

                while (buf && (nl = memchr(buf, '\n', len))) {
                        json_object *m;
                        *nl = '\0';
                        m = json_tokener_parse(buf);
                        memmove(buf, nl + 1, len - (size_t)(nl + 1 - buf));
                        len -= (size_t)(nl + 1 - buf);
                        if (m && jget(m, "id", NULL, NULL)) {
                                int id = json_object_get_int(jget(m, "id", NULL, NULL));
                                json_object *sc = jget(m, "result", "structuredContent", NULL);
                                bool good =
                                        id >= 2000000
                                                ? sc && jget(sc, "exit_code", NULL, NULL) &&
                                                          json_object_get_int(jget(sc, "exit_code", NULL, NULL)) == 0
                                        : id >= 1000000 ? jget(m, "result", "tools", NULL) != NULL
                                        : id == 1       ? sc && jget(sc, "job_id", NULL, NULL)
                                                        : sc && jget(sc, "status", NULL, NULL);
                                pthread_mutex_lock(&st->lock);
                                if (id == 1)
                                        snprintf(st->job, sizeof(st->job), "%s", jstr(sc, "job_id", NULL, NULL));
                                st->answered++;
                                st->good += good;
                                st->in_flight--;
                                pthread_cond_broadcast(&st->cond);
                                pthread_mutex_unlock(&st->lock);
                        }
                        json_object_put(m);
                }
                if (!buf || len == cap)
                        break;
                n = read(st->from, buf + len, cap - len);
                if (n <= 0)
                        break;
                len += (size_t)n;
        }
        free(buf);
        pthread_mutex_lock(&st->lock);
        st->eof = true;
        pthread_cond_broadcast(&st->cond);
        pthread_mutex_unlock(&st->lock);
        return NULL;
}

static void send_line(struct stdio_run *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void send_line(struct stdio_run *st, const char *fmt, ...)
{
        char *line = NULL;
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vasprintf(&line, fmt, ap);
        va_end(ap);
        if (n > 0 && write(st->to, line, (size_t)n) != n)
                diag("stdio: short write");
        free(line);
}

/* Takes a slot for a request that will be answered. */
static bool slot(struct stdio_run *st)
{
        bool good;

        pthread_mutex_lock(&st->lock);
        while (st->in_flight >= CONC && !st->eof)
                pthread_cond_wait(&st->cond, &st->lock);
        good = !st->eof;
        if (good) {
                st->in_flight++;
                st->expected++;
        }
        pthread_mutex_unlock(&st->lock);
        return good;
}

static void stdio_load(struct dm_backend *b)
{
        struct stdio_run st = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };
        int in[2], out[2], status = 0, cancelled = 0;
        char log[PATH_MAX];
        pthread_t reader;
        int64_t t0;

        snprintf(log, sizeof(log), "%s/stdio-server.log", test_root);
        if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
                ok(0, "pipes");
                return;
        }
        st.pid = fork();
        if (st.pid == 0) {
                int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
                dup2(in[0], 0);
                dup2(out[1], 1);
                dup2(fd, 2);
                execl(getenv("DEMESNE"), getenv("DEMESNE"), "serve", (char *)NULL);
                _exit(127);
        }
        close(in[0]);
        close(out[1]);
        st.to = in[1];
        st.from = out[0];
        pthread_create(&reader, NULL, stdio_reader, &st);

        /* At once, as a client starting the server does. */
        slot(&st);
        send_line(&st,
                  "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\","
                  "\"arguments\":{\"command\":\"sleep "
                  "600\",\"image\":\"base\",\"egress\":\"none\",\"background\":true}," MODERN_META "}}\n");
        pthread_mutex_lock(&st.lock);
        while (!st.job[0] && !st.eof)
                pthread_cond_wait(&st.cond, &st.lock);
        pthread_mutex_unlock(&st.lock);
        ok(st.job[0], "stdio: a long background job runs through the load (%s)", st.job);
        for (int i = 0; i < STDIO_N; i++) {
                enum op op = op_for(i, true);
                int id = 10 + i;

                if (op == OP_LIST || op == OP_LEGACY) {
                        if (!slot(&st))
                                break;
                        send_line(&st,
                                  "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/list\",\"params\":{" MODERN_META
                                  "}}\n",
                                  1000000 + i);
                } else if (op == OP_WAIT_DROP || op == OP_SCRIPT_DROP) {
                        char job[64];
                        pthread_mutex_lock(&st.lock);
                        snprintf(job, sizeof(job), "%s", st.job);
                        pthread_mutex_unlock(&st.lock);
                        /* A cancelled request gets no answer: no slot. */
                        if (op == OP_WAIT_DROP)
                                send_line(
                                        &st,
                                        "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":"
                                        "\"sandbox_wait\",\"arguments\":{\"job_id\":\"%s\",\"timeout_seconds\":60}"
                                        "," MODERN_META "}}\n",
                                        id, job);
                        else
                                send_line(
                                        &st,
                                        "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":"
                                        "\"sandbox_script\",\"arguments\":{\"command\":\"sleep 30\",\"image\":\"base\","
                                        "\"egress\":\"none\"}," MODERN_META "}}\n",
                                        id);
                        usleep(op == OP_SCRIPT_DROP ? 300 * 1000 : 1000);
                        send_line(&st,
                                  "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/"
                                  "cancelled\",\"params\":{\"requestId\":%d,"
                                  "\"reason\":\"test\"," MODERN_META "}}\n",
                                  id);
                        cancelled++;
                } else {
                        const char *tool = op == OP_SCRIPT ? "sandbox_script" : "sandbox_status";
                        char args[160];
                        pthread_mutex_lock(&st.lock);
                        if (op == OP_SCRIPT)
                                snprintf(args, sizeof(args),
                                         "{\"command\":\"echo %d\",\"image\":\"base\",\"egress\":\"none\"}", i);
                        else
                                snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", st.job);
                        pthread_mutex_unlock(&st.lock);
                        if (!slot(&st))
                                break;
                        /* exit_code, not status, for a script: checked as "answered". */
                        send_line(
                                &st,
                                "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                                "\"arguments\":%s," MODERN_META "}}\n",
                                op == OP_SCRIPT ? 2000000 + i : id, tool, args);
                }
        }
        pthread_mutex_lock(&st.lock);
        while (st.in_flight > 0 && !st.eof) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += 120;
                if (pthread_cond_timedwait(&st.cond, &st.lock, &until) != 0)
                        break;
        }
        pthread_mutex_unlock(&st.lock);
        {
                int answered, expected, good;
                bool eof;
                pthread_mutex_lock(&st.lock);
                answered = st.answered;
                expected = st.expected;
                good = st.good;
                eof = st.eof;
                pthread_mutex_unlock(&st.lock);
                is_int(answered, expected,
                       "stdio: every request that was not cancelled is answered (%d of %d; %d cancelled)", answered,
                       expected, cancelled);
                is_int(good, answered, "stdio: and answered right");
                ok(!eof, "stdio: the server lives through %d requests", STDIO_N);
        }

        t0 = dm_now_ms();
        close(st.to); /* EOF: the server cancels the long job's call and exits */
        pthread_join(reader, NULL);
        waitpid(st.pid, &status, 0);
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "stdio: exit 0 at EOF (status %d) after %lld ms", status,
           (long long)(dm_now_ms() - t0));
        is_int(containers_of(b, st.pid), 0, "stdio: no container of the server is left");
        close(st.from);
}

int main(void)
{
        struct dm_engine_config ec = { .env = test_engine_env(), .may_start_podman = false, .response_max = 16 << 20 };
        struct dm_backend *b;
        struct dm_error err = { 0 };
        struct rlimit rl;

        test_env_setup("http-load");
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096 && rl.rlim_max >= 4096) {
                rl.rlim_cur = 4096;
                setrlimit(RLIMIT_NOFILE, &rl);
        }
        if (dm_backend_open(&ec, &b, &err) < 0) {
                printf("Bail out! %s\n", err.msg);
                return 1;
        }
        http_load(b);
        stdio_load(b);
        dm_backend_free(b);
        if (tap_failed)
                diag("logs kept in %s", test_root);
        else
                dm_remove_tree(test_root);
        return done_testing();
}
