#!/usr/bin/env node
// A web app's preview with hot reload, as docs/how-to/preview-a-web-app.md
// tells it: the webgamedev image's Phaser + Vite template under Vite's dev
// server in a sandbox at egress none (everything it needs is in the image),
// its port exposed with sandbox_expose, opened in Debian's chromium through
// playwright-core. The code URL signs the browser in; the game's canvas
// renders (Phaser's scene ready, 800x600, not blank); Vite's HMR WebSocket
// connects through the preview's port; a stylesheet edited in the sandbox
// with sandbox_exec changes the page without a reload (the page's own state
// survives, an "update" came over that WebSocket); after sandbox_destroy
// the preview's port refuses connections.
//
// It needs the webgamedev image, which setup.sh does not build: `make
// check-images` runs it after building every image. With UI_SCREENSHOTS=DIR
// it leaves the game's screenshot there (docs/images).
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/preview-vite.mjs

import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const SHOTS = process.env.UI_SCREENSHOTS;
const PLANNED = 5;
h.plan(PLANNED);

let playwright;
try {
  playwright = await import('playwright-core');
} catch (err) {
  h.failRemaining(`playwright-core is not installed in tests/e2e/node_modules (run ./setup.sh --test-deps): ${err.message}`);
}
if (!fs.existsSync(CHROMIUM)) h.failRemaining(`no chromium at ${CHROMIUM}: install Debian's chromium, or set CHROMIUM`);
if (!playwright || !fs.existsSync(CHROMIUM)) {
  process.stdout.write(`e2e: 0 passed, ${PLANNED} failed\n`);
  process.exit(1);
}

const { Client } = await import('@modelcontextprotocol/client');
const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
const { CALL_TIMEOUT_MS, until } = await import('./lib/checks.mjs');
const { decodePng, distinctColors } = await import('./lib/png.mjs');

const PORT = 5173;
// The template's copy gets a stylesheet imported by its entry module: Vite
// swaps an imported stylesheet in place (a module that accepts its own
// update), where an edit of index.html or main.ts reloads the whole page.
const START = 'cp -a /opt/game-template game && cd game && ' +
  "printf 'html body { background: rgb(17, 17, 17); }\\n' >src/hmr.css && sed -i \"1i import './hmr.css';\" src/main.ts && " +
  `(setsid -f node_modules/.bin/vite --host 127.0.0.1 --port ${PORT} --strictPort >/workspace/vite.log 2>&1 </dev/null) && ` +
  `for i in $(seq 300); do curl -s -o /dev/null http://127.0.0.1:${PORT}/ && break; sleep 0.1; done; cat /workspace/vite.log`;

/** Whether a TCP connection to 127.0.0.1:port is refused. */
const refused = (port) => new Promise((resolve) => {
  const s = net.connect({ host: '127.0.0.1', port });
  s.on('connect', () => { s.destroy(); resolve(false); });
  s.on('error', (e) => resolve(e.code === 'ECONNREFUSED'));
});

