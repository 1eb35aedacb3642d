#!/usr/bin/env node
// Elicitation (docs/reference/elicitation.md): a call asking for more than
// the operator allows (egress 'open', 'allow' entries without
// DEMESNE_ALLOW_CALLER_EGRESS) is asked of the person at the client.
//   - the npm SDK client (@modelcontextprotocol/client) as the real client,
//     answering accept, decline, cancel and nothing, on 2025-11-25
//     (elicitation/create) over stdio and HTTP, and on 2026-07-28 (its
//     input_required driver, SEP-2322) over stdio and HTTP;
//   - a client without the capability, and DEMESNE_ELICIT=off: the flat refusal;
//   - a raw 2026-07-28 client written from the spec: the input_required shape,
//     a requestState that is wrong, used twice, or carried to other arguments;
//   - a hostile 2025-11-25 client: a response with the wrong id, one to a
//     request never made, a huge one, a malformed answer;
//   - a host path outside DEMESNE_ALLOWED_PATHS, on both eras: asked naming
//     what a symlink resolves to, mounted once when allowed, asked again the
//     next call; one in the state directory is never asked; sandbox_upload's
//     src the same way;
//   - an agent run's max_usd above DEMESNE_AGENT_MAX_USD (2025-11-25, and
//     2026-07-28 in the background): asked;
//     allowed, the run (Claude Code against the vendor API fixture,
//     tests/fixtures/vendor/server.mjs) runs under that cap; declined or a
//     client without elicitation, the flat refusal; a nested caller's asked
//     of the host's client, and one past its tree's DEMESNE_TREE_MAX_USD is
//     refused without anyone asked.
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-elicit.mjs
//
// Prints TAP; exits 0 only if every test passed, 77 when node_modules is missing.

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);
process.env.E2E_TIMEOUT_SECONDS ??= '900';
const { Client, StdioClientTransport, StreamableHTTPClientTransport } = await loadSdk();
const { startHttpServer } = await import('./lib/http-server.mjs');

async function loadSdk() {
  const main = await import('@modelcontextprotocol/client');
  const stdio = await import('@modelcontextprotocol/client/stdio');
  return { Client: main.Client, StreamableHTTPClientTransport: main.StreamableHTTPClientTransport,
    StdioClientTransport: stdio.StdioClientTransport };
}

const MODERN = '2026-07-28';
const LEGACY = '2025-11-25';
const CALL_MS = 180_000; /* one sandbox run on a loaded machine; a safety net */
/* The server's wait for an answer (DEMESNE_ELICIT_TIMEOUT_MS): what the
 * no-answer checks wait out, and what an immediate answer must beat on a
 * loaded machine, so it grows with DEMESNE_TEST_TIME_SCALE as tests/tap.h's
 * slack_ms does. */
const ASK_MS = String(3000 * Math.max(1, Number(process.env.DEMESNE_TEST_TIME_SCALE) || 1));
const OPEN_REFUSAL = "egress 'open' is refused: this server does not let callers open the network (its operator can " +
  'permit it with DEMESNE_ALLOW_CALLER_EGRESS=1; sandbox_research always has open egress)';
const ALLOW_REFUSAL = "'allow' entries are refused: this server does not accept caller-supplied egress entries " +
  '(its operator can permit them with DEMESNE_ALLOW_CALLER_EGRESS=1)';
const OPEN_CALL = { name: 'sandbox_script', arguments: { command: 'ls /sys/class/net', egress: 'open' } };

h.plan(47);

/** What the person answers: the ElicitResult, or a promise that never settles. */
function answerOf(kind) {
  if (kind === 'accept') return { action: 'accept', content: { decision: 'allow' } };
  if (kind === 'refuse') return { action: 'accept', content: { decision: 'refuse' } };
  if (kind === 'none') return new Promise(() => {});
  return { action: kind };
}

