#!/usr/bin/env node
// The tasks extension (SEP-2663, io.modelcontextprotocol/tasks) against
// demesne's real tools, as raw JSON-RPC over both transports and both eras:
// every MUST of the official conformance suite's tasks-* scenarios (which
// need the suite's own fixture tools: `sleep` stands for slow_compute,
// `exit 3` and an engine that goes away for failing_job and protocol_error_job:
// in demesne both answer a result in the foreground, so a task completes),
// plus cancel races, 100 concurrent tasks, another principal's task, and a
// server killed with -9.
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-tasks.mjs
//
// Prints TAP; exits 0 only if every test passed, 77 when node_modules is missing.

import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
process.env.E2E_TIMEOUT_SECONDS ??= '900';
const { startHttpServer, waitContainers } = await import('./lib/http-server.mjs');

const MODERN = '2026-07-28';
const LEGACY = '2025-11-25';
const TASKS = 'io.modelcontextprotocol/tasks';
const WITH = { extensions: { [TASKS]: {} } };
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const TERMINAL = ['completed', 'failed', 'cancelled'];
const ANSWER_MS = 120_000; /* one answer on a loaded machine; a safety net, not a measure */
const ENGINE = process.env.DOCKER_HOST ?? 'unix:///run/podman/podman.sock';

/* ---------- clients ---------- */

/** A JSON-RPC client over demesne serve's stdio. */
class StdioClient {
  constructor(env, logFile) {
    const log = fs.openSync(logFile, 'a');
    this.child = h.spawnGroup(DEMESNE, ['serve'], { env, stdio: ['pipe', 'pipe', log] });
    fs.closeSync(log);
    this.pid = this.child.pid;
    this.child.stdin.on('error', () => { /* a server killed on purpose */ });
    this.next = 1;
    this.pending = new Map();
    let buf = '';
    this.child.stdout.setEncoding('utf8');
    this.child.stdout.on('data', (chunk) => {
      buf += chunk;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        let msg;
        try { msg = JSON.parse(line); } catch { h.diag(`not JSON on stdout: ${line}`); continue; }
        const p = msg.id !== undefined && this.pending.get(msg.id);
        if (p && (msg.result !== undefined || msg.error !== undefined)) {
          this.pending.delete(msg.id);
          p(msg);
        }
      }
    });
  }

  send(method, params) {
    const id = this.next++;
    const done = new Promise((resolve) => this.pending.set(id, resolve));
    this.child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', id, method, params })}\n`);
    return h.within(ANSWER_MS, `${method} over stdio`, done);
  }

  close() {
    this.child.stdin.end();
    return new Promise((resolve) => {
      if (this.child.exitCode !== null || this.child.signalCode !== null) resolve();
      else this.child.once('exit', () => resolve());
    });
  }
}

/** A JSON-RPC client over demesne serve --http (a 2026-07-28 POST each, or a legacy session). */
class HttpClient {
  constructor(server, token) {
    this.url = server.url;
    this.pid = server.child.pid;
    this.auth = token ? { Authorization: `Bearer ${token}` } : server.headers;
    this.next = 1;
    this.session = undefined;
    this.version = MODERN;
  }

  async send(method, params) {
    const id = this.next++;
    const headers = { ...this.auth, 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream',
      'MCP-Protocol-Version': this.version };
    if (this.version === MODERN) {
      headers['Mcp-Method'] = method;
      const name = method === 'tools/call' ? params?.name : method.startsWith('tasks/') ? params?.taskId : undefined;
      if (typeof name === 'string') headers['Mcp-Name'] = name;
    }
    if (this.session) headers['Mcp-Session-Id'] = this.session;
    const res = await h.within(ANSWER_MS, `${method} over HTTP`, fetch(this.url, {
      method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
    }));
    if (method === 'initialize') this.session = res.headers.get('mcp-session-id') ?? undefined;
    const text = await res.text();
    if ((res.headers.get('content-type') ?? '').includes('text/event-stream')) {
      for (const line of text.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const msg = JSON.parse(line.slice(5));
        if (msg.id === id) return msg;
      }
      throw new Error(`${method}: no answer in the event stream: ${text.slice(0, 300)}`);
    }
    return JSON.parse(text);
  }

