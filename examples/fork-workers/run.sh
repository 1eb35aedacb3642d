#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# fork-workers: prepare one sandbox (a small project and the list of its
# tests, in /workspace), fork it into four workers with sandbox_fork, let
# each run its share of the list in the background, and gather the four
# reports from the workers' own output directories. See README.md beside
# this file.
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
. "$here/../lib/mcp.sh"

mcp_start

say "1. prepare once: a project of 12 tests and their list, in /workspace"
mcp_call sandbox_create '{"image":"base","egress":"none","ttl_seconds":900}'
check $? "sandbox_create succeeded"
src=$(field sandbox_id)
prepare='mkdir -p /workspace/project/tests && cd /workspace/project &&
for i in $(seq 1 12); do
  printf "#!/bin/sh\n[ \$((%d %% 5)) != 0 ]\n" "$i" > tests/t$i.sh
done
ls tests > /workspace/tests.txt && wc -l < /workspace/tests.txt'
mcp_call sandbox_exec "$(jq -cn --arg id "$src" --arg c "$prepare" '{sandbox_id: $id, command: $c}')"
[ "$(field stdout)" = 12 ]
check $? "the source holds 12 tests and their list"

say "2. fork it into four workers"
mcp_call sandbox_fork "$(jq -cn --arg id "$src" '{sandbox_id: $id, count: 4}')"
check $? "sandbox_fork succeeded"
snap=$(field snapshot_id)
mapfile -t workers < <(jq -r '.structuredContent.sandbox_ids[]' <<<"$MCP_RESULT")
mapfile -t outs < <(jq -r '.structuredContent.sandboxes[].output_dir' <<<"$MCP_RESULT")
[ "${#workers[@]}" = 4 ] && [ "${#outs[@]}" = 4 ]
check $? "four workers, each with its own output directory (from $snap)"

say "3. each worker runs its share (every 4th test), all four at once"
jobs=()
for i in 0 1 2 3; do
	cmd="cd /workspace/project && awk 'NR % 4 == $i' /workspace/tests.txt | while read -r t; do
  if sh tests/\$t; then echo \"pass \$t\"; else echo \"fail \$t\"; fi
done > /out/report.txt; echo worker $i >> /workspace/who"
	mcp_call sandbox_exec "$(jq -cn --arg id "${workers[$i]}" --arg c "$cmd" '{sandbox_id: $id, command: $c, background: true}')"
	jobs+=("$(field job_id)")
done
[ "${#jobs[@]}" = 4 ] && [ -n "${jobs[3]}" ]
check $? "four background jobs started"
for j in "${jobs[@]}"; do
	until mcp_call sandbox_wait "$(jq -cn --arg j "$j" '{job_id: $j, timeout_seconds: 60}')" &&
		[ "$(field status)" != running ]; do :; done
done

say "4. gather the reports from the workers' output directories"
summary=$(cat "${outs[@]/%//report.txt}" 2>/dev/null | sort -u)
printf '%s\n' "$summary"
[ "$(grep -c . <<<"$summary")" = 12 ] && [ "$(grep -c '^fail' <<<"$summary")" = 2 ] &&
	grep -qx 'fail t5.sh' <<<"$summary" && grep -qx 'fail t10.sh' <<<"$summary"
check $? "every test ran exactly once across the four workers; t5 and t10 failed"
for i in 0 1 2 3; do
	[ "$(grep -c . "${outs[$i]}/report.txt")" = 3 ] || break
done
check $? "each worker ran its share of three"

say "5. the workers diverged; the source is as it was prepared"
mcp_call sandbox_exec "$(jq -cn --arg id "${workers[2]}" '{sandbox_id: $id, command: "cat /workspace/who"}')"
[ "$(field stdout)" = "worker 2" ]
check $? "worker 2 sees only its own note in /workspace"
mcp_call sandbox_exec "$(jq -cn --arg id "$src" '{sandbox_id: $id, command: "ls /workspace"}')"
! grep -q who <<<"$(field stdout)"
check $? "the source does not see the workers' notes"

say "6. clean up: the workers, the source, the snapshot"
destroyed=0
for w in "${workers[@]}" "$src"; do
	mcp_call sandbox_destroy "$(jq -cn --arg id "$w" '{sandbox_id: $id}')" && destroyed=$((destroyed + 1))
done
mcp_call sandbox_destroy "$(jq -cn --arg s "$snap" '{snapshot_id: $s}')" && destroyed=$((destroyed + 1))
[ "$destroyed" = 6 ]
check $? "sandbox_destroy of the four workers, the source and the snapshot"

finish
