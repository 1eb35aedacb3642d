// Shared harness for the demesne e2e scripts: TAP output, the skip rule, the
// per-script deadline, the temporary DEMESNE_OUTPUT_ROOT, and killing every
// server process a script started (by PID) when it ends.
//
// Import this module BEFORE any MCP SDK module: it checks that
// tests/e2e/node_modules exists (skipping with exit 77 when it does not) and
// it wraps child_process.spawn so that the server processes the SDKs spawn
// (including the 2.x client's short-lived `server/discover` probe sibling)
// are recorded by PID.

import cp from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const E2E_DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const NODE_MODULES = path.join(E2E_DIR, 'node_modules');

/* ---------- TAP ---------- */

let planned = 0;
let counter = 0;
let failures = 0;
let passes = 0;
let skips = 0;
let finished = false;
let bailing = false; // true while the bail-out path prints its own diagnostics

export function plan(n) {
  planned = n;
  process.stdout.write(`1..${n}\n`);
}

export function diag(msg) {
  if (finished && !bailing) return;
  for (const line of String(msg).split('\n')) process.stdout.write(`# ${line}\n`);
}

function report(okay, name, detail) {
  if (finished) return okay; // after a bail-out nothing more is reported
  counter += 1;
  const clean = String(name).replace(/[\r\n]+/g, ' ').replace(/#/g, '\\#');
  process.stdout.write(`${okay ? 'ok' : 'not ok'} ${counter} - ${clean}\n`);
  if (okay) passes += 1;
  else {
    failures += 1;
    if (detail !== undefined) diag(detail);
  }
  return okay;
}

export function ok(cond, name, detail) {
  return report(Boolean(cond), name, cond ? undefined : detail);
}

export function equal(actual, expected, name) {
  const good = Object.is(actual, expected);
  return report(good, name, good ? undefined : `expected: ${JSON.stringify(expected)}\nactual:   ${JSON.stringify(actual)}`);
}

export function pass(name) { return report(true, name); }

export function fail(name, err) {
  if (!(err instanceof Error)) return report(false, name, String(err));
  const frames = (err.stack ?? '').split('\n').filter((l) => /^\s+at /.test(l)).slice(0, 2);
  return report(false, name, [`${err.name}: ${err.message}`, ...frames].join('\n'));
}

/** Mark the remaining planned tests as failed (used when a prerequisite step breaks). */
export function failRemaining(reason) {
  while (counter < planned) report(false, `not reached: ${reason}`);
}

/** Skip `n` tests with a reason (they count as passed, as TAP says). */
export function skip(n, reason) {
  for (let i = 0; i < n; i += 1) {
    counter += 1;
    skips += 1;
    process.stdout.write(`ok ${counter} # SKIP ${reason}\n`);
  }
}

/* ---------- environment ---------- */

/** Exit 77 with a TAP skip plan when the e2e dependencies are not installed. */
export function requireNodeModules() {
  if (!fs.existsSync(path.join(NODE_MODULES, '@modelcontextprotocol'))) {
    process.stdout.write(`1..0 # SKIP tests/e2e/node_modules is missing: run \`(cd tests/e2e && npm ci)\` first\n`);
    process.exit(77);
  }
}

/** The demesne binary: $DEMESNE, absolute and executable, or bail out (exit 1). */
export function demesneBinary() {
  const bin = process.env.DEMESNE;
  let problem;
  if (!bin) problem = 'DEMESNE is not set (it must be the absolute path of the demesne binary)';
  else if (!path.isAbsolute(bin)) problem = `DEMESNE must be an absolute path, got ${JSON.stringify(bin)}`;
  else {
    try { fs.accessSync(bin, fs.constants.X_OK); } catch { problem = `DEMESNE=${bin} is not an executable file`; }
  }
  if (problem) {
    process.stdout.write(`Bail out! ${problem}\n`);
    process.exit(1);
  }
  return bin;
}

/** A fresh DEMESNE_OUTPUT_ROOT; removed at exit when every test passed, kept (and named) otherwise. */
export function makeOutputRoot(tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `demesne-e2e-${tag}-`));
  outputRoots.push(dir);
  return dir;
}
const outputRoots = [];

/**
 * Environment for a server started by an SDK transport: the whole parent
 * environment plus DEMESNE_OUTPUT_ROOT (the SDKs' stdio transports pass only
 * HOME/LOGNAME/PATH/SHELL/TERM/USER unless `env` is given).
 */
export function serverEnv(outputRoot, extra = {}) {
  return { ...process.env, DEMESNE_OUTPUT_ROOT: outputRoot, ...extra };
}

/* ---------- process tracking ---------- */

const children = new Map(); // pid -> { child, label }

function track(child, label) {
  if (child && child.pid) {
    children.set(child.pid, { child, label });
    child.once('exit', () => children.delete(child.pid));
  }
  return child;
}

/**
 * Record every process spawned through child_process.spawn whose command is
 * `bin` (the SDK stdio transports use cross-spawn, which calls
 * child_process.spawn on the same module object this patches).
 */