  close() { return Promise.resolve(); }
}

/** What a test sends: modern (caps in every request's _meta) or legacy (initialize, then caps per request if given). */
function era(client, { legacy = false, caps = WITH } = {}) {
  const meta = (c) => (legacy
    ? (c ? { 'io.modelcontextprotocol/clientCapabilities': c } : undefined)
    : { 'io.modelcontextprotocol/protocolVersion': MODERN, 'io.modelcontextprotocol/clientCapabilities': c ?? {},
      'io.modelcontextprotocol/clientInfo': { name: 'demesne-e2e-tasks', version: '0' } });
  const api = {
    client,
    legacy,
    /** Raw response: {result} or {error}. caps overrides this era's declaration for one request. */
    rpc: (method, params = {}, c = legacy ? undefined : caps) => {
      const m = meta(c);
      return client.send(method, m ? { ...params, _meta: m } : params);
    },
    async call(name, args, c) { return api.rpc('tools/call', { name, arguments: args }, c); },
    async get(taskId, c) { return api.rpc('tasks/get', { taskId }, c); },
    /** Polls tasks/get at the task's pollIntervalMs until a terminal status. */
    async settle(taskId, timeoutMs = 180_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const r = await api.get(taskId);
        if (r.error) throw new Error(`tasks/get ${taskId}: ${JSON.stringify(r.error)}`);
        if (TERMINAL.includes(r.result.status)) return r.result;
        if (Date.now() > deadline) throw new Error(`task ${taskId} still ${r.result.status} after ${timeoutMs} ms`);
        await new Promise((res) => setTimeout(res, Math.min(r.result.pollIntervalMs ?? 500, 500)));
      }
    },
  };
  if (legacy) {
    api.initialize = (initCaps) => client.send('initialize', {
      protocolVersion: LEGACY, capabilities: initCaps, clientInfo: { name: 'demesne-e2e-tasks', version: '0' },
    });
    if (client instanceof HttpClient) client.version = LEGACY;
  }
  return api;
}

/** The MCP Inspector's CLI (its tasks client, @modelcontextprotocol/ext-tasks) against a stdio server. */
function inspectorCall(root, env, toolArgs) {
  const args = ['mcp-inspector', '--cli', '--format', 'json', DEMESNE, 'serve',
    ...Object.entries(env).flatMap(([k, v]) => ['-e', `${k}=${v}`]), '--protocol-era', 'modern',
    '--method', 'tools/call', '--tool-name', 'sandbox_script', '--tool-args-json', JSON.stringify(toolArgs)];
  return new Promise((resolve) => {
    const child = h.spawnGroup('npx', args, { cwd: h.E2E_DIR, env: { ...process.env, MCP_INSPECTOR_SECRET_STORE: 'memory' },
      stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => { try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ } }, ANSWER_MS);
    child.on('close', (code) => {
      clearTimeout(timer);
      fs.writeFileSync(path.join(root, 'inspector.log'), stderr);
      let json;
      try { json = JSON.parse(stdout); } catch { /* reported by the check */ }
      resolve({ code, stdout, stderr, json });
    });
  });
}

function serverEnv(root, extra = {}) {
  return h.serverEnv(root, { DEMESNE_POOL: '0', DOCKER_HOST: ENGINE, ...extra });
}

const ENVELOPE = ['result', 'error', 'inputRequests', 'task', 'ttl', 'pollInterval', 'requestState'];