/** An SDK client; answers is the list of what it answers, in turn (the last repeats). */
async function sdkClient({ era, http, env = {}, unset = [], caps = true, answers = ['accept'] }) {
  const outputRoot = h.makeOutputRoot(`elicit-${era}-${http ? 'http' : 'stdio'}`);
  const stateDir = h.makeOutputRoot(`elicit-state-${era}`);
  const serverEnv = h.serverEnv(outputRoot, { DEMESNE_ELICIT_TIMEOUT_MS: ASK_MS, DEMESNE_STATE_DIR: stateDir, ...env });
  delete serverEnv.DEMESNE_ALLOW_CALLER_EGRESS;
  for (const name of unset) delete serverEnv[name];
  const options = { capabilities: caps ? { elicitation: { form: {} } } : {} };
  if (era === 'modern') options.versionNegotiation = { mode: { pin: MODERN }, probe: { timeoutMs: 30_000 } };
  const client = new Client({ name: 'demesne-e2e-elicit', version: '0.0.0' }, options);
  const asked = [];
  client.onerror = (err) => h.diag(`client onerror: ${err?.message ?? err}`);
  if (caps) {
    client.setRequestHandler('elicitation/create', async (req) => {
      asked.push(req.params);
      return answerOf(answers[Math.min(asked.length, answers.length) - 1]);
    });
  }
  let transport, server;
  if (http) {
    server = await startHttpServer(DEMESNE, { env: serverEnv, logFile: path.join(outputRoot, 'server.log') });
    transport = new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers: server.headers } });
  } else {
    transport = new StdioClientTransport({ command: DEMESNE, args: ['serve'], env: serverEnv, stderr: 'ignore' });
  }
  await h.within(60_000, 'connect', client.connect(transport, { timeout: 30_000 }));
  return {
    client,
    asked,
    stateDir,
    call: (params) => h.within(CALL_MS, `${params.name}`, client.callTool(params, { timeout: CALL_MS })),
    close: async () => { await h.closeStdio(client, server ? null : transport); if (server) await server.stop(); },
  };
}

/* The egress a run got, from the server's run journal (<state dir>/activity:
 * written by the server, where no sandbox writes). */
function journalEgress(stateDir, runId) {
  const dir = path.join(stateDir, 'activity');
  let egress;
  for (const f of fs.existsSync(dir) ? fs.readdirSync(dir) : []) {
    for (const line of fs.readFileSync(path.join(dir, f), 'utf8').split('\n')) {
      try {
        const e = JSON.parse(line);
        if (e.id === runId && e.egress) egress = e.egress;
      } catch { /* a line being written */ }
    }
  }
  return egress;
}
/* Ran with open egress: the journal says so, and as root the sandbox has its
 * veth (eth0). Rootless sandboxes have no veth at any egress (open goes
 * through the proxy on their own loopback), so there the journal alone. */
const ROOT = process.getuid() === 0;
const runIdOf = (r) => {
  if (r?.structuredContent?.run_id) return r.structuredContent.run_id;
  try { return JSON.parse(h.firstText(r)).run_id; } catch { return undefined; }
};
const ranOpen = (r, stateDir) => r?.isError !== true && journalEgress(stateDir, runIdOf(r)) === 'open' &&
  (!ROOT || /\beth0\b/.test(r?.structuredContent?.stdout ?? h.firstText(r)));
const refused = (r, text) => r?.isError === true && h.firstText(r) === text;
const show = (r) => JSON.stringify(r)?.slice(0, 600);

/** One era and transport: accept runs with open egress once, then asked again;
 * decline, cancel and nothing are the refusal word for word. */
async function eraChecks(era, http) {
  const label = `${era} over ${http ? 'HTTP' : 'stdio'}`;
  const c = await sdkClient({ era, http, answers: ['accept', 'decline', 'cancel', 'refuse', 'none'] });
  try {
    let r = await c.call(OPEN_CALL);
    const q = c.asked[0];
    h.ok(ranOpen(r, c.stateDir) && c.asked.length === 1 && /sandbox_script/.test(q?.message) && /open internet/.test(q?.message) &&
        q?.requestedSchema?.properties?.decision?.enum?.join() === 'allow,refuse',
      `${label}: accept+allow: the question names the tool and open internet, and the call runs with open egress`,
      `asked ${JSON.stringify(c.asked)}\nresult ${show(r)}`);
    r = await c.call(OPEN_CALL);
    h.ok(c.asked.length === 2 && refused(r, OPEN_REFUSAL),
      `${label}: the next identical call is asked again; declined, it gets the flat refusal`,
      `asked ${c.asked.length}\nresult ${show(r)}`);
    r = await c.call(OPEN_CALL);
    const r2 = await c.call(OPEN_CALL);
    h.ok(c.asked.length === 4 && refused(r, OPEN_REFUSAL) && refused(r2, OPEN_REFUSAL),
      `${label}: cancel, and accept with 'refuse': the flat refusal`, `asked ${c.asked.length}\n${show(r)}\n${show(r2)}`);
    if (era === 'legacy') {
      r = await c.call(OPEN_CALL);
      h.ok(c.asked.length === 5 && refused(r, OPEN_REFUSAL),
        `${label}: no answer within DEMESNE_ELICIT_TIMEOUT_MS: the flat refusal`, show(r));
    }
  } finally {
    await c.close();
  }
}

