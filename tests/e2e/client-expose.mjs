#!/usr/bin/env node
// sandbox_expose between two principals, through the real npm client over
// Streamable HTTP (`demesne serve --http`, a token file naming alice and
// bob), against real Podman. Alice's sandbox (python, egress none) runs
// `python3 -m http.server` bound to its own 127.0.0.1 and a tiny server that
// answers 101 and echoes bytes (a WebSocket's upgrade); she exposes both.
// The code URL signs a browser in once (303, an HttpOnly SameSite=Strict
// cookie), a second use is 401; with the cookie a file comes back, without
// it 401; the upgrade passes and bytes come back unchanged; a head past the
// cap is 431. Fourteen exposes at once against a cap of 8 open previews: exactly
// the cap opens. Bob cannot expose her sandbox (an unknown id's answer) nor
// see her previews; a bad port is refused clearly and opens nothing. After
// sandbox_destroy every preview port refuses connections, and so does a
// preview of a sandbox that outlives the server (persistent) once the server exits.
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-expose.mjs
//
// Prints TAP; exits 0 only if every test passed, 77 when node_modules is missing.

import http from 'node:http';
import net from 'node:net';
import * as h from './lib/harness.mjs';

h.requireNodeModules();
process.env.E2E_TIMEOUT_SECONDS ??= '300';
const { CALL_TIMEOUT_MS } = await import('./lib/checks.mjs');
const { serveTwoPrincipals } = await import('./lib/two-principals.mjs');
const { engineSocket } = await import('./lib/http-server.mjs');

h.plan(15);

const call = (client, name, args) => client.callTool({ name, arguments: args }, { timeout: CALL_TIMEOUT_MS });
/** A refusal's text with the id in it replaced, to compare two answers. */
const sameShape = (a, idA, b, idB) => a.split(idA).join('<id>') === b.split(idB).join('<id>');

/** One raw exchange on a new TCP connection: what came back until the peer closed (or `until` matched). */
function exchange(port, data, { until, write } = {}) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    const chunks = [];
    let done = false;
    const finish = (err) => {
      if (done) return;
      done = true;
      s.destroy();
      resolve({ err, bytes: Buffer.concat(chunks), text: Buffer.concat(chunks).toString('latin1') });
    };
    s.setTimeout(30_000, () => finish(new Error('timeout')));
    s.on('error', (e) => finish(e));
    s.on('data', (c) => {
      chunks.push(c);
      const all = Buffer.concat(chunks);
      if (write && all.includes('\r\n\r\n') && !s.wrote) {
        s.wrote = true;
        s.write(write);
      }
      if (until && until(all)) finish();
    });
    s.on('end', () => finish());
    s.on('connect', () => s.write(data));
  });
}

const get = (port, target, cookie) =>
  exchange(port, `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n${cookie ? `Cookie: ${cookie}\r\n` : ''}` +
    'Connection: close\r\n\r\n');
const statusOf = (r) => Number(/^HTTP\/1\.[01] (\d{3})/.exec(r.text)?.[1] ?? 0);

/** The code URL's answer: its status and the cookie it sets. */
async function signIn(url) {
  const u = new URL(url);
  const r = await get(Number(u.port), `${u.pathname}${u.search}`);
  const setCookie = /\r\nSet-Cookie: ([^\r]*)/i.exec(r.text)?.[1] ?? '';
  return { r, setCookie, cookie: setCookie.split(';')[0], location: /\r\nLocation: ([^\r]*)/i.exec(r.text)?.[1] };
}

const servers = `
import socket, threading, http.server, functools, os
def echo(c):
    head = b''
    while b'\\r\\n\\r\\n' not in head:
        d = c.recv(4096)
        if not d: return
        head += d
    rest = head.split(b'\\r\\n\\r\\n', 1)[1]
    c.sendall(b'HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n\\r\\n' + rest)
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
def ws():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', 8001)); s.listen(16)
    while True:
        c, _ = s.accept(); threading.Thread(target=echo, args=(c,), daemon=True).start()
threading.Thread(target=ws, daemon=True).start()
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory='/workspace/site')
http.server.ThreadingHTTPServer(('127.0.0.1', 8000), h).serve_forever()
`;