/** The checks of a CreateTaskResult (tasks-lifecycle, tasks-wire-fields, tasks-request-state-removal). */
function createProblems(r, legacy) {
  const p = [];
  if (!r.result) return [`no result: ${JSON.stringify(r.error)}`];
  const t = r.result;
  if (t.resultType !== 'task') p.push(`resultType ${JSON.stringify(t.resultType)}`);
  if (!/^job-[0-9a-f]{12}$/.test(t.taskId ?? '')) p.push(`taskId ${JSON.stringify(t.taskId)}`);
  if (!['working', 'completed'].includes(t.status)) p.push(`status ${JSON.stringify(t.status)}`);
  if (!ISO.test(t.createdAt ?? '') || !ISO.test(t.lastUpdatedAt ?? '')) p.push('createdAt/lastUpdatedAt not ISO 8601');
  if (!Number.isInteger(t.ttlMs) || t.ttlMs <= 0) p.push(`ttlMs ${JSON.stringify(t.ttlMs)}`);
  if (!Number.isInteger(t.pollIntervalMs) || t.pollIntervalMs <= 0) p.push(`pollIntervalMs ${JSON.stringify(t.pollIntervalMs)}`);
  for (const k of ENVELOPE) if (k in t) p.push(`carries ${k}`);
  if (legacy && t.content) p.push('carries content');
  return p;
}

/** Runs f(0..n-1), at most width at a time; the results in order. */
async function pool(n, width, f) {
  const out = new Array(n);
  let next = 0;
  await Promise.all(Array.from({ length: width }, async () => {
    while (next < n) {
      const i = next++;
      out[i] = await f(i);
    }
  }));
  return out;
}

const isAck = (r) => r.result && JSON.stringify(r.result) === JSON.stringify({ resultType: 'complete' });

/* ---------- the scenarios ---------- */

