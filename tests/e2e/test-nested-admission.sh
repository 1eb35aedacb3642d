#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Admission under concurrency (DEMESNE_MAX_CHILDREN=3, DEMESNE_MAX_TREE=4):
# from inside nested sandboxes, through their endpoints, 4x the cap at once
# of sandbox_create, of foreground sandbox_script (a sleep), of background
# ones and of sandbox_agent (Claude Code, the vendor fixture playing the
# model); the engine's running containers of the tree, sampled
# every 0.5 s while the flood runs, never exceed the cap, and every call
# that did not run got the cap's refusal. The tree cap across three levels:
# a nested sandbox and its nested child flood together. A nested sandbox
# destroyed by its parent mid-flood leaves nothing of its tree (containers,
# conmon, records). Against the real engine, over stdio with
# examples/lib/mcp.sh.
. "$(dirname -- "${BASH_SOURCE[0]}")/lib/tap.sh"
needs jq "needs jq"
needs curl "needs curl"
needs node "needs node for the vendor fixture"

tmp=$(mktemp -d /tmp/dm-admission-XXXXXX)
sampler=
fixtures=()
trap '[ -n "$sampler" ] && touch "$tmp/stop" && wait "$sampler"; fixtures_end' EXIT
# The model of the agents' flood: every request gets the default answer.
key=sk-ant-api03-demesne-admission-$RANDOM$RANDOM
port_of_anthropic=''
vendor_fixture anthropic "$key"
unset CLAUDE_CODE_OAUTH_TOKEN DEMESNE_TREE_MAX_USD
export HOME=$tmp/home ANTHROPIC_API_KEY=$key DEMESNE_VENDOR_UPSTREAM_ANTHROPIC=http://127.0.0.1:$port_of_anthropic
mkdir -p "$HOME"
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=600
export DEMESNE_MAX_CHILDREN=3 DEMESNE_MAX_TREE=4 DEMESNE_POOL=0
unset DEMESNE_ALLOWED_PATHS
. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }
. "$top/tests/e2e/lib/nested.sh"
. "$top/tests/e2e/lib/left.sh"

# Inside a sandbox: `sh /workspace/flood.sh TOOL N DIR` fires N calls of
# TOOL at once with the arguments on stdin, each answer into DIR/<i>.json,
# and returns when all have answered or 180 s passed. (A command's processes end with it:
# a flood is a sandbox_exec that the host waits for while it samples.)
cat >"$tmp/flood.sh" <<'EOF'
tool=$1 n=$2 dir=$3
args=$(cat)
mkdir -p "$dir"
echo '{}' | sh /workspace/call.sh sandbox_list >/dev/null # the session, made once
i=0
while [ "$i" -lt "$n" ]; do
	i=$((i + 1))
	# (bounded: an answer that never comes is a failure, not a hang)
	printf '%s' "$args" | CALL_ID=$((${CALL_BASE:-0} + i)) timeout 180 sh /workspace/call.sh "$tool" >"$dir/$i.json" 2>&1 &
