/* SPDX-License-Identifier: MIT */
/* Two servers in one process with different facts (egress default, caller
 * egress, allowed roots): each lists schemas and checks calls by its own.
 * The argument tables calls are checked against were once the process's,
 * re-tailored by every registration: server A then refused a bad egress
 * with B's modes, and defaulted to B's egress; and the next registration
 * freed descriptions the first's tables still pointed to. */
#include "config.h"

#include <pthread.h>
#include <string.h>
#include <time.h>

#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "tests/tap.h"

/* A: a server that cannot set networks up and has no roots; B: networked,
 * caller egress on, two roots; C: made after A is gone, to reuse its
 * memory and prove B borrowed none of it. */
static const struct dm_args_facts facts_a = { .egress_default = "none",
                                              .allowed_paths = "",
                                              .agents_why = "it cannot set sandbox networks up" };
static const struct dm_args_facts facts_b = {
        .egress_default = "package-managers",
        .caller_egress = true,
        .allowed_paths = "/srv/b:/data/b",
        .images = "Built on this server: python.",
};
static const struct dm_args_facts facts_c = { .egress_default = "open", .allowed_paths = "/srv/c" };

/* A client of one server: the answer to each request, written by the
 * call's worker thread. */
struct peer {
        pthread_mutex_t lock;
        pthread_cond_t changed;
        unsigned answers;
        char last[16384];
};

static int on_send(void *transport, json_object *msg)
{
        struct peer *p = transport;

        pthread_mutex_lock(&p->lock);
        if (json_object_object_get_ex(msg, "id", NULL)) {
                snprintf(p->last, sizeof(p->last), "%s",
                         json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
                p->answers++;
                pthread_cond_broadcast(&p->changed);
        }
        pthread_mutex_unlock(&p->lock);
        return 0;
}

/* Sends line and waits (5 s at most) for its answer, into p->last. */
static void ask(struct dm_mcp_session *s, struct peer *p, const char *line)
{
        struct timespec until;
        unsigned before;

        pthread_mutex_lock(&p->lock);
        before = p->answers;
        p->last[0] = '\0';
        pthread_mutex_unlock(&p->lock);
        dm_mcp_session_handle(s, line, strlen(line));
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 5;
        pthread_mutex_lock(&p->lock);
        while (p->answers == before && pthread_cond_timedwait(&p->changed, &p->lock, &until) == 0)
                ;
        pthread_mutex_unlock(&p->lock);
}

struct server {
        struct dm_registry *reg;
        struct dm_mcp_server *srv;
        struct dm_mcp_session *session;
        struct peer peer;
};

static void server_init(struct server *s, const struct dm_args_facts *f)
{
        s->reg = dm_registry_new();
        dm_tools_register_all(s->reg, f);
        s->srv = dm_mcp_server_new(NULL, s->reg, "/nonexistent");
        pthread_mutex_init(&s->peer.lock, NULL);
        pthread_cond_init(&s->peer.changed, NULL);
        s->session = dm_mcp_session_new(s->srv, on_send, &s->peer);
        ask(s->session, &s->peer,
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\","
            "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}");
}

static void server_release(struct server *s)
{
        dm_mcp_session_free(s->session);
        dm_mcp_server_free(s->srv);
        dm_registry_free(s->reg);
        pthread_cond_destroy(&s->peer.changed);
        pthread_mutex_destroy(&s->peer.lock);
}

/* tool's inputSchema as this server lists it. */
static const char *schema(struct server *s, const char *tool)
{
        const struct dm_tool *t = dm_registry_find(s->reg, tool);

        return t ? t->input_schema : "";
}

/* Calls tool with a bad egress: the refusal lists the modes the server's
 * own table offers (the handler's check). */
static const char *bad_egress(struct server *s, const char *tool)
{
        char line[512];

        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                 "\"arguments\":{\"egress\":\"bogus\"}}}",
                 tool);
        ask(s->session, &s->peer, line);
        return s->peer.last;
}

