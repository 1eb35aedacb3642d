#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# Smoke test of localhost/demesne/python: the scientific stack imports and
# works together, a plot lands in /out (a bind mount of a host temp dir, as the
# server does it), pip is usable as root and venv works, all with no network.
# usage: images/python/smoke.sh [--engine podman|docker]
set -euo pipefail

here=$(cd -- "$(dirname -- "$(readlink -f -- "${BASH_SOURCE[0]}")")" && pwd -P)
# shellcheck source=images/lib.sh
. "$here/../lib.sh"

# Smaller than this and the PNG is surely blank or truncated; the real plot
# is about 40 KB.
readonly MIN_PNG_BYTES=10000

read -r -d '' PLOT <<'PY' || true
import numpy as np, pandas as pd, scipy, matplotlib
from scipy import optimize
import matplotlib.pyplot as plt

assert matplotlib.get_backend().lower() == "agg", matplotlib.get_backend()
rng = np.random.default_rng(7)
x = np.linspace(0, 4 * np.pi, 400)
df = pd.DataFrame({"x": x, "y": 2.5 * np.sin(1.5 * x) + rng.normal(0, 0.3, x.size)})
(a, w), _ = optimize.curve_fit(lambda t, a, w: a * np.sin(w * t), df.x, df.y, p0=(2, 1.4))
assert abs(a - 2.5) < 0.2 and abs(w - 1.5) < 0.05, (a, w)
fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
ax.plot(df.x, df.y, ".", ms=3, label="data")
ax.plot(df.x, a * np.sin(w * df.x), label=f"fit a={a:.2f} w={w:.2f}")
ax.set_title("demesne python smoke")
ax.legend()
fig.savefig("/out/smoke.png")
print(f"numpy {np.__version__}, pandas {pd.__version__}, scipy {scipy.__version__}, "
      f"matplotlib {matplotlib.__version__}: fit a={a:.3f} w={w:.3f}")
PY

# pip must get as far as looking for the package (and fail offline), not stop
# at Debian's "externally-managed-environment" refusal.
read -r -d '' TOOLS <<'SH' || true
set -e
out=$(python3 -m pip install --no-index demesne-smoke-no-such-package 2>&1) && exit 1
case $out in
*externally-managed*) echo "FAIL pip refuses to install: $out"; exit 1 ;;
*"No matching distribution"*) echo "ok   pip install reaches the index lookup" ;;
*) echo "FAIL unexpected pip output: $out"; exit 1 ;;
esac
python3 -m venv /tmp/venv && /tmp/venv/bin/python -c 'import sys; assert sys.prefix == "/tmp/venv"'
echo "ok   python3 -m venv"
SH

main() {
	local tmp png size magic
	dm_smoke_init python "$@"
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/demesne-smoke.XXXXXX")
	# shellcheck disable=SC2064 # expand $tmp now: it is local
	trap "rm -rf -- '$tmp'" EXIT
	# The container's root has no capabilities, so it can write here only if
	# the directory is open to it (docker run by a non-root user).
	chmod 0777 "$tmp"
	png="$tmp/smoke.png"

	dm_log "python smoke: plotting to /out in $REF ($ENGINE, --network none)"
	dm_smoke_run -v "$tmp:/out" -- python3 -c "$PLOT" 2>&1 |
		sed 's/^/images: python smoke: /' >&2 ||
		{ dm_log "python smoke: FAIL (the plot script failed)"; exit 1; }
	[[ -f $png ]] || { dm_log "python smoke: FAIL (no /out/smoke.png on the host)"; exit 1; }
	size=$(stat -c %s "$png")
	magic=$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')
	if [[ $magic != 89504e470d0a1a0a ]]; then
		dm_log "python smoke: FAIL (smoke.png is not a PNG: magic $magic)"
		exit 1
	fi
	if ((size < MIN_PNG_BYTES)); then
		dm_log "python smoke: FAIL (smoke.png is only $size bytes)"
		exit 1
	fi
	dm_log "python smoke: ok   PNG written to /out ($size bytes)"

	dm_smoke_run -- bash -c "$TOOLS" 2>&1 | sed 's/^/images: python smoke: /' >&2 ||
		{ dm_log "python smoke: FAIL (pip/venv checks)"; exit 1; }
	dm_log "python smoke: PASS"
}

main "$@"
