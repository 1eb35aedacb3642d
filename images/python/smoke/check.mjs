// SPDX-License-Identifier: MIT
// Host-side check of the python smoke test: /out/smoke.png is a real
// 600x400 plot (figsize 6x4 at 100 dpi), not blank.
import fs from 'node:fs';
import path from 'node:path';

export default async function check({ outDir, png, assert }) {
  const img = png.decodePng(fs.readFileSync(path.join(outDir, 'smoke.png')));
  assert.equal(`${img.width}x${img.height}`, '600x400', 'plot size');
  assert.ok(png.distinctColors(img) > 20, 'the plot has data and text, not one colour');
}
