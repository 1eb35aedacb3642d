#!/usr/bin/env node
// demesne's own overhead per call as the number of concurrent sandboxes
// grows (issue 35, "scale-out by simulation"): one `demesne serve --http`
// against the OpenSandbox protocol fixture (tests/fixtures/opensandbox/
// server.mjs), both started here, and for each count C in --counts, C
// clients at once, each its own MCP session over Streamable HTTP:
//   cycle   sandbox_create, sandbox_exec (echo), sandbox_destroy
//   script  sandbox_script (echo)
// (all C cycles at once, then all C scripts at once). Per count and phase:
//   cpu   demesne's CPU per call: utime + stime of the server from
//         /proc/PID/stat over the phase, divided by its calls. CPU time is
//         what the server itself spends; the shared machine's load and the
//         fixture's speed do not inflate it as they do wall time. This is
//         the measure that must stay flat.
//   own   demesne's time per call: the calls' summed wall time minus the
//         time the fixture spent answering demesne's requests over the
//         phase (the fixture sums each request's arrival-to-answer time in
//         its state file, a /command to its final event), divided by the
//         calls. It is what a call waits in demesne: its own work, its
//         HTTP, and its waits between polls of the sandbox's state; it
//         grows when the 2 cores are saturated (load, not demesne's cost).
//   p50/p95 of each tool's wall time in the client.
// DEMESNE_POOL=0: no warm pool, so every request the fixture sees is a
// call's own.
//
//   DEMESNE=/abs/path/to/demesne node bench/osb-scale.mjs [--counts 25,50,100,200]
//       [--mode process|shared|real] [--svg FILE] [--json FILE] [--agents N]
//
// --mode (the fixture's sandboxes; its header says more):
//   process (default)  bench-only --process-sandboxes 1: a directory each,
//                      commands as processes of the host (nobody, no network):
//                      cheap, so the fixture does not saturate the machine
//                      and what grows is demesne's;
//   shared             bench-only --shared-container 1: one container of the
//                      image, every command a Podman exec in it;
//   real               a Podman container per sandbox, as in the tests.
// The lifecycle and execd APIs are the same in all three.
// --agents N (issue 35: 32): instead of the counts, N sandbox_research runs
// at once, the real Claude Code in its image on OpenSandbox: a fixture of
// its own with --network-mode host (real containers that reach this host's
// loopback, as the tests' remote agent cases), the vendor API fixture
// (tests/fixtures/vendor/server.mjs, its scripted task: two replies, a tool
// call, "The answer is 42."), one `demesne serve --http` with the remote
// listener on 127.0.0.1 over TLS (certificates from tests/make-test-certs.sh)
// in front of each run's vendor proxy. Every run's answer, usage and cost
// are checked; printed: demesne's CPU per run and the runs' wall p50/p95,
// beside the same with one run alone.

import cp from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const top = path.join(here, '..');
const { startHttpServer } = await import(path.join(top, 'tests', 'e2e', 'lib', 'http-server.mjs'));

const arg = (name, def) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : def;
};
const die = (msg, code = 2) => {
  console.error(`osb-scale: ${msg}`);
  process.exit(code);
};
const AGENTS = arg('agents', null) === null ? 0 : Number(arg('agents'));
if (arg('agents', null) !== null && !(Number.isInteger(AGENTS) && AGENTS >= 1 && AGENTS <= 256))
  die('--agents: an integer 1 .. 256');
const counts = arg('counts', '25,50,100,200').split(',').map(Number);
const mode = arg('mode', 'process');
if (!['process', 'shared', 'real'].includes(mode)) die(`--mode is process, shared or real, not '${mode}'`);
if (counts.some((n) => !Number.isInteger(n) || n < 1 || n > 1000)) die('--counts: integers 1 .. 1000');
if (!process.env.DEMESNE || !path.isAbsolute(process.env.DEMESNE)) die('DEMESNE must be the absolute path of demesne');
const max = Math.max(...counts);

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'dm-bench-scale-'));
const key = `bench-${Math.random().toString(36).slice(2)}`;
const stateFile = path.join(work, 'fixture.json');
let fixture, server;

