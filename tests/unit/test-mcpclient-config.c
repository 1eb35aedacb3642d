/* SPDX-License-Identifier: MIT */
/* The host MCP servers file (DEMESNE_HOST_MCP, src/mcp/client-config.c):
 * good files give every field; each bad one is refused with one line that
 * names the file, the server and the fault. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/mcp/client.h"
#include "tests/tap.h"

#define PATH "/etc/demesne/host-mcp.json"

static int parse(const char *text, struct dm_mcpclient_config *cfg, struct dm_error *err)
{
        memset(err, 0, sizeof(*err));
        return dm_mcpclient_config_parse(PATH, text, strlen(text), cfg, err);
}

/* text is refused with a message holding want. */
static void refused(const char *text, const char *want, const char *what)
{
        struct dm_mcpclient_config cfg = { 0 };
        struct dm_error err;
        int r = parse(text, &cfg, &err);

        ok(r == -EINVAL && strncmp(err.msg, PATH ": ", strlen(PATH) + 2) == 0 && strstr(err.msg, want) &&
                   !strchr(err.msg, '\n'),
           "%s: '%s'", what, err.msg);
        dm_mcpclient_config_release(&cfg);
}

static void good_files(void)
{
        struct dm_mcpclient_config cfg = { 0 };
        struct dm_error err;
        const struct dm_mcpclient_spec *fs, *web;
        int r;

        r = parse("{\"mcpServers\": {\n"
                  "  \"fs\": {\"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-filesystem\","
                  " \"/srv/docs\"], \"env\": {\"K\": \"V\"}, \"user\": \"mcp-docs\","
                  " \"tools\": [\"read_text_file\", \"list_directory\"]},\n"
                  "  \"web\": {\"url\": \"http://127.0.0.1:8931/mcp\", \"headers\": {\"Authorization\": \"Bearer t\"},"
                  " \"tools\": [\"fetch\"], \"max_message\": 65536, \"timeout_seconds\": 5}\n"
                  "}}\n",
                  &cfg, &err);
        ok(r == 0 && cfg.n == 2, "a file with a stdio and an HTTP server is read (%s)", err.msg);
        if (r != 0 || cfg.n != 2) {
                dm_mcpclient_config_release(&cfg);
                return;
        }
        fs = strcmp(cfg.servers[0].name, "fs") == 0 ? &cfg.servers[0] : &cfg.servers[1];
        web = fs == &cfg.servers[0] ? &cfg.servers[1] : &cfg.servers[0];
        ok(strcmp(fs->command, "npx") == 0 && !fs->url && fs->args[0] && strcmp(fs->args[2], "/srv/docs") == 0 &&
                   !fs->args[3],
           "fs: its command and arguments");
        ok(fs->env[0] && strcmp(fs->env[0], "K=V") == 0 && !fs->env[1], "fs: its environment as K=V");
        ok(fs->user && strcmp(fs->user, "mcp-docs") == 0 && !web->user, "fs: the user it runs as; web: none");
        ok(strcmp(fs->tools[0], "read_text_file") == 0 && strcmp(fs->tools[1], "list_directory") == 0 && !fs->tools[2],
           "fs: its tools");
        ok(fs->max_message == 0 && fs->timeout_ms == 0 && fs->headers && !fs->headers[0],
           "fs: defaults where nothing is given");
        ok(!web->command && strcmp(web->url, "http://127.0.0.1:8931/mcp") == 0 && web->args && !web->args[0],
           "web: its url");
        ok(web->headers[0] && strcmp(web->headers[0], "Authorization: Bearer t") == 0 && !web->headers[1],
           "web: its headers as 'Name: value'");
        ok(web->max_message == 65536 && web->timeout_ms == 5000, "web: max_message and timeout_seconds");
        dm_mcpclient_config_release(&cfg);

        r = parse("{\"mcpServers\": {}}", &cfg, &err);
        ok(r == 0 && cfg.n == 0, "no servers at all is fine");
        dm_mcpclient_config_release(&cfg);
        r = parse("{\"mcpServers\": {\"a-b_C9\": {\"command\": \"x\", \"tools\": [], \"type\": \"stdio\"}}}", &cfg,
                  &err);
        ok(r == 0 && cfg.n == 1 && !cfg.servers[0].tools[0], "an empty list of tools and a client's 'type' are fine");
        dm_mcpclient_config_release(&cfg);
}