await h.run(async () => {
  const { alice, bob, stop } = await serveTwoPrincipals(h.demesneBinary(), 'expose');

  const tools = (await alice.listTools(undefined, { timeout: CALL_TIMEOUT_MS })).tools;
  const ex = tools.find((t) => t.name === 'sandbox_expose');
  h.ok(ex?.inputSchema?.properties?.port?.minimum === 1 && ex?.inputSchema?.properties?.port?.maximum === 65535 &&
    ex?.inputSchema?.required?.includes('sandbox_id') && ex?.outputSchema?.required?.includes('url') &&
    tools.find((t) => t.name === 'sandbox_list')?.outputSchema?.properties?.previews,
  'tools/list: sandbox_expose {sandbox_id, port 1..65535} -> {url}, previews[] on sandbox_list', JSON.stringify(ex));

  const made = await call(alice, 'sandbox_create', { image: 'python', egress: 'none' });
  const box = made.structuredContent?.sandbox_id;
  const started = await call(alice, 'sandbox_exec', {
    sandbox_id: box, workdir: '/workspace', stdin: servers,
    command: 'mkdir -p site && echo "made in the sandbox" > site/hello.txt && cat > servers.py && ' +
      'setsid -f python3 servers.py >/dev/null 2>&1 </dev/null && ' +
      'python3 -c "import socket,time\nfor i in range(300):\n  try:\n    [socket.create_connection((\'127.0.0.1\',p)).close() for p in (8000,8001)]; break\n  except OSError: time.sleep(0.1)"',
  });
  h.ok(!made.isError && started.structuredContent?.exit_code === 0,
    `alice's sandbox ${box} (egress none) serves on its own 127.0.0.1:8000 and :8001`, h.firstText(started));

  const web = await call(alice, 'sandbox_expose', { sandbox_id: box, port: 8000 });
  const webUrl = web.structuredContent?.url ?? '';
  const webPort = Number(new URL(webUrl || 'http://x:1/').port);
  h.ok(!web.isError && /^http:\/\/127\.0\.0\.1:\d+\/\?demesne_code=[0-9a-f]{32}$/.test(webUrl) &&
    web.structuredContent?.expires_with_sandbox === true && web.structuredContent?.port === 8000,
  'sandbox_expose answers a loopback URL with a one-time code', h.firstText(web));

  const first = await signIn(webUrl);
  const again = await signIn(webUrl);
  h.ok(statusOf(first.r) === 303 && first.location === '/' &&
    /^demesne_preview_\d+=[0-9a-f]{64}; HttpOnly; SameSite=Strict; Path=\/$/.test(first.setCookie) &&
    statusOf(again.r) === 401 && !/Set-Cookie/i.test(again.r.text),
  'the code URL sets an HttpOnly SameSite=Strict cookie and redirects, once; its second use is 401',
  `${first.r.text.split('\r\n\r\n')[0]} | ${again.r.text.split('\r\n')[0]}`);

  const withCookie = await get(webPort, '/hello.txt', first.cookie);
  const without = await get(webPort, '/hello.txt');
  const forged = await get(webPort, '/hello.txt', first.cookie.replace(/=.*/, `=${'0'.repeat(64)}`));
  h.ok(statusOf(withCookie) === 200 && withCookie.text.endsWith('made in the sandbox\n') &&
    statusOf(without) === 401 && statusOf(forged) === 401 && !without.text.includes('made in the sandbox'),
  'with the cookie the file comes back; without it, or with a forged one, 401',
  `${withCookie.text.split('\r\n')[0]} | ${without.text.split('\r\n')[0]} | ${forged.text.split('\r\n')[0]}`);

  const big = await exchange(webPort, `GET / HTTP/1.1\r\nHost: x\r\nX-Pad: ${'a'.repeat(20000)}\r\n\r\n`);
  h.equal(statusOf(big), 431, 'a first request head past 16 KiB is refused (431)');

  const ws = await call(alice, 'sandbox_expose', { sandbox_id: box, port: 8001 });
  const wsUrl = ws.structuredContent?.url ?? '';
  const wsPort = Number(new URL(wsUrl || 'http://x:1/').port);
  const wsIn = await signIn(wsUrl);
  const payload = Buffer.from([...Array(256).keys()]);
  const upgrade = `GET /hmr HTTP/1.1\r\nHost: 127.0.0.1:${wsPort}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
    `Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nCookie: ${wsIn.cookie}\r\n\r\n`;
  const complete = (n) => (all) => all.includes('\r\n\r\n') && all.length >= all.indexOf('\r\n\r\n') + 4 + n;
  // Bytes after the upgrade's head: in the same write as the head (NUL included), then after the 101.
  const up = await exchange(wsPort, Buffer.concat([Buffer.from(upgrade), payload]),
    { write: payload, until: complete(512) });
  const body = up.bytes.subarray(up.bytes.indexOf('\r\n\r\n') + 4);
  h.ok(!ws.isError && wsPort !== webPort && statusOf(up) === 101 && body.equals(Buffer.concat([payload, payload])),
    'an Upgrade: websocket request passes: 101, then 256 bytes (every value) sent with the head and 256 after it, echoed unchanged',
    `${up.text.split('\r\n')[0]} ${body.length} bytes ${up.err ?? ''}`);

  // The cap: 14 exposes at once of new ports (a session has 16 calls in flight at most), with 2 open: 6 open, 8 refused.
  const burst = await Promise.all([...Array(14).keys()].map((i) =>
    call(alice, 'sandbox_expose', { sandbox_id: box, port: 9000 + i })));
  const opened = burst.filter((r) => !r.isError);
  const refused = burst.filter((r) => r.isError && /has 8 open previews/.test(h.firstText(r)));
  h.ok(opened.length === 6 && refused.length === 8,
    "fourteen exposes at once (nearly a session's most) against the cap of 8 per sandbox: exactly 6 more open, 8 refused naming the cap",
    burst.map((r) => h.firstText(r)).join(' | '));
  const closedPort = Number(new URL(opened[0]?.structuredContent?.url ?? 'http://x:1/').port);
  const nobody = await signIn(opened[0]?.structuredContent?.url ?? 'http://127.0.0.1:1/');
  const relayed = await get(closedPort, '/', nobody.cookie);
  h.equal(statusOf(relayed), 502, 'a preview of a port nothing listens on answers 502 after sign-in');

  const aliceList = (await call(alice, 'sandbox_list', {})).structuredContent;
  const bobList = (await call(bob, 'sandbox_list', {})).structuredContent;
  h.ok(aliceList?.previews?.length === 8 &&
    aliceList.previews.some((p) => p.sandbox_id === box && p.port === 8000 && p.url === `http://127.0.0.1:${webPort}/`) &&
    aliceList.previews.every((p) => !p.url.includes('demesne_code')) &&
    Array.isArray(bobList?.previews) && bobList.previews.length === 0,
  'sandbox_list shows alice her 8 previews (URLs without a code), bob none', JSON.stringify(aliceList?.previews));

  const unknown = 'sbx-000000000000';
  const bobs = await call(bob, 'sandbox_expose', { sandbox_id: box, port: 8000 });
  const bobsUnknown = await call(bob, 'sandbox_expose', { sandbox_id: unknown, port: 8000 });
  h.ok(bobs.isError && sameShape(h.firstText(bobs), box, h.firstText(bobsUnknown), unknown),
    'bob cannot expose alice\'s sandbox: the same answer as an unknown sandbox', h.firstText(bobs));

  const bad = [];
  for (const port of [0, 70000, '8000', -1]) bad.push(await call(alice, 'sandbox_expose', { sandbox_id: box, port }));
  const after = (await call(alice, 'sandbox_list', {})).structuredContent;
  h.ok(bad.every((r) => r.isError && /port/.test(h.firstText(r))) && after?.previews?.length === 8,
    'ports 0, 70000, "8000" and -1 are refused naming port, and open nothing',
    bad.map((r) => h.firstText(r)).join(' | '));

  // A new code for the same preview each time; the redirect keeps the path and other parameters,
  // and never leaves for another host ("//host" is a scheme-relative URL).
  const codeOf = async () => new URL((await call(alice, 'sandbox_expose', { sandbox_id: box, port: 8000 }))
    .structuredContent?.url ?? 'http://x:1/');
  const renewed = await codeOf();
  const withParams = await signIn(`http://127.0.0.1:${webPort}/a/b?x=1&demesne_code=${renewed.searchParams.get('demesne_code')}&y=2`);
  const offsite = await signIn(`http://127.0.0.1:${webPort}//evil.example/?demesne_code=${(await codeOf()).searchParams.get('demesne_code')}`);
  const slash = await get(webPort, `/\\evil.example/?demesne_code=${(await codeOf()).searchParams.get('demesne_code')}`);
  h.ok(Number(renewed.port) === webPort && statusOf(withParams.r) === 303 && withParams.location === '/a/b?x=1&y=2' &&
    statusOf(offsite.r) === 303 && offsite.location === '/' &&
    statusOf(slash) === 303 && /\r\nLocation: \/\r\n/.test(slash.text),
  'exposing an open port again gives a new code for the same preview; its redirect keeps path and parameters, never another host',
  `${withParams.location} | ${offsite.location} | ${slash.text.split('\r\n\r\n')[0]}`);

  const kept = await call(alice, 'sandbox_create', { image: 'python', egress: 'none' });
  const keptBox = kept.structuredContent?.sandbox_id;
  const keptUrl = (await call(alice, 'sandbox_expose', { sandbox_id: keptBox, port: 8000 })).structuredContent?.url;
  const ports = aliceList?.previews?.map((p) => Number(new URL(p.url).port)) ?? [];
  await call(alice, 'sandbox_destroy', { sandbox_id: box });
  const refusedAfter = await Promise.all(ports.map((p) => get(p, '/', first.cookie)));
  const afterList = (await call(alice, 'sandbox_list', {})).structuredContent;
  h.ok(ports.length === 8 && refusedAfter.every((r) => r.err?.code === 'ECONNREFUSED') &&
    afterList?.previews?.length === 1 && afterList.previews[0].sandbox_id === keptBox,
  'after sandbox_destroy every preview port refuses connections and sandbox_list shows none of them',
  refusedAfter.map((r) => r.err?.code ?? statusOf(r)).join(','));

  await stop();
  // The persistent sandbox outlived its server; its preview did not.
  const keptPort = Number(new URL(keptUrl ?? 'http://x:1/').port);
  const afterExit = await get(keptPort, '/');
  // The test's own clean-up of the sandbox the server left. Podman answers
  // a forced DELETE with 500 while the container's state is still changing
  // (seen under load): asked again, a few times, with the answer kept.
  const engineCall = (method, path) => new Promise((resolve) => {
    const req = http.request({ socketPath: engineSocket(), method, path },
      (res) => { let body = ''; res.on('data', (d) => { body += d; }); res.on('end', () => resolve({ status: res.statusCode, body })); });
    req.on('error', (e) => resolve({ status: 0, body: e.message }));
    req.end();
  });
  // It is there after its server (the engine says so), then removed. A 500 can come from a
  // DELETE that removed it all the same (seen in CI under load: 500, then 404 when asked again),
  // so a 404 after a 500 is removed too.
  const outlived = await engineCall('GET', `/containers/${keptBox}/json`);
  let removed = await engineCall('DELETE', `/containers/${keptBox}?force=1`);
  let had500 = removed.status === 500;
  for (let i = 0; i < 10 && removed.status === 500; i++) {
    await new Promise((r) => setTimeout(r, 500));
    removed = await engineCall('DELETE', `/containers/${keptBox}?force=1`);
    had500 = had500 || removed.status === 500;
  }
  h.ok(keptBox && outlived.status === 200 && afterExit.err?.code === 'ECONNREFUSED' &&
    (removed.status === 204 || (removed.status === 404 && had500)),
  'when the server exits, the preview of a sandbox that outlives it closes too',
  `${afterExit.err?.code ?? statusOf(afterExit)}, engine GET ${outlived.status}, DELETE ${removed.status} ${removed.body.trim()}`);
});