/* ---------- a nested caller: the host's client is asked, never the sandbox ---------- */

/* Inside the sandbox: a 2025-11-25 session on its endpoint that declares
 * elicitation itself (it must never be asked), then one tools/call read
 * from stdin; prints the JSON-RPC answer (the SSE stream's last data line). */
const { NESTED_CALL } = await import('./lib/checks.mjs');

async function nestedChecks() {
  const c = await sdkClient({ era: 'legacy', http: false, answers: ['accept', 'accept', 'decline'] });
  let box;
  try {
    let r = await c.call({ name: 'sandbox_create', arguments: { image: 'base', egress: 'open', nested: true, ttl_seconds: 900 } });
    box = r?.structuredContent?.sandbox_id;
    const inside = async () => {
      const call = { jsonrpc: '2.0', id: 1, method: 'tools/call',
        params: { name: 'sandbox_script', arguments: { command: 'ls /sys/class/net', egress: 'open' } } };
      const out = await c.call({ name: 'sandbox_exec',
        arguments: { sandbox_id: box, command: NESTED_CALL, stdin: JSON.stringify(call) } });
      if (out?.structuredContent?.stderr) h.diag(`nested call: ${out.structuredContent.stderr}`);
      try { return JSON.parse(out?.structuredContent?.stdout ?? '')?.result; } catch { return { raw: out }; }
    };
    r = await inside();
    const q = c.asked[1]?.message ?? '';
    h.ok(typeof box === 'string' && c.asked.length === 2 && q.includes(`inside the nested sandbox tree 'local/${box}'`) &&
        ranOpen(r, c.stateDir),
      "nested: a sandbox's call for egress 'open' is asked of the host's client, naming the tree; allowed, the child runs with it",
      `box ${box}\nasked ${JSON.stringify(c.asked)}\nresult ${JSON.stringify(r)?.slice(0, 800)}`);
    r = await inside();
    h.ok(c.asked.length === 3 && r?.isError === true && r.content?.[0]?.text === OPEN_REFUSAL,
      'nested: declined by the host\'s client, the sandbox gets the flat refusal (it is never asked itself)',
      `asked ${c.asked.length}\nresult ${JSON.stringify(r)?.slice(0, 800)}`);
  } finally {
    if (box) await c.call({ name: 'sandbox_destroy', arguments: { sandbox_id: box } }).catch(() => {});
    await c.close();
  }
}

/* ---------- host paths outside DEMESNE_ALLOWED_PATHS ---------- */

/* A folder the operator allows, a file outside it reached through a symlink
 * inside it, and a file in the server's state directory (never asked). */
function pathFixture(tag) {
  const allowed = h.makeOutputRoot(`elicit-allowed-${tag}`);
  const outside = h.makeOutputRoot(`elicit-outside-${tag}`);
  const secret = path.join(outside, 'secret.txt');
  fs.writeFileSync(secret, `outside ${tag}\n`);
  fs.symlinkSync(secret, path.join(allowed, 'link.txt'));
  return { allowed, outside, secret, link: path.join(allowed, 'link.txt') };
}
const OUTSIDE_REFUSAL = (given, resolved) =>
  `path '${given}' resolves to '${resolved}', which is outside DEMESNE_ALLOWED_PATHS`;

