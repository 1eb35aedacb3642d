/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_INTEGRATION_CONFORMANCE_NESTED_H
#define DM_TESTS_INTEGRATION_CONFORMANCE_NESTED_H

/* The nested-sandbox cases of tests/integration/test-backend-conformance.c,
 * which includes this after its helpers (call, check, exec_out, the
 * current target and server): the same cases against the engine (the
 * endpoint in the sandbox's own network namespace) and the OpenSandbox
 * fixture (the endpoint behind DEMESNE_REMOTE_LISTEN). */

/* ---- nested sandboxes ------------------------------------------------------------- */

/* The client inside a nested sandbox (curl, the 2026-07-28 wire: one POST
 * per call, the listener's CA from DEMESNE_MCP_CA_CERT when there is one):
 * `sh /workspace/c.sh TOOL ARGS` prints the tools/call answer,
 * `sh /workspace/c.sh -raw [TOKEN]` the HTTP status of a tools/list. */
static const char nested_client[] =
        "ca=; if [ -n \"${DEMESNE_MCP_CA_CERT:-}\" ]; then printf '%s\\n' \"$DEMESNE_MCP_CA_CERT\" >/tmp/ca.pem; "
        "ca='--cacert /tmp/ca.pem'; fi\n"
        "h() { curl -sS $ca -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' "
        "-H 'MCP-Protocol-Version: 2026-07-28' \"$@\" \"$DEMESNE_MCP_URL\"; }\n"
        "meta='\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
        "\"io.modelcontextprotocol/clientCapabilities\":{}}'\n"
        "if [ \"$1\" = -raw ]; then\n"
        "  h -o /dev/null -w '%{http_code}' ${2:+-H \"Authorization: Bearer $2\"} -H 'Mcp-Method: tools/list' "
        "-d \"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"id\\\":1,\\\"method\\\":\\\"tools/list\\\",\\\"params\\\":{$meta}}\"\n"
        "  exit 0\n"
        "fi\n"
        "h -H \"Authorization: Bearer $DEMESNE_MCP_TOKEN\" -H 'Mcp-Method: tools/call' -H \"Mcp-Name: $1\" "
        "-d \"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"id\\\":1,\\\"method\\\":\\\"tools/call\\\",\\\"params\\\":"
        "{\\\"name\\\":\\\"$1\\\",\\\"arguments\\\":$2,$meta}}\" | sed -n -e 's/^data: //p' -e '/^{/p' | tail -n 1\n";

/* sandbox_exec of command in sb, the arguments made by json-c (the
 * command quotes JSON); its stdout, "<error>" when the call failed. */
static char *exec_json(const char *sb, const char *command)
{
        json_object *a = json_object_new_object(), *m;
        char *out;

        json_object_object_add(a, "sandbox_id", json_object_new_string(sb));
        json_object_object_add(a, "command", json_object_new_string(command));
        m = call("sandbox_exec", json_object_to_json_string(a));
        json_object_put(a);
        if (result_is_error(m))
                diag("sandbox_exec '%s': %s", command, m ? json_object_to_json_string(m) : "no response");
        out = strdup(result_is_error(m) ? "<error>" : str_at(structured(m), "stdout"));
        json_object_put(m);
        return out;
}

/* Tool with args (JSON) called from inside sb through its endpoint: the
 * JSON-RPC answer, NULL when none came. */
static json_object *inside(const char *sb, const char *tool, const char *args)
{
        char cmd[1024];
        _cleanup_free_ char *out = NULL;

        snprintf(cmd, sizeof(cmd), "sh /workspace/c.sh %s '%s'", tool, args);
        out = exec_json(sb, cmd);
        return json_tokener_parse(out);
}

/* The first line of what the shell command cmd prints, in out. */
static void run_out(const char *cmd, char *out, size_t size)
{
        FILE *f = popen(cmd, "r");

        out[0] = '\0';
        if (f) {
                if (!fgets(out, (int)size, f))
                        out[0] = '\0';
                pclose(f);
        }
}

/* What curl on this host says of url with token (--cacert ca unless
 * NULL): the HTTP status, "000" when no HTTP answer came. */
static void curl_status(const char *url, const char *token, const char *ca, char *code, size_t size)
{
        char cmd[4 * PATH_MAX]; /* url may be a 3 * PATH_MAX buffer's */

        snprintf(cmd, sizeof(cmd),
                 "curl -s -o /dev/null -w '%%{http_code}' %s%s -H 'Authorization: Bearer %s' -H "
                 "'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -d '{}' '%s'",
                 ca ? "--cacert " : "", ca ? ca : "", token, url);
        run_out(cmd, code, size);
}

/* A nested sandbox at egress, with the client, on a server of its own
 * (DEMESNE_MAX_CHILDREN=1): its endpoint answers its token only; a child
 * made through it is its, and a second is refused by the cap; a job it
 * starts is cancelled through it; destroying the child gives the slot back;
 * destroying it ends its subtree and its endpoint. remote: its endpoint is
 * the remote listener's
 * (DEMESNE_REMOTE_LISTEN, TLS with tests/make-test-certs.sh's
 * certificates), reached from here too. */
/* A server for the nested cases, in *mine (now the current one): one
 * child per parent; with remote, the remote listener with the test
 * certificates in certs (made on the first call). */
