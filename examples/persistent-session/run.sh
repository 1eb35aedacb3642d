#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# persistent-session: one sandbox kept across many commands and across a
# restart of the server (as MCP clients restart theirs): sandbox_create,
# sandbox_upload, sandbox_exec with stdin and a working directory, state kept
# in /workspace, sandbox_download, sandbox_list, and sandbox_destroy from a
# second server that adopted the sandbox by its id. See README.md beside this
# file.
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
. "$here/../lib/mcp.sh"

mcp_start

say "1. create a sandbox (python image, no network)"
mcp_call sandbox_create '{"image":"python","egress":"none","ttl_seconds":600}'
check $? "sandbox_create succeeded"
id=$(field sandbox_id)
out=$(field output_dir)

say "2. upload a program, run it with stdin, in /workspace"
prog=$(printf '%s\n' 'import sys, json' \
	'rows = [l.split(",") for l in sys.stdin.read().split()]' \
	'total = sum(int(n) for _, n in rows)' \
	'json.dump({"rows": len(rows), "total": total}, open("/workspace/summary.json", "w"))' \
	'print(total)' | base64 -w0)
mcp_call sandbox_upload "$(jq -cn --arg id "$id" --arg c "$prog" '{sandbox_id: $id, dst: "/workspace/sum.py", content: $c}')"
check $? "sandbox_upload wrote /workspace/sum.py ($(field bytes) bytes)"
mcp_call sandbox_exec "$(jq -cn --arg id "$id" '{sandbox_id: $id, workdir: "/workspace",
	command: "python3 sum.py", stdin: "apples,3\npears,4\nplums,5\n"}')"
[ "$(field exit_code)" = 0 ] && [ "$(field stdout)" = 12 ]
check $? "the program read stdin and printed 12"

say "3. the next command sees what the last one left"
mcp_call sandbox_exec "$(jq -cn --arg id "$id" '{sandbox_id: $id, command: "cat /workspace/summary.json; echo; pwd"}')"
grep -q '"total": 12' <<<"$(field stdout)" && grep -q '^/out$' <<<"$(field stdout)"
check $? "/workspace kept summary.json; the default working directory is /out"

say "4. download a file from the sandbox to the host"
mcp_call sandbox_download "$(jq -cn --arg id "$id" '{sandbox_id: $id, src: "/workspace/summary.json", return_content: true}')"
host=$(field host_path)
[ "${host#"$out"/downloads/}" != "$host" ] && grep -q '"rows": 3' "$host"
check $? "it landed in the output directory's downloads/: $host"

say "5. the server restarts; a new one adopts the sandbox by its id"
mcp_stop
mcp_start
mcp_call sandbox_list '{}'
jq -e --arg id "$id" '.structuredContent.sandboxes | any(.sandbox_id == $id)' <<<"$MCP_RESULT" >/dev/null
check $? "sandbox_list of the new server shows $id"
mcp_call sandbox_exec "$(jq -cn --arg id "$id" '{sandbox_id: $id, command: "python3 /workspace/sum.py <<< x,30"}')"
[ "$(field stdout)" = 30 ]
check $? "and runs commands in it, files and all"
mcp_call sandbox_destroy "$(jq -cn --arg id "$id" '{sandbox_id: $id}')"
check $? "sandbox_destroy"
mcp_call sandbox_exec "$(jq -cn --arg id "$id" '{sandbox_id: $id, command: "true"}')"
[ $? != 0 ]; check $? "a destroyed sandbox is gone: the call is a tool error"
[ -f "$host" ]; check $? "its output directory stays on the host"

finish