async function cleanup() {
  if (server) await server.stop().catch(() => {});
  if (fixture && fixture.exitCode === null) {
    // SIGTERM: the fixture removes every container it made.
    await new Promise((ok) => { fixture.once('exit', ok); fixture.kill('SIGTERM'); });
  }
  fs.rmSync(work, { recursive: true, force: true });
}
process.on('SIGINT', () => cleanup().then(() => process.exit(130)));
process.on('SIGTERM', () => cleanup().then(() => process.exit(143)));

function startFixture() {
  const modeArgs = AGENTS ? ['--network-mode', 'host']
    : ({ shared: ['--shared-container', '1'], process: ['--process-sandboxes', '1'] }[mode] || []);
  fixture = cp.spawn('node', [path.join(top, 'tests', 'fixtures', 'opensandbox', 'server.mjs'), '--api-key', key,
    '--state-file', stateFile, '--egress', '1', ...modeArgs],
  { stdio: ['ignore', 'pipe', fs.openSync(path.join(work, 'fixture.log'), 'w')] });
  return new Promise((resolve, reject) => {
    let out = '';
    fixture.stdout.on('data', (c) => {
      out += c;
      const m = /^ready (\d+) /.exec(out);
      if (m) resolve(Number(m[1]));
    });
    fixture.once('exit', (code) => reject(new Error(`the fixture exited (${code}): see ${work}/fixture.log`)));
  });
}

// utime + stime of a process, ms (fields 14, 15 of /proc/PID/stat; 100 ticks a second).
const cpuMs = (pid) => {
  const f = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(f[11]) + Number(f[12])) * 10;
};
// The fixture's summed time answering requests, ms (it writes its state at most every 200 ms).
const fixtureMs = async () => {
  await new Promise((ok) => setTimeout(ok, 400));
  const t = JSON.parse(fs.readFileSync(stateFile, 'utf8')).timing;
  return { ms: t.lifecycle.ms + t.execd.ms, n: t.lifecycle.n + t.execd.n };
};

