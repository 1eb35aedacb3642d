#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Smoke test of the demesne "codex" image, run inside a fresh sandbox with no
# network (cwd /out): the CLI is on PATH, its native binary is in place and
# it prints the pinned version. Exit 0 = pass.
set -euo pipefail
want=0.171.0

bin=$(command -v codex) || { echo "FAIL codex is not on PATH"; exit 1; }
native=/usr/local/lib/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex
[[ -x $native ]] || { echo "FAIL no native binary at $native"; exit 1; }
echo "ok: $bin -> $(readlink -f "$bin"), native $native"
v=$(timeout 60 codex --version)
echo "$v" >/out/version.txt
[[ $v == "codex-cli $want" ]] || { echo "FAIL codex --version: $v"; exit 1; }
echo "ok: codex --version: $v"
