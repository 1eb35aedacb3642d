#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/tap-skip.sh: a "1..0 # SKIP" test that exits 77 becomes a skip (exit
# 0) for automake's TAP driver; every other status is passed on.
set -u
wrap=${top_srcdir:?}/tests/tap-skip.sh
n=0 failed=0
check() { # expected-status description command...
	want=$1 what=$2
	shift 2
	"${SHELL:-/bin/sh}" "$wrap" "$@" >/dev/null 2>&1
	got=$?
	n=$((n + 1))
	if [ "$got" = "$want" ]; then echo "ok $n - $what"; else echo "not ok $n - $what (exit $got, want $want)"; failed=1; fi
}
check 0 "a skip-all plan with exit 77 is a skip" sh -c 'echo "1..0 # SKIP needs root"; exit 77'
check 77 "exit 77 after test lines stays 77 (an error)" sh -c 'echo "1..1"; echo "ok 1 - x"; exit 77'
check 77 "exit 77 without a skip plan stays 77" sh -c 'echo "# nothing"; exit 77'
check 77 "a skip plan without a reason stays 77" sh -c 'echo "1..0 # SKIP"; exit 77'
check 1 "a failure is passed on" sh -c 'echo "1..1"; echo "not ok 1"; exit 1'
check 0 "a pass is passed on" sh -c 'echo "1..1"; echo "ok 1"'
check 139 "a crash's status is passed on" sh -c 'echo "1..1"; kill -SEGV $$'
out=$("${SHELL:-/bin/sh}" "$wrap" sh -c 'echo "1..0 # SKIP needs root"; exit 77')
n=$((n + 1))
[ "$out" = "1..0 # SKIP needs root" ] && echo "ok $n - the test's output is passed through" ||
	{ echo "not ok $n - output: '$out'"; failed=1; }
echo "1..$n"
exit $failed
