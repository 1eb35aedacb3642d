#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# `make installcheck`: the installed demesne, not the build tree's, builds
# images and runs them. Usage: tests/installcheck.sh BINDIR PKGDATADIR
#   1. the install holds everything images/build.sh needs (no image the
#      source tree built is "stale" for the installed copy: same inputs),
#   2. in a repository of its own it builds base (Debian packages only,
#      mmdebstrap) and node (npm packages fetched on the host) with the
#      installed build script, and
#   3. runs a command in each through the installed demesne and its shim;
# then removes every image under its repository (by id: an image tagged
# both :latest and :<inputs hash> outlives a delete by name) and checks that
# none is left. TAP.
set -uo pipefail
bindir=${1:?bindir} pkgdatadir=${2:?pkgdatadir}
demesne=$bindir/demesne
unset DEMESNE_IMAGES_DIR DEMESNE_SHIM DEMESNE
repo=localhost/demesne-installcheck-$$
n=0 failed=0
tap() { n=$((n + 1)); echo "$1 $n - $2"; [ "$1" = ok ] || failed=1; }
check() { local what=$1; shift; if "$@"; then tap ok "$what"; else tap "not ok" "$what"; fi; }

scratch=$(mktemp -d /tmp/demesne-installcheck-XXXXXX)
# The engine the installed demesne is told to use, and the one this script
# asks: the same, or the check that nothing is left would look at the
# wrong store. Without DOCKER_HOST, demesne finds root's
# /run/podman/podman.sock or the user's rootless one, or starts a private
# service that is gone once the command ends; so when neither answers,
# this script starts its own (stopped by PID at exit) and points
# DOCKER_HOST at it.
engine_ok() { curl -sf --max-time 2 --unix-socket "${1#unix://}" http://d/_ping >/dev/null 2>&1; }
service_pid=
if [ -z "${DOCKER_HOST:-}" ]; then
	for sock in /run/podman/podman.sock ${XDG_RUNTIME_DIR:+"$XDG_RUNTIME_DIR/podman/podman.sock"}; do
		engine_ok "$sock" && { export DOCKER_HOST=unix://$sock; break; }
	done
fi
if [ -z "${DOCKER_HOST:-}" ]; then
	podman system service --time=0 "unix://$scratch/podman.sock" >"$scratch/podman.log" 2>&1 &
	service_pid=$!
	for _ in $(seq 100); do engine_ok "$scratch/podman.sock" && break; sleep 0.1; done
	export DOCKER_HOST=unix://$scratch/podman.sock
fi
engine=$DOCKER_HOST
case $engine in
unix://*) ;;
*) echo "Bail out! installcheck needs an engine on a unix socket, not '$engine'"; exit 1 ;;
esac
# The ids of the images with a reference under $repo/ (a tag, a digest, or
# the history of a build's untagged intermediate image): the
# engine's image list split into one record per image.
repo_images() {
	local list
	# An engine that does not answer must not read as "no image left".
	list=$(curl -sf --max-time 30 --unix-socket "${engine#unix://}" 'http://d/images/json?all=true') ||
		{ echo "engine-did-not-answer"; return 1; }
	printf '%s' "$list" |
		awk -v RS='[{]"Id":"' -v r="\"$repo/" 'NR > 1 && index($0, r) { print substr($0, 1, index($0, "\"") - 1) }'
}
remove_images() {
	local id pass
	# node is base's child: a second pass takes what the first could not.
	for pass in 1 2 3; do
		for id in $(repo_images); do
			curl -sf --unix-socket "${engine#unix://}" -X DELETE "http://d/images/$id?force=1" >/dev/null 2>&1
		done
	done
}
cleanup() {
	remove_images
	if [ -n "$service_pid" ]; then
		kill "$service_pid" 2>/dev/null
		wait "$service_pid" 2>/dev/null
	fi
	rm -rf "$scratch"
}
trap cleanup EXIT
export DEMESNE_OUTPUT_ROOT=$scratch/out

check "the engine at $engine answers (the one the installed demesne uses)" engine_ok "$engine"
check "the installed demesne runs" sh -c '"$0" --version >/dev/null' "$demesne"
check "build.sh and lib.sh are installed side by side" test -x "$pkgdatadir/images/build.sh" -a -f "$pkgdatadir/images/lib.sh"
check "the skills are installed, one folder each" test -f "$pkgdatadir/skills/verify-and-retry/SKILL.md"
# The installed server serves them from pkgdatadir (not from the source tree).
out=$(printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"i","version":"1"}}}' \
	'{"jsonrpc":"2.0","id":2,"method":"skills/list"}' | "$demesne" serve 2>"$scratch/serve.err" | grep '"id":2')
skills=$(printf '%s' "$out" | grep -o '"uri":"skill://[a-z0-9-]*/SKILL.md","frontmatter"' | wc -l)
[ "$skills" -ge 5 ] && grep -q "skills: serving $skills from '$pkgdatadir/skills'" "$scratch/serve.err" &&
	tap ok "the installed server lists the $skills installed skills (skills/list)" ||
	{ tap "not ok" "the installed server lists the installed skills: $skills"; sed 's/^/#   /' "$scratch/serve.err"; }
"$demesne" images list >"$scratch/list" 2>&1
if grep -q stale "$scratch/list"; then
	tap "not ok" "the installed image inputs match the source tree's (a file is missing from the install):"
	sed 's/^/#   /' "$scratch/list"
else
	tap ok "the installed image inputs match the source tree's"
fi

if DEMESNE_IMAGE_REPO=$repo "$demesne" images build node >"$scratch/build.log" 2>&1; then
	tap ok "the installed demesne builds base (Debian packages) and node (npm packages)"
else
	tap "not ok" "the installed demesne builds base and node:"
	tail -30 "$scratch/build.log" | sed 's/^/#   /'
fi
out=$(DEMESNE_IMAGE_REPO=$repo "$demesne" run --quiet --image base -- cat /etc/debian_version 2>"$scratch/run1.err")
[[ $out =~ ^12\. ]] && tap ok "a command runs in the base image it built (Debian $out)" ||
	{ tap "not ok" "base runs: '$out'"; sed 's/^/#   /' "$scratch/run1.err"; }
out=$(DEMESNE_IMAGE_REPO=$repo "$demesne" run --quiet --image node -- node -e 'console.log(6 * 7)' 2>"$scratch/run2.err")
[ "$out" = 42 ] && tap ok "a command runs in the node image it built" ||
	{ tap "not ok" "node runs: '$out'"; sed 's/^/#   /' "$scratch/run2.err"; }
remove_images
left=$(repo_images | wc -l)
[ "$left" = 0 ] && tap ok "no image under $repo is left behind" ||
	tap "not ok" "$left image(s) under $repo left behind: $(repo_images | cut -c1-12 | tr '\n' ' ')"
echo "1..$n"
exit $failed
