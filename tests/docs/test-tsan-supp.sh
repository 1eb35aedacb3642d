#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The ThreadSanitizer suppressions name functions that exist. A suppression
# matches a function name, so one left behind by a rename suppresses nothing,
# and the race it was written for fails the TSan run again (it did: the fd
# scan of backends/curl.c was renamed from mark_curl_pairs_cloexec). The
# server has the same list compiled in (src/cli/main.c,
# __tsan_default_suppressions) as the test programs read from tests/tsan.supp.
set -euo pipefail
top=${top_srcdir:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)}
supp=$top/tests/tsan.supp main=$top/src/cli/main.c

names=$(sed -n 's/^race:\([A-Za-z0-9_]*\)$/\1/p' "$supp" | sort -u)
builtin=$(grep -oE 'race:[A-Za-z0-9_]+' "$main" | sed 's/^race://' | sort -u)
echo "1..3"
if [ -n "$names" ]; then echo "ok 1 - tests/tsan.supp names $(echo $names)"; else echo "not ok 1 - no race: line in $supp"; fi
if [ "$names" = "$builtin" ]; then
	echo "ok 2 - the server's compiled-in list is the same"
else
	echo "not ok 2 - tests/tsan.supp has '$(echo $names)', src/cli/main.c '$(echo $builtin)'"
fi
missing=
for n in $names; do
	# A definition: the name at the start of a line's declarator, then '('.
	grep -rqE "^[a-z].*[ *]$n\(" "$top/src" "$top/backends" "$top/netpolicy" --include='*.c' || missing="$missing $n"
done
if [ -z "$missing" ]; then
	echo "ok 3 - each names a function defined in src/, backends/ or netpolicy/"
else
	echo "not ok 3 - no function of that name is defined:$missing"
fi
[ -z "$missing" ] && [ "$names" = "$builtin" ] && [ -n "$names" ]