static void bad_files(void)
{
        refused("", "not JSON", "an empty file");
        refused("{\"mcpServers\": {", "not JSON: it ends too early", "a file cut short");
        refused("{\"mcpServers\": {}} x", "not JSON: text after the value", "text after the JSON");
        refused("nonsense", "not JSON", "not JSON at all");
        refused("[]", "must be an object with \"mcpServers\"", "an array");
        refused("{\"servers\": {}}", "must be an object with \"mcpServers\"", "no mcpServers");
        refused("{\"mcpServers\": []}", "must be an object with \"mcpServers\"", "mcpServers not an object");
        refused("{\"mcpServers\": {\"fs\": []}}", "server 'fs': must be an object", "a server that is no object");
        refused("{\"mcpServers\": {\"f s\": {\"command\": \"x\", \"tools\": []}}}",
                "server name 'f s' must be 1 to 64 of [A-Za-z0-9_-]", "a server name with a space");
        refused("{\"mcpServers\": {\"a.b\": {\"command\": \"x\", \"tools\": []}}}", "server name 'a.b'",
                "a server name with a dot");
        refused("{\"mcpServers\": {\"\": {\"command\": \"x\", \"tools\": []}}}", "server name ''",
                "an empty server name");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"url\": \"http://h/mcp\", \"tools\": []}}}",
                "server 'fs': has both command and url", "both command and url");
        refused("{\"mcpServers\": {\"fs\": {\"tools\": []}}}", "server 'fs': has neither command nor url",
                "neither command nor url");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\"}}}", "server 'fs': has no tools", "no tools");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"tools\": \"read\"}}}",
                "server 'fs': tools must be an array", "tools not an array");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"tools\": [1]}}}",
                "server 'fs': tools must hold strings only", "a tool that is no string");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"tools\": [\"read/file\"]}}}",
                "server 'fs': tool name 'read/file' must be 1 to 64 of [A-Za-z0-9_-]", "a tool name with a slash");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"\", \"tools\": []}}}",
                "server 'fs': command must be a non-empty string", "an empty command");
        refused("{\"mcpServers\": {\"fs\": {\"command\": 3, \"tools\": []}}}",
                "server 'fs': command must be a non-empty string", "a command that is no string");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"args\": \"-y\", \"tools\": []}}}",
                "server 'fs': args must be an array of strings", "args not an array");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"args\": [null], \"tools\": []}}}",
                "server 'fs': args must hold strings only", "args with a null");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"env\": [], \"tools\": []}}}",
                "server 'fs': env must be an object of strings", "env not an object");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"env\": {\"K\": 1}, \"tools\": []}}}",
                "server 'fs': env must map names to strings", "an env value that is no string");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"headers\": {}, \"tools\": []}}}",
                "server 'fs': headers are for url servers", "headers on a command server");
        refused("{\"mcpServers\": {\"w\": {\"url\": \"ftp://h/mcp\", \"tools\": []}}}",
                "server 'w': url must be an http:// or https:// URL", "an ftp url");
        refused("{\"mcpServers\": {\"w\": {\"url\": \"http://h/mcp\", \"args\": [], \"tools\": []}}}",
                "server 'w': args, env and user are for command servers", "args on a url server");
        refused("{\"mcpServers\": {\"w\": {\"url\": \"http://h/mcp\", \"headers\": {\"X\": \"a\\r\\nB: c\"}, "
                "\"tools\": []}}}",
                "server 'w': headers must map names to strings", "a header value with a line break");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"tools\": [], \"max_message\": 0}}}",
                "server 'fs': max_message must be a number of bytes", "max_message 0");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"tools\": [], \"timeout_seconds\": \"60\"}}}",
                "server 'fs': timeout_seconds must be a whole number", "timeout_seconds as a string");
        refused("{\"mcpServers\": {\"w\": {\"url\": \"http://h/mcp\", \"user\": \"nobody\", \"tools\": []}}}",
                "server 'w': args, env and user are for command servers", "a user for a url server");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"user\": \"\", \"tools\": []}}}",
                "server 'fs': user must be a user name", "an empty user");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"user\": 0, \"tools\": []}}}",
                "server 'fs': user must be a user name", "a uid for a user");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"user\": \"a:b\", \"tools\": []}}}",
                "server 'fs': user must be a user name", "a user with a colon");
        refused("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"tools\": [], \"tool\": [\"a\"]}}}",
                "server 'fs': unknown member 'tool'", "a misspelt member");
}

static void files(void)
{
        struct dm_mcpclient_config cfg = { 0 };
        struct dm_error err = { 0 };
        char dir[] = "/tmp/dm-test-mcpcfg-XXXXXX", path[64];
        FILE *f;
        int r;

        if (!mkdtemp(dir)) {
                ok(0, "mkdtemp");
                return;
        }
        snprintf(path, sizeof(path), "%s/host.json", dir);
        r = dm_mcpclient_config_load(path, &cfg, &err);
        ok(r == -ENOENT && strstr(err.msg, path) && strstr(err.msg, "cannot read it"), "a missing file: '%s'", err.msg);
        f = fopen(path, "w");
        fputs("{\"mcpServers\": {\"fs\": {\"command\": \"x\", \"tools\": [\"t\"]}}}", f);
        fclose(f);
        r = dm_mcpclient_config_load(path, &cfg, &err);
        ok(r == 0 && cfg.n == 1 && strcmp(cfg.servers[0].tools[0], "t") == 0, "a file on disk is read");
        dm_mcpclient_config_release(&cfg);
        r = dm_mcpclient_config_load(dir, &cfg, &err);
        ok(r < 0 && strstr(err.msg, "not a regular file"), "a directory is refused: '%s'", err.msg);
        unlink(path);
        rmdir(dir);
}

int main(void)
{
        good_files();
        bad_files();
        files();
        ok(dm_mcpclient_name_ok("read_text_file") && dm_mcpclient_name_ok("a-B_9") && !dm_mcpclient_name_ok("") &&
                   !dm_mcpclient_name_ok("a b") && !dm_mcpclient_name_ok("a__b\n"),
           "names: [A-Za-z0-9_-] only");
        return done_testing();
}
