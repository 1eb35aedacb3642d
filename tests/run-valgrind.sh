#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The unit tests of a plain (unsanitized) build under valgrind, one per core
# (valgrind runs one thread).
#
#   tests/run-valgrind.sh [--build-only | --no-build] BUILD_DIR
#
# BUILD_DIR is a configured build without a sanitizer (valgrind cannot run
# an ASan program): setup.sh's build/. Its unit test programs are built
# first, unless --no-build; --build-only builds them and ends (.ci/run
# builds them, then runs them beside other work that builds in the same
# directory). The tests' liveness bounds (tests/tap.h
# slack_ms) are widened ten times (DEMESNE_TEST_TIME_SCALE=10): valgrind is
# 10-50x slower. Each failing test is named with the end of its output;
# each one's whole output is in BUILD_DIR/tests/unit/NAME.valgrind.
set -euo pipefail
build_it=1 run_it=1
case ${1:-} in
--no-build) build_it=0; shift ;;
--build-only) run_it=0; shift ;;
esac
[ $# = 1 ] || { echo "usage: tests/run-valgrind.sh [--build-only | --no-build] BUILD_DIR" >&2; exit 2; }
build=$1
[ -f "$build/Makefile" ] || { echo "tests/run-valgrind.sh: $build is not a configured build" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "tests/run-valgrind.sh: no valgrind: run 'sudo ./setup.sh --test-deps'" >&2; exit 2; }
unit=$(make -s -C "$build" -f Makefile -f - print-unit <<<'print-unit: ; @echo $(check_PROGRAMS)' | tr ' ' '\n' | grep '^tests/unit/')
[ $build_it = 0 ] || make -C "$build" -j"$(nproc)" $unit >/dev/null
[ $run_it = 1 ] || exit 0
export DEMESNE_TEST_TIME_SCALE=10
t0=$(date +%s)
for t in $unit; do printf '%s\0' "$build/$t"; done | xargs -0 -n1 -P"$(nproc)" sh -c '
	valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=9 "$1" >"$1.valgrind" 2>&1 ||
		{ echo "valgrind: $1 failed:" >&2; tail -40 "$1.valgrind" >&2; exit 1; }' sh
echo "valgrind: $(echo $unit | wc -w) unit tests passed in $(($(date +%s) - t0)) s"
