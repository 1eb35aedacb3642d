#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Smoke test of the demesne "claude-code" image, run inside a fresh sandbox
# with no network (cwd /out): the CLI is on PATH, is the native binary (not
# the npm stub) and prints the pinned version. Exit 0 = pass.
set -euo pipefail
want=2.1.332

bin=$(command -v claude) || { echo "FAIL claude is not on PATH"; exit 1; }
real=$(readlink -f "$bin")
[[ $(head -c4 "$real" | od -An -c | tr -d ' ') == '177ELF' ]] || { echo "FAIL $real is not an ELF binary"; exit 1; }
echo "ok: $bin -> $real ($(stat -c %s "$real") bytes, ELF)"
v=$(timeout 60 claude --version)
echo "$v" >/out/version.txt
[[ $v == "$want (Claude Code)" ]] || { echo "FAIL claude --version: $v"; exit 1; }
echo "ok: claude --version: $v"
