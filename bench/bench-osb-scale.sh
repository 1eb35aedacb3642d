#!/bin/sh
# SPDX-License-Identifier: MIT
# demesne's own overhead per call with 25 to 200 concurrent sandboxes on
# OpenSandbox (issue 35): one `demesne serve --http` against the protocol
# fixture, C clients at once, each a session doing sandbox_create +
# sandbox_exec + sandbox_destroy, then sandbox_script; demesne's CPU per call
# (/proc/PID/stat) and its time per call with the fixture's own time taken
# out, as the count grows (bench/osb-scale.mjs says how and why; bench/
# README.md). Prints a table per mode and writes bench/osb-scale-MODE.svg.
#   DEMESNE=$PWD/build/src/demesne bench/bench-osb-scale.sh
# Environment: DEMESNE (required, absolute), COUNTS (25,50,100,200: the
# fixture's bench-only process sandboxes), REAL_COUNTS (25,50: a Podman
# container per sandbox; "" to skip), AGENTS (instead: that many
# sandbox_research runs at once, Claude Code on OpenSandbox through the
# remote listener and the vendor fixture: issue 35's 32 concurrent agent runs).
set -eu
: "${DEMESNE:?set DEMESNE to the absolute path of the demesne binary}"
here=$(cd "$(dirname "$0")" && pwd)
[ -d "$here/../tests/e2e/node_modules" ] || { echo "bench-osb-scale: run (cd tests/e2e && npm ci) first" >&2; exit 2; }
if [ -n "${AGENTS:-}" ]; then
	exec node "$here/osb-scale.mjs" --agents "$AGENTS"
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
node "$here/osb-scale.mjs" --mode process --counts "${COUNTS:-25,50,100,200}" --svg "$here/osb-scale-process.svg"
if [ -n "${REAL_COUNTS-25,50}" ]; then
	node "$here/osb-scale.mjs" --mode real --counts "${REAL_COUNTS-25,50}" --svg "$here/osb-scale-real.svg"
fi
