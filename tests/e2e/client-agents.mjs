#!/usr/bin/env node
// sandbox_agent and sandbox_research end to end, as an MCP client sees them:
// the REAL Claude Code and Codex CLIs, in the real claude-code and codex
// images, complete a scripted task (one tool call that writes
// /out/answer.txt, then a final answer) against the vendor API fixture
// (tests/fixtures/vendor/server.mjs), through demesne's vendor proxy on the
// host side of each sandbox's network. The internet vendor APIs are the only
// thing replaced: the fixture listens on loopback and the proxy's upstream
// is pointed at it (DEMESNE_VENDOR_UPSTREAM_*).
//
// Checked: the answer, the file, transcript.jsonl and usage.json, cost_usd
// computed from the fixture's token counts and the price table, that the
// fixture saw the real credential while the container never holds it
// (environment, files, /proc), that the proxy refuses a wrong token and a
// non-model endpoint from inside the sandbox, that at egress none the proxy
// strips Codex's web_search and nothing of Claude Code's requests while
// sandbox_research (open) passes them as sent, and that cancelling a running
// agent removes its container, network and files.
//
// Needs the claude-code and codex images. As root each sandbox gets a veth
// and the vendor proxy listens on its host side; as a normal user (rootless
// Podman) the vendor proxy's socket is made on the sandbox's own loopback
// (127.0.0.1:3129 in its namespace) and the sandbox has no device but lo.
//   DEMESNE=/abs/src/demesne node tests/e2e/client-agents.mjs

import cp from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

import * as h from './lib/harness.mjs';
import { until as untilEvery } from './lib/checks.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);
const ROOTLESS = process.getuid() !== 0;
const TOP = path.resolve(h.E2E_DIR, '..', '..');
const FIXTURE = path.join(TOP, 'tests', 'fixtures', 'vendor', 'server.mjs');
const PRICES = JSON.parse(fs.readFileSync(path.join(TOP, 'data', 'prices.json'), 'utf8')).models;
const ENGINE = process.env.DEMESNE_ENGINE ?? 'podman';

const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');

const engine = (...args) => cp.spawnSync(ENGINE, args, { encoding: 'utf8' });

/** Start the fixture; resolves with { port, log, child } once it listens. */
async function startFixture(root, name, key, extra = []) {
  const log = path.join(root, `${name}.log`);
  const child = h.spawnGroup(process.execPath, [FIXTURE, '--port', '0', '--host', '127.0.0.1',
    '--expect-key', key, '--log', log, ...extra], { stdio: ['ignore', 'pipe', 'inherit'] });
  const rl = readline.createInterface({ input: child.stdout });
  const port = await h.within(15_000, `fixture ${name} listening`, new Promise((resolve, reject) => {
    rl.on('line', (l) => { const m = /^listening (\d+)/.exec(l); if (m) resolve(Number(m[1])); });
    child.once('exit', (c) => reject(new Error(`fixture ${name} exited ${c}`)));
  }));
  return { port, log, child };
}

const fixtureLog = (f) => fs.readFileSync(f.log, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l));

/** The price table's entry for a model: the longest matching prefix. */
function priceOf(model) {
  const key = Object.keys(PRICES).filter((k) => model.startsWith(k)).sort((a, b) => b.length - a.length)[0];
  return PRICES[key];
}
const costOf = (u, p) => (u.input_tokens * p.input + u.output_tokens * p.output
  + u.cache_read_tokens * p.cache_read + u.cache_write_tokens * p.cache_write) / 1e6;

