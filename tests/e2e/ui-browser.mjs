#!/usr/bin/env node
// The activity view in a real browser: Debian's chromium driven by
// playwright-core (tests/e2e/package.json), the page served by a real
// `demesne ui`, runs made over MCP by a real `demesne serve` against the
// engine. The login URL signs the browser in; the run list renders a
// finished run; its detail opens with its stdout, markup shown as text (no
// dialog fires); a background job's stdout tail grows while it runs; its
// cancel button (after the confirmation) ends it and the engine shows its
// container gone; a sandbox's page links its preview (sandbox_expose), the
// link opens what it serves, the destroy button closes it; after the session ends, a refused request's error renders.
// Over a journal of 300 runs (written as a server writes it), the rows that
// fill the window are drawn first and the rest after them, newest first, and
// a run that starts while the list is scrolled down does not move it.
// With UI_SCREENSHOTS=DIR it leaves the page's screenshots there
// (docs/images: `make ui-screenshots`).
//
// Chromium and playwright-core are test dependencies (setup.sh --test-deps):
// without them this test fails, saying what to install, rather than skip.
//
//   DEMESNE=/abs/path/to/demesne top_srcdir=/abs/src node tests/e2e/ui-browser.mjs

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import readline from 'node:readline';

import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);
const SRC = process.env.top_srcdir ?? path.resolve(h.E2E_DIR, '../..');
const UI_DIR = path.join(SRC, 'data/ui');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = process.env.UI_SCREENSHOTS;
const MARKUP = '<img src=x onerror=alert(1)>';
// A 1x1 PNG, and a file whose name and content are markup.
const PNG_B64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
const SCRIPT_NAME = '<script>.txt';
const SCRIPT_TEXT = '<b>not bold</b>';
h.plan(19);

// A missing dependency fails every test, says which, and runs nothing.
function missing(why) {
  h.failRemaining(why);
  process.stdout.write(`e2e: 0 passed, 12 failed\n`);
  process.exit(1);
}
let playwright;
try {
  playwright = await import('playwright-core');
} catch (err) {
  missing(`playwright-core is not installed in tests/e2e/node_modules (run ./setup.sh --test-deps): ${err.message}`);
}
if (!fs.existsSync(CHROMIUM)) missing(`no chromium at ${CHROMIUM}: install Debian's chromium (./setup.sh --test-deps), or set CHROMIUM`);

const { Client } = await import('@modelcontextprotocol/client');
const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
const { CALL_TIMEOUT_MS, NESTED_CALL, until } = await import('./lib/checks.mjs');

// How many containers the engine has for the run id (-1: no answer).
function containersOfRun(id) {
  const hostVar = process.env.DEMESNE_ENGINE_HOST ?? process.env.DOCKER_HOST ?? process.env.CONTAINER_HOST;
  const socketPath = hostVar?.startsWith('unix://') ? hostVar.slice(7) : '/run/podman/podman.sock';
  const filters = encodeURIComponent(JSON.stringify({ label: [`demesne.run=${id}`] }));
  return new Promise((resolve) => {
    http.get({ socketPath, path: `/containers/json?all=true&filters=${filters}` }, (res) => {
      let body = '';
      res.on('data', (c) => { body += c; });
      res.on('end', () => { try { resolve(JSON.parse(body).length); } catch { resolve(-1); } });
    }).on('error', () => resolve(-1));
  });
}


/** The URL a `demesne ui` prints, started with env. */
async function startUi(env) {
  const ui = h.spawnGroup(DEMESNE, ['ui', '--listen', '127.0.0.1:0', '--ui-dir', UI_DIR],
    { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: ui.stdout });
  return h.within(30_000, 'the login URL', new Promise((resolve) => {
    lines.on('line', (l) => { const m = /(http:\/\/\S+)/.exec(l); if (m) resolve(m[1]); });
  }));
}

