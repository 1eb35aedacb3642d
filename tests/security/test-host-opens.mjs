#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// Security battery: the host never follows or blocks on what a sandbox puts
// in the places it writes, and host inputs are mounted as they were checked.
// Real Podman, real MCP clients (1.x SDK over stdio), the real Claude Code CLI
// against the vendor fixture (tests/fixtures/vendor/server.mjs).
//
// Each attack is what a sandbox can do as root in its own /out: the planting
// runs inside the container (`podman exec`), never on the host.
//
//   DEMESNE=/abs/src/demesne node tests/security/test-host-opens.mjs

import cp from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const TOP = path.resolve(HERE, '..', '..');
const h = await import(path.join(TOP, 'tests', 'e2e', 'lib', 'harness.mjs'));

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);
if (process.getuid() !== 0) {
  process.stdout.write('1..0 # SKIP needs root: egress and agent runs make a veth pair per sandbox\n');
  process.exit(77);
}
const ENGINE = process.env.DEMESNE_ENGINE ?? 'podman';
const FIXTURE = path.join(TOP, 'tests', 'fixtures', 'vendor', 'server.mjs');
const sdk = path.join(TOP, 'tests', 'e2e', 'node_modules', '@modelcontextprotocol', 'sdk', 'dist', 'esm', 'client');
const { Client } = await import(path.join(sdk, 'index.js'));
const { StdioClientTransport } = await import(path.join(sdk, 'stdio.js'));

const engine = (...args) => cp.spawnSync(ENGINE, args, { encoding: 'utf8' });
const inC = (cid, script) => engine('exec', cid, 'sh', '-c', script);
const CALL_MS = 180_000;

