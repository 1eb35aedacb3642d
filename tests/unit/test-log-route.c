/* SPDX-License-Identifier: MIT */
/* Where the server's log records go (logging/setLevel): to the host's own
 * sessions, never to a nested sandbox's (a principal "<maker>/<id>"), whose
 * subtree is all it may hear of; and to no session once the server is
 * private (several HTTP principals). Job notices are not log records and
 * are not covered here. */
#include "config.h"

#include <stdatomic.h>
#include <string.h>

#include "src/basic/log.h"
#include "src/mcp/jsonrpc.h"
#include "src/mcp/registry.h"
#include "src/mcp/server.h"
#include "tests/tap.h"

struct peer {
        atomic_int records; /* notifications/message from logger "demesne" */
};

static int on_send(void *transport, json_object *msg)
{
        struct peer *p = transport;
        json_object *m, *params, *logger;

        if (json_object_object_get_ex(msg, "method", &m) &&
            strcmp(json_object_get_string(m), "notifications/message") == 0 &&
            json_object_object_get_ex(msg, "params", &params) && json_object_object_get_ex(params, "logger", &logger) &&
            strcmp(json_object_get_string(logger), "demesne") == 0)
                atomic_fetch_add(&p->records, 1);
        return 0;
}

static void say(struct dm_mcp_session *s, const char *line)
{
        dm_mcp_session_handle(s, line, strlen(line));
}

static void open_session(struct dm_mcp_session *s)
{
        say(s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\","
               "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}");
        say(s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
        say(s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"logging/setLevel\",\"params\":{\"level\":\"debug\"}}");
}

int main(void)
{
        struct dm_registry *reg = dm_registry_new();
        struct dm_mcp_server *srv = dm_mcp_server_new(NULL, reg, "/nonexistent");
        struct peer host = { 0 }, nested = { 0 }, deeper = { 0 };
        struct dm_mcp_session *h, *n, *d;

        h = dm_mcp_session_new(srv, on_send, &host);
        n = dm_mcp_session_new(srv, on_send, &nested);
        d = dm_mcp_session_new(srv, on_send, &deeper);
        dm_mcp_session_set_principal(n, "local/sbx-0123456789ab");
        dm_mcp_session_set_principal(d, "alice/sbx-0123456789ab/run-1");
        open_session(h);
        open_session(n);
        open_session(d);

        dm_log(DM_LOG_INFO, "a record of some work");
        ok(atomic_load(&host.records) >= 1, "the host's session gets the server's log records (%d)",
           atomic_load(&host.records));
        is_int(atomic_load(&nested.records), 0, "a nested sandbox's session gets none");
        is_int(atomic_load(&deeper.records), 0, "nor does one two levels down");

        atomic_store(&host.records, 0);
        dm_mcp_server_set_private_logs(srv);
        dm_log(DM_LOG_INFO, "a record after the server became private");
        is_int(atomic_load(&host.records), 0, "a private server sends its records to no session");

        dm_mcp_session_free(h);
        dm_mcp_session_free(n);
        dm_mcp_session_free(d);
        dm_mcp_server_shutdown(srv);
        dm_mcp_server_free(srv);
        dm_registry_free(reg);
        return done_testing();
}
