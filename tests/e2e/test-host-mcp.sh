#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The host tool proxy (DEMESNE_HOST_MCP): the real npm filesystem MCP server
# (@modelcontextprotocol/server-filesystem, run with the host's node) is the
# operator's host server "fs", listed with its reading and its writing
# tools. Checked: a nested sandbox's tools/list shows host__fs__read_text_file
# and host__fs__list_directory and none of the writing tools; the host
# client's own tools/list shows no host__ tool and cannot call one; a read
# through the proxy returns the file; a path outside the server's roots
# fails with the server's own message; an unlisted tool's name is unknown;
# a second host server, over Streamable HTTP (another demesne), lends its
# read-only sandbox_list and not sandbox_script;
# the log names the caller's run id for each call; after the server stops,
# the npm server's process is gone; a malformed file stops `demesne serve`
# with a line naming the file and the fault. Against the real engine, over
# stdio with examples/lib/mcp.sh, from curl inside the sandbox.
. "$(dirname -- "${BASH_SOURCE[0]}")/lib/tap.sh"
needs jq "needs jq"
fs_server=$top/tests/e2e/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js
if [ ! -f "$fs_server" ]; then
	echo "1..0 # SKIP tests/e2e/node_modules is missing: run \`(cd tests/e2e && npm ci)\` first"
	exit 77
fi

tmp=$(mktemp -d /tmp/dm-hostmcp-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=300 DEMESNE_POOL=0
mkdir -p "$tmp/docs/sub"
echo "the host's own words" >"$tmp/docs/note.txt"
# A Streamable HTTP host server: another demesne, served over HTTP with a
# token, whose sandbox_list is read-only and sandbox_script is not.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
DEMESNE_HTTP_TOKEN=$token DEMESNE_OUTPUT_ROOT=$tmp/web-out DEMESNE_STATE_DIR=$tmp/web-state \
	"$DEMESNE" serve --http "127.0.0.1:$port" >"$tmp/web.log" 2>&1 &
web_pid=$!
trap 'kill $web_pid 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do grep -q "serving MCP on" "$tmp/web.log" && break; sleep 0.1; done
jq -n --arg s "$fs_server" --arg d "$tmp/docs" --arg u "http://127.0.0.1:$port/mcp" --arg t "Bearer $token" \
	'{mcpServers: {fs: {command: "node", args: [$s, $d],
	tools: ["read_text_file", "list_directory", "write_file", "edit_file", "create_directory", "move_file"]},
	web: {url: $u, headers: {Authorization: $t}, tools: ["sandbox_list", "sandbox_script"]}}}' \
	>"$tmp/host-mcp.json"

# 1-3: a bad file stops the server at start, naming the file and the fault.
bad() { # $1: the file's content; $2: what the message must say
	printf '%s' "$1" >"$tmp/bad.json"
	out=$(DEMESNE_HOST_MCP=$tmp/bad.json timeout 60 "$DEMESNE" serve </dev/null 2>&1)
	rc=$?
	ok $([ $rc = 1 ] && grep -q "$tmp/bad.json" <<<"$out" && grep -qF "$2" <<<"$out"; echo $?) \
		"a file that $3 stops serve (rc $rc: $(grep -i error <<<"$out" | head -n 1))"
}
bad '{"mcpServers": ' "not JSON" "is not JSON"
bad '{"mcpServers": {"fs": {"command": "x", "url": "http://127.0.0.1:1/mcp", "tools": []}}}' \
	"server 'fs': has both command and url" "gives both command and url"
bad '{"mcpServers": {"fs": {"command": "x"}}}' "server 'fs': has no tools" "lists no tools"

export DEMESNE_HOST_MCP=$tmp/host-mcp.json
# doctor starts the host servers as serve would and says what each lends.
doc=$(timeout 120 "$DEMESNE" doctor 2>/dev/null)
ok $(grep -q "^ok      host mcp 'fs': 2 tools offered to nested sandboxes" <<<"$doc" &&
	grep -q "^ok      host mcp 'web': 1 tool offered to nested sandboxes" <<<"$doc"; echo $?) \
	"doctor lists the host servers and what each offers ($(grep "host mcp" <<<"$doc" | tr '\n' ' '))"
. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }
diag() { printf '# %s\n' "$@" >&3; }