static void nested_server(struct child *mine, bool remote, const char *certs)
{
        const char *src = getenv("top_srcdir");
        char v[2 * PATH_MAX + 64];

        setenv("DEMESNE_MAX_CHILDREN", "1", 1);
        setenv("DEMESNE_ALLOW_CALLER_EGRESS", "1", 1);
        if (remote) {
                snprintf(v, sizeof(v), "%s/server/ca.pem", certs);
                if (access(v, R_OK) != 0) {
                        mkdir(certs, 0700);
                        snprintf(v, sizeof(v), "bash %s/tests/make-test-certs.sh %s", src ? src : DM_SRCDIR, certs);
                        check_int(system(v), 0, "nested: test certificates made");
                        snprintf(v, sizeof(v), "%s/server/ca.pem", certs);
                }
                setenv("DEMESNE_REMOTE_LISTEN", "127.0.0.1:0", 1);
                setenv("DEMESNE_REMOTE_TLS_CA", v, 1);
                snprintf(v, sizeof(v), "%s/server/cert.pem", certs);
                setenv("DEMESNE_REMOTE_TLS_CERT", v, 1);
                snprintf(v, sizeof(v), "%s/server/key.pem", certs);
                setenv("DEMESNE_REMOTE_TLS_KEY", v, 1);
        }
        c = mine;
        start_server();
        unsetenv("DEMESNE_MAX_CHILDREN");
        unsetenv("DEMESNE_ALLOW_CALLER_EGRESS");
        unsetenv("DEMESNE_REMOTE_LISTEN");
        unsetenv("DEMESNE_REMOTE_TLS_CA");
        unsetenv("DEMESNE_REMOTE_TLS_CERT");
        unsetenv("DEMESNE_REMOTE_TLS_KEY");
}

/* A later server takes the nested sandbox parent over (the one that made
 * it exits first): its endpoint is served again from its first command on
 * (locally in its network namespace, on OpenSandbox behind the new
 * server's remote listener), behind a new token; the old one, still in
 * the container's environment, opens nothing. later becomes the current
 * server; url and token (in: the old ones) become the new ones. */
static void nested_taken_over(struct child *later, const char *parent, char url[static 256], char token[static 96],
                              bool remote, const char *certs)
{
        char cmd[256], new_url[256] = "", new_token[96] = "", codes[32] = "";
        char *s;

        check_int(finish(c, 30000), 0, "nested: the server exits, leaving its nested sandbox");
        nested_server(later, remote, certs);
        snprintf(cmd, sizeof(cmd),
                 "printf '%%s %%s ' \"$DEMESNE_MCP_URL\" \"$DEMESNE_MCP_TOKEN\"; "
                 "sh /workspace/c.sh -raw \"$DEMESNE_MCP_TOKEN\"; printf ' '; sh /workspace/c.sh -raw %s",
                 token);
        s = exec_json(parent, cmd);
        sscanf(s, "%255s %95s %31[^\n]", new_url, new_token, codes);
        if (!check(strlen(new_token) == 64 && strcmp(new_token, token) != 0 && strcmp(codes, "200 401") == 0,
                   "nested: a later server serves its endpoint again, behind a new token; the old one gets 401"))
                diag("the sandbox said: %s", s);
        free(s);
        snprintf(url, 256, "%s", new_url);
        snprintf(token, 96, "%s", new_token);
}

