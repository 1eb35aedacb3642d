// A small PNG reader for the image smoke checks: enough to tell a real
// screenshot or plot from a blank or truncated one, with no dependency.
// Supports 8-bit grey, grey+alpha, RGB and RGBA, non-interlaced (what
// Chromium, matplotlib, ImageMagick and vips write by default); anything
// else throws with the reason.

import zlib from 'node:zlib';

const MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const CHANNELS = { 0: 1, 2: 3, 4: 2, 6: 4 };

/** The width and height from the IHDR chunk only (any PNG). */
export function pngSize(buf) {
  if (buf.length < 24 || !buf.subarray(0, 8).equals(MAGIC)) throw new Error('not a PNG (bad magic)');
  if (buf.toString('latin1', 12, 16) !== 'IHDR') throw new Error('not a PNG (no IHDR first)');
  return { width: buf.readUInt32BE(16), height: buf.readUInt32BE(20) };
}

/** Decode to { width, height, channels, data } with data = rows of pixels, no filter bytes. */
export function decodePng(buf) {
  const { width, height } = pngSize(buf);
  const depth = buf[24];
  const colour = buf[25];
  const interlace = buf[28];
  const channels = CHANNELS[colour];
  if (depth !== 8 || !channels) throw new Error(`unsupported PNG: bit depth ${depth}, colour type ${colour}`);
  if (interlace !== 0) throw new Error('unsupported PNG: interlaced');
  const idat = [];
  let off = 8;
  let ended = false;
  while (off + 12 <= buf.length) {
    const len = buf.readUInt32BE(off);
    const type = buf.toString('latin1', off + 4, off + 8);
    if (off + 12 + len > buf.length) throw new Error(`truncated PNG: chunk ${type} runs past the end`);
    if (type === 'IDAT') idat.push(buf.subarray(off + 8, off + 8 + len));
    if (type === 'IEND') { ended = true; break; }
    off += 12 + len;
  }
  if (!ended) throw new Error('truncated PNG: no IEND chunk');
  const raw = zlib.inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  if (raw.length < height * (stride + 1)) throw new Error('truncated PNG: too little image data');
  const data = Buffer.alloc(height * stride);
  for (let y = 0; y < height; y += 1) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    const out = data.subarray(y * stride, (y + 1) * stride);
    const prev = y > 0 ? data.subarray((y - 1) * stride, y * stride) : Buffer.alloc(stride);
    for (let x = 0; x < stride; x += 1) {
      const a = x >= channels ? out[x - channels] : 0;
      const b = prev[x];
      const c = x >= channels ? prev[x - channels] : 0;
      let v;
      switch (filter) {
        case 0: v = line[x]; break;
        case 1: v = line[x] + a; break;
        case 2: v = line[x] + b; break;
        case 3: v = line[x] + ((a + b) >> 1); break;
        case 4: {
          const p = a + b - c;
          const pa = Math.abs(p - a);
          const pb = Math.abs(p - b);
          const pc = Math.abs(p - c);
          v = line[x] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
          break;
        }
        default: throw new Error(`bad PNG filter type ${filter} on row ${y}`);
      }
      out[x] = v & 0xff;
    }
  }
  return { width, height, channels, data };
}

/** How many distinct colours the image has, counting up to `max` (then stops). */
export function distinctColors(img, max = 1024) {
  const seen = new Set();
  const { channels, data } = img;
  for (let i = 0; i < data.length && seen.size < max; i += channels) {
    let key = 0;
    for (let k = 0; k < channels; k += 1) key = key * 256 + data[i + k];
    seen.add(key);
  }
  return seen.size;
}
