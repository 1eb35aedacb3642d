#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# An orchestrator agent in a sandbox drives demesne through its own nested
# endpoint, with each real CLI: Claude Code (its MCP tools from
# --mcp-config) and Codex (mcp_servers in its config). The vendor fixture
# (tests/fixtures/vendor/server.mjs; the vendor APIs cannot be reached
# here) plays the model: its "orchestrate" play calls, in order, a child
# sandbox's create and exec, a background child script and its cancel, a
# background child agent (of the same CLI) and a wait for it, a list, and
# the child sandbox's destroy; its answer quotes what came back. The host
# checks the answer, the calls the fixture saw, the ledger's tree and that
# nothing of the tree is left. Also: nested: false gives the agent no
# endpoint; cancelling a background orchestrator from the host ends its
# children; under DEMESNE_TREE_MAX_USD the orchestrator's own spend and its
# workers' stay within the cap together. Needs the engine, jq, node.
. "$(dirname -- "${BASH_SOURCE[0]}")/lib/tap.sh"
needs jq "needs jq"
needs node "needs node for the vendor fixture"

tmp=$(mktemp -d /tmp/dm-nested-agents-XXXXXX)
cleanup() {
	local p
	for p in "${fixtures[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	if [ -n "${ui_pid:-}" ]; then kill "$ui_pid" 2>/dev/null && wait "$ui_pid" 2>/dev/null; fi
	# Kept for a look when something failed.
	if [ "$failed" = 0 ]; then rm -rf "$tmp"; else echo "# logs kept in $tmp" >&3; fi
}
trap cleanup EXIT
mkdir -p "$tmp/home"

# The play: each step is one MCP tool call the "model" makes; {{i.f}} is
# field f of step i's result.
play() { # $1: the child agent's model
	jq -n --arg model "$1" '{plays: [{marker: "[play:orchestrate]", steps: [
	  {tool: "sandbox_create", arguments: {image: "base", ttl_seconds: 600}},
	  {tool: "sandbox_exec", arguments: {sandbox_id: "{{0.sandbox_id}}",
	    command: "echo child-ok > /out/c.txt && cat /out/c.txt && test -z \"${DEMESNE_MCP_TOKEN:-}\" && echo no-endpoint"}},
	  {tool: "sandbox_script", arguments: {image: "base", command: "sleep 300", background: true}},
	  {tool: "sandbox_cancel", arguments: {job_id: "{{2.job_id}}"}},
	  {tool: "sandbox_agent", arguments: {prompt: "Write the answer.", model: $model, background: true}},
	  {tool: "sandbox_wait", arguments: {job_id: "{{4.job_id}}", timeout_seconds: 120}},
	  {tool: "sandbox_list", arguments: {}},
	  {tool: "sandbox_destroy", arguments: {sandbox_id: "{{0.sandbox_id}}"}}],
	  answer: "exec said {{1.stdout}}; the sleeper is {{3.status}}; the child agent said {{5.result}}; listed {{6.sandbox_id}}"},
	 {marker: "[play:hold]", steps: [
	  {tool: "sandbox_create", arguments: {image: "base", ttl_seconds: 600}},
	  {tool: "sandbox_script", arguments: {image: "base", command: "sleep 300", background: true}},
	  {tool: "sandbox_wait", arguments: {job_id: "{{1.job_id}}", timeout_seconds: 120}},
	  {tool: "sandbox_wait", arguments: {job_id: "{{1.job_id}}", timeout_seconds: 120}}],
	  answer: "the sleeper outlived two waits"},
	 {marker: "[play:budget]", steps: [
	  {tool: "sandbox_agent", arguments: {prompt: "Write the answer.", model: $model}},
	  {tool: "sandbox_agent", arguments: {prompt: "Write the answer.", model: $model}}],
	  answer: "the first worker said {{0.result}}"},
	 {marker: "[play:deep]", steps: [
	  {tool: "sandbox_agent", arguments: {prompt: "Write the answer.", model: $model, nested: true}},
	  {tool: "sandbox_agent", arguments: {prompt: "Write the answer.", model: $model}}],
	  answer: "the child without nested said {{1.result}}"}]}'
}
play sonnet >"$tmp/play-anthropic.json"
play gpt-5 >"$tmp/play-openai.json"

