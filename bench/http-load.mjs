#!/usr/bin/env node
// tools/list latency over Streamable HTTP with K calls in flight from one
// client (@modelcontextprotocol/sdk 1.x, loaded from tests/e2e/node_modules),
// against one `demesne serve --http 127.0.0.1:0` on this machine (issue 35's
// load: an orchestrator on another machine is such a client).
//
//   DEMESNE=/abs/path/to/demesne node bench/http-load.mjs [--in-flight K] [--calls N] [--serial S]
//
// First S calls one at a time (the baseline), then N calls in rounds of K
// at once; prints the percentiles of each, in ms, timed in the client from
// the call to its answer, and "answered A of N" (a lost answer is a
// failure: exit 1). Defaults: K 50, N 600, S 50.

import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = path.dirname(fileURLToPath(import.meta.url));
const e2e = path.join(here, '..', 'tests', 'e2e');
const require = createRequire(path.join(e2e, 'package.json'));
const { Client } = await import(require.resolve('@modelcontextprotocol/sdk/client/index.js'));
const { StreamableHTTPClientTransport } = await import(require.resolve('@modelcontextprotocol/sdk/client/streamableHttp.js'));
const { startHttpServer } = await import(path.join(e2e, 'lib', 'http-server.mjs'));

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : def;
};
const K = arg('in-flight', 50);
const N = arg('calls', 600);
const S = arg('serial', 50);
if (!process.env.DEMESNE) {
  console.error('DEMESNE must be the absolute path of the demesne binary');
  process.exit(2);
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] : NaN;
};
const fmt = (xs) => `p50 ${pct(xs, 50).toFixed(1)} ms, p95 ${pct(xs, 95).toFixed(1)} ms, max ${pct(xs, 100).toFixed(1)} ms`;

const server = await startHttpServer(process.env.DEMESNE, { args: process.env.SERVE_ARGS ? process.env.SERVE_ARGS.split(' ') : [] });
const client = new Client({ name: 'bench-http-load', version: '0.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers: server.headers } }));
const timed = async () => {
  const t0 = process.hrtime.bigint();
  await client.listTools(undefined, { timeout: 120_000 });
  return Number(process.hrtime.bigint() - t0) / 1e6;
};
let code = 0;
try {
  for (let i = 0; i < 5; i += 1) await timed(); // warm-up, untimed
  const serial = [];
  for (let i = 0; i < S; i += 1) serial.push(await timed());
  const loaded = [];
  let answered = 0;
  for (let done = 0; done < N; done += K) {
    const all = await Promise.allSettled(Array.from({ length: Math.min(K, N - done) }, timed));
    for (const r of all) if (r.status === 'fulfilled') { answered += 1; loaded.push(r.value); }
  }
  console.log(`one at a time (${S} calls): ${fmt(serial)}`);
  console.log(`${K} in flight (${N} calls): ${fmt(loaded)}`);
  console.log(`answered ${answered} of ${N}`);
  if (answered !== N) code = 1;
} finally {
  await client.close().catch(() => {});
  await server.stop();
}
process.exit(code);
