#!/usr/bin/env node
// Security battery, egress, with real containers and a real MCP client: the
// reported hole (with DEMESNE_ALLOW_CALLER_EGRESS=1 and allow
// ["0.0.0.0/0", "example.com"], `curl -x $HTTP_PROXY http://127.0.0.1:PORT/`
// inside the sandbox reached a service bound to the host's loopback) and its
// neighbours: the host's loopback and metadata through the proxy, port 22 of
// a package host, and one sandbox (egress open) reaching another's host-side
// and container addresses. Traffic goes to the host's loopback service, to
// the sandboxes' own pairs and to nothing else (the only name involved is
// refused before any lookup). Needs root (CI runs as root).
//
//   DEMESNE=/abs/path/to/demesne node tests/security/test-egress-containers.mjs

import cp from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import * as h from '../e2e/lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);

const PLAN = 15;
if (process.getuid() !== 0) {
  process.stdout.write('1..0 # SKIP needs root: sandboxes with egress get veth pairs\n');
  process.exit(77);
}

// The SDK lives in tests/e2e/node_modules: import it by path from there.
const sdk = (p) => import(path.join(h.E2E_DIR, 'node_modules/@modelcontextprotocol/client/dist', p));
const { Client } = await sdk('index.mjs');
const { StdioClientTransport } = await sdk('stdio.mjs');
const { CALL_TIMEOUT_MS } = await import('../e2e/lib/checks.mjs');

h.plan(PLAN);

const BANNER = 'host-loopback-service-banner';

function ifnames() {
  return cp.execFileSync('ip', ['-o', 'link', 'show']).toString().split('\n')
    .map((l) => l.split(': ')[1]?.split('@')[0]).filter(Boolean);
}

function linksOf(what) {
  return cp.execFileSync('ip', ['-o', 'link', 'show']).toString().split('\n')
    .filter((l) => /alias demesne /.test(l) && l.split('alias demesne ')[1].includes(what))
    .map((l) => l.split(': ')[1]?.split('@')[0]);
}