async function connect(env) {
  const client = new Client({ name: 'demesne-security-host-opens', version: '0.0.0' });
  const transport = new StdioClientTransport({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' });
  await h.within(60_000, 'connect', client.connect(transport));
  client.serverPid = transport.pid;
  return client;
}
const call = (client, name, args, ms = CALL_MS) => h.within(ms + 5_000, `${name} answers`,
  client.callTool({ name, arguments: args }, undefined, { timeout: ms }));
const containerOf = (sbxId) => engine('ps', '-q', '--filter', `label=demesne.sandbox=${sbxId}`).stdout.trim();
const hwmKiB = (pid) => Number(/VmHWM:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);

process.env.E2E_TIMEOUT_SECONDS ??= '1200';
h.plan(33);

await h.run(async () => {
  const root = h.makeOutputRoot('host-opens');
  const out = path.join(root, 'out');
  const state = path.join(root, 'state');
  const home = path.join(root, 'home');
  const allowed = path.join(root, 'allowed');
  for (const d of [out, state, home, allowed, path.join(home, '.ssh'), path.join(home, '.kube')]) {
    fs.mkdirSync(d, { recursive: true });
  }
  fs.writeFileSync(path.join(home, '.ssh', 'id_ed25519'), 'PRIVATE KEY\n');
  fs.writeFileSync(path.join(home, '.kube', 'config'), 'kube: config\n');
  fs.mkdirSync(path.join(out, 'probe'));
  fs.writeFileSync(path.join(state, 'probe.txt'), 'state\n');
  // A host file a sandbox must never read or change through a planted link.
  const secret = path.join(root, 'host-secret.jsonl');
  const secretText = '{"type":"result","result":"HOST-SECRET-CONTENT"}\n';
  fs.writeFileSync(secret, secretText);
  const hostDir = path.join(root, 'host-dir');
  fs.mkdirSync(hostDir);
  // The realistic mistake: the allowed root holds the output root and the state dir.
  const env = h.serverEnv(out, {
    DEMESNE_STATE_DIR: state, DEMESNE_ALLOWED_PATHS: root, HOME: home,
  });
  delete env.DEMESNE_ALLOW_CREDENTIAL_PATHS;
  const stagedLeft = () => (fs.existsSync(path.join(state, 'mnt'))
    ? fs.readdirSync(path.join(state, 'mnt')) : []);

  let client = await connect(env);

  // 1-8: inputs that are refused, each with a message naming the path and the variable.
  {
    const r1 = await call(client, 'sandbox_script', { command: 'ls /in', directories: [path.join(out, 'probe')] });
    h.ok(r1.isError && /DEMESNE_OUTPUT_ROOT/.test(h.firstText(r1)) && h.firstText(r1).includes(path.join(out, 'probe')),
      'an input under the output root is refused, naming DEMESNE_OUTPUT_ROOT', h.firstText(r1));
    const r2 = await call(client, 'sandbox_script', { command: 'ls /in', files: [path.join(state, 'probe.txt')] });
    h.ok(r2.isError && /DEMESNE_STATE_DIR/.test(h.firstText(r2)),
      'an input under the state directory is refused, naming DEMESNE_STATE_DIR', h.firstText(r2));
    // Another name for the output root (a bind mount): same device and inode, refused too.
    const alias = path.join(allowed, 'alias');
    fs.mkdirSync(alias);
    const bound = cp.spawnSync('mount', ['--bind', out, alias]).status === 0;
    const r3 = await call(client, 'sandbox_script', { command: 'ls /in', directories: [path.join(alias, 'probe')] });
    if (bound) cp.spawnSync('umount', [alias]);
    h.ok(bound && r3.isError && /DEMESNE_OUTPUT_ROOT/.test(h.firstText(r3)),
      'the output root under another name (a bind mount) is refused as well', h.firstText(r3));
    const r4 = await call(client, 'sandbox_script', { command: 'ls /in', directories: [path.join(home, '.ssh')] });
    h.ok(r4.isError && /credential folder/.test(h.firstText(r4)) && /DEMESNE_ALLOW_CREDENTIAL_PATHS/.test(h.firstText(r4)),
      '~/.ssh is refused, naming DEMESNE_ALLOW_CREDENTIAL_PATHS', h.firstText(r4));
    const r5 = await call(client, 'sandbox_script', { command: 'ls /in', files: [path.join(home, '.ssh', 'id_ed25519')] });
    h.ok(r5.isError && /inside the credential folder/.test(h.firstText(r5)), 'a file inside ~/.ssh is refused',
      h.firstText(r5));
    const r6 = await call(client, 'sandbox_script', { command: 'ls -a /in/home', directories: [home] });
    h.ok(r6.isError && /contains the credential folder/.test(h.firstText(r6)),
      'a directory that contains a credential folder (HOME) is refused', h.firstText(r6));
    h.equal(stagedLeft().length, 0, 'refused inputs leave no staged mount behind');
  }

  // 9-10: the operator names a credential folder exactly: it is mounted (checked, through the fd).
  {
    await client.close();
    client = await connect({ ...env, DEMESNE_ALLOW_CREDENTIAL_PATHS: path.join(home, '.kube') });
    const r = await call(client, 'sandbox_script', { command: 'cat /in/.kube/config', directories: [path.join(home, '.kube')] });
    h.equal(r.structuredContent?.stdout, 'kube: config\n', 'a credential folder named in DEMESNE_ALLOW_CREDENTIAL_PATHS is mounted');
    const r2 = await call(client, 'sandbox_script', { command: 'ls /in', directories: [path.join(home, '.ssh')] });
    h.ok(r2.isError && /credential folder/.test(h.firstText(r2)), 'the other credential folders stay refused', h.firstText(r2));
    await client.close();
    client = await connect(env);
  }

  // 11-13: the swap race: a persistent sandbox swaps a directory in its /out for a link to /
  // while other calls ask to mount it. Every call is refused; none sees the host's /.
  let sbx;
  {
    const c = await call(client, 'sandbox_create', { image: 'base' });
    sbx = c.structuredContent?.sandbox_id;
    const sbOut = c.structuredContent?.output_dir ?? '/nonexistent';
    h.ok(!c.isError && sbx, 'sandbox_create (egress package-managers: it has a proxy and egress.log)', h.firstText(c));
    const up = await call(client, 'sandbox_upload', {
      sandbox_id: sbx, src: path.join(home, '.kube', 'config'), dst: '/workspace/x',
    });
    h.ok(up.isError && /credential folder/.test(h.firstText(up)), 'sandbox_upload of a credential file is refused',
      h.firstText(up));
    const swapper = call(client, 'sandbox_exec', {
      sandbox_id: sbx, timeout_seconds: 20,
      // Until every call below has its answer (the test writes /out/stop) or 12 s.
      command: 'mkdir -p /out/d && echo inner > /out/d/marker; end=$((SECONDS+12)); '
        + 'while [ $SECONDS -lt $end ] && [ ! -e /out/stop ]; do mv /out/d /out/d.real; ln -s / /out/d; rm /out/d; mv /out/d.real /out/d; done; echo swapped',
    });
    await new Promise((r) => setTimeout(r, 1000));
    const tries = [];
    for (let i = 0; i < 6; i += 1) {
      tries.push(call(client, 'sandbox_script', {
        image: 'base', egress: 'none', command: 'ls /in/d; ls /in/d/etc/passwd 2>/dev/null && echo ROOT-MOUNTED',
        directories: [path.join(sbOut, 'd')],
      }));
    }
    const results = await Promise.all(tries);
    try { fs.writeFileSync(path.join(sbOut, 'stop'), ''); } catch { /* the swapper's 12 s end it */ }
    const sw = await swapper;
    h.ok(/swapped/.test(sw.structuredContent?.stdout ?? ''), 'the sandbox swapped /out/d for a link to / while the calls ran',
      JSON.stringify(sw.structuredContent));
    h.ok(results.every((r) => r.isError && /DEMESNE_OUTPUT_ROOT/.test(h.firstText(r)))
      && !results.some((r) => /ROOT-MOUNTED/.test(r.structuredContent?.stdout ?? '')),
    'every call that names it is refused and none mounts the host\'s /',
    results.map((r) => h.firstText(r).slice(0, 200)).join('\n'));
  }

  // 14-19: egress.log a FIFO, then a link, in the sandbox's /out; a new server adopts it.
  const cid = containerOf(sbx);
  {
    const planted = inC(cid, 'rm -f /out/egress.log && mkfifo /out/egress.log && ls -l /out/egress.log');
    h.ok(/^p/.test(planted.stdout), 'the sandbox put a FIFO at /out/egress.log', planted.stderr);
    await client.close();
    client = await connect(env);
    const t0 = Date.now();
    const e = await call(client, 'sandbox_exec', { sandbox_id: sbx, command: 'echo alive' }, 60_000)
      .catch((err) => ({ isError: true, content: [{ type: 'text', text: String(err) }] }));
    h.equal(e.structuredContent?.stdout, 'alive\n', `a later server adopts it and sandbox_exec answers (${Date.now() - t0} ms), no hang`);
    const e2 = await call(client, 'sandbox_exec', { sandbox_id: sbx, command: 'echo again' }, 30_000)
      .catch((err) => ({ isError: true, content: [{ type: 'text', text: String(err) }] }));
    h.equal(e2.structuredContent?.stdout, 'again\n', 'and the shim lock is free for the next call');

    const before = fs.readFileSync(secret, 'utf8');
    const p2 = inC(cid, `rm -f /out/egress.log && ln -s ${secret} /out/egress.log && ls -l /out/egress.log`);
    h.ok(/^l/.test(p2.stdout), 'the sandbox put a link to a host file at /out/egress.log', p2.stderr);
    await client.close();
    client = await connect(env);
    const e3 = await call(client, 'sandbox_exec', {
      sandbox_id: sbx, command: 'curl -s -m 3 http://not-allowed.invalid/ >/dev/null; echo done',
    }, 60_000);
    h.equal(e3.structuredContent?.stdout, 'done\n', 'adopted again, with a proxy decision to log');
    h.equal(fs.readFileSync(secret, 'utf8'), before, 'the host file behind the link is untouched');
  }

  // 20-23: downloads/ a link to a host directory, then a FIFO.
  {
    inC(cid, `rm -rf /out/downloads && ln -s ${hostDir} /out/downloads`);
    const d1 = await call(client, 'sandbox_download', { sandbox_id: sbx, src: '/etc/hostname' }, 60_000);
    h.ok(d1.isError && /not a plain directory/.test(h.firstText(d1)), 'downloads/ as a link: refused', h.firstText(d1));
    h.equal(fs.readdirSync(hostDir).length, 0, 'and nothing is written where the link points');
    inC(cid, 'rm -f /out/downloads && mkfifo /out/downloads');
    const d2 = await call(client, 'sandbox_download', { sandbox_id: sbx, src: '/etc/hostname' }, 60_000)
      .catch((err) => ({ isError: true, content: [{ type: 'text', text: `hung: ${err}` }] }));
    h.ok(d2.isError && !/hung/.test(h.firstText(d2)), 'downloads/ as a FIFO: refused, no hang', h.firstText(d2));
    inC(cid, 'rm -f /out/downloads && mkdir /out/downloads && ln -s /etc/hostname /out/downloads/hostname');
    const d3 = await call(client, 'sandbox_download', { sandbox_id: sbx, src: '/etc/hostname' }, 60_000);
    const landed = path.join(out, sbx, 'downloads', 'hostname');
    h.ok(!d3.isError && !fs.lstatSync(landed).isSymbolicLink()
      && fs.readFileSync(landed, 'utf8') === inC(cid, 'cat /etc/hostname').stdout,
    'a link planted at downloads/<name> is replaced by the download, never written through', h.firstText(d3));
    const del = await call(client, 'sandbox_destroy', { sandbox_id: sbx });
    h.ok(!del.isError && !containerOf(sbx), 'sandbox_destroy: its container is gone', h.firstText(del));
  }
  await client.close();

  // 25-33: agent runs. A relay in front of the vendor fixture holds the CLI's first request
  // until the planting in the agent's /out is done, so the attack is in place for sure.
  {
    const key = `sk-ant-api03-demesne-sec-${crypto.randomBytes(12).toString('hex')}`;
    const log = path.join(root, 'fixture.log');
    const fixture = h.spawnGroup(process.execPath, [FIXTURE, '--port', '0', '--expect-key', key, '--log', log],
      { stdio: ['ignore', 'pipe', 'inherit'] });
    const rl = readline.createInterface({ input: fixture.stdout });
    const fxPort = await h.within(15_000, 'fixture listening', new Promise((resolve) => {
      rl.on('line', (l) => { const m = /^listening (\d+)/.exec(l); if (m) resolve(Number(m[1])); });
    }));
    let plant = null;
    let serverPid = 0;
    // The container of the run being made: the last run's may still be there
    // for a moment (removals wait for a quiet moment between calls).
    const planted = new Set();
    const agentContainer = () => engine('ps', '-q', '--no-trunc', '--filter', 'label=demesne.kind=agent').stdout.trim()
      .split('\n').filter((id) => id && !planted.has(id)).find((id) => new RegExp(`-${serverPid}-`).test(
        engine('inspect', '--format', '{{index .Config.Labels "demesne.owner"}}', id).stdout));
    const relay = http.createServer((req, res) => {
      const go = () => {
        const up = http.request({ host: '127.0.0.1', port: fxPort, method: req.method, path: req.url, headers: req.headers },
          (ur) => { res.writeHead(ur.statusCode, ur.headers); ur.pipe(res); });
        up.on('error', () => res.destroy());
        req.pipe(up);
      };
      if (plant) {
        const p = plant;
        plant = null;
        const id = agentContainer();
        if (id) planted.add(id);
        p.result = id ? inC(id, p.script) : { stdout: '', stderr: 'no agent container' };
      }
      go();
    });
    await new Promise((r) => relay.listen(0, '127.0.0.1', r));
    const agentEnv = {
      ...env, ANTHROPIC_API_KEY: key, DEMESNE_VENDOR_UPSTREAM_ANTHROPIC: `http://127.0.0.1:${relay.address().port}`,
    };
    delete agentEnv.CLAUDE_CODE_OAUTH_TOKEN;
    const ac = await connect(agentEnv);
    serverPid = ac.serverPid;

    // transcript.jsonl a link to a host file holding a fake answer; usage.json.tmp a FIFO;
    // usage.json a link to a host file.
    const usageTarget = path.join(root, 'host-usage.json');
    fs.writeFileSync(usageTarget, 'HOST USAGE FILE\n');
    const p1 = {
      script: `ln -sf ${secret} /out/transcript.jsonl && mkfifo /out/usage.json.tmp && ln -sf ${usageTarget} /out/usage.json `
        + '&& ls -l /out',
    };
    plant = p1;
    const r1 = await call(ac, 'sandbox_agent', { prompt: 'Write the answer.', model: 'sonnet' }, 240_000)
      .catch((err) => ({ isError: true, content: [{ type: 'text', text: `hung: ${err}` }] }));
    const sc1 = r1.structuredContent ?? {};
    h.ok(/transcript\.jsonl ->/.test(p1.result?.stdout ?? '') && /^p.*usage\.json\.tmp/m.test(p1.result?.stdout ?? ''),
      'the agent\'s sandbox planted links at transcript.jsonl and usage.json, a FIFO at usage.json.tmp',
      JSON.stringify(p1.result));
    h.ok(!r1.isError && sc1.exit_code === 0, 'the agent run completes (no hang on the FIFO)', h.firstText(r1));
    h.ok(!JSON.stringify(r1).includes('HOST-SECRET-CONTENT') && sc1.result === 'The answer is 42.',
      'the answer comes from the run\'s own output, never from the host file behind the link', JSON.stringify(sc1.result));
    h.ok(fs.readFileSync(secret, 'utf8') === secretText && fs.readFileSync(usageTarget, 'utf8') === 'HOST USAGE FILE\n',
      'the host files behind the links are untouched');
    const od = sc1.output_dir ?? '/nonexistent';
    h.ok(fs.existsSync(path.join(od, 'usage.json')) && !fs.lstatSync(path.join(od, 'usage.json')).isSymbolicLink()
      && !fs.lstatSync(path.join(od, 'transcript.jsonl')).isSymbolicLink(),
    'usage.json and transcript.jsonl are the server\'s own files again');

    // stdout.log a link to /dev/zero: the server's memory stays flat. (Not tried when the
    // run above hung: a server that follows links would eat the machine's memory here.)
    if (r1.isError) {
      h.failRemaining('the first agent run failed: the /dev/zero case is not tried');
      return;
    }
    const hwm0 = hwmKiB(serverPid);
    const p2 = { script: 'rm -f /out/stdout.log && ln -s /dev/zero /out/stdout.log && ln -sf /dev/zero /out/transcript.jsonl && ls -l /out' };
    plant = p2;
    const r2 = await call(ac, 'sandbox_agent', { prompt: 'Write the answer.', model: 'sonnet' }, 240_000)
      .catch((err) => ({ isError: true, content: [{ type: 'text', text: `hung: ${err}` }] }));
    const hwm1 = fs.existsSync(`/proc/${serverPid}`) ? hwmKiB(serverPid) : Infinity;
    h.ok(/stdout\.log -> \/dev\/zero/.test(p2.result?.stdout ?? ''), 'the sandbox linked stdout.log and transcript.jsonl to /dev/zero',
      JSON.stringify(p2.result));
    h.ok(!r2.isError && r2.structuredContent?.exit_code === 0, 'the run completes', h.firstText(r2));
    h.ok(hwm1 - hwm0 < 64 * 1024, `the server's peak memory stays flat (${hwm0} KiB -> ${hwm1} KiB)`);
    await ac.close();
    relay.close();
    try { process.kill(-fixture.pid, 'SIGTERM'); } catch { /* gone */ }
  }

  // 34: nothing left behind.
  {
    const left = engine('ps', '-aq', '--filter', `label=demesne.sandbox=${sbx}`).stdout.trim();
    h.ok(!left && stagedLeft().length === 0 && fs.readdirSync(hostDir).length === 0,
      'nothing left: no container, no staged mount, nothing in the host directory',
      `${left} ${stagedLeft().join(' ')}`);
  }
});
