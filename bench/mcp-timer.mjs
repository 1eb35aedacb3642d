#!/usr/bin/env node
// Times `sandbox_script` calls (or, with --tool exec, `sandbox_exec` calls
// into one sandbox it creates first and destroys at the end; with --tool
// list, `sandbox_list` calls) through ONE `demesne serve` session over stdio,
// using @modelcontextprotocol/client 2.x from tests/e2e/node_modules.
//
//   node bench/mcp-timer.mjs [--calls N | --stdin] [--era modern|legacy] [--tool script|exec|list]
//                            [--command 'echo hi'] [--image python] [--egress none] [--parallel K]
//                            [--keep-going]
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
//   demesne calls with plain `podman run` calls. More input lines, for a
//   mix of calls in one session (bench/bench-rss.sh):
//     "call exec|script|list"  that tool instead of --tool's (exec `true`,
//                              script `echo hi`; --command is --tool's own)
//     "create"   sandbox_create (--image, --egress) when there is no sandbox:
//                "created <sandbox_id> <ms>"; "call exec" goes into it
//     "destroy"  sandbox_destroy of that sandbox: "ms <float>"
//     "pid"      "pid <pid of the demesne serve process>"
// Any failed or unexpected call prints "error <message>" and exits 1; with
// --keep-going (--stdin only) it answers "fail <message>" instead and the
// session goes on.
//
// Timing is client-side wall time from sending tools/call to receiving its
// result (process.hrtime), i.e. what an MCP client waits for; the one-off
// connect (server start, server/discover probe or initialize) is not counted.
//
// Environment: DEMESNE (absolute path of the binary, required),
// DEMESNE_OUTPUT_ROOT (default: a fresh temp dir, removed at exit),
// DEMESNE_SHIM_PATH (default: the build tree's shim beside DEMESNE,
// src/shim/demesne-shim, when there is one; a build-tree binary would
// otherwise take an installed shim first, and measure that one).

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

const DEFAULT_COMMAND = { exec: 'true', script: 'echo hi', list: undefined };

function parseArgs(argv) {
  const o = { calls: 20, stdin: false, era: 'modern', tool: 'script', command: undefined, image: 'python', egress: 'none',
    parallel: 1, pauseMs: 0, keepGoing: false };
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
    else if (a === '--keep-going') o.keepGoing = true;
    else die(`unknown option ${a}`);
  }
  if (!Number.isInteger(o.calls) || o.calls < 1) die('--calls must be a positive integer');
  if (!Number.isInteger(o.parallel) || o.parallel < 1 || o.parallel > 64) die('--parallel must be 1 to 64');
  if (!['modern', 'legacy'].includes(o.era)) die('--era must be modern or legacy');
  if (!['script', 'exec', 'list'].includes(o.tool)) die('--tool must be script, exec or list');
  if (o.command === undefined) o.command = DEFAULT_COMMAND[o.tool];
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

// The shim built with this binary, not an installed one (demesne looks in
// pkglibexecdir before its build tree).
const builtShim = path.join(path.dirname(DEMESNE), 'shim', 'demesne-shim');
const shimEnv = process.env.DEMESNE_SHIM_PATH || !fs.existsSync(builtShim) ? {} : { DEMESNE_SHIM_PATH: builtShim };

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
  env: { ...process.env, ...shimEnv, DEMESNE_OUTPUT_ROOT: outputRoot },
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
  // demesne's orderly stop removes its warm pool; the SDK's close would
  // SIGKILL it after 4 s, which on a loaded machine leaves containers behind
  // (another output root's runs are no other server's to sweep).
  if (serverPid) {
    try { process.kill(serverPid, 'SIGTERM'); } catch { /* gone */ }
    for (let i = 0; i < 1200; i++) {
      try { process.kill(serverPid, 0); } catch { break; }
      await new Promise((r) => setTimeout(r, 50));
    }
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
// -> ms; sets sandboxId. Throws on failure.
async function createSandbox() {
  const t0 = process.hrtime.bigint();
  const r = await client.callTool({ name: 'sandbox_create', arguments: { image: opts.image, egress: opts.egress } },
    { timeout: 600_000 });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r?.isError || !r?.structuredContent?.sandbox_id) {
    throw new Error(`sandbox_create failed: ${JSON.stringify(r).slice(0, 500)}`);
  }
  sandboxId = r.structuredContent.sandbox_id;
  return ms;
}
if (opts.tool === 'exec') {
  try {
    await createSandbox();
  } catch (err) {
    process.stdout.write(`error ${err.message}\n`);
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

// The request for one tool (--tool's by default) and the check of its result.
function callFor(tool) {
  const command = tool === opts.tool ? opts.command : DEFAULT_COMMAND[tool];
  const expectStdout = command === 'echo hi' ? 'hi\n' : undefined;
  const ran = (sc) => sc?.exit_code === 0 && (expectStdout === undefined || sc?.stdout === expectStdout);
  if (tool === 'exec') {
    return { req: { name: 'sandbox_exec', arguments: { sandbox_id: sandboxId, command } }, ok: ran };
  }
  if (tool === 'script') {
    return { req: { name: 'sandbox_script', arguments: { command, image: opts.image, egress: opts.egress } }, ok: ran };
  }
  return { req: { name: 'sandbox_list', arguments: {} }, ok: (sc) => Array.isArray(sc?.sandboxes) };
}

async function timedCall(tool = opts.tool) {
  if (tool === 'exec' && !sandboxId) throw new Error('sandbox_exec: no sandbox (send "create" first)');
  const { req, ok } = callFor(tool);
  const t0 = process.hrtime.bigint();
  let r;
  try {
    r = await client.callTool(req, { timeout: 600_000 });
  } catch (err) {
    throw new Error(`tools/call failed: ${err?.message ?? err}`);
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r?.isError || !ok(r?.structuredContent)) {
    throw new Error(`unexpected result: ${JSON.stringify(r).slice(0, 500)}`);
  }
  return ms;
}

// One input line of --stdin -> its answer line. Throws on a failed call.
async function answer(cmd) {
  const [verb, arg, ...rest] = cmd.split(/\s+/);
  if (verb === 'call' && rest.length === 0 && (arg === undefined || ['script', 'exec', 'list'].includes(arg))) {
    return `ms ${(await timedCall(arg ?? opts.tool)).toFixed(3)}`;
  }
  if (verb === 'pid' && arg === undefined) return `pid ${serverPid ?? 0}`;
  if (verb === 'create' && arg === undefined) {
    if (sandboxId) throw new Error(`create: there is a sandbox already (${sandboxId})`);
    const ms = await createSandbox();
    return `created ${sandboxId} ${ms.toFixed(3)}`;
  }
  if (verb === 'destroy' && arg === undefined) {
    if (!sandboxId) throw new Error('destroy: no sandbox');
    const t0 = process.hrtime.bigint();
    const r = await client.callTool({ name: 'sandbox_destroy', arguments: { sandbox_id: sandboxId } },
      { timeout: 60_000 });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r?.isError || r?.structuredContent?.destroyed !== true) {
      throw new Error(`sandbox_destroy failed: ${JSON.stringify(r).slice(0, 500)}`);
    }
    sandboxId = undefined;
    return `ms ${ms.toFixed(3)}`;
  }
  return undefined;
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
      let reply;
      try {
        reply = await answer(cmd);
      } catch (err) {
        if (!opts.keepGoing) throw err;
        reply = `fail ${String(err?.message ?? err).replace(/\s+/g, ' ')}`;
      }
      process.stdout.write(`${reply ?? `error unknown input ${JSON.stringify(cmd)}`}\n`);
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
