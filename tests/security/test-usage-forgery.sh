#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Spend a sandbox cannot forge, and a tree cap that concurrent starts cannot
# pass (SECURITY.md, "Usage and spending caps"). The issue's reproduction: a
# nested sandbox wrote {"cost_usd":-1000,...} to its /out/usage.json and
# the host's sandbox_usage_report took it, so its tree's
# DEMESNE_TREE_MAX_USD never refused. Here a nested sandbox writes forged
# usage.json files into its own /out and into a child sandbox's; agents it
# starts (the real Claude Code, against the vendor fixture's "forge" play)
# write one into their /out while they run, one of them cancelled and one
# timed out. The host's report, during the runs and after, says only what
# the vendor proxy counted, and every run's share comes back; four agents
# started at once against DEMESNE_TREE_MAX_USD=0.025 (each wanting $0.00918,
# DEMESNE_AGENT_MAX_USD=0.01) never spend past it, the starts that find
# nothing left are refused naming the variable, and nothing is left.
# Needs the engine, jq, node.
. "$(dirname -- "${BASH_SOURCE[0]}")/../e2e/lib/tap.sh"
needs jq "needs jq"
needs node "needs node for the vendor fixture"

tmp=$(mktemp -d /tmp/dm-forge-XXXXXX)
trap fixtures_end EXIT
mkdir -p "$tmp/home"

forged='{"cost_usd":-1000,"input_tokens":-5,"output_tokens":-5,"requests":1,"per_model":{"claude-sonnet-4-5":{"cost_usd":-1000,"input_tokens":-5,"requests":1}}}'
# The hostile agent: its one tool call writes the forged file (after the
# proxy has written its own) and stays alive until the test has read the
# report while the run is live: until a file named go appears in its /out
# (release below), or 25 s.
hold='i=0; while [ ! -e /out/go ] && [ $i -lt 250 ]; do sleep 0.1; i=$((i + 1)); done'
jq -n --arg f "$forged" --arg hold "$hold" '{plays: [{marker: "[play:forge]", steps: [
  {tool: "Bash", arguments: {command: ("sleep 2; rm -f /out/usage.json; printf %s " + ($f | @sh) + " > /out/usage.json; " + $hold),
   description: "write usage.json", timeout: 110000}}], answer: "forged"}]}' >"$tmp/play.json"

key=sk-ant-api03-demesne-forge-$RANDOM$RANDOM
port_of_anthropic=''
vendor_fixture anthropic "$key" --plays "$tmp/play.json"
port=$port_of_anthropic
unset OPENAI_API_KEY CLAUDE_CODE_OAUTH_TOKEN DEMESNE_ALLOWED_PATHS
export HOME=$tmp/home ANTHROPIC_API_KEY=$key DEMESNE_VENDOR_UPSTREAM_ANTHROPIC=http://127.0.0.1:$port
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=600
export DEMESNE_TREE_MAX_USD=0.025 DEMESNE_AGENT_MAX_USD=0.01
. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }
. "$top/tests/e2e/lib/nested.sh"

# The report on the tree of $1: its total, and whether any figure in it is
# negative.
report() {
	mcp_call sandbox_usage_report "$(jq -cn --arg id "$1" '{run_id: $id}')"
	total=$(field cost_usd)
	negative=$(jq -r '[.structuredContent | .cost_usd, .usage.input_tokens, .usage.output_tokens,
		(.runs[] | .cost_usd, .input_tokens, .output_tokens)] | map(select(. < 0)) | length' <<<"$MCP_RESULT")
}
# Ends the holds of the agents that run now.
release() { for d in "$DEMESNE_OUTPUT_ROOT"/run-*/; do : >"$d/go"; done; }
forge_cmd=$(printf 'rm -f /out/usage.json; printf %%s %q > /out/usage.json && cat /out/usage.json' "$forged")

tap $([ -n "$port" ]; echo $?) "the vendor fixture listens (${port:-none})"
mcp_start
nested_box none
a=$box

# The issue's reproduction, then the same in a child's /out.
mcp_call sandbox_exec "$(jq -cn --arg id "$a" --arg c "$forge_cmd" '{sandbox_id: $id, command: $c}')"
tap $(grep -q -- '-1000' <<<"$(field stdout)"; echo $?) "the nested sandbox wrote a forged usage.json in its /out"
inside "$a" sandbox_create '{"image":"base"}'
child=$(jq -r '.sandbox_id // empty' <<<"$S")
inside "$a" sandbox_exec "$(jq -cn --arg id "$child" --arg c "$forge_cmd" '{sandbox_id: $id, command: $c}')"
tap $([ -n "$child" ] && grep -q -- '-1000' <<<"$(jq -r '.stdout // ""' <<<"$S")"; echo $?) \
	"and one in its child's /out (${child:-no child})"
