#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Runs the integration, security and end-to-end tests as a normal user on
# rootless Podman: what a person who is not root gets from demesne. Run as
# root; it prepares the user and then runs `make check` as that user.
#   tests/run-rootless.sh               user demesne-ci, images base python node claude-code codex
#   --user NAME       the normal user (made with useradd -m when missing)
#   --images "A B"    the images to copy from root's store (default: base
#                     python node claude-code codex, what `make check` uses:
#                     client-agents runs the real CLIs)
#   --build-dir DIR   the user's build directory (default build-rootless/)
#   --tests "A B"     only these tests (paths as in Makefile.am's TESTS)
#   --tsan            a ThreadSanitizer build (default directory
#                     build-rootless-tsan/) and every test of the suite,
#                     the unit tests too; the tests that skipped themselves
#                     for needing root are listed in needs-root.txt there,
#                     for `DEMESNE_TEST_ROOT_ONLY=1 tests/run.sh --tsan
#                     --build-dir` as root (CI: only the cases that skipped)
# Steps: the user and its /etc/subuid and /etc/subgid ranges; its
# XDG_RUNTIME_DIR (/run/user/UID, 0700); its rootless Podman configuration
# (the files setup.sh writes for a normal user: overlay storage, runc,
# cgroupfs); the images, copied from root's Podman store (podman save | podman
# load as the user, then the :<inputs hash> tag, so `demesne images list`
# and doctor see them as current); the user's Podman API service (stopped
# by PID at the end); the test host (tests/e2e/lib/testhost.sh: a network
# namespace with servers the egress tests reach); then, as the user, a build
# and `make check` with the integration, security and end-to-end tests,
# DOCKER_HOST at the user's socket. Output is TAP, one line per test; each
# test's log is in the build directory. Tests that need root skip themselves
# ("needs root"). DEMESNE_TEST_JOBS: how many tests at once (default: twice
# the cores, as tests/run.sh).
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
user=demesne-ci images="base python node claude-code codex" build='' only='' tsan=0
while [ $# -gt 0 ]; do
	case $1 in
	--user) user=${2:?--user wants a name}; shift ;;
	--images) images=${2:?--images wants names}; shift ;;
	--build-dir) build=${2:?--build-dir wants a directory}; shift ;;
	--tests) only=${2:?--tests wants test paths}; shift ;;
	--tsan) tsan=1 ;;
	-h | --help) sed -n '3,32p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "tests/run-rootless.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	esac
	shift
done
if [ $tsan = 1 ]; then
	build=${build:-$here/build-rootless-tsan}
	configure_args='--enable-werror --enable-sanitizers=thread'
else
	build=${build:-$here/build-rootless}
	configure_args='--enable-werror'
fi