done
wait
EOF
# In d (below): creates, and long runs a moment after (so that the creates
# take the slots and p, below, sees sandboxes in d's tree while calls are
# still in flight; a run holding a slot does not show in sandbox_list).
cat >"$tmp/go.sh" <<'EOF'
echo '{"image":"base","egress":"none","ttl_seconds":900}' | sh /workspace/flood.sh sandbox_create 12 /out/x &
# The scripts once a create has made its sandbox (at most 120 s): on a
# loaded machine they could otherwise take every slot first, and d's tree
# would hold runs only, which sandbox_list does not show (README as a normal
# user beside other work: "poll 240 of 240").
i=0
while [ "$i" -lt 600 ] && ! grep -qs 'sbx-[0-9a-f]\{12\}' /out/x/*.json; do
	i=$((i + 1))
	sleep 0.2
done
echo '{"image":"base","egress":"none","command":"sleep 60"}' | CALL_BASE=100 sh /workspace/flood.sh sandbox_script 12 /out/y &
wait
EOF
# In p, d's parent: d floods; once d's subtree has two sandboxes (d and a
# child of it), p destroys d. (It waited for four, which a flood whose
# runs took a slot never reaches: p then destroyed d after the flood.)
cat >"$tmp/kill.sh" <<'EOF'
d=$1
echo '{}' | sh /workspace/call.sh sandbox_list >/dev/null
echo "{\"sandbox_id\":\"$d\",\"command\":\"sh /workspace/go.sh\",\"timeout_seconds\":300}" |
	CALL_ID=2 sh /workspace/call.sh sandbox_exec >/dev/null &
i=0
while [ "$i" -lt 240 ]; do
	i=$((i + 1))
	[ "$(echo '{}' | sh /workspace/call.sh sandbox_list | grep -o 'sbx-[0-9a-f]\{12\}' | sort -u | wc -l)" -ge 2 ] && break
	sleep 0.5
done
echo "polls=$i"
echo "{\"sandbox_id\":\"$d\"}" | sh /workspace/call.sh sandbox_destroy
wait
EOF

upload() { # BOX FILE (from $tmp) into /workspace, through the host
	mcp_call sandbox_upload "$(jq -cn --arg id "$1" --arg c "$(base64 -w0 "$tmp/$2")" --arg d "/workspace/$2" \
		'{sandbox_id: $id, dst: $d, content: $c}')" >/dev/null
}
upload_inside() { # PARENT CHILD FILE: through PARENT's endpoint
	inside "$1" sandbox_upload "$(jq -cn --arg id "$2" --arg c "$(base64 -w0 "$tmp/$3")" --arg d "/workspace/$3" \
		'{sandbox_id: $id, dst: $d, content: $c}')"
}
flood_box() { nested_box none >/dev/null && upload "$box" flood.sh; }
nested_child() { # PARENT: a nested child of PARENT, made through its endpoint, with the scripts
	local f
	inside "$1" sandbox_create '{"image":"base","egress":"none","nested":true,"ttl_seconds":900}'
	child=$(jq -r '.sandbox_id // empty' <<<"$S")
	for f in call.sh flood.sh go.sh; do upload_inside "$1" "$child" "$f"; done
}
exec_in() { # BOX COMMAND [STDIN]
	mcp_call sandbox_exec "$(jq -cn --arg id "$1" --arg c "$2" --arg i "${3:-}" \
		'{sandbox_id: $id, command: $c, stdin: $i, timeout_seconds: 600}')" >/dev/null
}
destroy() { mcp_call sandbox_destroy "$(jq -cn --arg id "$1" '{sandbox_id: $id}')" >/dev/null; }

sock=${DOCKER_HOST:-unix:///run/podman/podman.sock}
sock=${sock#unix://}
label=$(root_label "$DEMESNE_OUTPUT_ROOT")
# The running containers of this output root, less those named $@ (the
# nested parents: a sandbox's container is named by its id): runs carry
# the root's label; persistent sandboxes carry none (they outlive servers),
# and are those with an output directory here.
running() {
	local name id
	{
		curl -sf --unix-socket "$sock" -G http://d/v1.41/containers/json \
			--data-urlencode "filters={\"label\":[\"$label\"]}" | jq -r '.[] | "\(.Names[0]) \(.Id)"'
		curl -sf --unix-socket "$sock" -G http://d/v1.41/containers/json \
			--data-urlencode 'filters={"label":["demesne.kind=sandbox"]}' | jq -r '.[] | "\(.Names[0]) \(.Id)"' |
			while read -r name id; do
				[ -d "$DEMESNE_OUTPUT_ROOT/${name#/}" ] && echo "$name $id"
			done
	} | while read -r name id; do
		[[ " $* " == *" ${name#/} "* ]] || echo "$id"
	done
}
# Samples running() (less $@) every 0.5 s in the background until
# sample_stop; then the most seen at once is in max, and every id seen was
# appended to $tmp/seen.
sample_start() {
	sample_args=("$@")
	rm -f "$tmp/stop"
	echo 0 >"$tmp/max"
	(
		m=0
		while [ ! -e "$tmp/stop" ]; do
			ids=$(running "$@")
			c=$(grep -c . <<<"$ids")
			((c > m)) && m=$c && echo "$m" >"$tmp/max"
			[ -n "$ids" ] && printf '%s\n' "$ids" >>"$tmp/seen"
			sleep 0.5
		done
	) &
	sampler=$!
}
# One more look when it stops: a flood answered within one period (its
# sandboxes made between two looks) was once stopped having seen none.
sample_stop() {
	local ids c
	touch "$tmp/stop"
	wait "$sampler"
	sampler=
	max=$(cat "$tmp/max")
	ids=$(running ${sample_args[@]+"${sample_args[@]}"})
	c=$(grep -c . <<<"$ids")
	((c > max)) && max=$c
	[ -z "$ids" ] || printf '%s\n' "$ids" >>"$tmp/seen"
}
# The answers in $1: how many ran (a sandbox, a job or an exit code), how
# many got a refusal matching $2, and the others' texts. A refusal is the
# cap's sentence as it is, whichever step of the claim said it: a
# "<tool> failed: ..." around it (a failed run) is another answer.
tally() {
	local f r text
	ran=0 refused=0 other=
	for f in "$1"/*.json; do
		r=$(jq -c '.result // .error // {}' "$f" 2>/dev/null || echo '{}')
		text=$(jq -r '.content[0].text // .message // ""' <<<"$r")
		if jq -e '.isError != true and (.structuredContent | (.sandbox_id // .job_id // .exit_code) != null)' \
			<<<"$r" >/dev/null; then
			ran=$((ran + 1))
		elif grep -Eq "$2" <<<"$text" && ! grep -Eq '^[a-z_]+ failed: ' <<<"$text"; then
			refused=$((refused + 1))
		else
			other+="${text:0:160}; "
		fi
	done
}

mcp_start

# 1-4: 12 sandbox_create at once from one nested sandbox: 3 made.
flood_box
a=$box
sample_start "$a"
exec_in "$a" "sh /workspace/flood.sh sandbox_create 12 /out/fa" '{"image":"base","egress":"none","ttl_seconds":900}'
sample_stop
tally "$DEMESNE_OUTPUT_ROOT/$a/fa" 'limit \(DEMESNE_MAX_CHILDREN=3\)'
tap $([ "$ran" = 3 ]; echo $?) "12 sandbox_create at once: 3 made ($ran)"
tap $([ "$refused" = 9 ] && [ -z "$other" ]; echo $?) "the other 9 got the cap's refusal ($refused; ${other:-no other answer})"
tap $([ "$max" -le 3 ] && [ "$max" -ge 1 ]; echo $?) "never more than 3 of its children ran at once (at most $max seen)"
destroy "$a"
left=$(running)
tap $([ -z "$left" ]; echo $?) "destroyed: its children went with it${left:+: $left}"

# 5-7: 12 foreground sandbox_script (sleep 4) at once.
flood_box
b=$box
sample_start "$b"
exec_in "$b" "sh /workspace/flood.sh sandbox_script 12 /out/fb" '{"image":"base","egress":"none","command":"sleep 4"}'
sample_stop
tally "$DEMESNE_OUTPUT_ROOT/$b/fb" 'limit \(DEMESNE_MAX_CHILDREN=3\)'
tap $([ "$ran" -ge 1 ] && [ "$ran" -le 3 ]; echo $?) "12 foreground runs at once: 1 to 3 ran ($ran)"
tap $([ $((ran + refused)) = 12 ] && [ -z "$other" ]; echo $?) \
	"the others got the cap's refusal ($refused; ${other:-no other answer})"
tap $([ "$max" -le 3 ] && [ "$max" -ge 1 ]; echo $?) "never more than 3 runs at once (at most $max seen)"
destroy "$b"

# 8-10: 12 background sandbox_script (sleep 4) at once; sampled until
# their containers are gone.
flood_box
c=$box
sample_start "$c"
exec_in "$c" "sh /workspace/flood.sh sandbox_script 12 /out/fc" \
	'{"image":"base","egress":"none","command":"sleep 4","background":true}'
# The answers come before the jobs' containers do: first until the sampler
# has seen one, then until none is left (under load the first look found
# none yet and the sampling stopped at 0). Guards, not bounds: jobs of 4 s.
for _ in $(seq 240); do
	[ "$(cat "$tmp/max")" -ge 1 ] 2>/dev/null && break
	sleep 0.25
done
for _ in $(seq 240); do
	[ -z "$(running "$c")" ] && break
	sleep 0.5
done
sample_stop
tally "$DEMESNE_OUTPUT_ROOT/$c/fc" 'limit \(DEMESNE_MAX_CHILDREN=3\)'
tap $([ "$ran" -ge 1 ] && [ "$ran" -le 3 ]; echo $?) "12 background jobs at once: 1 to 3 started ($ran)"
tap $([ $((ran + refused)) = 12 ] && [ -z "$other" ]; echo $?) \
	"the others got the cap's refusal ($refused; ${other:-no other answer})"
tap $([ "$max" -le 3 ] && [ "$max" -ge 1 ]; echo $?) "never more than 3 jobs' containers at once (at most $max seen)"
destroy "$c"

# 11-13: 12 foreground agent runs at once (Claude Code; the fixture
# answers at once, so the runs are short: what is sampled is the launch).
flood_box
g=$box
sample_start "$g"
exec_in "$g" "sh /workspace/flood.sh sandbox_agent 12 /out/fg" \
	'{"prompt":"Say the answer.","model":"sonnet","nested":false,"timeout_seconds":300}'
sample_stop
tally "$DEMESNE_OUTPUT_ROOT/$g/fg" 'limit \(DEMESNE_MAX_CHILDREN=3\)'
tap $([ -n "$port_of_anthropic" ] && [ "$ran" -ge 1 ] && [ "$ran" -le 3 ]; echo $?) \
	"12 agent runs at once: 1 to 3 ran ($ran; the fixture at ${port_of_anthropic:-nowhere})"
tap $([ $((ran + refused)) = 12 ] && [ -z "$other" ]; echo $?) \
	"the others got the cap's refusal ($refused; ${other:-no other answer})"
tap $([ "$max" -le 3 ] && [ "$max" -ge 1 ]; echo $?) "never more than 3 agents' containers at once (at most $max seen)"
destroy "$g"

# 14-16: the tree over three levels: t, its nested child t1, and their
# children. t1 is the tree's first: 3 more at most, though the children
# caps would let t make 2 and t1 make 3.
flood_box
t=$box
nested_child "$t"
t1=$child
args='{"image":"base","egress":"none","command":"sleep 4"}'
cat >"$tmp/both.sh" <<EOF
echo '{"sandbox_id":"$t1","command":"sh /workspace/flood.sh sandbox_script 6 /out/f1","stdin":$(jq -Rc . <<<"$args"),"timeout_seconds":600}' |
	CALL_ID=100 sh /workspace/call.sh sandbox_exec >/dev/null &
echo '$args' | sh /workspace/flood.sh sandbox_script 6 /out/ft
wait
EOF
upload "$t" both.sh
sample_start "$t" "$t1"
exec_in "$t" "sh /workspace/both.sh"
sample_stop
cap='limit \(DEMESNE_MAX_(CHILDREN=3|TREE=4)\)'
tally "$DEMESNE_OUTPUT_ROOT/$t/ft" "$cap"
r1=$ran f1=$refused o1=$other
tally "$DEMESNE_OUTPUT_ROOT/$t1/f1" "$cap"
tap $([ -n "$t1" ] && [ $((ran + r1)) -ge 1 ] && [ $((ran + r1)) -le 3 ]; echo $?) \
	"t and its nested child t1 flood together: 1 to 3 ran ($r1 + $ran)"
# Which caps refused, by level: "t1: 5 DEMESNE_MAX_TREE=4 ...".
kinds=$(for f in "$DEMESNE_OUTPUT_ROOT/$t1/f1" "$DEMESNE_OUTPUT_ROOT/$t/ft"; do
	printf '%s:' "$([ "$f" = "$DEMESNE_OUTPUT_ROOT/$t/ft" ] && echo t || echo t1)"
	cat "$f/"*.json 2>/dev/null | grep -o 'DEMESNE_MAX_[A-Z]*=[0-9]*' | sort | uniq -c | tr -s ' \n' ' '
done)
tap $([ $((ran + refused + r1 + f1)) = 12 ] && [ -z "$other$o1" ] && grep -q 'DEMESNE_MAX_TREE=4' <<<"$kinds"
echo $?) "the others got a cap's refusal, the tree's among them ($f1 + $refused: $kinds; ${other:-}${o1:-})"
tap $([ "$max" -le 3 ]; echo $?) "never more than 3 below t1 at once ($max seen; t1 is the tree's 4th)"
destroy "$t"

# 17-22: destroyed mid-flood: p's nested child d floods creates and runs;
# once d has children, p destroys it.
: >"$tmp/seen"
flood_box
p=$box
upload "$p" kill.sh
nested_child "$p"
d=$child
sample_start "$p" "$d"
exec_in "$p" "sh /workspace/kill.sh $d"
said_p=$(field stdout)
sample_stop
tap $([ "$max" -ge 1 ] && [ "$max" -le 3 ]; echo $?) "the flood ran below d, at most 3 at once ($max seen)"
polls=$(sed -n 's/^polls=//p' <<<"$said_p")
tap $([ -n "$polls" ] && [ "$polls" -lt 240 ]; echo $?) "p saw a child in d's tree while the flood ran (poll ${polls:-none} of 240)"
tap $(grep -q '"destroyed": *true' <<<"$said_p"; echo $?) "p destroyed d mid-flood (${said_p:0:200})"
left=$(running "$p")
tap $([ -z "$left" ]; echo $?) "no container of d's tree is left${left:+: $left}"
sleep 3 # what a call still in flight would have made by now
left=$(running "$p")
tap $([ -z "$left" ]; echo $?) "and none appears after${left:+: $left}"
conmon=$(ps -eo args | grep '[c]onmon' | grep -F -f <(sort -u "$tmp/seen" | grep . | cut -c1-12; echo "$d") || true)
tap $([ -z "$conmon" ]; echo $?) "no conmon of theirs is left${conmon:+: ${conmon:0:200}}"
destroy "$p"
tap $([ -z "$(ls "$DEMESNE_OUTPUT_ROOT/.sandboxes/"*.json 2>/dev/null)" ]; echo $?) "no sandbox record is left"

nested_finish
