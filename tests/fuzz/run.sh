#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Fuzzes the parsers of untrusted input with clang's libFuzzer, ASan and
# UBSan, for a bounded time per target:
#   tests/fuzz/run.sh [SECONDS] [TARGET...]
# SECONDS per target (default 30; CI calls it with 30). TARGETs are the
# names of tests/fuzz/fuzz-<name>.c (shim-frame, jsonrpc, args, http-head,
# http1, engine, policy, http-guard, http-front, mcp-config); default: all
# of them, $FUZZ_JOBS at a time (default: one per core).
# Each starts from its seed corpus in tests/fuzz/corpus/<name> (left as it
# is: new inputs go to a temporary directory, or to $FUZZ_CORPUS_OUT/<name>
# when set). A crash, leak, timeout or broken property leaves its input as
# <name>-crash-* (or -leak-, -timeout-) in $FUZZ_ARTIFACTS (default: the
# current directory); the script goes on with the other targets and fails
# at the end. Exits 77 when clang cannot build libFuzzer targets here.
#
# The libraries are built with clang and the sanitizers in a configured
# tree of their own: $FUZZ_BUILD when set (kept, and reused by later runs),
# else a temporary one. The source tree must not be configured in place.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
secs=${1:-30}
shift || true
cc=${CLANG:-clang}
artifacts=${FUZZ_ARTIFACTS:-$PWD}
work=$(mktemp -d /tmp/demesne-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT
build=${FUZZ_BUILD:-$work/build}

say() { printf 'fuzz: %s\n' "$*" >&2; }

case $secs in
'' | *[!0-9]*) say "SECONDS must be a number, not '$secs'"; exit 2 ;;
esac
if [ $# -gt 0 ]; then
	targets=("$@")
else
	targets=()
	for f in "$here"/tests/fuzz/fuzz-*.c; do
		t=${f##*/fuzz-}
		targets+=("${t%.c}")
	done
fi
for t in "${targets[@]}"; do
	[ -f "$here/tests/fuzz/fuzz-$t.c" ] || { say "no target '$t' (tests/fuzz/fuzz-$t.c)"; exit 2; }
done

command -v "$cc" >/dev/null || { say "no '$cc' on PATH: skipped"; exit 77; }
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$work/probe.c"
"$cc" -fsanitize=fuzzer "$work/probe.c" -o "$work/probe" 2>/dev/null ||
	{ say "'$cc' cannot build libFuzzer targets (-fsanitize=fuzzer): skipped"; exit 77; }

# The libraries, instrumented for coverage (fuzzer-no-link) and checked by
# the sanitizers. The sanitizers go to make, not configure: configure links
# the static shim's probe, which ASan cannot.
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
[ -x "$here/configure" ] || (cd "$here" && autoreconf -fi >/dev/null)
mkdir -p "$build"
if [ ! -f "$build/Makefile" ]; then
	[ ! -f "$here/config.status" ] || {
		say "the source tree is configured in place: run 'make distclean' in $here first"
		exit 2
	}
	say "configuring a clang build in $build"
	(cd "$build" && CC="$cc" "$here/configure" -q --disable-integration)
fi
say "building the libraries with $cc, libFuzzer coverage, ASan and UBSan"
# The project's libraries, in link order, as the Makefile lists them.
# shellcheck disable=SC2016
libs=$(printf 'fuzz-print-dm-libs:\n\t@echo $(DM_LIBS)\n' | make -s -C "$build" -f Makefile -f - fuzz-print-dm-libs)
[ -n "$libs" ] || { say "the Makefile in $build names no DM_LIBS"; exit 2; }
# shellcheck disable=SC2086
nice make -s -C "$build" -j2 CFLAGS="-g -O1 -fsanitize=fuzzer-no-link $san" $libs >/dev/null
# The external libraries, as configure found them.
# shellcheck disable=SC2016
ext_libs=$(printf 'fuzz-print-libs:\n\t@echo $(DM_EXT_LIBS) $(LIBS)\n' | make -s -C "$build" -f Makefile -f - fuzz-print-libs)
lib_paths=()
for l in $libs; do lib_paths+=("$build/$l"); done

mkdir -p "$artifacts"
# Each target is built, then the targets run $FUZZ_JOBS at a time (default:
# one per core; a libFuzzer run is one busy thread), each into a log of its
# own that is printed when it ends, so the outputs do not interleave.
jobs=${FUZZ_JOBS:-$(nproc)}
case $jobs in '' | *[!0-9]* | 0) say "FUZZ_JOBS must be a positive number, not '$jobs'"; exit 2 ;; esac
throttle() { while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; "$@"; done; }
for t in "${targets[@]}"; do
	throttle :
	# shellcheck disable=SC2086
	"$cc" -g -O1 -std=gnu11 -pthread -fsanitize=fuzzer $san -I"$build" -I"$here" \
		"$here/tests/fuzz/fuzz-$t.c" "${lib_paths[@]}" $ext_libs \
		-o "$work/fuzz-$t" &
done
wait
for t in "${targets[@]}"; do
	[ -x "$work/fuzz-$t" ] || { say "building the target '$t' failed"; exit 1; }
done
fuzz_one() {
	local t=$1 out rc=0
	out=${FUZZ_CORPUS_OUT:+$FUZZ_CORPUS_OUT/$t}
	out=${out:-$work/corpus-$t}
	mkdir -p "$out"
	nice "$work/fuzz-$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
		-print_final_stats=1 -artifact_prefix="$artifacts/$t-" \
		"$out" "$here/tests/fuzz/corpus/$t" >"$work/log-$t" 2>&1 || rc=$?
	echo "$rc" >"$work/rc-$t"
}
printed=()
print_done() { # the logs of the targets that ended, once each
	local t
	for t in "${targets[@]}"; do
		[ -e "$work/rc-$t" ] || continue
		[[ " ${printed[*]} " == *" $t "* ]] && continue
		printed+=("$t")
		say "'$t' ended (exit $(cat "$work/rc-$t")):"
		cat "$work/log-$t" >&2
	done
}
for t in "${targets[@]}"; do
	throttle print_done
	say "fuzzing '$t' for ${secs}s"
	fuzz_one "$t" &
done
wait
print_done
failed=()
for t in "${targets[@]}"; do
	[ "$(cat "$work/rc-$t" 2>/dev/null)" = 0 ] || failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
	say "FAILED: ${failed[*]} (inputs in $artifacts)"
	exit 1
fi
say "all ${#targets[@]} targets ran ${secs}s without a finding"