await h.run(async () => {
  const root = h.makeOutputRoot('sec-egress');
  // What the sandbox must never reach: a service on the host's loopback, as a
  // `demesne serve --http` bound to 127.0.0.1 would be.
  const svc = http.createServer((q, r) => r.end(`${BANNER}\n`));
  await new Promise((resolve) => svc.listen(0, '127.0.0.1', resolve));
  const PORT = svc.address().port;
  // And one on every address of the host, as most services are: the host
  // side of any sandbox's pair is one of them.
  const svcAny = http.createServer((q, r) => r.end(`${BANNER}\n`));
  await new Promise((resolve) => svcAny.listen(0, '0.0.0.0', resolve));
  const ANY = svcAny.address().port;
  try {
    const env = h.serverEnv(root, { DEMESNE_ALLOW_CALLER_EGRESS: '1' });
    const client = new Client({ name: 'demesne-sec-egress', version: '0.0.0' },
      { versionNegotiation: { mode: { pin: '2026-07-28' }, probe: { timeoutMs: 30_000 } } });
    await h.within(60_000, 'connect', client.connect(
      new StdioClientTransport({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' }), { timeout: 30_000 }));
    const call = (name, args) => client.callTool({ name, arguments: args }, { timeout: CALL_TIMEOUT_MS });

    // 1-3: the reproduction, as reported: its policy is refused, and the service never answers.
    const wide = await call('sandbox_script', {
      allow: ['0.0.0.0/0', 'example.com'],
      command: `curl -s -m 5 --noproxy "" -x "$HTTP_PROXY" http://127.0.0.1:${PORT}/`,
    });
    h.ok(wide.isError && /allow entry '0\.0\.0\.0\/0' overlaps/.test(h.firstText(wide)),
      'allow ["0.0.0.0/0", "example.com"] is refused', h.firstText(wide));
    h.ok(/never reaches/.test(h.firstText(wide)), 'and the message says why', h.firstText(wide));
    h.ok(!h.firstText(wide).includes(BANNER) && !(wide.structuredContent?.stdout ?? '').includes(BANNER),
      'the reproduction does not reach the host\'s loopback service', JSON.stringify(wide.structuredContent));

    // 4-7: the same request, and its neighbours, through the proxy of an allowed policy.
    const r = await call('sandbox_script', {
      allow: ['example.com'],
      command: [
        `curl -s -m 5 --noproxy "" -x "$HTTP_PROXY" http://127.0.0.1:${PORT}/; echo " loop=$?"`,
        `curl -s -m 5 --noproxy "" -p -x "$HTTP_PROXY" http://127.0.0.1:${PORT}/; echo " tunnel=$?"`,
        'curl -s -m 5 -x "$HTTP_PROXY" http://169.254.169.254/latest/meta-data/; echo " meta=$?"',
        'curl -s -m 5 -p -x "$HTTP_PROXY" telnet://deb.debian.org:22 </dev/null; echo " ssh=$?"',
      ].join('; '),
    });
    const out = r.structuredContent?.stdout ?? '';
    const outdir = r.structuredContent?.output_dir ?? '';
    h.ok(!out.includes(BANNER), 'the host\'s loopback service is never reached through the proxy', out);
    const log = outdir ? fs.readFileSync(path.join(outdir, 'egress.log'), 'utf8') : '';
    h.ok(/127\.0\.0\.1 is in loopback[\s\S]* loop=0/.test(out) && / tunnel=[1-9]/.test(out) &&
      new RegExp(`CONNECT 127\\.0\\.0\\.1:${PORT} denied 403`).test(log),
      'plain HTTP and CONNECT to 127.0.0.1 get the proxy\'s 403', `${out}\n${log}`);
    h.ok(/169\.254\.169\.254 is in link-local/.test(out), 'the metadata address gets the proxy\'s 403', out);
    h.ok(/ ssh=[1-9]/.test(out) && /CONNECT deb\.debian\.org:22 denied 403/.test(log),
      'CONNECT to port 22 of a package host (telnet://) is refused', `${out}\n${log}`);

    // 8-14: sandbox A (egress open) against sandbox B (the default policy) and C (open).
    const a = await call('sandbox_create', { egress: 'open' });
    const b = await call('sandbox_create', {});
    const c = await call('sandbox_create', { egress: 'open' });
    const idA = a.structuredContent?.sandbox_id;
    const idB = b.structuredContent?.sandbox_id;
    const idC = c.structuredContent?.sandbox_id;
    h.ok(idA && idB && idC, 'three sandboxes: A open, B package-managers, C open', JSON.stringify([a, b, c]));
    const exec = async (id, command) => (await call('sandbox_exec', { sandbox_id: id, command })).structuredContent ?? {};
    const addrs = await exec(idB, 'h=${HTTP_PROXY#http://}; echo "${h%%:*}"');
    const bHost = (addrs.stdout ?? '').trim();
    // C (open, so its replies could route back) serves on its own address.
    const cAddrs = await exec(idC, [
      'nohup python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1 &',
      'python3 -c "import socket; s=socket.socket(2,2); s.connect((\'192.0.2.1\',9)); print(s.getsockname()[0])"',
      // Python's start takes a while on a loaded machine: up to 10 s.
      'for i in $(seq 50); do code=$(curl -s -m 2 --noproxy "*" -o /dev/null -w "%{http_code}" http://127.0.0.1:8000/); ' +
        '[ "$code" = 200 ] && break; sleep 0.2; done; echo "$code"',
    ].join('\n'));
    const [cPeer, cServes] = (cAddrs.stdout ?? '').trim().split('\n');
    h.ok(/^10\.213\./.test(bHost) && /^10\.213\./.test(cPeer ?? '') && cServes === '200',
      `B's host side ${bHost}, C's container ${cPeer} with a web server`, JSON.stringify([addrs, cAddrs]));
    const fromA = await exec(idA, [
      `curl -s -m 2 --noproxy "*" http://${bHost}:3128/; echo " proxy=$?"`,
      `curl -s -m 2 --noproxy "*" http://${cPeer}:8000/; echo " peer=$?"`,
      `curl -s -m 2 --noproxy "*" http://${bHost}:${ANY}/; echo " hostside=$?"`,
    ].join('; '));
    const outA = fromA.stdout ?? '';
    h.ok(/ proxy=28/.test(outA), 'A cannot reach B\'s proxy (dropped)', outA);
    h.ok(/ peer=28/.test(outA) && !/Directory listing/.test(outA), 'A cannot reach C\'s container address', outA);
    h.ok(/ hostside=28/.test(outA) && !outA.includes(BANNER),
      'A cannot reach a host service (on 0.0.0.0) at B\'s host-side address', outA);
    const direct = await exec(idB, `curl -s -m 2 --noproxy "*" http://${bHost}:${ANY}/; echo " direct=$?"`);
    h.ok(/ direct=(7|28)/.test(direct.stdout ?? '') && !(direct.stdout ?? '').includes(BANNER),
      'B cannot reach another port of its own host side', JSON.stringify(direct));

    // 14-15: nothing left behind.
    for (const id of [idA, idB, idC]) if (id) await call('sandbox_destroy', { sandbox_id: id });
    // The pairs go when the kernel dismantles the containers' namespaces.
    let links = [];
    // Up to 30 s: on a loaded machine (CI runs two test programs at once)
    // the engine takes that long to let the last process of a namespace go.
    for (let i = 0; i < 300; i += 1) {
      links = [idA, idB, idC].flatMap((id) => (id ? linksOf(id) : []));
      if (links.length === 0) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    h.equal(links.length, 0, 'no veth of the sandboxes is left');
    const engine = process.env.DEMESNE_ENGINE ?? 'podman';
    const left = [idA, idB, idC].filter(Boolean).flatMap((id) => cp.spawnSync(engine,
      ['ps', '-aq', '--filter', `label=demesne.sandbox=${id}`], { encoding: 'utf8' }).stdout.trim().split('\n')
      .filter(Boolean));
    h.equal(left.length, 0, 'no container of the sandboxes is left');
    h.diag(`links now: ${ifnames().filter((n) => n.startsWith('dm-')).length} dm-* on the machine`);
    await client.close();
  } finally {
    svc.close();
    svcAny.close();
  }
});
