#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# sandbox-agent-hello: a coding agent (Claude Code or Codex) in a sandbox.
# sandbox_agent hands it a task; the agent works in its own container with no
# network but its vendor API, reached through demesne's vendor proxy, which
# holds your credential (the container never sees it); the answer, the file
# it wrote, its transcript and token usage come back; sandbox_usage_report
# sums the run. Needs ANTHROPIC_API_KEY or OPENAI_API_KEY (or the CLIs' login
# files) in the server's environment, and the claude-code or codex image.
# MODEL picks the agent (sonnet, opus, haiku: Claude Code; gpt-*: Codex);
# unset, the first provider with a credential. See README.md beside this file.
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
. "$here/../lib/mcp.sh"

mcp_start

say "1. hand the agent a task"
args=$(jq -cn --arg m "${MODEL:-}" '{
	prompt: "What is six times seven? Write just the number, and a newline, to /out/answer.txt, then say what you wrote.",
	success_criteria: ["/out/answer.txt holds the number"]} + (if $m == "" then {} else {model: $m} end)')
mcp_call sandbox_agent "$args"
check $? "sandbox_agent succeeded"
[ "$(field exit_code)" = 0 ] && [ -n "$(field result)" ]
check $? "the agent finished and answered: $(field result)"
run=$(field run_id)
out=$(field output_dir)
cost=$(field cost_usd)
grep -qx 42 "$out/answer.txt" 2>/dev/null
check $? "it wrote 42 to $out/answer.txt"
[ -s "$out/transcript.jsonl" ] && [ -s "$out/usage.json" ]
check $? "its transcript.jsonl and usage.json are beside it"
jq -e '.input_tokens > 0 and .output_tokens > 0' <<<"$(jq -c .structuredContent.usage <<<"$MCP_RESULT")" >/dev/null
check $? "token usage: $(jq -c '.structuredContent.usage | {input_tokens, output_tokens}' <<<"$MCP_RESULT"), \$$cost"

say "2. what did it cost?"
mcp_call sandbox_usage_report "$(jq -cn --arg r "$run" '{run_id: $r}')"
check $? "sandbox_usage_report"
jq -e --argjson c "$cost" '.structuredContent | .sandbox_count == 1 and ((.cost_usd - $c) | fabs) < 1e-9' \
	<<<"$MCP_RESULT" >/dev/null
check $? "one run, and its cost is the agent's cost_usd"
jq -r '.content[0].text' <<<"$MCP_RESULT"

finish
