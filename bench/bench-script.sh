#!/usr/bin/env bash
# Latency of `sandbox_script` (echo hi, egress none, image python) through one
# `demesne serve` MCP session, against a plain
#   podman run --rm --network none localhost/demesne/python:latest sh -c 'echo hi'
# With TOOL=exec (bench/bench-exec.sh): `sandbox_exec` of `true` into one
# sandbox, against `podman exec` of `true` into a running container of the
# same image (started here with sleep infinity, removed at exit).
# The two are alternated one of each (the one that goes first swaps every
# round), after WARMUP untimed rounds. Prints both medians in ms and the ratio
# demesne/podman.
#
#   DEMESNE=/abs/path/to/demesne bench/bench-script.sh
#
# Environment: DEMESNE (required, absolute path), N (timed rounds, default 20),
# WARMUP (untimed rounds, default 1), ERA (modern|legacy, default modern),
# IMAGE (default localhost/demesne/python:latest), PODMAN (default podman),
# DEMESNE_OUTPUT_ROOT (default: a fresh temp dir, removed at exit).
# Needs node and tests/e2e/node_modules (npm ci --prefix tests/e2e).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOOL=${TOOL:-script}
N=${N:-20}
WARMUP=${WARMUP:-1}
ERA=${ERA:-modern}
IMAGE=${IMAGE:-localhost/demesne/python:latest}
PODMAN=${PODMAN:-podman}

die() { echo "bench-script: $*" >&2; exit 1; }
[[ -n ${DEMESNE:-} && $DEMESNE == /* && -x $DEMESNE ]] || die "DEMESNE must be the absolute path of an executable demesne binary"
[[ -d $here/../tests/e2e/node_modules/@modelcontextprotocol/client ]] || die "tests/e2e/node_modules is missing: run npm ci --prefix tests/e2e"
command -v "$PODMAN" >/dev/null || die "$PODMAN not found"
"$PODMAN" image exists "$IMAGE" || die "image $IMAGE not found (build the demesne images first)"
[[ $N =~ ^[1-9][0-9]*$ && $WARMUP =~ ^[0-9]+$ ]] || die "N must be >= 1 and WARMUP >= 0"
[[ $TOOL == script || $TOOL == exec ]] || die "TOOL must be script or exec"

own_root=
if [[ -z ${DEMESNE_OUTPUT_ROOT:-} ]]; then
  own_root=$(mktemp -d /tmp/demesne-bench-XXXXXX)
  export DEMESNE_OUTPUT_ROOT=$own_root
fi
work=$(mktemp -d /tmp/demesne-bench-work-XXXXXX)

timer_pid=
baseline_ctr=
cleanup() {
  [[ -n $baseline_ctr ]] && "$PODMAN" rm -f -t 0 "$baseline_ctr" >/dev/null 2>&1

  if [[ -n $timer_pid ]] && kill -0 "$timer_pid" 2>/dev/null; then
    echo quit >&"${TIMER[1]}" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$timer_pid" 2>/dev/null || break; sleep 0.5; done
    kill "$timer_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
  [[ -n $own_root ]] && rm -rf "$own_root"
  return 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# One MCP session for the whole run; the node side answers "call" with "ms <float>".
coproc TIMER { exec node "$here/mcp-timer.mjs" --stdin --era "$ERA" --tool "$TOOL"; }
timer_pid=$TIMER_PID

read_timer() { # -> sets $reply; fails on EOF, error or timeout
  local line
  if ! IFS= read -r -t 600 line <&"${TIMER[0]}"; then die "mcp-timer.mjs gave no answer"; fi
  case $line in
    error\ *) die "mcp-timer.mjs: ${line#error }" ;;
  esac
  reply=$line
}

read_timer
case $reply in ready\ *) echo "session: ${reply#ready }" ;; *) die "unexpected from mcp-timer.mjs: $reply" ;; esac

demesne_once() { # -> prints ms
  echo call >&"${TIMER[1]}"
  read_timer
  [[ $reply == ms\ * ]] || die "unexpected from mcp-timer.mjs: $reply"
  echo "${reply#ms }"
}

if [[ $TOOL == exec ]]; then
  baseline_ctr=$("$PODMAN" run -d --network none "$IMAGE" sleep infinity) || die "cannot start the baseline container"
fi

podman_once() { # -> prints ms
  local t0 t1 out
  t0=$(date +%s%N)
  if [[ $TOOL == exec ]]; then
    "$PODMAN" exec "$baseline_ctr" true || die "podman exec failed"
    out=hi
  else
    out=$("$PODMAN" run --rm --network none "$IMAGE" sh -c 'echo hi')
  fi
  t1=$(date +%s%N)
  [[ $out == hi ]] || die "podman run printed ${out@Q}, expected hi"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) / 1e6 }'
}

for ((i = 0; i < WARMUP; i++)); do
  demesne_once >/dev/null
  podman_once >/dev/null
done

: >"$work/demesne" ; : >"$work/podman"
for ((i = 1; i <= N; i++)); do
  if ((i % 2)); then
    d=$(demesne_once); p=$(podman_once)
  else
    p=$(podman_once); d=$(demesne_once)
  fi
  echo "$d" >>"$work/demesne"; echo "$p" >>"$work/podman"
  printf 'round %2d  demesne %9.1f ms  podman %9.1f ms\n' "$i" "$d" "$p"
done

median() { sort -g "$1" | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%.1f\n", v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
md=$(median "$work/demesne")
mp=$(median "$work/podman")
ratio=$(awk -v a="$md" -v b="$mp" 'BEGIN { printf "%.2f\n", a / b }')
if [[ $TOOL == exec ]]; then
  echo "demesne sandbox_exec median:   $md ms (N=$N, era $ERA)"
  echo "podman exec median:            $mp ms (N=$N)"
else
  echo "demesne sandbox_script median: $md ms (N=$N, era $ERA)"
  echo "podman run --rm median:        $mp ms (N=$N)"
fi
echo "ratio demesne/podman:          $ratio"
