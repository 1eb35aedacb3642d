#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The HTTP transport on loopback is not open to whatever reaches 127.0.0.1
# (a local process of another user, a sandbox through a proxy): every
# request needs the bearer token, which the server makes and keeps in a
# 0600 file of its state directory, written so that a planted symlink is
# never followed. Also: a restart on the same port works (SO_REUSEADDR), a
# port held by a client's TIME_WAIT is refused with a message saying so,
# and nothing is left behind (no token file, no process).
set -u
n=0 failed=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; failed=$((failed + 1)); fi; }
bin=${DEMESNE:?DEMESNE must name the binary}
command -v curl >/dev/null || { echo "1..0 # SKIP needs curl"; exit 77; }

tmp=$(mktemp -d /tmp/dm-sec-http-XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	if [ $failed = 0 ]; then rm -rf "$tmp"; else echo "# logs kept in $tmp"; fi
}
trap cleanup EXIT
export DEMESNE_OUTPUT_ROOT=$tmp/out DEMESNE_STATE_DIR=$tmp/state
unset DEMESNE_HTTP_TOKEN DEMESNE_HTTP_TOKEN_FILE
mkdir -m 0700 "$tmp/state"

# start LOG [ARGS...]: serve --http in the background; sets pid, port, tokfile.
start() {
	local log=$1
	shift
	: >"$log"
	"$bin" serve "$@" 2>"$log" &
	pid=$!
	pids+=("$pid")
	port= tokfile=
	for _ in $(seq 300); do
		port=$(sed -n 's|.*serving MCP on http://127\.0\.0\.1:\([0-9]*\)/mcp.*|\1|p' "$log")
		[ -n "$port" ] && break
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
	done
	tokfile=$(sed -n "s|.*bearer token in '\([^']*\)'.*|\1|p" "$log")
	[ -n "$port" ]
}
stop() { kill "$pid" 2>/dev/null; wait "$pid"; }

meta='"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}'
list_body="{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{$meta}}"
# list [CURL ARGS...]: a 2026-07-28 tools/list; prints the HTTP status.
list() {
	curl -s -o "$tmp/body" -D "$tmp/head" -w '%{http_code}' --max-time 30 "$@" \
		-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
		-H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/list' \
		-d "$list_body" "http://127.0.0.1:$port/mcp"
}

# ---- the reproduction: a loopback server answered anyone -------------------------
start "$tmp/a.log" --http 127.0.0.1:0
ok $? "serve --http 127.0.0.1:0 starts (port ${port:-none})"
[ -n "$tokfile" ] && [ -f "$tokfile" ]; ok $? "the log names the token file it made ('$tokfile')"
case $tokfile in "$tmp/state/"*) r=0 ;; *) r=1 ;; esac
ok $r "... in the state directory"
[ "$(stat -c '%a %u %F' "$tokfile" 2>/dev/null)" = "600 $(id -u) regular file" ]
ok $? "it is a regular file of this user, mode 600 ($(stat -c '%a %u %F' "$tokfile" 2>/dev/null))"
[ $(( $(stat -c '0%a' "$tokfile") & 077 )) = 0 ]; ok $? "no one else may read it"
token=$(cat "$tokfile")
[ ${#token} -ge 32 ]; ok $? "the token is long (${#token} characters)"
code=$(list)
[ "$code" = 401 ] && grep -qi '^WWW-Authenticate: Bearer' "$tmp/head"
ok $? "tools/list without a token: 401 with WWW-Authenticate: Bearer ($code)"
grep -q '"tools"' "$tmp/body"; [ $? != 0 ]; ok $? "... and no tool list in the answer"
wrong=$(printf '%s' "$token" | tr '0-9a-f' '1-9a-f0')
code=$(list -H "Authorization: Bearer $wrong")
[ "$code" = 401 ]; ok $? "a wrong token of the same length: 401 ($code)"
code=$(list -H "Authorization: Bearer ${token:0:16}")
[ "$code" = 401 ]; ok $? "a prefix of the token: 401 ($code)"
code=$(list -H "Authorization: Basic $(printf 'x:%s' "$token" | base64 -w0)")
[ "$code" = 401 ]; ok $? "the token in another scheme: 401 ($code)"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 -H 'Content-Type: application/json' \
	-H 'Accept: application/json, text/event-stream' \
	-d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}' \
	"http://127.0.0.1:$port/mcp")
[ "$code" = 401 ]; ok $? "a legacy initialize without a token: 401 ($code)"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 -H 'Accept: text/event-stream' \
	-H 'Mcp-Session-Id: 0123456789abcdef0123456789abcdef' "http://127.0.0.1:$port/mcp")
[ "$code" = 401 ]; ok $? "a GET stream without a token: 401 ($code)"
code=$(list -H "Authorization: Bearer $token" -H 'Connection: close')
[ "$code" = 200 ] && grep -q '"sandbox_script"' "$tmp/body"
ok $? "with the token: 200 and the tools ($code)"
# Connection: close above made the server close first, so its side of
# that connection is in TIME_WAIT on the listening port.
old_port=$port old_token=$token old_tokfile=$tokfile
stop
ok $? "the server exits 0 on SIGTERM"
[ ! -e "$old_tokfile" ]; ok $? "its token file is removed at exit"

