#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Installs, builds and starts demesne on a Debian or Ubuntu machine:
#   1. Debian packages (compiler, libraries, Podman with runc, mmdebstrap),
#   2. Podman's configuration, if there is none, and the host ids for
#      sandboxes' user namespaces (/etc/subuid, /etc/subgid),
#   3. demesne itself (configure and make in build/, make install to
#      /usr/local as root, to ~/.local as a normal user),
#   4. the base, python, node, claude-code and codex images, from Debian and
#      npm packages (no container registry; the others are built on first use),
#   5. a first sandbox run, which finds or starts Podman by itself, and
#      `demesne doctor`.
# As root: rootful Podman, every feature. As a normal user: rootless Podman
# in that user's own store; sudo is asked for only to install missing Debian
# packages and to add the user's /etc/subuid and /etc/subgid ranges.
# Safe to run again: each step skips what is done.
#
#   --no-install   build (in build/) but do not `make install`
#   --no-run       stop before the first sandbox run
#   --test-deps    also install what the test suite needs (npm clients and
#                  playwright-core, chromium for the browser test; as
#                  root docker.io and dockremap for tests/run-dockerd.sh)
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
	-h|--help) sed -n '3,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "setup.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
	esac
done

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

root=0
[ "$(id -u)" = 0 ] && root=1
user=$(id -un)
# As a normal user, root's part (packages, /etc/subuid) goes through sudo.
as_root() {
	if [ $root = 1 ]; then
		"$@"
	else
		command -v sudo >/dev/null || die "needs root for: $*; there is no sudo: run that as root, then $0 again"
		sudo "$@"
	fi
}

packages=(
	build-essential autoconf automake libtool pkg-config clang
	libcurl4-openssl-dev libjson-c-dev libseccomp-dev libnl-3-dev libnl-route-3-dev libmicrohttpd-dev libarchive-dev nettle-dev libgnutls28-dev
	libnftnl-dev libmnl-dev
	podman runc catatonit uidmap mmdebstrap iproute2 ca-certificates curl jq
)
# valgrind for the unit tests; libclang-rt-dev for the libFuzzer target (tests/fuzz/run.sh).
# chromium for the activity view's browser test (tests/e2e/ui-browser.mjs, through
# playwright-core from tests/e2e/package.json, which downloads no browser of its own).
[ $test_deps = 1 ] && packages+=(valgrind libclang-rt-dev clang-format chromium)
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
# tests/run-dockerd.sh runs the integration tests against a private dockerd
# 20.10 too; docker.io brings containerd and tini and shares runc with Podman.
[ $test_deps = 0 ] || [ $root = 0 ] || packages+=(docker.io)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	[ $root = 1 ] || command -v sudo >/dev/null ||
		die "these Debian packages are missing and there is no sudo to install them: ${missing[*]} (as root: apt-get install ${missing[*]}; then run $0 again)"
	say "installing ${missing[*]}$([ $root = 1 ] || echo ' (with sudo)')"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ $root = 0 ]; then
	# ---- a normal user: rootless Podman in the user's own store --------------
	# Rootless Podman maps the container's ids onto the user's ranges in
	# /etc/subuid and /etc/subgid (useradd gives new users one; older
	# accounts may have none). A missing range is added after the highest
	# range below the rootful "containers" one.
	for f in /etc/subuid /etc/subgid; do
		grep -q "^\($user\|$(id -u)\):" "$f" 2>/dev/null && continue
		start=$(awk -F: '$2 < 1000000000 && $2 + $3 > m { m = $2 + $3 } END { print (m > 100000 ? m : 100000) }' "$f" 2>/dev/null || echo 100000)
		opt=--add-subuids
		[ "$f" = /etc/subgid ] && opt=--add-subgids
		say "adding $user's range $start-$((start + 65535)) to $f (rootless Podman's user namespace; with sudo)"
		as_root usermod "$opt" "$start-$((start + 65535))" "$user"
	done
	# The user's Podman configuration: overlay (Podman's default here is
	# vfs, which copies every image layer in full: slow and large), and the
	# same engine settings as root's (.ci/containers.conf: runc, cgroupfs,
	# file events, exit_command_delay). An existing file is the user's.
	confdir=${XDG_CONFIG_HOME:-$HOME/.config}/containers
	mkdir -p "$confdir"
	if [ ! -e "$confdir/storage.conf" ]; then
		say "writing $confdir/storage.conf (overlay storage)"
		printf '[storage]\ndriver = "overlay"\n' >"$confdir/storage.conf"
	elif ! grep -q '^ *driver *= *"overlay"' "$confdir/storage.conf"; then
		say "keeping $confdir/storage.conf as it is; note: it does not select driver = \"overlay\" (vfs copies every layer: slow and large)"
	else
		say "keeping $confdir/storage.conf as it is"
	fi
	if [ ! -e "$confdir/containers.conf" ]; then
		say "writing $confdir/containers.conf (runc, cgroupfs, ulimits)"
		install -m 0644 "$here/.ci/containers.conf" "$confdir/containers.conf"
	elif ! grep -q '^runtime *= *"runc"' "$confdir/containers.conf"; then
		say "keeping $confdir/containers.conf as it is; note: it does not select runc, and crun fails on hybrid cgroups (see docs)"
	else
		say "keeping $confdir/containers.conf as it is"
	fi
	# Rootless Podman keeps its sockets and runtime state there.
	if [ -z "${XDG_RUNTIME_DIR:-}" ] || [ ! -d "$XDG_RUNTIME_DIR" ] || [ ! -O "$XDG_RUNTIME_DIR" ]; then
		die "XDG_RUNTIME_DIR (${XDG_RUNTIME_DIR:-unset}) is not a directory of $user's: log in through a session that makes /run/user/$(id -u) (ssh, a desktop login; 'su' does not), or run 'sudo loginctl enable-linger $user' and log in again"
	fi
