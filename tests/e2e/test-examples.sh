#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Every example in examples/ runs as a user would run it (its own run.sh,
# against the built demesne, over stdio) and holds every check it prints.
# sandbox-agent-hello and sandbox-agent-verifier run twice, Claude Code and
# Codex, each against the vendor API fixture (tests/fixtures/vendor/server.mjs: the internet vendor
# APIs cannot be reached here), with the credential in the server's
# environment only. Afterwards no container of the examples' output root is
# left. Needs the engine, jq, node, and the base, python, claude-code and
# codex images (setup.sh builds them).
. "$(dirname -- "${BASH_SOURCE[0]}")/lib/tap.sh"
needs jq "needs jq"
needs node "needs node for the vendor fixture"

tmp=$(mktemp -d /tmp/dm-examples-XXXXXX)
cleanup() {
	local p
	for p in "${fixtures[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -p "$tmp/out" "$tmp/home"
# A home with no login files: the agents' credentials come only from the
# variables below.
export DEMESNE_OUTPUT_ROOT=$tmp/out HOME=$tmp/home MCP_TIMEOUT=300
unset ANTHROPIC_API_KEY OPENAI_API_KEY CLAUDE_CODE_OAUTH_TOKEN DEMESNE_ALLOWED_PATHS

# Runs examples/$1/run.sh; passes when it exits 0 having printed no FAILED
# line and its closing line.
example() {
	local name=$1 log=$tmp/$1${2:+-$2}.log rc
	shift
	[ $# -gt 0 ] && shift
	env "$@" timeout -k 10 900 bash "$top/examples/$name/run.sh" >"$log" 2>"$log.err"
	rc=$?
	[ $rc = 0 ] && ! grep -q '^FAILED' "$log" && grep -q '^== done: every check held' "$log"
	ok $? "examples/$name${tag:+ ($tag)}: every check held (exit $rc, $(grep -c '^ok:' "$log") checks)"
	if [ $rc != 0 ]; then
		grep '^FAILED' "$log" | sed 's/^/# /'
		tail -n 15 "$log" | sed 's/^/#   /'
		tail -n 5 "$log.err" | sed 's/^/#   stderr: /'
	fi
}


tag='' example hello-script
tag='' example persistent-session
tag='' example background-jobs
tag='' example fork-workers

akey=sk-ant-api03-demesne-examples-$RANDOM$RANDOM okey=sk-proj-demesne-examples-$RANDOM$RANDOM
port_of_anthropic='' port_of_openai=''
vendor_fixture anthropic "$akey"
vendor_fixture openai "$okey"
aport=$port_of_anthropic oport=$port_of_openai
[ -n "$aport" ] && [ -n "$oport" ]; ok $? "the vendor fixtures listen (${aport:-none}, ${oport:-none})"
tag='Claude Code' example sandbox-agent-hello claude MODEL=sonnet ANTHROPIC_API_KEY="$akey" \
	DEMESNE_VENDOR_UPSTREAM_ANTHROPIC="http://127.0.0.1:$aport"
tag=Codex example sandbox-agent-hello codex MODEL=gpt-5.5 OPENAI_API_KEY="$okey" \
	DEMESNE_VENDOR_UPSTREAM_OPENAI="http://127.0.0.1:$oport"
# An orchestrator agent and its children: the fixtures below play the model
# from the example's play.json.
vendor_fixture anthropic-play "$akey" --plays "$top/examples/sandbox-agent-verifier/play.json"
vendor_fixture openai-play "$okey" --plays "$top/examples/sandbox-agent-verifier/play.json"
tag='Claude Code' example sandbox-agent-verifier claude MODEL=sonnet ANTHROPIC_API_KEY="$akey" \
	DEMESNE_VENDOR_UPSTREAM_ANTHROPIC="http://127.0.0.1:${port_of_anthropic_play:-0}"
# gpt-5: Codex 0.171.0 offers it the MCP tools at once; for gpt-5.5 it offers
# them through its tool_search tool, which the fixture does not play.
tag=Codex example sandbox-agent-verifier codex MODEL=gpt-5 OPENAI_API_KEY="$okey" \
	DEMESNE_VENDOR_UPSTREAM_OPENAI="http://127.0.0.1:${port_of_openai_play:-0}"
for p in anthropic openai; do
	key=$([ $p = anthropic ] && echo "$akey" || echo "$okey")
	grep -q '"auth_ok":true' "$tmp/fixture-$p.log" 2>/dev/null && ! grep -rqF "$key" "$tmp/out"
	ok $? "$p: the fixture saw the real credential; no file of the runs holds it"
done

# Nothing is left of the examples' sandboxes.
. "$top/tests/e2e/lib/left.sh"
left=$(containers_left "$DEMESNE_OUTPUT_ROOT")
[ -z "$left" ]; ok $? "no container of the examples is left${left:+: $left}"

echo "1..$n"
[ $failed = 0 ]
