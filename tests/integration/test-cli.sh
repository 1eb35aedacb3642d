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

# The cases that need root, each a function: a normal user's run skips
# them ("needs root"), and DEMESNE_TEST_ROOT_ONLY=1 runs only them (.ci/run
# runs them so as root under ThreadSanitizer after the rootless run, whose
# other cases need nothing root has).
# A normal user's doctor, run as nobody by root.
root_case_doctor_nobody() {
	if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
		# A normal user: the account line says so; egress does not depend on
		# root any more (listeners in each sandbox's namespace), so with no
		# engine the reason given is the engine, never the account.
		mkdir -m 0777 "$tmp/nobody" && chmod 0755 "$tmp"
		runuser -u nobody -- env HOME="$tmp/nobody" DEMESNE_OUTPUT_ROOT="$tmp/nobody/out" DEMESNE_STATE_DIR="$tmp/nobody/state" \
			DEMESNE_START_PODMAN=0 DEMESNE_ENGINE_HOST=unix:///nonexistent/engine.sock "$bin" doctor >"$tmp/doctor-nobody" 2>/dev/null
		[ "$(sed -n 1p "$tmp/doctor-nobody")" = "account: nobody (uid $(id -u nobody), not root)" ] &&
			grep -q '^unavail egress modes: none; default egress is none; only these: no engine' "$tmp/doctor-nobody" &&
			grep -q '^unavail agent tools (sandbox_agent, sandbox_research): unavailable, the vendor proxy needs egress: no engine' "$tmp/doctor-nobody" &&
			! grep -qi 'needs root\|does not run as root' "$tmp/doctor-nobody"
		ok $? "doctor as a normal user names it, and blames the missing engine (not the account) for egress and the agent tools"
		chmod 0700 "$tmp"
	else
		echo "ok $((n += 1)) # SKIP a normal user's doctor needs root to switch to nobody"
	fi
}
# build.sh drives the engine demesne talks to. The podman CLI uses this
# user's own store, which is the engine's only when its socket is ours: on
# another user's socket, build.sh gets CONTAINER_HOST (podman --remote). A
# Podman service of our own, on a socket handed to another owner; a stand-in
# build.sh prints what it was given.
root_case_socket_owner() {
	if [ "$(id -u)" = 0 ] && command -v podman >/dev/null 2>&1 && [ "${DEMESNE_ENGINE:-podman}" = podman ]; then
		mkdir -p "$tmp/standin"
		printf '#!/bin/bash\necho "engine=${DEMESNE_ENGINE-unset} host=${CONTAINER_HOST-unset} docker=${DOCKER_HOST-unset}" >&2\n' >"$tmp/standin/build.sh"
		podman system service --time=0 "unix://$tmp/podman.sock" >/dev/null 2>&1 &
		ppid_=$!
		for _ in $(seq 100); do curl -sf --unix-socket "$tmp/podman.sock" http://d/_ping >/dev/null 2>&1 && break; sleep 0.1; done
		DEMESNE_ENGINE_HOST=unix://$tmp/podman.sock DEMESNE_START_PODMAN=0 DEMESNE_IMAGES_DIR=$tmp/standin \
			"$bin" images build base >/dev/null 2>"$tmp/own"
		chown 65534:65534 "$tmp/podman.sock"
		DEMESNE_ENGINE_HOST=unix://$tmp/podman.sock DEMESNE_START_PODMAN=0 DEMESNE_IMAGES_DIR=$tmp/standin \
			"$bin" images build base >/dev/null 2>"$tmp/other"
		kill "$ppid_"
		wait "$ppid_" 2>/dev/null
		grep -q '^engine=podman host=unset' "$tmp/own"
		ok $? "on a Podman socket of its own user, build.sh uses the podman CLI's own store ($(tr '\n' ' ' <"$tmp/own"))"
		grep -q "^engine=podman host=unix://$tmp/podman.sock docker=" "$tmp/other"
		ok $? "on another user's Podman socket, build.sh gets it as CONTAINER_HOST ($(tr '\n' ' ' <"$tmp/other"))"
	else
		echo "ok $((n += 1)) # SKIP needs root and podman, to hand a Podman socket to another owner"
		echo "ok $((n += 1)) # SKIP needs root and podman, to hand a Podman socket to another owner"
	fi
}
if [ "${DEMESNE_TEST_ROOT_ONLY:-0}" = 1 ]; then
	[ "$(id -u)" = 0 ] || { echo "Bail out! DEMESNE_TEST_ROOT_ONLY=1 runs the cases that need root: run it as root"; exit 99; }
	root_case_doctor_nobody
	root_case_socket_owner
	echo "1..$n"
	echo "cli: $((n - failed)) passed, $failed failed (DEMESNE_TEST_ROOT_ONLY: the cases that need root)"
	[ $failed = 0 ]
	exit
