#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The seccomp filter and demesne-shim's checks, attacked from inside real
# sandboxes (`demesne run`, the sandbox_script path): each case asserts the
# attack fails and that nothing is left behind. The probe is a static
# helper built with the tests and mounted read-only at /in/seccomp-probe.
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
bin=${DEMESNE:?DEMESNE must name the binary}
probe=$(dirname "$bin")/../tests/security/seccomp-probe
[ -x "$probe" ] || { echo "Bail out! $probe is not built"; exit 99; }
command -v podman >/dev/null || { echo "1..0 # SKIP podman CLI missing"; exit 77; }
tmp=$(mktemp -d /tmp/dm-seccomp-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state
unset DEMESNE_ALLOWED_PATHS DEMESNE_SHIM
: "${DEMESNE_SHIM_PATH:?DEMESNE_SHIM_PATH must name the built demesne-shim}"

# Runs a command in a fresh sandbox; stdout in $tmp/out.txt, stderr in
# $tmp/err.txt, the exit code in $rc, the run id in $run.
run() {
	"$bin" run "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
	run=$(sed -n 's|^demesne: output in .*/||p' "$tmp/err.txt")
}
# Nothing of run $1 is left: no container, no scratch directory, no process.
left_behind() {
	local c
	c=$(podman ps -a -q --filter "label=demesne.run=$1" 2>/dev/null)
	[ -z "$c" ] && [ ! -e "$DEMESNE_STATE_DIR/work/$1" ] && ! pgrep -f "demesne-shim.*$1" >/dev/null
}

cp "$probe" "$tmp/seccomp-probe"
run -f "$tmp/seccomp-probe" -- /in/seccomp-probe
sed 's/^/# /' "$tmp/out.txt"
# A run that failed in demesne itself (125) says why, or the probes below
# all fail with nothing to go on.
[ "$rc" = 0 ] || tail -n 8 "$tmp/err.txt" | sed 's/^/# stderr: /'
for c in unshare-newuser x32-unshare i386-unshare clone3-enosys io_uring_setup personality-read-implies-exec \
	personality-query-allowed proc1-mem proc1-fd-readlink proc1-fd-open proc1-environ no-inherited-fds \
	chmod-4755 chmod-2755 fchmod-6755 fchmodat-4755 fchmodat2-2755 chmod-0755-allowed no-setid-bit \
	newer-468-enosys newer-469-enosys newer-1000-enosys open_tree_attr vmsplice; do
	grep -qx "$c ok" "$tmp/out.txt"; ok $? "probe: $c"
done
[ "$rc" = 0 ]; ok $? "the probe found no hole (exit $rc)"
[ -n "$run" ] && left_behind "$run"; ok $? "nothing left of the probe's run"

# The shim loads the filter on itself once; commands inherit it. So PID 1
# runs under every filter a command does, and no process of the container
# runs without demesne's. And only under demesne's two (the pre-filter and
# the main one): the engine is asked for no profile of its own, whose
# compilation cost each start about 20 ms (3 filters before).
run -- bash -c 'sed -n "s/^Seccomp_filters:[[:space:]]*//p" /proc/1/status /proc/self/status | tr "\n" " "'
read -r pid1 self <"$tmp/out.txt"
[ "$rc" = 0 ] && [ -n "$pid1" ] && [ "$pid1" = "$self" ] && [ "$self" = 2 ]
ok $? "PID 1 (demesne-shim) and its command run under demesne's 2 filters, no engine profile ($pid1 and $self)"

run -- unshare -Ur true
[ "$rc" != 0 ] && grep -q "Operation not permitted" "$tmp/err.txt"; ok $? "\`unshare -Ur\` is refused (exit $rc)"
[ -n "$run" ] && left_behind "$run"; ok $? "nothing left of the unshare run"

run --image python -- python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.unshare(0x10000000)
print(r, ctypes.get_errno())'
[ "$(cat "$tmp/out.txt")" = "-1 1" ]; ok $? "unshare(CLONE_NEWUSER) from python: EPERM ($(cat "$tmp/out.txt"))"

# No shim, no run: a clear error naming the way out, and no container.
DEMESNE_SHIM_PATH=$tmp/no-such-shim "$bin" run -- bash -c 'echo ran' >"$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
[ "$rc" != 0 ] && ! grep -q ran "$tmp/out.txt"; ok $? "a missing shim binary: no run (exit $rc)"
grep -q "demesne-shim not found at '$tmp/no-such-shim'" "$tmp/err.txt" && grep -q "DEMESNE_SHIM=off" "$tmp/err.txt"
ok $? "the error names the path and DEMESNE_SHIM=off: $(grep -v '^demesne: info' "$tmp/err.txt" | head -1)"
[ ! -d "$DEMESNE_STATE_DIR/work" ] || [ -z "$(ls -A "$DEMESNE_STATE_DIR/work")" ]; ok $? "no scratch directory left"
outs_before=$(ls "$DEMESNE_OUTPUT_ROOT" | wc -l)
DEMESNE_SHIM_PATH=$tmp/no-such-shim "$bin" run -- true >/dev/null 2>&1
[ "$(ls "$DEMESNE_OUTPUT_ROOT" | wc -l)" = "$outs_before" ]; ok $? "nor an output directory: the refusal comes first"

DEMESNE_SHIM=maybe "$bin" run -- true >/dev/null 2>"$tmp/err.txt"; rc=$?
[ "$rc" != 0 ] && grep -q "DEMESNE_SHIM='maybe' is neither 'on' nor 'off'" "$tmp/err.txt"; ok $? "DEMESNE_SHIM=maybe is refused by name"

# The operator's opt-out, by name: runs, and doctor says what it means.
DEMESNE_SHIM=off DEMESNE_SHIM_PATH=$tmp/no-such-shim "$bin" run -- bash -c 'echo ran' >"$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
[ "$rc" = 0 ] && grep -qx ran "$tmp/out.txt"; ok $? "DEMESNE_SHIM=off runs without the shim (exit $rc)"
# Without the shim the engine's default profile stays in force: one filter.
DEMESNE_SHIM=off DEMESNE_SHIM_PATH=$tmp/no-such-shim "$bin" run -- \
	sed -n 's/^Seccomp_filters:[[:space:]]*//p' /proc/self/status >"$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
[ "$rc" = 0 ] && [ "$(cat "$tmp/out.txt")" -ge 1 ] 2>/dev/null
ok $? "DEMESNE_SHIM=off keeps the engine's profile ($(cat "$tmp/out.txt") filters)"
run=$(sed -n 's|^demesne: output in .*/||p' "$tmp/err.txt")
[ -n "$run" ] && left_behind "$run"; ok $? "nothing left of the unfiltered run"
DEMESNE_SHIM=off "$bin" doctor >"$tmp/doctor" 2>&1
grep -q "^ok      seccomp (DEMESNE_SHIM=off): demesne-shim is off: commands run under the engine's default seccomp profile only" "$tmp/doctor"
ok $? "doctor says DEMESNE_SHIM=off means the engine's default profile only"
"$bin" doctor >"$tmp/doctor" 2>&1
grep -q "^ok      seccomp (demesne-shim): on: every command runs under demesne-shim's seccomp filter" "$tmp/doctor"
ok $? "doctor says the filter is on by default"
DEMESNE_SHIM_PATH=$tmp/no-such-shim "$bin" doctor >"$tmp/doctor" 2>&1; rc=$?
[ "$rc" != 0 ] && grep -q "^PROBLEM seccomp (demesne-shim): demesne-shim not found" "$tmp/doctor"
ok $? "doctor reports a missing shim as a problem (exit $rc)"

echo "1..$n"
[ "$failed" = 0 ]
