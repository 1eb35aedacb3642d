# SPDX-License-Identifier: MIT
# The start of the shell end-to-end tests: where the tree is (top), the
# demesne under test (DEMESNE, which make check sets), a skip when a tool is
# missing, and TAP lines counted for the closing plan.
#
#   needs CMD WHY   exit 77 (skip) with WHY when CMD is not on PATH
#   ok RC TEXT      "ok N - TEXT" when RC is 0, else "not ok" (counted in failed)
#   vendor_fixture NAME KEY [OPTION...]
#                   starts tests/fixtures/vendor/server.mjs on loopback
#                   expecting KEY (with the fixture's OPTIONs), logging to
#                   $tmp/fixture-NAME.log; its port goes to port_of_NAME
#                   (NAME's '-' as '_'), its pid to fixtures[]
set -uo pipefail
top=${top_srcdir:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../../.." && pwd -P)}
export DEMESNE=${DEMESNE:?DEMESNE must name the built demesne (make check sets it)}
n=0 failed=0
fixtures=()
needs() { command -v "$1" >/dev/null || { echo "1..0 # SKIP $2"; exit 77; }; }
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
vendor_fixture() {
	local name=$1 key=$2 out=$tmp/fixture-$1.out port=
	shift 2
	node "$top/tests/fixtures/vendor/server.mjs" --expect-key "$key" --port 0 --host 127.0.0.1 \
		--log "$tmp/fixture-$name.log" "$@" >"$out" 2>&1 &
	fixtures+=($!)
	for _ in $(seq 100); do
		port=$(sed -n 's/^listening //p' "$out")
		[ -n "$port" ] && break
		sleep 0.1
	done
	printf -v "port_of_${name//-/_}" '%s' "$port"
}
# For `trap fixtures_end EXIT`: ends the vendor fixtures (each by its pid)
# and removes $tmp, or keeps it and says so on fd 3 when a test failed.
fixtures_end() {
	local p
	for p in "${fixtures[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	if [ "$failed" = 0 ]; then rm -rf "$tmp"; else echo "# logs kept in $tmp" >&3; fi
}
