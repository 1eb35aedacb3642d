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
//   (RUNS=1000 N=20 CHROMIUM=/usr/bin/chromium UI_DIR=/another/page's/data/ui)

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
// Another page's files (UI_DIR) to measure a baseline side by side.
const UI_DIR = process.env.UI_DIR ?? path.join(SRC, 'data/ui');
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
const ui = spawn(DEMESNE, ['ui', '--listen', '127.0.0.1:0', '--ui-dir', UI_DIR], { env, stdio: ['ignore', 'pipe', 'ignore'] });
let browser;
try {
  const url = await new Promise((resolve, reject) => {
    readline.createInterface({ input: ui.stdout }).on('line', (l) => { const m = /(http:\/\/\S+)/.exec(l); if (m) resolve(m[1]); });
    ui.once('exit', (c) => reject(new Error(`demesne ui exited ${c}`)));
  });
  browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid() === 0 ? ['--no-sandbox'] : [] });
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  await context.addInitScript((want) => {
    // The first rows: when the browser painted the first row's first cell
    // (Element Timing, marked before its first paint), and whether the rows
    // that came with it fill the window (looked at later: rows added below
    // do not move them).
    let firstRows = 0;
    window.__screen = new Promise((resolve) => {
      new PerformanceObserver((list) => {
        for (const e of list.getEntries()) if (e.identifier === 'first-row') resolve(e.renderTime);
      }).observe({ type: 'element', buffered: true });
    });
    window.__filled = () => {
      const body = document.querySelector('#runs tbody');
      return { rows: firstRows, filled: body.children[firstRows - 1].getBoundingClientRect().bottom >= window.innerHeight };
    };
    // The whole list: the frame painted after it has RUNS rows.
    window.__painted = new Promise((resolve) => {
      const check = () => {
        const body = document.querySelector('#runs tbody');
        if (body && body.children.length > 0 && !firstRows) {
          firstRows = body.children.length;
          body.firstElementChild.firstElementChild.setAttribute('elementtiming', 'first-row');
        }
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
  const screens = [];
  const apis = [];
  let unfilled = 0;
  for (let i = 0; i <= N; i++) {
    if (i > 0) await page.reload();
    const { ms, screen, api } = await page.evaluate(async () => {
      const ms = await window.__painted;
      const screen = { at: await window.__screen, ...window.__filled() };
      const e = performance.getEntriesByType('resource').find((r) => r.name.endsWith('/ui/api/v1/runs'));
      return { ms, screen, api: e ? e.responseEnd : NaN };
    });
    if (i === 0) continue; // the first load (after the login redirect) is a warm-up
    times.push(ms);
    screens.push(screen.at);
    apis.push(api);
    if (!screen.filled) unfilled++;
    console.log(`load ${String(i).padStart(2)}  first screen ${screen.at.toFixed(1)} ms (${screen.rows} rows` +
      `${screen.filled ? '' : ', NOT filling the window'}), whole list ${ms.toFixed(1)} ms  (GET runs answered at ${api.toFixed(1)} ms)`);
  }
  const rows = await page.locator('#runs tbody tr').count();
  if (rows !== RUNS) throw new Error(`the list has ${rows} rows, not ${RUNS}`);
  const med = (a) => { a.sort((x, y) => x - y); return a[Math.floor(a.length / 2)]; };
  const range = (a) => `min ${Math.min(...a).toFixed(1)}, max ${Math.max(...a).toFixed(1)}`;
  console.log(`first screen painted with ${RUNS} runs: median ${med(screens).toFixed(1)} ms (${range(screens)}, N=${N})` +
    `${unfilled ? `; ${unfilled} loads' first rows did not fill the window` : ''}`);
  console.log(`whole list painted with ${RUNS} runs: median ${med(times).toFixed(1)} ms (${range(times)}, N=${N}); ` +
    `GET runs answered at ${med(apis).toFixed(1)} ms (median)`);
} finally {
  await browser?.close();
  ui.kill('SIGTERM');
  await new Promise((r) => (ui.exitCode !== null ? r() : ui.once('exit', r)));
  fs.rmSync(base, { recursive: true, force: true });
}