fi

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
"$bin" run --egress bogus -- true >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "unknown egress 'bogus'" "$tmp/err"; ok $? "bad --egress is a usage error naming it (rc $rc)"
"$bin" run --allow 127.0.0.1 -- true >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "overlaps loopback" "$tmp/err"; ok $? "--allow of the host's loopback is refused (rc $rc)"

# Egress: none by default (no route, no proxy); package-managers gives the
# command the egress proxy (a veth as root, a listener in the sandbox's own
# namespace rootless) without DEMESNE_ALLOW_CALLER_EGRESS.
probe='echo "proxy=${HTTPS_PROXY:-unset} routes=$(tail -n +2 /proc/net/route | wc -l)"'
out=$("$bin" run "${image[@]}" -q -- sh -c "$probe" 2>"$tmp/err")
[ "$out" = "proxy=unset routes=0" ]; ok $? "run's egress is none by default ($out)"
out=$(env -u DEMESNE_ALLOW_CALLER_EGRESS "$bin" run "${image[@]}" -q --egress package-managers -- sh -c "$probe" 2>"$tmp/err")
case $out in proxy=http://*:3128\ *) rc=0 ;; *) rc=1 ;; esac
ok $rc "--egress package-managers gives the command the egress proxy ($out; $(tail -1 "$tmp/err"))"
"$bin" run >/dev/null 2>&1; [ $? = 2 ]; ok $? "no command is a usage error"

"$bin" run "${image[@]}" -- bash -c 'echo kept > /out/result.txt' >/dev/null 2>"$tmp/err"
dir=$(sed -n 's/^demesne: output in //p' "$tmp/err")
[ -n "$dir" ] && [ "$(cat "$dir/result.txt")" = kept ]; ok $? "files written to /out stay in the output directory"