keys=(sk-ant-api03-demesne-nested-$RANDOM$RANDOM sk-proj-demesne-nested-$RANDOM$RANDOM)
port_of_anthropic='' port_of_openai=''
vendor_fixture anthropic "${keys[0]}" --plays "$tmp/play-anthropic.json" ${FIXTURE_DUMP:+--dump-dir "$tmp/dump-anthropic"}
vendor_fixture openai "${keys[1]}" --plays "$tmp/play-openai.json" ${FIXTURE_DUMP:+--dump-dir "$tmp/dump-openai"}
unset CLAUDE_CODE_OAUTH_TOKEN DEMESNE_ALLOWED_PATHS DEMESNE_TREE_MAX_USD
export HOME=$tmp/home ANTHROPIC_API_KEY=${keys[0]} OPENAI_API_KEY=${keys[1]}
export DEMESNE_VENDOR_UPSTREAM_ANTHROPIC=http://127.0.0.1:$port_of_anthropic
export DEMESNE_VENDOR_UPSTREAM_OPENAI=http://127.0.0.1:$port_of_openai
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=900
. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }
. "$top/tests/e2e/lib/nested.sh"
. "$top/tests/e2e/lib/left.sh"

tap $([ -n "$port_of_anthropic" ] && [ -n "$port_of_openai" ]; echo $?) \
	"the vendor fixtures listen (${port_of_anthropic:-none}, ${port_of_openai:-none})"
mcp_start

# demesne ui on the same state directory: a run's record as the page reads it
# (GET /ui/api/v1/runs/{id}: its run journal, which only the server writes).
"$DEMESNE" ui --listen 127.0.0.1:0 --ui-dir "$top/data/ui" >"$tmp/ui.out" 2>"$tmp/ui.log" &
ui_pid=$!
for _ in $(seq 300); do
	ui_url=$(grep -o 'http://[^ ]*' "$tmp/ui.out" | head -1)
	[ -n "$ui_url" ] && break
	sleep 0.1
done
curl -s -o /dev/null -c "$tmp/ui.cookies" "$ui_url"
ui_run() { curl -s -b "$tmp/ui.cookies" "${ui_url%%/ui/*}/ui/api/v1/runs/$1"; }

# The fixture's log lines of one play, in order: step, tool, and whether
# the result it got back was an error.
steps_seen() { # $1: vendor
	jq -r 'select(.play != null) | "\(.step) \(.tool // "answer") \(.tool_result.is_error // false) \(.tool_result.snippet // "" | .[0:80] | gsub("\n"; " "))"' \
		"$tmp/fixture-$1.log" 2>/dev/null
}

