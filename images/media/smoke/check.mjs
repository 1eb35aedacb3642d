// SPDX-License-Identifier: MIT
// Host-side check of the media smoke test's outputs: magic bytes of every
// file, sizes where they are cheap to read, and the PNGs decoded.
import { readFile } from "node:fs/promises";
import { join } from "node:path";

export default async function check({ outDir, png, assert }) {
  const read = (name) => readFile(join(outDir, name));
  const magic = (buf, at, text) =>
    buf.toString("latin1", at, at + text.length) === text;

  const mp4 = await read("test.mp4");
  assert.ok(magic(mp4, 4, "ftyp"), "test.mp4 is ISO BMFF");

  const gif = await read("test.gif");
  assert.ok(magic(gif, 0, "GIF89a"), "test.gif is a GIF89a");
  assert.deepEqual([gif.readUInt16LE(6), gif.readUInt16LE(8)], [320, 240]);

  const frame = png.decodePng(await read("frame.png"));
  assert.deepEqual([frame.width, frame.height], [320, 240]);
  assert.ok(png.distinctColors(frame, 64) >= 16, "frame.png is a colourful test pattern");

  const im = png.decodePng(await read("im.png"));
  assert.deepEqual([im.width, im.height], [120, 160], "ImageMagick resized and rotated");
  assert.ok(png.distinctColors(im, 64) >= 16);

  const vips = png.decodePng(await read("vips.png"));
  assert.deepEqual([vips.width, vips.height], [80, 60], "vips resized to a quarter");
  assert.ok(png.distinctColors(vips, 64) >= 16);

  for (const name of ["im.jpg", "vips-thumb.jpg"]) {
    assert.deepEqual([...(await read(name)).subarray(0, 3)], [0xff, 0xd8, 0xff], `${name} is a JPEG`);
  }
  const webp = await read("vips.webp");
  assert.ok(magic(webp, 0, "RIFF") && magic(webp, 8, "WEBP"), "vips.webp is a WebP");

  const wav = await read("tone.wav");
  assert.ok(magic(wav, 0, "RIFF") && magic(wav, 8, "WAVE"), "tone.wav is a WAV");
  assert.ok(wav.length > 88000, "tone.wav holds 1 s of 16-bit 44.1 kHz mono");
  assert.ok(magic(await read("tone.flac"), 0, "fLaC"), "tone.flac is FLAC");
  for (const name of ["tone.mp3", "tone-sox.mp3"]) {
    const mp3 = await read(name);
    assert.ok(magic(mp3, 0, "ID3") || (mp3[0] === 0xff && (mp3[1] & 0xe0) === 0xe0), `${name} is an MP3`);
  }
  const ogg = await read("tone.ogg");
  assert.ok(magic(ogg, 0, "OggS") && ogg.includes("vorbis"), "tone.ogg is Ogg Vorbis");
  const opus = await read("tone.opus");
  assert.ok(magic(opus, 0, "OggS") && opus.includes("OpusHead"), "tone.opus is Ogg Opus");
}