# The doctors the cases below read, all at once: each asks the engine for
# real (a probe container paused, resumed and committed: seconds each), and
# one after another they were most of this test's time. Each runs in its own
# process with its own probe (labelled with its own pid), and writes its
# output to $tmp/NAME and its exit status to $tmp/NAME.rc.
# doctor_bg NAME STDERR [VAR=VALUE | -u VAR]...: STDERR is a file, or
# "out" for stderr into NAME too.
doctor_pids=()
doctor_bg() {
	local name=$1 err=$2
	shift 2
	if [ "$err" = out ]; then
		{ env "$@" "$bin" doctor >"$tmp/$name" 2>&1; echo $? >"$tmp/$name.rc"; } &
	else
		{ env "$@" "$bin" doctor >"$tmp/$name" 2>"$err"; echo $? >"$tmp/$name.rc"; } &
	fi
	doctor_pids+=($!)
}
wait_doctors() { wait "${doctor_pids[@]}"; doctor_pids=(); }
odd="$tmp/out \"q\" \\ '$(printf 'x\ty')"
# A built image tagged into another repository, without today's inputs tag:
# stale. Tagged through the engine's own API (the store doctor reads:
# Podman's or dockerd's), not a CLI that may look at another store; removed
# when the doctors have ended.
engine_sock=${DOCKER_HOST:-unix:///run/podman/podman.sock}
engine_sock=${engine_sock#unix://}
stale=0
[ -z "${DEMESNE_TEST_IMAGE:-}" ] && [ -S "$engine_sock" ] &&
	curl -sf --unix-socket "$engine_sock" -X POST \
		"http://d/images/localhost/demesne/$img:latest/tag?repo=localhost/demesne-doctor-stale/base&tag=latest" >/dev/null &&
	stale=1
doctor_bg doctor out
doctor_bg doctor-cfg /dev/null DEMESNE_ALLOWED_PATHS="$tmp/in dir:/srv"
doctor_bg doctor-odd /dev/null DEMESNE_OUTPUT_ROOT="$odd"
mkdir -p "$tmp/home"
doctor_bg doctor-nokey /dev/null -u ANTHROPIC_API_KEY -u CLAUDE_CODE_OAUTH_TOKEN -u OPENAI_API_KEY -u DEMESNE_CLAUDE_CREDENTIALS \
	-u DEMESNE_CODEX_AUTH HOME="$tmp/home"
doctor_bg doctor-key /dev/null -u OPENAI_API_KEY -u DEMESNE_CODEX_AUTH HOME="$tmp/home" ANTHROPIC_API_KEY=sk-test-only
doctor_bg doctor-shimoff /dev/null DEMESNE_SHIM=off ANTHROPIC_API_KEY=sk-test-only
doctor_bg doctor-repo /dev/null DEMESNE_IMAGE_REPO=localhost/demesne-doctor-test
doctor_bg doctor-nobuild /dev/null DEMESNE_IMAGE_REPO=localhost/demesne-doctor-test DEMESNE_IMAGES_DIR="$tmp/no-images"
[ "$stale" = 0 ] || doctor_bg doctor-stale /dev/null DEMESNE_IMAGE_REPO=localhost/demesne-doctor-stale
doctor_bg doctor-subnet out DEMESNE_SANDBOX_SUBNET=bogus
wait_doctors
[ "$stale" = 0 ] || curl -sf --unix-socket "$engine_sock" -X DELETE "http://d/images/localhost/demesne-doctor-stale/base:latest" >/dev/null
rc=$(cat "$tmp/doctor.rc")
if [ -z "${DEMESNE_TEST_IMAGE:-}" ]; then
	# "all checks passed" only when every advertised feature works; without a
	# vendor credential the agent tools are an 'unavail' line, not a problem.
	[ "$rc" = 0 ] && ! grep -q '^PROBLEM' "$tmp/doctor" &&
		{ grep -q '^all checks passed$' "$tmp/doctor" && ! grep -q '^unavail' "$tmp/doctor" ||
		  grep -q '^no problems, but [0-9]* features\{0,1\} the tools advertise cannot work here' "$tmp/doctor"; }
	ok $? "doctor passes on this machine (rc $rc)"
else
	# Only $img need be there: other images may be reported missing, nothing else.
	! grep '^PROBLEM' "$tmp/doctor" | grep -qv '^PROBLEM image [a-z]*: missing' &&
		grep -Eq "^ok +image $img: " "$tmp/doctor"
	ok $? "doctor finds $img, and no problem but other images not built (rc $rc)"
fi
grep -q '^ok      container engine' "$tmp/doctor"; ok $? "doctor names the engine"
grep -q "^ok      egress package-managers hosts (with each image's label demesne.package-hosts): pypi.org, " "$tmp/doctor"
ok $? "doctor lists the hosts egress package-managers reaches"
# The configuration to paste: this binary, absolute, and the variables set.
self=$(readlink -f "$bin")
# Who runs it and in which engine mode, in the first lines.
me=$(id -un) uid=$(id -u)
[ "$uid" = 0 ] && role=root || role="not root"
[ "$(sed -n 1p "$tmp/doctor-cfg")" = "account: $me (uid $uid, $role)" ]; ok $? "doctor's first line names the account"
sed -n 2p "$tmp/doctor-cfg" | grep -Eq '^engine mode: (rootful Podman|rootless Podman|rootless dockerd|dockerd with userns-remap|dockerd without userns-remap|OpenSandbox)'
ok $? "doctor's second line names the engine mode"

grep '^{"mcpServers"' "$tmp/doctor-cfg" >"$tmp/mcp.json" &&
	[ "$(jq -r .mcpServers.demesne.command "$tmp/mcp.json")" = "$self" ] &&
	[ "$(jq -r '.mcpServers.demesne.args | join(" ")' "$tmp/mcp.json")" = serve ] &&
	[ "$(jq -r .mcpServers.demesne.env.DEMESNE_ALLOWED_PATHS "$tmp/mcp.json")" = "$tmp/in dir:/srv" ] &&
	[ "$(jq -r .mcpServers.demesne.env.DEMESNE_OUTPUT_ROOT "$tmp/mcp.json")" = "$DEMESNE_OUTPUT_ROOT" ]
ok $? "doctor prints .mcp.json that jq parses, with the binary's absolute path and the variables"
claude_line=$(grep '^claude mcp add demesne ' "$tmp/doctor-cfg")
eval "set -- ${claude_line#claude mcp add demesne }"
# DOCKER_HOST too when set: the client's server must reach this engine (and its image store).
dh=() && [ -n "${DOCKER_HOST:-}" ] && dh=(-e "DOCKER_HOST=$DOCKER_HOST")
[ "$*" = "${dh[*]}${dh:+ }-e DEMESNE_ALLOWED_PATHS=$tmp/in dir:/srv -e DEMESNE_OUTPUT_ROOT=$DEMESNE_OUTPUT_ROOT -- $self serve" ] &&
	[ "$#" = $((7 + ${#dh[@]})) ]
ok $? "doctor prints a claude mcp add line that a shell splits into the right words"
grep -A3 -x '\[mcp_servers.demesne\]' "$tmp/doctor-cfg" | grep -qx "command = \"$self\""
ok $? "doctor prints Codex's [mcp_servers.demesne] table"

[ "$(grep '^{"mcpServers"' "$tmp/doctor-odd" | jq -r .mcpServers.demesne.env.DEMESNE_OUTPUT_ROOT)" = "$odd" ]
ok $? "doctor's JSON keeps quotes, backslashes and control characters of a path"
claude_line=$(grep '^claude mcp add demesne ' "$tmp/doctor-odd")
eval "set -- ${claude_line#claude mcp add demesne }"
[ "${@: -4:1}" = "DEMESNE_OUTPUT_ROOT=$odd" ]; ok $? "doctor's claude mcp add line quotes the same path for the shell"
if python3 -c 'import tomllib' 2>/dev/null; then
	sed -n '/^\[mcp_servers.demesne\]$/,/^$/p' "$tmp/doctor-odd" >"$tmp/codex.toml"
	python3 -c 'import sys, tomllib; t = tomllib.load(open(sys.argv[1], "rb"))["mcp_servers"]["demesne"]; sys.exit(not (t["command"] == sys.argv[2] and t["args"] == ["serve"] and t["env"]["DEMESNE_OUTPUT_ROOT"] == sys.argv[3]))' \
		"$tmp/codex.toml" "$self" "$odd"
	ok $? "doctor's Codex table parses as TOML with the same command and path"
else
	echo "ok $((n += 1)) # SKIP python3 has no tomllib to parse TOML"
fi

# Features: the agent tools depend on a vendor credential, as the server decides.
rc=$(cat "$tmp/doctor-nokey.rc")
grep -q '^unavail agent tools (sandbox_agent, sandbox_research): unavailable, no vendor credential: Claude Code: no ANTHROPIC_API_KEY' "$tmp/doctor-nokey" &&
	! grep -q 'all checks passed' "$tmp/doctor-nokey"
ok $? "doctor without a vendor credential says the agent tools cannot work, and not 'all checks passed' (rc $rc)"
grep -q '^feature agent tools (sandbox_agent, sandbox_research): available with Claude Code (Anthropic)$' "$tmp/doctor-key"
ok $? "doctor with ANTHROPIC_API_KEY names the provider the agent tools use"
grep -Eq '^(feature|unavail) egress modes: none' "$tmp/doctor" &&
	grep -Eq '^(feature|unavail) seccomp filter \(demesne-shim\)' "$tmp/doctor"
ok $? "doctor says whether egress and seccomp are available"
# Asked of the engine for real (a probe paused and committed), and of CRIU.
grep -Eq '^(feature|unavail) pause \(sandbox_pause, sandbox_resume\): ' "$tmp/doctor" &&
	grep -Eq '^(feature|unavail) snapshots \(sandbox_snapshot: the engine.s commit\): ' "$tmp/doctor" &&
	grep -q '^note    memory snapshots (CRIU): not offered' "$tmp/doctor"
ok $? "doctor says whether pause and snapshots work on this engine, and what CRIU says"

# The agent tools need what egress needs (a veth for the vendor proxy), as the server decides.
grep -q '^unavail egress modes: none; default egress is none; only these: demesne-shim is off' "$tmp/doctor-shimoff" &&
	grep -q '^unavail agent tools (sandbox_agent, sandbox_research): unavailable, the vendor proxy needs egress: demesne-shim is off (DEMESNE_SHIM=off) (credential found: Claude Code (Anthropic))$' "$tmp/doctor-shimoff" &&
	! grep -q 'all checks passed' "$tmp/doctor-shimoff"
ok $? "doctor with the shim off: egress and agent tools unavailable, with the reason and the credential found"
root_case_doctor_nobody

# Images: not in this store but buildable is a note; not buildable a problem.
grep -q '^note    image python: missing in this user.s engine store, buildable here' "$tmp/doctor-repo" &&
	! grep -q '^PROBLEM image' "$tmp/doctor-repo"
ok $? "doctor notes an image that is not built but can be"
rc=$(cat "$tmp/doctor-nobuild.rc")
[ "$rc" = 1 ] && grep -q "^PROBLEM image python: missing in this user's engine store, and it cannot be built here: the build script '$tmp/no-images/build.sh' is missing" "$tmp/doctor-nobuild" &&
	! grep -q 'all checks passed' "$tmp/doctor-nobuild" && grep -qx 'some checks failed' "$tmp/doctor-nobuild"
ok $? "doctor reports an image it can neither find nor build, and does not end 'all checks passed' (rc $rc)"
# Built but not from today's inputs: build.sh --list's inputs-hash tags say
# stale (the doctor started above, with the tag made before it).
if [ "$stale" = 1 ]; then
	grep -q '^note    image base: built but stale: ' "$tmp/doctor-stale" &&
		grep -q '^note    image python: missing in this user.s engine store, buildable here' "$tmp/doctor-stale"
	ok $? "doctor tells a stale image (inputs tag differs) from a current or missing one"
else
	echo "ok $((n += 1)) # SKIP needs the engine's unix socket (DOCKER_HOST) to tag a stale image"
fi

# --log-file: the log goes there, stderr stays quiet, stdout stays JSON-RPC.
: | "$bin" serve --log-file "$tmp/serve.log" >"$tmp/serve.out" 2>"$tmp/serve.err"; rc=$?
[ "$rc" = 0 ] && grep -q '^demesne: info: serving MCP on stdio' "$tmp/serve.log" && [ ! -s "$tmp/serve.err" ] && [ ! -s "$tmp/serve.out" ] &&
	[ "$(stat -c %a "$tmp/serve.log")" = 600 ]
ok $? "serve --log-file writes the log to a 0600 file, nothing to stderr or stdout (rc $rc)"
lines=$(wc -l <"$tmp/serve.log")
: | "$bin" serve --log-file "$tmp/serve.log" >/dev/null 2>&1
[ "$(wc -l <"$tmp/serve.log")" -gt "$lines" ]; ok $? "serve --log-file appends"
ln -s "$tmp/serve.log" "$tmp/link.log"
: | "$bin" serve --log-file "$tmp/link.log" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "link.log': is a symlink (not followed)" "$tmp/err"; ok $? "serve --log-file refuses a symlink (rc $rc)"
"$bin" serve --log-file "$tmp" </dev/null >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" = 2 ] && grep -q "not a regular file" "$tmp/err"; ok $? "serve --log-file refuses a directory (rc $rc)"
# The log's fd is close-on-exec and append-only: nothing the server starts inherits it.
mkfifo "$tmp/serve.in"
"$bin" serve --log-file "$tmp/serve2.log" <"$tmp/serve.in" >/dev/null 2>&1 &
spid=$!
exec 9>"$tmp/serve.in"
for _ in $(seq 50); do grep -q 'serving MCP on stdio' "$tmp/serve2.log" 2>/dev/null && break; sleep 0.2; done
flags=
for fd in /proc/$spid/fd/*; do
	[ "$(readlink "$fd")" = "$tmp/serve2.log" ] && flags=$(sed -n 's/^flags:[[:space:]]*//p' "/proc/$spid/fdinfo/${fd##*/}")
done
exec 9>&-
wait "$spid"
[ -n "$flags" ] && (( 8#$flags & 02000000 )) && (( 8#$flags & 02000 )); ok $? "serve's log fd has O_CLOEXEC and O_APPEND (flags ${flags:-none})"
"$bin" serve --help | grep -q -- '--log-file PATH'; ok $? "serve --help names --log-file"
out=$("$bin" run "${image[@]}" -q --log-file "$tmp/run.log" -- echo hi 2>"$tmp/err")
[ "$out" = hi ] && grep -q '^demesne: info: ' "$tmp/run.log" && ! grep -q '^demesne: info:' "$tmp/err"
ok $? "run --log-file keeps demesne's log out of the command's stderr"

# Settings are read once, at start: a bad one stops the program and names itself.
for bad in DEMESNE_TRANSFER_MAX=lots DEMESNE_SANDBOX_SWEEP_SECONDS=0; do
	env "$bad" "$bin" run -- true >/dev/null 2>"$tmp/err"; rc=$?
	[ "$rc" != 0 ] && grep -q "${bad%%=*}" "$tmp/err"; ok $? "$bad: refused at start, naming the variable (rc $rc)"
done
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

root_case_socket_owner

echo "1..$n"
echo "cli: $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
