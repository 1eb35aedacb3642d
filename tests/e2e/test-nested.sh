#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Nested sandboxes: a sandbox made with nested: true calls demesne's own
# tools through the MCP endpoint inside it (DEMESNE_MCP_URL with
# DEMESNE_MCP_TOKEN, Streamable HTTP, from curl in the sandbox) at egress
# none; what its calls make belongs to its subtree. Checked: the token is
# needed; a child runs; a child's egress is never wider than the parent's,
# and allow entries and host paths are refused from inside; the parent sees
# only its subtree and a sibling's sandbox is unknown to it; the depth and
# children caps are refused naming their variables; a grandchild (depth 2)
# reaches its own endpoint and the top's caller sees it; destroying the top
# sandbox destroys its subtree; no container is left. Against the real
# engine, over stdio with examples/lib/mcp.sh; rootless too.
set -uo pipefail
top=${top_srcdir:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)}
export DEMESNE=${DEMESNE:?DEMESNE must name the built demesne (make check sets it)}
command -v jq >/dev/null || { echo "1..0 # SKIP needs jq"; exit 77; }

n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }

tmp=$(mktemp -d /tmp/dm-nested-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state MCP_QUIET=1 MCP_TIMEOUT=300
# Caller allow entries are permitted to the host's caller, so that their
# refusal from inside is the nested sandbox's rule.
export DEMESNE_MAX_DEPTH=2 DEMESNE_MAX_CHILDREN=2 DEMESNE_ALLOW_CALLER_EGRESS=1
# The client below, as a host input of the nested run (sandbox_script).
mkdir -p "$tmp/in"
export DEMESNE_ALLOWED_PATHS=$tmp/in
. "$top/examples/lib/mcp.sh" >/dev/null
exec 3>&1 >"$tmp/client.log" 2>"$tmp/server.log"
tap() { ok "$@" >&3; }
diag() { printf '# %s\n' "$@" >&3; }

. "$top/tests/e2e/lib/nested.sh"

mcp_start

# 1-3: the endpoint and its token.
nested_box none
a=$box
mcp_call sandbox_exec "$(jq -cn --arg id "$a" '{sandbox_id: $id, command: "echo $DEMESNE_MCP_URL; echo ${#DEMESNE_MCP_TOKEN}"}')"
tap $([ "$(field stdout)" = $'http://127.0.0.1:3130/mcp\n64' ]; echo $?) \
	"a nested sandbox has DEMESNE_MCP_URL and a 64-digit DEMESNE_MCP_TOKEN ($(field stdout | tr '\n' ' '))"
mcp_call sandbox_exec "$(jq -cn --arg id "$a" '{sandbox_id: $id, command: "sh /workspace/call.sh -raw; echo; sh /workspace/call.sh -raw 0123456789abcdef0123456789abcdef"}')"
tap $([ "$(field stdout)" = $'401\n401' ]; echo $?) "no token and a wrong token get 401 ($(field stdout | tr '\n' ' '))"
inside "$a" sandbox_script '{"image":"base","command":"echo child-says-hi"}'
tap $([ "$(jq -r .stdout <<<"$S")" = child-says-hi ] && [ "$(jq -r .exit_code <<<"$S")" = 0 ]; echo $?) \
	"at egress none, the sandbox runs a child through its endpoint ($(said | head -c 200))"

# 4-7: what a child may not have.
inside "$a" sandbox_script '{"image":"base","egress":"package-managers","command":"true"}'
tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -q "wider than this sandbox's own ('none')"; echo $?) \
	"a child's egress wider than the parent's is refused ($(said))"
inside "$a" sandbox_script '{"image":"base","command":"echo ${HTTPS_PROXY:-unset} $(tail -n +2 /proc/net/route | wc -l)"}'
tap $([ "$(jq -r .stdout <<<"$S")" = "unset 0" ]; echo $?) \
	"a child that names no egress gets the parent's none: no proxy, no route ($(jq -r .stdout <<<"$S"))"
inside "$a" sandbox_script '{"image":"base","allow":["example.org"],"command":"true"}'
tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -q "'allow' entries are refused from inside"; echo $?) \
	"allow entries are refused from inside ($(said))"
inside "$a" sandbox_script '{"image":"base","files":["/etc/passwd"],"command":"true"}'
tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -q "host paths are refused from inside"; echo $?) \
	"host paths are refused from inside ($(said))"

# 8-11: the subtree, and a sibling.
inside "$a" sandbox_create '{"image":"base","egress":"none","ttl_seconds":900}'
child=$(jq -r '.sandbox_id // empty' <<<"$S")
tap $([ -n "$child" ]; echo $?) "the sandbox makes a child sandbox ($child$(said | head -c 200))"
inside "$a" sandbox_list '{}'
tap $([ "$(jq -c '[.sandboxes[].sandbox_id]' <<<"$S")" = "[\"$child\"]" ]; echo $?) \
	"its sandbox_list shows its child alone ($S)"
nested_box none
b=$box
inside "$a" sandbox_exec "$(jq -cn --arg id "$b" '{sandbox_id: $id, command: "true"}')"
tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -q "unknown sandbox"; echo $?) \
	"a sibling's sandbox is unknown to it ($(said))"
inside "$a" sandbox_exec "$(jq -cn --arg id "$a" '{sandbox_id: $id, command: "true"}')"
tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -q "unknown sandbox"; echo $?) \
	"and so is its own: its maker controls it, not it ($(said))"

