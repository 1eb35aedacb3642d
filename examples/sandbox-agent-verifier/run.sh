#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# sandbox-agent-verifier: an orchestrator agent in a sandbox runs a small
# pipeline through demesne's own tools (its nested endpoint): two workers
# compute the same thing in child sandboxes, a verifier checks both, a
# worker that failed is retried once, and the orchestrator reports. The host
# sees one sandbox_agent call; the usage report on it shows the whole tree.
# Needs ANTHROPIC_API_KEY or OPENAI_API_KEY (or the CLIs' login files) in
# the server's environment, and the claude-code or codex image. MODEL picks
# the agent, as for sandbox-agent-hello. See README.md beside this file.
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
. "$here/../lib/mcp.sh"

mcp_start

say "1. hand the orchestrator the pipeline"
# The marker in brackets is for CI's vendor fixture, which plays the model
# (play.json); a real model reads past it.
prompt="[example:sandbox-agent-verifier] You are an orchestrator with demesne's tools (sandbox_script,
sandbox_wait and the rest). Compute the sum of the integers 1 to 100 with two independent workers:
two background sandbox_script calls (image base) that each print just the number. Wait for both
with sandbox_wait. Then run a verifier, a sandbox_script that checks each worker's number against
n(n+1)/2 and prints 'A PASS' or 'A FAIL', and the same for B. If a worker failed, run that worker
once more and verify its new number (retry once, no more). Answer with each worker's number, the
verifier's verdicts and the final sum."
args=$(jq -cn --arg p "$prompt" --arg m "${MODEL:-}" '{prompt: $p, timeout_seconds: 1800}
	+ (if $m == "" then {} else {model: $m} end)')
mcp_call sandbox_agent "$args"
check $? "sandbox_agent succeeded"
answer=$(field result)
run=$(field run_id)
[ "$(field exit_code)" = 0 ] && grep -q 5050 <<<"$answer"
check $? "the orchestrator answered with the sum: $answer"

say "2. the tree it made"
mcp_call sandbox_usage_report "$(jq -cn --arg r "$run" '{run_id: $r}')"
check $? "sandbox_usage_report"
children=$(jq '[.structuredContent.runs[] | select(.depth > 0)] | length' <<<"$MCP_RESULT")
[ "${children:-0}" -ge 3 ]
check $? "its children are rows of the report: $children (two workers and a verifier at least)"
if grep -q FAIL <<<"$answer"; then
	[ "$children" -ge 5 ]
	check $? "a worker failed verification, so it was retried and verified again ($children children)"
fi
jq -r '.content[0].text' <<<"$MCP_RESULT" | sed -n '1,/^total/p'

say "3. nothing of the tree is left"
mcp_call sandbox_list '{}'
[ "$(jq '.structuredContent.sandboxes | length' <<<"$MCP_RESULT")" = 0 ] &&
	[ "$(jq '[.structuredContent.jobs[] | select(.status == "running")] | length' <<<"$MCP_RESULT")" = 0 ]
check $? "no sandbox or running job is left: what the orchestrator made ended with it"

finish
