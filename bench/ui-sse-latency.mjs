#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// How soon the activity view's event stream (GET /ui/api/v1/events) says a
// run made over MCP started: the server's side of "a new run appears within
// a second", without a browser (bench/ui-new-run.mjs times the page). One
// `demesne serve --http`, the stream read with node's http; N times a
// `sandbox_script` whose command carries a fresh marker, and the time from
// the call's send to the stream's first chunk with that marker. Prints each
// and the median.
//
//   DEMESNE=/abs/path/to/demesne node bench/ui-sse-latency.mjs   (N=20)
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const e2e = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'tests', 'e2e');
const N = Number(process.env.N ?? 20);
if (!process.env.DEMESNE || !path.isAbsolute(process.env.DEMESNE)) {
  console.error('DEMESNE must be the absolute path of the demesne binary');
  process.exit(2);
}
const { startHttpServer } = await import(path.join(e2e, 'lib', 'http-server.mjs'));
const server = await startHttpServer(process.env.DEMESNE);
const url = new URL(server.url);
let sid; let next = 1; const version = '2025-11-25';
const post = (body) => new Promise((resolve, reject) => {
  const data = JSON.stringify(body);
  const headers = { ...server.headers, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
    'Content-Length': Buffer.byteLength(data), ...(sid ? { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': version } : {}) };
  const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers }, (res) => {
    let text = ''; res.on('data', (c) => { text += c; }); res.on('end', () => { if (res.headers['mcp-session-id']) sid = res.headers['mcp-session-id']; resolve(text); });
  });
  req.on('error', reject); req.end(data);
});
await post({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'p', version: '0' } } });
await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
const waiters = [];
http.get({ host: url.hostname, port: url.port, path: '/ui/api/v1/events', headers: server.headers }, (res) => {
  res.on('data', (c) => { const t = Date.now(); const s = c.toString(); for (const w of waiters) if (s.includes(w.m) && !w.done) { w.done = true; w.r(t); } });
});
await new Promise((r) => setTimeout(r, 500));
const delays = [];
for (let i = 0; i <= N; i++) {
  const m = `mk-${i}-${Date.now()}`;
  const seen = new Promise((r) => waiters.push({ m, r }));
  const t0 = Date.now();
  await post({ jsonrpc: '2.0', id: next++, method: 'tools/call', params: { name: 'sandbox_script', arguments: { command: `echo ${m}` } } });
  const t1 = Date.now();
  const at = await Promise.race([seen, new Promise((r) => setTimeout(() => r(NaN), 5000))]);
  if (Number.isNaN(at)) { console.error(`the stream did not name ${m} within 5 s`); await server.stop(); process.exit(1); }
  if (i === 0) continue; // warm-up
  delays.push(at - t0);
  console.log(`run ${i}: call ${t1 - t0} ms, on the stream ${at - t0} ms after the call was sent`);
}
const sorted = [...delays].sort((a, b) => a - b);
console.log(`on the stream: median ${sorted[Math.floor(N / 2)]} ms after the call was sent (min ${sorted[0]}, max ${sorted[N - 1]}), N=${N}`);
await server.stop();
process.exit(0);
