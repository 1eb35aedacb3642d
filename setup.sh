#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Installs, builds and starts demesne on a Debian or Ubuntu machine:
#   1. Debian packages (compiler, libraries, Podman with runc, mmdebstrap),
#   2. Podman's configuration, if the machine has none, and the host ids
#      for sandboxes' user namespaces (/etc/subuid, /etc/subgid),
#   3. demesne itself (configure and make in build/, make install to /usr/local),
#   4. the base, python, node, claude-code and codex images, from Debian and
#      npm packages (no container registry; the others are built on first use),
#   5. a first sandbox run, which finds or starts Podman by itself.
# Run as root (or with sudo). Safe to run again: each step skips what is done.
#
#   --no-install   build (in build/) but do not `make install`
#   --no-run       stop before the first sandbox run
#   --test-deps    also install what the test suite needs (npm clients, docker.io)
#   --no-build     only the packages (and with --test-deps the test clients);
#                  tests/run.sh uses this when something it needs is missing
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
install=1 run=1 test_deps=0 build=1
for arg in "$@"; do
	case $arg in
	--no-install) install=0 ;;
	--no-run) run=0 ;;
	--test-deps) test_deps=1 ;;
	--no-build) build=0 ;;
	-h|--help) sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "setup.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
	esac
done

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (sudo $0): it installs packages and uses rootful Podman"

packages=(
	build-essential autoconf automake libtool pkg-config clang
	libcurl4-openssl-dev libjson-c-dev libseccomp-dev libnl-3-dev libnl-route-3-dev libmicrohttpd-dev libarchive-dev
	libnftnl-dev libmnl-dev
	podman runc catatonit uidmap mmdebstrap iproute2 ca-certificates curl
)
# valgrind for the unit tests; libclang-rt-dev for the libFuzzer target (tests/fuzz/run.sh).
[ $test_deps = 1 ] && packages+=(valgrind libclang-rt-dev clang-format)
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
# tests/run-dockerd.sh runs the integration tests against a private dockerd
# 20.10 too; docker.io brings containerd and tini and shares runc with Podman.
[ $test_deps = 0 ] || packages+=(docker.io)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ ! -e /etc/containers/containers.conf ]; then
	say "writing /etc/containers/containers.conf (runc, cgroupfs, ulimits)"
	install -D -m 0644 "$here/.ci/containers.conf" /etc/containers/containers.conf
elif ! grep -q '^runtime *= *"runc"' /etc/containers/containers.conf; then
	say "note: /etc/containers/containers.conf does not select runc; crun fails on hybrid cgroups (see docs)"
fi

# Rootful Podman runs each sandbox in a user namespace of its own
# (userns=auto), with host ids from the "containers" lines: the range
# Podman's documentation suggests, far above what useradd hands out to
# people. Appended only when the file has no such line; nothing else in the
# files is touched.
add_subids() { # name range
	local f
	for f in /etc/subuid /etc/subgid; do
		[ -e "$f" ] || install -m 0644 /dev/null "$f"
		if ! grep -q "^$1:" "$f"; then
			say "adding '$1:$2' to $f (sandboxes' user namespaces)"
			[ -z "$(tail -c1 "$f")" ] || echo >>"$f"
			echo "$1:$2" >>"$f"
		fi
	done
}
add_subids containers 2147483647:2147483648
# tests/run-dockerd.sh starts dockerd with --userns-remap=default, whose
# user is dockremap: its range is fixed here, below the containers range
# and above what useradd hands out (SUB_UID_MAX 600100000).
if [ $test_deps = 1 ]; then
	getent passwd dockremap >/dev/null ||
		useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin dockremap
	add_subids dockremap 1879048192:65536
fi

if [ $test_deps = 1 ]; then
	say "npm clients for the tests (tests/e2e)"
	npm ci --prefix "$here/tests/e2e" --no-audit --no-fund --loglevel=error >/dev/null
	say "the MCP conformance suite and the Node 22 it needs (tests/conformance)"
	npm ci --prefix "$here/tests/conformance" --no-audit --no-fund --loglevel=error >/dev/null
fi
[ $build = 1 ] || exit 0

# The build is out of tree, in build/, so that tests/run.sh can make its own
# builds beside it: an in-place configure (setup.sh before 0.2) is undone first.
cd "$here"
if [ -f config.status ]; then
	say "the source tree was configured in place by an older setup.sh: make distclean"
	make distclean >/dev/null
fi
if [ ! -x configure ] || [ configure.ac -nt configure ]; then
	say "autoreconf"
	autoreconf -fi >/dev/null 2>&1
fi
mkdir -p "$here/build"
cd "$here/build"
if [ ! -f Makefile ]; then
	say "configure (in build/)"
	../configure -q
fi
say "make"
make -j"$(nproc)" >/dev/null
if [ $install = 1 ]; then
	say "make install (/usr/local)"
	make install >/dev/null
	demesne=/usr/local/bin/demesne
else
	demesne=$here/build/src/demesne
fi

say "images (built from Debian packages; a no-op when up to date)"
DEMESNE_IMAGES_DIR=$here/images "$demesne" images build base python node claude-code codex

if [ $run = 1 ]; then
	say "first sandbox run"
	"$demesne" run --quiet -- bash -c 'echo "demesne works: $(uname -sr) in a sandbox"'
	say "ready: point your MCP client at '$demesne serve' (README: client configuration)"
fi