say() { printf '# %s\n' "$*"; }
die() { printf 'Bail out! %s\n' "$*"; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root: it makes the user, its runtime directory and the test host"
command -v podman setpriv >/dev/null || die "needs podman and setpriv: run ./setup.sh"
t_start=$(date +%s)

# ---- the user -------------------------------------------------------------------
if ! getent passwd "$user" >/dev/null; then
	useradd -m -s /bin/bash "$user"
	say "made the user $user"
fi
uid=$(id -u "$user") gid=$(id -g "$user") home=$(getent passwd "$user" | cut -d: -f6)
[ "$uid" != 0 ] || die "--user $user is root"
# useradd gives a new user ranges when login.defs has SUB_UID_COUNT; add
# one after the highest below the rootful "containers" range otherwise.
for f in /etc/subuid /etc/subgid; do
	grep -q "^\\($user\\|$uid\\):" "$f" 2>/dev/null && continue
	start=$(awk -F: '$2 < 1000000000 && $2 + $3 > m { m = $2 + $3 } END { print (m > 100000 ? m : 100000) }' "$f" 2>/dev/null || echo 100000)
	opt=--add-subuids
	[ "$f" = /etc/subgid ] && opt=--add-subgids
	usermod "$opt" "$start-$((start + 65535))" "$user"
	say "added $user's range $start-$((start + 65535)) to $f"
done
runtime=/run/user/$uid
if [ ! -d "$runtime" ]; then
	install -d -m 0700 -o "$uid" -g "$gid" "$runtime"
	say "made $runtime (no login session makes it for $user)"
fi
[ "$(stat -c '%u %a' "$runtime")" = "$uid 700" ] || die "$runtime is not $user's with mode 0700"

# Runs a command as the user, with the environment of a login of its own
# (and user_env). env and setpriv exec: started with &, $! is the command's.
login_env=(PATH=/usr/local/bin:/usr/bin:/bin HOME="$home" USER="$user" LOGNAME="$user"
	XDG_RUNTIME_DIR="$runtime" LANG=C.UTF-8)
become=(setpriv --reuid="$uid" --regid="$gid" --init-groups --)
as_user() {
	env -i "${login_env[@]}" ${user_env[@]+"${user_env[@]}"} "${become[@]}" "$@"
}
user_env=()
as_user test -r "$here/configure.ac" -a -x "$here/tests" ||
	die "$user cannot read the source tree $here: make it readable (every directory above it too)"

# The rootless Podman configuration, as setup.sh writes it for a normal user.
as_user mkdir -p "$home/.config/containers"
[ -e "$home/.config/containers/storage.conf" ] ||
	as_user sh -c 'printf "[storage]\ndriver = \"overlay\"\n" >"$1"' sh "$home/.config/containers/storage.conf"
[ -e "$home/.config/containers/containers.conf" ] ||
	as_user cp "$here/.ci/containers.conf" "$home/.config/containers/containers.conf"
driver=$(as_user podman info --format '{{.Store.GraphDriverName}}' 2>/dev/null) ||
	die "rootless podman does not work for $user: $(as_user podman info 2>&1 | tail -2 | tr '\n' ' ')"
say "$user (uid $uid): rootless $(as_user podman --version), storage $driver"

# ---- images, from root's store ------------------------------------------------
for name in $images; do
	ref=localhost/demesne/$name:latest t0=$(date +%s)
	id=$(podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null) ||
		die "$ref is not in root's Podman store: build it (demesne images build $name)"
	if [ "$(as_user podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null)" = "$id" ]; then
		how="already in $user's store"
	else
		podman save "$ref" | as_user podman load -q >/dev/null || die "podman save $ref | podman load as $user failed"
		how="copied"
	fi
	# save | load keeps the id, the labels and :latest; the inputs tag is
	# added as images/build.sh adds it.
	inputs=$(podman image inspect --format '{{index .Config.Labels "demesne.inputs"}}' "$ref")
	[ -z "$inputs" ] || as_user podman tag "$ref" "localhost/demesne/$name:${inputs:0:12}"
	say "$ref $how in $(($(date +%s) - t0)) s (inputs ${inputs:0:12})"
done

# ---- the user's Podman API service and the test host -------------------------
sock=$runtime/podman/podman.sock service_pid='' testhost=''
ping_ok() { as_user curl -sf --max-time 2 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; }
cleanup() {
	local rc=$?
	set +e
	if [ -n "$service_pid" ]; then
		kill "$service_pid" 2>/dev/null
		wait "$service_pid" 2>/dev/null
		say "stopped $user's Podman API service (pid $service_pid)"
	fi
	[ -z "$testhost" ] || "$here/tests/e2e/lib/testhost.sh" stop "$testhost"
	[ -z "$testhost" ] || rm -rf "$testhost"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if ping_ok; then
	say "$user's Podman API service already answers at $sock: using it"
else
	as_user mkdir -p "$runtime/podman"
	# Not through as_user: a function run with & is a subshell, whose pid
	# is not the service's.
	env -i "${login_env[@]}" "${become[@]}" podman system service --time=0 "unix://$sock" >"$runtime/podman-service.log" 2>&1 &
	service_pid=$!
	for _ in $(seq 100); do ping_ok && break; kill -0 "$service_pid" 2>/dev/null || break; sleep 0.1; done
	ping_ok || die "$user's podman service did not start: $(tail -3 "$runtime/podman-service.log" | tr '\n' ' ')"
	say "$user's Podman API service at $sock (pid $service_pid)"
fi
# The servers the egress tests reach (in a netns dm-testhostN of their own);
# its env file names them for the tests.
testhost=$(mktemp -d /tmp/demesne-testhost-XXXXXX)
chmod 0755 "$testhost"
"$here/tests/e2e/lib/testhost.sh" start "$testhost"
# shellcheck disable=SC1091
. "$testhost/env"
user_env=(DOCKER_HOST="unix://$sock")
# The test programs take tests/run.sh's suppressions through the
# environment (the server has them compiled in).
[ $tsan = 0 ] || user_env+=(TSAN_OPTIONS="suppressions=$here/tests/tsan.supp")
for var in DEMESNE_TEST_HOST DEMESNE_TEST_HOST_GATEWAY DEMESNE_TEST_HOST_UDP_LOG; do
	[ -z "${!var:-}" ] || user_env+=("$var=${!var}")
done

# ---- the build and the tests, as the user -----------------------------------------
cd "$here"
# Root regenerates what the user's make would want to (it cannot write here).
[ -x configure ] && [ configure -nt configure.ac ] && [ Makefile.in -nt Makefile.am ] || autoreconf -fi >/dev/null 2>&1
[ -f config.status ] && die "the source tree is configured in place; run 'make distclean' first"
mkdir -p "$build"
chown "$uid:$gid" "$build"
t_build=$(date +%s)
# shellcheck disable=SC2086 # configure_args: words on purpose
as_user sh -c 'cd "$1" && shift 2 && { [ -f Makefile ] || "$0/configure" -q "$@"; } && make -j"$(nproc)" >/dev/null' "$here" "$build" x $configure_args ||
	die "the build as $user failed in $build"
say "built as $user in $build in $(($(date +%s) - t_build)) s"
# The integration, security and end-to-end tests `make check` knows.
# Under --tsan, every test: this run is the suite's ThreadSanitizer run.
[ $tsan = 1 ] && pick='^tests/' || pick='^tests/(integration|security|e2e)/'
tests=$(as_user make -s -C "$build" -f Makefile -f - print-tests <<<'print-tests: ; @echo $(TESTS)' |
	tr ' ' '\n' | grep -E "$pick" | tr '\n' ' ')
[ -n "$tests" ] || die "no integration, security or e2e test in $build/Makefile"
if [ -n "$only" ]; then
	for t in $only; do
		case " $tests " in *" $t "*) ;; *) die "--tests: $t is not one of the tests this run picks from $build/Makefile ($pick)" ;; esac
	done
	tests=$only