fi

if [ $root = 0 ]; then
	: # the system-wide Podman configuration and the "containers" ids are root's
elif [ ! -e /etc/containers/containers.conf ]; then
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
[ $root = 0 ] || add_subids containers 2147483647:2147483648
# tests/run-dockerd.sh starts dockerd with --userns-remap=default, whose
# user is dockremap: its range is fixed here, below the containers range
# and above what useradd hands out (SUB_UID_MAX 600100000).
if [ $test_deps = 1 ] && [ $root = 1 ]; then
	getent passwd dockremap >/dev/null ||
		useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin dockremap
	add_subids dockremap 1879048192:65536
fi

# npm ci runs in the folder, not with --prefix: --prefix also moves npm's
# global configuration to PREFIX/etc/npmrc, so the machine's own
# (/usr/etc/npmrc: a registry mirror, the cafile of a proxy's CA) was lost
# for every user without the same settings in ~/.npmrc or the environment.
if [ $test_deps = 1 ]; then
	say "npm clients for the tests (tests/e2e)"
	(cd "$here/tests/e2e" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	say "the MCP conformance suite and the Node 22 it needs (tests/conformance)"
	(cd "$here/tests/conformance" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
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
# Root installs to /usr/local, a normal user to ~/.local (no sudo).
prefix=/usr/local
[ $root = 1 ] || prefix=$HOME/.local
mkdir -p "$here/build"
[ -w "$here/build" ] || die "$here/build is not writable by $user (root's setup.sh made it?): remove it, or run as the account that made it"
cd "$here/build"
if [ -f Makefile ] && [ "$(sed -n 's/^prefix = //p' Makefile)" != "$prefix" ]; then
	say "build/ was configured for prefix $(sed -n 's/^prefix = //p' Makefile): configuring again for $prefix"
	rm -f Makefile
fi
if [ ! -f Makefile ]; then
	say "configure (in build/, prefix $prefix)"
	../configure -q --prefix="$prefix"
fi
say "make"
make -j"$(nproc)" >/dev/null
if [ $install = 1 ]; then
	say "make install ($prefix)"
	make install >/dev/null
	demesne=$prefix/bin/demesne
	case ":$PATH:" in
	*":$prefix/bin:"*) ;;
	*) say "note: $prefix/bin is not on your PATH: add it (e.g. in ~/.profile: PATH=\"\$HOME/.local/bin:\$PATH\")" ;;
	esac
else
	demesne=$here/build/src/demesne
fi

say "images in $([ $root = 1 ] && echo "root's" || echo "$user's rootless") Podman store (built from Debian packages; a no-op when up to date)"
DEMESNE_IMAGES_DIR=$here/images "$demesne" images build base python node claude-code codex

if [ $run = 1 ]; then
	say "first sandbox run"
	"$demesne" run --quiet -- bash -c 'echo "demesne works: $(uname -sr) in a sandbox"'
	say "demesne doctor"
	"$demesne" doctor || say "doctor reported a problem above (an 'unavail' line is a feature this account cannot have)"
	say "ready: point your MCP client at '$demesne serve' (README: client configuration)"
fi
