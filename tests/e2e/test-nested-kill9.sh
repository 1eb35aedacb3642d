#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A server killed with -9 in the middle of a tree leaves nothing of it once
# the next server has swept: the host's caller makes a nested sandbox,
# which through its endpoint makes a child sandbox (nested too), a
# background child job (sleep 300) and, through the child's endpoint, a
# grandchild. The server is killed with SIGKILL; a new one with the same
# state directory and output root destroys the child and the grandchild
# (their endpoints died with the old server; each is copied into its
# parent's output on the way) and the job's container, and adopts the top
# sandbox, whose endpoint it serves again from its first command, behind a
# new token (the old one gets 401). No container of the tree but the
# top one is left, nor the children's veths; once the top is destroyed,
# nothing at all. Against the real engine, over stdio with
# examples/lib/mcp.sh.
. "$(dirname -- "${BASH_SOURCE[0]}")/lib/tap.sh"
needs jq "needs jq"

tmp=$(mktemp -d /tmp/dm-kill9-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=300
export DEMESNE_MAX_DEPTH=2
. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }
diag() { printf '# %s\n' "$@" >&3; }

. "$top/tests/e2e/lib/nested.sh"
. "$top/tests/e2e/lib/left.sh"

engine=${DOCKER_HOST:-${DEMESNE_ENGINE_HOST:-unix:///run/podman/podman.sock}}
# Whether the container of persistent sandbox $1 exists (they carry no
# server's label, only their own id).
exists() {
	local list
	list=$(curl -sf --unix-socket "${engine#unix://}" -G http://d/v1.41/containers/json \
		--data-urlencode all=1 --data-urlencode "filters={\"label\":[\"demesne.sandbox=$1\"]}") ||
		list=$(podman ps -a --format json --filter "label=demesne.sandbox=$1" 2>/dev/null) || return 2
	[ "$(jq length <<<"$list")" -gt 0 ]
}
# The PIDs of the conmon processes (not zombies) that keep the containers
# of sandboxes $@ (conmon -n <name>; a sandbox's container has its id as
# name): the engine can drop a container from its records and leave its
# processes running.
conmons_of() {
	local s
	for s in "$@"; do
		ps -eo pid=,stat=,args= | awk -v n="-n $s" '$2 !~ /^Z/ && $3 ~ /conmon$/ && index($0, n " ") { print $1 }'
	done
}
# The host side of sandbox $1's veth, from its record ("" without one).
veth_of() { jq -r '.net.ifname // empty' "$DEMESNE_OUTPUT_ROOT/.sandboxes/$1.json" 2>/dev/null; }

mcp_start
server=$MCP_PID

# 1-4: the tree. Package-managers egress, so that each sandbox has a veth
# pair where the host allows one (root).
nested_box package-managers
a=$box
inside "$a" sandbox_create '{"image":"base","egress":"package-managers","ttl_seconds":900,"nested":true}'
child=$(jq -r '.sandbox_id // empty' <<<"$S")
tap $([ -n "$child" ]; echo $?) "the nested sandbox makes a nested child ($child$(said | head -c 200))"
inside "$a" sandbox_upload "$(jq -cn --arg id "$child" --arg c "$(base64 -w0 "$tmp/call.sh")" \
	'{sandbox_id: $id, dst: "/workspace/call.sh", content: $c}')"
inside "$a" sandbox_exec "$(jq -cn --arg id "$child" --arg s '{"image":"base","egress":"package-managers","ttl_seconds":900}' \
	'{sandbox_id: $id, command: "echo child > /out/c.txt; sh /workspace/call.sh sandbox_create", stdin: $s}')"
grand=$(jq -r '.stdout' <<<"$S" | jq -r '.result.structuredContent.sandbox_id // empty' 2>/dev/null)
tap $([ -n "$grand" ]; echo $?) "the child makes a grandchild through its own endpoint ($grand)"
inside "$a" sandbox_exec "$(jq -cn --arg id "$child" --arg g "$grand" \
	'{sandbox_id: $id, command: "sh /workspace/call.sh sandbox_exec", stdin: ({sandbox_id: $g, command: "echo grand > /out/g.txt"} | tojson)}')"
inside "$a" sandbox_script '{"image":"base","command":"echo started > /out/j.txt; echo started; sleep 300","background":true}'
job=$(jq -r '.job_id // empty' <<<"$S")
tap $([ -n "$job" ]; echo $?) "the nested sandbox starts a background child job ($job$(said | head -c 200))"
# Until the job has written its file (it says so on stdout); a guard, not a bound.
for _ in $(seq 300); do
	inside "$a" sandbox_status "$(jq -cn --arg j "$job" '{job_id: $j, include_stdout_tail: true}')"
	[ "$(jq -r '.stdout_tail // empty' <<<"$S")" = started ] && break
	sleep 0.1
done
job_ctr=$(containers_now "$DEMESNE_OUTPUT_ROOT")
tap $(exists "$a" && exists "$child" && exists "$grand" && [ -n "$job_ctr" ]; echo $?) \
	"the top, child and grandchild containers and the job's exist (job: ${job_ctr:0:12})"
mcp_call sandbox_exec "$(jq -cn --arg id "$a" '{sandbox_id: $id, command: "printf %s \"$DEMESNE_MCP_TOKEN\""}')"
old_token=$(field stdout)
veths="$(veth_of "$a") $(veth_of "$child") $(veth_of "$grand")"
pids=$(conmons_of "$child" "$grand" | tr '\n' ' ')
# Podman keeps each container with a conmon; another engine, none.
want=0
[ -n "$(conmons_of "$a")" ] && want=2
diag "veths: $veths"

# 5: kill -9.
kill -9 "$server"
wait "$server" 2>/dev/null
tap $(! kill -0 "$server" 2>/dev/null; echo $?) "the server is killed with SIGKILL"

# 6-10: the next server sweeps. Its engine opens on the first call that
# needs it; the sweep runs in the background then.
mcp_start
mcp_call sandbox_list '{}'
for _ in $(seq 100); do
	! exists "$child" && ! exists "$grand" && [ -z "$(containers_left "$DEMESNE_OUTPUT_ROOT")" ] && break
	sleep 0.5
done
# A sandbox_list while the sweep destroys: the list must not start a
# container the sweep has stopped and is removing (Podman then drops it
# from its records with its shim still running).
for _ in $(seq 20); do
	live=$(conmons_of "$child" "$grand" | tr '\n' ' ')
	[ -z "$live" ] && break
	sleep 0.5
done
tap $(! exists "$child" && ! exists "$grand" && [ -z "$live" ] && [ "$(wc -w <<<"$pids")" = $want ]; echo $?) \
	"the child and the grandchild are destroyed by the sweep, their processes too (conmon $pids${live:+; still running: $live})"
left=$(containers_left "$DEMESNE_OUTPUT_ROOT")
tap $([ -z "$left" ]; echo $?) "the background job's container is gone${left:+: $left}"
stray=
for v in $veths; do
	[ "$v" = "$(veth_of "$a")" ] && continue
	ip link show "$v" >/dev/null 2>&1 && stray="$stray $v"
done
tap $([ -z "$stray" ]; echo $?) "no veth of the child or grandchild is left${stray:+:$stray}"
mcp_call sandbox_list '{}'
ids=$(jq -c '[.structuredContent.sandboxes[].sandbox_id]' <<<"$MCP_RESULT")
tap $([ "$ids" = "[\"$a\"]" ] && exists "$a"; echo $?) "the top sandbox alone is adopted ($ids)"
mcp_call sandbox_exec "$(jq -cn --arg id "$a" --arg c "$child" --arg g "$grand" \
	'{sandbox_id: $id, command: ("cat /out/children/" + $c + "/c.txt /out/children/" + $c + "/children/" + $g + "/g.txt /out/children/run-*/j.txt")}')"
tap $([ "$(field stdout)" = $'child\ngrand\nstarted' ]; echo $?) \
	"it runs commands, and holds its child's and its job's outputs, with its grandchild's inside the child's ($(field stdout | tr '\n' ' ')$(field stderr | head -c 200))"

# 11-12: its endpoint is served again from its first command on, behind a
# new token; the old one opens nothing.
inside "$a" sandbox_list '{}'
tap $([ "$(jq -r .isError <<<"$R")" = false ] && [ "$(jq -c '.sandboxes' <<<"$S")" = "[]" ]; echo $?) \
	"the adopted top sandbox's endpoint answers again, and its subtree is empty ($(said | head -c 200))"
mcp_call sandbox_exec "$(jq -cn --arg id "$a" --arg t "$old_token" \
	'{sandbox_id: $id, command: ("printf \"%s \" \"${#DEMESNE_MCP_TOKEN}\"; [ \"$DEMESNE_MCP_TOKEN\" != " + ($t | @sh) + " ] && echo new; sh /workspace/call.sh -raw " + ($t | @sh))}')"
tap $([ "$(field stdout)" = "64 new
401" ] && [ ${#old_token} = 64 ]; echo $?) \
	"its commands get a new token; the old one is refused with 401 ($(field stdout | tr '\n' ' '))"

# 13-14: the top goes cleanly, and nothing is left.
mcp_call sandbox_destroy "$(jq -cn --arg id "$a" '{sandbox_id: $id}')"
tap $(! exists "$a"; echo $?) "the top sandbox is destroyed"
mcp_stop
left=$(containers_left "$DEMESNE_OUTPUT_ROOT")
for s in "$a" "$child" "$grand"; do exists "$s" && left="$left $s"; done
live=$(conmons_of "$a" "$child" "$grand" | tr '\n' ' ')
[ -n "$live" ] && left="$left conmon ${live% }"
for v in $veths; do ip link show "$v" >/dev/null 2>&1 && left="$left $v"; done
tap $([ -z "$left" ] && [ -z "$(ls "$DEMESNE_OUTPUT_ROOT/.sandboxes/"*.json 2>/dev/null)" ]; echo $?) \
	"nothing is left: no container, process, veth or sandbox record${left:+:$left}"

nested_done
