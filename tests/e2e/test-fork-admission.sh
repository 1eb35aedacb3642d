#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# sandbox_fork under the tree's caps, from inside a nested sandbox (only a
# nested caller is capped), through its endpoint: a fork of 8 under
# DEMESNE_MAX_TREE=5 is refused whole with the cap's sentence and leaves no
# container, snapshot image, snapshot directory or output directory; then,
# under caps of 8, four forks of 3 fired at once from one session: the
# engine's running sandboxes of the tree, sampled while they run, never
# exceed 8, two forks are made whole and the other two get the cap's
# refusal, and only the made ones' snapshots exist; destroying the nested
# sandbox deletes them (a tree's snapshots end with it). Against the real
# engine, over stdio with examples/lib/mcp.sh.
. "$(dirname -- "${BASH_SOURCE[0]}")/lib/tap.sh"
needs jq "needs jq"
needs curl "needs curl"

tmp=$(mktemp -d /tmp/dm-fork-admission-XXXXXX)
sampler=
# At exit: the sampler stopped; $tmp removed when every check passed, kept
# (and named) when one failed.
trap '[ -z "$sampler" ] || { touch "$tmp/stop"; wait "$sampler"; }
	if [ "$failed" = 0 ]; then rm -rf "$tmp"; else echo "# logs kept in $tmp" >&3; fi' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=600 DEMESNE_POOL=0
unset DEMESNE_ALLOWED_PATHS DEMESNE_TREE_MAX_USD
. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }
. "$top/tests/e2e/lib/nested.sh"

# Inside the nested sandbox: `sh /workspace/forks.sh N SRC COUNT DIR` fires
# N sandbox_fork {SRC, COUNT} at once, each answer into DIR/<i>.json.
cat >"$tmp/forks.sh" <<'EOF2'
n=$1 src=$2 count=$3 dir=$4
mkdir -p "$dir"
echo '{}' | sh /workspace/call.sh sandbox_list >/dev/null # the session, made once
i=0
while [ "$i" -lt "$n" ]; do
	i=$((i + 1))
	echo "{\"sandbox_id\":\"$src\",\"count\":$count}" |
		CALL_ID=$((10 + i)) timeout 300 sh /workspace/call.sh sandbox_fork >"$dir/$i.json" 2>&1 &
done
wait
EOF2

