#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The host tool proxy (DEMESNE_HOST_MCP) against hostile nested callers: a
# stdio host server the test writes (node, host side) lends tools that dump
# its environment, answer too much, and answer slowly; demesne runs with
# ANTHROPIC_API_KEY and OPENAI_API_KEY set, and as root lends the server
# as "user": "nobody". Checked, from inside a nested sandbox (curl to its
# endpoint): the server's environment holds its file's variables, PATH and
# HOME, and none of demesne's keys or DEMESNE_ variables, and it runs as
# nobody; arguments its inputSchema rules out (a wrong type, a missing or
# an extra member, nested) fail with the member's name and never reach the
# server; an oversized answer fails that call and the next call works; a
# call waiting for the server's turn ends when its stream closes and never
# reaches the server, and the server is not wedged; one tree firing six
# calls at once (the share is 4) gets EAGAIN for the rest while another
# tree's call still goes through. Against the real engine, over stdio
# with examples/lib/mcp.sh.
. "$(dirname -- "${BASH_SOURCE[0]}")/../e2e/lib/tap.sh"
needs jq "needs jq"
needs node "needs node (the host server is a node script)"
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP needs root: the server is lent as user nobody"; exit 77; }
id nobody >/dev/null 2>&1 || { echo "1..0 # SKIP needs a user 'nobody' to lend the server as"; exit 77; }

tmp=$(mktemp -d /tmp/dm-hostmcp-hostile-XXXXXX)
chmod 0755 "$tmp" # the server, as nobody, reads its script here
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=300 DEMESNE_POOL=0
# What a lent server must never see.
export ANTHROPIC_API_KEY=sk-ant-hostile-test-secret OPENAI_API_KEY=sk-openai-hostile-test-secret

# The host server: one JSON-RPC message a line. Every tools/call it gets is
# appended to seen.log (as nobody: the file is made writable for it).
cat >"$tmp/server.js" <<'EOF'
const fs = require("fs");
const seen = process.argv[2];
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
const ro = { readOnlyHint: true };
const tools = [
  { name: "env", annotations: ro, inputSchema: { type: "object", properties: {}, additionalProperties: false } },
  { name: "big", annotations: ro, inputSchema: { type: "object", properties: { big: { type: "boolean" } } } },
  { name: "slow", annotations: ro, inputSchema: { type: "object", required: ["ms"], additionalProperties: false,
    properties: { ms: { type: "integer" }, opts: { type: "object", additionalProperties: false,
      properties: { tag: { type: "string" } } } } } },
];
let buf = "";
process.stdin.on("data", (d) => {
  buf += d;
  let i;
  while ((i = buf.indexOf("\n")) >= 0) {
    const line = buf.slice(0, i);
    buf = buf.slice(i + 1);
    if (!line.trim()) continue;
    const m = JSON.parse(line);
    if (m.id === undefined) continue;
    if (m.method === "initialize")
      send({ jsonrpc: "2.0", id: m.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: {} },
        serverInfo: { name: "hostile-test", version: "1" } } });
    else if (m.method === "tools/list") send({ jsonrpc: "2.0", id: m.id, result: { tools } });
    else if (m.method === "tools/call") {
      const { name, arguments: a } = m.params;
      fs.appendFileSync(seen, JSON.stringify({ name, a }) + "\n");
      const text = (t) => send({ jsonrpc: "2.0", id: m.id, result: { content: [{ type: "text", text: t }] } });
      if (name === "env") text(JSON.stringify({ env: process.env, uid: process.getuid(), pid: process.pid }));
      else if (name === "big") text(a.big ? "x".repeat(200000) : "small");
      else if (name === "slow") setTimeout(() => text("slept " + a.ms), a.ms);
    } else send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: "no" } });
  }
});
process.stdin.on("end", () => process.exit(0));
EOF
: >"$tmp/seen.log"
chmod 0666 "$tmp/seen.log"
chmod 0644 "$tmp/server.js"
jq -n --arg s "$tmp/server.js" --arg l "$tmp/seen.log" \
	'{mcpServers: {h: {command: "node", args: [$s, $l], env: {MARK: "set-by-file"}, user: "nobody",
	  tools: ["env", "big", "slow"], max_message: 65536, timeout_seconds: 60}}}' >"$tmp/host-mcp.json"
export DEMESNE_HOST_MCP=$tmp/host-mcp.json

. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }
diag() { printf '# %s\n' "$@" >&3; }
. "$top/tests/e2e/lib/nested.sh"
mcp_start
diag "host server: $(grep "host mcp 'h'" "$tmp/server.log" | tail -n 1)"
nested_box none
a=$box
nested_box none
b=$box

# 1-3: the environment and the user.
inside "$a" host__h__env '{}'
envdump=$(said)
tap $(jq -e '.env.MARK == "set-by-file" and (.env.PATH | length > 0) and (.env.HOME | length > 0)' \
	<<<"$envdump" >/dev/null; echo $?) \
	"the lent server has its file's variable, PATH and HOME ($(jq -c '.env | keys' <<<"$envdump" 2>/dev/null | head -c 300))"
tap $(jq -e '.env | (has("ANTHROPIC_API_KEY") or has("OPENAI_API_KEY") or
	(keys | map(select(startswith("DEMESNE_"))) | length > 0)) | not' <<<"$envdump" >/dev/null &&
	! grep -q 'hostile-test-secret' <<<"$envdump"; echo $?) \
	"and none of demesne's keys or DEMESNE_ variables, which demesne has"
tap $([ "$(jq -r .uid <<<"$envdump")" = "$(id -u nobody)" ]; echo $?) \
	"it runs as the file's user, nobody, not root (uid $(jq -r .uid <<<"$envdump" 2>/dev/null))"

# 4-8: arguments against the inputSchema.
refused() { # $1: arguments; $2: what the message names; $3: the case
	inside "$a" host__h__slow "$1"
	tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -qF "$2" && said | grep -q "nothing was sent"; echo $?) \
		"$3 is refused, naming the member ($(said | head -c 200))"
}
refused '{"ms":"soon"}' "argument 'ms': must be of type integer" "a string for an integer"
refused '{}' "argument 'ms': is required" "a missing required member"
refused '{"ms":1,"cmd":"rm -rf /"}' "argument 'cmd': is not a member this tool takes" "an extra member"
refused '{"ms":1,"opts":{"tag":"t","x":1}}' "argument 'opts.x': is not a member" "a nested extra member"
tap $(! grep -q '"slow"' "$tmp/seen.log"; echo $?) "none of them reached the server ($(wc -l <"$tmp/seen.log") calls seen)"

# 9-10: an oversized answer fails one call; the next works.
pid1=$(jq -r .pid <<<"$envdump")
inside "$a" host__h__big '{"big":true}'
tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -q "over 65536 bytes"; echo $?) \
	"an answer over max_message fails that call ($(said | head -c 200))"
inside "$b" host__h__env '{}'
pid2=$(said | jq -r .pid 2>/dev/null)
tap $([ "$(jq -r .isError <<<"$R")" != true ] && [ -n "$pid2" ] && [ "$pid2" != "$pid1" ]; echo $?) \
	"and the next call, from another tree, works: the server was started again (pid $pid1 -> $pid2)"

