// Load a served game in headless Chromium, wait for its scene, fail on any
// console error, check the canvas and save a screenshot of it.
//   node play.mjs URL OUT.png
import { chromium } from 'playwright-core';

const [url, out] = process.argv.slice(2);
// WebGL with no GPU: ask for SwiftShader explicitly (Chromium only allows
// it when asked); Phaser.AUTO would fall back to Canvas should WebGL fail.
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM_PATH,
  args: ['--no-sandbox', '--use-angle=swiftshader', '--enable-unsafe-swiftshader'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 700 } });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => window.game?.registry?.get('ready') === true, null, { timeout: 20000 });
  await page.waitForTimeout(500);
  const info = await page.evaluate(() => ({
    canvases: document.querySelectorAll('canvas').length,
    renderer: window.game.config.renderType === 2 ? 'WebGL' : window.game.config.renderType === 1 ? 'Canvas' : String(window.game.config.renderType),
    size: `${window.game.canvas.width}x${window.game.canvas.height}`,
  }));
  if (info.canvases < 1) throw new Error('no canvas in the page');
  await page.locator('canvas').first().screenshot({ path: out });
  if (errors.length) throw new Error(`console errors: ${errors.join(' | ')}`);
  console.log(`game: ${info.canvases} canvas, ${info.size}, ${info.renderer} renderer, no console errors; screenshot ${out}`);
} finally {
  await browser.close();
}