static void nested_cases(const char *egress, bool remote)
{
        char certs[PATH_MAX], ca[PATH_MAX + 32], v[3 * PATH_MAX + 512], code[16], code_pair[32];
        struct child *host = c, mine = { 0 }, later = { 0 };
        char args[512], parent[64] = "", child[64] = "", url[256] = "", token[96] = "", job[64] = "";
        _cleanup_free_ char *client = dm_base64_encode(nested_client, sizeof(nested_client) - 1);
        json_object *m, *r, *up;
        char *s;

        snprintf(certs, sizeof(certs), "%s/certs", test_root);
        snprintf(ca, sizeof(ca), "%s/server/ca.pem", certs);
        nested_server(&mine, remote, certs);

        snprintf(args, sizeof(args), "{\"image\":\"base\",\"egress\":\"%s\",\"nested\":true}", egress);
        m = call("sandbox_create", args);
        snprintf(parent, sizeof(parent), "%s", str_at(structured(m), "sandbox_id"));
        if (!check(parent[0], "nested: a nested sandbox at egress %s", egress))
                diag("%s", m ? json_object_to_json_string(m) : "no response");
        json_object_put(m);
        up = json_object_new_object();
        json_object_object_add(up, "sandbox_id", json_object_new_string(parent));
        json_object_object_add(up, "dst", json_object_new_string("/workspace/c.sh"));
        json_object_object_add(up, "content", json_object_new_string(client ? client : ""));
        m = call("sandbox_upload", json_object_to_json_string(up));
        check(m && !result_is_error(m), "nested: the client uploaded");
        json_object_put(m);
        json_object_put(up);

        s = exec_out(parent, "printf '%s %s' \\\"$DEMESNE_MCP_URL\\\" \\\"$DEMESNE_MCP_TOKEN\\\"");
        sscanf(s, "%255s %95s", url, token);
        free(s);
        check(strncmp(url, remote ? "https://127.0.0.1:" : "http://127.0.0.1:3130/", remote ? 18 : 22) == 0 &&
                      strlen(token) == 64,
              "nested: DEMESNE_MCP_URL %s and a 64-digit token", url);
        s = exec_out(parent, "sh /workspace/c.sh -raw; echo; sh /workspace/c.sh -raw 0123456789abcdef0123456789; "
                             "echo; sh /workspace/c.sh -raw $DEMESNE_MCP_TOKEN");
        check_str(s, "401\n401\n200", "nested: the endpoint answers no token and a wrong one 401, its own 200");
        free(s);

        /* A child, counted by admission: a second is refused. */
        snprintf(args, sizeof(args), "{\"image\":\"base\",\"egress\":\"%s\"}", egress);
        m = inside(parent, "sandbox_create", args);
        r = path(m, "result", NULL, NULL);
        snprintf(child, sizeof(child), "%s", str_at(path(r, "structuredContent", NULL, NULL), "sandbox_id"));
        if (!check(child[0] && !result_is_error(m), "nested: a child made through the endpoint"))
                diag("%s", m ? json_object_to_json_string(m) : "no answer");
        json_object_put(m);
        m = inside(parent, "sandbox_create", args);
        check(result_error_says(m, "DEMESNE_MAX_CHILDREN"), "nested: a second child is refused by the cap");
        json_object_put(m);
        m = inside(parent, "sandbox_list", "{}");
        check(m && strstr(json_object_to_json_string(m), child) && !strstr(json_object_to_json_string(m), parent),
              "nested: sandbox_list from inside sees its child, not itself");
        json_object_put(m);

        /* The child goes; its slot serves a job, which is cancelled. */
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", child);
        m = inside(parent, "sandbox_destroy", args);
        check(m && !result_is_error(m), "nested: the child destroyed through the endpoint");
        json_object_put(m);
        if (remote) {
                /* From this host: TLS only, and its token is the sandbox's. */
                curl_status(url, token, ca, code, sizeof(code));
                check_str(code, "400", "nested: the remote listener hands its token on over TLS from here too");
                snprintf(v, sizeof(v), "http%s", url + 5);
                curl_status(v, token, NULL, code, sizeof(code));
                check_str(code, "000", "nested: and gives no HTTP answer in clear");
                /* The token decides the endpoint once per connection: a
                 * later request on it with another token is refused by
                 * that endpoint, as every request is checked there. */
#define H2026                                                                                      \
        "-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' -H " \
        "'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/list' -d "                       \
        "'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{\"_meta\":{"         \
        "\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/"    \
        "clientCapabilities\":{}}}}'"
                snprintf(v, sizeof(v),
                         "curl -s --cacert %s -o /dev/null -w '%%{http_code} %%{num_connects} ' -H 'Authorization: "
                         "Bearer %s' " H2026 " '%s' --next --cacert %s -o /dev/null -w '%%{http_code} "
                         "%%{num_connects}' -H 'Authorization: Bearer 0123456789abcdef0123456789' " H2026 " '%s'",
                         ca, token, url, ca, url);
#undef H2026
                run_out(v, code_pair, sizeof(code_pair));
                check_str(code_pair, "200 1 401 0",
                          "nested: a second request on the same connection with another token gets 401");
        }
        snprintf(args, sizeof(args), "{\"image\":\"base\",\"egress\":\"%s\",\"background\":true,\"command\":\"%s\"}",
                 egress, "sleep 600");
        m = inside(parent, "sandbox_script", args);
        snprintf(job, sizeof(job), "%s", str_at(path(m, "result", "structuredContent", NULL), "job_id"));
        if (!check(strncmp(job, "job-", 4) == 0, "nested: a job started in the freed slot"))
                diag("%s", m ? json_object_to_json_string(m) : "no answer");
        json_object_put(m);
        snprintf(args, sizeof(args), "{\"job_id\":\"%s\"}", job);
        json_object_put(inside(parent, "sandbox_cancel", args));
        m = inside(parent, "sandbox_wait", args);
        check_str(str_at(path(m, "result", "structuredContent", NULL), "status"), "cancelled",
                  "nested: the job cancelled through the endpoint");
        json_object_put(m);

        /* A nested script's endpoint, there while its command runs. */
        up = json_object_new_object();
        json_object_object_add(up, "image", json_object_new_string("base"));
        json_object_object_add(up, "egress", json_object_new_string(egress));
        json_object_object_add(up, "nested", json_object_new_boolean(true));
        json_object_object_add(
                up, "command",
                json_object_new_string(
                        "printf '%s\n' \"${DEMESNE_MCP_CA_CERT:-}\" >/tmp/ca.pem; "
                        "curl -sS ${DEMESNE_MCP_CA_CERT:+--cacert /tmp/ca.pem} -o /dev/null -w '%{http_code}' "
                        "-H \"Authorization: Bearer $DEMESNE_MCP_TOKEN\" -H 'Content-Type: application/json' "
                        "-H 'Accept: application/json, text/event-stream' -H 'MCP-Protocol-Version: 2026-07-28' "
                        "-H 'Mcp-Method: tools/list' -d '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\","
                        "\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
                        "\"io.modelcontextprotocol/clientCapabilities\":{}}}}' \"$DEMESNE_MCP_URL\""));
        m = call("sandbox_script", json_object_to_json_string(up));
        json_object_put(up);
        if (!check(!result_is_error(m) && strcmp(str_at(structured(m), "stdout"), "200") == 0,
                   "nested: a nested script reaches its own endpoint"))
                diag("%s", m ? json_object_to_json_string(m) : "no response");
        json_object_put(m);

        nested_taken_over(&later, parent, url, token, remote, certs);

        /* The top goes, and with it the endpoint: its token opens nothing. */
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", parent);
        m = call("sandbox_destroy", args);
        check(m && !result_is_error(m), "nested: the nested sandbox destroyed");
        json_object_put(m);
        if (remote) {
                curl_status(url, token, ca, code, sizeof(code));
                check_str(code, "401", "nested: its token opens nothing on the remote listener after");
        }
        check_int(finish(c, 30000), 0, "nested: the server exits cleanly");
        c = host;
}

/* ---- agents on a remote backend ------------------------------------------------------ */

#define VENDOR_KEY "sk-ant-api03-conformance-remote-agent"

/* The vendor API fixture (tests/fixtures/vendor/server.mjs) on loopback,
 * expecting VENDOR_KEY, logging to log, playing the plays in the file
 * plays (PLAYS) when a prompt names one: its port, 0 when it did not start
 * (*pid then 0). */