const LIFECYCLE = 14;
/** tasks-lifecycle, tasks-dispatch-and-envelope, tasks-wire-fields, tasks-request-state-removal, on one client that declared the extension. */
async function lifecycle(label, c, pid) {
  const sync = await c.call('sandbox_list', {});
  h.ok(sync.result && sync.result.resultType === (c.legacy ? undefined : 'complete') && !('taskId' in sync.result) &&
    Array.isArray(sync.result.content) && sync.result.content.length > 0,
  `${label}: a sync tool (sandbox_list) answers a plain result, no taskId`, JSON.stringify(sync).slice(0, 300));

  const legacyHint = await c.rpc('tools/call', { name: 'sandbox_list', arguments: {}, task: { ttl: 60000, pollInterval: 100 } });
  h.ok(legacyHint.result && !('taskId' in legacyHint.result) && legacyHint.result.resultType !== 'task',
    `${label}: a v1 'task' param is tolerated and does not make a sync tool a task`, JSON.stringify(legacyHint).slice(0, 300));

  const created = await c.call('sandbox_script', { command: 'sleep 3; echo done' });
  const problems = createProblems(created, c.legacy);
  h.ok(problems.length === 0, `${label}: a slow sandbox_script answers a flat CreateTaskResult (${problems.join('; ') || 'all fields'})`,
    JSON.stringify(created));
  const id = created.result?.taskId;

  const now = await c.get(id);
  h.ok(now.result?.taskId === id && ['working', 'completed'].includes(now.result?.status) && now.result.resultType === 'complete' &&
    !('result' in now.result && now.result.status === 'working') && !('error' in now.result) && !('requestState' in now.result),
  `${label}: tasks/get right after the CreateTaskResult resolves the task (durable create)`, JSON.stringify(now));

  const status = await c.call('sandbox_status', { job_id: id });
  h.ok(status.result?.structuredContent?.job_id === id && status.result.structuredContent.tool === 'sandbox_script',
    `${label}: sandbox_status sees the task as a job`, JSON.stringify(status).slice(0, 400));

  const done = await c.settle(id);
  h.ok(done.status === 'completed' && done.result?.isError === false && done.result.structuredContent?.stdout === 'done\n' &&
    done.result.structuredContent.exit_code === 0 && Array.isArray(done.result.content) && done.result.content.length > 0 &&
    !('error' in done) && !done.result._meta?.['io.modelcontextprotocol/related-task'] && !('job_id' in done.result.structuredContent) &&
    ISO.test(done.lastUpdatedAt) && done.lastUpdatedAt >= done.createdAt,
  `${label}: the completed task inlines the tool result (content, structuredContent as in the foreground)`, JSON.stringify(done).slice(0, 600));
  await new Promise((r) => setTimeout(r, 500));
  const later = await c.get(id);
  h.ok(later.result?.taskId === id && later.result.status === 'completed', `${label}: the task stays readable within its ttlMs`,
    JSON.stringify(later).slice(0, 300));

  /* A command's exit code is a result, not a tool error: the task answers
   * what the foreground call answers (isError false), whatever its timing. */
  const failing = await c.call('sandbox_script', { command: 'sleep 1; echo oops >&2; exit 3' });
  const failed = failing.result?.taskId ? await c.settle(failing.result.taskId) : {};
  const fg = await c.call('sandbox_script', { command: 'sleep 1; echo oops >&2; exit 3' }, {});
  const same = (r) => JSON.stringify([r?.isError, r?.structuredContent?.exit_code, r?.structuredContent?.stdout,
    r?.structuredContent?.stderr, Object.keys(r?.structuredContent ?? {}).sort()]);
  h.ok(failed.status === 'completed' && !('error' in failed) && failed.result?.structuredContent?.exit_code === 3 &&
    same(failed.result) === same(fg.result) && !('taskId' in (fg.result ?? {})),
  `${label}: exit 3: completed, with the result the same call gives in the foreground (exit_code 3, isError ${fg.result?.isError})`,
  JSON.stringify([failed, fg]).slice(0, 900));

  const long = await c.call('sandbox_script', { command: 'sleep 120' });
  const longId = long.result?.taskId;
  const ack = await c.rpc('tasks/cancel', { taskId: longId });
  h.ok(isAck(ack), `${label}: tasks/cancel answers the empty {resultType: "complete"} ack`, JSON.stringify(ack));
  const cancelled = await c.settle(longId);
  h.ok(cancelled.status === 'cancelled' && !('result' in cancelled) && !('error' in cancelled),
    `${label}: the cancelled task reads cancelled`, JSON.stringify(cancelled));
  h.equal(await waitContainers(pid, 0, 120_000), 0, `${label}: the cancelled task's container is removed`);

  const again = await c.rpc('tasks/cancel', { taskId: id });
  const terminal = await c.get(id);
  h.ok(isAck(again) && terminal.result?.status === 'completed',
    `${label}: tasks/cancel of a completed task is the same ack and changes nothing`, JSON.stringify([again, terminal.result?.status]));

  const unknown = await Promise.all([c.get('job-000000000000'), c.rpc('tasks/cancel', { taskId: 'nonexistent' }),
    c.rpc('tasks/update', { taskId: 'job-000000000000', inputResponses: {} })]);
  h.ok(unknown.every((r) => r.error?.code === -32602 && /unknown task/.test(r.error.message)),
    `${label}: tasks/get, tasks/cancel and tasks/update of an unknown task: -32602`, JSON.stringify(unknown));

  const update = await c.rpc('tasks/update', { taskId: id, inputResponses: { 'never-issued': { action: 'accept', content: {} } } });
  const removed = await Promise.all([c.rpc('tasks/result', { taskId: id }), c.rpc('tasks/list', {})]);
  h.ok(isAck(update) && removed.every((r) => r.error?.code === -32601),
    `${label}: tasks/update with a key never issued is ignored (ack); tasks/result and tasks/list are -32601`,
    JSON.stringify([update, removed]));
}

