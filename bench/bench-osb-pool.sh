#!/usr/bin/env bash
# sandbox_script on OpenSandbox, warm (DEMESNE_POOL=2: an idle sandbox of the
# pool) against cold (DEMESNE_POOL=0: a create per call), side by side:
# bench/bench-script.sh with two node sessions, each its own `demesne serve`
# against one OpenSandbox protocol fixture (tests/fixtures/opensandbox/
# server.mjs, whose sandboxes are real Podman containers) that this script
# starts and stops. The sessions and `podman run` alternate every round,
# the order rotating; at the end the ratio warm/cold of the medians.
#
#   DEMESNE=/abs/path/to/demesne bench/bench-osb-pool.sh
#
# Environment: DEMESNE (required, absolute path), N (default 20), WARMUP
# (default 1), POOL (the warm session's DEMESNE_POOL, default 2), EXECD
# (engine: the fixture runs each command through the engine's exec API, as
# before; sandbox, the default and only as root: forked inside the sandbox,
# as the real execd does: the fixture's --execd-in-sandbox). The command is
# bench-script.sh's (echo hi, egress none, image python).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
die() { echo "bench-osb-pool: $*" >&2; exit 1; }
[[ -n ${DEMESNE:-} && $DEMESNE == /* && -x $DEMESNE ]] || die "DEMESNE must be the absolute path of an executable demesne binary"
command -v node >/dev/null || die "node not found"
POOL=${POOL:-2}
EXECD=${EXECD:-$( (($(id -u) == 0)) && echo sandbox || echo engine)}
case $EXECD in sandbox) execd_args=(--execd-in-sandbox 1) ;; engine) execd_args=() ;; *) die "EXECD is sandbox or engine" ;; esac
echo "fixture's execd: $EXECD"

work=$(mktemp -d /tmp/demesne-bench-osb-XXXXXX)
fixture_pid=
cleanup() {
  # SIGTERM: the fixture removes every container it made.
  if [[ -n $fixture_pid ]]; then kill "$fixture_pid" 2>/dev/null || true; wait "$fixture_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

key=bench-$RANDOM$RANDOM
mkfifo "$work/ready"
node "$here/../tests/fixtures/opensandbox/server.mjs" --api-key "$key" --state-file "$work/fixture.json" --egress 1 \
  ${execd_args[@]+"${execd_args[@]}"} >"$work/ready" 2>"$work/fixture.log" &
fixture_pid=$!
read -r word port _ _ <"$work/ready" || die "the fixture did not start (see $work/fixture.log)"
[[ $word == ready ]] || die "the fixture said '$word'"

# One wrapper per session: the same binary, its own pool size.
for s in warm:$POOL cold:0; do
  printf '#!/bin/sh\nDEMESNE_POOL=%s exec %q "$@"\n' "${s#*:}" "$DEMESNE" >"$work/${s%%:*}"
  chmod +x "$work/${s%%:*}"
done
export DEMESNE_BACKEND=opensandbox OPEN_SANDBOX_DOMAIN=127.0.0.1:$port OPEN_SANDBOX_API_KEY=$key DEMESNE_SHIM=off \
  DEMESNE_OPENSANDBOX_EGRESS=dns+nft
CLIENTS="node@$work/warm node@$work/cold" "$here/bench-script.sh" | tee "$work/out"

warm=$(awk -F': *' '/sandbox_script median \(node@.*\/warm client\)/ { split($2, a, " "); print a[1] }' "$work/out")
cold=$(awk -F': *' '/sandbox_script median \(node@.*\/cold client\)/ { split($2, a, " "); print a[1] }' "$work/out")
[[ -n $warm && -n $cold ]] || die "no medians in bench-script.sh's output"
node -e 'const s = JSON.parse(require("fs").readFileSync(process.argv[1])); console.log(`fixture: ${s.created} creates, ${s.commands} commands`)' "$work/fixture.json"
printf '%-38s %s\n' "ratio warm/cold (DEMESNE_POOL=$POOL/0):" "$(awk -v a="$warm" -v b="$cold" 'BEGIN { printf "%.3f\n", a / b }')"
