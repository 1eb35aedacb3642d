#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# docs/reference/configuration.md lists every environment variable demesne
# reads or sets, and nothing else. The code's list is taken from the source:
# string literals that are a variable's name ("DEMESNE_X" or "DEMESNE_X=...")
# in src/, backends/ and netpolicy/, and ${DEMESNE_X} in the image scripts.
# A new variable without a row, or a row for a variable nothing uses, fails.
# And every DEMESNE_ variable is read in one place, src/core/settings.c: no
# getenv("DEMESNE_...") anywhere else in the program. demesne-shim (src/shim/)
# is another program, inside the container, with its own reading of the
# container's environment.
set -euo pipefail
top=${top_srcdir:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)}
page=$top/docs/reference/configuration.md

echo "1..4"
[ -f "$page" ] && echo "ok 1 - docs/reference/configuration.md exists" ||
	{ echo "not ok 1 - $page is missing"; exit 1; }

names='(DEMESNE|OPEN_SANDBOX|DOCKER|CONTAINER|ANTHROPIC|OPENAI|CLAUDE_CODE)_[A-Z0-9_]+|XDG_RUNTIME_DIR|TMPDIR|HOME|PATH'
code=$(
	{
		grep -rhoE "\"($names)[\"=]" "$top/src" "$top/backends" "$top/netpolicy" --include='*.c' --include='*.h' |
			sed -E 's/^"//; s/["=]$//'
		grep -hoE '\$\{?DEMESNE_[A-Z0-9_]+' "$top"/images/*.sh | sed -E 's/^\$\{?//'
	} | sort -u
)
# The first column of the page's tables: | `NAME` | ...
doc=$(grep -oE '^\| `[A-Z][A-Z0-9_]+`' "$page" | sed -E 's/^\| `//; s/`$//' | sort -u)

missing=$(comm -23 <(printf '%s\n' "$code") <(printf '%s\n' "$doc"))
if [ -z "$missing" ]; then
	echo "ok 2 - every variable the code uses has a row ($(printf '%s\n' "$code" | wc -l) variables)"
else
	echo "not ok 2 - variables the code uses without a row in docs/reference/configuration.md:"
	printf '#   %s\n' $missing
fi
stale=$(comm -13 <(printf '%s\n' "$code") <(printf '%s\n' "$doc"))
if [ -z "$stale" ]; then
	echo "ok 3 - every row names a variable the code uses"
else
	echo "not ok 3 - rows in docs/reference/configuration.md for variables nothing uses:"
	printf '#   %s\n' $stale
fi
elsewhere=$(grep -rnE 'getenv\("DEMESNE_' "$top/src" "$top/backends" "$top/netpolicy" --include='*.c' --include='*.h' |
	grep -v -e "^$top/src/core/settings.c:" -e "^$top/src/shim/" || true)
if [ -z "$elsewhere" ]; then
	echo "ok 4 - DEMESNE_ variables are read in src/core/settings.c only"
else
	echo "not ok 4 - DEMESNE_ variables read outside src/core/settings.c:"
	printf '#   %s\n' "${elsewhere//$top\//}"
fi
[ -z "$missing" ] && [ -z "$stale" ] && [ -z "$elsewhere" ]