await h.run(async () => {
  const base = h.makeOutputRoot('preview-vite');
  const env = h.serverEnv(path.join(base, 'out'), { DEMESNE_POOL: '0' });
  const client = new Client({ name: 'demesne-e2e-preview-vite', version: '0.0.0' });
  await h.within(60_000, 'connect', client.connect(
    new StdioClientTransport({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' }), { timeout: 30_000 }));
  const call = (name, args) => client.callTool({ name, arguments: args }, { timeout: CALL_TIMEOUT_MS });
  const browser = await playwright.chromium.launch({
    executablePath: CHROMIUM,
    // As root chromium's own sandbox cannot start. WebGL without a GPU:
    // SwiftShader, asked for as images/webgamedev/smoke/play.mjs does.
    args: [...(process.getuid() === 0 ? ['--no-sandbox'] : []), '--use-angle=swiftshader', '--enable-unsafe-swiftshader'],
  });
  let box;
  try {
    // 1: the dev server runs in the sandbox, on its own loopback.
    const made = await call('sandbox_create', { image: 'webgamedev', egress: 'none' });
    box = made.structuredContent?.sandbox_id;
    const started = await call('sandbox_exec', { sandbox_id: box, workdir: '/workspace', command: START });
    h.ok(!made.isError && started.structuredContent?.exit_code === 0 && /ready in/.test(started.structuredContent?.stdout),
      `Vite's dev server runs in a webgamedev sandbox (${box}) at egress none`, `${h.firstText(made)} | ${h.firstText(started)}`);

    // 2: through the preview the browser shows the game's canvas.
    const exposed = await call('sandbox_expose', { sandbox_id: box, port: PORT });
    const url = exposed.structuredContent?.url ?? 'http://127.0.0.1:1/';
    const previewPort = Number(new URL(url).port);
    const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    // Vite's HMR WebSocket, and what came over it.
    const sockets = [];
    page.on('websocket', (ws) => {
      const seen = { url: ws.url(), frames: [] };
      sockets.push(seen);
      ws.on('framereceived', (f) => seen.frames.push(String(f.payload)));
    });
    await page.goto(url);
    const ready = await page.waitForFunction(() => window.game?.registry?.get('ready') === true, null, { timeout: 60_000 })
      .then(() => true, () => false);
    const shot = ready ? decodePng(await page.locator('#game canvas').screenshot()) : { width: 0, height: 0 };
    const colours = ready ? distinctColors(shot, 64) : 0;
    h.ok(ready && new URL(page.url()).port === String(previewPort) && shot.width === 800 && shot.height === 600 &&
      colours >= 4 && errors.length === 0,
    'the preview URL signs the browser in and shows the game\'s canvas (800x600, not blank, no errors)',
    `ready ${ready}, ${page.url()}, ${shot.width}x${shot.height}, ${colours} colours, errors: ${errors.join(' | ')}`);
    if (SHOTS && ready) await page.screenshot({ path: path.join(SHOTS, 'preview-game.png') });

    // 3: the HMR WebSocket goes through the preview's port.
    const hmr = await until(30_000, 'the HMR WebSocket connected', async () =>
      sockets.find((s) => s.frames.some((f) => /"type":"connected"/.test(f))) ?? null).catch(() => null);
    h.ok(hmr && new URL(hmr.url).port === String(previewPort) && new URL(hmr.url).hostname === '127.0.0.1',
      'Vite\'s HMR WebSocket connects through the preview', JSON.stringify(sockets));

    // 4: an edit in the sandbox changes the page in place.
    await page.evaluate(() => { window.demesneNotReloaded = true; });
    const background = () => page.evaluate(() => getComputedStyle(document.body).backgroundColor);
    const before = await background();
    const edit = await call('sandbox_exec', { sandbox_id: box, command: "sed -i 's/17, 17, 17/34, 51, 85/' /workspace/game/src/hmr.css" });
    const after = await until(30_000, 'the new background', async () => {
      const now = await background();
      return now === 'rgb(34, 51, 85)' ? now : null;
    }).catch(() => background());
    const kept = await page.evaluate(() => window.demesneNotReloaded === true);
    h.ok(edit.structuredContent?.exit_code === 0 && before === 'rgb(17, 17, 17)' && after === 'rgb(34, 51, 85)' && kept &&
      hmr?.frames.some((f) => /"type":"update"/.test(f) && /hmr\.css/.test(f)),
    'a stylesheet edited in the sandbox updates the page without a reload (an HMR update through the preview)',
    `${before} -> ${after}, state kept ${kept}, frames: ${JSON.stringify(hmr?.frames)}`);

    // 5: the preview closes with the sandbox.
    const destroyed = await call('sandbox_destroy', { sandbox_id: box });
    box = undefined;
    h.ok(!destroyed.isError && previewPort > 0 && (await refused(previewPort)),
      'after sandbox_destroy the preview\'s port refuses connections', h.firstText(destroyed));
  } finally {
    await browser.close();
    if (box) await call('sandbox_destroy', { sandbox_id: box }).catch(() => {});
    await client.close();
  }
});
