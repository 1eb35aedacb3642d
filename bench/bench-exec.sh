#!/usr/bin/env bash
# Latency of `sandbox_exec` of `true` into one running sandbox through one
# `demesne serve` session, against `podman exec` of `true` into a running
# container of the same image; alternating, N rounds (default 30). Two
# clients by default, each with its own session: the bare python one
# (bench/mcp-bare.py: the server's time and the pipes') and the SDK's node
# one (what an MCP client built on it waits for). See bench-script.sh for
# the environment it takes.
#
#   DEMESNE=/abs/path/to/demesne bench/bench-exec.sh
set -euo pipefail
export TOOL=exec N=${N:-30} CLIENTS=${CLIENTS:-python node}
exec "$(dirname "${BASH_SOURCE[0]}")/bench-script.sh" "$@"
