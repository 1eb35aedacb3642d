#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Runs every shell block in the tutorials and how-tos that is marked
# runnable, so the docs cannot drift from the program:
#
#   ```sh runnable
#   demesne run -- echo hi
#   ```
#
# (Renderers highlight it as sh and ignore the second word.) The blocks of
# one page run in order, each in `bash -euo pipefail`, in one scratch
# directory that is also HOME, with the built demesne first on PATH and an
# output root of their own; a block that expects a failure says so itself
# (`cmd || echo "exit: $?"`). Afterwards no container of that output root
# may be left. Needs a container engine and the images the blocks name.
set -uo pipefail
top=${top_srcdir:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)}
demesne=${DEMESNE:?DEMESNE must name the built demesne (make check sets it)}

n=0 failed=0
tap() { n=$((n + 1)); echo "$1 $n - $2"; [ "$1" = ok ] || failed=1; }

engine=${DOCKER_HOST:-${DEMESNE_ENGINE_HOST:-unix:///run/podman/podman.sock}}
left() {	# containers that mount something of this output root
	curl -sf --unix-socket "${engine#unix://}" -G http://d/containers/json \
		--data-urlencode all=1 --data-urlencode 'filters={"label":["demesne.root"]}' |
		grep -o "\"Source\":\"$1/[^\"]*\"" | wc -l
}

scratch=$(mktemp -d /tmp/demesne-snippets-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
bin=$scratch/bin
mkdir -p "$bin" && ln -s "$demesne" "$bin/demesne"

for page in "$top"/docs/tutorial/*.md "$top"/docs/how-to/*.md; do
	rel=${page#"$top"/}
	blocks=$scratch/blocks
	rm -rf "$blocks" && mkdir -p "$blocks"
	# One file per runnable block, named by its first line number.
	awk -v dir="$blocks" '
		/^```sh runnable[ \t]*$/ { inb = 1; f = sprintf("%s/%06d", dir, NR + 1); next }
		inb && /^```[ \t]*$/ { inb = 0; close(f); next }
		inb { print > f }
	' "$page"
	ls "$blocks" | grep -q . || continue
	home=$scratch/home-$(basename "$page" .md)
	mkdir -p "$home"
	out=$home/.demesne/out
	for b in "$blocks"/*; do
		line=$((10#$(basename "$b")))
		if (cd "$home" && HOME=$home PATH="$bin:$PATH" DEMESNE_OUTPUT_ROOT=$out \
			timeout 600 bash -euo pipefail "$b") >"$b.log" 2>&1; then
			tap ok "$rel:$line runs"
		else
			tap "not ok" "$rel:$line failed:"
			sed 's/^/#   /' "$b.log" | tail -20
		fi
	done
	out=$(cd "$out" 2>/dev/null && pwd -P || echo "$out")
	k=$(left "$out")
	[ "$k" = 0 ] && tap ok "$rel: no container left" || tap "not ok" "$rel: $k containers left"
done
[ $n -gt 0 ] || tap "not ok" "no runnable block found in docs/tutorial or docs/how-to"
echo "1..$n"
exit $failed