const GATING = 3;
/** tasks-capability-negotiation and tasks-required-task-error's gate, for a client that did not declare. */
async function gating(label, c) {
  const methods = await Promise.all([c.get('job-000000000000', {}), c.rpc('tasks/update', { taskId: 'x', inputResponses: {} }, {}),
    c.rpc('tasks/cancel', { taskId: 'x' }, {})]);
  h.ok(methods.every((r) => r.error?.code === -32021 && r.error.data?.requiredCapabilities?.extensions?.[TASKS] !== undefined),
    `${label}: tasks/get, tasks/update, tasks/cancel without the extension: -32021 naming it`, JSON.stringify(methods));
  const sync = await c.call('sandbox_script', { command: 'sleep 2; echo sync' }, c.legacy ? undefined : {});
  h.ok(sync.result && !('taskId' in sync.result) && sync.result.resultType !== 'task' && sync.result.structuredContent?.stdout === 'sync\n',
    `${label}: a slow call without the extension answers in the call, no task`, JSON.stringify(sync).slice(0, 400));
  const opted = await c.call('sandbox_script', { command: 'sleep 2; echo opted' }, WITH);
  const p = createProblems(opted, false);
  const end = opted.result?.taskId ? await (async () => {
    for (;;) {
      const r = await c.get(opted.result.taskId, WITH);
      if (r.error || TERMINAL.includes(r.result.status)) return r;
      await new Promise((res) => setTimeout(res, 300));
    }
  })() : {};
  h.ok(p.length === 0 && end.result?.result?.structuredContent?.stdout === 'opted\n',
    `${label}: the extension declared in one request's _meta makes that call a task (${p.join('; ') || 'ok'})`,
    JSON.stringify([opted, end]).slice(0, 600));
}

/* ---------- run ---------- */

h.plan(1 + LIFECYCLE + 1 + GATING + 3 + 1 + 2 + LIFECYCLE + 9 + 3 + 2);

