#!/usr/bin/env bash
# Eight `sandbox_script` calls at once (echo hi, egress none, image python)
# through one `demesne serve` session, ROUNDS times, against one plain
#   podman run --rm --network none localhost/demesne/python:latest sh -c 'echo hi'
# timed alone, PODMAN_N times, before and after. Prints the p95 and the median
# of the demesne calls, the median of podman run, and the ratio p95/podman.
#
#   DEMESNE=/abs/path/to/demesne bench/bench-parallel.sh
#
# Environment: DEMESNE (required, absolute path), PARALLEL (calls at once,
# default 8), ROUNDS (default 5), PAUSE_MS between rounds (default 5000: a warm
# pool refills meanwhile), PODMAN_N (default 10), IMAGE, PODMAN, and
# DEMESNE_POOL as the server should have it (default: the server's, 2).
# Needs node and tests/e2e/node_modules ((cd tests/e2e && npm ci)).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PARALLEL=${PARALLEL:-8}
ROUNDS=${ROUNDS:-5}
PAUSE_MS=${PAUSE_MS:-5000}
PODMAN_N=${PODMAN_N:-10}
IMAGE=${IMAGE:-localhost/demesne/python:latest}
PODMAN=${PODMAN:-podman}

die() { echo "bench-parallel: $*" >&2; exit 1; }
[[ -n ${DEMESNE:-} && $DEMESNE == /* && -x $DEMESNE ]] || die "DEMESNE must be the absolute path of an executable demesne binary"
command -v "$PODMAN" >/dev/null || die "$PODMAN not found"
"$PODMAN" image exists "$IMAGE" || die "image $IMAGE not found (build the demesne images first)"

podman_ms() {
  local t0 t1
  t0=$(date +%s%N)
  "$PODMAN" run --rm --network none "$IMAGE" sh -c 'echo hi' >/dev/null
  t1=$(date +%s%N)
  echo $(((t1 - t0) / 1000))
}
median_us() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

base=$(for _ in $(seq "$PODMAN_N"); do podman_ms; done)
out=$(node "$here/mcp-timer.mjs" --calls "$ROUNDS" --parallel "$PARALLEL" --pause-ms "$PAUSE_MS")
grep -q '^p95_ms ' <<<"$out" || die "mcp-timer.mjs: $(grep '^error' <<<"$out" || echo "$out" | tail -1)"
base+=$'\n'$(for _ in $(seq "$PODMAN_N"); do podman_ms; done)
p95=$(sed -n 's/^p95_ms //p' <<<"$out")
med=$(sed -n 's/^median_ms //p' <<<"$out")
pod=$(median_us <<<"$base")
printf 'demesne, %d at once: median %.1f ms, p95 %.1f ms (%d calls)\n' "$PARALLEL" "$med" "$p95" $((PARALLEL * ROUNDS))
printf 'podman run --rm alone: median %.1f ms (%d runs)\n' "$(awk -v u="$pod" 'BEGIN { print u / 1000 }')" $((2 * PODMAN_N))
awk -v p="$p95" -v u="$pod" 'BEGIN { printf "ratio p95/podman: %.2f\n", p / (u / 1000) }'