# 12-13: the caps.
inside "$a" sandbox_create '{"image":"base","egress":"none","ttl_seconds":900,"nested":true}'
grand=$(jq -r '.sandbox_id // empty' <<<"$S")
tap $([ -n "$grand" ]; echo $?) "a nested child at depth 2 is made ($grand$(said | head -c 200))"
inside "$a" sandbox_create '{"image":"base","egress":"none"}'
tap $([ "$(jq -r .isError <<<"$R")" = true ] && said | grep -q "DEMESNE_MAX_CHILDREN=2"; echo $?) \
	"a third live child is refused naming DEMESNE_MAX_CHILDREN ($(said))"

# 14-16: the grandchild's own endpoint, through its parent's.
inside "$a" sandbox_upload "$(jq -cn --arg id "$grand" --arg c "$(base64 -w0 "$tmp/call.sh")" \
	'{sandbox_id: $id, dst: "/workspace/call.sh", content: $c}')"
inside "$a" sandbox_exec "$(jq -cn --arg id "$grand" --arg s '{"image":"base","egress":"none","nested":true}' \
	'{sandbox_id: $id, command: "sh /workspace/call.sh sandbox_create", stdin: $s}')"
deep=$(jq -r '.stdout' <<<"$S")
tap $(jq -r '.result.content[0].text' <<<"$deep" | grep -q "DEMESNE_MAX_DEPTH"; echo $?) \
	"the grandchild, through its own endpoint, is refused a nested child at depth 3 (DEMESNE_MAX_DEPTH) ($(jq -r '.result.content[0].text' <<<"$deep" 2>/dev/null | head -c 200))"
inside "$a" sandbox_exec "$(jq -cn --arg id "$grand" --arg s '{"image":"base","command":"echo great-grandchild"}' \
	'{sandbox_id: $id, command: "sh /workspace/call.sh sandbox_script", stdin: $s}')"
tap $(jq -r '.stdout' <<<"$S" | jq -r '.result.structuredContent.stdout' 2>/dev/null | grep -qx great-grandchild; echo $?) \
	"and runs a child of its own"
mcp_call sandbox_list '{}'
tap $(jq -e --arg a "$a" --arg b "$b" --arg c "$child" --arg g "$grand" \
	'[.structuredContent.sandboxes[].sandbox_id] as $l | [$a, $b, $c, $g] | map(. as $x | $l | index($x) != null) | all' \
	<<<"$MCP_RESULT" >/dev/null; echo $?) "the host's caller sees the whole tree"

mcp_call sandbox_usage_report "$(jq -cn --arg id "$a" '{run_id: $id}')"
tap $(jq -e --arg c "$child" --arg g "$grand" '[.structuredContent.runs[].run_id] as $l | ($l | index($c)) != null and ($l | index($g)) != null' \
	<<<"$MCP_RESULT" >/dev/null; echo $?) "sandbox_usage_report on the top sandbox rolls up its subtree"

# 18-20: destroying the top ends the subtree.
mcp_call sandbox_destroy "$(jq -cn --arg id "$a" '{sandbox_id: $id}')"
mcp_call sandbox_list '{}'
ids=$(jq -c '[.structuredContent.sandboxes[].sandbox_id]' <<<"$MCP_RESULT")
tap $([ "$ids" = "[\"$b\"]" ]; echo $?) "destroying the top sandbox destroyed its child and grandchild ($ids)"
mcp_call sandbox_exec "$(jq -cn --arg id "$b" '{sandbox_id: $id, command: "sh /workspace/call.sh sandbox_list", stdin: "{}"}')"
tap $(jq -e '.structuredContent.stdout | fromjson | .result.structuredContent.sandboxes == []' <<<"$MCP_RESULT" >/dev/null; echo $?) \
	"the sibling's endpoint still serves"
mcp_call sandbox_destroy "$(jq -cn --arg id "$b" '{sandbox_id: $id}')"

# 21-23: a nested run: sandbox_script with nested: true, whose command makes
# a child sandbox and runs a child script through its endpoint; what it
# made ends with it.
cp "$tmp/call.sh" "$tmp/in/call.sh"
cmd=$(cat <<'CMD'
echo '{"image":"base","egress":"none","ttl_seconds":900}' | sh /in/call.sh sandbox_create
echo '{"image":"base","command":"echo from-a-run"}' | sh /in/call.sh sandbox_script
CMD
)
mcp_call sandbox_script "$(jq -cn --arg f "$tmp/in/call.sh" --arg c "$cmd" \
	'{image: "base", egress: "none", nested: true, files: [$f], command: $c}')"
out=$(field stdout)
kept=$(sed -n 1p <<<"$out" | jq -r '.result.structuredContent.sandbox_id // empty' 2>/dev/null)
tap $([ -n "$kept" ]; echo $?) "a nested run makes a child sandbox through its endpoint ($kept$(sed -n 1p <<<"$out" | head -c 200))"
tap $(sed -n 2p <<<"$out" | jq -r '.result.structuredContent.stdout' 2>/dev/null | grep -qx from-a-run; echo $?) \
	"and runs a child script"
mcp_call sandbox_list '{}'
tap $(jq -e --arg k "$kept" '[.structuredContent.sandboxes[].sandbox_id] | index($k) == null' <<<"$MCP_RESULT" >/dev/null; echo $?) \
	"the child sandbox ended with the run ($(jq -c '[.structuredContent.sandboxes[].sandbox_id]' <<<"$MCP_RESULT"))"
# Nothing is left: no container of this output root.
nested_finish