/* The egress a call that names none gets from the tool's table. */
static const char *default_egress(struct server *s, const char *tool)
{
        const struct dm_tool *t = dm_registry_find(s->reg, tool);
        const struct dm_args_table *table = t ? t->data : NULL;

        return table ? dm_args_str(table->specs, table->n, NULL, "egress") : NULL;
}

static void check_b(struct server *b, const char *when)
{
        ok(strstr(bad_egress(b, "sandbox_script"), "must be one of none, package-managers, open, not 'bogus'") != NULL,
           "%s: B refuses a bad egress with its own modes", when);
        ok(strstr(bad_egress(b, "sandbox_create"), "must be one of none, package-managers, open, not 'bogus'") != NULL,
           "%s: ... on sandbox_create too", when);
        is_str(default_egress(b, "sandbox_script"), "package-managers", "%s: B's calls default to B's egress", when);
        is_str(default_egress(b, "sandbox_create"), "package-managers", "%s: ... on sandbox_create too", when);
        is_str(default_egress(b, "sandbox_agent"), "none", "%s: sandbox_agent keeps its own default", when);
        ok(strstr(schema(b, "sandbox_script"), "\"enum\":[\"none\",\"package-managers\",\"open\"]") &&
                   strstr(schema(b, "sandbox_script"), "\"allow\""),
           "%s: B's schema lists its modes and 'allow'", when);
        ok(strstr(schema(b, "sandbox_script"), "This server accepts paths inside: /srv/b, /data/b") != NULL,
           "%s: B's schema names its roots", when);
        ok(strstr(schema(b, "sandbox_upload"), "/srv/b, /data/b") != NULL, "%s: ... for sandbox_upload's src too",
           when);
        ok(strstr(schema(b, "sandbox_script"), "Built on this server: python.") != NULL,
           "%s: B's image parameter says which images it has", when);
        {
                const struct dm_args_table *t = dm_registry_find(b->reg, "sandbox_script")->data;
                bool shown = false;

                for (size_t i = 0; i < t->n; i++)
                        if (!strcmp(t->specs[i].name, "files"))
                                shown = strstr(t->specs[i].description, "/srv/b, /data/b") != NULL;
                ok(shown, "%s: B's table, which calls are checked against, says its roots", when);
        }
}

int main(void)
{
        struct server a = { 0 }, b = { 0 }, c = { 0 };

        server_init(&a, &facts_a);
        server_init(&b, &facts_b);

        ok(strstr(bad_egress(&a, "sandbox_script"), "must be one of none, not 'bogus'") != NULL,
           "A refuses a bad egress with its own modes");
        ok(strstr(bad_egress(&a, "sandbox_create"), "must be one of none, not 'bogus'") != NULL,
           "... on sandbox_create too");
        is_str(default_egress(&a, "sandbox_script"), "none", "A's calls default to A's egress");
        is_str(default_egress(&a, "sandbox_create"), "none", "... on sandbox_create too");
        ok(strstr(schema(&a, "sandbox_script"), "\"enum\":[\"none\"]") &&
                   !strstr(schema(&a, "sandbox_script"), "\"allow\""),
           "A's schema lists none only, and no 'allow'");
        ok(strstr(schema(&a, "sandbox_script"), "This server accepts no host paths") != NULL,
           "A's schema says it takes no host paths");
        ok(!strstr(schema(&a, "sandbox_script"), "Built on this server"), "A's image parameter says nothing of B's");
        ok(strstr(dm_registry_find(a.reg, "sandbox_agent")->description, "Unavailable on this server") &&
                   !strstr(dm_registry_find(b.reg, "sandbox_agent")->description, "Unavailable on this server"),
           "sandbox_agent is unavailable on A only");
        check_b(&b, "beside A");

        /* A goes, and C comes with other facts: B uses nothing of either. */
        server_release(&a);
        server_init(&c, &facts_c);
        is_str(default_egress(&c, "sandbox_script"), "open", "C's calls default to C's egress");
        check_b(&b, "after A is freed and C made");
        server_release(&c);
        check_b(&b, "after C is freed");
        server_release(&b);
        return done_testing();
}