async function pathChecks(era) {
  const f = pathFixture(era);
  const c = await sdkClient({ era, http: false, env: { DEMESNE_ALLOWED_PATHS: f.allowed },
    answers: ['accept', 'decline', 'accept', 'accept', 'decline'] });
  const byLink = { name: 'sandbox_script', arguments: { command: 'cat /in/secret.txt', files: [f.link] } };
  try {
    let r = await c.call(byLink);
    const q = c.asked[0]?.message ?? '';
    h.ok(c.asked.length === 1 && q.includes(`'${f.secret}' (given as '${f.link}', a symbolic link)`) &&
        /sandbox_script/.test(q) && /read-only/.test(q) && r?.isError !== true &&
        (r?.structuredContent?.stdout ?? '') === `outside ${era}\n`,
      `${era}: a symlink to a file outside DEMESNE_ALLOWED_PATHS is asked naming its target; allowed, the run reads it`,
      `asked ${JSON.stringify(c.asked)}\nresult ${show(r)}`);
    r = await c.call(byLink);
    h.ok(c.asked.length === 2 && refused(r, OUTSIDE_REFUSAL(f.link, f.secret)),
      `${era}: the same call again is asked again (nothing remembered); declined, the flat refusal`,
      `asked ${c.asked.length}\nresult ${show(r)}`);
    const stateFile = path.join(c.stateDir, 'planted.txt');
    fs.writeFileSync(stateFile, 'x');
    r = await c.call({ name: 'sandbox_script', arguments: { command: 'true', files: [stateFile] } });
    h.ok(c.asked.length === 2 && r?.isError === true && /outside DEMESNE_ALLOWED_PATHS|DEMESNE_STATE_DIR/.test(h.firstText(r)),
      `${era}: a file in the server's state directory is never asked, only refused`,
      `asked ${c.asked.length}\nresult ${show(r)}`);
    if (era === 'legacy') {
      /* sandbox_create: a directory outside, allowed, is the sandbox's /in for its life. */
      r = await c.call({ name: 'sandbox_create', arguments: { image: 'base', directories: [f.outside], ttl_seconds: 300 } });
      const box = r?.structuredContent?.sandbox_id;
      const seen = box && await c.call({ name: 'sandbox_exec',
        arguments: { sandbox_id: box, command: `cat /in/${path.basename(f.outside)}/secret.txt` } });
      h.ok(c.asked.length === 3 && c.asked[2]?.message?.includes(`'${f.outside}'`) &&
          /sandbox_create/.test(c.asked[2]?.message) && seen?.structuredContent?.stdout === `outside ${era}\n`,
        `${era}: sandbox_create asks for a directory outside; allowed, its exec reads it at /in`,
        `asked ${JSON.stringify(c.asked.slice(2))}\ncreate ${show(r)}\nexec ${show(seen)}`);
      /* sandbox_upload's src: the same question, for the one file it copies. */
      const upload = { name: 'sandbox_upload', arguments: { sandbox_id: box, src: f.link, dst: '/workspace/up.txt' } };
      r = box && await c.call(upload);
      const up = box && await c.call({ name: 'sandbox_exec', arguments: { sandbox_id: box, command: 'cat /workspace/up.txt' } });
      const uq = c.asked[3]?.message ?? '';
      h.ok(c.asked.length === 4 && /sandbox_upload/.test(uq) && uq.includes("'/workspace/up.txt'") &&
          uq.includes(`'${f.secret}' (given as '${f.link}', a symbolic link)`) && r?.isError !== true &&
          up?.structuredContent?.stdout === `outside ${era}\n`,
        `${era}: sandbox_upload's src outside is asked naming its target and dst; allowed, the file is copied in`,
        `asked ${JSON.stringify(c.asked.slice(3))}\nupload ${show(r)}\nexec ${show(up)}`);
      r = box && await c.call(upload);
      h.ok(c.asked.length === 5 && refused(r, OUTSIDE_REFUSAL(f.link, f.secret)),
        `${era}: sandbox_upload asked again the next call; declined, the flat refusal`, `asked ${c.asked.length}\n${show(r)}`);
      if (box) await c.call({ name: 'sandbox_destroy', arguments: { sandbox_id: box } });
    }
  } finally {
    await c.close();
  }
}

/* ---------- an agent run's spend past DEMESNE_AGENT_MAX_USD ---------- */

const FIXTURE = path.join(h.E2E_DIR, '..', 'fixtures', 'vendor', 'server.mjs');
const SPEND_REFUSAL = (usd, cap) => `max_usd $${usd} is above this server's cap on one agent run's model spend ` +
  `(DEMESNE_AGENT_MAX_USD=${cap}): ask for at most that, or its operator can raise it`;

