#!/usr/bin/env node
// Building an image on first use, as an MCP client sees it: a sandbox_script
// call that names an image the engine does not have makes the server run the
// image build script, forward its lines as progress notifications, and then
// run the command; a build that fails gives a tool error that names the step,
// and leaves no container behind.
//
// The engine is real; the build script is a stand-in (DEMESNE_IMAGES_DIR) that
// "builds" by tagging the real base image under a repository of this test's
// own (DEMESNE_IMAGE_REPO), so the test takes seconds, not the minutes of a
// real build. The real build script runs in `make check-images`.
//
//   DEMESNE=/abs/src/demesne node tests/e2e/client-images.mjs

import cp from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);
const ENGINE = process.env.DEMESNE_ENGINE ?? 'podman';
const REPO = `localhost/demesne-e2e-${process.pid}`;
const BASE = process.env.DEMESNE_TEST_BASE_REF ?? 'localhost/demesne/base:latest';

const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport } = await import('@modelcontextprotocol/sdk/client/stdio.js');

const engine = (...args) => cp.spawnSync(ENGINE, args, { encoding: 'utf8' });
const containersOf = (ref) => engine('ps', '-a', '--filter', `ancestor=${ref}`, '--format', '{{.ID}}').stdout.trim();

h.plan(8);

await h.run(async () => {
  const root = h.makeOutputRoot('images');
  const fake = path.join(root, 'images');
  fs.mkdirSync(fake);
  fs.writeFileSync(path.join(fake, 'build.sh'), `#!/usr/bin/env bash
# Stand-in for images/build.sh: says what it does, then tags the real base.
[ "$1" = --list ] && exit 0
echo "images: $1: building $DEMESNE_IMAGE_REPO/$1:latest (stand-in)"
sleep 1
echo "images: $1: second step"
if [ -e "${fake}/fail" ]; then
  echo "images: error: $1: step 'apt-get install' failed (exit 100)" >&2
  exit 1
fi
"$DEMESNE_ENGINE" tag ${BASE} "$DEMESNE_IMAGE_REPO/$1:latest"
echo "images: $1: built"
`);
  fs.writeFileSync(path.join(fake, 'fail'), '');
  const env = h.serverEnv(root, { DEMESNE_IMAGES_DIR: fake, DEMESNE_IMAGE_REPO: REPO });
  const client = new Client({ name: 'demesne-e2e-images', version: '0.0.0' });
  await h.within(60_000, 'connect', client.connect(
    new StdioClientTransport({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' })));
  const ref = `${REPO}/base:latest`;
  const script = async (command) => {
    const notes = [];
    const res = await client.callTool({
      name: 'sandbox_script', arguments: { image: 'base', egress: 'none', command },
    }, undefined, { timeout: 120_000, onprogress: (p) => notes.push(p.message ?? '') });
    return { res, notes };
  };

  try {
    // 1-3: the build fails: a tool error naming the failed step; no image, no container.
    let { res, notes } = await script('echo never');
    h.ok(res.isError && /building it failed/.test(h.firstText(res)) &&
      /step 'apt-get install' failed/.test(h.firstText(res)),
    'a failed first-use build is a tool error naming the step', h.firstText(res));
    h.ok(notes.some((m) => /not built yet: building it/.test(m)),
      'the client heard that the image was being built', notes.join('\n'));
    const left = fs.readdirSync(root).filter((n) => n !== 'images');
    h.ok(engine('image', 'exists', ref).status !== 0 && containersOf(ref) === '' && left.length === 0,
      'nothing is left of the failed attempt: no image, container or output directory', left.join(' '));

    // 4-6: the build works: progress carries its lines, then the command runs.
    fs.rmSync(path.join(fake, 'fail'));
    ({ res, notes } = await script('cat /etc/debian_version; echo built-on-first-use'));
    h.ok(!res.isError && res.structuredContent?.exit_code === 0 &&
      /built-on-first-use/.test(res.structuredContent?.stdout ?? ''),
    'the command runs once the image is built', h.firstText(res));
    h.ok(notes.some((m) => /building .*stand-in|second step/.test(m)),
      'progress notifications carried the build script\'s lines', notes.join('\n'));
    h.equal(engine('image', 'exists', ref).status, 0, 'the engine has the image now');

    // 7-8: a second call does not build again.
    ({ res, notes } = await script('echo again'));
    h.ok(!res.isError && res.structuredContent?.exit_code === 0, 'a second call runs at once', h.firstText(res));
    h.ok(!notes.some((m) => /building/.test(m)), 'and builds nothing', notes.join('\n'));
  } finally {
    await client.close();
    engine('rmi', ref);
  }
});
