#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Runs the integration tests against a real dockerd (Debian's docker.io,
# dockerd 20.10) that this script starts for the run and stops at the end:
# the same backend that tests/run.sh proves against Podman's compat service.
#   tests/run-dockerd.sh                 base and python images, every test
#   tests/run-dockerd.sh --images base   base only: no 1.2 GB python copy;
#                                        the tests that need python are skipped
#   --build-dir DIR    a configured build to use (default: the tree itself when
#                      it is configured in place, else build-asan-gcc as
#                      tests/run.sh makes it: ASan + UBSan)
#   --storage-driver D dockerd's storage driver (default overlay2; vfs works
#                      but copies the whole image for every container)
#   --keep             leave the daemon's directory behind, and say where
#   --only PROG        run only this integration program (repeatable), e.g.
#                      --only test-backend-conformance; no script or e2e test
#                      but those named (--only test-fork-admission.sh)
#                      (--only test-docker-tls: the engine over tcp:// with
#                      TLS alone, tests/integration/test-docker-tls.sh;
#                      --only client-expose: sandbox_expose's previews)
# Needs root and what `./setup.sh --test-deps` installs (docker.io). The
# programs run twice as many at once as there are cores (DEMESNE_TEST_JOBS
# sets another number), as tests/run.sh runs them on Podman. Output is TAP, one line per test program, in the order
# they were started; each program's log, dockerd's and containerd's logs
# go to BUILD/dockerd-tests/.
#
# The daemon is private and owned by this script: its own containerd,
# data and exec roots in a temporary directory, a private socket, no
# iptables and no bridge (sandboxes use network none), and an empty
# daemon.json instead of /etc/docker/daemon.json. It runs with
# --userns-remap=default (user dockremap, whose /etc/subuid and /etc/subgid
# lines setup.sh --test-deps adds): dockerd has no per-container user
# namespace, and demesne refuses a dockerd whose containers' root is the
# host's root, so every test here runs sandboxes in that user namespace. Nothing else on the
# machine is touched: a system dockerd, containerd or Podman keeps running.
# The images are copied from Podman's store (podman save | docker load keeps
# ids and labels, so images/build.sh --engine docker finds them up to date);
# when Podman has no base image, base is built with images/build.sh --engine
# docker (python cannot be: `docker build` has no network without a bridge).
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
images=all build='' storage=overlay2 keep=0 only=()
while [ $# -gt 0 ]; do
	case $1 in
	--images)
		case ${2:-} in base | all) images=$2 ;; *) echo "tests/run-dockerd.sh: --images wants base or all" >&2; exit 2 ;; esac
		shift ;;
	--build-dir) build=$(cd -- "${2:?--build-dir wants a directory}" && pwd -P); shift ;;
	--storage-driver) storage=${2:?--storage-driver wants a name}; shift ;;
	--keep) keep=1 ;;
	--only) only+=("${2:?--only wants a program name, e.g. test-jobs}"); shift ;;
	-h | --help) sed -n '3,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "tests/run-dockerd.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift
done

