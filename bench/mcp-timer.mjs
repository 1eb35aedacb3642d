#!/usr/bin/env node
// Times `sandbox_script` calls (or, with --tool exec, `sandbox_exec` calls
// into one sandbox it creates first and destroys at the end) through ONE
// `demesne serve` session over stdio, using @modelcontextprotocol/client 2.x
// from tests/e2e/node_modules.
//
//   node bench/mcp-timer.mjs [--calls N | --stdin] [--era modern|legacy] [--tool script|exec]
//                            [--command 'echo hi'] [--image python] [--egress none] [--parallel K]
//
// --calls N (default 20): do N calls, print one line per call ("ms <float>")
//   and then "median_ms <float>".
// --parallel K (with --calls): each of the N rounds sends K calls at once
//   and waits for all; one "ms" line per call, then "median_ms" and
//   "p95_ms" over all N*K calls (bench/bench-parallel.sh). --pause-ms M
//   waits M ms between rounds (a warm pool refills meanwhile).
// --stdin: print "ready <era> <protocolVersion>" once connected, then answer
//   each input line "call" with one line "ms <float>"; "quit" or EOF ends the
//   session. bench/bench-script.sh drives this mode so that it can alternate
//   demesne calls with plain `podman run` calls.
// Any failed or unexpected call prints "error <message>" and exits 1.
//
// Timing is client-side wall time from sending tools/call to receiving its
// result (process.hrtime), i.e. what an MCP client waits for; the one-off
// connect (server start, server/discover probe or initialize) is not counted.
//
// Environment: DEMESNE (absolute path of the binary, required),
// DEMESNE_OUTPUT_ROOT (default: a fresh temp dir, removed at exit).

import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const E2E = path.join(ROOT, 'tests', 'e2e');

function die(msg) {
  process.stdout.write(`error ${msg}\n`);
  process.exit(1);
}

function parseArgs(argv) {
  const o = { calls: 20, stdin: false, era: 'modern', tool: 'script', command: undefined, image: 'python', egress: 'none',
    parallel: 1, pauseMs: 0 };
  for (let i = 0; i < argv.length; i += 1) {
    const a = argv[i];
    const val = () => { if (i + 1 >= argv.length) die(`${a} needs a value`); i += 1; return argv[i]; };
    if (a === '--calls') o.calls = Number(val());
    else if (a === '--stdin') o.stdin = true;
    else if (a === '--era') o.era = val();
    else if (a === '--tool') o.tool = val();
    else if (a === '--command') o.command = val();
    else if (a === '--image') o.image = val();
    else if (a === '--egress') o.egress = val();
    else if (a === '--parallel') o.parallel = Number(val());
    else if (a === '--pause-ms') o.pauseMs = Number(val());
    else die(`unknown option ${a}`);
  }
  if (!Number.isInteger(o.calls) || o.calls < 1) die('--calls must be a positive integer');
  if (!Number.isInteger(o.parallel) || o.parallel < 1 || o.parallel > 64) die('--parallel must be 1 to 64');
  if (!['modern', 'legacy'].includes(o.era)) die('--era must be modern or legacy');
  if (!['script', 'exec'].includes(o.tool)) die('--tool must be script or exec');
  if (o.command === undefined) o.command = o.tool === 'exec' ? 'true' : 'echo hi';
  return o;
}

const opts = parseArgs(process.argv.slice(2));
const DEMESNE = process.env.DEMESNE;
if (!DEMESNE || !path.isAbsolute(DEMESNE)) die('DEMESNE must be the absolute path of the demesne binary');
if (!fs.existsSync(path.join(E2E, 'node_modules', '@modelcontextprotocol', 'client'))) {
  die('tests/e2e/node_modules is missing: run `npm ci --prefix tests/e2e` first');
}

const requireFromE2E = createRequire(path.join(E2E, 'package.json'));
const load = (spec) => import(pathToFileURL(requireFromE2E.resolve(spec)).href);
const { Client } = await load('@modelcontextprotocol/client');
const { StdioClientTransport } = await load('@modelcontextprotocol/client/stdio');

let ownOutputRoot;
let outputRoot = process.env.DEMESNE_OUTPUT_ROOT;
if (!outputRoot) {
  ownOutputRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'demesne-bench-'));
  outputRoot = ownOutputRoot;
}

