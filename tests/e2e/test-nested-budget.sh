#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A tree's spend (DEMESNE_TREE_MAX_USD): agent runs made from inside a
# nested sandbox, through its endpoint, share the tree's budget. With a
# budget of $0.015 and runs that cost $0.00918 each (the vendor fixture's
# answers at the price table's sonnet rates, two requests of $0.00459): the
# first runs; the second reserves what is left ($0.00582) as its cap and is
# stopped by it after one request, naming the variable (a second request,
# as costly as the first, would pass it); the third is refused before it
# starts, what is left being less than one request; the host's usage report
# on the tree says what was spent, never past the budget; nothing is left.
# The real Claude Code CLI in the claude-code image, against
# tests/fixtures/vendor/server.mjs (the vendor API cannot be reached here).
# Needs the engine, jq, node.
. "$(dirname -- "${BASH_SOURCE[0]}")/lib/tap.sh"
needs jq "needs jq"
needs node "needs node for the vendor fixture"

tmp=$(mktemp -d /tmp/dm-budget-XXXXXX)
cleanup() {
	local p
	for p in "${fixtures[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/home"
key=sk-ant-api03-demesne-budget-$RANDOM$RANDOM
port_of_anthropic=''
vendor_fixture anthropic "$key"
port=$port_of_anthropic
unset OPENAI_API_KEY CLAUDE_CODE_OAUTH_TOKEN DEMESNE_ALLOWED_PATHS
export HOME=$tmp/home ANTHROPIC_API_KEY=$key DEMESNE_VENDOR_UPSTREAM_ANTHROPIC=http://127.0.0.1:$port
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=600
export DEMESNE_TREE_MAX_USD=0.015
. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }
. "$top/tests/e2e/lib/nested.sh"
agent='{"prompt":"Write the answer.","model":"sonnet"}'

tap $([ -n "$port" ]; echo $?) "the vendor fixture listens (${port:-none})"
mcp_start
nested_box none
a=$box

inside "$a" sandbox_agent "$agent"
first=$(jq -r '.cost_usd // 0' <<<"$S")
tap $([ "$(jq -r .isError <<<"$R")" != true ] && [ "$(jq -r .result <<<"$S")" = "The answer is 42." ]; echo $?) \
	"an agent run from inside the tree, under its budget, answers (cost \$$first; $(said | head -c 160))"
inside "$a" sandbox_agent "$agent"
tap $([ "$(jq -r .isError <<<"$R")" = true ] &&
	said | grep -q "spending cap of .* reached (DEMESNE_TREE_MAX_USD, what was left of this tree's)"; echo $?) \
	"the next run gets what is left as its cap, and is stopped by it ($(said | head -c 200))"
inside "$a" sandbox_agent "$agent"
tap $([ "$(jq -r .isError <<<"$R")" = true ] &&
	said | grep -q "this tree of sandboxes has spent .* its limit (DEMESNE_TREE_MAX_USD=0.015)"; echo $?) \
	"once the tree has spent it, a run is refused before it starts ($(said | head -c 200))"
requests=$(grep -c '"auth_ok":true' "$tmp/fixture-anthropic.log" 2>/dev/null)
tap $([ "$requests" -ge 3 ] && [ "$requests" -le 5 ]; echo $?) \
	"the refused run sent the vendor nothing ($requests model requests in all)"

mcp_call sandbox_usage_report "$(jq -cn --arg id "$a" '{run_id: $id}')"
total=$(field cost_usd)
tap $(awk -v t="$total" -v f="$first" 'BEGIN { exit !(t <= 0.015 && t > f && f > 0) }'; echo $?) \
	"the host's report on the tree: what its runs spent, never past the budget (\$$total of \$0.015)"

mcp_call sandbox_destroy "$(jq -cn --arg id "$a" '{sandbox_id: $id}')"
nested_finish
