#!/usr/bin/env node
// Snapshots between two principals, through the real npm client over
// Streamable HTTP: `demesne serve --http` with a token file of two names
// (alice, bob). Alice prepares a sandbox, snapshots it and starts another
// from the snapshot; bob cannot see her snapshot in sandbox_list, nor start
// a sandbox from it, nor delete it, nor snapshot or pause her sandbox: each
// refusal is word for word an unknown id's. Alice forks her sandbox into
// two (sandbox_fork): both see its files, each writes only its own; bob's
// fork of her sandbox is an unknown id's answer, and a count out of range
// is refused. The schemas the client lists carry the new tools and fields.
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-snapshot.mjs
//
// Prints TAP; exits 0 only if every test passed, 77 when node_modules is missing.

import fs from 'node:fs';
import path from 'node:path';
import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
process.env.E2E_TIMEOUT_SECONDS ??= '400';

const { CALL_TIMEOUT_MS } = await import('./lib/checks.mjs');
const { serveTwoPrincipals } = await import('./lib/two-principals.mjs');

h.plan(12);

const call = (client, name, args) => client.callTool({ name, arguments: args }, { timeout: CALL_TIMEOUT_MS });

/** The refusal text with the id in it replaced, to compare two answers. */
const shape = (text, id) => text.split(id).join('<id>');