# 11-13: a call waiting for the server's turn, whose stream closes. The
# first call sleeps 60 s and its client gives up after 10; the second
# starts 3 s after it, waits for the turn and its client gives up after 3
# (4 s before the first's); a third (env) waits too and is answered once
# the first is cancelled.
cat >"$tmp/cancel.sh" <<'EOF'
echo '{}' | sh /workspace/call.sh host__h__env >/dev/null # the session, made once
u=$DEMESNE_MCP_URL
sid=$(cat /tmp/sid-*)
c() { # $1: max seconds; $2: id; $3: arguments
	curl -sS -m "$1" -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream" \
		-H "Authorization: Bearer $DEMESNE_MCP_TOKEN" -H "Mcp-Session-Id: $sid" "$u" \
		-d "{\"jsonrpc\":\"2.0\",\"id\":$2,\"method\":\"tools/call\",\"params\":{\"name\":\"host__h__slow\",\"arguments\":$3}}"
}
c 10 11 '{"ms":60000}' >/tmp/first.out 2>&1 &
first=$!
sleep 3
c 3 12 '{"ms":1,"opts":{"tag":"second"}}' >/tmp/second.out 2>&1
echo "second: rc $?"
echo '{}' | sh /workspace/call.sh host__h__env | head -c 300
echo
wait $first
echo "first: rc $?"
EOF
: >"$tmp/seen.log"
mcp_call sandbox_upload "$(jq -cn --arg id "$a" --arg c "$(base64 -w0 "$tmp/cancel.sh")" \
	'{sandbox_id: $id, dst: "/workspace/cancel.sh", content: $c}')"
mcp_call sandbox_exec "$(jq -cn --arg id "$a" '{sandbox_id: $id, command: "sh /workspace/cancel.sh", timeout_seconds: 120}')"
out=$(field stdout)
diag "cancel.sh: $(tr '\n' ' ' <<<"$out" | head -c 400)"
tap $(! grep -q '"second"' "$tmp/seen.log" && grep -q '"ms":60000' "$tmp/seen.log"; echo $?) \
	"the waiting call never reached the server: its cancel ended its wait ($(tr '\n' ' ' <<<"$(cat "$tmp/seen.log")" | head -c 200))"
tap $([ "$(grep -c "run '$a', server 'h', tool 'slow': cancelled" "$tmp/server.log")" = 2 ]; echo $?) \
	"both the waiting call and the one ahead of it were logged as cancelled"
tap $(grep -q '"env"' "$tmp/seen.log" && grep -q 'set-by-file' <<<"$out"; echo $?) \
	"the server was not left wedged: the call after them was answered"

# 14-15: one tree fires six calls at once; its share is 4 per server.
cat >"$tmp/flood.sh" <<'EOF'
echo '{}' | sh /workspace/call.sh host__h__env >/dev/null
for i in 1 2 3 4 5 6; do
	echo '{"ms":4000}' | CALL_ID=$((100 + i)) sh /workspace/call.sh host__h__slow >/tmp/flood-$i.out 2>&1 &
done
wait
cat /tmp/flood-*.out
EOF
cat >"$tmp/other.sh" <<'EOF'
sleep 1
echo '{}' | sh /workspace/call.sh host__h__env
EOF
for f in flood other; do
	mcp_call sandbox_upload "$(jq -cn --arg id "$([ $f = flood ] && echo "$a" || echo "$b")" \
		--arg c "$(base64 -w0 "$tmp/$f.sh")" --arg d "/workspace/$f.sh" '{sandbox_id: $id, dst: $d, content: $c}')"
done
# The other tree's call runs in its sandbox beside the flood, in a session
# of its own (an exec's process group ends with it); its answer is read
# afterwards.
mcp_call sandbox_exec "$(jq -cn --arg id "$b" \
	'{sandbox_id: $id, command: "setsid sh /workspace/other.sh >/tmp/other.out 2>&1 </dev/null & sleep 0.2; echo started"}')"
diag "other.sh: $(field stdout) $(field stderr)"
# Each call has an id of its own: with one id for six calls in flight in
# one session, answers crossed and a client waited forever (seen under
# ThreadSanitizer). The bound is against a hang.
flood_t0=$(date +%s)
mcp_call sandbox_exec "$(jq -cn --arg id "$a" '{sandbox_id: $id, command: "sh /workspace/flood.sh", timeout_seconds: 900}')"
diag "the flood took $(($(date +%s) - flood_t0)) s"
flood=$(field stdout)
slept=$(grep -c 'slept 4000' <<<"$flood")
busy=$(grep -c 'EAGAIN' <<<"$flood")
tap $([ "$slept" -ge 1 ] && [ "$slept" -le 4 ] && [ "$busy" -ge 2 ] && [ $((slept + busy)) = 6 ]; echo $?) \
	"six calls at once from one tree: $slept served, $busy refused with EAGAIN (at most 4 each tree)"
other=
for _ in $(seq 60); do
	mcp_call sandbox_exec "$(jq -cn --arg id "$b" '{sandbox_id: $id, command: "cat /tmp/other.out"}')"
	other=$(field stdout)
	[ -n "$other" ] && break
	sleep 1
done
tap $(grep -q 'set-by-file' <<<"$other"; echo $?) \
	"meanwhile another tree's call went through ($(head -c 200 <<<"$other"))"

mcp_call sandbox_destroy "$(jq -cn --arg id "$a" '{sandbox_id: $id}')"
mcp_call sandbox_destroy "$(jq -cn --arg id "$b" '{sandbox_id: $id}')"
mcp_stop
for _ in $(seq 100); do
	left=$(pgrep -f "node $tmp/server.js" || true)
	[ -z "$left" ] && break
	sleep 0.1
done
tap $([ -z "$left" ]; echo $?) "after the server stops, the host server's process is gone${left:+: $left}"
. "$top/tests/e2e/lib/left.sh"
left=$(containers_left "$DEMESNE_OUTPUT_ROOT")
tap $([ -z "$left" ]; echo $?) "no container is left${left:+: $left}"
nested_done
