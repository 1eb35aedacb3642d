#!/usr/bin/env node
// Persistent sandboxes as real MCP clients see them: @modelcontextprotocol/client
// 2.x in the modern era creates a sandbox, runs commands in it, moves a binary
// file in and out and lists it; then @modelcontextprotocol/sdk 1.x in the
// legacy era, from a second server process, adopts the same sandbox by its id
// and destroys it. Over stdio, against the real engine.
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-sandbox.mjs

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);

const { Client: Client2 } = await import('@modelcontextprotocol/client');
const { StdioClientTransport: Stdio2 } = await import('@modelcontextprotocol/client/stdio');
const { Client: Client1 } = await import('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport: Stdio1 } = await import('@modelcontextprotocol/sdk/client/stdio.js');
const { CALL_TIMEOUT_MS } = await import('./lib/checks.mjs');

h.plan(15);

const sha256 = (file) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');

await h.run(async () => {
  // Inputs may not come from the output root (sandboxes write there): the
  // output root and the allowed folder are siblings.
  const base = h.makeOutputRoot('sandbox');
  const root = path.join(base, 'out');
  const allowed = path.join(base, 'allowed');
  fs.mkdirSync(allowed);
  const env = h.serverEnv(root, { DEMESNE_ALLOWED_PATHS: allowed });
  const blob = path.join(allowed, 'blob.bin');
  fs.writeFileSync(blob, crypto.randomBytes(3 * 1024 * 1024 + 17));

  // The modern era, 2.x client.
  const modern = new Client2(
    { name: 'demesne-e2e-sandbox', version: '0.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' }, probe: { timeoutMs: 30_000 } } },
  );
  modern.onerror = (err) => h.diag(`client onerror: ${err?.message ?? err}`);
  await h.within(60_000, 'connect (modern)', modern.connect(
    new Stdio2({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' }), { timeout: 30_000 }));
  // 1.x takes a result schema before the options; 2.x does not.
  const call = (c, name, args) => (c instanceof Client1
    ? c.callTool({ name, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS })
    : c.callTool({ name, arguments: args }, { timeout: CALL_TIMEOUT_MS }));

  // 1-2: every sandbox tool is listed, each with an input schema.
  const { tools } = await modern.listTools();
  const names = ['sandbox_create', 'sandbox_exec', 'sandbox_upload', 'sandbox_download', 'sandbox_destroy',
    'sandbox_list'];
  h.ok(names.every((n) => tools.some((t) => t.name === n && t.inputSchema?.type === 'object')),
    'tools/list has the six sandbox tools', tools.map((t) => t.name).join(' '));
  h.ok(tools.find((t) => t.name === 'sandbox_destroy')?.annotations?.destructiveHint === true,
    'sandbox_destroy is marked destructive');

  // 3-5: create (the client checks structuredContent against outputSchema), state across execs, stdin.
  const created = await call(modern, 'sandbox_create', { env: { WHO: 'e2e' } });
  const id = created.structuredContent?.sandbox_id;
  h.ok(!created.isError && /^sbx-[0-9a-f]{12}$/.test(id ?? '') && created.structuredContent?.expires_at,
    'sandbox_create answers with an id and expires_at', JSON.stringify(created));
  await call(modern, 'sandbox_exec', { sandbox_id: id, command: 'echo "$WHO" > /workspace/who' });
  const who = await call(modern, 'sandbox_exec', { sandbox_id: id, command: 'cat /workspace/who' });
  h.equal(who.structuredContent?.stdout, 'e2e\n', '/workspace keeps a file between execs');
  const piped = await call(modern, 'sandbox_exec', {
    sandbox_id: id, command: 'pwd; wc -c', stdin: 'twelve bytes', workdir: '/workspace',
  });
  h.equal(piped.structuredContent?.stdout, '/workspace\n12\n', 'stdin and workdir reach the command');

  // 6-8: upload -> exec -> download a binary file, checksums equal.
  const up = await call(modern, 'sandbox_upload', { sandbox_id: id, src: blob, dst: '/workspace/in/blob.bin' });
  h.equal(up.structuredContent?.bytes, fs.statSync(blob).size, 'sandbox_upload reports the bytes');
  const sum = await call(modern, 'sandbox_exec', {
    sandbox_id: id, command: 'cp /workspace/in/blob.bin /workspace/out.bin && sha256sum /workspace/out.bin',
  });
  h.equal(sum.structuredContent?.stdout?.split(' ')[0], sha256(blob), 'the sandbox sees the same bytes');
  const down = await call(modern, 'sandbox_download', { sandbox_id: id, src: '/workspace/out.bin' });
  const hostPath = down.structuredContent?.host_path ?? '';
  h.ok(!down.isError && hostPath === path.join(root, id, 'downloads', 'out.bin') && sha256(hostPath) === sha256(blob),
    'sandbox_download lands in <output_dir>/downloads/ with the same checksum', JSON.stringify(down));

  // 9: a hostile download name is resolved inside the sandbox.
  const hostile = await call(modern, 'sandbox_download', { sandbox_id: id, src: '/workspace/../../etc/hostname' });
  h.ok(!hostile.isError && hostile.structuredContent?.host_path === path.join(root, id, 'downloads', 'hostname'),
    "'..' stays inside the sandbox and the file lands in downloads/", JSON.stringify(hostile));

  // 10: a command that runs a while reports progress (so clients that reset their timeout on
  // progress keep waiting).
  const progress = [];
  const slow = await modern.callTool({ name: 'sandbox_exec', arguments: { sandbox_id: id, command: 'sleep 2.5; echo done' } },
    { timeout: CALL_TIMEOUT_MS, onprogress: (p) => progress.push(p.progress), resetTimeoutOnProgress: true });
  h.ok(slow.structuredContent?.stdout === 'done\n' && progress.length >= 1 &&
    progress.every((p, i) => i === 0 || p > progress[i - 1]), `progress notifications arrive and grow (${progress.join(', ')})`,
  JSON.stringify(slow));

  // 11: list shows it.
  const list = await call(modern, 'sandbox_list', {});
  h.ok(list.structuredContent?.sandboxes?.some((s) => s.sandbox_id === id), 'sandbox_list shows the sandbox',
    JSON.stringify(list));
  await modern.close();

  // The legacy era, 1.x SDK, another server process: it adopts the sandbox.
  const legacy = new Client1({ name: 'demesne-e2e-sandbox-legacy', version: '0.0.0' });
  await h.within(60_000, 'connect (legacy)', legacy.connect(
    new Stdio1({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' })));

  // 12-13: state intact in a new server; the seccomp filter holds there too.
  const again = await call(legacy, 'sandbox_exec', { sandbox_id: id, command: 'cat /workspace/who' });
  h.equal(again.structuredContent?.stdout, 'e2e\n', 'a later server (legacy era) adopts the sandbox by its id');
  const denied = await call(legacy, 'sandbox_exec', { sandbox_id: id, command: 'unshare -r true' });
  h.ok(denied.structuredContent?.exit_code !== 0 && /Operation not permitted/.test(denied.structuredContent?.stderr ?? ''),
    '`unshare -r true` fails with EPERM inside', JSON.stringify(denied));

  // 14-15: destroy, then a second destroy is a clear error.
  const destroyed = await call(legacy, 'sandbox_destroy', { sandbox_id: id });
  h.ok(!destroyed.isError && destroyed.structuredContent?.destroyed === true, 'sandbox_destroy',
    JSON.stringify(destroyed));
  const twice = await call(legacy, 'sandbox_destroy', { sandbox_id: id });
  h.ok(twice.isError && /unknown sandbox/.test(h.firstText(twice)), 'destroying it again is a clear isError result',
    JSON.stringify(twice));
  await legacy.close();
});