static int vendor_fixture_start(const char *log, const char *plays, pid_t *pid)
{
        const char *src = getenv("top_srcdir");
        char script[PATH_MAX], line[128] = "";
        int out[2], port = 0;
        FILE *f;

        snprintf(script, sizeof(script), "%s/tests/fixtures/vendor/server.mjs", src ? src : DM_SRCDIR);
        if (pipe2(out, O_CLOEXEC) < 0)
                return 0;
        *pid = fork();
        if (*pid == 0) {
                dup2(out[1], 1);
                execlp("node", "node", script, "--port", "0", "--host", "127.0.0.1", "--expect-key", VENDOR_KEY,
                       "--log", log, "--plays", plays, (char *)NULL);
                _exit(127);
        }
        close(out[1]);
        f = fdopen(out[0], "r");
        if (*pid > 0 && f && fgets(line, sizeof(line), f))
                sscanf(line, "listening %d", &port);
        if (f)
                fclose(f);
        else
                close(out[0]);
        if (!port && *pid > 0) {
                kill(*pid, SIGTERM);
                waitpid(*pid, NULL, 0);
                *pid = 0;
        }
        return port;
}

/* Whether the engine the fixture makes its sandboxes in has image. */
static bool image_in_engine(const char *image)
{
        struct dm_error err = { 0 };
        bool exists = false;

        if (engine->ops->image_exists(engine, image, &exists, &err) < 0)
                diag("is %s in the engine: %s", image, err.msg);
        return exists;
}

/* Whether the current server's sandbox_agent description has what in it. */
static bool agent_described(const char *what)
{
        char line[512];
        int id = next_id++;
        json_object *m, *tools;
        bool found = false;

        snprintf(line, sizeof(line),
                 "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"tools/list\",\"params\":{" MODERN_META "}}", id);
        send_line(c, line);
        m = recv_response(c, id, 30000, NULL);
        tools = path(m, "result", "tools", NULL);
        for (size_t i = 0; tools && i < json_object_array_length(tools); i++) {
                json_object *tool = json_object_array_get_idx(tools, i);

                if (!strcmp(str_at(tool, "name"), "sandbox_agent"))
                        found = strstr(str_at(tool, "description"), what) != NULL;
        }
        json_object_put(m);
        return found;
}

/* A server of its own for the agent cases: the remote listener (unless
 * !listen) with the certificates nested_cases made, the vendor fixture as
 * Anthropic's API, cap (DEMESNE_AGENT_MAX_USD) when not NULL. */
static void start_agent_server(struct child *mine, int vendor_port, const char *cap, bool listen)
{
        char v[PATH_MAX + 64];

        if (listen)
                setenv("DEMESNE_REMOTE_LISTEN", "127.0.0.1:0", 1);
        snprintf(v, sizeof(v), "%s/certs/server/ca.pem", test_root);
        setenv("DEMESNE_REMOTE_TLS_CA", v, 1);
        snprintf(v, sizeof(v), "%s/certs/server/cert.pem", test_root);
        setenv("DEMESNE_REMOTE_TLS_CERT", v, 1);
        snprintf(v, sizeof(v), "%s/certs/server/key.pem", test_root);
        setenv("DEMESNE_REMOTE_TLS_KEY", v, 1);
        snprintf(v, sizeof(v), "http://127.0.0.1:%d", vendor_port);
        setenv("DEMESNE_VENDOR_UPSTREAM_ANTHROPIC", v, 1);
        setenv("DEMESNE_VENDOR_UPSTREAM_OPENAI", v, 1); /* the fixture speaks both APIs */
        setenv("ANTHROPIC_API_KEY", VENDOR_KEY, 1);
        setenv("OPENAI_API_KEY", VENDOR_KEY, 1);
        setenv("DEMESNE_ALLOW_CALLER_EGRESS", "1", 1); /* the nested script that says the listener's URL */
        if (cap)
                setenv("DEMESNE_AGENT_MAX_USD", cap, 1);
        c = mine;
        start_server();
        unsetenv("DEMESNE_REMOTE_LISTEN");
        unsetenv("DEMESNE_REMOTE_TLS_CA");
        unsetenv("DEMESNE_REMOTE_TLS_CERT");
        unsetenv("DEMESNE_REMOTE_TLS_KEY");
        unsetenv("DEMESNE_VENDOR_UPSTREAM_ANTHROPIC");
        unsetenv("DEMESNE_VENDOR_UPSTREAM_OPENAI");
        unsetenv("ANTHROPIC_API_KEY");
        unsetenv("OPENAI_API_KEY");
        unsetenv("DEMESNE_ALLOW_CALLER_EGRESS");
        unsetenv("DEMESNE_AGENT_MAX_USD");
}

/* The vendor fixture's plays (tests/fixtures/vendor/server.mjs --plays):
 * each step one tool call the "model" makes through the CLI's MCP tools,
 * {{i.f}} field f of step i's result. The sandboxes ask for egress open:
 * the network_mode host fixture refuses every networkPolicy. */
