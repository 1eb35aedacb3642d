#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Smoke test of the python image, run in a sandbox by tests/e2e/image-smoke.mjs
# at egress none: the scientific stack imports and works together, a plot lands
# in /out (smoke/check.mjs checks it on the host), pip works as root, venv works.
set -euo pipefail
python3 - <<'PY'
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

set -e
out=$(python3 -m pip install --no-index demesne-smoke-no-such-package 2>&1) && exit 1
case $out in
*externally-managed*) echo "FAIL pip refuses to install: $out"; exit 1 ;;
*"No matching distribution"*) echo "ok   pip install reaches the index lookup" ;;
*) echo "FAIL unexpected pip output: $out"; exit 1 ;;
esac
python3 -m venv /tmp/venv && /tmp/venv/bin/python -c 'import sys; assert sys.prefix == "/tmp/venv"'
echo "ok   python3 -m venv"
