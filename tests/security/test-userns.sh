#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Nothing a sandbox writes gives any host user a privilege: sandboxes run in
# a user namespace (their root is not the host's), and what they leave in
# the output directory goes back to the output root's owner with no setuid
# or setgid bit, in directories only that owner can enter. Against the real
# engine (rootful Podman, or tests/run-dockerd.sh's dockerd with
# --userns-remap); the output root belongs to an unprivileged uid, as when
# root serves a user's directory.
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
bin=${DEMESNE:?DEMESNE must name the binary}
img=${DEMESNE_TEST_IMAGE:-base}
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP needs root: the output root belongs to another uid"; exit 77; }
command -v setpriv >/dev/null || { echo "1..0 # SKIP needs setpriv (util-linux) to act as another uid"; exit 77; }

user=4242 other=4243
tmp=$(mktemp -d /tmp/dm-userns-XXXXXX)
chmod 0755 "$tmp"
coproc_pid= fake_pid=
cleanup() {
	[ -z "$coproc_pid" ] || { kill "$coproc_pid" 2>/dev/null; wait "$coproc_pid" 2>/dev/null; }
	[ -z "$fake_pid" ] || { kill "$fake_pid" 2>/dev/null; wait "$fake_pid" 2>/dev/null; }
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir -m 0700 "$tmp/out"
chown $user:$user "$tmp/out"
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state
unset DEMESNE_ALLOWED_PATHS DEMESNE_ALLOW_HOST_ROOT
as() { local u=$1; shift; setpriv --reuid "$u" --regid "$u" --clear-groups "$@"; }
mode() { stat -c %a "$1"; }

# ---- the reproduction: a setuid shell written to /out -------------------------
# demesne-shim's filter refuses setuid and setgid modes in the sandbox
# (test-seccomp.sh): the first layer.
"$bin" run -q --image "$img" -- sh -c 'cp /bin/bash /out/s && chmod 4755 /out/s' >/dev/null 2>"$tmp/stderr"
rc=$?
[ $rc != 0 ] && grep -q "Operation not permitted" "$tmp/stderr" && [ -z "$(find "$tmp/out" -perm /6000)" ]
ok $? "with the shim, chmod 4755 is refused in the sandbox (rc $rc: $(tail -1 "$tmp/stderr"))"
rm -rf "$tmp"/out/run-*
# The second layer must hold on its own: with the shim off, the engine's
# profile lets chmod 4755 through, and the host gives everything back to the
# owner without setuid bits.
DEMESNE_SHIM=off "$bin" run -q --image "$img" -- sh -c \
	'cp /bin/bash /out/s && chmod 4755 /out/s && cat /proc/self/uid_map >/out/uid_map && mkdir /out/g && chmod 2777 /out/g && cp /bin/bash /out/g/s2 && chmod 6755 /out/g/s2 && mkfifo /out/g/fifo && ln -s /etc/shadow /out/g/link' \
	>"$tmp/stdout" 2>"$tmp/stderr"
rc=$?
ok $rc "the command ran (rc $rc: $(tail -1 "$tmp/stderr"))"
run=$(ls -d "$tmp"/out/run-* 2>/dev/null | head -1)
[ -n "$run" ] && [ -f "$run/s" ]; ok $? "it wrote its setuid shell ($run/s)"
read -r cid hid size <"$run/uid_map" 2>/dev/null
[ "${cid:-x}" = 0 ] && [ "${hid:-0}" != 0 ] && [ "${size:-0}" -gt 0 ]
ok $? "in the sandbox, uid 0 is host uid ${hid:-?} (uid_map '${cid:-} ${hid:-} ${size:-}')"
found=$(find "$tmp/out" -perm /6000 2>/dev/null)
[ -z "$found" ]; ok $? "no setuid or setgid bit is left on the host${found:+: $found}"
foreign=$(find "$tmp/out" ! -user $user -o ! -group $user 2>/dev/null)
[ -z "$foreign" ]; ok $? "everything belongs to the output root's owner (uid $user)${foreign:+; not: $foreign}"
[ "$(mode "$tmp/out")" = 700 ] && [ "$(mode "$run")" = 700 ]
ok $? "the output root and the run directory are 0700 ($(mode "$tmp/out"), $(mode "$run"))"
[ "$(stat -c %F "$run/g/link")" = "symbolic link" ] && [ "$(stat -c %u "/etc/shadow")" = 0 ]
ok $? "a link to /etc/shadow stays a link; the host's /etc/shadow is still root's"
out=$(as $user "$run/s" -p -c 'id -u' 2>&1)
[ "$out" = $user ]; ok $? "the owner running 's -p' stays uid $user (got '$out')"
as $other ls "$run" >/dev/null 2>&1; [ $? != 0 ]; ok $? "another user cannot even list the run directory"
as $user rm -rf "$run" && [ ! -e "$run" ]; ok $? "the owner deletes the run without root"

# ---- inputs only their owner may read are read by the sandbox, read-only ----------
mkdir -m 0700 "$tmp/in" "$tmp/in/dir"
echo 'root only' >"$tmp/in/secret.txt"
echo 'user only' >"$tmp/in/dir/mine.txt"
chmod 0600 "$tmp/in/secret.txt" "$tmp/in/dir/mine.txt"
chown $user:$user "$tmp/in/dir/mine.txt"
out=$("$bin" run -q --image "$img" --file "$tmp/in/secret.txt" --dir "$tmp/in/dir" -- \
	sh -c 'cat /in/secret.txt /in/dir/mine.txt; (echo x >/in/dir/new) 2>/dev/null || echo read-only' 2>"$tmp/err")
[ "$out" = $'root only\nuser only\nread-only' ]
ok $? "mode-0600 inputs of root and of uid $user are readable in the sandbox, and read-only (got '$(tr '\n' '|' <<<"$out")')"
[ "$(stat -c '%u %a' "$tmp/in/secret.txt") $(stat -c '%u %a' "$tmp/in/dir/mine.txt")" = "0 600 $user 600" ] &&
	[ ! -e "$tmp/in/dir/new" ]
ok $? "the inputs on the host are unchanged"
rm -rf "$tmp"/out/run-*

# ---- a persistent sandbox, through MCP ------------------------------------------
meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
# With the shim off, as above: the engine lets chmod 4755 through.
coproc SERVER { DEMESNE_SHIM=off DEMESNE_ALLOWED_PATHS=$tmp/in exec "$bin" serve 2>"$tmp/serve.log"; }
coproc_pid=$SERVER_PID
id=0
call() { # tool args-json -> the response line on stdout
	local line
	id=$((id + 1))
	printf '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s,%s}}\n' \
		$id "$1" "$2" "$meta" >&"${SERVER[1]}"
	while IFS= read -r -t 180 line <&"${SERVER[0]}"; do
		[ "$(jq -r '.id // empty' <<<"$line" 2>/dev/null)" = $id ] && { printf '%s\n' "$line"; return 0; }
	done
	return 1
}
resp=$(call sandbox_create "{\"image\":\"$img\",\"egress\":\"none\",\"files\":[\"$tmp/in/secret.txt\"]}")
sb=$(jq -r '.result.structuredContent.sandbox_id // empty' <<<"$resp")
dir=$(jq -r '.result.structuredContent.output_dir // empty' <<<"$resp")
[ -n "$sb" ] && [ -d "$dir" ]; ok $? "sandbox_create ($sb)"
[ "$(mode "$dir")" = 700 ]; ok $? "its output directory is 0700 ($(mode "$dir"))"
resp=$(call sandbox_exec "{\"sandbox_id\":\"$sb\",\"command\":\"cat /in/secret.txt\"}")
[ "$(jq -r '.result.structuredContent.stdout // empty' <<<"$resp")" = 'root only' ]
ok $? "the sandbox reads its mode-0600 input"
resp=$(call sandbox_exec "{\"sandbox_id\":\"$sb\",\"command\":\"cp /bin/bash /out/s && chmod 4755 /out/s && mkdir -p /out/d/e && chmod 2700 /out/d && echo made && head -1 /proc/self/uid_map\"}")
text=$(jq -r '.result.structuredContent.stdout // empty' <<<"$resp")
read -r _ cid hid _ <<<"$(tr '\n' ' ' <<<"$text")"
[ "$(head -1 <<<"$text")" = made ] && [ "${cid:-x}" = 0 ] && [ "${hid:-0}" != 0 ]
ok $? "sandbox_exec writes a setuid shell; its uid 0 is host uid ${hid:-?}"
resp=$(call sandbox_download "{\"sandbox_id\":\"$sb\",\"src\":\"/out/s\"}")
host=$(jq -r '.result.structuredContent.host_path // empty' <<<"$resp")
[ -f "$host" ] && [ "$(stat -c %u:%g "$host")" = $user:$user ] && [ -z "$(find "$host" -perm /6000)" ]
ok $? "sandbox_download's file belongs to uid $user, with no setuid bit ($(stat -c '%u:%g %a' "$host" 2>/dev/null))"
resp=$(call sandbox_destroy "{\"sandbox_id\":\"$sb\"}")
[ "$(jq -r '.result.structuredContent.destroyed // empty' <<<"$resp")" = true ]; ok $? "sandbox_destroy"
[ "$(jq -r '.result.structuredContent.destroyed // empty' <<<"$resp")" = true ] ||
	{ echo "# answer: ${resp:0:600}"; tail -5 "$tmp/serve.log" | sed 's/^/# /'; }
found=$(find "$dir" -perm /6000 2>/dev/null)
foreign=$(find "$dir" ! -user $user -o ! -group $user 2>/dev/null)
[ -z "$found" ] && [ -z "$foreign" ] && [ -f "$dir/s" ]
ok $? "after destroy every file belongs to uid $user, none setuid${found:+; setuid: $found}${foreign:+; foreign: $foreign}"
as $user rm -rf "$dir" && [ ! -e "$dir" ]; ok $? "the owner deletes the sandbox's output without root"
exec {SERVER[1]}>&-
wait "$coproc_pid" 2>/dev/null
coproc_pid=

# ---- nothing left behind ----------------------------------------------------------
root_hash=$(printf '%s' "$tmp/out" | python3 -c '
import sys
h = 1469598103934665603
for b in sys.stdin.buffer.read():
    h = ((h ^ b) * 1099511628211) % (1 << 64)
print("%016x" % h)')
sock=${DOCKER_HOST:-unix:///run/podman/podman.sock}
left="(the engine did not answer at $sock)"
for _ in $(seq 50); do
	if list=$(curl -sf --unix-socket "${sock#unix://}" -G http://d/v1.41/containers/json --data-urlencode all=1 \
		--data-urlencode "filters={\"label\":[\"demesne.root=$root_hash\"]}"); then
		left=$(jq -r '.[].Id' <<<"$list")
		[ -z "$left" ] && break
	fi
	sleep 0.2
done
[ -z "$left" ] && [ -z "$(ls -A "$tmp/state/work" 2>/dev/null)" ]
ok $? "no container and no scratch directory is left${left:+: $left}"
mounts=$(grep -c " $tmp/" /proc/self/mountinfo)
[ "$mounts" = 0 ]; ok $? "no input mount is left ($mounts)"
# What stays is the run ledger (sandbox_usage_report's), the output root
# owner's like everything in it, with every run in it ended.
[ -z "$(ls -A "$tmp/out" | grep -v -e '^\.sandboxes$' -e '^\.ledger$')" ] && [ -z "$(ls -A "$tmp/out/.sandboxes" 2>/dev/null)" ]
ok $? "no run output or sandbox record is left"
running=$(grep -l '"status":"running"' "$tmp/out/.ledger"/*.json 2>/dev/null)
ledger_mode=$(stat -c '%u %a' "$tmp/out/.ledger" 2>/dev/null)
foreign=$(find "$tmp/out/.ledger" ! -user $user 2>/dev/null)
[ "$ledger_mode" = "$user 700" ] && [ -z "$foreign" ] && [ -z "$running" ] && [ -n "$(ls -A "$tmp/out/.ledger")" ]
ok $? "the run ledger is uid $user's, 0700 ($ledger_mode${foreign:+; not: $foreign}), and every run in it has ended${running:+; running: $running}"

# ---- the opt-out variable is checked --------------------------------------------
DEMESNE_ALLOW_HOST_ROOT=maybe "$bin" run -q --image "$img" -- true >/dev/null 2>"$tmp/err"; rc=$?
[ $rc != 0 ] && grep -q "DEMESNE_ALLOW_HOST_ROOT='maybe'" "$tmp/err"; ok $? "a bad DEMESNE_ALLOW_HOST_ROOT is refused by name"
"$bin" doctor >"$tmp/doctor" 2>&1
grep -Eq '^ok +sandboxes in a user namespace: yes: ' "$tmp/doctor"
ok $? "doctor says sandboxes run in a user namespace ($(grep 'user namespace' "$tmp/doctor"))"

# ---- an engine that would give the host's root: refused unless opted out --------
# A stand-in for dockerd without --userns-remap, answering only what demesne
# asks before it creates a container (its create fails, which is how the
# opt-out shows it got past the refusal).
cat >"$tmp/fake-dockerd.py" <<'PY'
import json, os, socketserver, sys
from http.server import BaseHTTPRequestHandler
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Server", "Docker/20.10.24 (linux)")
        self.send_header("Api-Version", "1.41")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        p = self.path.split("?")[0]
        if p.endswith("/_ping"): self.reply(200, "OK")
        elif p.endswith("/info"): self.reply(200, {"SecurityOptions": ["name=seccomp,profile=default"], "DockerRootDir": "/var/lib/docker"})
        elif "/images/" in p: self.reply(200, {"Id": "sha256:0"})
        elif p.endswith("/containers/json"): self.reply(200, [])
        else: self.reply(404, {"message": "not in this stand-in"})
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.reply(500, {"message": "the stand-in creates nothing"})
    def address_string(self): return "unix"
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, socketserver.UnixStreamServer): daemon_threads = True
S(sys.argv[1], H).serve_forever()
PY
python3 "$tmp/fake-dockerd.py" "$tmp/fake.sock" &
fake_pid=$!
for _ in $(seq 50); do [ -S "$tmp/fake.sock" ] && break; sleep 0.1; done
fake=(env DEMESNE_ENGINE_HOST="unix://$tmp/fake.sock" DEMESNE_START_PODMAN=0 DEMESNE_OUTPUT_ROOT="$tmp/fake-out")
"${fake[@]}" "$bin" run -q --image "$img" -- true >/dev/null 2>"$tmp/err"; rc=$?
[ $rc != 0 ] && grep -q "refusing to run a sandbox whose root would be the host's root" "$tmp/err" &&
	grep -q "DEMESNE_ALLOW_HOST_ROOT=1" "$tmp/err"
ok $? "an engine without a user namespace is refused, naming DEMESNE_ALLOW_HOST_ROOT (rc $rc: $(grep -v ' info: ' "$tmp/err" | head -1))"
"${fake[@]}" DEMESNE_ALLOW_HOST_ROOT=1 "$bin" run -q --image "$img" -- true >/dev/null 2>"$tmp/err"; rc=$?
[ $rc != 0 ] && ! grep -q "refusing" "$tmp/err" && grep -q "creates nothing" "$tmp/err"
ok $? "DEMESNE_ALLOW_HOST_ROOT=1 gets past the refusal to the engine's create"
"${fake[@]}" "$bin" doctor >"$tmp/doctor" 2>&1
grep -q "^PROBLEM sandboxes in a user namespace: refusing" "$tmp/doctor"
ok $? "doctor reports the engine's containers would run as the host's root"
kill "$fake_pid" 2>/dev/null
wait "$fake_pid" 2>/dev/null
fake_pid=

echo "1..$n"
[ $failed = 0 ]
