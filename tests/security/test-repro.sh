#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The security issue's two reproductions, driven the way a person or an MCP
# client drives the built binary, against the real engine:
#
#  a. `demesne run -- sh -c 'cp /bin/bash /out/s && chmod 4755 /out/s'` must
#     leave no setuid/setgid file owned by root or by a real host user under
#     the output root, whose directories are 0700; another local user cannot
#     get root through what the sandbox wrote.
#  b. `demesne serve` over stdio (the JSON-RPC lines any MCP client sends)
#     with DEMESNE_ALLOW_CALLER_EGRESS=1: allow ["0.0.0.0/0", "example.com"]
#     is refused before anything runs, naming the blocked range; with only a
#     package host allowed, the egress proxy (and a direct connection) reaches
#     none of the host's own services: a web server this test starts on the
#     host, answering a random secret, never sees a request from the sandbox.
#
# After each case: no container with this test's output-root label (asked of
# the engine's API), no demesne veth of the run or of its server, and no
# process this test started. Needs root (the sandbox's veth, and setpriv to
# act as another user).
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
diag() { printf '%s\n' "$@" | sed 's/^/# /'; }

if [ "$(id -u)" != 0 ]; then
	echo "1..0 # SKIP needs root: sandboxes get a veth pair each, and the test acts as another user with setpriv"
	exit 77
fi