# Its call.sh prints a JSON-RPC error (an unknown tool), which comes back
# as plain JSON, not an event, as it prints a result.
. "$top/tests/e2e/lib/nested.sh"
# tools/list from inside, one page per call (the cursor as the argument).
cat >"$tmp/list.sh" <<'EOF'
set -e
u=$DEMESNE_MCP_URL
h() { curl -sS -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream" -H "Authorization: Bearer $DEMESNE_MCP_TOKEN" "$@"; }
h -D /tmp/lh -o /dev/null "$u" -d '{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"list","version":"1"}}}'
sid=$(grep -i '^mcp-session-id:' /tmp/lh | tr -d '\r' | cut -d' ' -f2)
h -o /dev/null -H "Mcp-Session-Id: $sid" "$u" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
cursor=
while :; do
	p='{}'
	[ -z "$cursor" ] || p="{\"cursor\":\"$cursor\"}"
	page=$(h -H "Mcp-Session-Id: $sid" "$u" -d "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":$p}" | sed -n 's/^data: //p; /^{/p' | tail -n 1)
	echo "$page" | grep -o '"name":"[A-Za-z0-9_]*"' | cut -d'"' -f4
	cursor=$(echo "$page" | grep -o '"nextCursor":"[^"]*"' | cut -d'"' -f4)
	[ -n "$cursor" ] || break
done
EOF

mcp_start
diag "host servers: $(grep "host mcp 'fs'" "$tmp/server.log" | tail -n 1)"

# 4-6: who sees what.
_mcp_request tools/list '{}'
host_names=$(jq -r '.result.tools[].name' <<<"$MCP_ANSWER")
tap $(! grep -q '^host__' <<<"$host_names" && grep -q '^sandbox_script$' <<<"$host_names"; echo $?) \
	"the host's own client sees no host__ tool ($(tr '\n' ' ' <<<"$host_names" | head -c 200))"
mcp_call host__fs__read_text_file "$(jq -cn --arg p "$tmp/docs/note.txt" '{path: $p}')"
tap $(jq -e '.code == -32602 and (.message | test("unknown tool"))' <<<"$MCP_RESULT" >/dev/null; echo $?) \
	"and calling one is an unknown tool to it ($(jq -r '.message // .' <<<"$MCP_RESULT" | head -c 200))"

nested_box none
mcp_call sandbox_upload "$(jq -cn --arg id "$box" --arg c "$(base64 -w0 "$tmp/list.sh")" \
	'{sandbox_id: $id, dst: "/workspace/list.sh", content: $c}')"
mcp_call sandbox_exec "$(jq -cn --arg id "$box" '{sandbox_id: $id, command: "sh /workspace/list.sh"}')"
names=$(field stdout)
[ -n "$names" ] || diag "list.sh: $(field stderr | head -c 500)"
tap $(grep -qx host__fs__read_text_file <<<"$names" && grep -qx host__fs__list_directory <<<"$names" &&
	grep -qx sandbox_script <<<"$names"; echo $?) \
	"a nested sandbox's tools/list shows host__fs__read_text_file and host__fs__list_directory ($(grep host__ <<<"$names" | tr '\n' ' '))"
tap $(! grep -Eq 'write_file|edit_file|create_directory|move_file' <<<"$names"; echo $?) \
	"but none of the writing tools, though the file lists them"

tap $(grep -qx host__web__sandbox_list <<<"$names" && ! grep -q host__web__sandbox_script <<<"$names"; echo $?) \
	"over Streamable HTTP too: the read-only host__web__sandbox_list, not host__web__sandbox_script"

# calls through the proxy.
inside "$box" host__web__sandbox_list '{}'
tap $([ "$(jq -r .isError <<<"$R")" = false ] && jq -e '.sandboxes | type == "array"' <<<"$S" >/dev/null; echo $?) \
	"a call over HTTP returns the server's structuredContent ($(jq -c . <<<"$S" | head -c 200))"
inside "$box" host__fs__read_text_file "$(jq -cn --arg p "$tmp/docs/note.txt" '{path: $p}')"
tap $([ "$(jq -r .isError <<<"$R")" != true ] && said | grep -qx "the host's own words"; echo $?) \
	"a read through the proxy returns the file's content ($(said | head -c 200))"
inside "$box" host__fs__list_directory "$(jq -cn --arg p "$tmp/docs" '{path: $p}')"
tap $(said | grep -q 'note.txt' && said | grep -q 'sub'; echo $?) "a listing too ($(said | tr '\n' ' ' | head -c 200))"
inside "$box" host__fs__read_text_file '{"path":"/etc/passwd"}'
tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -qi 'access denied.*outside allowed directories'; echo $?) \
	"a path outside the server's roots fails with the server's own message ($(said | head -c 200))"
inside "$box" host__fs__write_file "$(jq -cn --arg p "$tmp/docs/x" '{path: $p, content: "x"}')"
tap $(jq -e '.code == -32602 and (.message | test("unknown tool"))' <<<"$R" >/dev/null && [ ! -e "$tmp/docs/x" ]; echo $?) \
	"a writing tool's name is unknown from inside too, and writes nothing ($(jq -r '.message // .' <<<"$R" | head -c 200))"
inside "$box" host__fs__search_files "$(jq -cn --arg p "$tmp/docs" '{path: $p, pattern: "*"}')"
tap $(jq -e '.code == -32602 and (.message | test("unknown tool"))' <<<"$R" >/dev/null; echo $?) \
	"so is a read-only tool the file does not list ($(jq -r '.message // .' <<<"$R" | head -c 200))"

# 13: the log.
calls=$(grep -c "host tool call: run '$box', server '[a-z]*', tool '" "$tmp/server.log")
tap $([ "$calls" = 4 ]; echo $?) \
	"the log names the caller's run id, the server and the tool for each of the 4 calls ($calls: $(grep 'host tool call' "$tmp/server.log" | tail -n 1))"

mcp_call sandbox_destroy "$(jq -cn --arg id "$box" '{sandbox_id: $id}')"
mcp_stop
# 14: the npm server ended with demesne.
sleep 1
left=$(pgrep -f "node $fs_server $tmp/docs" || true)
tap $([ -z "$left" ]; echo $?) "after the server stops, the filesystem server's process is gone${left:+: $left}"
tap $(grep -q "ended by the client" "$tmp/web.log"; echo $?) "and the HTTP server's session was ended (DELETE)"
kill $web_pid 2>/dev/null
wait $web_pid 2>/dev/null

. "$top/tests/e2e/lib/left.sh"
left=$(containers_left "$DEMESNE_OUTPUT_ROOT")
tap $([ -z "$left" ]; echo $?) "no container is left${left:+: $left}"

nested_done