#define PLAYS                                                                                                       \
        "{\"plays\":[{\"marker\":\"[play:orchestrate]\",\"steps\":["                                                \
        "{\"tool\":\"sandbox_create\",\"arguments\":{\"image\":\"base\",\"egress\":\"open\",\"ttl_seconds\":600}}," \
        "{\"tool\":\"sandbox_exec\",\"arguments\":{\"sandbox_id\":\"{{0.sandbox_id}}\",\"command\":"                \
        "\"echo worker-ok\"}},"                                                                                     \
        "{\"tool\":\"sandbox_script\",\"arguments\":{\"image\":\"base\",\"egress\":\"open\",\"command\":"           \
        "\"sleep 300\",\"background\":true}},"                                                                      \
        "{\"tool\":\"sandbox_cancel\",\"arguments\":{\"job_id\":\"{{2.job_id}}\"}},"                                \
        "{\"tool\":\"sandbox_research\",\"arguments\":{\"prompt\":\"Write the answer.\",\"model\":\"sonnet\","      \
        "\"background\":true}},"                                                                                    \
        "{\"tool\":\"sandbox_wait\",\"arguments\":{\"job_id\":\"{{4.job_id}}\",\"timeout_seconds\":120}},"          \
        "{\"tool\":\"sandbox_list\",\"arguments\":{}},"                                                             \
        "{\"tool\":\"sandbox_destroy\",\"arguments\":{\"sandbox_id\":\"{{0.sandbox_id}}\"}}],"                      \
        "\"answer\":\"exec said {{1.stdout}}; the sleeper is {{3.status}}; the worker said {{5.result}}; "          \
        "listed {{6.sandbox_id}}\"},"                                                                               \
        "{\"marker\":\"[play:budget]\",\"steps\":["                                                                 \
        "{\"tool\":\"sandbox_research\",\"arguments\":{\"prompt\":\"Write the answer.\",\"model\":\"sonnet\"}},"    \
        "{\"tool\":\"sandbox_research\",\"arguments\":{\"prompt\":\"Write the answer.\",\"model\":\"sonnet\"}}],"   \
        "\"answer\":\"the first worker said {{0.result}}\"}]}"

/* text into the file path: 0, or -1. */
static int write_file(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");
        int r = f && fputs(text, f) >= 0 ? 0 : -1;

        if (f && fclose(f) != 0)
                r = -1;
        return r;
}

/* The requests of play the vendor fixture saw (its log), in order, one
 * "step:tool:error" each: the tool the model called at that step (without
 * the CLI's prefix; "answer" for the final one) and whether the result of
 * the step before, which that request carried, was an error; in out. */
static void play_steps(const char *log, const char *play, char *out, size_t size)
{
        char cmd[PATH_MAX + 512];

        snprintf(cmd, sizeof(cmd),
                 "jq -r --arg p '%s' 'select(.play == $p) | \"\\(.step):\\(.tool // \"answer\" | "
                 "sub(\"^mcp__demesne__\"; \"\"))"
                 ":\\(.tool_result.is_error // false)\"' %s | sort -n | uniq | tr '\\n' ' '",
                 play, log);
        run_out(cmd, out, size);
}

/* An orchestrator agent on OpenSandbox (the real Claude Code, in a
 * sandbox of the fixture, its endpoint reached through the remote
 * listener): it makes a worker sandbox and runs a command in it, starts a
 * background script and cancels it, runs a worker agent in the background
 * and waits for its answer, lists and destroys; then, under a tree budget,
 * its second worker is refused once the tree has spent it. */
static void remote_orchestrator_cases(int vendor_port, const char *log)
{
        struct child *outer = c, orch = { 0 }, budget = { 0 };
        char steps[1024], args[256], said[512], cmd[PATH_MAX + 256];
        const char *result, *run;
        json_object *m, *rep;
        double cost = 0;

        start_agent_server(&orch, vendor_port, NULL, true);
        m = call_timeout("sandbox_research",
                         "{\"prompt\":\"[play:orchestrate] Make the workers, check them.\","
                         "\"model\":\"sonnet\",\"timeout_seconds\":600}",
                         600000, NULL);
        result = str_at(structured(m), "result");
        if (!check(!result_is_error(m) && strstr(result, "exec said worker-ok"),
                   "orchestrator: an agent on OpenSandbox made a worker sandbox and ran a command in it"))
                diag("%s", m ? json_object_to_json_string(m) : "no response");
        check(strstr(result, "the sleeper is cancelled") != NULL,
              "orchestrator: it started a background worker script and cancelled it");
        if (!check(strstr(result, "the worker said The answer is 42.") != NULL,
                   "orchestrator: it ran a worker agent in the background on OpenSandbox and waited for its answer"))
                diag("its answer: %s", result);
        check(strstr(result, "listed sbx-") != NULL,
              "orchestrator: sandbox_list through its endpoint shows its worker");
        play_steps(log, "[play:orchestrate]", steps, sizeof(steps));
        if (!check(strcmp(steps, "0:sandbox_create:false 1:sandbox_exec:false 2:sandbox_script:false "
                                 "3:sandbox_cancel:false 4:sandbox_research:false 5:sandbox_wait:false "
                                 "6:sandbox_list:false 7:sandbox_destroy:false 8:answer:false ") == 0,
                   "orchestrator: its eight calls went through the CLI and the listener, in order, none an error"))
                diag("the fixture saw: %s", steps);
        run = str_at(structured(m), "run_id");
        snprintf(args, sizeof(args), "{\"run_id\":\"%s\"}", run);
        rep = call("sandbox_usage_report", args);
        if (!check(json_object_get_int(path(structured(rep), "by_kind", "research", NULL)) == 2 &&
                           json_object_get_int(path(structured(rep), "by_kind", "sandbox", NULL)) == 1 &&
                           json_object_get_int(path(structured(rep), "by_kind", "script", NULL)) == 1,
                   "orchestrator: the usage report on its run rolls its workers up"))
                diag("%s", rep ? json_object_to_json_string(rep) : "no response");
        json_object_put(rep);
        json_object_put(m);
        m = call("sandbox_list", "{}");
        check(json_object_array_length(path(structured(m), "sandboxes", NULL, NULL)) == 0,
              "orchestrator: none of its tree is left");
        json_object_put(m);
        check_int(finish(c, 60000), 0, "orchestrator: the server exits cleanly");

        /* The tree's budget holds on the orchestrator and its workers
         * together: under DEMESNE_TREE_MAX_USD=0.025 and
         * DEMESNE_AGENT_MAX_USD=0.015, at $0.00459 a reply, the
         * orchestrator holds $0.015 (its three replies fit), its first
         * worker gets the $0.01 left (its two replies fit), and its second
         * is refused before it starts: what is left is less than a reply. */
        setenv("DEMESNE_TREE_MAX_USD", "0.025", 1);
        start_agent_server(&budget, vendor_port, "0.015", true);
        unsetenv("DEMESNE_TREE_MAX_USD");
        m = call_timeout("sandbox_research", "{\"prompt\":\"[play:budget] Two workers.\",\"model\":\"sonnet\"}", 600000,
                         NULL);
        play_steps(log, "[play:budget]", steps, sizeof(steps));
        if (!check(!result_is_error(m) &&
                           strcmp(str_at(structured(m), "result"), "the first worker said The answer is 42.") == 0 &&
                           strcmp(steps, "0:sandbox_research:false 1:sandbox_research:false 2:answer:true ") == 0,
                   "budget: the orchestrator's first worker answered, its second was refused, and it answered"))
                diag("the fixture saw: %s; the run: %s", steps, m ? json_object_to_json_string(m) : "no response");
        snprintf(cmd, sizeof(cmd),
                 "jq -r 'select(.play == \"[play:budget]\" and .step == 2) | .tool_result.snippet' %s | head -c 300",
                 log);
        run_out(cmd, said, sizeof(said));
        if (!check(strstr(said, "no more agent runs in it") && strstr(said, "DEMESNE_TREE_MAX_USD=0.025"),
                   "budget: the second worker was refused before it started, naming DEMESNE_TREE_MAX_USD"))
                diag("the refusal the orchestrator got: %s", said);
        snprintf(args, sizeof(args), "{\"run_id\":\"%s\"}", str_at(structured(m), "run_id"));
        rep = call("sandbox_usage_report", args);
        cost = json_object_get_double(path(structured(rep), "cost_usd", NULL, NULL));
        if (!check(cost > 0.01 && cost <= 0.025,
                   "budget: the tree (orchestrator and workers) spent $%.5f, within its $0.025", cost))
                diag("%s", rep ? json_object_to_json_string(rep) : "no response");
        json_object_put(rep);
        json_object_put(m);
        check_int(finish(c, 60000), 0, "budget: the server exits cleanly");
        c = outer;
}

