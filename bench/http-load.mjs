#!/usr/bin/env node
// tools/list latency over Streamable HTTP with K calls in flight from one
// client, against one `demesne serve --http 127.0.0.1:0` on this machine
// (issue 35's load: an orchestrator on another machine is such a client).
//
//   DEMESNE=/abs/path/to/demesne node bench/http-load.mjs [--in-flight K] [--calls N] [--serial S] [--client C]
//
// Two clients (--client sdk, lean or both; default both, one after the
// other, each against a server of its own):
//   sdk   @modelcontextprotocol/sdk 1.x (loaded from tests/e2e/node_modules),
//         its Streamable HTTP transport: fetch, and every answer parsed and
//         validated against the SDK's schemas.
//   lean  what an orchestrator's own HTTP client does: node:http over a
//         keep-alive agent (up to K sockets), the same session (initialize,
//         then Mcp-Session-Id), JSON.parse of the answer and nothing more.
// First S calls one at a time (the baseline), then N calls in rounds of K
// at once; prints the percentiles of each, in ms, timed in the client from
// the call to its answer, and "answered A of N" (a lost answer is a
// failure: exit 1). Beside each, the CPU time per call of the client
// (process.cpuUsage) and of the server (utime + stime from /proc/PID/stat),
// which a shared machine's load does not inflate as it does wall time.
// --client wrk: Debian's wrk (a C client) instead, one at a time and then K
// connections each with a call in flight, for --seconds (10) each: the
// server's latency without a JavaScript client's own CPU in it.
// Defaults: K 50, N 600, S 50, C both.

import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const here = path.dirname(fileURLToPath(import.meta.url));
const e2e = path.join(here, '..', 'tests', 'e2e');
const require = createRequire(path.join(e2e, 'package.json'));
const { startHttpServer } = await import(path.join(e2e, 'lib', 'http-server.mjs'));

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const K = Number(arg('in-flight', 50));
const N = Number(arg('calls', 600));
const S = Number(arg('serial', 50));
const which = arg('client', 'both');
if (!process.env.DEMESNE) {
  console.error('DEMESNE must be the absolute path of the demesne binary');
  process.exit(2);
}
const SECONDS = Number(arg('seconds', 10));
if (!['sdk', 'lean', 'both', 'wrk'].includes(which)) {
  console.error(`--client is sdk, lean, both or wrk, not '${which}'`);
  process.exit(2);
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] : NaN;
};
const fmt = (xs) => `p50 ${pct(xs, 50).toFixed(1)} ms, p95 ${pct(xs, 95).toFixed(1)} ms, max ${pct(xs, 100).toFixed(1)} ms`;

// utime + stime of a process in ms (fields 14 and 15 of /proc/PID/stat, in
// clock ticks; 100 a second on Linux as node sees it).
const serverCpuMs = (pid) => {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
};
const clientCpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

async function sdkClient(server) {
  const { Client } = await import(require.resolve('@modelcontextprotocol/sdk/client/index.js'));
  const { StreamableHTTPClientTransport } = await import(require.resolve('@modelcontextprotocol/sdk/client/streamableHttp.js'));
  const client = new Client({ name: 'bench-http-load', version: '0.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers: server.headers } }));
  return {
    list: () => client.listTools(undefined, { timeout: 120_000 }),
    close: () => client.close().catch(() => {}),
  };
}

async function leanClient(server) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: K });
  const url = new URL(server.url);
  const version = '2025-11-25';
  let session;
  let next = 0;
  const post = (body) => new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const headers = {
      ...server.headers,
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      'Content-Length': Buffer.byteLength(data),
    };
    if (session) Object.assign(headers, { 'Mcp-Session-Id': session, 'MCP-Protocol-Version': version });
    const req = http.request({ agent, host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        if (res.headers['mcp-session-id']) session = res.headers['mcp-session-id'];
        if (res.statusCode === 202) return resolve(null);
        let msg;
        try { msg = JSON.parse(Buffer.concat(chunks).toString('utf8')); } catch (err) { return reject(err); }
        if (res.statusCode !== 200 || msg.error) return reject(new Error(`HTTP ${res.statusCode}: ${JSON.stringify(msg.error)}`));
        resolve(msg.result);
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(data);
  });
  await post({ jsonrpc: '2.0', id: next++, method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'bench-http-load-lean', version: '0.0.0' } } });
  if (!session) throw new Error('initialize answered without Mcp-Session-Id');
  await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  return {
    session: () => session,
    version,
    list: async () => {
      const r = await post({ jsonrpc: '2.0', id: next++, method: 'tools/list' });
      if (!Array.isArray(r?.tools) || r.tools.length === 0) throw new Error('tools/list answered without tools');
      return r;
    },
    close: () => agent.destroy(),
  };
}