else
	# shellcheck disable=SC2086 # one word per test
	tests=$("$here/tests/slow-first.sh" $tests)
fi
t_tests=$(date +%s)
# A hung test must not hold CI.
# Twice as many tests at once as there are cores, as tests/run.sh runs them
# (DEMESNE_TEST_JOBS sets another number).
jobs=${DEMESNE_TEST_JOBS:-$((2 * $(nproc)))}
case $jobs in '' | *[!0-9]* | 0) die "DEMESNE_TEST_JOBS must be a positive number, not '$jobs'" ;; esac
as_user timeout -k 10 1800 make -C "$build" -k -j"$jobs" check TESTS="$tests" >"$build/rootless-check.log" 2>&1 || true

n=0 failed=0
for t in $tests; do
	n=$((n + 1))
	trs=$build/${t%.*}.trs log=$build/${t%.*}.log
	result=$(sed -n 's/^:global-test-result: //p' "$trs" 2>/dev/null || true)
	passed=$(grep -c '^:test-result: PASS' "$trs" 2>/dev/null || true)
	counts="${passed:-0} passed"
	case $result in
	PASS) printf 'ok %d - %s: %s\n' "$n" "$t" "$counts" ;;
	SKIP) printf 'ok %d - %s # SKIP %s\n' "$n" "$t" "$(grep -m1 -o '# SKIP.*' "$log" 2>/dev/null | cut -c8-)" ;;
	*)
		failed=$((failed + 1))
		printf 'not ok %d - %s: %s, %s\n' "$n" "$t" "${result:-no result}" "$counts"
		# -m: no pipe for grep to be cut off by (pipefail).
		# Each failure with the diagnostics after it (got, want, why).
		{ awk '/^(not ok|Bail out)/ { n++; show = n <= 10; print; next } show && /^#/ { if (++d[n] <= 4) print; next } { show = 0 }' "$log" 2>/dev/null || true; } | sed 's/^/#   /'
		say "  log: $log" ;;
	esac
done
echo "1..$n"
# The tests that skipped all or some of their cases for needing root, for
# a run of them as root.
for t in $tests; do
	grep -qs 'SKIP.*needs root' "$build/${t%.*}.log" && printf '%s\n' "$t"
done >"$build/needs-root.txt" || true
[ ! -s "$build/needs-root.txt" ] || say "skipped for needing root (listed in $build/needs-root.txt): $(tr '\n' ' ' <"$build/needs-root.txt")"
say "rootless run as $user: $((n - failed)) of $n ok; tests $(($(date +%s) - t_tests)) s, total $(($(date +%s) - t_start)) s"
[ $failed = 0 ]
