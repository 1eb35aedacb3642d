// SPDX-License-Identifier: MIT
// Host-side check of the go smoke test's outputs.
import { readFile } from "node:fs/promises";
import { join } from "node:path";

export default async function check({ outDir, assert }) {
  const bin = await readFile(join(outDir, "hello"));
  assert.deepEqual([...bin.subarray(0, 4)], [0x7f, 0x45, 0x4c, 0x46], "hello is an ELF file");
  const out = JSON.parse(await readFile(join(outDir, "hello.json"), "utf8"));
  assert.equal(out.counts.the, 3);
  assert.equal(out.words.length, 9);
  assert.match(out.sha256, /^[0-9a-f]{64}$/);
}