forged_files=$(grep -l -- '-1000' "$DEMESNE_OUTPUT_ROOT"/*/usage.json 2>/dev/null | wc -l)
report "$a"
tap $([ "$forged_files" -ge 2 ] && [ "$total" = 0 ] && [ "$negative" = 0 ]; echo $?) \
	"the host's report on the tree ignores them: \$$total, no negative figure ($forged_files forged files on the host)"

# Ways out that are not an answer give their share back: a background agent
# cancelled while it forges, and a foreground one that times out.
inside "$a" sandbox_agent '{"prompt":"[play:forge] Then be cancelled.","model":"sonnet","background":true}'
job=$(jq -r '.job_id // empty' <<<"$S")
for _ in $(seq 450); do
	grep -qs -- '-1000' "$DEMESNE_OUTPUT_ROOT"/run-*/usage.json && break
	sleep 0.2
done
inside "$a" sandbox_cancel "$(jq -cn --arg j "$job" '{job_id: $j}')"
tap $([ -n "$job" ] && [ "$(jq -r '.status // empty' <<<"$S")" = cancelled ]; echo $?) "a forging agent is cancelled ($job)"
inside "$a" sandbox_agent '{"prompt":"[play:forge] Then time out.","model":"sonnet","timeout_seconds":10}'
tap $([ "$(jq -r '.timed_out // empty' <<<"$S")" = true ] || [ "$(jq -r .isError <<<"$R")" = true ]; echo $?) \
	"another times out ($(said | head -c 120))"
report "$a"
tap $([ "$negative" = 0 ] && awk -v t="$total" 'BEGIN { exit !(t >= 0 && t <= 0.025) }'; echo $?) \
	"after them the tree has spent \$$total, nothing negative"

# Four agents at once, each forging while it runs.
jobs=() refused=0
for i in 1 2 3 4; do
	inside "$a" sandbox_agent '{"prompt":"[play:forge] Go.","model":"sonnet","background":true}'
	job=$(jq -r '.job_id // empty' <<<"$S")
	if [ -n "$job" ]; then jobs+=("$job"); else grep -q 'DEMESNE_TREE_MAX_USD' <<<"$R" && refused=$((refused + 1)); fi
done
tap $([ $((${#jobs[@]} + refused)) = 4 ]; echo $?) "four starts: ${#jobs[@]} jobs, $refused refused at the call"
for _ in $(seq 600); do
	live=$(grep -l -- '-1000' "$DEMESNE_OUTPUT_ROOT"/run-*/usage.json 2>/dev/null | wc -l)
	[ "$live" -ge 1 ] && break
	sleep 0.2
done
report "$a"
running=$(jq -r '[.structuredContent.runs[] | select(.status == "running" and .kind == "agent")] | length' <<<"$MCP_RESULT")
tap $([ "$live" -ge 1 ] && [ "$running" -ge 1 ] && [ "$negative" = 0 ] &&
	awk -v t="$total" 'BEGIN { exit !(t >= 0 && t <= 0.025) }'; echo $?) \
	"while $running agent(s) run with forged usage.json files in their /out ($live), the report says \$$total, nothing negative"
release

ended=0 capped=0
for job in "${jobs[@]}"; do
	for _ in 1 2 3 4 5; do
		inside "$a" sandbox_wait "$(jq -cn --arg j "$job" '{job_id: $j, timeout_seconds: 120}')"
		[ "$(jq -r '.status // empty' <<<"$S")" = running ] || break
	done
	if [ "$(jq -r '.result // empty' <<<"$S")" = forged ]; then
		ended=$((ended + 1))
	elif grep -q 'DEMESNE_TREE_MAX_USD' <<<"$R"; then
		capped=$((capped + 1))
	fi
	echo "job $job: $(said | head -c 300)" >&3
done
tap $([ "$ended" -ge 1 ] && [ $((ended + capped + refused)) = 4 ] && [ $((capped + refused)) -ge 1 ]; echo $?) \
	"$ended agents finished, $capped were stopped at their share and $refused refused, each naming DEMESNE_TREE_MAX_USD"
report "$a"
requests=$(grep -c '"auth_ok":true' "$tmp/fixture-anthropic.log" 2>/dev/null)
tap $([ "$negative" = 0 ] && awk -v t="$total" 'BEGIN { exit !(t > 0 && t <= 0.025) }'; echo $?) \
	"the tree spent \$$total of its \$0.025, never past it ($requests model requests)"
tap $(jq -e '[.structuredContent.runs[] | select(.kind == "agent") | .usage_final] | all' <<<"$MCP_RESULT" >/dev/null
	echo $?) "every agent's figures are final, from the ledger"

# What is left cannot be forged open: the next start is refused or stopped.
before=$total
inside "$a" sandbox_agent '{"prompt":"[play:forge] Once more.","model":"sonnet"}'
tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -q 'DEMESNE_TREE_MAX_USD'; echo $?) \
	"a start after that is refused or stopped by the tree's cap ($(said | head -c 200))"
tap $(said | grep -q 'live agent runs hold \$0.0000 more'; echo $?) \
	"every run's share came back: finished, stopped at its share, cancelled, timed out"
report "$a"
tap $(awk -v t="$total" 'BEGIN { exit !(t <= 0.025) }'; echo $?) "and the tree still has not passed it (\$$before, then \$$total)"

mcp_call sandbox_destroy "$(jq -cn --arg id "$a" '{sandbox_id: $id}')"
nested_finish
