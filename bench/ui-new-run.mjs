#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// How soon a run made over MCP shows in the activity view (issue 33: "a
// sandbox_script made over MCP appears within a second"), timed rather than
// asserted (tests do not assert timings). One `demesne serve --http` (the
// view at /ui/ beside /mcp, the default warm pool), Debian's chromium signed
// in on /ui/; N times: a `sandbox_script` whose command carries a fresh
// marker is sent over Streamable HTTP, and the page notes (a
// MutationObserver, the wall clock both sides share) when a row with that
// marker is in the list. Prints each delay from the call's send and from
// its answer (a row may come before the answer: the run's start is
// journalled when its sandbox is claimed), and their medians.
//
//   DEMESNE=/abs/path/to/demesne node bench/ui-new-run.mjs   (N=10 CHROMIUM=/usr/bin/chromium)
import http from 'node:http';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const e2e = path.join(here, '..', 'tests', 'e2e');
const require = createRequire(path.join(e2e, 'package.json'));
const { chromium } = require('playwright-core');
const { startHttpServer } = await import(path.join(e2e, 'lib', 'http-server.mjs'));
const DEMESNE = process.env.DEMESNE;
const N = Number(process.env.N ?? 10);
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
if (!DEMESNE || !path.isAbsolute(DEMESNE)) {
  console.error('DEMESNE must be the absolute path of the demesne binary');
  process.exit(2);
}

const server = await startHttpServer(DEMESNE);
let browser;
let code = 0;
try {
  const url = new URL(server.url);
  const version = '2025-11-25';
  let sid;
  let next = 1;
  const post = (body) => new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const headers = { ...server.headers, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      'Content-Length': Buffer.byteLength(data), ...(sid ? { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': version } : {}) };
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers }, (res) => {
      let text = '';
      res.on('data', (c) => { text += c; });
      res.on('end', () => { if (res.headers['mcp-session-id']) sid = res.headers['mcp-session-id']; resolve(text); });
    });
    req.on('error', reject);
    req.end(data);
  });
  await post({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'bench-ui-new-run', version: '0' } } });
  await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  // Signed in with the server's bearer token (the page takes it as well as the login code's cookie).
  browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid() === 0 ? ['--no-sandbox'] : [] });
  const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 }, extraHTTPHeaders: server.headers })).newPage();
  await page.goto(`${url.origin}/ui/`);
  await page.locator('#runs').waitFor();
  const sent = [];
  const answered = [];
  for (let i = 0; i <= N; i++) {
    const marker = `mark-${process.pid}-${i}-${Date.now()}`;
    const seen = page.evaluate((m) => new Promise((resolve) => {
      const has = () => [...document.querySelectorAll('#runs tbody tr')].some((tr) => tr.textContent.includes(m));
      if (has()) return resolve(Date.now());
      const mo = new MutationObserver(() => { if (has()) { mo.disconnect(); resolve(Date.now()); } });
      mo.observe(document, { childList: true, subtree: true, characterData: true });
    }), marker);
    await new Promise((r) => setTimeout(r, 50)); // the observer is in place
    const t0 = Date.now();
    const answer = await post({ jsonrpc: '2.0', id: next++, method: 'tools/call', params: { name: 'sandbox_script', arguments: { command: `echo ${marker}` } } });
    const t1 = Date.now();
    if (!answer.includes(marker)) throw new Error(`sandbox_script: ${answer.slice(0, 300)}`);
    const at = await Promise.race([seen, new Promise((r) => setTimeout(() => r(NaN), 30_000))]);
    if (Number.isNaN(at)) throw new Error(`the run with ${marker} did not show within 30 s`);
    if (i === 0) continue; // warm-up
    sent.push(at - t0);
    answered.push(at - t1);
    console.log(`run ${String(i).padStart(2)}: in the page ${at - t0} ms after the call was sent, ${at - t1} ms after its answer (call ${t1 - t0} ms)`);
  }
  const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
  console.log(`a new run in the page: median ${med(sent)} ms after the call was sent (max ${Math.max(...sent)}), ` +
    `${med(answered)} ms after its answer (max ${Math.max(...answered)}), N=${N}`);
} catch (e) {
  console.error(`ui-new-run: ${e.stack || e}`);
  code = 1;
} finally {
  await browser?.close();
  await server.stop();
}
process.exit(code);