async function run(name, make) {
  const server = await startHttpServer(process.env.DEMESNE, { args: process.env.SERVE_ARGS ? process.env.SERVE_ARGS.split(' ') : [] });
  const pid = server.child.pid;
  const client = await make(server);
  const timed = async () => {
    const t0 = process.hrtime.bigint();
    await client.list();
    return Number(process.hrtime.bigint() - t0) / 1e6;
  };
  // CPU per call of both processes over a phase of `calls` calls.
  const cpu = async (calls, phase) => {
    const s0 = serverCpuMs(pid);
    const c0 = clientCpuMs();
    await phase();
    const server = serverCpuMs(pid) - s0;
    // The server's time is counted in ticks of 10 ms: say how many.
    return `CPU per call: client ${((clientCpuMs() - c0) / calls).toFixed(2)} ms, server ${(server / calls).toFixed(2)} ms (${server / 10} ticks)`;
  };
  let ok = true;
  try {
    for (let i = 0; i < 5; i += 1) await timed(); // warm-up, untimed
    const serial = [];
    const serialCpu = await cpu(S, async () => { for (let i = 0; i < S; i += 1) serial.push(await timed()); });
    const loaded = [];
    let answered = 0;
    const loadedCpu = await cpu(N, async () => {
      for (let done = 0; done < N; done += K) {
        const all = await Promise.allSettled(Array.from({ length: Math.min(K, N - done) }, timed));
        for (const r of all) if (r.status === 'fulfilled') { answered += 1; loaded.push(r.value); }
      }
    });
    console.log(`${name}: one at a time (${S} calls): ${fmt(serial)}; ${serialCpu}`);
    console.log(`${name}: ${K} in flight (${N} calls): ${fmt(loaded)}; ${loadedCpu}`);
    console.log(`${name}: answered ${answered} of ${N}`);
    ok = answered === N;
  } finally {
    await client.close();
    await server.stop();
  }
  return ok;
}

// wrk (Debian's package): a C client, one thread, `connections` keep-alive
// connections each with one call in flight (a closed loop: K always in
// flight, not rounds of K), every call a new JSON-RPC id on the lean
// client's session; its Lua script checks each answer's status and that it
// carries the tools, and prints the percentiles.
function wrkPhase(server, session, version, connections, seconds) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-http-load-'));
  const script = path.join(dir, 'list.lua');
  const hdr = { ...server.headers, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'Mcp-Session-Id': session, 'MCP-Protocol-Version': version };
  fs.writeFileSync(script, [
    ...Object.entries(hdr).map(([k, v]) => `wrk.headers[${JSON.stringify(k)}] = ${JSON.stringify(v)}`),
    'wrk.method = "POST"',
    'counter = 0',
    'request = function() counter = counter + 1; return wrk.format(nil, nil, nil, \'{"jsonrpc":"2.0","id":\' .. counter .. \',"method":"tools/list"}\') end',
    'response = function(status, headers, body) if (status ~= 200 or not body:find(\'"tools":[{\', 1, true)) and not bad then bad = true; io.write("BAD " .. status .. " " .. body:sub(1, 200) .. "\\n") end end',
    'done = function(summary, latency, requests)',
    '  io.write(string.format("WRK %d %d %d %.3f %.3f %.3f %.3f\\n", summary.requests, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout, latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000, latency.max / 1000))',
    'end',
  ].join('\n'));
  const r = spawnSync('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '-s', script, server.url], { encoding: 'utf8' });
  fs.rmSync(dir, { recursive: true, force: true });
  if (r.error) throw new Error(`wrk: ${r.error.message} (apt-get install wrk)`);
  const line = (r.stdout || '').split('\n').find((l) => l.startsWith('WRK '));
  if (!line) throw new Error(`wrk printed no result: ${r.stdout}${r.stderr}`);
  const [requests, status, errors, p50, p95, p99, max] = line.split(' ').slice(1).map(Number);
  const bad = (r.stdout || '').split('\n').find((l) => l.startsWith('BAD '));
  if (bad) console.log(`wrk: a wrong answer: ${bad}`);
  return { requests, status: status + (bad ? 1 : 0), errors, p50, p95, p99, max };
}

async function runWrk() {
  const server = await startHttpServer(process.env.DEMESNE, { args: process.env.SERVE_ARGS ? process.env.SERVE_ARGS.split(' ') : [] });
  const pid = server.child.pid;
  const lean = await leanClient(server);
  let ok = true;
  try {
    await lean.list(); // the session works
    for (const [name, c] of [['one at a time', 1], [`${K} in flight`, K]]) {
      const s0 = serverCpuMs(pid);
      const w = wrkPhase(server, lean.session(), lean.version, c, SECONDS);
      const cpu = (serverCpuMs(pid) - s0) / Math.max(1, w.requests);
      console.log(`wrk: ${name} (${SECONDS} s, ${w.requests} calls): p50 ${w.p50.toFixed(2)} ms, p95 ${w.p95.toFixed(2)} ms, p99 ${w.p99.toFixed(2)} ms, max ${w.max.toFixed(2)} ms; server CPU per call ${cpu.toFixed(3)} ms; not 200: ${w.status}, socket errors: ${w.errors}`);
      ok = ok && w.requests > 0 && w.status === 0 && w.errors === 0;
    }
  } finally {
    await lean.close();
    await server.stop();
  }
  return ok;
}

let code = 0;
if (which === 'wrk') process.exit((await runWrk()) ? 0 : 1);
if (which !== 'lean' && !(await run('sdk', sdkClient))) code = 1;
if (which !== 'sdk' && !(await run('lean', leanClient))) code = 1;
process.exit(code);
