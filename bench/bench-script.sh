#!/usr/bin/env bash
# Latency of `sandbox_script` (echo hi, egress none, image python) through one
# `demesne serve` MCP session, against a plain
#   podman run --rm --network none localhost/demesne/python:latest sh -c 'echo hi'
# With TOOL=exec (bench/bench-exec.sh): `sandbox_exec` of `true` into one
# sandbox, against `podman exec` of `true` into a running container of the
# same image (started here with sleep infinity, removed at exit).
# Each client in CLIENTS drives its own `demesne serve` session: `node` is
# bench/mcp-timer.mjs (the SDK's client, @modelcontextprotocol/client), `python`
# bench/mcp-bare.py (one JSON-RPC line out, the answer's line in: the
# cheapest honest client, so its figure is the server's and the pipes').
# Every round times each client once and podman once, the order rotating
# every round, after WARMUP untimed rounds. Prints each median in ms and the
# ratio demesne/podman per client.
#
#   DEMESNE=/abs/path/to/demesne bench/bench-script.sh
#
# Environment: DEMESNE (required, absolute path), N (timed rounds, default 20),
# WARMUP (untimed rounds, default 1), ERA (modern|legacy, default modern; the
# python client speaks modern only), CLIENTS (default node; e.g. "python node";
# KIND@/abs/path runs that client's server from another binary, e.g.
# "python python@/tmp/old/src/demesne" for two builds side by side),
# IMAGE (default localhost/demesne/python:latest), PODMAN (default podman),
# DEMESNE_OUTPUT_ROOT (default: a fresh temp dir, removed at exit).
# The node client needs tests/e2e/node_modules (npm ci --prefix tests/e2e).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TOOL=${TOOL:-script}
N=${N:-20}
WARMUP=${WARMUP:-1}
ERA=${ERA:-modern}
CLIENTS=${CLIENTS:-node}
IMAGE=${IMAGE:-localhost/demesne/python:latest}
PODMAN=${PODMAN:-podman}

