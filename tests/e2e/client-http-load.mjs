#!/usr/bin/env node
// One remote-style client with many calls in flight over Streamable HTTP
// (issue 35): the SDK's transport opens one connection per request in
// flight (fetch), so a server that closes connections past a per-address
// count at accept loses answers. Here:
//   1. @modelcontextprotocol/sdk 1.x with 100 tools/list in flight at once,
//      three rounds, on the server's default limits: every answer comes,
//      and each lists the same tools.
//   2. the same 100 against --max-connections-per-ip 4 (calls from one
//      address at once): the rest wait their turn, none is refused.
// (Connections past an address's share, half of --max-connections, are
// still closed at accept: the rest stay for other addresses.)
//   3. a server with --max-connections 8: while 127.0.0.1 holds its share
//      (half) of the connections, idle, a call from 127.0.0.2 is served;
//      once they close, 127.0.0.1 is served again.
// No wall-clock bound: the clients' own timeouts say only "did not hang".
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-http-load.mjs
//
// Prints TAP; exits 0 only if every test passed, 77 when node_modules is missing.

import net from 'node:net';
import path from 'node:path';
import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
process.env.E2E_TIMEOUT_SECONDS ??= '300';

const { Client } = await import('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { startHttpServer } = await import('./lib/http-server.mjs');

const IN_FLIGHT = 100;
const ROUNDS = 3;
h.plan(3 + 1 + 3);

/** IN_FLIGHT tools/list at once, ROUNDS times: [answered, failures, tool counts]. */
async function burst(server, label) {
  const client = new Client({ name: `demesne-e2e-http-load-${label}`, version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(server.url), { requestInit: { headers: server.headers } });
  await client.connect(transport);
  let answered = 0;
  const failures = [];
  const counts = new Set();
  for (let round = 0; round < ROUNDS; round += 1) {
    const all = await Promise.allSettled(Array.from({ length: IN_FLIGHT }, () => client.listTools(undefined, { timeout: 120_000 })));
    for (const r of all) {
      if (r.status === 'fulfilled') {
        answered += 1;
        counts.add(r.value.tools.length);
      } else if (failures.length < 3) {
        failures.push(String(r.reason?.message ?? r.reason));
      }
    }
  }
  await client.close().catch(() => {});
  return { answered, failures, counts };
}

/** One raw 2026-07-28 POST of method on a connection of its own: resolves with the answer as text. */
function rawPost(port, token, method, from) {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host: '127.0.0.1', localAddress: from });
    let text = '';
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method,
      params: { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } } });
    sock.on('connect', () => sock.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nAuthorization: Bearer ${token}\r\n` +
      `Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMcp-Method: ${method}\r\n` +
      `MCP-Protocol-Version: 2026-07-28\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`));
    sock.setEncoding('utf8');
    sock.on('data', (d) => {
      text += d;
      if (/\r\n\r\n[\s\S]*\}\s*$/.test(text)) sock.end();
    });
    sock.on('error', (e) => { text += `\n(socket error: ${e.code})`; });
    sock.on('close', () => resolve(text));
  });
}

/** n idle connections to port, each accepted (connected) before the next. */
async function idle(port, n) {
  const socks = [];
  for (let i = 0; i < n; i += 1) {
    socks.push(await new Promise((resolve, reject) => {
      const s = net.connect(port, '127.0.0.1', () => resolve(s));
      s.on('error', reject);
    }));
  }
  return socks;
}

// Through h.run: its summary, and the output root removed when every test
// passed (it was left in /tmp after every run).
await h.run(async () => {
  const outputRoot = h.makeOutputRoot('http-load');
  let server;
  try {
    server = await startHttpServer(DEMESNE, { env: h.serverEnv(outputRoot), logFile: path.join(outputRoot, 'server.log') });
    const r = await burst(server, 'default');
    h.ok(r.answered === IN_FLIGHT * ROUNDS, `default limits: ${IN_FLIGHT} tools/list in flight at once, ${ROUNDS} rounds: every answer came (${r.answered})`,
      r.failures.join('; '));
    h.ok(r.counts.size === 1 && [...r.counts][0] > 0, 'and every answer lists the same tools', JSON.stringify([...r.counts]));
    h.equal(await server.stop(), 0, 'the server exits cleanly after the load');
  } catch (err) {
    h.failRemaining(`default limits: ${err.stack ?? err}`);
    server?.stop();
  }

  try {
    server = await startHttpServer(DEMESNE, { args: ['--max-connections-per-ip', '4'], env: h.serverEnv(outputRoot),
      logFile: path.join(outputRoot, 'server-4.log') });
    const r = await burst(server, 'four');
    h.ok(r.answered === IN_FLIGHT * ROUNDS, `4 calls at once per address: ${IN_FLIGHT} in flight wait their turn, every answer came (${r.answered})`,
      r.failures.join('; '));
    await server.stop();
  } catch (err) {
    h.fail('4 calls at once per address', err);
    server?.stop();
  }

  try {
    server = await startHttpServer(DEMESNE, { args: ['--max-connections', '8'], env: h.serverEnv(outputRoot),
      logFile: path.join(outputRoot, 'server-8.log') });
    // 127.0.0.1 opens all 8, idle: it keeps its share (half), the rest are
    // closed at accept, so the server still has room for others.
    const held = await idle(server.port, 8);
    const other = await rawPost(server.port, server.token, 'tools/list', '127.0.0.2');
    h.ok(/^HTTP\/1\.1 200/.test(other), 'while one address holds its whole share of the connections, another is served',
      other.slice(0, 300));
    for (const s of held) s.destroy();
    // The server counts a connection until it has seen it close.
    let again = '';
    for (let i = 0; i < 100 && !/^HTTP\/1\.1 200/.test(again); i += 1) {
      again = await rawPost(server.port, server.token, 'tools/list', '127.0.0.1');
      if (!/^HTTP\/1\.1 200/.test(again)) await new Promise((res) => setTimeout(res, 100));
    }
    h.ok(/^HTTP\/1\.1 200/.test(again), 'once its connections close, the first address is served again', again.slice(0, 300));
    h.equal(await server.stop(), 0, 'that server exits cleanly');
  } catch (err) {
    h.fail('another address is served', err);
    h.fail('(served again)', err);
    h.fail('(exits)', err);
    server?.stop();
  }
});