// 18-19: a long list, from a journal of LONG runs in the run journal's
// format (docs/reference/activity-api.md#the-run-journal) under a state
// directory of its own.
const LONG = 300;
async function longList(browser, base, env) {
  const state = path.join(base, 'state-long');
  fs.mkdirSync(path.join(state, 'activity'), { recursive: true, mode: 0o700 });
  const t0 = Date.now() - LONG * 1000;
  const id = (i) => `run-long-${String(i).padStart(4, '0')}`;
  const start = (i) => JSON.stringify({ event: 'start', id: id(i), kind: 'run', principal: 'local', image: 'base', egress: 'none',
    command: `echo ${i}`, status: 'running', output_dir: path.join(base, 'out', id(i)), time_ms: t0 + i * 1000 });
  const end = (i) => JSON.stringify({ event: 'end', id: id(i), status: 'succeeded', exit_code: 0, time_ms: t0 + i * 1000 + 400 });
  const journal = path.join(state, 'activity', `${process.pid}-${t0}.jsonl`);
  fs.writeFileSync(journal, [...Array(LONG).keys()].map((i) => `${start(i)}\n${end(i)}\n`).join(''), { mode: 0o600 });
  const url = await startUi({ ...env, DEMESNE_STATE_DIR: state });
  const context = await browser.newContext({ viewport: { width: 1280, height: 640 } });
  // Each size the list had, as rows went in.
  await context.addInitScript(() => {
    window.demesneBatches = [];
    new MutationObserver(() => {
      const n = document.querySelector('#runs tbody')?.children.length ?? 0;
      if (n && window.demesneBatches.at(-1) !== n) window.demesneBatches.push(n);
    }).observe(document, { childList: true, subtree: true });
  });
  const page = await context.newPage();
  await page.goto(url);
  const rows = page.locator('#runs tbody tr');
  await until(30_000, 'every row drawn', async () => (await rows.count()) === LONG).catch(() => {});
  const seen = await page.evaluate(() => {
    const trs = [...document.querySelectorAll('#runs tbody tr')];
    const first = window.demesneBatches[0] ?? 0;
    return { batches: window.demesneBatches, ids: [trs[0]?.dataset.id, trs.at(-1)?.dataset.id],
      filled: first > 0 && trs[first - 1].getBoundingClientRect().bottom + window.scrollY >= window.innerHeight };
  });
  h.ok(seen.batches.length >= 2 && seen.batches[0] < LONG && seen.filled && seen.batches.at(-1) === LONG &&
    seen.ids[0] === id(LONG - 1) && seen.ids[1] === id(0),
  `${LONG} runs: the rows that fill the window are drawn first, then all of them, newest first`, JSON.stringify(seen));

  // A run that starts while the list is scrolled down: redrawn whole, the
  // scroll kept (a first-screenful draw would have cut the list short).
  await page.evaluate(() => window.scrollTo(0, 4000));
  const before = await page.evaluate(() => window.scrollY);
  fs.appendFileSync(journal, `${start(LONG)}\n`);
  const added = await until(30_000, 'the new run listed', async () => (await rows.count()) === LONG + 1).catch(() => false);
  const after = await page.evaluate(() => window.scrollY);
  h.ok(added && before > 2000 && after > before / 2 && (await rows.first().getAttribute('data-id')) === id(LONG),
    'a run that starts while the list is scrolled down is added at the top, the scroll kept', `${added} ${before} -> ${after}`);
  await context.close();
}