await h.run(async () => {
  const { outputRoot, alice, bob, stop } = await serveTwoPrincipals(DEMESNE, 'snapshot');

  const tools = (await alice.listTools(undefined, { timeout: CALL_TIMEOUT_MS })).tools;
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  h.ok(byName.sandbox_snapshot?.outputSchema?.required?.includes('snapshot_id') &&
    byName.sandbox_pause?.inputSchema?.required?.includes('sandbox_id') && byName.sandbox_resume &&
    byName.sandbox_create?.inputSchema?.properties?.snapshot_id &&
    byName.sandbox_destroy?.inputSchema?.properties?.snapshot_id &&
    byName.sandbox_list?.outputSchema?.properties?.snapshots &&
    byName.sandbox_fork?.inputSchema?.properties?.count?.maximum === 8 &&
    byName.sandbox_fork?.outputSchema?.required?.includes('sandbox_ids'),
  'tools/list: sandbox_snapshot, sandbox_pause, sandbox_resume, sandbox_fork (count up to 8), snapshot_id on create and destroy, snapshots[] on list');

  const made = await call(alice, 'sandbox_create', { image: 'base', egress: 'none' });
  const box = made.structuredContent?.sandbox_id;
  await call(alice, 'sandbox_exec', { sandbox_id: box, command: 'echo prepared > /workspace/p; echo root > /opt/r' });
  const snap = await call(alice, 'sandbox_snapshot', { sandbox_id: box, name: 'alice prepared' });
  const id = snap.structuredContent?.snapshot_id;
  h.ok(!snap.isError && /^snap-[0-9a-f]{12}$/.test(id ?? ''), `alice takes a snapshot (${id})`, h.firstText(snap));

  const from = await call(alice, 'sandbox_create', { snapshot_id: id });
  const box2 = from.structuredContent?.sandbox_id;
  const seen = await call(alice, 'sandbox_exec', { sandbox_id: box2, command: 'cat /workspace/p /opt/r' });
  h.equal(seen.structuredContent?.stdout, 'prepared\nroot\n', 'alice starts a sandbox from it that sees both');

  const aliceList = (await call(alice, 'sandbox_list', {})).structuredContent;
  const bobList = (await call(bob, 'sandbox_list', {})).structuredContent;
  h.ok(aliceList?.snapshots?.some((s) => s.snapshot_id === id && s.name === 'alice prepared' && s.source === box) &&
    Array.isArray(bobList?.snapshots) && !bobList.snapshots.some((s) => s.snapshot_id === id),
  'sandbox_list shows the snapshot to alice only', JSON.stringify({ aliceList, bobList }));

  const unknownSnap = 'snap-000000000000';
  const bobCreate = await call(bob, 'sandbox_create', { snapshot_id: id });
  const bobCreateUnknown = await call(bob, 'sandbox_create', { snapshot_id: unknownSnap });
  h.ok(bobCreate.isError && shape(h.firstText(bobCreate), id) === shape(h.firstText(bobCreateUnknown), unknownSnap),
    'bob cannot start a sandbox from it: the same answer as an unknown snapshot', h.firstText(bobCreate));
  const bobDelete = await call(bob, 'sandbox_destroy', { snapshot_id: id });
  const bobDeleteUnknown = await call(bob, 'sandbox_destroy', { snapshot_id: unknownSnap });
  h.ok(bobDelete.isError && shape(h.firstText(bobDelete), id) === shape(h.firstText(bobDeleteUnknown), unknownSnap),
    'bob cannot delete it: the same answer as an unknown snapshot', h.firstText(bobDelete));
  const unknownBox = 'sbx-000000000000';
  const bobSnap = await call(bob, 'sandbox_snapshot', { sandbox_id: box });
  const bobSnapUnknown = await call(bob, 'sandbox_snapshot', { sandbox_id: unknownBox });
  const bobPause = await call(bob, 'sandbox_pause', { sandbox_id: box });
  h.ok(bobSnap.isError && bobPause.isError &&
    shape(h.firstText(bobSnap), box) === shape(h.firstText(bobSnapUnknown), unknownBox),
  'bob can neither snapshot nor pause alice\'s sandbox: the same answer as an unknown sandbox',
  `${h.firstText(bobSnap)} | ${h.firstText(bobPause)}`);

  const forked = await call(alice, 'sandbox_fork', { sandbox_id: box, count: 2 });
  const forks = forked.structuredContent?.sandbox_ids ?? [];
  const forkSnap = forked.structuredContent?.snapshot_id;
  const reads = [];
  for (const [i, f] of forks.entries()) {
    await call(alice, 'sandbox_exec', { sandbox_id: f, command: `echo ${i} > /workspace/mine` });
  }
  for (const f of forks) {
    reads.push((await call(alice, 'sandbox_exec', { sandbox_id: f, command: 'cat /workspace/p /opt/r /workspace/mine' }))
      .structuredContent?.stdout);
  }
  h.ok(!forked.isError && forks.length === 2 && /^snap-/.test(forkSnap ?? '') &&
    reads[0] === 'prepared\nroot\n0\n' && reads[1] === 'prepared\nroot\n1\n',
  'alice forks her sandbox into two: both see its files, each keeps its own', JSON.stringify({ forked, reads }));
  const bobFork = await call(bob, 'sandbox_fork', { sandbox_id: box, count: 1 });
  const bobForkUnknown = await call(bob, 'sandbox_fork', { sandbox_id: unknownBox, count: 1 });
  h.ok(bobFork.isError && shape(h.firstText(bobFork), box) === shape(h.firstText(bobForkUnknown), unknownBox),
    'bob cannot fork alice\'s sandbox: the same answer as an unknown sandbox', h.firstText(bobFork));
  const nine = await call(alice, 'sandbox_fork', { sandbox_id: box, count: 9 });
  h.ok(nine.isError && /'count' must be between 1 and 8/.test(h.firstText(nine)),
    'a fork of 9 is refused, naming the range', h.firstText(nine));
  for (const f of forks) await call(alice, 'sandbox_destroy', { sandbox_id: f });
  if (forkSnap) await call(alice, 'sandbox_destroy', { snapshot_id: forkSnap });

  const still = await call(alice, 'sandbox_list', {});
  h.ok(still.structuredContent?.snapshots?.some((s) => s.snapshot_id === id), 'alice\'s snapshot is still there');

  for (const b of [box, box2]) await call(alice, 'sandbox_destroy', { sandbox_id: b });
  const gone = await call(alice, 'sandbox_destroy', { snapshot_id: id });
  h.ok(!gone.isError && !fs.existsSync(path.join(outputRoot, '.snapshots', id)),
    'alice deletes it: its directory is gone', h.firstText(gone));

  await stop();
});
