#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# background-jobs: long commands as jobs. sandbox_script with background:
# true answers at once with a job id; sandbox_status shows it running with
# the tail of its output; sandbox_wait waits (up to 120 s a call) for its
# result; sandbox_cancel ends another job, whose every view then says
# cancelled; sandbox_list shows the jobs. See README.md beside this file.
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
. "$here/../lib/mcp.sh"

mcp_start

say "1. two jobs in the background"
mcp_call sandbox_script '{"image":"base","egress":"none","background":true,
	"command":"for i in 1 2 3 4; do echo step $i; sleep 3; done; echo finished > /out/result.txt"}'
check $? "the first job started"
slow=$(field job_id)
[ "$(field status)" = running ]; check $? "it answered at once: $slow is running"
mcp_call sandbox_script '{"image":"base","egress":"none","background":true,"command":"echo started; sleep 600"}'
doomed=$(field job_id)
[ -n "$doomed" ] && [ "$doomed" != null ]; check $? "the second job started: $doomed"

say "2. watch the first one"
# Polled until its first line shows (the container may take a while to
# start on a busy machine); it then has 9 s of steps left to be seen running.
for _ in $(seq 240); do
	mcp_call sandbox_status "$(jq -cn --arg j "$slow" '{job_id: $j, include_stdout_tail: true}')"
	[ "$(field status)" = running ] && ! grep -q '^step 1' <<<"$(field stdout_tail)" || break
	sleep 0.5
done
[ "$(field status)" = running ] && grep -q '^step 1' <<<"$(field stdout_tail)"
check $? "sandbox_status: running, and its output so far"
mcp_call sandbox_list '{}'
jq -e --arg a "$slow" --arg b "$doomed" \
	'[.structuredContent.jobs[] | select(.job_id == $a or .job_id == $b)] | length == 2' <<<"$MCP_RESULT" >/dev/null
check $? "sandbox_list shows both jobs"

say "3. cancel the second one"
mcp_call sandbox_cancel "$(jq -cn --arg j "$doomed" '{job_id: $j}')"
[ "$(field status)" = cancelled ]; check $? "sandbox_cancel answered cancelled"
mcp_call sandbox_status "$(jq -cn --arg j "$doomed" '{job_id: $j}')"
[ "$(field status)" = cancelled ]; check $? "and sandbox_status says so right after"

say "4. wait for the first one's result"
for _ in 1 2 3 4 5; do
	mcp_call sandbox_wait "$(jq -cn --arg j "$slow" '{job_id: $j, timeout_seconds: 30}')"
	[ "$(field status)" = running ] || break
done
[ "$(field exit_code)" = 0 ] && grep -q '^step 4' <<<"$(field stdout)"
check $? "sandbox_wait returned the job's final result: exit 0, all four steps"
[ "$(cat "$(field output_dir)/result.txt" 2>/dev/null)" = finished ]
check $? "its file is in the output directory"

finish
