// Host-side check of the browser image's smoke output: the screenshot has
// the viewport's size and shows the component (coloured boxes and text), not
// a blank page.
import fs from 'node:fs';
import path from 'node:path';

export default async function check({ outDir, stdout, png, assert }) {
  const img = png.decodePng(fs.readFileSync(path.join(outDir, 'screenshot.png')));
  assert.equal(img.width, 640);
  assert.equal(img.height, 400);
  const colours = png.distinctColors(img, 64);
  assert.ok(colours >= 8, `screenshot looks blank: ${colours} distinct colours`);
  assert.match(stdout, /text "Hello from React"/);
}
