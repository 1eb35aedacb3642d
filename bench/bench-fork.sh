#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# `sandbox_fork {count: 4}` of a sandbox whose root file system gained SIZE_MB
# (default 200) through one `demesne serve` session (the bash client,
# examples/lib/mcp.sh), against the same work with the CLI: `podman commit`
# of a container of the same image that gained as much, then four
# `podman run -d` of the result. Alternating, the order swapping every
# round, N timed rounds (default 5) after one untimed; between rounds (not
# timed) the forks, the snapshot, the containers and the image go. Prints
# each round, both medians in ms and the ratio demesne/CLI.
#
#   DEMESNE=/abs/path/to/demesne bench/bench-fork.sh
#
# Environment: DEMESNE (required), N, SIZE_MB, IMAGE (default
# localhost/demesne/base:latest, the demesne image "base"), PODMAN (default
# podman), DEMESNE_OUTPUT_ROOT (default: a fresh temp dir, removed at exit).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
N=${N:-5}
SIZE_MB=${SIZE_MB:-200}
IMAGE=${IMAGE:-localhost/demesne/base:latest}
PODMAN=${PODMAN:-podman}
[[ -n ${DEMESNE:-} && $DEMESNE == /* && -x $DEMESNE ]] || { echo "bench-fork: DEMESNE must be an absolute path" >&2; exit 1; }
tmp=$(mktemp -d /tmp/bench-fork-XXXXXX)
export DEMESNE_OUTPUT_ROOT=${DEMESNE_OUTPUT_ROOT:-$tmp/out} DEMESNE_POOL=0 MCP_QUIET=1 MCP_TIMEOUT=600
base=bench-fork-$$
cleanup() {
  # One name a call: Podman 4.3.1's `rm -f A B` with B unknown exits 0 and
  # leaves A (measured).
  for c in "$base-src" $(seq -f "$base-w%g" 0 3); do $PODMAN rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  $PODMAN rmi -f "localhost/$base:snap" >/dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT
. "$here/../examples/lib/mcp.sh" >/dev/null
ms() { echo $((($(date +%s%N) - $1) / 1000)) | awk '{ printf "%.1f", $1 / 1000 }'; }
fill="head -c ${SIZE_MB}M /dev/urandom > /opt/big && sync"

mcp_start >/dev/null
mcp_call sandbox_create '{"image":"base","egress":"none","ttl_seconds":3600}' >/dev/null
src=$(field sandbox_id)
mcp_call sandbox_exec "$(jq -cn --arg id "$src" --arg c "$fill" '{sandbox_id: $id, command: $c}')" >/dev/null
$PODMAN run -d --name "$base-src" --network none "$IMAGE" sleep infinity >/dev/null
$PODMAN exec "$base-src" sh -c "$fill"

demesne_round() {
  local t0 ids snap
  t0=$(date +%s%N)
  mcp_call sandbox_fork "$(jq -cn --arg id "$src" '{sandbox_id: $id, count: 4}')" >/dev/null ||
    { echo "bench-fork: sandbox_fork failed: $MCP_RESULT" >&2; exit 1; }
  took=$(ms "$t0")
  snap=$(field snapshot_id)
  for id in $(jq -r '.structuredContent.sandbox_ids[]' <<<"$MCP_RESULT"); do
    mcp_call sandbox_destroy "$(jq -cn --arg id "$id" '{sandbox_id: $id}')" >/dev/null
  done
  mcp_call sandbox_destroy "$(jq -cn --arg s "$snap" '{snapshot_id: $s}')" >/dev/null
}
cli_round() {
  local t0
  t0=$(date +%s%N)
  $PODMAN commit -q "$base-src" "localhost/$base:snap" >/dev/null
  for i in 0 1 2 3; do
    $PODMAN run -d --name "$base-w$i" --network none "localhost/$base:snap" sleep infinity >/dev/null
  done
  took=$(ms "$t0")
  $PODMAN rm -f -t 0 $(seq -f "$base-w%g" 0 3) >/dev/null
  $PODMAN rmi -f "localhost/$base:snap" >/dev/null
}

d=() c=()
for r in $(seq 0 "$N"); do
  if ((r % 2)); then demesne_round; dt=$took; cli_round; ct=$took; else cli_round; ct=$took; demesne_round; dt=$took; fi
  ((r == 0)) && continue # untimed
  d+=("$dt") c+=("$ct")
  printf 'round %2d  sandbox_fork(4) %9s ms  podman commit + 4 run -d %9s ms\n' "$r" "$dt" "$ct"
done
median() { printf '%s\n' "$@" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
md=$(median "${d[@]}") mc=$(median "${c[@]}")
echo "sandbox_fork count=4 median: $md ms (N=$N, ${SIZE_MB} MB gained)"
echo "podman commit + 4 podman run -d median: $mc ms"
awk -v a="$md" -v b="$mc" 'BEGIN { printf "ratio demesne/cli: %.2f\n", a / b }'
mcp_call sandbox_destroy "$(jq -cn --arg id "$src" '{sandbox_id: $id}')" >/dev/null
mcp_stop >/dev/null
