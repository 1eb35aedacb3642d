#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Children's outputs in the parent's /out/children/<id>/: a nested sandbox
# runs a child sandbox_script that writes /out/hello.txt and then reads
# /out/children/<run_id>/hello.txt; a background child job's output
# appears once it has ended; a child sandbox's once it is destroyed; a
# nested run sees its child run's output while it still runs. A hostile
# parent that planted children as a link to a host directory, or a link
# named like the child, gets nothing written through it. Against the real
# engine, over stdio with examples/lib/mcp.sh.
. "$(dirname -- "${BASH_SOURCE[0]}")/lib/tap.sh"
needs jq "needs jq"

tmp=$(mktemp -d /tmp/dm-children-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=300
mkdir -p "$tmp/in" "$tmp/outside"
export DEMESNE_ALLOWED_PATHS=$tmp/in
. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }

. "$top/tests/e2e/lib/nested.sh"

# The command's stdout of sandbox_exec in $1.
run_in() {
	mcp_call sandbox_exec "$(jq -cn --arg id "$1" --arg c "$2" '{sandbox_id: $id, command: $c}')" >>"$tmp/client.log"
	field stdout
}

mcp_start

# 1-2: a child run.
nested_box none
a=$box
inside "$a" sandbox_script '{"image":"base","command":"echo hello > /out/hello.txt; mkdir /out/d; echo deep > /out/d/x; ln -s /etc/shadow /out/l"}'
run=$(jq -r '.run_id // empty' <<<"$S")
tap $([ -n "$run" ]; echo $?) "the nested sandbox runs a child script ($run$(said | head -c 200))"
got=$(run_in "$a" "cat /out/children/$run/hello.txt /out/children/$run/d/x; readlink /out/children/$run/l")
tap $([ "$got" = $'hello\ndeep\n/etc/shadow' ]; echo $?) \
	"the parent reads /out/children/<run_id>/, the link made again as a link ($(tr '\n' ' ' <<<"$got"))"
tap $([ "$(cat "$DEMESNE_OUTPUT_ROOT/$run/hello.txt" 2>/dev/null)" = hello ]; echo $?) \
	"the child's own output directory stays"

# 3: a background child job, once it has ended.
inside "$a" sandbox_script '{"image":"base","command":"echo from-a-job > /out/job.txt","background":true}'
job=$(jq -r '.job_id // empty' <<<"$S")
inside "$a" sandbox_wait "$(jq -cn --arg j "$job" '{job_id: $j, timeout_seconds: 120}')"
jrun=$(jq -r '.run_id // empty' <<<"$S")
got=$(run_in "$a" "cat /out/children/$jrun/job.txt")
tap $([ -n "$jrun" ] && [ "$got" = from-a-job ]; echo $?) "a background child job's output, once it ended ($job $jrun: $got)"

# 4-5: a child sandbox, once destroyed.
inside "$a" sandbox_create '{"image":"base","egress":"none","ttl_seconds":900}'
child=$(jq -r '.sandbox_id // empty' <<<"$S")
inside "$a" sandbox_exec "$(jq -cn --arg id "$child" '{sandbox_id: $id, command: "echo kept > /out/kept.txt"}')"
got=$(run_in "$a" "ls /out/children/$child 2>&1")
tap $(grep -q "No such file" <<<"$got"; echo $?) "a live child sandbox's output is not there yet"
inside "$a" sandbox_destroy "$(jq -cn --arg id "$child" '{sandbox_id: $id}')"
got=$(run_in "$a" "cat /out/children/$child/kept.txt")
tap $([ "$got" = kept ]; echo $?) "once destroyed, it is in /out/children/<sandbox_id>/ ($got)"

# 6-7: a hostile parent: children is a link to a host directory; then a
# link named like the child.
nested_box none
b=$box
run_in "$b" "ln -s '$tmp/outside' /out/children" >/dev/null
inside "$b" sandbox_script '{"image":"base","command":"echo evil > /out/evil.txt"}'
brun=$(jq -r '.run_id // empty' <<<"$S")
tap $([ -n "$brun" ] && [ -z "$(ls -A "$tmp/outside")" ] && [ -L "$DEMESNE_OUTPUT_ROOT/$b/children" ]; echo $?) \
	"children planted as a link to a host directory: nothing written there ($(ls -A "$tmp/outside" | head -c 200))"
inside "$b" sandbox_create '{"image":"base","egress":"none","ttl_seconds":900}'
bchild=$(jq -r '.sandbox_id // empty' <<<"$S")
inside "$b" sandbox_exec "$(jq -cn --arg id "$bchild" '{sandbox_id: $id, command: "echo evil > /out/evil.txt"}')"
run_in "$b" "rm /out/children && mkdir /out/children && ln -s '$tmp/outside' /out/children/$bchild" >/dev/null
inside "$b" sandbox_destroy "$(jq -cn --arg id "$bchild" '{sandbox_id: $id}')"
tap $([ -n "$bchild" ] && [ -z "$(ls -A "$tmp/outside")" ] && grep -q "children/$bchild in the parent's output: the name is taken" "$tmp/server.log"; echo $?) \
	"a link named like the child sandbox: nothing written through it, the log says why"

# 8: a nested run reads its child run's output while it runs.
cp "$tmp/call.sh" "$tmp/in/call.sh"
cmd=$(cat <<'CMD'
echo '{"image":"base","command":"echo from-a-run > /out/r.txt"}' | sh /in/call.sh sandbox_script >/dev/null
cat /out/children/*/r.txt
CMD
)
mcp_call sandbox_script "$(jq -cn --arg f "$tmp/in/call.sh" --arg c "$cmd" \
	'{image: "base", egress: "none", nested: true, files: [$f], command: $c}')"
tap $([ "$(field stdout)" = from-a-run ]; echo $?) "a nested run reads its child's output ($(field stdout)$(field stderr | head -c 200))"

mcp_call sandbox_destroy "$(jq -cn --arg id "$a" '{sandbox_id: $id}')"
mcp_call sandbox_destroy "$(jq -cn --arg id "$b" '{sandbox_id: $id}')"
mcp_stop

. "$top/tests/e2e/lib/left.sh"
left=$(containers_left "$DEMESNE_OUTPUT_ROOT")
tap $([ -z "$left" ] && [ -z "$(ls "$DEMESNE_OUTPUT_ROOT/.sandboxes/"*.json 2>/dev/null)" ]; echo $?) \
	"no container or sandbox is left${left:+: $left}"

nested_done