tmp=$(mktemp -d /tmp/dm-repro-XXXXXX)
# Traversable, as /tmp and home directories often are: whatever keeps other
# users out of the output must be demesne's own doing.
chmod 755 "$tmp"
root=$tmp/out
# Only demesne's processes get the output root, so that any process left
# with it in its environment is one this test started (see nothing_left).
dm=(env DEMESNE_OUTPUT_ROOT="$root" DEMESNE_STATE_DIR="$tmp/state" "${DEMESNE:?DEMESNE must name the binary}")
unset DEMESNE_OUTPUT_ROOT DEMESNE_STATE_DIR DEMESNE_ALLOWED_PATHS DEMESNE_ALLOW_CALLER_EGRESS DEMESNE_PROXY_HOSTS DEMESNE_EGRESS_PACKAGE_HOSTS
engine=${DEMESNE_ENGINE_HOST:-${DOCKER_HOST:-${CONTAINER_HOST:-unix:///run/podman/podman.sock}}}
# DEMESNE_TEST_IMAGE: run the sandboxes in that image instead of the default
# (python); tests/run-dockerd.sh --images base uses it.
img=${DEMESNE_TEST_IMAGE:-python}

# Every process this test starts and has not reaped yet, killed by PID at the
# end (a reaped PID may belong to someone else by then: it is dropped).
declare -A live=()
reaped() { unset "live[$1]"; }
cleanup() {
	local p
	for p in "${!live[@]}"; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT

# --- what is left behind ---------------------------------------------------

# The label demesne puts on every container of a server of this output root
# (root_label: FNV-1a of DEMESNE_OUTPUT_ROOT as given, src/core/context.c).
. "${top_srcdir:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)}/tests/e2e/lib/left.sh"
label=$(root_label "$root")

# Containers (running or not) with this test's label, as the engine lists them.
containers() {
	case $engine in
	unix://*) ;;
	*) echo "engine at '$engine' is not a unix socket"; return 1 ;;
	esac
	curl -s -m 10 --unix-socket "${engine#unix://}" -G "http://engine/containers/json" \
		--data-urlencode all=true --data-urlencode "filters={\"label\":[\"$label\"]}" |
		grep -o '"Id":"[0-9a-f]*"'
}

# demesne links whose alias ("demesne <run or sandbox id> <owner>") names
# this run or this server (the owner is "<boot>-<pid>-<start>").
links_of() {
	ip -o link show | grep -o 'alias demesne .*' | grep -F -e " $1 " -e "-$2-"
}

# Processes with this test's output root in their environment: demesne and
# whatever it started.
processes() {
	local e
	for e in /proc/[0-9]*/environ; do
		grep -qxzF "DEMESNE_OUTPUT_ROOT=$root" "$e" 2>/dev/null && echo "${e%/environ}: $(tr '\0' ' ' <"${e%/environ}/cmdline")"
	done
}

# Asserts nothing of one case is left: containers, veths, processes.
nothing_left() {
	local what=$1 run=$2 pid=$3 left i
	for ((i = 0; i < 20; i++)); do
		left=$(containers)
		[ -z "$left" ] && break
		sleep 0.5
	done
	[ -z "$left" ]; ok $? "$what: no container with this test's label $label is left"
	[ -n "$left" ] && diag "$left"
	left=$(links_of "${run:-no-run-id}" "$pid")
	[ -z "$left" ]; ok $? "$what: no demesne veth of the run or its server (pid $pid) is left"
	[ -n "$left" ] && diag "$left"
	left=$(processes; pgrep -af -- "$tmp")
	[ -z "$left" ]; ok $? "$what: no demesne process of this output root and nothing referring to the test's directory is left"
	[ -n "$left" ] && diag "$left"
}

# The control: while a run is going the query above does see its container,
# so the "nothing left" checks below are not vacuous. The run holds until
# the test has looked (a file go in its /out), or at most 4 s.
"${dm[@]}" run -q --image "$img" -- sh -c 'i=0; while [ ! -e /out/go ] && [ $i -lt 40 ]; do sleep 0.1; i=$((i + 1)); done' \
	>/dev/null 2>"$tmp/control.err" &
control=$!
live[$control]=1
seen=
while kill -0 "$control" 2>/dev/null; do	# not reaped yet: still ours
	seen=$(containers) && break
	sleep 0.25
done
for d in "$root"/run-*/; do [ -d "$d" ] && : >"$d/go"; done
[ -n "$seen" ]; ok $? "control: the engine lists a running run's container by the label $label"
wait "$control"; ok $? "control: the run succeeds"
reaped "$control"
[ -s "$tmp/control.err" ] && diag "$(cat "$tmp/control.err")"
nothing_left "control" "" "$control"

# --- a. a setuid file written to /out ----------------------------------------

"${dm[@]}" run --image "$img" -- sh -c 'cp /bin/bash /out/s && chmod 4755 /out/s' >"$tmp/a.out" 2>"$tmp/a.err" &
pid=$!
live[$pid]=1
wait "$pid"
rc=$?
reaped "$pid"
diag "demesne run exited $rc; its stderr:" "$(cat "$tmp/a.err")"
dir=$(sed -n 's/^demesne: output in //p' "$tmp/a.err")
[ -n "$dir" ] && [ -d "$dir" ]; ok $? "a: the run happened and named its output directory"

bad=
while IFS= read -r -d '' f; do
	uid=$(stat -c %u "$f")
	if [ "$uid" = 0 ] || getent passwd "$uid" >/dev/null; then
		bad+="$(stat -c '%A %U(%u) %n' "$f")"$'\n'
	fi
done < <(find "$root" -type f \( -perm -4000 -o -perm -2000 \) -print0 2>/dev/null)
[ -z "$bad" ]; ok $? "a: no setuid or setgid file owned by root or a host user under the output root"
[ -n "$bad" ] && diag "$bad"

mode=$(stat -c %a "$root" 2>/dev/null)
[ "$mode" = 700 ]; ok $? "a: the output root is 0700 (it is $mode)"
mode=$(stat -c %a "${dir:-/nonexistent}" 2>/dev/null)
[ "$mode" = 700 ]; ok $? "a: the run's directory is 0700 (it is $mode)"
loose=$(find "$root" -mindepth 1 -maxdepth 1 -type d ! -perm 700 -printf '%m %p\n')
[ -z "$loose" ]; ok $? "a: every run directory under the output root is 0700"
[ -n "$loose" ] && diag "$loose"

# The attack itself: another local user runs what the sandbox left. Through a
# shell: setpriv keeps root's capabilities until its own execve, so the path
# must be looked up by a process that has none.
got=$(cd / && timeout 10 setpriv --reuid=65534 --regid=65534 --clear-groups -- \
	/bin/sh -c '"$1" -p -c "id -u"' sh "${dir:-/nonexistent}/s" 2>&1)
[ "$got" != 0 ]; ok $? "a: user nobody cannot become root through /out/s (got: $got)"
nothing_left "a" "$(basename "${dir:-none}")" "$pid"

# --- b. the egress proxy and the host's own services -------------------------

secret=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
cat >"$tmp/web.js" <<'EOF'
// Answers every request with the secret; logs who asked.
const http = require('http'), fs = require('fs');
const [secret, log] = process.argv.slice(2);
const s = http.createServer((q, r) => {
  fs.appendFileSync(log, `${q.socket.remoteAddress} ${q.method} ${q.url}\n`);
  r.end(`${secret}\n`);
});
s.listen(0, '0.0.0.0', () => console.log(s.address().port));
EOF
: >"$tmp/web.log"
node "$tmp/web.js" "$secret" "$tmp/web.log" >"$tmp/web.port" &
web=$!
live[$web]=1
for ((i = 0; i < 50; i++)); do [ -s "$tmp/web.port" ] && break; sleep 0.1; done
port=$(cat "$tmp/web.port")
[ "$(curl -s -m 5 "http://127.0.0.1:$port/")" = "$secret" ]
ok $? "b: control: the host's web server on port $port answers the secret on 127.0.0.1"

# The host's own non-loopback addresses (outside the sandbox pool, whose host
# sides come and go with other tests' sandboxes; the sandbox's own gateway is
# added inside it, from $HTTP_PROXY).
hostaddrs=$(ip -4 -o addr show scope global | awk '{ split($4, a, "/"); print a[1] }' | grep -v '^10\.213\.' | sort -u | tr '\n' ' ')
diag "host addresses probed: ${hostaddrs:-none} and the sandbox's gateway"

# Every way to the host's port from inside: the proxy as an HTTP proxy and as
# a CONNECT tunnel (forced, whatever NO_PROXY says), and directly.
probe="gw=\${HTTP_PROXY#http://}; gw=\${gw%%:*}; for a in 127.0.0.1 $hostaddrs \$gw; do"
probe+=" echo \"== \$a\"; curl -s -m 5 --noproxy '' -x \"\$HTTP_PROXY\" http://\$a:$port/;"
probe+=" curl -s -m 5 --noproxy '' -p -x \"\$HTTP_PROXY\" http://\$a:$port/;"
probe+=" [ \$a = 127.0.0.1 ] || curl -s -m 2 --noproxy '*' http://\$a:$port/; done; echo probe-done"
json_str() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }

coproc SERVE { DEMESNE_ALLOW_CALLER_EGRESS=1 exec "${dm[@]}" serve 2>"$tmp/serve.err"; }
serve=$SERVE_PID
live[$serve]=1
# Own copies of the pipe ends (bash may close a coproc's own in subshells);
# the originals are closed so that closing ours is the end of its stdin.
exec {to_serve}>&"${SERVE[1]}" {from_serve}<&"${SERVE[0]}"
eval "exec ${SERVE[1]}>&- ${SERVE[0]}<&-"

# Sends one request; prints the response line with that id (300 s at most:
# make check runs tests side by side on a machine that may be loaded).
rpc() {
	rpc_send "$@" && rpc_wait "$1"
}
rpc_send() {
	printf '{"jsonrpc":"2.0","id":%s,%s}\n' "$1" "$2" >&"$to_serve"
}
rpc_wait() {
	local id=$1 line deadline=$((SECONDS + 300))
	while ((SECONDS < deadline)); do
		IFS= read -r -t 5 line <&"$from_serve" || { kill -0 "$serve" 2>/dev/null && continue; return 1; }
		case $line in "{\"jsonrpc\":\"2.0\",\"id\":$id,"*) printf '%s\n' "$line"; return 0 ;; esac
	done
	return 1
}
call_send() {
	rpc_send "$1" "\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_script\",\"arguments\":$2}"
}
call() {
	call_send "$@" && rpc_wait "$1"
}
# One field of a tools/call response, by a JavaScript path from the message.
field() { node -e 'const m = JSON.parse(require("fs").readFileSync(0, "utf8")); const v = eval(process.argv[1]); console.log(v === undefined ? "" : v)' "$1"; }

rpc 1 '"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test-repro","version":"0"}}' >"$tmp/init.json"
ok $? "b: demesne serve answers initialize over stdio"
printf '%s\n' '{"jsonrpc":"2.0","method":"notifications/initialized"}' >&"$to_serve"

call 2 "{\"image\":\"$img\",\"command\":\"$(json_str "$probe")\",\"allow\":[\"0.0.0.0/0\",\"example.com\"]}" >"$tmp/b1.json"
ok $? "b: the call with allow [0.0.0.0/0, example.com] is answered"
is_error=$(field 'm.result?.isError' <"$tmp/b1.json")
text=$(field 'm.result?.content?.[0]?.text' <"$tmp/b1.json")
ran=$(field 'm.result?.structuredContent?.exit_code' <"$tmp/b1.json")
[ "$is_error" = true ] && [ -z "$ran" ]; ok $? "b: allow 0.0.0.0/0 is refused before anything runs"
grep -q '0\.0\.0\.0/0' <<<"$text" && grep -Eqi 'loopback|range|block|overlap|refus|not allowed|forbidden' <<<"$text"
ok $? "b: the refusal names the entry and the blocked range"
diag "answer: $(head -c 2000 <<<"$text")"
! grep -qF "$secret" "$tmp/b1.json"; ok $? "b: the secret is not in that answer"

call_send 3 "{\"image\":\"$img\",\"command\":\"$(json_str "$probe; sleep 2")\",\"allow\":[\"example.com\"]}"
# The control for the veth checks: while the call runs, its pair is there
# (looked for up to 60 s: setting a sandbox up is slow on a loaded machine).
seen=
for ((i = 0; i < 600; i++)); do
	seen=$(links_of no-run-id "$serve") && break
	sleep 0.1
done
[ -n "$seen" ]; ok $? "b: control: while the call runs, its veth is listed by the server's pid in its alias"
rpc_wait 3 >"$tmp/b2.json"
ok $? "b: the call with an allowed package host (example.com) is answered"
out=$(field 'm.result?.structuredContent?.stdout' <"$tmp/b2.json")
run=$(field 'm.result?.structuredContent?.run_id' <"$tmp/b2.json")
grep -q '^probe-done' <<<"$out"; ok $? "b: the probe ran inside the sandbox"
diag "$(head -c 3000 <<<"$out")"
! grep -qF "$secret" "$tmp/b2.json"
ok $? "b: through the proxy (HTTP and CONNECT) and directly, neither 127.0.0.1 nor a host address returns the secret"
# The container, and its veth with it, are removed just after the answer.
for ((i = 0; i < 600; i++)); do
	links=$(links_of "${run:-no-run-id}" no-pid) || break
	sleep 0.1
done
[ -n "$run" ] && [ -z "$links" ]; ok $? "b: the run's veth is gone within 60 s of its answer"

others=$(grep -cv '^127\.0\.0\.1 GET /$' "$tmp/web.log"; true)
[ "$(wc -l <"$tmp/web.log")" = 1 ] && [ "$others" = 0 ]
ok $? "b: the host's web server saw no request but the test's own control"
[ "$(wc -l <"$tmp/web.log")" = 1 ] || diag "web server log:" "$(cat "$tmp/web.log")"

# The client goes away: the server must end and take everything with it.
exec {to_serve}>&- {from_serve}<&-
for ((i = 0; i < 1200; i++)); do kill -0 "$serve" 2>/dev/null || break; sleep 0.1; done
! kill -0 "$serve" 2>/dev/null; ok $? "b: demesne serve exits when its stdin closes"
kill -TERM "$serve" 2>/dev/null
wait "$serve" 2>/dev/null
reaped "$serve"
kill "$web" 2>/dev/null
wait "$web" 2>/dev/null
reaped "$web"
nothing_left "b" "${run:-}" "$serve"
[ -s "$tmp/serve.err" ] && diag "serve stderr (tail):" "$(tail -n 20 "$tmp/serve.err")"

echo "1..$n"
echo "repro: $((n - failed)) passed, $failed failed"
[ $failed = 0 ]