die() { echo "bench-script: $*" >&2; exit 1; }
[[ -n ${DEMESNE:-} && $DEMESNE == /* && -x $DEMESNE ]] || die "DEMESNE must be the absolute path of an executable demesne binary"
read -r -a specs <<<"$CLIENTS"
((${#specs[@]})) || die "CLIENTS is empty"
# Each client: its kind, the binary its server runs (KIND@/abs/path, default
# DEMESNE: two builds side by side in one run) and its label.
declare -A kind_of bin_of label_of
clients=()
for spec in "${specs[@]}"; do
  c=c${#clients[@]}
  clients+=("$c")
  kind_of[$c]=${spec%%@*}
  bin_of[$c]=$DEMESNE
  label_of[$c]=$spec
  [[ $spec == *@* ]] && bin_of[$c]=${spec#*@}
  [[ ${bin_of[$c]} == /* && -x ${bin_of[$c]} ]] || die "client '$spec': ${bin_of[$c]} is not an absolute path of an executable"
  case ${kind_of[$c]} in
    node) [[ -d $here/../tests/e2e/node_modules/@modelcontextprotocol/client ]] ||
            die "tests/e2e/node_modules is missing: run npm ci --prefix tests/e2e" ;;
    python) command -v python3 >/dev/null || die "python3 not found"
            [[ $ERA == modern ]] || die "the python client speaks the modern era only" ;;
    *) die "unknown client '$spec' in CLIENTS (node, python, either with @/abs/path/to/demesne)" ;;
  esac
done
command -v "$PODMAN" >/dev/null || die "$PODMAN not found"
"$PODMAN" image exists "$IMAGE" || die "image $IMAGE not found (build the demesne images first)"
[[ $N =~ ^[1-9][0-9]*$ && $WARMUP =~ ^[0-9]+$ ]] || die "N must be >= 1 and WARMUP >= 0"
[[ $TOOL == script || $TOOL == exec ]] || die "TOOL must be script or exec"

own_root=
if [[ -z ${DEMESNE_OUTPUT_ROOT:-} ]]; then
  own_root=$(mktemp -d /tmp/demesne-bench-XXXXXX)
  export DEMESNE_OUTPUT_ROOT=$own_root
fi
root=$DEMESNE_OUTPUT_ROOT
work=$(mktemp -d /tmp/demesne-bench-work-XXXXXX)

# Per client: its process, and the fds of its input and output (fifos).
declare -A pid_of in_of out_of
baseline_ctr=
cleanup() {
  [[ -n $baseline_ctr ]] && "$PODMAN" rm -f -t 0 "$baseline_ctr" >/dev/null 2>&1
  for c in "${!pid_of[@]}"; do
    { echo quit >&"${in_of[$c]}"; } 2>/dev/null || true
  done
  for c in "${!pid_of[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "${pid_of[$c]}" 2>/dev/null || break; sleep 0.5; done
    kill "${pid_of[$c]}" 2>/dev/null || true
  done
  rm -rf "$work"
  [[ -n $own_root ]] && rm -rf "$own_root"
  return 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

# One MCP session per client for the whole run, each with an output root of
# its own; the client answers "call" with "ms <float>".
for c in "${clients[@]}"; do
  mkfifo "$work/$c.in" "$work/$c.out"
  mkdir -p "$root/$c"
  if [[ ${kind_of[$c]} == node ]]; then
    DEMESNE=${bin_of[$c]} DEMESNE_OUTPUT_ROOT=$root/$c node "$here/mcp-timer.mjs" --stdin --era "$ERA" --tool "$TOOL" \
      <"$work/$c.in" >"$work/$c.out" &
  else
    DEMESNE=${bin_of[$c]} DEMESNE_OUTPUT_ROOT=$root/$c python3 "$here/mcp-bare.py" --stdin --tool "$TOOL" \
      <"$work/$c.in" >"$work/$c.out" &
  fi
  pid_of[$c]=$!
  exec {fd}>"$work/$c.in"; in_of[$c]=$fd
  exec {fd}<"$work/$c.out"; out_of[$c]=$fd
done

read_client() { # client -> sets $reply; fails on EOF, error or timeout
  local line
  if ! IFS= read -r -t 600 line <&"${out_of[$1]}"; then die "client ${label_of[$1]} gave no answer"; fi
  case $line in
    error\ *) die "client ${label_of[$1]}: ${line#error }" ;;
  esac
  reply=$line
}

for c in "${clients[@]}"; do
  read_client "$c"
  case $reply in ready\ *) echo "session ${c#c} (${label_of[$c]}): ${reply#ready }" ;; *) die "unexpected from client ${label_of[$c]}: $reply" ;; esac
done

demesne_once() { # client -> prints ms
  echo call >&"${in_of[$1]}"
  read_client "$1"
  [[ $reply == ms\ * ]] || die "unexpected from client ${label_of[$1]}: $reply"
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
  for c in "${clients[@]}"; do demesne_once "$c" >/dev/null; done
  podman_once >/dev/null
done

# The round's order: the clients and podman, rotated by one every round.
order=("${clients[@]}" podman)
: >"$work/podman"
for c in "${clients[@]}"; do : >"$work/$c"; done
for ((i = 1; i <= N; i++)); do
  line=$(printf 'round %2d' "$i")
  for ((k = 0; k < ${#order[@]}; k++)); do
    who=${order[(k + i) % ${#order[@]}]}
    if [[ $who == podman ]]; then v=$(podman_once); else v=$(demesne_once "$who"); fi
    echo "$v" >>"$work/$who"
    eval "ms_$who=\$v"
  done
  for c in "${clients[@]}"; do line+=$(printf '  demesne(%s) %8.1f ms' "${c#c}:${kind_of[$c]}" "$(eval echo "\$ms_$c")"); done
  echo "$line$(printf '  podman %8.1f ms' "$ms_podman")"
done

median() { sort -g "$1" | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%.1f\n", v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
mp=$(median "$work/podman")
what=$([[ $TOOL == exec ]] && echo sandbox_exec || echo sandbox_script)
for c in "${clients[@]}"; do
  md=$(median "$work/$c")
  printf '%-38s %s ms (N=%s, era %s)\n' "demesne $what median (${label_of[$c]} client):" "$md" "$N" "$ERA"
done
if [[ $TOOL == exec ]]; then
  printf '%-38s %s ms (N=%s)\n' "podman exec median:" "$mp" "$N"
else
  printf '%-38s %s ms (N=%s)\n' "podman run --rm median:" "$mp" "$N"
fi
for c in "${clients[@]}"; do
  md=$(median "$work/$c")
  printf '%-38s %s\n' "ratio demesne/podman (${label_of[$c]} client):" "$(awk -v a="$md" -v b="$mp" 'BEGIN { printf "%.3f\n", a / b }')"
done