# ---- a symlink planted at the token's path is replaced, not followed -------------
echo "precious" >"$tmp/victim"
chmod 0644 "$tmp/victim"
ln -s "$tmp/victim" "$old_tokfile"
start "$tmp/b.log" --http "127.0.0.1:$old_port"
ok $? "a restart on the same port works while the old connection is in TIME_WAIT (SO_REUSEADDR)"
[ "$tokfile" = "$old_tokfile" ]; ok $? "it names the same token file"
[ "$(cat "$tmp/victim")" = precious ] && [ "$(stat -c %a "$tmp/victim")" = 644 ]
ok $? "the symlink's target is untouched (content and mode)"
[ ! -L "$tokfile" ] && [ "$(stat -c '%a %F' "$tokfile")" = "600 regular file" ]
ok $? "the token path is now a regular 0600 file, not the planted link"
token=$(cat "$tokfile")
[ "$token" != "$old_token" ]; ok $? "a new token for the new server"
code=$(list -H "Authorization: Bearer $old_token")
[ "$code" = 401 ]; ok $? "the old server's token: 401 ($code)"
code=$(list -H "Authorization: Bearer $token")
[ "$code" = 200 ]; ok $? "the new one: 200 ($code)"
stop
ok $? "it exits 0"
left=$(find "$tmp/state" -name '*http-*token*' 2>/dev/null)
[ -z "$left" ]; ok $? "no token file or temporary file is left${left:+: $left}"

# ---- the operator's own token ------------------------------------------------------
DEMESNE_HTTP_TOKEN=operator-chosen-token-0123456789 start "$tmp/c.log" --http 127.0.0.1:0
ok $? "DEMESNE_HTTP_TOKEN: the server starts"
[ -z "$tokfile" ] && [ -z "$(find "$tmp/state" -name 'http-*.token')" ]
ok $? "... and writes no token file"
code=$(list)
[ "$code" = 401 ]; ok $? "... still 401 without it ($code)"
code=$(list -H "Authorization: Bearer operator-chosen-token-0123456789")
[ "$code" = 200 ]; ok $? "... 200 with it ($code)"
stop
DEMESNE_HTTP_TOKEN=short start "$tmp/d.log" --http 127.0.0.1:0
[ $? != 0 ] && grep -q 'DEMESNE_HTTP_TOKEN.*16 characters' "$tmp/d.log"
ok $? "a short DEMESNE_HTTP_TOKEN: refused at start, naming the variable"
printf 'file-token-0123456789abcdef\n' >"$tmp/tok"
chmod 0600 "$tmp/tok"
DEMESNE_HTTP_TOKEN_FILE=$tmp/tok start "$tmp/e.log" --http 127.0.0.1:0
ok $? "DEMESNE_HTTP_TOKEN_FILE: the server starts"
code=$(list -H "Authorization: Bearer file-token-0123456789abcdef")
[ "$code" = 200 ]; ok $? "... and takes the file's token ($code)"
stop
chmod 0644 "$tmp/tok"
DEMESNE_HTTP_TOKEN_FILE=$tmp/tok start "$tmp/f.log" --http 127.0.0.1:0
[ $? != 0 ] && grep -q 'chmod 600' "$tmp/f.log"
ok $? "a token file others can read: refused at start"

# ---- a state directory others can write: no token file there -----------------------
mkdir -m 0777 "$tmp/open"
DEMESNE_STATE_DIR=$tmp/open start "$tmp/g.log" --http 127.0.0.1:0
[ $? != 0 ] && grep -q 'not be writable by others' "$tmp/g.log" && [ -z "$(ls -A "$tmp/open")" ]
ok $? "a state directory others can write: refused at start, nothing written"

# ---- a port held by a client's TIME_WAIT: refused, saying why -----------------------
start "$tmp/h.log" --http 127.0.0.1:0
token=$(cat "$tokfile")
# curl closes first: the TIME_WAIT is on its side, on its local port.
cport=$(curl -s -o /dev/null -w '%{local_port}' --max-time 30 -H "Authorization: Bearer $token" \
	-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
	-H 'MCP-Protocol-Version: 2026-07-28' -H 'Mcp-Method: tools/list' -d "$list_body" "http://127.0.0.1:$port/mcp")
stop
ss -Htan state time-wait "( sport = :$cport )" 2>/dev/null | grep -q . ||
	grep -qi ":$(printf '%04X' "$cport") [0-9A-F:]* 06 " /proc/net/tcp
ok $? "curl's closed connection from port $cport is in TIME_WAIT"
start "$tmp/i.log" --http "127.0.0.1:$cport"
[ $? != 0 ] && grep -q 'TIME_WAIT' "$tmp/i.log" && grep -q 'port 0' "$tmp/i.log"
ok $? "--http on that port: refused at start, naming TIME_WAIT and port 0 ($(grep -o 'cannot listen.*' "$tmp/i.log" | cut -c1-80))"

# ---- nothing left ------------------------------------------------------------------
alive=
for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=" $p"; done
[ -z "$alive" ]; ok $? "no server process is left${alive:+:$alive}"
echo "1..$n"
[ $failed = 0 ]