await h.run(async () => {
  /* 1. stdio, 2026-07-28: every call of a task tool is a task (0). */
  {
    const root = h.makeOutputRoot('tasks-stdio');
    const c = era(new StdioClient(serverEnv(root, { DEMESNE_TASK_AFTER_MS: '0' }), path.join(root, 'server.log')));
    const disc = await c.rpc('server/discover', {});
    const caps = disc.result?.capabilities ?? {};
    h.ok(JSON.stringify(caps.extensions?.[TASKS]) === '{}' && !('tasks' in caps),
      'stdio 2026-07-28: server/discover advertises capabilities.extensions["io.modelcontextprotocol/tasks"] = {}, no capabilities.tasks',
      JSON.stringify(caps));
    await lifecycle('stdio 2026-07-28', c, c.client.pid);
    const hostile = await Promise.all([c.rpc('tasks/get', {}), c.rpc('tasks/get', { taskId: 42 }),
      c.rpc('tasks/cancel', { taskId: null }), c.get('x'.repeat(200_000)), c.get('../../.sandboxes/job-0'), c.get('job-\u0000')]);
    h.ok(hostile.every((r) => r.error?.code === -32602 && r.error.message.length < 400),
      'stdio 2026-07-28: a missing, non-string, huge or path-like taskId: -32602, a short message', JSON.stringify(hostile).slice(0, 800));
    await gating('stdio 2026-07-28', era(c.client, { caps: {} }));
    await c.client.close();
  }

  /* 2. stdio, 2025-11-25: no tasks. The legacy eras have no resultType to
   * tell a task from a CallToolResult; the Inspector declares the extension
   * at initialize there and reads a task as a result without content. */
  {
    const root = h.makeOutputRoot('tasks-legacy');
    const c = era(new StdioClient(serverEnv(root, { DEMESNE_TASK_AFTER_MS: '0' }), path.join(root, 'a.log')), { legacy: true });
    const init = await c.initialize(WITH);
    const caps = init.result?.capabilities ?? {};
    h.ok(caps.extensions && !(TASKS in caps.extensions) && !('tasks' in caps),
      'stdio 2025-11-25: initialize does not advertise the tasks extension (2026-07-28 only)', JSON.stringify(caps));
    const t = await c.call('sandbox_script', { command: 'sleep 1; echo legacy' }, WITH);
    h.ok(t.result && !('taskId' in t.result) && !('resultType' in t.result) && t.result.structuredContent?.stdout === 'legacy\n',
      'stdio 2025-11-25: a session and a request that both declared it still get the result in the call',
      JSON.stringify(t).slice(0, 400));
    const methods = await Promise.all([c.get('job-000000000000', WITH),
      c.rpc('tasks/update', { taskId: 'x', inputResponses: {} }, WITH), c.rpc('tasks/cancel', { taskId: 'x' }, WITH)]);
    h.ok(methods.every((r) => r.error?.code === -32601), 'stdio 2025-11-25: tasks/get, tasks/update, tasks/cancel: -32601',
      JSON.stringify(methods));
    await c.client.close();
  }

  /* 2b. A real tasks client: the Inspector's CLI, 2026-07-28, every call a task. */
  {
    const root = h.makeOutputRoot('tasks-inspector');
    const env = { DEMESNE_OUTPUT_ROOT: root, DEMESNE_POOL: '0', DOCKER_HOST: ENGINE, DEMESNE_TASK_AFTER_MS: '0' };
    for (const k of ['DEMESNE_SHIM_PATH', 'DEMESNE_IMAGES_DIR', 'XDG_RUNTIME_DIR', 'TMPDIR']) if (process.env[k]) env[k] = process.env[k];
    const r = await inspectorCall(root, env, { command: 'sleep 1; echo via-task; exit 3', egress: 'none' });
    const sc = r.json?.result?.structuredContent;
    h.ok(r.code === 0 && sc?.stdout === 'via-task\n' && sc.exit_code === 3 && r.json.result.isError === false &&
      /job job-[0-9a-f]+ \(sandbox_script\) failed/.test(r.stderr),
    'the Inspector CLI (ext-tasks client) gets a task, polls it, and prints the foreground result', `${r.code} ${r.stdout.slice(0, 400)}`);
  }

  /* 3. HTTP: the threshold; a fast call answers in the call, as in the foreground. */
  {
    const root = h.makeOutputRoot('tasks-fast');
    const srv = await startHttpServer(DEMESNE, { env: serverEnv(root, { DEMESNE_TASK_AFTER_MS: '120000' }),
      logFile: path.join(root, 'server.log') });
    const c = era(new HttpClient(srv));
    const fast = await c.call('sandbox_script', { command: 'echo quick' });
    h.ok(fast.result?.resultType === 'complete' && !('taskId' in fast.result) && fast.result.structuredContent?.stdout === 'quick\n' &&
      !('job_id' in fast.result.structuredContent) && !('status' in fast.result.structuredContent),
    'HTTP: a call that ends within DEMESNE_TASK_AFTER_MS answers its foreground result, no task', JSON.stringify(fast).slice(0, 400));
    const bad = await startHttpServer(DEMESNE, { env: serverEnv(root, { DEMESNE_TASK_AFTER_MS: 'soon' }) }).then(
      (s) => { s.stop(); return 'started'; }, (err) => err.message);
    h.ok(/DEMESNE_TASK_AFTER_MS='soon'/.test(bad), 'a DEMESNE_TASK_AFTER_MS that is not a number stops the server with its name',
      bad.slice(0, 300));
    await srv.stop();
  }

  /* 4. HTTP, two principals: the lifecycle, another's task, 100 at once, cancel races. */
  {
    const root = h.makeOutputRoot('tasks-http');
    const tokens = path.join(root, 'tokens');
    const alice = 'a'.repeat(40);
    const bob = 'b'.repeat(40);
    fs.writeFileSync(tokens, `alice ${alice}\nbob ${bob}\n`, { mode: 0o600 });
    const srv = await startHttpServer(DEMESNE, { args: ['--token-file', tokens], env: serverEnv(root, { DEMESNE_TASK_AFTER_MS: '0' }),
      logFile: path.join(root, 'server.log') });
    const a = era(new HttpClient(srv, alice));
    const b = era(new HttpClient(srv, bob));
    await lifecycle('HTTP 2026-07-28', a, srv.child.pid);

    const mine = await a.call('sandbox_script', { command: 'sleep 30' });
    const id = mine.result?.taskId;
    const [get, cancel, status] = await Promise.all([b.get(id), b.rpc('tasks/cancel', { taskId: id }), b.call('sandbox_status', { job_id: id })]);
    const none = await b.get('job-ffffffffffff');
    h.ok(get.error?.code === -32602 && cancel.error?.code === -32602 &&
      get.error.message === none.error?.message.replace('job-ffffffffffff', id) && status.result?.isError === true,
    "HTTP: another principal's task is unknown, word for word, to tasks/get, tasks/cancel and sandbox_status",
    JSON.stringify([get, none, status.result?.content]).slice(0, 600));
    const still = await a.get(id);
    h.equal(still.result?.status, 'working', "HTTP: the other principal's cancel did not touch it");

    /* Cancel races: cancel at once, twice at once, with a get in between. */
    const race = await a.call('sandbox_script', { command: 'sleep 60' });
    const rid = race.result?.taskId;
    const acks = await Promise.all([a.rpc('tasks/cancel', { taskId: rid }), a.rpc('tasks/cancel', { taskId: rid }), a.get(rid),
      a.rpc('tasks/cancel', { taskId: id })]);
    h.ok(isAck(acks[0]) && isAck(acks[1]) && isAck(acks[3]) && acks[2].result?.taskId === rid,
      'HTTP: two cancels at once and a get between them: two acks, the get answers', JSON.stringify(acks));
    const ends = await Promise.all([a.settle(rid), a.settle(id)]);
    h.ok(ends.every((t) => t.status === 'cancelled'), 'HTTP: both raced tasks end cancelled', JSON.stringify(ends));
    h.equal(await waitContainers(srv.child.pid, 0, 120_000), 0, 'HTTP: no container is left after the races');

    /* 100 tasks at once: sandbox_exec in one persistent sandbox. The
     * requests go 25 at a time (the server takes 64 connections of one
     * address); each answers at once, so the 100 commands run together,
     * past the sandbox's own cap of 64 commands at once. */
    const made = await a.call('sandbox_create', { image: 'base', egress: 'none' });
    const sb = made.result?.structuredContent?.sandbox_id;
    try {
      const N = 100;
      const many = await pool(N, 25, (i) => a.call('sandbox_exec', { sandbox_id: sb, command: `sleep 5; echo ${i}; exit ${i % 2}` }));
      const ids = many.map((r) => r.result?.taskId);
      h.ok(ids.every((t) => typeof t === 'string') && new Set(ids).size === N,
        `HTTP: ${N} sandbox_exec calls at once answer ${N} distinct tasks`, JSON.stringify(many.find((r) => !r.result?.taskId) ?? {}));
      const together = await pool(N, 25, (i) => a.get(ids[i]));
      h.ok(together.filter((r) => r.result?.status === 'working').length > 1,
        `HTTP: the ${N} run together (${together.filter((r) => r.result?.status === 'working').length} still working once all were made)`,
        JSON.stringify(together[0]));
      const results = await pool(N, 25, (i) => a.settle(ids[i], 600_000));
      const ran = (t, i) => t.status === 'completed' && t.result?.structuredContent?.stdout === `${i}\n` &&
        t.result.structuredContent.exit_code === i % 2 && t.result.isError === false;
      const capped = (t) => t.status === 'completed' && t.result?.isError === true &&
        /^sandbox_exec failed: too many commands running at once/.test(h.firstText(t.result));
      const completed = results.filter(ran).length;
      const wrong = results.map((t, i) => (ran(t, i) || capped(t) ? null : { i, t })).filter(Boolean);
      h.ok(wrong.length === 0 && completed >= 64,
        `HTTP: of ${N}, ${completed} complete with their own output and exit code, the rest with the sandbox's cap as an isError result`,
        JSON.stringify(wrong[0] ?? {}).slice(0, 500));
    } finally {
      /* A persistent sandbox outlives its server: never leave one behind. */
      if (sb) await a.call('sandbox_destroy', { sandbox_id: sb });
    }
    const bg = await a.call('sandbox_exec', { sandbox_id: 'sbx-nonexistent', command: 'true' });
    h.ok(bg.result?.isError === true && !('taskId' in bg.result),
      'HTTP: a task call refused before it starts (unknown sandbox) answers the refusal, no task', JSON.stringify(bg).slice(0, 300));
    await srv.stop();
  }

  /* 5. kill -9: the next server of the same output root answers a clear error. */
  {
    const root = h.makeOutputRoot('tasks-kill9');
    const env = serverEnv(root, { DEMESNE_TASK_AFTER_MS: '0' });
    const first = era(new StdioClient(env, path.join(root, 'first.log')));
    const t = await first.call('sandbox_script', { command: 'sleep 300' });
    const id = t.result?.taskId;
    const pid = first.client.pid;
    await waitContainers(pid, 1, 120_000); /* its container runs */
    process.kill(pid, 'SIGKILL');
    await first.client.close();
    const second = era(new StdioClient(env, path.join(root, 'second.log')));
    const after = await second.get(id);
    const t2 = after.result ?? {};
    h.ok(typeof id === 'string' && t2.taskId === id && t2.status === 'failed' && t2.error?.code === -32603 &&
      /stopped before the task ended/.test(t2.error.message) && !('result' in t2) && ISO.test(t2.createdAt ?? ''),
    "kill -9: the next server reads the dead one's task as failed (from the run ledger), with an error that says why",
    JSON.stringify(after));
    const [ack, other, none] = await Promise.all([second.rpc('tasks/cancel', { taskId: id }),
      second.get(id, WITH).then(() => second.get('job-0123456789ab')), second.get('job-0123456789ab')]);
    h.ok(isAck(ack) && other.error?.code === -32602 && none.error?.code === -32602,
      'kill -9: cancelling it is the ack of an ended task; an id the ledger does not know stays -32602', JSON.stringify([ack, none]));
    h.equal(await waitContainers(pid, 0, 180_000), 0, "kill -9: the next server removed the dead one's container");
    await second.client.close();
  }

  /* 6. A protocol failure: the engine goes away under a task. */
  {
    const root = h.makeOutputRoot('tasks-engine');
    const sock = path.join(root, 'engine.sock');
    const upstream = ENGINE.replace(/^unix:\/\//, '');
    const conns = new Set();
    const proxy = net.createServer((down) => {
      const up = net.connect(upstream);
      conns.add(down).add(up);
      down.pipe(up).pipe(down);
      const drop = () => { down.destroy(); up.destroy(); };
      down.on('error', drop); up.on('error', drop);
    });
    await new Promise((res) => proxy.listen(sock, res));
    const c = era(new StdioClient(serverEnv(root, { DEMESNE_TASK_AFTER_MS: '0', DOCKER_HOST: `unix://${sock}` }),
      path.join(root, 'server.log')));
    await c.call('sandbox_list', {});
    /* The engine goes: the socket closed, its file gone, every connection cut. */
    await new Promise((res) => { proxy.close(res); for (const s of conns) s.destroy(); });
    const t = await c.call('sandbox_script', { command: 'echo never' });
    const end = t.result?.taskId ? await c.settle(t.result.taskId) : t;
    /* In the foreground this is an isError result ("sandbox_script failed:
     * <the engine's error>"), not a JSON-RPC error: the task says the same. */
    h.ok(typeof t.result?.taskId === 'string' && end.status === 'completed' && end.result?.isError === true &&
      /^sandbox_script failed: /.test(h.firstText(end.result)) && !('error' in end),
    'engine gone: the task completes with the foreground\'s isError result, "sandbox_script failed: ..."', JSON.stringify(end).slice(0, 500));
    h.ok(!fs.existsSync(sock), 'engine gone: nothing recreated the test\'s socket', sock);
    await c.client.close();
  }
});
