// Host-side check of the twine image's smoke output: each compiled story is
// a whole Twine 2 HTML file naming the format it was built with.
import fs from 'node:fs';
import path from 'node:path';

export default async function check({ outDir, stdout, assert }) {
  for (const [file, format] of [['story-harlowe.html', 'Harlowe'], ['story-snowman.html', 'Snowman'], ['story-extwee.html', 'Harlowe']]) {
    const html = fs.readFileSync(path.join(outDir, file), 'utf8');
    assert.match(html, new RegExp(`<tw-storydata [^>]*format="${format}"`), `${file}: no ${format} story data`);
    assert.match(html, /<tw-passagedata [^>]*name="Inside"/, `${file}: second passage missing`);
    assert.ok(html.length > 50_000, `${file}: ${html.length} bytes, too small to carry the story format`);
  }
  assert.equal(stdout.match(/^playtest .*saw "the second passage has been reached"$/gm)?.length, 2);
}
