#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# hello-script: one command in a fresh sandbox with sandbox_script, a host
# file as read-only input, a result file in the output directory; then what
# the sandbox may not do: /in cannot be written, and egress "none" leaves it no
# route. See README.md beside this file.
here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
. "$here/../lib/mcp.sh"

# The input: a host folder the server may mount (DEMESNE_ALLOWED_PATHS).
data=$(mktemp -d "${TMPDIR:-/tmp}/demesne-hello.XXXXXX")
trap 'rm -rf "$data"' EXIT
printf 'alpha\nbeta\ngamma\n' >"$data/words.txt"
export DEMESNE_ALLOWED_PATHS=${DEMESNE_ALLOWED_PATHS:+$DEMESNE_ALLOWED_PATHS:}$data

mcp_start

say "1. a command, an input file, a result file"
mcp_call sandbox_script "$(jq -cn --arg f "$data/words.txt" '{
	image: "base", egress: "none", files: [$f],
	command: "echo hello from $(hostname); wc -l < /in/words.txt; sort -r /in/words.txt > /out/sorted.txt"}')"
check $? "sandbox_script succeeded"
[ "$(field exit_code)" = 0 ] && grep -q '^hello from' <<<"$(field stdout)"
check $? "exit code 0 and the greeting on stdout"
out=$(field output_dir)
[ "$(cat "$out/sorted.txt" 2>/dev/null)" = "$(printf 'gamma\nbeta\nalpha')" ]
check $? "the result is on the host: $out/sorted.txt"
[ -f "$out/stdout.log" ]; check $? "and the whole stdout in $out/stdout.log"

say "2. a failing command is a result, not an error"
mcp_call sandbox_script '{"image":"base","egress":"none","command":"echo to stderr >&2; exit 3"}'
[ "$(field exit_code)" = 3 ] && [ "$(field stderr)" = "to stderr" ]
check $? "exit code 3, stderr kept"

say "3. what the sandbox may not do"
mcp_call sandbox_script "$(jq -cn --arg f "$data/words.txt" '{
	image: "base", egress: "none", files: [$f],
	command: "echo x > /in/words.txt || echo input-read-only; echo routes: $(tail -n +2 /proc/net/route | wc -l)"}')"
[ "$(field stdout)" = "$(printf 'input-read-only\nroutes: 0')" ]
check $? "/in is read-only, and with egress none the sandbox has no route anywhere"
[ "$(cat "$data/words.txt")" = "$(printf 'alpha\nbeta\ngamma')" ]
check $? "the host file is unchanged"

finish
