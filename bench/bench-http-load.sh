#!/bin/sh
# SPDX-License-Identifier: MIT
# tools/list p50/p95 over Streamable HTTP, one at a time and with K calls in
# flight from one client (the MCP SDK's, then a lean keep-alive one), the
# client on this machine, with both sides' CPU per call (bench/README.md).
#   DEMESNE=$PWD/src/demesne bench/bench-http-load.sh
# Environment: DEMESNE (required), K (50), N (600), S (50), CLIENT (sdk, lean,
# both or wrk: both), WRK_SECONDS (wrk's time per phase: 10), SERVE_ARGS
# (extra `demesne serve` flags, e.g. "--max-connections-per-ip 8").
set -eu
: "${DEMESNE:?set DEMESNE to the absolute path of the demesne binary}"
here=$(cd "$(dirname "$0")" && pwd)
[ -d "$here/../tests/e2e/node_modules" ] || { echo "bench-http-load: run (cd tests/e2e && npm ci) first" >&2; exit 2; }
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
exec node "$here/http-load.mjs" --in-flight "${K:-50}" --calls "${N:-600}" --serial "${S:-50}" --client "${CLIENT:-both}" --seconds "${WRK_SECONDS:-10}"
