#!/usr/bin/env bash
# Latency of `sandbox_exec` of `true` into one running sandbox through one
# `demesne serve` session, against `podman exec` of `true` into a running
# container of the same image; alternating, N rounds (default 30). See
# bench-script.sh for the environment it takes.
#
#   DEMESNE=/abs/path/to/demesne bench/bench-exec.sh
set -euo pipefail
export TOOL=exec N=${N:-30}
exec "$(dirname "${BASH_SOURCE[0]}")/bench-script.sh" "$@"