for provider in ${NESTED_AGENTS_ONLY:-anthropic openai}; do
	case $provider in
	anthropic) model=sonnet cli="Claude Code" ;;
	openai) model=gpt-5 cli=Codex ;;
	esac
	mcp_call sandbox_agent "$(jq -cn --arg m "$model" \
		'{prompt: "[play:orchestrate] Make the children, check them, report.", model: $m, timeout_seconds: 900}')"
	answer=$(field result)
	run=$(field run_id)
	echo "answer ($cli): $answer" >&3
	tap $([ "$(field exit_code)" = 0 ] && grep -q "exec said child-ok" <<<"$answer"; echo $?) \
		"$cli: the orchestrator made a child sandbox and ran a command in it, which had no endpoint of its own"
	tap $(grep -q "no-endpoint" <<<"$answer"; echo $?) "$cli: the child sandbox (nested not asked) has no DEMESNE_MCP_TOKEN"
	tap $(grep -q "the sleeper is cancelled" <<<"$answer"; echo $?) "$cli: it started a background child and cancelled it"
	tap $(grep -q "the child agent said The answer is 42." <<<"$answer"; echo $?) \
		"$cli: it ran a child agent of its own CLI in the background and waited for its answer"
	tap $(grep -q "listed sbx-" <<<"$answer"; echo $?) "$cli: sandbox_list through the endpoint shows its child"
	seen=$(steps_seen $provider | sort -n | uniq)
	echo "$seen" | sed 's/^/  step /' >&3
	tools=$(awk '$2 != "answer" { print $2 }' <<<"$seen" | sed 's/^mcp__demesne__//' | tr '\n' ' ')
	tap $([ "$tools" = "sandbox_create sandbox_exec sandbox_script sandbox_cancel sandbox_agent sandbox_wait sandbox_list sandbox_destroy " ]; echo $?) \
		"$cli: the model's eight tool calls went through the CLI to the endpoint, in order ($tools)"
	tap $([ -z "$(awk '$3 == "true"' <<<"$seen")" ] && [ -n "$seen" ]; echo $?) "$cli: no call came back as an error"
	mcp_call sandbox_usage_report "$(jq -cn --arg id "$run" '{run_id: $id}')"
	kinds=$(jq -c '.structuredContent.by_kind' <<<"$MCP_RESULT")
	tap $([ "$(jq -r '.structuredContent.runs | map(select(.depth > 0)) | length' <<<"$MCP_RESULT")" -ge 3 ] &&
		[ "$(jq -r '.agent' <<<"$kinds")" = 2 ] && [ "$(jq -r '.sandbox' <<<"$kinds")" = 1 ]; echo $?) \
		"$cli: the usage report on the orchestrator's run rolls its children up ($kinds)"
	# The journal's figures: the orchestrator's own tokens and cost, its tree's the same as the
	# ledger's report (which includes the child agent's), and the vendor proxy's requests.
	ui_run "$run" >"$tmp/ui-run.json"
	report_in=$(jq -r '.structuredContent.usage.input_tokens' <<<"$MCP_RESULT")
	usage=$(jq -c '.usage' "$tmp/ui-run.json")
	tap $(jq -e --argjson r "$report_in" '.usage.own.input_tokens > 0 and .usage.own.output_tokens > 0
		and .usage.tree.input_tokens > .usage.own.input_tokens and .usage.tree.input_tokens == $r
		and .usage.tree.cost_usd >= .usage.own.cost_usd' "$tmp/ui-run.json" >/dev/null; echo $?) \
		"$cli: the run's page has its own tokens and its tree's, the child agent's included ($usage, report $report_in)"
	vendor=$(jq -c --arg p "$provider" '[.egress_decisions[] | select(.rule == "vendor:" + $p)]' "$tmp/ui-run.json")
	tap $(jq -e 'length == 1 and .[0].decision == "allowed" and .[0].count > 0 and .[0].bytes_up > 0
		and .[0].bytes_down > 0' <<<"$vendor" >/dev/null; echo $?) \
		"$cli: and the vendor proxy's requests as egress decisions ($vendor)"
	: >"$tmp/fixture-$provider.log"
done

# nested: false: the CLI gets no endpoint, so the play's tools are not
# offered and the default task runs instead.
mcp_call sandbox_agent '{"prompt": "[play:orchestrate] no tools", "model": "sonnet", "nested": false}'
tap $([ "$(field result)" = "The answer is 42." ] && [ -z "$(steps_seen anthropic)" ]; echo $?) \
	"nested: false: the agent has no demesne tools ($(field result))"

# Cancel from the top: a background orchestrator holds a child sandbox and
# a background child job and waits on the job; the host cancels the
# orchestrator's job; its whole subtree ends with it.
mcp_call sandbox_agent '{"prompt": "[play:hold] make children and wait", "model": "sonnet", "background": true}'
job=$(field job_id)
for _ in $(seq 120); do
	mcp_call sandbox_list '{}'
	[ "$(jq -r '.structuredContent.sandboxes | length' <<<"$MCP_RESULT")" -ge 1 ] &&
		[ "$(jq -r '[.structuredContent.jobs[] | select(.status == "running")] | length' <<<"$MCP_RESULT")" -ge 2 ] && break
	sleep 0.5
done
held=$(jq -c '[(.structuredContent.sandboxes | length), ([.structuredContent.jobs[] | select(.status == "running")] | length)]' <<<"$MCP_RESULT")
tap $([ "$held" = "[1,2]" ]; echo $?) "a background orchestrator holds a child sandbox and a child job ([sandboxes, running jobs] $held)"
mcp_call sandbox_cancel "$(jq -cn --arg j "$job" '{job_id: $j}')"
tap $([ "$(field status)" = cancelled ]; echo $?) "the host cancels the orchestrator's job ($(field status))"
mcp_call sandbox_status "$(jq -cn --arg j "$job" '{job_id: $j}')"
status=$(field status)
mcp_call sandbox_list '{}'
after=$(jq -c '[(.structuredContent.sandboxes | length), ([.structuredContent.jobs[] | select(.status == "running")] | length)]' <<<"$MCP_RESULT")
tap $([ "$status" = cancelled ] && [ "$after" = "[0,0]" ]; echo $?) \
	"right after the cancel its status says $status, and its subtree is gone ([sandboxes, running jobs] $after)"
# The warm pool's containers (python, which no run here claims) stay.
tree_left=$(containers_left "$DEMESNE_OUTPUT_ROOT" runs)
tap $([ -z "$tree_left" ]; echo $?) "no container of the cancelled tree is left${tree_left:+: $tree_left}"
# At the depth limit: an orchestrator one level below DEMESNE_MAX_DEPTH=1
# asking a child agent for nested: true is refused, naming the variable;
# a child agent that does not ask runs, its endpoint off by default.
mcp_stop
export DEMESNE_MAX_DEPTH=1
: >"$tmp/fixture-anthropic.log"
mcp_start
mcp_call sandbox_agent '{"prompt": "[play:deep] try to nest deeper", "model": "sonnet"}'
deep=$(field result)
refused=$(jq -r 'select(.play == "[play:deep]" and .step == 1) | .tool_result | select(.is_error) | .snippet' "$tmp/fixture-anthropic.log")
tap $(grep -q "DEMESNE_MAX_DEPTH" <<<"$refused"; echo $?) \
	"at the depth limit a child agent's nested: true is refused, naming DEMESNE_MAX_DEPTH ($(head -c 200 <<<"$refused"))"
tap $([ "$deep" = "the child without nested said The answer is 42." ]; echo $?) \
	"and a child agent that does not ask runs without an endpoint ($deep)"

# The tree's budget holds on the orchestrator and its workers together:
# under DEMESNE_TREE_MAX_USD=0.025 and DEMESNE_AGENT_MAX_USD=0.015, at
# $0.00459 a reply, the orchestrator holds $0.015 first (its three replies
# fit), its first worker gets the $0.01 left (its two fit), and its second
# is refused before it starts. (The same on OpenSandbox:
# tests/integration/conformance-nested.h.)
mcp_stop
export DEMESNE_TREE_MAX_USD=0.025 DEMESNE_AGENT_MAX_USD=0.015
: >"$tmp/fixture-anthropic.log"
mcp_start
mcp_call sandbox_agent '{"prompt": "[play:budget] two workers", "model": "sonnet"}'
said=$(field result)
run=$(field run_id)
refused=$(jq -r 'select(.play == "[play:budget]" and .step == 2) | .tool_result | select(.is_error) | .snippet' "$tmp/fixture-anthropic.log")
tap $([ "$said" = "the first worker said The answer is 42." ] && grep -q "no more agent runs in it" <<<"$refused"; echo $?) \
	"under a tree budget the orchestrator's first worker answers and its second is refused before it starts ($said; $(head -c 200 <<<"$refused"))"
mcp_call sandbox_usage_report "$(jq -cn --arg id "$run" '{run_id: $id}')"
total=$(field cost_usd)
tap $(awk -v t="$total" 'BEGIN { exit !(t > 0.01 && t <= 0.025) }'; echo $?) \
	"the tree (orchestrator and worker) spent \$$total, within its \$0.025"
nested_finish