/** The vendor API fixture on loopback (the one thing not real: the vendor's internet API). */
async function startFixture(root, key) {
  const log = path.join(root, 'anthropic.log');
  const child = h.spawnGroup(process.execPath, [FIXTURE, '--port', '0', '--host', '127.0.0.1', '--expect-key', key,
    '--log', log], { stdio: ['ignore', 'pipe', 'inherit'] });
  const rl = readline.createInterface({ input: child.stdout });
  const port = await h.within(15_000, 'the vendor fixture listening', new Promise((resolve, reject) => {
    rl.on('line', (l) => { const m = /^listening (\d+)/.exec(l); if (m) resolve(Number(m[1])); });
    child.once('exit', (code) => reject(new Error(`the vendor fixture exited ${code}`)));
  }));
  return { port, child };
}

async function spendChecks() {
  const root = h.makeOutputRoot('elicit-spend');
  const home = path.join(root, 'home');
  fs.mkdirSync(home);
  const key = `sk-ant-api03-demesne-e2e-${crypto.randomBytes(12).toString('hex')}`;
  const fx = await startFixture(root, key);
  const env = { HOME: home, ANTHROPIC_API_KEY: key, DEMESNE_VENDOR_UPSTREAM_ANTHROPIC: `http://127.0.0.1:${fx.port}`,
    DEMESNE_AGENT_MAX_USD: '0.5', DEMESNE_TREE_MAX_USD: '1' };
  const unset = ['CLAUDE_CODE_OAUTH_TOKEN', 'OPENAI_API_KEY'];
  const agent = (max_usd) => ({ name: 'sandbox_agent', arguments: { prompt: 'Write the answer to /out/answer.txt, ' +
    'then tell me the answer.', model: 'sonnet', nested: false, max_usd } });
  const c = await sdkClient({ era: 'legacy', http: false, env, unset, answers: ['accept', 'decline'] });
  let box;
  try {
    let r = await c.call(agent(2));
    const q = c.asked[0]?.message ?? '';
    h.ok(c.asked.length === 1 && /sandbox_agent/.test(q) && q.includes('up to $2 on model use') &&
        q.includes('DEMESNE_AGENT_MAX_USD=0.5') && r?.isError !== true && r?.structuredContent?.exit_code === 0 &&
        r.structuredContent.max_usd === 2,
      'spend: max_usd above DEMESNE_AGENT_MAX_USD is asked naming both; allowed, the run runs under that cap',
      `asked ${JSON.stringify(c.asked)}\nresult ${show(r)}`);
    r = await c.call(agent(2));
    h.ok(c.asked.length === 2 && refused(r, SPEND_REFUSAL(2, 0.5)),
      'spend: the same call again is asked again (that run alone); declined, the flat refusal', `asked ${c.asked.length}\n${show(r)}`);
    /* A nested caller: the tree's cap is never asked about; the run's is, of the host's client. */
    r = await c.call({ name: 'sandbox_create', arguments: { image: 'base', nested: true, ttl_seconds: 900 } });
    box = r?.structuredContent?.sandbox_id;
    const inside = async (max_usd) => {
      const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: agent(max_usd) };
      const out = await c.call({ name: 'sandbox_exec',
        arguments: { sandbox_id: box, command: NESTED_CALL, stdin: JSON.stringify(call) } });
      if (out?.structuredContent?.stderr) h.diag(`nested call: ${out.structuredContent.stderr}`);
      try { return JSON.parse(out?.structuredContent?.stdout ?? '')?.result; } catch { return { raw: out }; }
    };
    r = await inside(5);
    h.ok(typeof box === 'string' && c.asked.length === 2 && r?.isError === true &&
        /DEMESNE_TREE_MAX_USD=1/.test(r.content?.[0]?.text) && /max_usd of \$5\b/.test(r.content?.[0]?.text),
      "spend: a nested caller's max_usd past its tree's DEMESNE_TREE_MAX_USD is refused, nobody asked",
      `box ${box}\nasked ${c.asked.length}\nresult ${JSON.stringify(r)?.slice(0, 800)}`);
    r = await inside(0.8);
    const nq = c.asked[2]?.message ?? '';
    h.ok(c.asked.length === 3 && nq.includes(`inside the nested sandbox tree 'local/${box}'`) && nq.includes('$0.8') &&
        nq.includes('DEMESNE_TREE_MAX_USD=1') && r?.isError === true && r.content?.[0]?.text === SPEND_REFUSAL(0.8, 0.5),
      "spend: a nested caller's max_usd within its tree is asked of the host's client, naming the tree; declined, the flat refusal",
      `asked ${JSON.stringify(c.asked.slice(2))}\nresult ${JSON.stringify(r)?.slice(0, 800)}`);
  } finally {
    if (box) await c.call({ name: 'sandbox_destroy', arguments: { sandbox_id: box } }).catch(() => {});
    await c.close();
  }
  const n = await sdkClient({ era: 'legacy', http: false, env, unset, caps: false });
  try {
    const r = await n.call(agent(2));
    h.ok(refused(r, SPEND_REFUSAL(2, 0.5)), 'spend: a client without elicitation gets the flat refusal', show(r));
  } finally {
    await n.close();
  }
  /* 2026-07-28 (input_required, the SDK's retry) and a background call:
   * asked before the job starts, whose run has the allowed cap. */
  const m = await sdkClient({ era: 'modern', http: false, env, unset, answers: ['accept'] });
  try {
    const bg = await m.call({ name: 'sandbox_agent', arguments: { ...agent(2).arguments, background: true } });
    const id = bg?.structuredContent?.job_id;
    let fin = {};
    for (let i = 0; id && i < 8 && (fin.status ?? 'running') === 'running'; i++) {
      fin = (await m.call({ name: 'sandbox_wait', arguments: { job_id: id, timeout_seconds: 30 } })).structuredContent ?? {};
    }
    h.ok(m.asked.length === 1 && m.asked[0]?.message?.includes('up to $2') && fin.status === 'succeeded' &&
        fin.max_usd === 2 && fin.exit_code === 0,
      'spend on 2026-07-28, in the background: asked before the job; allowed, its run has that cap',
      `asked ${JSON.stringify(m.asked)}\nstart ${show(bg)}\nend ${JSON.stringify(fin).slice(0, 600)}`);
  } finally {
    await m.close();
  }
  /* A run with its endpoint (nested, the default here) is the top of its
   * tree: the question says the tree's limit holds, and it does. */
  const t = await sdkClient({ era: 'legacy', http: false, env, unset, answers: ['accept'] });
  try {
    const { nested, ...args } = agent(2).arguments;
    const r = await t.call({ name: 'sandbox_agent', arguments: args });
    const q = t.asked[0]?.message ?? '';
    h.ok(nested === false && t.asked.length === 1 && q.includes('up to $2') && q.includes('DEMESNE_TREE_MAX_USD=1) still holds') &&
        r?.isError !== true && r?.structuredContent?.exit_code === 0 && r.structuredContent.max_usd === 1,
      "spend: a host's run with its endpoint is asked naming the tree's limit too; allowed, its cap is the tree's",
      `asked ${JSON.stringify(t.asked)}\nresult ${show(r)}`);
  } finally {
    await t.close();
    fx.child.kill();
  }
}

