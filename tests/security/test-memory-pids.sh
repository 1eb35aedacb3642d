#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# DEMESNE_MEMORY and DEMESNE_PIDS_LIMIT stop a memory hog and a fork bomb,
# whoever runs the engine: a rootful engine with its cgroups, a rootless one
# on cgroup v1 (no delegation, where the engine ignores both) through
# demesne-shim (RLIMIT_DATA per process; the sandbox's process count, past
# which every process of the sandbox is killed). Run it as root and as a
# normal user with rootless Podman (docs/explanation/limits.md). Each case
# asserts the attack is bounded and nothing is left behind.
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
bin=${DEMESNE:?DEMESNE must name the binary}
command -v podman >/dev/null || { echo "1..0 # SKIP needs the podman CLI to look for leftover containers"; exit 77; }

tmp=$(mktemp -d /tmp/dm-limits-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state DEMESNE_MEMORY=256m DEMESNE_PIDS_LIMIT=64

run() {
	timeout 300 "$bin" run -t 120 "$@" >"$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
	run=$(sed -n 's|^demesne: output in .*/||p' "$tmp/err.txt")
}
left_behind() {
	[ -n "$1" ] && [ -z "$(podman ps -a -q --filter "label=demesne.run=$1" 2>/dev/null)" ] &&
		! pgrep -u "$(id -u)" -f "demesne-shim.*$1" >/dev/null
}

"$bin" doctor >"$tmp/doctor.txt" 2>/dev/null
grep -E '^(feature|unavail) memory and pids limits' "$tmp/doctor.txt" | sed 's/^/# /'
grep -Eq '^(feature memory and pids limits \(DEMESNE_MEMORY, DEMESNE_PIDS_LIMIT\): applied per sandbox by the engine|unavail memory and pids limits \(DEMESNE_MEMORY, DEMESNE_PIDS_LIMIT\): not per sandbox: .*demesne-shim applies)' "$tmp/doctor.txt"
ok $? "doctor says who applies the memory and pids limits"
if [ "$(id -u)" != 0 ] && [ "$(stat -f -c %T /sys/fs/cgroup)" != cgroup2fs ]; then
	grep -q 'unavail memory and pids limits.*cgroup v1.*systemd.unified_cgroup_hierarchy=1.*Delegate=' "$tmp/doctor.txt"
	ok $? "doctor as a rootless user on cgroup v1 says what is missing and how to get delegation"
fi

# A memory hog: one process asking for 1 GiB under a 256 MiB limit.
run -i python -- python3 -c 'x = bytearray(1 << 30); x[-1] = 1; print("allocated")'
sed 's/^/# /' "$tmp/err.txt" | tail -3
[ "$rc" != 0 ] && ! grep -q allocated "$tmp/out.txt"; ok $? "a 1 GiB allocation under DEMESNE_MEMORY=256m fails (rc $rc)"
left_behind "$run"; ok $? "the memory hog left no container or shim behind"

# A fork bomb: bounded by the pids limit (the engine refuses forks past it,
# or the shim kills the sandbox's processes), then gone with the run.
# Every process of the bomb carries the marker in its command line ($0).
marker=dmbomb$$$RANDOM
run -i python -- bash -c 'f() { f | f & }; f; sleep 3; ls /proc | grep -c "^[0-9]"' "$marker"
count=$(grep -E '^[0-9]+$' "$tmp/out.txt" | tail -1)
grep -m1 'fork' "$tmp/err.txt" | sed 's/^/# /'
# Bounded: the shim killed the sandbox (137), or the engine's cgroup made
# fork fail (EAGAIN), or the sandbox never held more than the limit.
[ "$rc" = 137 ] || grep -q 'fork: .*Resource temporarily unavailable' "$tmp/err.txt" ||
	{ [ -n "$count" ] && [ "$count" -le 70 ]; }
ok $? "a fork bomb is bounded by DEMESNE_PIDS_LIMIT=64 (rc $rc, ${count:-no} processes seen)"
left_behind "$run"; ok $? "the fork bomb left no container or shim behind"
for _ in $(seq 100); do pgrep -f "$marker" >/dev/null || break; sleep 0.1; done
! pgrep -f "$marker" >/dev/null; ok $? "no process of the bomb is left on the host"

# A bomb that catches EAGAIN and forks on, beside another sandbox of the
# same user. Rootless without a pids cgroup, RLIMIT_NPROC counts every
# sandbox of the user together, so the shim must stop the bomb quickly
# (SIGSTOP before SIGKILL; commands at nice 10, so the shim gets the CPU to
# count): the other sandbox's commands go on meanwhile (bash retries a
# fork for some seconds before it gives up).
timeout 300 "$bin" run -q -t 120 -i base -- bash -c 'echo up >&2; sleep 2; for i in $(seq 150); do /bin/true || echo failed; sleep 0.02; done; echo "done $i"' >"$tmp/beside.txt" 2>"$tmp/beside-err.txt" &
beside=$!
# Until the other sandbox's command has started (a guard, not a bound).
for _ in $(seq 600); do grep -qx up "$tmp/beside-err.txt" && break; sleep 0.1; done
t0=$(date +%s%N)
# Against an engine's pids cgroup it spins at the limit until its timeout
# (-t 10: rc 124); where the shim holds the limit, the shim kills it (137).
timeout 300 "$bin" run -t 10 -i python -- python3 -c 'import os
while True:
    try: os.fork()
    except OSError: pass' >"$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
run=$(sed -n 's|^demesne: output in .*/||p' "$tmp/err.txt")
bomb_ms=$((($(date +%s%N) - t0) / 1000000))
wait "$beside"; beside_rc=$?
echo "# a bomb catching EAGAIN: rc $rc after $bomb_ms ms (sandbox start included)"
if grep -q '^feature memory and pids limits.*applied per sandbox by the engine' "$tmp/doctor.txt"; then
	[ "$rc" = 124 ]; ok $? "a bomb that catches EAGAIN is held at the engine's pids limit until its timeout (rc $rc)"
else
	[ "$rc" = 137 ]; ok $? "a bomb that catches EAGAIN is stopped by demesne-shim (rc $rc)"
fi
left_behind "$run"; ok $? "that bomb left no container or shim behind"
grep -v '^demesne: ' "$tmp/beside-err.txt" | head -3 | sed 's/^/# beside: /'
[ "$beside_rc" = 0 ] && [ "$(cat "$tmp/beside.txt")" = "done 150" ] &&
	! grep -q 'fork: Resource temporarily unavailable' "$tmp/beside-err.txt"
ok $? "another sandbox's commands ran on meanwhile (rc $beside_rc: $(tr '\n' ' ' <"$tmp/beside.txt"))"

# Open files: the shim lowers RLIMIT_NOFILE to DEMESNE_NOFILE whatever the
# engine did (rootless Podman's compatible API ignores HostConfig.Ulimits).
# The same for the disk cap's file-size limit.
DEMESNE_NOFILE=1000 DEMESNE_DISK_MAX=10m run -i base -- sh -c "ulimit -n; ulimit -Hn; grep 'Max file size' /proc/self/limits | tr -s ' ' | cut -d' ' -f4,5"
[ "$rc" = 0 ] && [ "$(tr '\n' ' ' <"$tmp/out.txt")" = "1000 1000 10485760 10485760 " ]
ok $? "DEMESNE_NOFILE=1000 and DEMESNE_DISK_MAX=10m are the sandbox's open-file and file-size limits, soft and hard (rc $rc: $(tr '\n' ' ' <"$tmp/out.txt"))"

echo "1..$n"
exit $((failed > 0))
