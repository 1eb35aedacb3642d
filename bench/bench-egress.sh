#!/usr/bin/env bash
# What an egress policy adds to a sandbox's start: `sandbox_script`
# (echo hi, python image) with egress none against the same with egress
# package-managers (a veth pair, routes, the tc filter and a proxy
# listener), through two `demesne serve` sessions, alternating one call of
# each for N rounds (default 20) after WARMUP (1). Prints both medians and
# the difference, and the median of the server's own timing of the set-up
# ("egress ... set up in N ms" in its debug log). As root the set-up is a
# veth pair, routes, the tc filter and a proxy listener; as a normal user
# (rootless Podman) it is a forked helper that joins the container's
# namespaces and makes the proxy's listening socket there (SCM_RIGHTS).
#
#   DEMESNE=/abs/path/to/demesne bench/bench-egress.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
N=${N:-20}
WARMUP=${WARMUP:-1}
die() { echo "bench-egress: $*" >&2; exit 1; }
[[ -n ${DEMESNE:-} && $DEMESNE == /* && -x $DEMESNE ]] || die "DEMESNE must be the absolute path of an executable demesne binary"
[[ $N =~ ^[1-9][0-9]*$ && $WARMUP =~ ^[0-9]+$ ]] || die "N must be >= 1 and WARMUP >= 0"
work=$(mktemp -d /tmp/demesne-bench-egress-XXXXXX)
export DEMESNE_OUTPUT_ROOT=$work/out

pids=()
cleanup() {
	echo quit >&"${A[1]}" 2>/dev/null || true
	echo quit >&"${B[1]}" 2>/dev/null || true
	sleep 1
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

coproc A { exec node "$here/mcp-timer.mjs" --stdin --egress none; }
pids+=("$A_PID")
coproc B { BENCH_SERVE_ARGS="--log-level debug --log-file $work/pm.log" exec node "$here/mcp-timer.mjs" --stdin --egress package-managers; }
pids+=("$B_PID")
read_from() { # fd -> reply
	local line
	IFS= read -r -t 600 line <&"$1" || die "mcp-timer.mjs gave no answer"
	[[ $line != error\ * ]] || die "mcp-timer.mjs: ${line#error }"
	reply=$line
}
read_from "${A[0]}"; read_from "${B[0]}"
once() { # fd_in fd_out -> ms
	echo call >&"$1"
	read_from "$2"
	echo "${reply#ms }"
}
for ((i = 0; i < WARMUP; i++)); do once "${A[1]}" "${A[0]}" >/dev/null; once "${B[1]}" "${B[0]}" >/dev/null; done
: >"$work/none"; : >"$work/pm"
for ((i = 1; i <= N; i++)); do
	if ((i % 2)); then a=$(once "${A[1]}" "${A[0]}"); b=$(once "${B[1]}" "${B[0]}")
	else b=$(once "${B[1]}" "${B[0]}"); a=$(once "${A[1]}" "${A[0]}"); fi
	echo "$a" >>"$work/none"; echo "$b" >>"$work/pm"
	printf 'round %2d  none %8.1f ms  package-managers %8.1f ms\n' "$i" "$a" "$b"
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%.1f\n", v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ma=$(median "$work/none"); mb=$(median "$work/pm")
echo "egress none median:             $ma ms (N=$N)"
echo "egress package-managers median: $mb ms (N=$N)"
echo "difference:                     $(awk -v a="$ma" -v b="$mb" 'BEGIN { printf "%.1f", b - a }') ms"
# The server's own timing of the set-up (the first call, a warm-up, included).
grep -o 'set up in [0-9]* ms' "$work/pm.log" | awk '{ print $4 }' >"$work/setup" || true
[[ -s $work/setup ]] && echo "set-up median (server's log):  $(median "$work/setup") ms (n=$(wc -l <"$work/setup"), $([[ $(id -u) == 0 ]] && echo "veth" || echo "listeners in the sandbox's namespace"))"
