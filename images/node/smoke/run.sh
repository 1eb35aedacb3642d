#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Smoke test of the node image, run in a sandbox by tests/e2e/image-smoke.mjs
# at egress none: node runs a script (ES modules, a built-in test runner),
# npm and npx answer, and a local package installs from a folder offline.
set -euo pipefail
node --version | grep -q '^v22\.' && echo "ok   node $(node --version)"
echo "ok   npm $(npm --version), npx $(npx --version)"
mkdir -p /tmp/app && cd /tmp/app
cat >sum.mjs <<'JS'
export const sum = (xs) => xs.reduce((a, b) => a + b, 0);
JS
cat >sum.test.mjs <<'JS'
import test from 'node:test';
import assert from 'node:assert/strict';
import { sum } from './sum.mjs';
test('sum', () => assert.equal(sum([1, 2, 3, 36]), 42));
JS
node --test sum.test.mjs >/tmp/test.log 2>&1 || { cat /tmp/test.log; exit 1; }
echo "ok   node --test passes"
node -e 'import("/tmp/app/sum.mjs").then(m => console.log("ok   script says " + m.sum([40, 2])))'
mkdir -p /tmp/lib && printf '{"name":"smoke-lib","version":"1.0.0","main":"index.js"}\n' >/tmp/lib/package.json
echo 'module.exports = () => "ok   npm installed a local package offline";' >/tmp/lib/index.js
npm init -y >/dev/null && npm install --offline --no-audit --no-fund /tmp/lib >/dev/null
node -e 'console.log(require("smoke-lib")())'
