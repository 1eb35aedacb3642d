# SPDX-License-Identifier: MIT
# A small MCP client in bash for the examples: it starts `demesne serve` as a
# coprocess, speaks JSON-RPC to it over stdio (one message a line), and shows
# each tool call and what came back. Source it; it needs bash 4 and jq.
#
#   mcp_start                 start the server and initialize (2025-11-25)
#   mcp_call TOOL ARGS_JSON   call a tool, print it and its answer; the result
#                             object is left in MCP_RESULT; a tool error returns 1
#   field NAME                a field of MCP_RESULT's structured content
#   mcp_stop                  close the server's stdin and wait for it
#   check COND_EXIT MESSAGE   print "ok"/"FAILED" and remember a failure
#
# DEMESNE (default: demesne on PATH) names the program; every other setting
# is the server's own environment (DEMESNE_OUTPUT_ROOT, DEMESNE_POOL, ...).
# MCP_QUIET=1 prints the calls' summaries only, not the JSON.

set -uo pipefail  # no -e: a failed check is counted, and the example goes on
command -v jq >/dev/null || { echo "examples need jq (apt-get install jq)" >&2; exit 1; }

DEMESNE=${DEMESNE:-demesne}
MCP_ID=0
MCP_RESULT=
MCP_ANSWER=
MCP_FAILED=0
MCP_TIMEOUT=${MCP_TIMEOUT:-600}

say() { printf '\n== %s\n' "$*"; }

check() {
	if [ "$1" = 0 ]; then
		printf 'ok: %s\n' "$2"
	else
		printf 'FAILED: %s\n' "$2"
		MCP_FAILED=1
	fi
}

_mcp_send() { printf '%s\n' "$1" >&"${MCP[1]}"; }

# Reads messages until the answer with id $1 (into MCP_ANSWER); the
# notifications on the way (progress, log messages) are printed, a line each.
_mcp_answer() {
	local id=$1 line
	while IFS= read -r -t "$MCP_TIMEOUT" line <&"${MCP[0]}"; do
		if [ "$(jq -r '.id // empty' <<<"$line")" = "$id" ]; then
			MCP_ANSWER=$line
			return 0
		fi
		case $(jq -r '.method // empty' <<<"$line") in
		notifications/progress) jq -r '"   progress: " + (.params.message // (.params.progress|tostring))' <<<"$line" ;;
		notifications/message) jq -r '"   server: " + (.params.data|if type=="string" then . else tojson end)' <<<"$line" ;;
		esac
	done
	echo "no answer to request $id within ${MCP_TIMEOUT}s (or the server ended)" >&2
	return 1
}

_mcp_request() {
	local method=$1 params=$2
	MCP_ID=$((MCP_ID + 1))
	_mcp_send "$(jq -cn --argjson id "$MCP_ID" --arg m "$method" --argjson p "$params" \
		'{jsonrpc: "2.0", id: $id, method: $m, params: $p}')"
	_mcp_answer "$MCP_ID"
}

mcp_start() {
	coproc MCP { exec "$DEMESNE" serve; }
	_mcp_request initialize '{"protocolVersion":"2025-11-25","capabilities":{},
		"clientInfo":{"name":"demesne-example","version":"1"}}' || return 1
	jq -e '.result.protocolVersion' <<<"$MCP_ANSWER" >/dev/null ||
		{ echo "initialize failed: $MCP_ANSWER" >&2; return 1; }
	_mcp_send '{"jsonrpc":"2.0","method":"notifications/initialized"}'
	printf 'connected to %s\n' "$(jq -r '.result.serverInfo | .name + " " + .version' <<<"$MCP_ANSWER")"
}

# Prints the call, then the result's structured content (or its text).
mcp_call() {
	local tool=$1 args=$2
	printf '\n-> %s %s\n' "$tool" "$(jq -c . <<<"$args")"
	_mcp_request tools/call "$(jq -cn --arg n "$tool" --argjson a "$args" \
		'{name: $n, arguments: $a, _meta: {progressToken: $n}}')" || return 1
	if jq -e '.error' <<<"$MCP_ANSWER" >/dev/null; then
		MCP_RESULT=$(jq -c '.error' <<<"$MCP_ANSWER")
		printf '<- JSON-RPC error: %s\n' "$MCP_RESULT"
		return 1
	fi
	MCP_RESULT=$(jq -c '.result' <<<"$MCP_ANSWER")
	if [ "${MCP_QUIET:-0}" = 1 ]; then
		printf '<- %s\n' "$(jq -r '.content[0].text // "" | split("\n")[0]' <<<"$MCP_RESULT")"
	elif jq -e '.structuredContent' <<<"$MCP_RESULT" >/dev/null; then
		printf '<- %s\n' "$(jq '.structuredContent' <<<"$MCP_RESULT")"
	else
		printf '<- %s\n' "$(jq -r '.content[0].text // ""' <<<"$MCP_RESULT")"
	fi
	[ "$(jq -r '.isError // false' <<<"$MCP_RESULT")" = false ]
}

# A field of the last result's structured content.
field() { jq -r ".structuredContent.$1" <<<"$MCP_RESULT"; }

mcp_stop() {
	local pid=${MCP_PID:-}
	[ -n "${MCP[1]:-}" ] && exec {MCP[1]}>&-
	[ -n "$pid" ] && wait "$pid" 2>/dev/null || true
}

# Ends the example: 0 when every check held.
finish() {
	mcp_stop
	if [ "$MCP_FAILED" = 0 ]; then
		say "done: every check held"
	else
		say "done: some checks FAILED"
	fi
	exit "$MCP_FAILED"
}
