#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# An idle server, and one that has run sandboxes on a local engine, has not
# mapped libcurl: every local call goes over the engine's unix socket in
# plain HTTP (backends/http1.c), and libcurl's ~30 libraries are opened only
# when a TLS engine, OpenSandbox or an agent's vendor proxy needs them
# (src/basic/curl-api.h; bench/RESULTS.md has what that saves). Needs the
# engine, jq and the base image.
set -uo pipefail
top=${top_srcdir:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)}
export DEMESNE=${DEMESNE:?DEMESNE must name the built demesne (make check sets it)}
command -v jq >/dev/null || { echo "1..0 # SKIP needs jq"; exit 77; }

tmp=$(mktemp -d /tmp/dm-lazy-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out MCP_QUIET=1 MCP_TIMEOUT=300
unset DEMESNE_ALLOWED_PATHS
. "$top/examples/lib/mcp.sh" >/dev/null

echo "1..5"
n=0 failed=0
t() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=1; fi; }
maps_curl() { grep -c 'libcurl' "/proc/$MCP_PID/maps" 2>/dev/null; }

mcp_start >/dev/null
pid=$MCP_PID
t $? "the server answers initialize (pid $pid)"
[ "$(maps_curl)" = 0 ]; t $? "idle: libcurl is not mapped"
mcp_call sandbox_script '{"image":"base","egress":"none","command":"echo lazy"}' >/dev/null
[ "$(field exit_code)" = 0 ] && [ "$(field stdout)" = lazy ]; t $? "a sandbox_script runs"
mcp_call sandbox_create '{"image":"base","egress":"none"}' >/dev/null && id=$(field sandbox_id) &&
	mcp_call sandbox_exec "$(jq -cn --arg id "$id" '{sandbox_id: $id, command: "echo again"}')" >/dev/null &&
	[ "$(field stdout)" = again ] && mcp_call sandbox_destroy "$(jq -cn --arg id "$id" '{sandbox_id: $id}')" >/dev/null
t $? "a sandbox made, used and destroyed"
[ "$(maps_curl)" = 0 ]; t $? "after them: libcurl is still not mapped ($(grep -c . "/proc/$pid/maps") mappings)"
mcp_stop
exit $failed