async function connect(env) {
  const client = new Client({ name: 'demesne-e2e-agents', version: '0.0.0' });
  const transport = new StdioClientTransport({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' });
  await h.within(60_000, 'connect', client.connect(transport));
  client.serverPid = transport.pid;
  return client;
}
/** The running agent container of the server with this pid (its owner label holds the pid). */
function agentOf(pid) {
  const ids = engine('ps', '-q', '--filter', 'label=demesne.kind=agent').stdout.trim().split('\n').filter(Boolean);
  return ids.find((id) => new RegExp(`-${pid}-`).test(
    engine('inspect', '--format', '{{index .Config.Labels "demesne.owner"}}', id).stdout));
}
const call = (client, name, args, timeout = 300_000) => client.callTool({ name, arguments: args }, undefined,
  { timeout });

/** Waits until fn() is truthy (polling), or throws after ms. */
const until = (ms, what, fn) => untilEvery(ms, what, fn, 250);

h.plan(45);

await h.run(async () => {
  const root = h.makeOutputRoot('agents');
  const home = path.join(root, 'home');
  fs.mkdirSync(home);
  const keys = {
    anthropic: `sk-ant-api03-demesne-e2e-${crypto.randomBytes(12).toString('hex')}`,
    openai: `sk-proj-demesne-e2e-${crypto.randomBytes(12).toString('hex')}`,
  };
  const fx = {
    anthropic: await startFixture(root, 'anthropic', keys.anthropic),
    openai: await startFixture(root, 'openai', keys.openai),
  };
  const env = h.serverEnv(root, {
    HOME: home, // no login files: only the variables below
    ANTHROPIC_API_KEY: keys.anthropic,
    OPENAI_API_KEY: keys.openai,
    DEMESNE_VENDOR_UPSTREAM_ANTHROPIC: `http://127.0.0.1:${fx.anthropic.port}`,
    DEMESNE_VENDOR_UPSTREAM_OPENAI: `http://127.0.0.1:${fx.openai.port}`,
  });
  delete env.CLAUDE_CODE_OAUTH_TOKEN;
  const client = await connect(env);

  // 1-2: the tools and their model enum (both providers have credentials).
  const { tools } = await client.listTools();
  const agentTool = tools.find((t) => t.name === 'sandbox_agent');
  h.ok(agentTool && tools.some((t) => t.name === 'sandbox_research'), 'tools/list has sandbox_agent and sandbox_research');
  const models = agentTool?.inputSchema?.properties?.model?.enum ?? [];
  h.ok(models.includes('sonnet') && models.includes('gpt-5.5') && !/unavailable/.test(agentTool?.description ?? ''),
    'the model enum lists both providers\' models', JSON.stringify(models));

  // each CLI completes the scripted task through the vendor proxy.
  const cases = [
    { provider: 'anthropic', cli: 'Claude Code', model: 'sonnet' },
    { provider: 'openai', cli: 'Codex', model: 'gpt-5.5' },
  ];
  for (const c of cases) {
    const before = fixtureLog(fx[c.provider]).length;
    const res = await call(client, 'sandbox_agent', {
      prompt: 'Write the answer to /out/answer.txt, then tell me the answer.',
      model: c.model,
      output_path: 'answer.txt',
      output_format: 'text',
      success_criteria: ['/out/answer.txt holds the answer'],
    });
    const sc = res.structuredContent ?? {};
    h.ok(!res.isError && sc.exit_code === 0, `${c.cli}: the agent run succeeds`,
      res.isError ? h.firstText(res) : `exit ${sc.exit_code}\n${sc.stderr}`);
    h.equal(sc.result, 'The answer is 42.', `${c.cli}: result is the final answer`);
    const out = sc.output_dir ?? '/nonexistent';
    h.ok(sc.output_exists === true && fs.readFileSync(path.join(out, 'answer.txt'), 'utf8') === '42\n',
      `${c.cli}: the tool call wrote /out/answer.txt and output_exists says so`);
    const transcript = fs.existsSync(path.join(out, 'transcript.jsonl'))
      ? fs.readFileSync(path.join(out, 'transcript.jsonl'), 'utf8').trim().split('\n') : [];
    h.ok(transcript.length > 2 && transcript.every((l) => { try { JSON.parse(l); return true; } catch { return false; } }),
      `${c.cli}: transcript.jsonl holds the CLI's JSON events (${transcript.length} lines)`);
    const usageFile = fs.existsSync(path.join(out, 'usage.json'))
      ? JSON.parse(fs.readFileSync(path.join(out, 'usage.json'), 'utf8')) : {};
    const u = sc.usage ?? {};
    // The fixture's fixed counts per reply, two replies.
    const want = c.provider === 'anthropic'
      ? { input_tokens: 2000, output_tokens: 100, cache_read_tokens: 600, cache_write_tokens: 400 }
      : { input_tokens: 1600, output_tokens: 120, cache_read_tokens: 800, cache_write_tokens: 0 };
    h.ok(Object.entries(want).every(([k, v]) => u[k] === v && usageFile[k] === v),
      `${c.cli}: usage (result and usage.json) sums the fixture's token counts`, JSON.stringify({ u, usageFile }));
    // sandbox_usage_report on the run adds up to its usage.json.
    const rep = await call(client, 'sandbox_usage_report', { run_id: sc.run_id });
    const rs = rep.structuredContent ?? {};
    h.ok(!rep.isError && rs.sandbox_count === 1 && rs.runs?.[0]?.run_id === sc.run_id &&
      rs.runs[0].kind === 'agent' && rs.runs[0].status === 'succeeded' && rs.runs[0].usage_final === true &&
      Object.keys(want).every((k) => rs.usage?.[k] === usageFile[k]) &&
      Math.abs(rs.cost_usd - usageFile.cost_usd) < 1e-9 && rep.content?.[0]?.text?.includes('total'),
    `${c.cli}: sandbox_usage_report on the run adds up to its usage.json, with a table`,
    rep.isError ? h.firstText(rep) : JSON.stringify(rs));
    const [model] = Object.keys(u.per_model ?? {});
    const expected = model ? costOf(want, priceOf(model)) : NaN;
    h.ok(model && Math.abs(sc.cost_usd - expected) < 1e-9,
      `${c.cli}: cost_usd ${sc.cost_usd} is the price table's for ${model} (${expected})`);
    const seen = fixtureLog(fx[c.provider]).slice(before);
    h.ok(seen.length >= 2 && seen.filter((e) => e.vendor).every((e) => e.auth_ok === true),
      `${c.cli}: the fixture got ${seen.length} requests, each with the real credential`,
      JSON.stringify(seen.slice(0, 4)));
    // Egress none: the vendor proxy reads each request. Claude Code's are
    // left whole (its betas are all safe ones); Codex's web_search tool is
    // taken out, and the log says so.
    const vlog = fs.existsSync(path.join(out, 'vendor.log')) ? fs.readFileSync(path.join(out, 'vendor.log'), 'utf8') : '';
    const lines = vlog.trim().split('\n').filter((l) => / forwarded /.test(l));
    h.ok(lines.length >= 2 && (c.provider === 'anthropic'
      ? lines.every((l) => /reason="ok"$/.test(l))
      : lines.every((l) => /reason="ok; stripped web_search"$/.test(l)) &&
        seen.every((e) => !(e.tools ?? []).includes('web_search'))),
    `${c.cli}: at egress none the vendor proxy ${c.provider === 'anthropic' ? 'strips nothing' : 'strips web_search'}`, vlog);
    h.ok(!fs.readdirSync(out).some((n) => /instructions|run\.sh|prompt/.test(n)) &&
      fs.readdirSync(path.join(root, '.agents')).length === 0,
    `${c.cli}: the run's own files (instructions, launcher) are gone`);
  }

  // research: open egress, no host inputs, same result shape.
  {
    const res = await call(client, 'sandbox_research', { prompt: 'Find the answer.', model: 'sonnet' });
    const sc = res.structuredContent ?? {};
    h.ok(!res.isError && sc.exit_code === 0 && sc.result === 'The answer is 42.' && sc.cost_usd > 0,
      'sandbox_research: the agent answers, with cost_usd', res.isError ? h.firstText(res) : sc.stderr);
    // Open egress: Codex's requests reach the vendor as sent, web_search and all.
    const before = fixtureLog(fx.openai).length;
    const cx = await call(client, 'sandbox_research', { prompt: 'Find the answer.', model: 'gpt-5.5' });
    const seen = fixtureLog(fx.openai).slice(before).filter((e) => e.vendor);
    h.ok(!cx.isError && cx.structuredContent?.exit_code === 0 && seen.length >= 2 &&
      seen.every((e) => (e.tools ?? []).includes('web_search')),
    'sandbox_research with Codex: its requests reach the vendor unfiltered (web_search offered)',
    cx.isError ? h.firstText(cx) : JSON.stringify(seen.map((e) => e.tools)));
    const bad = await call(client, 'sandbox_research', { prompt: 'x', files: ['/etc/hostname'] });
    h.ok(bad.isError && /files/.test(h.firstText(bad)), 'sandbox_research takes no host inputs', h.firstText(bad));
  }

  // A background run: sandbox_wait gives its result, sandbox_status its cost.
  {
    const bg = await call(client, 'sandbox_agent', { prompt: 'Write the answer.', model: 'gpt-5.5', background: true });
    const id = bg.structuredContent?.job_id;
    let fin = {};
    await until(240_000, 'the background agent ends', async () => {
      fin = (await call(client, 'sandbox_wait', { job_id: id, timeout_seconds: 60 })).structuredContent ?? {};
      return fin.status !== 'running';
    });
    const st = (await call(client, 'sandbox_status', { job_id: id })).structuredContent ?? {};
    h.ok(fin.status === 'succeeded' && fin.result === 'The answer is 42.' && st.status === 'succeeded' &&
      typeof st.cost_usd === 'number' && Math.abs(st.cost_usd - fin.cost_usd) < 1e-12 && st.cost_usd > 0,
    'a background agent: sandbox_wait has its answer, sandbox_status its cost_usd', JSON.stringify({ fin, st }));
  }

  // 21-22: bad input gets a clear error, before anything starts.
  {
    const res = await call(client, 'sandbox_agent', { prompt: 'x', model: 'llama-3' });
    h.ok(res.isError && /unknown model 'llama-3'/.test(h.firstText(res)), 'an unknown model is refused by name',
      h.firstText(res));
    const res3 = await call(client, 'sandbox_agent', { prompt: 'x', model: 'claude-x";id;"' });
    h.ok(res3.isError && /is not a model name/.test(h.firstText(res3)), 'a model name with shell characters is refused',
      h.firstText(res3));
    const res2 = await call(client, 'sandbox_agent', { prompt: 'x', model: 'sonnet', output_path: '../../etc/x' });
    h.ok(res2.isError && /output_path/.test(h.firstText(res2)), 'an output_path outside /out is refused',
      h.firstText(res2));
  }
  await client.close();

  // 23-24: only Codex has credentials: the schema lists only its models,
  // the description says why Claude Code is missing, and asking for it fails.
  {
    const only = { ...env };
    delete only.ANTHROPIC_API_KEY;
    const c1 = await connect(only);
    const t = (await c1.listTools()).tools.find((x) => x.name === 'sandbox_agent');
    const e = t?.inputSchema?.properties?.model?.enum ?? [];
    h.ok(e.includes('gpt-5.5') && !e.includes('sonnet') &&
      /Claude Code is unavailable: no ANTHROPIC_API_KEY/.test(t?.description ?? ''),
    'with only OpenAI credentials the model enum lists Codex models and the description says why Claude Code is not there',
    `${JSON.stringify(e)}\n${t?.description}`);
    const res = await call(c1, 'sandbox_agent', { prompt: 'x', model: 'opus' });
    h.ok(res.isError && /needs Anthropic \(Claude Code\) credentials/.test(h.firstText(res)),
      'asking for a Claude model then says which credentials are missing', h.firstText(res));
    await c1.close();
  }

  // 25-35: a run held mid-call (the fixture stalls): inspect the live
  // container, probe the proxy from inside it, then cancel.
  const stallKey = `sk-ant-api03-demesne-stall-${crypto.randomBytes(12).toString('hex')}`;
  const stall = await startFixture(root, 'stall', stallKey, ['--stall']);
  const client2 = await connect({
    ...env,
    ANTHROPIC_API_KEY: stallKey,
    DEMESNE_VENDOR_UPSTREAM_ANTHROPIC: `http://127.0.0.1:${stall.port}`,
  });
  const started = await call(client2, 'sandbox_agent', { prompt: 'Write the answer.', model: 'sonnet', background: true });
  const jobId = started.structuredContent?.job_id;
  h.ok(jobId && started.structuredContent?.status === 'running', 'a background agent run starts', h.firstText(started));
  await until(120_000, 'the stalled call reaches the fixture',
    () => fixtureLog(stall).some((e) => e.phase === 'stalling'));
  const cid = agentOf(client2.serverPid);
  h.ok(cid, 'the agent\'s container runs, labelled demesne.kind=agent');
  const inC = (script) => engine('exec', cid, 'sh', '-c', script);
  const procEnv = inC('cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"').stdout;
  h.ok(/^ANTHROPIC_API_KEY=[0-9a-f]{64}$/m.test(procEnv) && /^ANTHROPIC_BASE_URL=http:\/\/[0-9.]+:3129$/m.test(procEnv),
    'the CLI has a per-run token and the vendor proxy as its base URL');
  const token = /^ANTHROPIC_API_KEY=([0-9a-f]{64})$/m.exec(procEnv)?.[1];
  const base = /^ANTHROPIC_BASE_URL=(\S+)$/m.exec(procEnv)?.[1];
  h.ok(!procEnv.includes(stallKey) && !inC('cat /proc/[0-9]*/cmdline 2>/dev/null').stdout.includes(stallKey),
    'the real credential is in no process\'s environment or command line');
  const grep = inC(`grep -rlsF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev '${stallKey}' / ; echo rc=$?`);
  h.ok(/rc=1\s*$/.test(grep.stdout), 'the real credential is in no file of the container', grep.stdout);
  const curl = (args) => inC(`curl -s -o /dev/null -w '%{http_code}' --max-time 10 ${args}`).stdout.trim();
  const wrong = curl(`-H 'x-api-key: not-the-token' -H 'content-type: application/json' -d '{}' ${base}/v1/messages`);
  const none = curl(`-H 'content-type: application/json' -d '{}' ${base}/v1/messages`);
  h.ok(wrong === '403' && none === '401', `the vendor proxy refuses a wrong token (${wrong}) and a missing one (${none})`);
  h.equal(curl(`-H 'x-api-key: ${token}' ${base}/v1/files`), '403', 'and a non-model endpoint, even with the token (403)');
  h.equal(curl('--noproxy "*" http://1.1.1.1/'), '000', 'the sandbox reaches nothing else (egress none)');
  const host = new URL(base).hostname;
  const cancelled = await call(client2, 'sandbox_cancel', { job_id: jobId });
  h.ok(!cancelled.isError, 'sandbox_cancel accepts the job', h.firstText(cancelled));
  await until(30_000, 'the job ends', async () => {
    const st = await call(client2, 'sandbox_status', { job_id: jobId });
    return st.structuredContent?.status === 'cancelled';
  });
  await until(30_000, 'the container goes', () => engine('ps', '-aq', '--filter', `id=${cid}`).stdout.trim() === '');
  const links = cp.spawnSync('ip', ['-o', 'addr', 'show'], { encoding: 'utf8' }).stdout;
  if (ROOTLESS) {
    h.ok(host === '127.0.0.1' && !new RegExp(`alias demesne .*-${client2.serverPid}-`).test(cp.spawnSync('ip',
      ['-o', 'link', 'show'], { encoding: 'utf8' }).stdout), 'cancel removed the container; rootless, the vendor proxy was on its own '
      + 'loopback (no veth on the host)', host);
  } else {
    h.ok(!links.includes(`inet ${host}/`), 'cancel removed the container and its veth');
  }
  h.ok(fs.readdirSync(path.join(root, '.agents')).length === 0, 'and the run\'s own files');
  await client2.close();

  // 36-38: a server killed with -9 mid-run leaves its agent's container and
  // files behind; the next server removes both (its vendor proxy died with it).
  const stalls = () => fixtureLog(stall).filter((e) => e.phase === 'stalling').length;
  const seenStalls = stalls();
  const t3 = new StdioClientTransport({ command: DEMESNE, args: ['serve'], stderr: 'inherit',
    env: { ...env, ANTHROPIC_API_KEY: stallKey, DEMESNE_VENDOR_UPSTREAM_ANTHROPIC: `http://127.0.0.1:${stall.port}` } });
  const client3 = new Client({ name: 'demesne-e2e-agents-3', version: '0.0.0' });
  await client3.connect(t3);
  await call(client3, 'sandbox_agent', { prompt: 'Write the answer.', model: 'sonnet', background: true });
  await until(120_000, 'the second stalled call reaches the fixture', () => stalls() > seenStalls);
  const orphan = agentOf(t3.pid);
  h.ok(orphan && fs.readdirSync(path.join(root, '.agents')).length === 1,
    'a running agent has its container and its run files');
  process.kill(t3.pid, 'SIGKILL');
  // A server of another output root (as every other test's is) does not
  // sweep it: only this root's next server does.
  const otherRoot = path.join(root, 'other-root');
  fs.mkdirSync(otherRoot);
  const other = await connect({ ...env, DEMESNE_OUTPUT_ROOT: otherRoot });
  const ran = await call(other, 'sandbox_script', { command: 'true', image: 'base', egress: 'none' });
  await new Promise((r) => setTimeout(r, 2000));
  h.ok(!ran.isError && engine('ps', '-q', '--filter', `id=${orphan}`).stdout.trim() !== '' &&
    fs.readdirSync(path.join(root, '.agents')).length === 1,
  'after kill -9 its container and run files stay, and a server of another output root leaves them alone',
  h.firstText(ran));
  await other.close();
  const client4 = await connect(env);
  let gone = false;
  try {
    await until(60_000, 'the orphan goes', () => engine('ps', '-aq', '--filter', `id=${orphan}`).stdout.trim() === '' &&
      fs.readdirSync(path.join(root, '.agents')).length === 0);
    gone = true;
  } catch (err) {
    h.diag(String(err));
  }
  h.ok(gone, 'the next server removes the dead one\'s agent container and run files');
  await client4.close();
});