sock=${DOCKER_HOST:-unix:///run/podman/podman.sock}
sock=${sock#unix://}
# The running persistent sandboxes of this output root but $1 (the nested
# caller): a sandbox's container is named by its id, its output directory
# is <root>/<id>.
tree_running() {
	curl -sf --unix-socket "$sock" -G http://d/v1.41/containers/json \
		--data-urlencode 'filters={"label":["demesne.kind=sandbox"]}' | jq -r '.[].Names[0] | ltrimstr("/")' |
		while read -r name; do
			[ "$name" != "$1" ] && [ -d "$DEMESNE_OUTPUT_ROOT/$name" ] && echo "$name"
		done
}
destroy() { mcp_call sandbox_destroy "$(jq -cn --arg id "$1" '{sandbox_id: $id}')" >/dev/null; }
snapshots() { find "$DEMESNE_OUTPUT_ROOT/.snapshots" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
box_with_source() { # a nested sandbox A (in $a) and its child S (in $s), with the scripts
	nested_box none >/dev/null
	a=$box
	mcp_call sandbox_upload "$(jq -cn --arg id "$a" --arg c "$(base64 -w0 "$tmp/forks.sh")" \
		'{sandbox_id: $id, dst: "/workspace/forks.sh", content: $c}')" >/dev/null
	inside "$a" sandbox_create '{"image":"base","egress":"none","ttl_seconds":900}'
	s=$(jq -r '.sandbox_id // empty' <<<"$S")
	inside "$a" sandbox_exec "$(jq -cn --arg id "$s" '{sandbox_id: $id, command: "echo prepared > /workspace/p"}')"
}

# 1-3: a fork of 8 under a tree limit of 5 (the children's cap wide
# enough that the tree's decides): refused whole, nothing made.
export DEMESNE_MAX_CHILDREN=16 DEMESNE_MAX_TREE=5
mcp_start
box_with_source
tap $([ -n "$s" ]; echo $?) "a nested sandbox and its child to fork ($a, $s)"
dirs=$(ls "$DEMESNE_OUTPUT_ROOT" | wc -l)
inside "$a" sandbox_fork "$(jq -cn --arg id "$s" '{sandbox_id: $id, count: 8}')"
tap $(jq -e '.isError == true' <<<"$R" >/dev/null && said | grep -q 'DEMESNE_MAX_TREE=5' &&
	! said | grep -q 'failed:'; echo $?) "sandbox_fork count 8 under DEMESNE_MAX_TREE=5: the cap's refusal ($(said | head -c 200))"
left=$(tree_running "$a" | grep -vx "$s")
tap $([ -z "$left" ] && [ "$(snapshots)" = 0 ] && [ "$(ls "$DEMESNE_OUTPUT_ROOT" | wc -l)" = "$dirs" ]; echo $?) \
	"and nothing made: no container${left:+ ($left)}, no snapshot ($(snapshots)), no output directory"
destroy "$a"
mcp_stop

# 4-8: four forks of 3 at once under caps of 8.
export DEMESNE_MAX_CHILDREN=8 DEMESNE_MAX_TREE=8
mcp_start
box_with_source
rm -f "$tmp/stop"
echo 0 >"$tmp/max"
(
	m=0
	while [ ! -e "$tmp/stop" ]; do
		c=$(tree_running "$a" | grep -c .)
		((c > m)) && m=$c && echo "$m" >"$tmp/max"
		sleep 0.3
	done
) &
sampler=$!
mcp_call sandbox_exec "$(jq -cn --arg id "$a" --arg s "$s" \
	'{sandbox_id: $id, command: ("sh /workspace/forks.sh 4 " + $s + " 3 /out/forks"), timeout_seconds: 900}')" >/dev/null
sleep 1 # one more sample after the last answer
touch "$tmp/stop"
wait "$sampler"
sampler=
max=$(cat "$tmp/max")
made=0 refused=0 other=
for f in "$DEMESNE_OUTPUT_ROOT/$a/forks/"*.json; do
	r=$(jq -c '.result // .error // {}' "$f" 2>/dev/null || echo '{}')
	if jq -e '.isError != true and (.structuredContent.sandbox_ids | length) == 3' <<<"$r" >/dev/null; then
		made=$((made + 1))
	elif jq -r '.content[0].text // ""' <<<"$r" | grep -Eq 'limit \(DEMESNE_MAX_(CHILDREN|TREE)=8\)'; then
		refused=$((refused + 1))
	else
		other+="$(head -c 200 "$f"); "
	fi
done
tap $([ "$made" = 2 ]; echo $?) "four forks of 3 at once beside one sandbox under caps of 8: two made whole ($made)"
tap $([ "$refused" = 2 ] && [ -z "$other" ]; echo $?) "the other two got the cap's refusal ($refused; ${other:-no other answer})"
tap $([ "$max" -ge 1 ] && [ "$max" -le 8 ]; echo $?) "never more than 8 of the tree's sandboxes ran at once (at most $max seen)"
tap $([ "$(snapshots)" = 2 ]; echo $?) "only the two made forks' snapshots exist ($(snapshots))"
# A tree's snapshots end with it: destroying the nested sandbox (the
# tree's root) deletes the snapshots its calls took, images and all, with
# no sandbox_destroy {snapshot_id}.
snaps=$(cat "$DEMESNE_OUTPUT_ROOT/$a/forks/"*.json | jq -r '.result.structuredContent.snapshot_id // empty' 2>/dev/null)
destroy "$a"
imgs=$(for snap in $snaps; do
	curl -sf --unix-socket "$sock" "http://d/v1.41/images/localhost/demesne-snapshot:$snap/json" >/dev/null && echo "$snap"
done)
mcp_call sandbox_list '{}' >/dev/null
listed=$(jq -r '.structuredContent.snapshots[]?.snapshot_id' <<<"$MCP_RESULT" 2>/dev/null)
tap $([ "$(snapshots)" = 0 ] && [ -z "$imgs" ] && [ -z "$listed" ] && [ -n "$snaps" ]; echo $?) \
	"destroying the tree's root deletes its snapshots: no directory ($(snapshots)), no image${imgs:+ ($imgs)}, none listed${listed:+ ($listed)}"
mcp_stop

. "$top/tests/e2e/lib/left.sh"
left=$(containers_left "$DEMESNE_OUTPUT_ROOT")
tap $([ -z "$left" ]; echo $?) "nothing is left${left:+: $left}"
nested_done
