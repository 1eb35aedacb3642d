#!/usr/bin/env node
// The activity view's first paint with 1,000 runs listed (issue 33: under
// 200 ms). A state directory gets one run journal of RUNS runs (start and end
// lines as a server writes them, docs/reference/activity-api.md#the-run-journal),
// `demesne ui` serves it, and Debian's chromium (playwright-core, from
// tests/e2e) loads /ui/ N times in one signed-in tab. Each load is timed in
// the page, from the navigation's start to the frame painted after the list
// has RUNS rows (a MutationObserver, then requestAnimationFrame twice), and
// when GET runs was answered (the rest is the page's own work). Prints each
// load and the medians.
//
//   DEMESNE=$PWD/build/src/demesne node bench/ui-first-paint.mjs
//   (RUNS=1000 N=20 CHROMIUM=/usr/bin/chromium)

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const SRC = path.resolve(HERE, '..');
const RUNS = Number(process.env.RUNS ?? 1000);
const N = Number(process.env.N ?? 20);
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const DEMESNE = process.env.DEMESNE;
if (!DEMESNE || !path.isAbsolute(DEMESNE)) {
  console.error('ui-first-paint: set DEMESNE to the absolute path of the demesne binary');
  process.exit(2);
}
const require = createRequire(path.join(SRC, 'tests/e2e/package.json'));
const { chromium } = require('playwright-core');

const base = fs.mkdtempSync(path.join(os.tmpdir(), 'dm-bench-ui-'));
const state = path.join(base, 'state');
fs.mkdirSync(path.join(state, 'activity'), { recursive: true, mode: 0o700 });
fs.mkdirSync(path.join(base, 'out'), { mode: 0o700 });
const t0 = Date.now() - RUNS * 1000;
const lines = [];
for (let i = 0; i < RUNS; i++) {
  const id = `run-bench-${String(i).padStart(5, '0')}`;
  const kind = ['run', 'job', 'agent', 'sandbox'][i % 4];
  const parent = i % 10 === 9 ? `run-bench-${String(i - 1).padStart(5, '0')}` : undefined;
  lines.push(JSON.stringify({ event: 'start', id, kind, parent_id: parent, principal: 'local', image: 'python', egress: 'none',
    command: `python3 -c 'print(${i})' && ls /out`, status: 'running', output_dir: path.join(base, 'out', id), time_ms: t0 + i * 1000 }));
  if (i < RUNS - 20) lines.push(JSON.stringify({ event: 'end', id, status: i % 7 ? 'succeeded' : 'failed', exit_code: i % 7 ? 0 : 1, time_ms: t0 + i * 1000 + 400 }));
}
fs.writeFileSync(path.join(state, 'activity', `${process.pid}-${t0}.jsonl`), `${lines.join('\n')}\n`, { mode: 0o600 });

const env = { ...process.env, DEMESNE_STATE_DIR: state, DEMESNE_OUTPUT_ROOT: path.join(base, 'out') };
const ui = spawn(DEMESNE, ['ui', '--listen', '127.0.0.1:0', '--ui-dir', path.join(SRC, 'data/ui')], { env, stdio: ['ignore', 'pipe', 'ignore'] });
let browser;
try {
  const url = await new Promise((resolve, reject) => {
    readline.createInterface({ input: ui.stdout }).on('line', (l) => { const m = /(http:\/\/\S+)/.exec(l); if (m) resolve(m[1]); });
    ui.once('exit', (c) => reject(new Error(`demesne ui exited ${c}`)));
  });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid() === 0 ? ['--no-sandbox'] : [] });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await context.addInitScript((want) => {
    window.__painted = new Promise((resolve) => {
      const check = () => {
        const body = document.querySelector('#runs tbody');
        if (!body || body.children.length < want) return false;
        requestAnimationFrame(() => requestAnimationFrame(() => resolve(performance.now())));
        return true;
      };
      const mo = new MutationObserver(() => { if (check()) mo.disconnect(); });
      mo.observe(document, { childList: true, subtree: true });
    });
  }, RUNS);
  const page = await context.newPage();
  await page.goto(url);
  const times = [];
  const apis = [];
  for (let i = 0; i <= N; i++) {
    if (i > 0) await page.reload();
    const { ms, api } = await page.evaluate(async () => {
      const painted = await window.__painted;
      const e = performance.getEntriesByType('resource').find((r) => r.name.endsWith('/ui/api/v1/runs'));
      return { ms: painted, api: e ? e.responseEnd : NaN };
    });
    if (i > 0) times.push(ms); // the first load (after the login redirect) is a warm-up
    if (i > 0) apis.push(api);
    if (i > 0) console.log(`load ${String(i).padStart(2)}  ${ms.toFixed(1)} ms  (GET runs answered at ${api.toFixed(1)} ms)`);
  }
  const rows = await page.locator('#runs tbody tr').count();
  if (rows !== RUNS) throw new Error(`the list has ${rows} rows, not ${RUNS}`);
  times.sort((a, b) => a - b);
  apis.sort((a, b) => a - b);
  console.log(`first paint with ${RUNS} runs listed: median ${times[Math.floor(times.length / 2)].toFixed(1)} ms ` +
    `(min ${times[0].toFixed(1)}, max ${times[times.length - 1].toFixed(1)}, N=${N}); ` +
    `GET runs answered at ${apis[Math.floor(apis.length / 2)].toFixed(1)} ms (median)`);
} finally {
  await browser?.close();
  ui.kill('SIGTERM');
  await new Promise((r) => (ui.exitCode !== null ? r() : ui.once('exit', r)));
  fs.rmSync(base, { recursive: true, force: true });
}
