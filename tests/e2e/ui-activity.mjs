#!/usr/bin/env node
// `demesne ui` against a real `demesne serve`: a sandbox_script made over MCP
// (@modelcontextprotocol/client, stdio, the real engine) shows up in the
// activity API and arrives as a server-sent event; the login code works once
// and only once; nothing without a login (401); a cross-site POST and a
// foreign Host are refused; a command printing markup comes back as JSON
// text, its file as text/plain, an HTML file as a download, a link the
// sandbox planted is never followed; hostile ids never name a file; the
// event streams' cap holds when more are opened at once; the page's CSP and
// its use of textContent only (a grep-level check). The actions: a
// background job (`sleep 300`) cancelled and a persistent sandbox destroyed
// through the view's API, by the serve process that owns them (its control
// socket): each ends, its container gone; a log's tail from an offset; a cross-site, Origin-less or
// anonymous POST refused, an unknown id 404; the control socket refuses a
// peer of another uid (as root: a child with euid 65534 that can still reach
// the socket). And /ui/ inside `serve --http`: its own login, the runs
// listed, a destroy acting in-process.
//
//   DEMESNE=/abs/path/to/demesne top_srcdir=/abs/src node tests/e2e/ui-activity.mjs

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import readline from 'node:readline';
import { spawnSync } from 'node:child_process';

import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);
const SRC = process.env.top_srcdir ?? path.resolve(h.E2E_DIR, '../..');
const UI_DIR = path.join(SRC, 'data/ui');

const { Client } = await import('@modelcontextprotocol/client');
const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
const { CALL_TIMEOUT_MS } = await import('./lib/checks.mjs');
const { Client: HttpClient, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
const { stopServer } = await import('./lib/http-server.mjs');

const MAX_STREAMS = 16; // DM_UI_MAX_STREAMS (src/cli/ui.h)
const MARKUP = '<img src=x onerror=alert(1)>';

h.plan(49);

// How many containers carry the label key=id (-1: the engine did not answer):
// demesne.run for a run's, demesne.sandbox for a persistent sandbox's.
function containersOfRun(id, key = 'demesne.run') {
  const hostVar = process.env.DEMESNE_ENGINE_HOST ?? process.env.DOCKER_HOST ?? process.env.CONTAINER_HOST;
  const socketPath = hostVar?.startsWith('unix://') ? hostVar.slice(7) : '/run/podman/podman.sock';
  const filters = encodeURIComponent(JSON.stringify({ label: [`${key}=${id}`] }));
  return new Promise((resolve) => {
    http.get({ socketPath, path: `/containers/json?all=true&filters=${filters}` }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => { try { resolve(JSON.parse(body).length); } catch { resolve(-1); } });
    }).on('error', () => resolve(-1));
  });
}

// A peer of uid 65534 on the control socket at sock, as root: euid 65534
// (what SO_PEERCRED reports), the file-system uid kept at 0 so the 0700
// directory and the 0600 socket still let it connect. Its answer line.
function foreignPeer(sock, request) {
  const py = `
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
os.setgroups([]); os.setresgid(65534, 65534, 0); os.setresuid(0, 65534, 0)
libc.setfsuid(0)
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
try: s.sendall(sys.argv[2].encode() + b'\\n')
except BrokenPipeError: pass  # refused before it read: the answer is there still
sys.stdout.write(s.makefile().readline())
`;
  const r = spawnSync('python3', ['-c', py, sock, request], { encoding: 'utf8', timeout: 20_000 });
  return `${r.stdout ?? ''}${r.status === 0 ? '' : ` (exit ${r.status}: ${r.stderr})`}`;
}

// Waits for cond() (async) to hold, every 100 ms, at most ms.
async function until(ms, what, cond) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