/* ---------- a raw 2026-07-28 client, from the spec ---------- */

class RawStdio {
  constructor(env) {
    this.child = h.spawnGroup(DEMESNE, ['serve'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.stderr = '';
    this.child.stderr.setEncoding('utf8');
    this.child.stderr.on('data', (d) => { this.stderr += d; });
    this.next = 1;
    this.pending = new Map();
    this.onRequest = () => {};
    readline.createInterface({ input: this.child.stdout }).on('line', (line) => {
      const msg = JSON.parse(line);
      if (msg.method && msg.id !== undefined) this.onRequest(msg);
      else if (msg.id !== undefined && this.pending.has(msg.id)) {
        this.pending.get(msg.id)(msg);
        this.pending.delete(msg.id);
      }
    });
  }

  write(msg) { this.child.stdin.write(`${JSON.stringify(msg)}\n`); }

  send(method, params) {
    const id = this.next++;
    const done = new Promise((resolve) => this.pending.set(id, resolve));
    this.write({ jsonrpc: '2.0', id, method, params });
    return h.within(CALL_MS, method, done);
  }

  close() {
    this.child.stdin.end();
    return new Promise((resolve) => {
      if (this.child.exitCode !== null) resolve();
      else this.child.once('exit', () => resolve());
    });
  }
}

const modernMeta = (caps) => ({ 'io.modelcontextprotocol/protocolVersion': MODERN,
  'io.modelcontextprotocol/clientCapabilities': caps, 'io.modelcontextprotocol/clientInfo': { name: 'raw', version: '0' } });

async function rawModernChecks() {
  const outputRoot = h.makeOutputRoot('elicit-raw-modern');
  const stateDir = h.makeOutputRoot('elicit-state-raw');
  const env = h.serverEnv(outputRoot, { DEMESNE_ELICIT_TIMEOUT_MS: '60000', DEMESNE_STATE_DIR: stateDir });
  delete env.DEMESNE_ALLOW_CALLER_EGRESS;
  const c = new RawStdio(env);
  const meta = modernMeta({ elicitation: { form: {} } });
  const call = (args, extra = {}) => c.send('tools/call', { _meta: meta, name: 'sandbox_script', arguments: args, ...extra });
  const args = { command: 'ls /sys/class/net', egress: 'open' };
  const accept = { egress: { action: 'accept', content: { decision: 'allow' } } };
  try {
    const first = (await call(args)).result;
    const q = first?.inputRequests?.egress;
    const props = q?.params?.requestedSchema?.properties ?? {};
    h.ok(first?.resultType === 'input_required' && typeof first.requestState === 'string' &&
        q?.method === 'elicitation/create' && q.params?.mode === 'form' && /open internet/.test(q.params?.message) &&
        Object.values(props).every((p) => ['string', 'boolean', 'number', 'integer'].includes(p.type)),
      'raw 2026-07-28: the call answers input_required with an elicitation/create form (flat primitive schema) and a requestState',
      JSON.stringify(first));
    const forged = (await call(args, { inputResponses: accept, requestState: 'f'.repeat(32) })).result;
    h.ok(forged?.resultType === 'input_required' && forged.requestState !== first.requestState,
      'raw 2026-07-28: an answer with a requestState the server never issued is asked again', JSON.stringify(forged));
    const other = (await call({ ...args, command: 'true' }, { inputResponses: accept, requestState: forged.requestState })).result;
    h.ok(other?.resultType === 'input_required',
      'raw 2026-07-28: a requestState carried to other arguments is asked again', JSON.stringify(other));
    const fresh = (await call(args)).result;
    const good = (await call(args, { inputResponses: accept, requestState: fresh?.requestState })).result;
    h.ok(good?.resultType === 'complete' && ranOpen(good, stateDir),
      'raw 2026-07-28: the retry with the answer and its requestState runs with open egress', JSON.stringify(good)?.slice(0, 600));
    const again = (await call(args, { inputResponses: accept, requestState: fresh?.requestState })).result;
    h.ok(again?.resultType === 'input_required',
      'raw 2026-07-28: a requestState used once is asked again', JSON.stringify(again));
    const declined = (await call(args, { inputResponses: { egress: { action: 'decline' } }, requestState: again.requestState })).result;
    h.ok(declined?.resultType === 'complete' && declined.isError === true && declined.content?.[0]?.text === OPEN_REFUSAL,
      'raw 2026-07-28: declined: the flat refusal', JSON.stringify(declined));
    const nocap = (await c.send('tools/call', { _meta: modernMeta({}), name: 'sandbox_script', arguments: args })).result;
    h.ok(nocap?.resultType === 'complete' && nocap.isError === true && nocap.content?.[0]?.text === OPEN_REFUSAL,
      'raw 2026-07-28: a request that does not declare elicitation gets the flat refusal', JSON.stringify(nocap));
  } finally {
    await c.close();
  }
}

/* ---------- a hostile 2025-11-25 client ---------- */

async function hostileChecks() {
  const outputRoot = h.makeOutputRoot('elicit-hostile');
  const env = h.serverEnv(outputRoot, { DEMESNE_ELICIT_TIMEOUT_MS: '60000' });
  delete env.DEMESNE_ALLOW_CALLER_EGRESS;
  const c = new RawStdio(env);
  const allowed = { action: 'accept', content: { decision: 'allow' } };
  let asked = 0;
  c.onRequest = (req) => {
    if (req.method !== 'elicitation/create') return;
    asked += 1;
    /* Lies first, then a malformed answer to the real question. */
    c.write({ jsonrpc: '2.0', id: 'not-a-question', result: allowed });
    c.write({ jsonrpc: '2.0', id: 424242, result: allowed });
    c.write({ jsonrpc: '2.0', id: `${req.id}x`, result: { ...allowed, pad: 'x'.repeat(1 << 20) } });
    c.write({ jsonrpc: '2.0', id: req.id, result: { action: 'accept', content: { decision: 'yes' } } });
  };
  try {
    await c.send('initialize', { protocolVersion: LEGACY, capabilities: { elicitation: {} }, clientInfo: { name: 'hostile', version: '0' } });
    c.write({ jsonrpc: '2.0', method: 'notifications/initialized' });
    const r = (await c.send('tools/call', OPEN_CALL)).result;
    h.ok(asked === 1 && r?.isError === true && r.content?.[0]?.text === OPEN_REFUSAL,
      'hostile 2025-11-25: answers to no question and a malformed answer: nothing widens, the flat refusal',
      `asked ${asked}: ${JSON.stringify(r)}`);
    const ping = await c.send('ping', {});
    h.ok(ping?.result && c.child.exitCode === null, 'hostile 2025-11-25: the server still answers (no crash)', JSON.stringify(ping));
    /* Before the reply, the server logged each stray it ignored. */
    const strays = (c.stderr.match(/ignored a response to no question of ours/g) ?? []).length;
    h.ok(strays === 3 && /not an ElicitResult/.test(c.stderr),
      'hostile 2025-11-25: each stray response and the malformed answer are logged', `strays ${strays}\n${c.stderr.slice(-2000)}`);
  } finally {
    await c.close();
  }
}

await h.run(async () => {
  await eraChecks('legacy', false);
  await eraChecks('legacy', true);
  await eraChecks('modern', false);
  await eraChecks('modern', true);

  /* allow entries: asked naming them */
  {
    const c = await sdkClient({ era: 'legacy', http: false, answers: ['decline'] });
    try {
      const r = await c.call({ name: 'sandbox_script', arguments: { command: 'true', allow: ['example.com', '93.184.215.14:443'] } });
      h.ok(c.asked.length === 1 && /'example\.com' '93\.184\.215\.14:443'/.test(c.asked[0]?.message) && refused(r, ALLOW_REFUSAL),
        "legacy: 'allow' entries are asked naming each; declined, the flat refusal", `${JSON.stringify(c.asked)}\n${show(r)}`);
    } finally { await c.close(); }
  }
  /* a client without the capability */
  {
    const c = await sdkClient({ era: 'legacy', http: false, caps: false });
    try {
      const r = await c.call(OPEN_CALL);
      h.ok(refused(r, OPEN_REFUSAL), 'legacy: a client that did not declare elicitation gets the flat refusal', show(r));
    } finally { await c.close(); }
  }
  /* DEMESNE_ELICIT=off */
  for (const era of ['legacy', 'modern']) {
    const c = await sdkClient({ era, http: false, env: { DEMESNE_ELICIT: 'off' } });
    try {
      const r = await c.call(OPEN_CALL);
      h.ok(c.asked.length === 0 && refused(r, OPEN_REFUSAL), `${era}: DEMESNE_ELICIT=off: never asked, the flat refusal`,
        `asked ${c.asked.length}\n${show(r)}`);
    } finally { await c.close(); }
  }
  await pathChecks('legacy');
  await pathChecks('modern');
  await nestedChecks();
  await spendChecks();
  await rawModernChecks();
  await hostileChecks();
  /* a bad DEMESNE_ELICIT stops the server with its name */
  {
    const outputRoot = h.makeOutputRoot('elicit-bad');
    const child = h.spawnGroup(DEMESNE, ['serve'], { env: h.serverEnv(outputRoot, { DEMESNE_ELICIT: 'maybe' }), stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d) => { err += d; });
    const code = await h.within(30_000, 'a bad DEMESNE_ELICIT', new Promise((resolve) => child.once('exit', resolve)));
    h.ok(code !== 0 && /DEMESNE_ELICIT='maybe'/.test(err), 'a DEMESNE_ELICIT other than on or off stops the server naming it',
      `exit ${code}: ${err}`);
  }
});
