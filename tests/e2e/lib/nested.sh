# SPDX-License-Identifier: MIT
# Shared by the nested-sandbox tests (test-nested.sh, test-nested-budget.sh):
# a client for a sandbox's own MCP endpoint, run inside it, and helpers
# over examples/lib/mcp.sh. Source after mcp.sh, with $tmp set.

# The client inside the sandbox: `sh /workspace/call.sh TOOL` with the
# arguments (JSON) on stdin prints the tool call's JSON-RPC answer; the
# session is made once per endpoint and kept in /tmp; calls in flight at
# once in one session need ids of their own (CALL_ID). `call.sh -raw TOKEN`
# prints the HTTP status of an initialize with that token.
cat >"$tmp/call.sh" <<'EOF'
set -e
u=$DEMESNE_MCP_URL
h() { curl -sS -H "Content-Type: application/json" -H "Accept: application/json, text/event-stream" "$@"; }
init='{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"nested-test","version":"1"}}}'
if [ "$1" = -raw ]; then
	h -o /dev/null -w '%{http_code}' ${2:+-H "Authorization: Bearer $2"} "$u" -d "$init"
	exit 0
fi
sid=/tmp/sid-$(echo "$u$DEMESNE_MCP_TOKEN" | md5sum | cut -c1-8)
if [ ! -s "$sid" ]; then
	h -D /tmp/headers -o /dev/null -H "Authorization: Bearer $DEMESNE_MCP_TOKEN" "$u" -d "$init"
	grep -i '^mcp-session-id:' /tmp/headers | tr -d '\r' | cut -d' ' -f2 >"$sid"
	h -o /dev/null -H "Authorization: Bearer $DEMESNE_MCP_TOKEN" -H "Mcp-Session-Id: $(cat "$sid")" "$u" \
		-d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
fi
args=$(cat)
# The answer is an SSE stream (its last data line) or, as the server may
# choose, one JSON body: either is printed as the JSON-RPC answer.
out=$(h -H "Authorization: Bearer $DEMESNE_MCP_TOKEN" -H "Mcp-Session-Id: $(cat "$sid")" "$u" \
	-d "{\"jsonrpc\":\"2.0\",\"id\":${CALL_ID:-1},\"method\":\"tools/call\",\"params\":{\"name\":\"$1\",\"arguments\":$args}}")
if printf '%s\n' "$out" | grep -q '^data: '; then
	printf '%s\n' "$out" | sed -n 's/^data: //p' | tail -n 1
else
	printf '%s\n' "$out"
fi
EOF

# In sandbox $1, through its endpoint: tool $2 with arguments $3. The
# answer's result goes to R (and its structured content to S).
inside() {
	mcp_call sandbox_exec "$(jq -cn --arg id "$1" --arg t "$2" --arg a "$3" \
		'{sandbox_id: $id, command: ("sh /workspace/call.sh " + $t), stdin: $a}')"
	R=$(jq -c '.result // .error // {}' <<<"$(field stdout)" 2>/dev/null || echo '{}')
	S=$(jq -c '.structuredContent // {}' <<<"$R")
}
said() { jq -r '.content[0].text // .message // ""' <<<"$R"; }
nested_box() { # $1: egress
	mcp_call sandbox_create "$(jq -cn --arg e "$1" '{image: "base", egress: $e, nested: true, ttl_seconds: 900}')"
	box=$(field sandbox_id)
	mcp_call sandbox_upload "$(jq -cn --arg id "$box" --arg c "$(base64 -w0 "$tmp/call.sh")" \
		'{sandbox_id: $id, dst: "/workspace/call.sh", content: $c}')"
}


# The end of a test that writes TAP to fd 3 and its logs to $tmp: the
# plan, the logs' tails when something failed, and the exit status.
nested_done() {
	echo "1..$n" >&3
	if [ "$failed" != 0 ]; then
		printf '# client log: %s\n' "$(tail -c 1500 "$tmp/client.log")" >&3
		printf '# server log: %s\n' "$(tail -n 30 "$tmp/server.log")" >&3
	fi
	[ "$failed" = 0 ]
}

# The same after the server stops and no container of the output root may
# be left (counted with the script's tap).
nested_finish() {
	local left
	mcp_stop
	. "$top/tests/e2e/lib/left.sh"
	left=$(containers_left "$DEMESNE_OUTPUT_ROOT")
	tap $([ -z "$left" ]; echo $?) "nothing is left${left:+: $left}"
	nested_done
}