await h.run(async () => {
  const base = h.makeOutputRoot('ui');
  const state = path.join(base, 'state');
  const out = path.join(base, 'out');
  fs.mkdirSync(state, { mode: 0o700 });
  // No warm pool: a job's container carries its own run id (demesne.run), and nothing starts that no check needs.
  const env = h.serverEnv(out, { DEMESNE_STATE_DIR: state, DEMESNE_POOL: '0' });

  // The view first: it prints its URL on stdout.
  const ui = h.spawnGroup(DEMESNE, ['ui', '--listen', '127.0.0.1:0', '--ui-dir', UI_DIR],
    { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: ui.stdout });
  const url = await h.within(30_000, 'the login URL', new Promise((resolve) => {
    lines.on('line', (l) => { const m = /(http:\/\/\S+)/.exec(l); if (m) resolve(m[1]); });
  }));
  const origin = new URL(url).origin;
  const api = `${origin}/ui/api/v1`;

  // 1: nothing without a login.
  const anon = await fetch(`${api}/runs`);
  h.equal(anon.status, 401, 'GET runs without a login is 401');

  // 2-4: the code works once, as an HttpOnly SameSite=Strict cookie.
  const first = await fetch(url, { redirect: 'manual' });
  const setCookie = first.headers.get('set-cookie') ?? '';
  h.ok(first.status === 303 && first.headers.get('location') === '/ui/', 'the login URL redirects to /ui/',
    `${first.status} ${first.headers.get('location')}`);
  h.ok(/HttpOnly/.test(setCookie) && /SameSite=Strict/.test(setCookie) && /^demesne_ui=[0-9a-f]{64};/.test(setCookie),
    'it sets an HttpOnly, SameSite=Strict session cookie', setCookie.replace(/=[0-9a-f]+/, '=…'));
  const again = await fetch(url, { redirect: 'manual' });
  h.ok(again.status === 401 && !again.headers.get('set-cookie'), 'the same code a second time is 401',
    String(again.status));
  const cookie = setCookie.split(';')[0];
  const get = (p, extra = {}) => fetch(`${api}/${p}`, { headers: { cookie, ...extra } });

  // 5: the bearer token, made and written as serve --http's.
  const port = new URL(url).port;
  const token = fs.readFileSync(path.join(state, `ui-127.0.0.1-${port}.token`), 'utf8').trim();
  const byToken = await fetch(`${api}/runs`, { headers: { authorization: `Bearer ${token}` } });
  h.equal(byToken.status, 200, 'the bearer token works too');

  // The event stream, open before the run begins.
  const events = new AbortController();
  const stream = await fetch(`${api}/events`, { headers: { cookie }, signal: events.signal });
  h.ok(stream.status === 200 && stream.headers.get('content-type') === 'text/event-stream',
    'GET events is an event stream', `${stream.status} ${stream.headers.get('content-type')}`);
  let sse = '';
  const reader = stream.body.getReader();
  (async () => {
    const dec = new TextDecoder();
    try { for (;;) { const { value, done } = await reader.read(); if (done) break; sse += dec.decode(value); } } catch { /* aborted */ }
  })();

  // A run over MCP: markup on stdout, an HTML file and a planted link in /out.
  const client = new Client({ name: 'demesne-e2e-ui', version: '0.0.0' });
  const transport = new StdioClientTransport({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' });
  await h.within(60_000, 'connect', client.connect(transport, { timeout: 30_000 }));
  const res = await client.callTool({
    name: 'sandbox_script',
    arguments: {
      command: `echo '${MARKUP}'; echo '<script>alert(2)</script>' > /out/page.html; ln -s /etc/passwd /out/link.txt`,
      egress: 'none',
    },
  }, { timeout: CALL_TIMEOUT_MS });
  const runId = res?.structuredContent?.run_id;
  h.ok(!res?.isError && /^run-/.test(runId ?? ''), 'sandbox_script ran', JSON.stringify(res?.structuredContent));

  // 7-9: it is in the list, ended, its command as JSON text.
  const listed = await until(30_000, 'the run in GET runs', async () => {
    const r = await (await get('runs')).json();
    const run = r.runs.find((x) => x.id === runId);
    return run?.status === 'succeeded' ? { r, run } : null;
  });
  h.ok(listed.r.api_version === 1 && listed.run.kind === 'run' && listed.run.egress === 'none'
    && listed.run.exit_code === 0 && listed.run.end_ms >= listed.run.start_ms, 'GET runs has the run, ended',
    JSON.stringify(listed.run));
  h.ok(listed.run.command.startsWith(`echo '${MARKUP}'`), 'the command is returned as JSON text, unchanged');
  h.ok(listed.run.output_dir === path.join(out, runId) && 'principal' in listed.run,
    'with its output directory and principal');

  // 10: the stream had its start and its end.
  await until(10_000, 'the events', async () => sse.includes(`"id":"${runId}"`) && /"status":"succeeded"/.test(sse));
  const runEvents = sse.split('\n\n').filter((e) => e.startsWith('event: run') && e.includes(`"id":"${runId}"`));
  h.ok(runEvents.length === 2, 'the run arrived as two events (start, end)', `${runEvents.length}`);

  // 11-12: filters.
  const ok1 = (await (await get('runs?status=succeeded&kind=run')).json()).runs.some((x) => x.id === runId);
  const none = (await (await get('runs?kind=sandbox')).json()).runs.some((x) => x.id === runId);
  h.ok(ok1 && !none, 'status and kind filter the list');
  h.equal((await get('runs?status=%3Cscript%3E')).status, 400, 'a filter that is not a word is 400');

  // 13-16: one run, its files; text as text, HTML as a download, no link followed.
  const one = await (await get(`runs/${runId}`)).json();
  const names = (one.files ?? []).map((f) => f.name);
  h.ok(names.includes('stdout.log') && names.includes('page.html') && !names.includes('link.txt'),
    'GET runs/{id} lists its output files, not the link', names.join(' '));
  const rep = one.usage_report;
  h.ok(rep?.sandbox_count === 1 && rep?.cost_usd === 0 && rep?.runs?.length === 1,
    'GET runs/{id} has the usage report of its tree (a script costs nothing)', JSON.stringify(rep));
  const log = await get(`runs/${runId}/files/stdout.log`);
  const logText = await log.text();
  h.ok(log.headers.get('content-type') === 'text/plain; charset=utf-8' && log.headers.get('x-content-type-options') === 'nosniff'
    && logText === `${MARKUP}\n`, 'stdout.log is text/plain with nosniff', `${log.headers.get('content-type')} ${JSON.stringify(logText)}`);
  // The tail: all of a short log (no from), then from an offset; a bad offset 400, another name 404.
  const whole = await get(`runs/${runId}/tail/stdout`);
  const wholeText = await whole.text();
  const part = await get(`runs/${runId}/tail/stdout?from=5`);
  const partText = await part.text();
  const badTail = [await get(`runs/${runId}/tail/stdout?from=-1`), await get(`runs/${runId}/tail/stdout?from=x`),
    await get(`runs/${runId}/tail/passwd`)].map((r) => r.status).join();
  const n = Buffer.byteLength(`${MARKUP}\n`);
  h.ok(wholeText === `${MARKUP}\n` && whole.headers.get('x-log-next') === String(n) && whole.headers.get('x-log-size') === String(n)
    && partText === `${MARKUP}\n`.slice(5) && part.headers.get('x-log-next') === String(n) && badTail === '400,400,404',
  'GET runs/{id}/tail/stdout gives the log from an offset, with the next one', `${JSON.stringify(partText)} ${badTail}`);
  const page = await get(`runs/${runId}/files/page.html`);
  await page.arrayBuffer();
  h.ok(page.headers.get('content-disposition') === 'attachment' && page.headers.get('content-type') === 'application/octet-stream',
    'an HTML file from a sandbox is a download', `${page.headers.get('content-type')} ${page.headers.get('content-disposition')}`);
  const link = await get(`runs/${runId}/files/link.txt`);
  const linkText = await link.text();
  h.ok(link.status === 404 && !linkText.includes('root:'), 'a link the sandbox planted is not followed', String(link.status));

  // 17: hostile ids and paths never serve a file.
  const hostile = ['runs/..%2F..%2Fetc', 'runs/%2e%2e', `runs/${'a'.repeat(300)}`, 'runs/run-x%00.json',
    `runs/${runId}%00`, `runs/${runId}/files/..%2F..%2F..%2Fetc%2Fpasswd`, `runs/${runId}/files/%00`,
    `runs/${runId}/files/stdout.log%00.png`, 'runs/..', `runs/${runId}/../../..`];
  const codes = [];
  for (const p of hostile) {
    const r = await get(p);
    const body = await r.text();
    codes.push(`${p.slice(0, 40)}=${r.status}`);
    if (![400, 404].includes(r.status) || body.includes('root:')) codes.push('!!');
  }
  h.ok(!codes.includes('!!'), 'hostile ids and paths get 400 or 404, never a file', codes.join(' '));

  // 18-20: Origin and Host.
  const evil = await fetch(`${api}/logout`, { method: 'POST', headers: { cookie, origin: 'http://evil.example' } });
  h.equal(evil.status, 403, 'a cross-site POST (Origin: http://evil.example) is refused');
  const noOrigin = await fetch(`${api}/logout`, { method: 'POST', headers: { cookie } });
  h.equal(noOrigin.status, 403, 'a POST without the page\'s Origin is refused');
  // (fetch sends its own Host whatever it is given: node:http sends ours.)
  const rebound = await new Promise((resolve, reject) => {
    http.get(`${api}/runs`, { headers: { cookie, host: 'evil.example' } }, (r) => { r.resume(); resolve(r.statusCode); })
      .on('error', reject);
  });
  h.equal(rebound, 403, 'a foreign Host (DNS rebinding) is refused');

  // 21: the page: a strict CSP, and text only.
  const index = await fetch(`${origin}/ui/`, { headers: { cookie } });
  const csp = index.headers.get('content-security-policy') ?? '';
  const html = await index.text();
  const js = fs.readFileSync(path.join(UI_DIR, 'app.js'), 'utf8');
  h.ok(index.status === 200 && /default-src 'none'/.test(csp) && /script-src 'self'/.test(csp) && !/unsafe/.test(csp)
    && !/<script>/.test(html) && !/\bon\w+=/.test(html) && !/innerHTML|outerHTML|insertAdjacentHTML|document\.write/.test(js)
    && /textContent/.test(js), 'the page: a strict CSP, no inline script, text inserted as text only', csp);

  // 22: the streams' cap, more at once than it allows.
  const many = new AbortController();
  const tries = await Promise.all(Array.from({ length: MAX_STREAMS + 4 }, () =>
    fetch(`${api}/events`, { headers: { cookie }, signal: many.signal }).then((r) => r.status)));
  many.abort();
  const refusedN = tries.filter((s) => s === 429).length;
  h.ok(refusedN === 5 && tries.filter((s) => s === 200).length === MAX_STREAMS - 1,
    `${MAX_STREAMS} event streams at once, the rest 429`, tries.join(','));

  // 23: a POST with the page's own Origin ends the session.
  const bye = await fetch(`${api}/logout`, { method: 'POST', headers: { cookie, origin } });
  const after = await get('runs');
  h.ok(bye.status === 204 && after.status === 401, 'logout (own Origin) ends the session', `${bye.status} ${after.status}`);

  // 24-28: a persistent sandbox and a background job, through the same journal.
  const sb = await client.callTool({ name: 'sandbox_create', arguments: {} }, { timeout: CALL_TIMEOUT_MS });
  const sbId = sb?.structuredContent?.sandbox_id;
  // Destroyed through the view (below the job's start): the serve that made it does it.
  const auth = { authorization: `Bearer ${token}` };
  const post = (p, headers) => fetch(`${api}/${p}`, { method: 'POST', headers });
  const byToken2 = (p) => fetch(`${api}/${p}`, { headers: { authorization: `Bearer ${token}` } });
  await until(30_000, 'the sandbox in GET runs', async () =>
    (await (await byToken2(`runs/${sbId}`)).json()).status === 'running');
  const held2 = await containersOfRun(sbId, 'demesne.sandbox');
  const destroyed = await post(`runs/${sbId}/destroy`, { ...auth, origin });
  const dBody = await destroyed.json();
  const listAfter = await client.callTool({ name: 'sandbox_list', arguments: {} }, { timeout: CALL_TIMEOUT_MS });
  h.ok(destroyed.status === 200 && dBody.status === 'destroyed'
    && !listAfter.structuredContent.sandboxes.some((x) => x.sandbox_id === sbId),
  'POST runs/{id}/destroy destroys a persistent sandbox: sandbox_list has it no more', `${destroyed.status} ${JSON.stringify(dBody)}`);
  h.ok(held2 === 1 && (await containersOfRun(sbId, 'demesne.sandbox')) === 0, 'the sandbox\'s container was there and is gone', `${held2}`);
  const job = await client.callTool({ name: 'sandbox_script', arguments: { command: 'exit 4', background: true } },
    { timeout: CALL_TIMEOUT_MS });
  const jobId = job?.structuredContent?.job_id;
  const seen = await until(60_000, 'the sandbox and the job in GET runs', async () => {
    const r = (await (await byToken2('runs')).json()).runs;
    const s1 = r.find((x) => x.id === sbId);
    const j1 = r.find((x) => x.job_id === jobId);
    return s1?.status === 'destroyed' && j1?.status === 'failed' ? { s1, j1 } : null;
  });
  h.ok(seen.s1.kind === 'sandbox' && seen.s1.egress === sb.structuredContent.egress
    && seen.s1.image === sb.structuredContent.image && seen.s1.end_ms >= seen.s1.start_ms,
    'a persistent sandbox is listed, destroyed', JSON.stringify(seen.s1));
  h.ok(seen.j1.kind === 'job' && seen.j1.exit_code === 4, 'a background job\'s run is listed with its job id and exit code',
    JSON.stringify(seen.j1));

  // 27-35: the actions, asked of the view and done by the serve that owns the job or sandbox.
  const long = await client.callTool({ name: 'sandbox_script', arguments: { command: 'sleep 300', background: true } },
    { timeout: CALL_TIMEOUT_MS });
  const longJob = long?.structuredContent?.job_id;
  const longRun = await until(60_000, 'the sleeping job running in GET runs', async () =>
    (await (await byToken2('runs?status=running&kind=job')).json()).runs.find((x) => x.job_id === longJob));
  // The journal's start comes at the claim, before the container: wait for it.
  const held1 = await until(60_000, 'the job\'s container', async () => (await containersOfRun(longRun.id)) === 1);
  const refusedPosts = [await post(`runs/${longRun.id}/cancel`, { ...auth, origin: 'http://evil.example' }),
    await post(`runs/${longRun.id}/cancel`, auth), await post(`runs/${longRun.id}/cancel`, { origin })];
  h.ok(refusedPosts.map((r) => r.status).join() === '403,403,401',
    'cancel: a cross-site POST and one without Origin are 403, one without login 401',
    refusedPosts.map((r) => r.status).join());

  // The control socket hears only its own user.
  const sockDir = path.join(state, 'control');
  const socks = fs.readdirSync(sockDir).filter((f) => f.endsWith('.sock'));
  const sockMode = fs.statSync(sockDir).mode & 0o777;
  h.ok(socks.length === 1 && sockMode === 0o700 && (fs.statSync(path.join(sockDir, socks[0])).mode & 0o777) === 0o600,
    'serve has one control socket, 0600 in a 0700 directory', `${socks} ${sockMode.toString(8)}`);
  if (process.getuid() === 0) {
    const said = foreignPeer(path.join(sockDir, socks[0]), JSON.stringify({ op: 'cancel', id: longJob }));
    const still = await client.callTool({ name: 'sandbox_status', arguments: { job_id: longJob } }, { timeout: CALL_TIMEOUT_MS });
    h.ok(/"code":403/.test(said) && still?.structuredContent?.status === 'running',
      'a peer of another uid is refused by the control socket, the job runs on', said.trim());
  } else {
    h.skip(1, 'a peer of another uid that can reach a 0700 directory needs root to make');
  }

  // Six at once: the server acts once, each answer says where the job stands.
  const burst = await Promise.all(Array.from({ length: 6 }, () => post(`runs/${longRun.id}/cancel`, { ...auth, origin })));
  const bodies = await Promise.all(burst.map((r) => r.json()));
  const cancelled = burst[0];
  const cBody = bodies[0];
  h.ok(burst.every((r) => r.status === 200) && bodies.every((b) => b.status === 'cancelled'),
    'six cancels of one job at once: each is 200, cancelled', bodies.map((b) => b.status ?? b.error).join());
  const jobNow = await client.callTool({ name: 'sandbox_status', arguments: { job_id: longJob } }, { timeout: CALL_TIMEOUT_MS });
  h.ok(cancelled.status === 200 && cBody.status === 'cancelled' && cBody.job_id === longJob
    && jobNow?.structuredContent?.status === 'cancelled', 'POST runs/{id}/cancel ends the job: cancelled, sandbox_status agrees',
  `${cancelled.status} ${JSON.stringify(cBody)} ${jobNow?.structuredContent?.status}`);
  const gone1 = await until(60_000, 'the job\'s container gone', async () => (await containersOfRun(longRun.id)) === 0);
  h.ok(held1 && gone1, 'the job\'s container was there and is gone', `${held1}`);
  await until(30_000, 'the journal\'s end of the job', async () =>
    (await (await byToken2(`runs/${longRun.id}`)).json()).status === 'cancelled');
  h.pass('the journal says the job\'s run was cancelled');


  const noRun = await post('runs/run-000000000000/cancel', { ...auth, origin });
  const notSandbox = await post(`runs/${runId}/destroy`, { ...auth, origin });
  const twice = await post(`runs/${sbId}/destroy`, { ...auth, origin });
  h.ok(noRun.status === 404 && notSandbox.status === 409 && twice.status === 404,
    'an id of no run is 404, a sandbox destroyed already 404 (its server knows it no more); a run that is no sandbox 409',
    `${noRun.status} ${notSandbox.status} ${twice.status}`);

  events.abort();
  await h.closeStdio(client, transport);
  h.ok(fs.readdirSync(sockDir).length === 0, 'serve removed its control socket at exit', String(fs.readdirSync(sockDir)));

  // 37-41: /ui/ inside serve --http: its own login, the runs, a destroy in-process.
  // A socket a killed server left (its pid gone): the next server removes it.
  const dead = spawnSync('true');
  fs.writeFileSync(path.join(sockDir, `${dead.pid}.sock`), '');
  const httpToken = 'e2e-ui-http-0123456789abcdef';
  const srv = h.spawnGroup(DEMESNE, ['serve', '--http', '127.0.0.1:0'],
    { env: { ...env, DEMESNE_HTTP_TOKEN: httpToken, DEMESNE_UI_DIR: UI_DIR }, stdio: ['ignore', 'pipe', 'inherit'] });
  const srvLines = readline.createInterface({ input: srv.stdout });
  const srvLogin = await h.within(30_000, 'serve --http\'s login URL', new Promise((resolve) => {
    srvLines.on('line', (l) => { const m = /(http:\/\/\S+\/ui\/login\S+)/.exec(l); if (m) resolve(m[1]); });
  }));
  const sOrigin = new URL(srvLogin).origin;
  const sSocks = fs.readdirSync(sockDir);
  h.ok(sSocks.length === 1 && sSocks[0] === `${srv.pid}.sock`, 'a starting server removes a dead server\'s socket',
    sSocks.join());
  const sApi = `${sOrigin}/ui/api/v1`;
  const sAnon = await fetch(`${sApi}/runs`);
  const sIn = await fetch(srvLogin, { redirect: 'manual' });
  const sCookie = (sIn.headers.get('set-cookie') ?? '').split(';')[0];
  const sPage = await fetch(`${sOrigin}/ui/`, { headers: { cookie: sCookie } });
  await sPage.text();
  h.ok(sAnon.status === 401 && sIn.status === 303 && /^demesne_ui=[0-9a-f]{64}$/.test(sCookie) && sPage.status === 200
    && /default-src 'none'/.test(sPage.headers.get('content-security-policy') ?? ''),
  'serve --http: /ui/ is 401 without a login, the code gives a cookie, the page is served with its CSP',
  `${sAnon.status} ${sIn.status} ${sPage.status}`);
  const hc = new HttpClient({ name: 'demesne-e2e-ui-http', version: '0.0.0' });
  await h.within(30_000, 'connect over HTTP', hc.connect(new StreamableHTTPClientTransport(new URL(`${sOrigin}/mcp`),
    { requestInit: { headers: { Authorization: `Bearer ${httpToken}` } } }), { timeout: 20_000 }));
  const sb3 = await hc.callTool({ name: 'sandbox_create', arguments: {} }, { timeout: CALL_TIMEOUT_MS });
  const sb3Id = sb3?.structuredContent?.sandbox_id;
  const sListed = await until(30_000, 'serve --http\'s sandbox in its /ui/ runs', async () =>
    (await (await fetch(`${sApi}/runs`, { headers: { cookie: sCookie } })).json()).runs.find((x) => x.id === sb3Id));
  h.ok(sListed.kind === 'sandbox' && sListed.status === 'running', 'serve --http: GET /ui/api/v1/runs lists its sandbox',
    JSON.stringify(sListed));
  const sEvil = await fetch(`${sApi}/runs/${sb3Id}/destroy`, { method: 'POST', headers: { cookie: sCookie, origin: 'http://evil.example' } });
  const sByBearer = await fetch(`${sApi}/runs`, { headers: { authorization: `Bearer ${httpToken}` } });
  await sByBearer.arrayBuffer();
  h.ok(sEvil.status === 403 && sByBearer.status === 200, 'serve --http: a cross-site POST is 403; serve\'s bearer token works',
    `${sEvil.status} ${sByBearer.status}`);
  const held3 = await containersOfRun(sb3Id, 'demesne.sandbox');
  const sDel = await fetch(`${sApi}/runs/${sb3Id}/destroy`, { method: 'POST', headers: { cookie: sCookie, origin: sOrigin } });
  const sDelBody = await sDel.json();
  const sList = await hc.callTool({ name: 'sandbox_list', arguments: {} }, { timeout: CALL_TIMEOUT_MS });
  h.ok(sDel.status === 200 && sDelBody.status === 'destroyed' && !sList.structuredContent.sandboxes.some((x) => x.sandbox_id === sb3Id)
    && held3 === 1 && (await containersOfRun(sb3Id, 'demesne.sandbox')) === 0, 'serve --http: POST destroy acts in-process, the sandbox and its container are gone',
  `${sDel.status} ${JSON.stringify(sDelBody)}`);
  await hc.close();
  const sCode = await stopServer(srv);
  h.ok(sCode === 0 && fs.readdirSync(sockDir).length === 0, 'serve --http stops (exit 0) and removes its control socket', String(sCode));

  // The view stops on SIGTERM, an event stream still open, and removes its token file.
  const held = await fetch(`${api}/events`, { headers: { authorization: `Bearer ${token}` } });
  held.body.getReader().read().catch(() => {});
  process.kill(-ui.pid, 'SIGTERM');
  const code = await h.within(30_000, 'ui exit', new Promise((r) => ui.once('exit', (c) => r(c))));
  h.ok(code === 0 && !fs.existsSync(path.join(state, `ui-127.0.0.1-${port}.token`)),
    'demesne ui exits 0 on SIGTERM (a stream open) and removes its token', String(code));

  // Bad listen addresses and arguments: a clear error, no token file left.
  const refuse = async (args) => {
    const p = h.spawnGroup(DEMESNE, ['ui', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d) => { err += d; });
    const c = await h.within(30_000, `ui ${args.join(' ')}`, new Promise((r) => p.once('exit', (x) => r(x))));
    return { c, err };
  };
  const remote = await refuse(['--listen', '192.0.2.1:0']);
  h.ok(remote.c === 1 && /--allow-remote/.test(remote.err), 'an address that is not loopback is refused, saying why',
    `${remote.c} ${remote.err.trim()}`);
  const every = await refuse(['--listen', '0.0.0.0:0', '--allow-remote']);
  h.ok(every.c === 1 && /not every one/.test(every.err), 'every interface is refused even with --allow-remote',
    `${every.c} ${every.err.trim()}`);
  const extra = await refuse(['stray']);
  h.ok(extra.c === 2 && fs.readdirSync(state).every((f) => !f.endsWith('.token')),
    'a stray argument is a usage error, and no token file is left', `${extra.c} ${fs.readdirSync(state)}`);
});