// One MCP session over Streamable HTTP with a plain keep-alive client (an
// orchestrator's own; the SDK's client costs far more CPU than the server).
async function session(srv, agent) {
  const url = new URL(srv.url);
  const version = '2025-11-25';
  let sid;
  let next = 1;
  const post = (body, method = 'POST') => new Promise((resolve, reject) => {
    const data = body ? JSON.stringify(body) : '';
    const headers = { ...srv.headers, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      'Content-Length': Buffer.byteLength(data) };
    if (sid) Object.assign(headers, { 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': version });
    const req = http.request({ agent, host: url.hostname, port: url.port, path: url.pathname, method, headers }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        if (res.headers['mcp-session-id']) sid = res.headers['mcp-session-id'];
        const text = Buffer.concat(chunks).toString('utf8');
        if (res.statusCode === 202 || method === 'DELETE') return resolve(null);
        if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}: ${text.slice(0, 300)}`));
        // JSON, or an event stream whose last message is the answer.
        const msgs = /event-stream/.test(res.headers['content-type'] || '')
          ? text.split(/\n\n/).map((ev) => ev.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5)).join('\n'))
            .filter(Boolean).map((d) => JSON.parse(d))
          : [JSON.parse(text)];
        const msg = msgs.find((m) => m.id === body.id);
        if (!msg) return reject(new Error(`no answer to request ${body.id}`));
        if (msg.error) return reject(new Error(JSON.stringify(msg.error)));
        resolve(msg.result);
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(data);
  });
  await post({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: version, capabilities: {},
    clientInfo: { name: 'bench-osb-scale', version: '0.0.0' } } });
  await post({ jsonrpc: '2.0', method: 'notifications/initialized' });
  return {
    call: async (name, args) => {
      const r = await post({ jsonrpc: '2.0', id: next++, method: 'tools/call', params: { name, arguments: args } });
      if (r.isError) throw new Error(`${name}: ${JSON.stringify(r.content).slice(0, 300)}`);
      return r.structuredContent || {};
    },
    end: () => post(null, 'DELETE').catch(() => {}),
  };
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] : NaN;
};

// Every session runs body at once; per tool, each call's wall time.
async function phase(sessions, body) {
  const walls = {};
  const timed = async (s, name, args) => {
    const t0 = performance.now();
    const r = await s.call(name, args);
    (walls[name] ||= []).push(performance.now() - t0);
    return r;
  };
  const c0 = cpuMs(server.child.pid);
  const f0 = await fixtureMs();
  const t0 = performance.now();
  const res = await Promise.allSettled(sessions.map((s) => body((name, args) => timed(s, name, args))));
  const wall = performance.now() - t0;
  const f1 = await fixtureMs();
  const cpu = cpuMs(server.child.pid) - c0;
  const failed = res.filter((r) => r.status === 'rejected');
  const all = Object.values(walls).flat();
  const calls = all.length;
  const sum = all.reduce((a, b) => a + b, 0);
  return { calls, failed: failed.length, firstError: failed[0]?.reason?.message, wall,
    cpu, cpuPerCall: cpu / calls, ownPerCall: (sum - (f1.ms - f0.ms)) / calls, fixtureRequests: f1.n - f0.n,
    tools: Object.fromEntries(Object.entries(walls).map(([k, v]) => [k, { p50: pct(v, 50), p95: pct(v, 95) }])) };
}

const cycle = async (call) => {
  const { sandbox_id: id } = await call('sandbox_create', {});
  if (!id) throw new Error('sandbox_create answered without sandbox_id');
  const e = await call('sandbox_exec', { sandbox_id: id, command: 'echo hi' });
  if (e.stdout !== 'hi\n') throw new Error(`sandbox_exec: stdout ${JSON.stringify(e.stdout)}`);
  await call('sandbox_destroy', { sandbox_id: id });
};
const script = async (call) => {
  const r = await call('sandbox_script', { command: 'echo hi' });
  if (r.stdout !== 'hi\n') throw new Error(`sandbox_script: stdout ${JSON.stringify(r.stdout)}`);
};

function svg(rows, file, caption) {
  const W = 880, H = 380, m = { l: 60, r: 20, t: 40, b: 80 }, pw = (W - 3 * m.l) / 2, ph = H - m.t - m.b;
  const xs = rows.map((r) => r.count);
  const xmax = Math.max(...xs);
  const panel = (ox, title, key, unit) => {
    const ymax = Math.max(...rows.flatMap((r) => [r.cycle[key], r.script[key]])) * 1.15 || 1;
    const X = (v) => ox + (v / xmax) * pw, Y = (v) => m.t + ph - (v / ymax) * ph;
    let g = `<text x="${ox + pw / 2}" y="22" text-anchor="middle" font-weight="bold">${title}</text>`;
    g += `<line x1="${ox}" y1="${m.t + ph}" x2="${ox + pw}" y2="${m.t + ph}" stroke="#333"/><line x1="${ox}" y1="${m.t}" x2="${ox}" y2="${m.t + ph}" stroke="#333"/>`;
    for (let i = 0; i <= 4; i++) {
      const v = (ymax * i) / 4;
      g += `<line x1="${ox}" y1="${Y(v)}" x2="${ox + pw}" y2="${Y(v)}" stroke="#ddd"/><text x="${ox - 6}" y="${Y(v) + 4}" text-anchor="end">${v.toFixed(v < 10 ? 1 : 0)}</text>`;
    }
    for (const x of xs) g += `<text x="${X(x)}" y="${m.t + ph + 18}" text-anchor="middle">${x}</text>`;
    g += `<text x="${ox + pw / 2}" y="${m.t + ph + 36}" text-anchor="middle">concurrent sandboxes</text>`;
    g += `<text transform="translate(${ox - 44},${m.t + ph / 2}) rotate(-90)" text-anchor="middle">${unit}</text>`;
    for (const [ph2, color] of [['cycle', '#1f77b4'], ['script', '#d62728']]) {
      g += `<polyline fill="none" stroke="${color}" stroke-width="2" points="${rows.map((r) => `${X(r.count)},${Y(r[ph2][key])}`).join(' ')}"/>`;
      for (const r of rows) g += `<circle cx="${X(r.count)}" cy="${Y(r[ph2][key])}" r="3" fill="${color}"/>`;
    }
    return g;
  };
  const legend = `<g font-size="12"><rect x="${m.l}" y="${H - 36}" width="10" height="10" fill="#1f77b4"/><text x="${m.l + 15}" y="${H - 27}">create, exec, destroy (per call)</text>` +
    `<rect x="${m.l + 230}" y="${H - 36}" width="10" height="10" fill="#d62728"/><text x="${m.l + 245}" y="${H - 27}">sandbox_script</text></g>`;
  fs.writeFileSync(file, `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">` +
    `<rect width="100%" height="100%" fill="white"/>${panel(m.l, "demesne's CPU per call", 'cpuPerCall', 'ms of CPU')}` +
    `${panel(2 * m.l + pw, "demesne's own time per call", 'ownPerCall', 'ms (wall minus fixture)')}${legend}` +
    `<text x="10" y="${H - 6}" font-size="11" fill="#555">${caption}</text></svg>\n`);
}

// The vendor API fixture on loopback, expecting vkey: its port.
let vendor;
function startVendor(vkey) {
  vendor = cp.spawn('node', [path.join(top, 'tests', 'fixtures', 'vendor', 'server.mjs'), '--port', '0', '--host', '127.0.0.1',
    '--expect-key', vkey, '--log', path.join(work, 'vendor.log')], { stdio: ['ignore', 'pipe', fs.openSync(path.join(work, 'vendor.err'), 'w')] });
  return new Promise((resolve, reject) => {
    let out = '';
    vendor.stdout.on('data', (c) => {
      out += c;
      const m = /listening (\d+)/.exec(out);
      if (m) resolve(Number(m[1]));
    });
    vendor.once('exit', (c) => reject(new Error(`the vendor fixture exited (${c}): see ${work}/vendor.err`)));
  });
}

async function agentsRun(n) {
  const port = await startFixture();
  const vkey = 'sk-ant-api03-bench-osb-scale';
  const vport = await startVendor(vkey);
  const certs = path.join(work, 'certs');
  fs.mkdirSync(certs);
  cp.execFileSync('bash', [path.join(top, 'tests', 'make-test-certs.sh'), certs]);
  const env = { ...process.env, DEMESNE_BACKEND: 'opensandbox', OPEN_SANDBOX_DOMAIN: `127.0.0.1:${port}`,
    OPEN_SANDBOX_API_KEY: key, DEMESNE_SHIM: 'off', DEMESNE_OPENSANDBOX_EGRESS: 'dns+nft', DEMESNE_POOL: '0',
    DEMESNE_OUTPUT_ROOT: path.join(work, 'out'), DEMESNE_STATE_DIR: path.join(work, 'state'),
    DEMESNE_REMOTE_LISTEN: '127.0.0.1:0', DEMESNE_REMOTE_TLS_CA: path.join(certs, 'server', 'ca.pem'),
    DEMESNE_REMOTE_TLS_CERT: path.join(certs, 'server', 'cert.pem'), DEMESNE_REMOTE_TLS_KEY: path.join(certs, 'server', 'key.pem'),
    DEMESNE_VENDOR_UPSTREAM_ANTHROPIC: `http://127.0.0.1:${vport}`, DEMESNE_VENDOR_UPSTREAM_OPENAI: `http://127.0.0.1:${vport}`,
    ANTHROPIC_API_KEY: vkey, OPENAI_API_KEY: vkey };
  const lim = String(n + 16);
  server = await startHttpServer(process.env.DEMESNE, { env, logFile: path.join(work, 'serve.log'),
    args: ['--max-sessions', lim, '--max-streams', lim, '--max-connections-per-ip', lim, '--max-connections', String(4 * n + 64)] });
  const agent = new http.Agent({ keepAlive: true, maxSockets: n + 8 });
  const research = async (call) => {
    const r = await call('sandbox_research', { prompt: 'Find the answer and write it to /out/answer.txt.', model: 'sonnet' });
    if (r.exit_code !== 0 || r.result !== 'The answer is 42.' || r.usage?.input_tokens !== 2000 || !(r.cost_usd > 0))
      throw new Error(`sandbox_research: ${JSON.stringify(r).slice(0, 300)}`);
  };
  console.log(`agents: ${n} sandbox_research runs at once (Claude Code on OpenSandbox, the fixture's real containers on ` +
    `the host's network, the vendor fixture); ${os.cpus().length} CPUs, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  console.log('| runs at once | runs | failed | demesne CPU/run ms | wall p50/p95 | phase s |');
  console.log('|---|---|---|---|---|---|');
  for (const k of [1, n]) {
    const sessions = await Promise.all(Array.from({ length: k }, () => session(server, agent)));
    const r = await phase(sessions, research);
    await Promise.all(sessions.map((s) => s.end()));
    const w = r.tools.sandbox_research;
    console.log(`| ${k} | ${r.calls} | ${r.failed} | ${r.cpuPerCall.toFixed(1)} | ${w ? `${(w.p50 / 1000).toFixed(1)}/${(w.p95 / 1000).toFixed(1)} s` : ''} | ${(r.wall / 1000).toFixed(1)} |`);
    if (r.failed) { console.log(`  (${r.failed} failed; first: ${r.firstError})`); code = 1; }
  }
  agent.destroy();
  const vlog = fs.readFileSync(path.join(work, 'vendor.log'), 'utf8');
  console.log(`vendor fixture: ${(vlog.match(/"auth_ok":true/g) || []).length} requests with the real key, ` +
    `${(vlog.match(/"auth_ok":false/g) || []).length} without; load after ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
}

let code = 0;
const rows = [];
if (AGENTS) {
  try {
    await agentsRun(AGENTS);
  } catch (e) {
    console.error(`osb-scale: ${e.stack || e}`);
    code = 1;
  } finally {
    if (vendor && vendor.exitCode === null) vendor.kill('SIGTERM');
    await cleanup();
  }
  process.exit(code);
}
try {
  const port = await startFixture();
  const env = { ...process.env, DEMESNE_BACKEND: 'opensandbox', OPEN_SANDBOX_DOMAIN: `127.0.0.1:${port}`,
    OPEN_SANDBOX_API_KEY: key, DEMESNE_SHIM: 'off', DEMESNE_OPENSANDBOX_EGRESS: 'dns+nft', DEMESNE_POOL: '0',
    DEMESNE_OUTPUT_ROOT: path.join(work, 'out'), DEMESNE_STATE_DIR: path.join(work, 'state') };
  const lim = String(max + 16);
  server = await startHttpServer(process.env.DEMESNE, { env, logFile: path.join(work, 'serve.log'),
    args: ['--max-sessions', lim, '--max-streams', lim, '--max-connections-per-ip', lim, '--max-connections', String(4 * max + 64)] });
  const agent = new http.Agent({ keepAlive: true, maxSockets: max + 8 });
  console.log(`mode ${mode}; counts ${counts.join(', ')}; ${os.cpus().length} CPUs, load ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  console.log('| sandboxes | phase | calls | failed | demesne CPU/call ms | own ms/call | phase s | create p50/p95 | exec p50/p95 | destroy p50/p95 | script p50/p95 |');
  console.log('|---|---|---|---|---|---|---|---|---|---|---|');
  const pp = (t) => (t ? `${(t.p50 / 1000).toFixed(2)}/${(t.p95 / 1000).toFixed(2)} s` : '');
  for (const n of counts) {
    const sessions = await Promise.all(Array.from({ length: n }, () => session(server, agent)));
    const row = { count: n, load: os.loadavg()[0] };
    row.cycle = await phase(sessions, cycle);
    row.script = await phase(sessions, script);
    await Promise.all(sessions.map((s) => s.end()));
    rows.push(row);
    for (const k of ['cycle', 'script']) {
      const r = row[k];
      console.log(`| ${n} | ${k} | ${r.calls} | ${r.failed} | ${r.cpuPerCall.toFixed(2)} | ${r.ownPerCall.toFixed(0)} | ${(r.wall / 1000).toFixed(1)} | ` +
        `${pp(r.tools.sandbox_create)} | ${pp(r.tools.sandbox_exec)} | ${pp(r.tools.sandbox_destroy)} | ${pp(r.tools.sandbox_script)} |`);
      if (r.failed) { console.log(`  (${r.failed} failed; first: ${r.firstError})`); code = 1; }
    }
  }
  agent.destroy();
  const stats = JSON.parse(fs.readFileSync(stateFile, 'utf8'));
  console.log(`fixture: ${stats.created} creates, ${stats.deleted} deletes, ${stats.commands} commands; load after ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}`);
  if (arg('json', null)) fs.writeFileSync(arg('json'), JSON.stringify({ mode, rows }, null, 1));
  svg(rows, arg('svg', path.join(here, `osb-scale-${mode}.svg`)), `fixture mode ${mode}; ${os.cpus().length} CPUs; ` +
    `load ${rows.map((r) => r.load.toFixed(1)).join(', ')} at the counts' starts; ${new Date().toISOString().slice(0, 16)} UTC`);
} catch (e) {
  console.error(`osb-scale: ${e.stack || e}`);
  code = 1;
} finally {
  await cleanup();
}
process.exit(code);
