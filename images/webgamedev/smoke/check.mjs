// Host-side check of the webgamedev image's smoke output: the build left a
// dist/ with an index.html and a bundle, and the game's canvas screenshot is
// 800x600 and not blank (background, ball, text).
import fs from 'node:fs';
import path from 'node:path';

export default async function check({ outDir, stdout, png, assert }) {
  const index = fs.readFileSync(path.join(outDir, 'dist', 'index.html'), 'utf8');
  assert.match(index, /<script type="module"[^>]*src="\.\/assets\/[^"]+\.js"/);
  const img = png.decodePng(fs.readFileSync(path.join(outDir, 'game.png')));
  assert.equal(img.width, 800);
  assert.equal(img.height, 600);
  const colours = png.distinctColors(img, 64);
  assert.ok(colours >= 4, `game screenshot looks blank: ${colours} distinct colours`);
  assert.match(stdout, /no console errors/);
}
