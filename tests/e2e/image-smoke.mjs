#!/usr/bin/env node
// The images' smoke tests, each run the way a user runs work: through the
// sandbox_script tool of a real server, with egress none. For every image
// named on the command line (default: every folder of images/ with a
// smoke/run.sh), the server runs `bash /in/smoke/run.sh` in a fresh sandbox
// with the image's smoke/ folder mounted read-only at /in/smoke and /out as
// the working directory; then smoke/check.mjs, when there is one, checks the
// files the script left in the host output directory (PNG sizes, not blank).
// An image that is not built yet is built on first use by the server, and
// then the test also checks that the client heard about it in progress
// notifications.
//
//   DEMESNE=/abs/src/demesne DEMESNE_IMAGES_DIR=/abs/images node tests/e2e/image-smoke.mjs [NAME...]

import cp from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import assert from 'node:assert/strict';
import { pathToFileURL } from 'node:url';

import * as h from './lib/harness.mjs';
import * as png from './lib/png.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);
const IMAGES = path.resolve(process.env.DEMESNE_IMAGES_DIR ?? path.join(h.E2E_DIR, '..', '..', 'images'));

const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');

// The images in build order, as build.sh knows them, with their state.
const listing = cp.execFileSync('bash', [path.join(IMAGES, 'build.sh'), '--list'], { encoding: 'utf8' })
  .trim().split('\n').map((l) => l.split('\t'));
const known = listing.map(([name]) => name);
const state = Object.fromEntries(listing.map(([name, , , st]) => [name, st]));
const wanted = process.argv.slice(2).length ? process.argv.slice(2)
  : known.filter((n) => fs.existsSync(path.join(IMAGES, n, 'smoke', 'run.sh')));
for (const n of wanted) {
  if (!fs.existsSync(path.join(IMAGES, n, 'smoke', 'run.sh'))) {
    process.stdout.write(`Bail out! no smoke test for image '${n}' (images/${n}/smoke/run.sh)\n`);
    process.exit(1);
  }
}
const hasCheck = (n) => fs.existsSync(path.join(IMAGES, n, 'smoke', 'check.mjs'));
const missing = (n) => state[n] === 'missing';
h.plan(wanted.reduce((sum, n) => sum + 1 + (hasCheck(n) ? 1 : 0) + (missing(n) ? 1 : 0), 0));

await h.run(async () => {
  const root = h.makeOutputRoot('images');
  const env = h.serverEnv(root, { DEMESNE_ALLOWED_PATHS: IMAGES, DEMESNE_IMAGES_DIR: IMAGES });
  const client = new Client({ name: 'demesne-image-smoke', version: '0.0.0' });
  await h.within(60_000, 'connect', client.connect(
    new StdioClientTransport({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' })));

  for (const name of wanted) {
    const notes = [];
    const t0 = Date.now();
    let res;
    try {
      res = await client.callTool({
        name: 'sandbox_script',
        arguments: {
          image: name,
          egress: 'none',
          command: 'bash /in/smoke/run.sh',
          directories: [path.join(IMAGES, name, 'smoke')],
          timeout_seconds: 1800,
        },
      }, undefined, {
        timeout: 3_600_000,
        resetTimeoutOnProgress: true,
        onprogress: (p) => { if (p.message) notes.push(p.message); },
      });
    } catch (err) {
      h.fail(`${name}: the smoke script ran through sandbox_script`, err);
      if (hasCheck(name)) h.fail(`${name}: host-side checks`, 'not run');
      if (missing(name)) h.fail(`${name}: built on first use`, 'not run');
      continue;
    }
    const sc = res.structuredContent ?? {};
    const secs = ((Date.now() - t0) / 1000).toFixed(1);
    if (missing(name)) {
      h.ok(notes.some((m) => /building/.test(m)) && !res.isError,
        `${name}: built on first use, with progress notifications`, notes.slice(0, 5).join('\n'));
    }
    const good = !res.isError && sc.exit_code === 0;
    h.ok(good, `${name}: the smoke script passes in a sandbox at egress none (${secs} s)`,
      res.isError ? h.firstText(res) : `exit ${sc.exit_code}\n--- stdout\n${sc.stdout}\n--- stderr\n${sc.stderr}`);
    if (good) h.diag(`${name}:\n${String(sc.stdout).trimEnd()}`);
    if (hasCheck(name)) {
      try {
        if (!good) throw new Error('the smoke script failed');
        const mod = await import(pathToFileURL(path.join(IMAGES, name, 'smoke', 'check.mjs')).href);
        await mod.default({ outDir: sc.output_dir, stdout: sc.stdout, png, assert });
        h.pass(`${name}: the files it wrote check out on the host`);
      } catch (err) {
        h.fail(`${name}: the files it wrote check out on the host`, err);
      }
    }
  }
  await client.close();
});