export function trackSpawnsOf(bin) {
  const original = cp.spawn;
  cp.spawn = function trackedSpawn(command, ...rest) {
    const child = original.call(this, command, ...rest);
    if (command === bin) track(child, `${path.basename(bin)} (spawned by an SDK transport)`);
    return child;
  };
}

/**
 * Close an SDK client whose StdioClientTransport runs `demesne serve`, giving
 * the server time to remove its containers. The SDK's own close ends stdin,
 * then sends SIGTERM after 2 s and SIGKILL after 4 s: on a loaded machine a
 * server still removing its warm pool is killed and leaves containers behind.
 * Here: SIGTERM (demesne's orderly stop), up to `graceMs` for it to exit, then
 * the SDK's close.
 */
export async function closeStdio(client, transport, graceMs = 60_000) {
  const pid = transport?.pid;
  if (pid) {
    try { process.kill(pid, 'SIGTERM'); } catch { /* gone */ }
    const deadline = Date.now() + graceMs;
    while (Date.now() < deadline && alive(pid)) await new Promise((r) => setTimeout(r, 50));
  }
  await client.close().catch(() => {});
}

/** Spawn a helper (e.g. the inspector) in its own process group so that the group can be killed. */
export function spawnGroup(command, args, options = {}) {
  const child = cp.spawn(command, args, { ...options, detached: true });
  child.group = true;
  return track(child, `${command} ${args.slice(0, 3).join(' ')}`);
}

function alive(pid) {
  try { process.kill(pid, 0); return true; } catch { return false; }
}

function signalAll(sig) {
  for (const [pid, { child }] of children) {
    try {
      if (child.group) process.kill(-pid, sig);
      else process.kill(pid, sig);
    } catch { /* already gone */ }
  }
}

/** SIGTERM every tracked process still running, then SIGKILL whatever is left after `graceMs`. */
export async function killAll(graceMs = 3000) {
  if (children.size === 0) return;
  signalAll('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline && [...children.keys()].some(alive)) {
    await new Promise((r) => setTimeout(r, 50));
  }
  const left = [...children.keys()].filter(alive);
  if (left.length > 0) {
    diag(`SIGKILL to processes still running after SIGTERM: ${left.join(', ')}`);
    signalAll('SIGKILL');
  }
}

// Last resort on any exit path: synchronous SIGKILL of whatever is still tracked.
process.on('exit', () => {
  for (const [pid, { child }] of children) {
    try {
      if (child.group) process.kill(-pid, 'SIGKILL');
      else process.kill(pid, 'SIGKILL');
    } catch { /* gone */ }
  }
});

/* ---------- run ---------- */

/**
 * Run `body` under a whole-script deadline (E2E_TIMEOUT_SECONDS, default 600:
 * a safety net only; every wait in a script has its own, shorter bound, and
 * a sanitizer build runs several times slower than a plain one).
 * Prints the closing summary line, kills tracked processes, and exits 0 only
 * when every planned test ran and passed.
 */
export async function run(body) {
  const seconds = Number(process.env.E2E_TIMEOUT_SECONDS ?? 600);
  const timer = setTimeout(async () => {
    if (finished) return;
    finished = true;
    bailing = true;
    process.stdout.write(`Bail out! timed out after ${seconds} s\n`);
    await killAll(2000);
    for (const dir of outputRoots) diag(`output root kept: ${dir}`);
    process.exit(1);
  }, seconds * 1000);
  timer.unref();
  const bail = async (err) => {
    if (finished) return;
    finished = true;
    bailing = true;
    process.stdout.write(`Bail out! ${String(err?.message ?? err).split('\n')[0]}\n`);
    if (err?.stack) diag(err.stack);
    await killAll(2000);
    for (const dir of outputRoots) diag(`output root kept: ${dir}`);
    process.exit(1);
  };
  process.on('unhandledRejection', bail);
  process.on('uncaughtException', bail);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    process.on(sig, () => bail(new Error(`received ${sig}`)));
  }
  try {
    await body();
  } catch (err) {
    fail('unexpected exception in the test script', err);
  }
  if (finished) return;
  finished = true;
  clearTimeout(timer);
  await killAll();
  if (counter !== planned) {
    diag(`planned ${planned} tests but ran ${counter}`);
    failures += Math.max(1, planned - counter);
  }
  // Plain summary line (not TAP; TAP consumers ignore it).
  process.stdout.write(`e2e: ${passes} passed, ${failures} failed${skips ? `, ${skips} skipped` : ''}\n`);
  for (const dir of outputRoots) {
    if (failures === 0 && !process.env.E2E_KEEP_OUTPUT) fs.rmSync(dir, { recursive: true, force: true });
    else diag(`output root kept: ${dir}`);
  }
  process.exit(failures === 0 ? 0 : 1);
}

/** Await a promise with a timeout; rejects with a clear message. */
export function within(ms, what, promise) {
  let t;
  return Promise.race([
    promise,
    new Promise((_, reject) => { t = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms); }),
  ]).finally(() => clearTimeout(t));
}

/** First text block of a tool result, or ''. */
export function firstText(result) {
  const block = Array.isArray(result?.content) ? result.content.find((c) => c?.type === 'text') : undefined;
  return typeof block?.text === 'string' ? block.text : '';
}