say() { printf '# %s\n' "$*"; }
die() { printf 'Bail out! %s\n' "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root: dockerd needs it"
for tool in dockerd containerd docker curl; do
	command -v "$tool" >/dev/null || die "$tool is not on PATH: run 'sudo ./setup.sh --test-deps' (it installs docker.io)"
done
getent passwd dockremap >/dev/null && grep -q '^dockremap:' /etc/subuid && grep -q '^dockremap:' /etc/subgid ||
	die "no dockremap user with /etc/subuid and /etc/subgid lines for dockerd's --userns-remap: run 'sudo ./setup.sh --test-deps'"

# ---- build ------------------------------------------------------------------
cd "$here"
if [ -z "$build" ]; then
	if [ -f "$here/config.status" ]; then
		build=$here # configured in place: no out-of-tree build is possible
	else
		if [ ! -x configure ] || [ configure.ac -nt configure ]; then autoreconf -fi >/dev/null 2>&1; fi
		build=$here/build-asan-gcc
		mkdir -p "$build"
		[ -f "$build/Makefile" ] || (cd "$build" && CC=${CC:-gcc} "$here/configure" -q --enable-werror --enable-sanitizers)
	fi
fi
# Every integration program the build knows, so new ones are proven on
# dockerd too; test-engine-restart is left out: it stops and starts a Podman
# service of its own, which is the point of it. The security battery's
# programs (tests/security/) too.
programs=()
for src in "$here"/tests/security/test-*.c; do
	[ -e "$src" ] || continue
	prog=$(basename "$src" .c)
	[ ${#only[@]} = 0 ] || [[ " ${only[*]} " == *" $prog "* ]] || continue
	grep -Eq "tests/security/$prog([[:space:]]|\$)" "$here/Makefile.am" && programs+=("security/$prog")
done
for src in "$here"/tests/integration/test-*.c; do
	prog=$(basename "$src" .c)
	# test-opensandbox runs its own fixture, and the netpolicy tests need
	# no engine: neither says anything about dockerd.
	case $prog in test-engine-restart | test-opensandbox | test-netpolicy-*) continue ;; esac
	[ ${#only[@]} = 0 ] || [[ " ${only[*]} " == *" $prog "* ]] || continue
	grep -Eq "tests/integration/$prog([[:space:]]|\$)" "$here/Makefile.am" && programs+=("integration/$prog")
done
# The end-to-end scripts that need dockerd too: sandbox_fork under a
# nested caller's tree caps (the snapshot's commit, admission and the
# tree's end on this engine; issue 32); sandbox_expose's previews (the
# relay in the sandbox's network namespace, WebSocket, closing with the
# sandbox and the server; issue 33). --only takes them with or without
# their extension.
scripts=()
for prog in test-fork-admission.sh client-expose.mjs; do
	[ ${#only[@]} = 0 ] || [[ " ${only[*]} " == *" $prog "* ]] || [[ " ${only[*]} " == *" ${prog%.*} "* ]] &&
		scripts+=("$prog")
done
# test-docker-tls (the engine over tcp:// with TLS) runs the conformance
# program through TLS, so it is built even when not run on the socket.
tls_tests=0
[ ${#only[@]} = 0 ] || [[ " ${only[*]} " == *" test-docker-tls "* ]] && tls_tests=1
[ ${#programs[@]} -gt 0 ] || [ ${#scripts[@]} -gt 0 ] || [ $tls_tests = 1 ] ||
	die "--only ${only[*]}: no such integration program in Makefile.am"
# The helpers the battery's scripts run (tests/security/seccomp-probe):
# every check program under tests/security/ that is not a test of its own.
helpers=$(make -s -C "$build" -f Makefile -f - print-helpers <<<'print-helpers: ; @echo $(check_PROGRAMS)' |
	tr ' ' '\n' | grep '^tests/security/' | grep -v '/test-' || true)
make -C "$build" -j"$(nproc)" >/dev/null
# shellcheck disable=SC2086 # helpers: one word each
make -C "$build" -j"$(nproc)" "${programs[@]/#/tests/}" $helpers $([ $tls_tests = 0 ] || echo tests/integration/test-backend-conformance) >/dev/null
logs=$build/dockerd-tests
rm -rf "$logs"
mkdir -p "$logs"

# ---- the private dockerd ------------------------------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/demesne-dockerd-XXXXXX")
# The remapped root must pass through to its own data root below.
chmod 0711 "$tmp"
sock=$tmp/docker.sock csock=$tmp/containerd.sock
# The containers' cgroups go under a parent of our own, not a system
# dockerd's /docker, and are removed at the end even after a crash.
cgparent=$(basename "$tmp")
dockerd_pid='' containerd_pid='' events_pid=''

# Stops what this script started, by PID, newest first; then what the
# daemons may have left (mounts, shims) under our directory only.
unclean=0 test_names=() test_pids=()
stop_pid() {
	local pid=$1 what=$2 secs=$3
	[ -n "$pid" ] || return 0
	if ! kill -0 "$pid" 2>/dev/null; then
		unclean=1 # it died on its own: what it ran may be left
		wait "$pid" 2>/dev/null
		return 0
	fi
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq $((secs * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		say "$what (pid $pid) ignored SIGTERM for ${secs}s; killing it"
		kill -KILL "$pid" 2>/dev/null
		unclean=1
	fi
	wait "$pid" 2>/dev/null || true
}
cleanup() {
	local rc=$? p mnt t0
	set +e
	t0=$(date +%s)
	# Tests still running (the script failed): each one's timeout passes
	# the TERM on to the test.
	for p in "${test_pids[@]}"; do
		kill -0 "$p" 2>/dev/null || continue
		# shellcheck disable=SC2046
		kill -TERM $(cat /proc/"$p"/task/*/children 2>/dev/null) "$p" 2>/dev/null
	done
	[ ${#test_pids[@]} = 0 ] || wait "${test_pids[@]}" 2>/dev/null
	[ -z "$events_pid" ] || { kill "$events_pid" 2>/dev/null; wait "$events_pid" 2>/dev/null; }
	stop_pid "$dockerd_pid" dockerd 20
	stop_pid "$containerd_pid" containerd 10
	# After a clean stop no container and no shim is left; otherwise shims
	# may outlive their containerd: ours name our socket.
	[ $unclean = 0 ] || grep -lsaF -- "$csock" /proc/[0-9]*/cmdline | while read -r p; do
		case $(tr '\0' ' ' 2>/dev/null <"$p") in
		*containerd-shim*)
			p=${p#/proc/} p=${p%/cmdline}
			say "killing a containerd shim left behind (pid $p)"
			kill -KILL "$p" 2>/dev/null ;;
		esac
	done
	# dockerd unmounts on a clean shutdown; after a kill, mounts remain.
	awk -v d="$tmp/" 'substr($5, 1, length(d)) == d { print $5 }' /proc/self/mountinfo | sort -r |
		while read -r mnt; do umount -l "$mnt" 2>/dev/null || say "could not unmount $mnt"; done
	# Empty cgroups only: rmdir refuses one that still has processes.
	find /sys/fs/cgroup -maxdepth 2 -type d -name "$cgparent" 2>/dev/null | while read -r cg; do
		find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || say "could not remove cgroup $cg"
	done
	if [ $keep = 1 ]; then
		say "kept the daemon's directory: $tmp"
	else
		rm -rf --one-file-system "$tmp"
	fi
	say "dockerd and containerd stopped, their directory $([ $keep = 1 ] && echo kept || echo removed) in $(($(date +%s) - t0)) s"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ping_ok() { curl -sf --max-time 2 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; }

t_start=$(date +%s)
cat >"$tmp/containerd.toml" <<EOF
version = 2
root = "$tmp/containerd/root"
state = "$tmp/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$csock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$tmp/containerd/opt"
EOF
containerd --config "$tmp/containerd.toml" --log-level warn >"$logs/containerd.log" 2>&1 &
containerd_pid=$!
for _ in $(seq 100); do [ -S "$csock" ] && break; kill -0 "$containerd_pid" 2>/dev/null || break; sleep 0.1; done
[ -S "$csock" ] || die "containerd did not start: $(tail -3 "$logs/containerd.log" | tr '\n' ' ')"

# dockerd would use a system containerd whenever /run/containerd/containerd.sock
# exists, so it is always given ours. --config-file: a system daemon.json
# (hosts, a bridge, registries) must not apply here.
echo '{}' >"$tmp/daemon.json"
# Also a TLS listener on a free loopback port, for the engine over tcp://
# (tests/integration/test-docker-tls.sh): a throwaway CA, server and client
# certificates in $tmp/tls, removed with the rest.
tls=$tmp/tls
mkdir -p "$tls"
"$here/tests/make-test-certs.sh" "$tls" || die "tests/make-test-certs.sh failed (openssl)"
tls_port=''
# Below the kernel's ephemeral range (net.ipv4.ip_local_port_range), so
# that no outgoing connection can hold the port, and used by no socket at
# all: a port picked up to 60000 once collided ("address already in use").
low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
for _ in $(seq 50); do
	p=$((20000 + RANDOM % (low > 21000 ? low - 20000 : 1000)))
	ss -Hatn "( sport = :$p )" 2>/dev/null | grep -q . || { tls_port=$p; break; }
done
[ -n "$tls_port" ] || die "no free loopback port for dockerd's TLS listener"
dockerd --config-file "$tmp/daemon.json" --data-root "$tmp/data" --exec-root "$tmp/exec" \
	--pidfile "$tmp/dockerd.pid" -H "unix://$sock" --containerd "$csock" \
	-H "tcp://127.0.0.1:$tls_port" --tlsverify --tlscacert "$tls/server/ca.pem" \
	--tlscert "$tls/server/cert.pem" --tlskey "$tls/server/key.pem" \
	--iptables=false --bridge=none --storage-driver "$storage" --log-level warn --userns-remap=default \
	--exec-opt native.cgroupdriver=cgroupfs --cgroup-parent "/$cgparent" \
	>"$logs/dockerd.log" 2>&1 &
dockerd_pid=$!
for _ in $(seq 300); do ping_ok && break; kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.1; done
ping_ok || die "dockerd did not answer on $sock: $(tail -3 "$logs/dockerd.log" | tr '\n' ' ')"

export DOCKER_HOST=unix://$sock DEMESNE_ENGINE=docker
unset CONTAINER_HOST DEMESNE_ENGINE_HOST DOCKER_CONTEXT DOCKER_CONFIG
say "$(docker info --format 'dockerd {{.ServerVersion}}, storage {{.Driver}}, cgroup {{.CgroupDriver}} v{{.CgroupVersion}}, init {{.InitBinary}}, root {{.DockerRootDir}}') at $sock (pid $dockerd_pid, containerd pid $containerd_pid), up in $(($(date +%s) - t_start)) s"
docker info --format '{{.SecurityOptions}}' | grep -q 'name=userns' || die "dockerd did not take --userns-remap"


# ---- images -------------------------------------------------------------------
wanted=(base)
[ "$images" = all ] && wanted+=(python)
for name in "${wanted[@]}"; do
	ref=localhost/demesne/$name:latest
	t0=$(date +%s)
	if command -v podman >/dev/null && podman image exists "$ref"; then
		podman save "$ref" | docker load >/dev/null || die "podman save $ref | docker load failed"
		how="copied from Podman"
	elif [ "$name" = base ]; then
		"$here/images/build.sh" --engine docker base 2>"$logs/images-build.log" ||
			die "images/build.sh --engine docker base failed: see $logs/images-build.log"
		how="built with images/build.sh --engine docker"
	else
		die "$ref is not in Podman's store: build it there (images/build.sh python) or use --images base"
	fi
	say "$ref $how in $(($(date +%s) - t0)) s (inputs $(docker image inspect --format '{{index .Config.Labels "demesne.inputs"}}' "$ref" | cut -c1-12))"
done

# ---- tests --------------------------------------------------------------------
export DEMESNE=$build/src/demesne DEMESNE_IMAGES_DIR=$here/images top_srcdir=$here
export DEMESNE_SHIM_PATH=$build/src/shim/demesne-shim
# As Makefile.am's test environment: tests count their servers' containers,
# so no warm pool unless a test asks for one (test-pool does).
export DEMESNE_POOL=${DEMESNE_POOL:-0}
[ "$images" = base ] && export DEMESNE_TEST_IMAGE=base

n=0 failed=0
tap_line() { # status name text
	n=$((n + 1))
	[ "$1" = ok ] || failed=$((failed + 1))
	printf '%s %d - %s\n' "$1" "$n" "$2${3:+: $3}"
}
skip() { n=$((n + 1)); printf 'ok %d - %s # SKIP %s\n' "$n" "$1" "$2"; }

alive() {
	if ! kill -0 "$dockerd_pid" 2>/dev/null || ! kill -0 "$containerd_pid" 2>/dev/null; then
		die "dockerd or containerd died: $(tail -2 "$logs/dockerd.log" "$logs/containerd.log" | tr '\n' ' ')"
	fi
}
count() { grep -c "^:test-result: $1" "$logs/$2.trs" 2>/dev/null || true; }

# One program through automake's own TAP driver, judged as `make check` does:
# started now, twice as many at once as there are cores (as tests/run.sh
# runs them on Podman; DEMESNE_TEST_JOBS sets another number), and reported
# in order by report_tests.
jobs=${DEMESNE_TEST_JOBS:-$((2 * $(nproc)))}
case $jobs in '' | *[!0-9]* | 0) die "DEMESNE_TEST_JOBS must be a positive number, not '$jobs'" ;; esac
running_tests() {
	local n=0 p
	for p in "${test_pids[@]}"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
	echo $n
}
run_test() {
	local name=$1
	shift
	alive
	while [ "$(running_tests)" -ge "$jobs" ]; do sleep 0.2; done
	(
		t0=$(date +%s)
		# A hung test must not hold CI: each program gets 15 minutes (all
		# finish within a minute on an idle machine).
		AM_TAP_AWK='awk' timeout -k 10 900 "$here/build-aux/tap-driver.sh" --test-name "$name" \
			--log-file "$logs/$name.log" --trs-file "$logs/$name.trs" --color-tests no --enable-hard-errors yes \
			--expect-failure no -- "$@" >"$logs/$name-driver.log" 2>&1 || true
		echo $(($(date +%s) - t0)) >"$logs/$name.secs"
	) &
	test_names+=("$name")
	test_pids+=($!)
}
report_tests() {
	local name result counts
	# Not a bare `wait` when none was started (every program skipped): that
	# would wait for the events reader below, which never ends.
	[ ${#test_pids[@]} = 0 ] || wait "${test_pids[@]}" 2>/dev/null || true
	for name in "${test_names[@]}"; do
		result=$(sed -n 's/^:global-test-result: //p' "$logs/$name.trs" 2>/dev/null)
		counts="$(count PASS "$name") passed, $(count SKIP "$name") skipped, $(cat "$logs/$name.secs" 2>/dev/null) s"
		if [ "$result" = PASS ] || [ "$result" = SKIP ]; then
			tap_line ok "$name" "$counts"
		else
			tap_line "not ok" "$name" "${result:-no result}, $counts"
			grep -E '^(FAIL|ERROR|XPASS):' "$logs/$name-driver.log" | head -20 | sed 's/^/#   /'
			say "  log: $logs/$name.log"
		fi
	done
}

curl -sN --unix-socket "$sock" -D "$tmp/events.head" -G http://d/events \
	--data-urlencode 'filters={"type":["container"],"event":["create"]}' >"$logs/events.json" 2>/dev/null &
events_pid=$!
for _ in $(seq 50); do [ -s "$tmp/events.head" ] && break; sleep 0.1; done
t_tests=$(date +%s)
for path in "${programs[@]}"; do
	prog=${path#*/}
	# These ask for the base image (DEMESNE_TEST_IMAGE, or base always);
	# the others use the server's default, python.
	case $prog in
	test-docker-backend | test-docker-image | test-snapshot | test-fork | test-script | test-backend-conformance | test-ownership) ;;
	*)
		if [ "$images" = base ]; then
			skip "$prog" "the server's default image is python (--images base)"
			continue
		fi ;;
	esac
	run_test "$prog" "$build/tests/$path"
done
for prog in ${scripts[@]+"${scripts[@]}"}; do
	case $prog in
	*.mjs)
		# The npm clients' scripts use python.
		if [ "$images" = base ]; then
			skip "$prog" "it needs the python image (--images base)"
			continue
		fi
		run_test "$prog" node "$here/tests/e2e/$prog" ;;
	*) run_test "$prog" bash "$here/tests/e2e/$prog" ;;
	esac
done
# The engine over tcp:// with TLS: the conformance suite through it, then
# the script with a sandbox run and the refusals.
if [ $tls_tests = 1 ]; then
	run_test test-backend-conformance-tls env DEMESNE_CONFORMANCE_BACKENDS=engine DOCKER_HOST="tcp://127.0.0.1:$tls_port" DOCKER_TLS_VERIFY=1 \
		DOCKER_CERT_PATH="$tls/client" "$build/tests/integration/test-backend-conformance"
	run_test test-docker-tls.sh env DEMESNE_TLS_PORT="$tls_port" DEMESNE_TLS_CERTS="$tls" \
		bash "$here/tests/integration/test-docker-tls.sh"
fi
# The scripts and the npm clients: not with --only.
if [ ${#only[@]} = 0 ]; then
	run_test test-cli.sh bash "$here/tests/integration/test-cli.sh"
	for script in "$here"/tests/security/test-*.sh; do
		[ -e "$script" ] && run_test "$(basename "$script")" bash "$script"
	done
	if [ "$images" = all ]; then
		run_test test-images.sh bash "$here/tests/integration/test-images.sh"
		# The sandbox tools through real npm MCP clients (both eras), on dockerd.
		run_test client-sandbox.mjs node "$here/tests/e2e/client-sandbox.mjs"
		run_test client-egress.mjs node "$here/tests/e2e/client-egress.mjs"
	else
		run_test image-smoke.mjs node "$here/tests/e2e/image-smoke.mjs" base
	fi
fi

# Proof that the tests talked to this daemon, and that they cleaned up.
report_tests
alive
sleep 0.5 # the last events in flight
created=$(grep -c '"Action":"create"' "$logs/events.json" || true)
left=$(docker ps -aq | wc -l)
if [ ${#test_pids[@]} = 0 ]; then
	tap_line ok "no test ran on this dockerd # SKIP every program chosen was skipped"
elif [ "$created" -gt 0 ] && [ "$left" = 0 ]; then
	tap_line ok "the tests ran $created containers on this dockerd; none is left"
else
	tap_line "not ok" "the tests ran $created containers on this dockerd; $left left"
fi
echo "1..$n"
say "dockerd run: $((n - failed)) of $n ok; tests $(($(date +%s) - t_tests)) s, total $(($(date +%s) - t_start)) s"
[ $failed = 0 ]
