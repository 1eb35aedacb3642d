#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The command line as a person or a script uses it, against the real engine.
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
tmp=$(mktemp -d /tmp/dm-cli-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state
unset DEMESNE_ALLOWED_PATHS
bin=${DEMESNE:?DEMESNE must name the binary}
# DEMESNE_TEST_IMAGE: run the sandboxes in that image instead of the default
# (python); tests/run-dockerd.sh --images base uses it.
img=${DEMESNE_TEST_IMAGE:-python}
image=()
[ -z "${DEMESNE_TEST_IMAGE:-}" ] || image=(--image "$DEMESNE_TEST_IMAGE")

"$bin" --help | grep -q '^Usage: demesne COMMAND'; ok $? "--help prints usage on stdout"
"$bin" --version | grep -q '^demesne [0-9]'; ok $? "--version"
"$bin" bogus >/dev/null 2>&1; [ $? = 2 ]; ok $? "unknown command exits 2"
"$bin" run --help | grep -q -- '--timeout SECS'; ok $? "run --help names its options"

out=$("$bin" run "${image[@]}" --quiet -- bash -c 'echo hi; echo err >&2; exit 3' 2>"$tmp/err"); rc=$?
[ "$rc" = 3 ]; ok $? "run exits with the command's code (got $rc)"
[ "$out" = hi ]; ok $? "run prints stdout on stdout"
grep -qx err "$tmp/err"; ok $? "run prints stderr on stderr"

echo "input data" > "$tmp/in.txt"
out=$("$bin" run "${image[@]}" -q --file "$tmp/in.txt" --env GREETING=hello -- bash -c 'cat /in/in.txt; echo $GREETING' 2>/dev/null)
[ "$out" = $'input data\nhello' ]; ok $? "--file and --env reach the command"

"$bin" run "${image[@]}" -q --timeout 1 -- sleep 30 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 124 ]; ok $? "timeout exits 124 (got $rc)"
grep -q 'timed out after 1 s' "$tmp/err"; ok $? "timeout is explained"

"$bin" run -q --image nope -- true >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 125 ]; ok $? "bad image exits 125 (got $rc)"
grep -q "unknown image 'nope'" "$tmp/err"; ok $? "bad image is explained"

"$bin" run -q --file /does/not/exist -- true >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 125 ] && grep -q "does not exist" "$tmp/err"; ok $? "missing input is refused with its path"

"$bin" run --timeout abc -- true >/dev/null 2>&1; [ $? = 2 ]; ok $? "bad --timeout is a usage error"
"$bin" run >/dev/null 2>&1; [ $? = 2 ]; ok $? "no command is a usage error"

"$bin" run "${image[@]}" -- bash -c 'echo kept > /out/result.txt' >/dev/null 2>"$tmp/err"
dir=$(sed -n 's/^demesne: output in //p' "$tmp/err")
[ -n "$dir" ] && [ "$(cat "$dir/result.txt")" = kept ]; ok $? "files written to /out stay in the output directory"

"$bin" doctor >"$tmp/doctor" 2>&1; rc=$?
if [ -z "${DEMESNE_TEST_IMAGE:-}" ]; then
	[ "$rc" = 0 ] && grep -q 'all checks passed' "$tmp/doctor"; ok $? "doctor passes on this machine (rc $rc)"
else
	# Only $img need be there: other images may be reported missing, nothing else.
	! grep '^PROBLEM' "$tmp/doctor" | grep -qv '^PROBLEM image [a-z]*: not built' &&
		grep -Eq "^ok +image $img: " "$tmp/doctor"
	ok $? "doctor finds $img, and no problem but other images not built (rc $rc)"
fi
grep -q '^ok      container engine' "$tmp/doctor"; ok $? "doctor names the engine"
grep -q "^ok      egress package-managers hosts (with each image's label demesne.package-hosts): pypi.org, " "$tmp/doctor"
ok $? "doctor lists the hosts egress package-managers reaches"
DEMESNE_SANDBOX_SUBNET=bogus "$bin" doctor >"$tmp/doctor-subnet" 2>&1
grep -q '^PROBLEM sandbox subnet (DEMESNE_SANDBOX_SUBNET)' "$tmp/doctor-subnet"; ok $? "doctor reports a bad DEMESNE_SANDBOX_SUBNET"
DEMESNE_ENGINE_HOST=unix:///nonexistent/engine.sock DEMESNE_START_PODMAN=0 "$bin" doctor >"$tmp/doctor" 2>&1; rc=$?
[ "$rc" = 1 ] && grep -q '^PROBLEM container engine' "$tmp/doctor" && grep -q 'fix:' "$tmp/doctor"
ok $? "doctor reports a dead engine socket with a fix"

DEMESNE_ENGINE_HOST=unix:///nonexistent/engine.sock DEMESNE_START_PODMAN=0 "$bin" run -- true >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 125 ] && grep -q 'nonexistent/engine.sock' "$tmp/err"; ok $? "run with a dead engine socket: clear error (rc $rc)"

"$bin" images list >"$tmp/list" 2>/dev/null
grep -Eq "^$img +localhost/demesne/$img:latest +[0-9a-f]{12} +[0-9]+ MiB +built\$" "$tmp/list"
ok $? "images list shows $img built, with its inputs tag and size"
[ "$(grep -Ec '^(base|python|node|go|browser|media|twine|webgamedev|claude-code|codex) ' "$tmp/list")" = 10 ]
ok $? "images list names all ten images"
"$bin" images build nosuchimage >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "unknown image 'nosuchimage'" "$tmp/err"; ok $? "building an unknown image is refused (rc $rc)"
"$bin" images build >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "name images or give --all" "$tmp/err"; ok $? "images build with no name says what to give (rc $rc)"

echo "1..$n"
echo "cli: $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
