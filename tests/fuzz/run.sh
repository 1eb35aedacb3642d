#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Fuzzes the shim protocol's frame reader and decoders (fuzz-shim-frame.c)
# with clang's libFuzzer, ASan and UBSan, for a bounded time.
#   tests/fuzz/run.sh [SECONDS]     default 30; CI calls it with the default
# Starts from the seed corpus in tests/fuzz/corpus/shim-frame (left as it
# is: new inputs go to a temporary directory). A crash leaves its input as
# crash-* in $FUZZ_ARTIFACTS (default: the current directory) and fails.
# Exits 77 when clang cannot build libFuzzer targets here.
set -euo pipefail

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/../.." && pwd -P)
secs=${1:-30}
cc=${CLANG:-clang}
artifacts=${FUZZ_ARTIFACTS:-$PWD}
work=$(mktemp -d /tmp/demesne-fuzz-XXXXXX)
trap 'rm -rf "$work"' EXIT

say() { printf 'fuzz: %s\n' "$*" >&2; }

command -v "$cc" >/dev/null || { say "no '$cc' on PATH: skipped"; exit 77; }
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$work/probe.c"
"$cc" -fsanitize=fuzzer "$work/probe.c" -o "$work/probe" 2>/dev/null ||
	{ say "'$cc' cannot build libFuzzer targets (-fsanitize=fuzzer): skipped"; exit 77; }

# The protocol code needs nothing from configure: an empty config.h lets
# this run on an unconfigured tree.
: >"$work/config.h"
"$cc" -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-I"$work" -I"$here" \
	"$here/tests/fuzz/fuzz-shim-frame.c" "$here/src/shim/protocol.c" -o "$work/fuzz-shim-frame"

mkdir -p "$work/corpus" "$artifacts"
say "fuzzing the shim frame parser for ${secs}s"
"$work/fuzz-shim-frame" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
	-print_final_stats=1 -artifact_prefix="$artifacts/" \
	"$work/corpus" "$here/tests/fuzz/corpus/shim-frame"