await h.run(async () => {
  const base = h.makeOutputRoot('ui-browser');
  const state = path.join(base, 'state');
  const out = path.join(base, 'out');
  fs.mkdirSync(state, { mode: 0o700 });
  const env = h.serverEnv(out, { DEMESNE_STATE_DIR: state, DEMESNE_POOL: '0' });

  const url = await startUi(env);
  const origin = new URL(url).origin;

  // Two runs over MCP: one that ends (markup on stdout), one background job
  // that prints a line every 200 ms until it is cancelled.
  const client = new Client({ name: 'demesne-e2e-ui-browser', version: '0.0.0' });
  await h.within(60_000, 'connect', client.connect(
    new StdioClientTransport({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' }), { timeout: 30_000 }));
  const done = await client.callTool({
    name: 'sandbox_script',
    arguments: {
      command: `echo 'hello from the sandbox'; echo '${MARKUP}'; echo ${PNG_B64} | base64 -d >/out/dot.png; ` +
        `printf '%s' '${SCRIPT_TEXT}' >'/out/${SCRIPT_NAME}'`,
      egress: 'none',
    },
  }, { timeout: CALL_TIMEOUT_MS });
  const runId = done?.structuredContent?.run_id;
  const job = await client.callTool({
    name: 'sandbox_script',
    arguments: { command: 'for i in $(seq 1 1500); do echo "tick $i"; sleep 0.2; done', background: true, egress: 'none' },
  }, { timeout: CALL_TIMEOUT_MS });
  const jobId = job?.structuredContent?.job_id;

  const browser = await playwright.chromium.launch({
    executablePath: CHROMIUM,
    // As root chromium's own sandbox cannot start; the page is ours.
    args: process.getuid() === 0 ? ['--no-sandbox'] : [],
  });
  // The persistent sandboxes made here, destroyed at the end whatever
  // happened (a check that throws must not leave them running).
  const boxes = [];
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 640 } });
    const page = await context.newPage();
    const dialogs = [];
    page.on('dialog', (d) => { dialogs.push(`${d.type()}: ${d.message()}`); d.type() === 'confirm' ? d.accept() : d.dismiss(); });
    const shot = async (name) => { if (SHOTS) await page.screenshot({ path: path.join(SHOTS, name) }); };

    // 1: the login URL lands on the page, signed in.
    await page.goto(url);
    h.ok(new URL(page.url()).pathname === '/ui/', 'the login URL redirects the browser to /ui/', page.url());
    // The code works once: another browser with the same URL is refused.
    const other = await browser.newContext();
    const again = await other.request.get(url, { maxRedirects: 0 });
    const otherPage = await other.newPage();
    await otherPage.goto(origin + '/ui/');
    h.ok(again.status() === 401 && (await otherPage.locator('body').textContent()).length > 0 &&
      (await otherPage.locator('#runs tbody tr').count()) === 0,
    'the login URL works once: used again it is refused (401) and that browser sees no run', `${again.status()}`);
    await other.close();

    // 2: the finished run is in the list, succeeded, its command as text.
    const row = page.locator('#runs tbody tr', { hasText: runId ?? 'no run id' });
    await row.waitFor({ timeout: 20_000 });
    await until(20_000, 'the run succeeded in the list', async () => (await row.locator('td.status').textContent()) === 'succeeded');
    h.ok((await row.locator('td.command').textContent()).includes(MARKUP), 'the run list renders the run, succeeded, its command as text');

    // 3-4: its detail opens with its stdout, markup as text.
    await row.click();
    await page.locator('#detail-id', { hasText: runId }).waitFor({ timeout: 10_000 });
    const stdout = page.locator('#detail-stdout');
    await until(10_000, 'the stdout in the detail', async () => (await stdout.textContent()).includes('hello from the sandbox'));
    h.ok((await stdout.textContent()).includes(MARKUP) && (await page.locator('#detail img:not(.file-preview)').count()) === 0,
      'the run\'s detail opens with its stdout, markup shown as text', await stdout.textContent());
    h.equal((await page.locator('#detail-stdout-all').getAttribute('href')), `/ui/api/v1/runs/${runId}/files/stdout.log`,
      'the detail links the whole stdout');
    // An image the run wrote to /out renders; a file named as markup, with
    // markup in it, is shown as text.
    const img = page.locator('#detail-files img.file-preview');
    await img.first().waitFor({ timeout: 10_000 }).catch(() => {});
    const width = await until(10_000, 'the image loaded', async () =>
      (await img.count()) === 1 && (await img.evaluate((e) => e.complete && e.naturalWidth)) || null).catch(() => 0);
    h.ok(width === 1 && (await img.getAttribute('alt')) === 'dot.png', 'an image written to /out renders in the run\'s page',
      `naturalWidth ${width}`);
    const named = page.locator('#detail-files li', { hasText: SCRIPT_NAME });
    const shown = await until(10_000, 'the text file\'s preview', async () =>
      (await named.count()) === 1 && (await named.locator('pre.file-preview').textContent()) === SCRIPT_TEXT).catch(() => false);
    h.ok(shown && (await named.locator('a').textContent()) === SCRIPT_NAME &&
      (await page.locator('#detail-files b, #detail-files script').count()) === 0,
    'a file named <script>.txt and its markup content are shown as text', await named.innerHTML().catch(() => ''));
    await shot('ui-detail.png');

    // 5: the job's tail grows while it runs.
    const jobRow = page.locator('#runs tbody tr.running', { hasText: 'tick' });
    await jobRow.waitFor({ timeout: 30_000 });
    const jobRunId = await jobRow.getAttribute('data-id');
    await jobRow.click();
    await page.locator('#detail-id', { hasText: jobRunId }).waitFor({ timeout: 10_000 });
    const ticks = async () => Math.max(0, ...[...(await stdout.textContent()).matchAll(/tick (\d+)/g)].map((m) => Number(m[1])));
    const first = await until(30_000, 'the job\'s first lines', async () => (await ticks()) || null);
    const later = await until(30_000, 'the tail growing', async () => { const n = await ticks(); return n >= first + 3 ? n : null; });
    h.ok(later > first, 'a running job\'s stdout tail grows in the page', `${first} -> ${later}`);
    await shot('ui-list.png');

    // A cross-site form POST to cancel it (from a page of another origin:
    // no cookie with SameSite=Strict, a foreign Origin) is refused, and the
    // job runs on.
    const foreign = await context.newPage();
    await foreign.setContent(`<form method="post" action="${origin}/ui/api/v1/runs/${encodeURIComponent(jobRunId)}/cancel">` +
      '<button id="go">go</button></form>');
    const [answer] = await Promise.all([foreign.waitForNavigation().catch(() => null), foreign.click('#go')]);
    const status = answer?.status() ?? 0;
    await foreign.close();
    h.ok(status >= 400 && (await page.locator('#runs tbody tr', { hasText: jobRunId }).locator('td.status').textContent()) === 'running' &&
      (await containersOfRun(jobRunId)) === 1, 'a cross-site POST to cancel is refused and the job runs on', `status ${status}`);

    // 6-7: its cancel button ends it; the engine has no container left.
    const held = await containersOfRun(jobRunId);
    await jobRow.locator('button', { hasText: 'cancel' }).click();
    const jobRowAny = page.locator('#runs tbody tr', { hasText: jobRunId });
    await until(30_000, 'the job cancelled in the list', async () => (await jobRowAny.locator('td.status').textContent()) === 'cancelled');
    h.ok(dialogs.some((d) => d.startsWith('confirm:') && d.includes(jobId)) &&
      /cancel/.test(await page.locator('#notice').textContent()), 'the cancel button asks first, then the row shows cancelled',
    `${dialogs} | ${await page.locator('#notice').textContent()}`);
    const gone = await until(30_000, 'the job\'s container gone', async () => (await containersOfRun(jobRunId)) === 0);
    h.ok(held === 1 && gone, 'the engine shows the job\'s container gone', `held ${held}`);

    // 8: no dialog but the confirmation fired (the markup ran nowhere).
    h.ok(dialogs.every((d) => d.startsWith('confirm:')), 'no alert fired from the run\'s output', dialogs.join(' | '));

    // 9-11: a sandbox's preview linked from its page; the link opens what it
    // serves (this browser signed in to the preview with its code first);
    // the destroy button closes it.
    const made = await client.callTool({ name: 'sandbox_create', arguments: { image: 'python', egress: 'none' } },
      { timeout: CALL_TIMEOUT_MS });
    const sbId = made?.structuredContent?.sandbox_id;
    if (sbId) boxes.push(sbId);
    await client.callTool({
      name: 'sandbox_exec',
      arguments: {
        sandbox_id: sbId,
        command: 'mkdir -p /workspace/site && echo "<h1 id=hello>served by the sandbox</h1>" >/workspace/site/index.html && ' +
          '(setsid -f python3 -m http.server 8000 --bind 127.0.0.1 --directory /workspace/site >/dev/null 2>&1 </dev/null) && ' +
          'for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null && break; sleep 0.1; done',
      },
    }, { timeout: CALL_TIMEOUT_MS });
    const exposed = await client.callTool({ name: 'sandbox_expose', arguments: { sandbox_id: sbId, port: 8000 } },
      { timeout: CALL_TIMEOUT_MS });
    const codeUrl = exposed?.structuredContent?.url ?? '';
    const bare = codeUrl.split('?')[0];
    const sbRow = page.locator('#runs tbody tr', { hasText: sbId ?? 'no sandbox id' });
    await sbRow.waitFor({ timeout: 60_000 });
    await sbRow.click();
    const link = page.locator('#detail-previews a');
    await link.first().waitFor({ timeout: 30_000 });
    h.ok((await link.count()) === 1 && (await link.getAttribute('href')) === bare && /^http:\/\/127\.0\.0\.1:\d+\/$/.test(bare),
      'a sandbox\'s page links its open preview (the URL without its code)', `${await link.getAttribute('href')} ${bare}`);
    const signIn = await context.newPage();
    await signIn.goto(codeUrl);
    await signIn.close();
    const [preview] = await Promise.all([context.waitForEvent('page'), link.click()]);
    await preview.locator('#hello').waitFor({ timeout: 30_000 });
    h.equal(await preview.locator('#hello').textContent(), 'served by the sandbox', 'the link opens what the sandbox serves');
    await preview.close();
    await sbRow.locator('button', { hasText: 'destroy' }).click();
    await until(30_000, 'the sandbox destroyed in the list', async () => (await sbRow.locator('td.status').textContent()) === 'destroyed');
    const closed = await fetch(bare).then((r) => `answered ${r.status}`, () => 'refused');
    // The list's row and the detail's previews are redrawn by separate
    // refreshes: the previews may go a refresh after the row's status.
    const hidden = await until(30_000, 'the preview gone from the page',
      () => page.locator('#detail-previews').isHidden()).catch(() => false);
    h.ok(closed === 'refused' && hidden,
      'after the destroy button the preview is gone from the page and its port refuses', `${closed}, hidden ${hidden}`);

    // An orchestration tree of three levels, made through the nested
    // endpoints (a nested sandbox, a nested sandbox made inside it, a script
    // run inside that), drawn as a tree: each row right below its parent,
    // one step further in.
    const nestedCall = (call) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: call });
    const top = await client.callTool({ name: 'sandbox_create', arguments: { image: 'base', nested: true, egress: 'none' } },
      { timeout: CALL_TIMEOUT_MS });
    const topId = top?.structuredContent?.sandbox_id;
    if (topId) boxes.push(topId);
    const inside = async (box, call) => {
      const r = await client.callTool({ name: 'sandbox_exec', arguments: { sandbox_id: box, command: NESTED_CALL, stdin: nestedCall(call) } },
        { timeout: CALL_TIMEOUT_MS });
      if (r?.structuredContent?.stderr) h.diag(`nested call: ${r.structuredContent.stderr}`);
      try { return JSON.parse(r?.structuredContent?.stdout ?? '')?.result; } catch { return { raw: r }; }
    };
    const mid = await inside(topId, { name: 'sandbox_create', arguments: { image: 'base', nested: true } });
    const midId = mid?.structuredContent?.sandbox_id;
    const leafOut = await inside(topId, { name: 'sandbox_exec', arguments: { sandbox_id: midId, command: NESTED_CALL,
      stdin: nestedCall({ name: 'sandbox_script', arguments: { command: 'echo leaf' } }) } });
    let leafId;
    try { leafId = JSON.parse(leafOut?.structuredContent?.stdout ?? '')?.result?.structuredContent?.run_id; } catch { /* below */ }
    const treeRows = async () => page.locator('#runs tbody tr').evaluateAll((trs) =>
      trs.map((tr) => ({ id: tr.dataset.id, depth: Number(tr.dataset.depth), parent: tr.dataset.parent })));
    const drawn = await until(30_000, 'the three levels in the list', async () => {
      const all = await treeRows();
      const at = [topId, midId, leafId].map((id) => all.findIndex((r) => r.id === id));
      return at.every((i) => i >= 0) ? { all, at } : null;
    }).catch(() => null);
    const [ti, mi, li] = drawn?.at ?? [-1, -1, -1];
    const rowsOf = drawn?.all ?? [];
    h.ok(typeof leafId === 'string' && mi === ti + 1 && li === mi + 1 && rowsOf[ti].depth === 0 && rowsOf[mi].depth === 1 &&
      rowsOf[li].depth === 2 && rowsOf[mi].parent === topId && rowsOf[li].parent === midId,
    'a tree of three levels made through the nested endpoints is drawn as a tree',
    `${topId} ${midId} ${leafId}: ${JSON.stringify(rowsOf.slice(Math.max(0, ti), ti + 3))} ${JSON.stringify(leafOut)?.slice(0, 400)}`);
    await shot('ui-tree.png');
    await client.callTool({ name: 'sandbox_destroy', arguments: { sandbox_id: topId } }, { timeout: CALL_TIMEOUT_MS });

    // 12: the session ended (logged out), a click renders why nothing opens.
    const bye = await page.evaluate(async () => (await fetch('/ui/api/v1/logout', { method: 'POST' })).status);
    await row.click();
    const error = page.locator('#error');
    await error.waitFor({ state: 'visible', timeout: 10_000 });
    const text = await error.textContent();
    h.ok(bye === 204 && /401/.test(text) && /not signed in/.test(text), 'a refused request renders its error in the page',
      `${bye} ${text}`);
    await shot('ui-error.png');

    await longList(browser, base, env);
  } finally {
    await browser.close();
    for (const id of boxes) {
      await client.callTool({ name: 'sandbox_destroy', arguments: { sandbox_id: id } }, { timeout: CALL_TIMEOUT_MS }).catch(() => {});
    }
    await client.close();
  }
});