/* sandbox_research (egress open: on a network_mode host fixture, the
 * host's network) with the real Claude Code in its image: the CLI reaches
 * the vendor proxy through the remote listener (TLS, its CA handed in),
 * routed by its x-api-key; the proxy puts the real key on, counts the
 * usage, and its cap stops a run past DEMESNE_AGENT_MAX_USD; a wrong key
 * gets 401 from the listener. */
static void remote_agent_cases(void)
{
        struct child *host = c, mine = { 0 }, capped = { 0 }, unrouted = { 0 };
        char log[PATH_MAX], ca[PATH_MAX + 32], file[PATH_MAX + 64], cmd[2 * PATH_MAX + 512], code[64] = "";
        const char *url;
        _cleanup_free_ char *answer = NULL, *vlog = NULL;
        json_object *m, *sc;
        int64_t t0 = dm_now_ms();
        pid_t vendor = 0;
        bool images;
        int port;

        snprintf(log, sizeof(log), "%s/vendor-fixture.log", test_root);
        snprintf(file, sizeof(file), "%s/plays.json", test_root);
        port = write_file(file, PLAYS) == 0 ? vendor_fixture_start(log, file, &vendor) : 0;
        if (!check(port > 0, "agent: the vendor fixture started"))
                return;
        /* Without the listener: refused before anything is made, naming it. */
        start_agent_server(&unrouted, port, NULL, false);
        m = call("sandbox_research", "{\"prompt\":\"Find the answer.\",\"model\":\"sonnet\"}");
        check(result_error_says(m, "DEMESNE_REMOTE_LISTEN"), "agent: refused without a remote listener, naming it");
        json_object_put(m);
        check(agent_described("Unavailable on this server: its sandboxes are not on this host") &&
                      agent_described("DEMESNE_REMOTE_LISTEN"),
              "agent: and its description says so");
        check_int(finish(c, 30000), 0, "agent: that server exits cleanly");
        start_agent_server(&mine, port, NULL, true);
        check(!agent_described("Unavailable"), "agent: with the listener its description does not say unavailable");
        /* The CLIs' images must be in the engine the fixture makes its
         * sandboxes in: tests/run-dockerd.sh copies base and python only, so
         * on dockerd the runs are skipped, saying so; they run on Podman in
         * the main suite and the rootless one. */
        images = image_in_engine("localhost/demesne/claude-code:latest") &&
                 image_in_engine("localhost/demesne/codex:latest");
        if (!images)
                skip("agent runs: the claude-code and codex images are not in this engine (tests/run-dockerd.sh "
                     "copies base and python only); they run against Podman");
        if (images) {
                m = call_timeout(
                        "sandbox_research",
                        "{\"prompt\":\"Find the answer and write it to /out/answer.txt.\",\"model\":\"sonnet\"}",
                        300000, NULL);
                sc = structured(m);
                if (!check(!result_is_error(m) && json_object_get_int(path(sc, "exit_code", NULL, NULL)) == 0 &&
                                   strcmp(str_at(sc, "result"), "The answer is 42.") == 0,
                           "agent: Claude Code on OpenSandbox answers through the remote listener"))
                        diag("%s", m ? json_object_to_json_string(m) : "no response");
                /* The fixture's fixed counts, two replies (tests/e2e/client-agents.mjs). */
                check(json_object_get_int(path(sc, "usage", "input_tokens", NULL)) == 2000 &&
                              json_object_get_int(path(sc, "usage", "output_tokens", NULL)) == 100 &&
                              json_object_get_double(path(sc, "cost_usd", NULL, NULL)) > 0,
                      "agent: its usage is counted by the vendor proxy, with a cost");
                snprintf(file, sizeof(file), "%s/answer.txt", str_at(sc, "output_dir"));
                answer = read_text(file, NULL);
                check_str(answer, "42\n", "agent: its tool call wrote /out/answer.txt");
                snprintf(file, sizeof(file), "%s/vendor.log", str_at(sc, "output_dir"));
                vlog = read_text(file, NULL);
                check(strstr(vlog, " forwarded ") != NULL, "agent: the proxy's decisions are in vendor.log");
                /* ... and in the run journal, counted for this run. */
                snprintf(cmd, sizeof(cmd), "cat %s/state/activity/*.jsonl | grep '\"event\":\"egress\"' | grep -c '%s'",
                         test_root, str_at(sc, "run_id"));
                run_out(cmd, code, sizeof(code));
                check(atoi(code) >= 1, "agent: and in the run journal's egress lines for the run");
                json_object_put(m);
                /* The fixture saw the real key on every request, none without. */
                snprintf(cmd, sizeof(cmd), "echo $(grep -c '\"auth_ok\":true' %s) $(grep -c '\"auth_ok\":false' %s)",
                         log, log);
                run_out(cmd, code, sizeof(code));
                code[strcspn(code, "\n")] = '\0';
                check(atoi(code) >= 2 && strcmp(strchr(code, ' ') ? strchr(code, ' ') : "", " 0") == 0,
                      "agent: the vendor got the real key on every request (with, without: %s)", code);

                /* Codex: its token in Authorization: Bearer, the CA in its bundle. */
                m = call_timeout("sandbox_research", "{\"prompt\":\"Find the answer.\",\"model\":\"gpt-5.5\"}", 300000,
                                 NULL);
                sc = structured(m);
                if (!check(!result_is_error(m) && strcmp(str_at(sc, "result"), "The answer is 42.") == 0 &&
                                   json_object_get_int(path(sc, "usage", "input_tokens", NULL)) == 1600 &&
                                   json_object_get_double(path(sc, "cost_usd", NULL, NULL)) > 0,
                           "agent: Codex on OpenSandbox answers through the remote listener, its usage counted"))
                        diag("%s", m ? json_object_to_json_string(m) : "no response");
                json_object_put(m);
        }

        if (images)
                remote_orchestrator_cases(port, log);

        /* A wrong key at the listener: 401, nothing behind it answers. The
         * listener's address is a nested script's DEMESNE_MCP_URL. */
        m = call("sandbox_script", "{\"image\":\"base\",\"egress\":\"open\",\"nested\":true,"
                                   "\"command\":\"printf %s \\\"$DEMESNE_MCP_URL\\\"\"}");
        url = str_at(structured(m), "stdout");
        snprintf(ca, sizeof(ca), "%s/certs/server/ca.pem", test_root);
        snprintf(cmd, sizeof(cmd),
                 "curl -s -o /dev/null -w '%%{http_code}' --cacert %s -H 'x-api-key: sk-wrong-0123456789abcdef' "
                 "-H 'content-type: application/json' -d '{}' '%.*s/v1/messages'",
                 ca, (int)(strlen(url) > 4 ? strlen(url) - 4 : 0), url);
        run_out(cmd, code, sizeof(code));
        if (!check(strcmp(code, "401") == 0, "agent: a wrong x-api-key gets 401 from the remote listener"))
                diag("'%s' said '%s'; the script: %s", cmd, code, m ? json_object_to_json_string(m) : "no response");
        json_object_put(m);
        check_int(finish(c, 30000), 0, "agent: the server exits cleanly");

        /* Past DEMESNE_AGENT_MAX_USD (one reply costs $0.0046 at sonnet's
         * prices): the second request is refused and the run stopped. */
        if (images) {
                start_agent_server(&capped, port, "0.006", true);
                m = call_timeout("sandbox_research", "{\"prompt\":\"Find the answer.\",\"model\":\"sonnet\"}", 300000,
                                 NULL);
                if (!check(result_error_says(m, "spending cap of $0.006 reached (DEMESNE_AGENT_MAX_USD)"),
                           "agent: the spending cap stops a run on OpenSandbox as locally"))
                        diag("%s", m ? json_object_to_json_string(m) : "no response");
                json_object_put(m);
                check_int(finish(c, 30000), 0, "agent: the capped server exits cleanly");
        }
        kill(vendor, SIGTERM);
        waitpid(vendor, NULL, 0);
        c = host;
        diag("agents on OpenSandbox: %lld s", (long long)((dm_now_ms() - t0) / 1000));
}