const client = new Client(
  { name: 'demesne-bench', version: '0.0.0' },
  opts.era === 'modern' ? { versionNegotiation: { mode: { pin: '2026-07-28' } } } : {},
);
const transport = new StdioClientTransport({
  command: DEMESNE,
  // BENCH_SERVE_ARGS: more arguments for `demesne serve` (e.g. --log-level debug --log-file F).
  args: ['serve', ...(process.env.BENCH_SERVE_ARGS ?? '').split(' ').filter(Boolean)],
  env: { ...process.env, DEMESNE_OUTPUT_ROOT: outputRoot },
  stderr: 'inherit',
});

let serverPid;
async function shutdown(code) {
  if (sandboxId) {
    try {
      await client.callTool({ name: 'sandbox_destroy', arguments: { sandbox_id: sandboxId } }, { timeout: 60_000 });
    } catch { /* the server's TTL reaper gets it */ }
    sandboxId = undefined;
  }
  try { await client.close(); } catch { /* ignore */ }
  if (serverPid) { try { process.kill(serverPid, 'SIGKILL'); } catch { /* gone */ } }
  if (ownOutputRoot) fs.rmSync(ownOutputRoot, { recursive: true, force: true });
  process.exit(code);
}
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) process.on(sig, () => shutdown(1));

try {
  await client.connect(transport, { timeout: 60_000 });
} catch (err) {
  process.stdout.write(`error connect failed: ${err?.message ?? err}\n`);
  await shutdown(1);
}
serverPid = transport.pid ?? undefined;

let sandboxId;
if (opts.tool === 'exec') {
  const r = await client.callTool({ name: 'sandbox_create', arguments: { image: opts.image, egress: opts.egress } },
    { timeout: 600_000 });
  sandboxId = r?.structuredContent?.sandbox_id;
  if (r?.isError || !sandboxId) {
    process.stdout.write(`error sandbox_create failed: ${JSON.stringify(r).slice(0, 500)}\n`);
    await shutdown(1);
  }
}

// A warm pool fills in the background after the server starts: the timed
// calls begin once it is full (or after 120 s), so the first round measures
// what every later one does.
{
  const t0 = Date.now();
  for (;;) {
    const l = await client.callTool({ name: 'sandbox_list', arguments: {} }, { timeout: 60_000 });
    const pool = l?.structuredContent?.pool;
    if (!pool || pool.ready >= pool.size || Date.now() - t0 > 120_000) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

const CALL = opts.tool === 'exec'
  ? { name: 'sandbox_exec', arguments: { sandbox_id: sandboxId, command: opts.command } }
  : { name: 'sandbox_script', arguments: { command: opts.command, image: opts.image, egress: opts.egress } };
const EXPECT_STDOUT = opts.command === 'echo hi' ? 'hi\n' : undefined;

async function timedCall() {
  const t0 = process.hrtime.bigint();
  let r;
  try {
    r = await client.callTool(CALL, { timeout: 600_000 });
  } catch (err) {
    throw new Error(`tools/call failed: ${err?.message ?? err}`);
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const sc = r?.structuredContent;
  if (r?.isError || sc?.exit_code !== 0 || (EXPECT_STDOUT !== undefined && sc?.stdout !== EXPECT_STDOUT)) {
    throw new Error(`unexpected result: ${JSON.stringify(r).slice(0, 500)}`);
  }
  return ms;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

try {
  if (opts.stdin) {
    process.stdout.write(`ready ${client.getProtocolEra()} ${client.getNegotiatedProtocolVersion()}\n`);
    const rl = readline.createInterface({ input: process.stdin });
    for await (const line of rl) {
      const cmd = line.trim();
      if (cmd === '') continue;
      if (cmd === 'quit') break;
      if (cmd !== 'call') { process.stdout.write(`error unknown input ${JSON.stringify(cmd)}\n`); continue; }
      process.stdout.write(`ms ${(await timedCall()).toFixed(3)}\n`);
    }
  } else {
    const times = [];
    for (let i = 0; i < opts.calls; i += 1) {
      if (i > 0 && opts.pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, opts.pauseMs));
      const round = await Promise.all(Array.from({ length: opts.parallel }, () => timedCall()));
      for (const ms of round) {
        times.push(ms);
        process.stdout.write(`ms ${ms.toFixed(3)}\n`);
      }
    }
    const sorted = [...times].sort((a, b) => a - b);
    process.stdout.write(`median_ms ${median(times).toFixed(3)}\n`);
    process.stdout.write(`p95_ms ${sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.95) - 1)].toFixed(3)}\n`);
  }
} catch (err) {
  process.stdout.write(`error ${err?.message ?? err}\n`);
  await shutdown(1);
}
await shutdown(0);
