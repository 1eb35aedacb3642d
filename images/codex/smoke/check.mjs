// SPDX-License-Identifier: MIT
// Host-side check of the codex smoke test: the pinned version, exactly.
import { readFile } from "node:fs/promises";
import { join } from "node:path";

export default async function check({ outDir, stdout, assert }) {
  const version = (await readFile(join(outDir, "version.txt"), "utf8")).trim();
  assert.equal(version, "codex-cli 0.171.0");
  assert.match(stdout, /^ok: .*--version: /m);
}