static struct os_fixture *fixture; /* the opensandbox pass's (network_mode bridge) */

/* Runs the shell command cmd: its exit status when its output (both
 * streams) says what, else -1000 (and what it said, as a diag). */
static int run_says(const char *cmd, const char *what)
{
        char line[PATH_MAX + 256], out[8192] = "";
        size_t n = 0;
        FILE *f;
        int status;

        snprintf(line, sizeof(line), "%s 2>&1", cmd);
        f = popen(line, "r");
        if (!f)
                return -1000;
        n = fread(out, 1, sizeof(out) - 1, f);
        out[n] = '\0';
        status = pclose(f);
        if (!strstr(out, what)) {
                diag("'%s' did not say '%s': %s", cmd, what, out);
                return -1000;
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The engine's nested sandboxes: their endpoint in their own network
 * namespace, at egress none. */
static void engine_nested(void)
{
        nested_cases("none", false);
}

/* OpenSandbox's: refused without DEMESNE_REMOTE_LISTEN, naming it; with it,
 * the policy sent allows its address, and on a server whose sandboxes have
 * the host's network (network_mode host, where no policy is sent: egress
 * open) the endpoint is reached through the listener on 127.0.0.1. */
static void remote_nested(void)
{
        struct child *host = c, mine = { 0 };
        char state_file[PATH_MAX], args[128], domain[80];
        struct os_fixture hostnet;
        json_object *m, *st, *pol;

        m = call("sandbox_create", "{\"image\":\"base\",\"egress\":\"none\",\"nested\":true}");
        check(result_error_says(m, "DEMESNE_REMOTE_LISTEN"), "nested: refused without a remote listener, naming it");
        json_object_put(m);
        /* Off loopback without TLS: the server does not start; doctor says why. */
        check(run_says("DEMESNE_REMOTE_LISTEN=192.0.2.1:0 \"$DEMESNE\" serve </dev/null", "it needs TLS") != 0,
              "nested: a remote listener off loopback without TLS stops the server, saying so");
        check(run_says("DEMESNE_REMOTE_LISTEN=192.0.2.1:0 \"$DEMESNE\" doctor", "is not loopback and has no TLS") != 0,
              "nested: doctor says so too, and fails");
        check(run_says("DEMESNE_REMOTE_LISTEN=127.0.0.1:0 \"$DEMESNE\" doctor",
                       "nested sandboxes (nested: true): through the remote listener http://127.0.0.1:0/mcp") >= 0,
              "nested: doctor names the remote listener");
        check(run_says("\"$DEMESNE\" doctor", "unavailable on this backend without DEMESNE_REMOTE_LISTEN") >= 0,
              "agent: doctor says agent tools need the remote listener here");

        setenv("DEMESNE_REMOTE_LISTEN", "127.0.0.1:0", 1);
        setenv("ANTHROPIC_API_KEY", VENDOR_KEY, 1); /* never sent: the sandbox cannot reach the listener here */
        c = &mine;
        start_server();
        unsetenv("DEMESNE_REMOTE_LISTEN");
        unsetenv("ANTHROPIC_API_KEY");
        m = call("sandbox_create", "{\"image\":\"base\",\"egress\":\"none\",\"nested\":true}");
        st = os_fixture_stats(fixture);
        pol = json_object_array_get_idx(path(st, "policies", NULL, NULL),
                                        json_object_array_length(path(st, "policies", NULL, NULL)) - 1);
        if (!check(!result_is_error(m) && pol &&
                           strstr(json_object_to_json_string_ext(pol, JSON_C_TO_STRING_PLAIN),
                                  "\"egress\":[{\"action\":\"allow\",\"target\":\"127.0.0.1\"}]"),
                   "nested: egress none's policy allows the remote listener's address, and nothing else"))
                diag("%s; policy %s", m ? json_object_to_json_string(m) : "no response",
                     pol ? json_object_to_json_string(pol) : "none");
        snprintf(args, sizeof(args), "{\"sandbox_id\":\"%s\"}", str_at(structured(m), "sandbox_id"));
        json_object_put(st);
        json_object_put(m);
        json_object_put(call("sandbox_destroy", args));
        /* A nested script's too (it takes no warm container, sent without it). */
        m = call("sandbox_script", "{\"image\":\"base\",\"egress\":\"none\",\"nested\":true,\"command\":\"true\"}");
        st = os_fixture_stats(fixture);
        pol = json_object_array_get_idx(path(st, "policies", NULL, NULL),
                                        json_object_array_length(path(st, "policies", NULL, NULL)) - 1);
        if (!check(!result_is_error(m) && pol &&
                           strstr(json_object_to_json_string_ext(pol, JSON_C_TO_STRING_PLAIN),
                                  "\"egress\":[{\"action\":\"allow\",\"target\":\"127.0.0.1\"}]"),
                   "nested: a nested script's policy allows it too"))
                diag("%s; policy %s", m ? json_object_to_json_string(m) : "no response",
                     pol ? json_object_to_json_string(pol) : "none");
        json_object_put(st);
        json_object_put(m);
        /* An agent's at egress none: the listener, for its vendor proxy,
         * and nothing else (the CLI cannot reach it from this fixture's
         * bridge: the run's timeout ends it). */
        m = call("sandbox_agent", "{\"prompt\":\"x\",\"model\":\"sonnet\",\"nested\":false,\"timeout_seconds\":3}");
        st = os_fixture_stats(fixture);
        pol = json_object_array_get_idx(path(st, "policies", NULL, NULL),
                                        json_object_array_length(path(st, "policies", NULL, NULL)) - 1);
        if (!check(pol && !strcmp(json_object_to_json_string_ext(pol, JSON_C_TO_STRING_PLAIN),
                                  "{\"defaultAction\":\"deny\",\"egress\":[{\"action\":\"allow\",\"target\":"
                                  "\"127.0.0.1\"}]}"),
                   "agent: an agent run's policy at egress none allows the listener's address alone"))
                diag("%s; policy %s", m ? json_object_to_json_string(m) : "no response",
                     pol ? json_object_to_json_string(pol) : "none");
        json_object_put(st);
        json_object_put(m);
        check_int(finish(c, 30000), 0, "nested: the server exits cleanly");
        c = host;

        snprintf(state_file, sizeof(state_file), "/tmp/dm-conformance-hostnet-%d.json", (int)getpid());
        if (!check(os_fixture_start_net(&hostnet, API_KEY, state_file, true, 86400, "host") == 0,
                   "a fixture with network_mode host started"))
                return;
        snprintf(domain, sizeof(domain), "%s", getenv("OPEN_SANDBOX_DOMAIN"));
        setenv("OPEN_SANDBOX_DOMAIN", hostnet.domain, 1);
        nested_cases("open", true);
        remote_agent_cases();
        setenv("OPEN_SANDBOX_DOMAIN", domain, 1);
        check_int(count_label(engine, hostnet.label), 0, "no container of the network_mode host fixture is left");
        os_fixture_stop(&hostnet);
        unlink(state_file);
}

#endif
