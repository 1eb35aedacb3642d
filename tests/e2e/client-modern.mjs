#!/usr/bin/env node
// demesne over stdio with @modelcontextprotocol/client 2.x in the modern
// (2026-07-28, per-request _meta, no initialize) era.
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-modern.mjs
//
// The client is pinned to 2026-07-28 (versionNegotiation { pin }), so a server
// that only speaks the legacy era fails here instead of silently falling back.
// Prints TAP; exits 0 only if every test passed, 77 when node_modules is missing.

import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);

const { Client } = await import('@modelcontextprotocol/client');
const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
const { toolChecks, TOOL_CHECKS, CALL_TIMEOUT_MS } = await import('./lib/checks.mjs');

const MODERN = '2026-07-28';

h.plan(3 + TOOL_CHECKS + 1);

await h.run(async () => {
  const outputRoot = h.makeOutputRoot('modern');
  const client = new Client(
    { name: 'demesne-e2e-modern', version: '0.0.0' },
    { versionNegotiation: { mode: { pin: MODERN }, probe: { timeoutMs: 30_000 } } },
  );
  client.onerror = (err) => h.diag(`client onerror: ${err?.message ?? err}`);
  const transport = new StdioClientTransport({
    command: DEMESNE,
    args: ['serve'],
    env: h.serverEnv(outputRoot),
    stderr: 'inherit',
  });

  // 1: connect = server/discover probe (on a short-lived sibling process) pinned to 2026-07-28
  try {
    await h.within(60_000, 'connect (server/discover)', client.connect(transport, { timeout: 30_000 }));
    h.ok(client.getProtocolEra() === 'modern' && client.getNegotiatedProtocolVersion() === MODERN,
      `connect negotiates the modern era ${MODERN} via server/discover`,
      `era=${client.getProtocolEra()} version=${client.getNegotiatedProtocolVersion()}`);
  } catch (err) {
    h.fail(`connect negotiates the modern era ${MODERN} via server/discover`, err);
    h.failRemaining('connect failed');
    return;
  }

  // 2-3: the DiscoverResult
  const discover = client.getDiscoverResult();
  h.ok(Array.isArray(discover?.supportedVersions) && discover.supportedVersions.includes(MODERN) &&
      discover?.capabilities && typeof discover.capabilities.tools === 'object',
    'server/discover lists 2026-07-28 in supportedVersions and advertises capabilities.tools',
    `discover: ${JSON.stringify(discover)}`);
  const info = client.getServerVersion();
  h.ok(typeof info?.name === 'string' && typeof info?.version === 'string',
    'server/discover carries _meta["io.modelcontextprotocol/serverInfo"] {name, version}',
    `serverInfo: ${JSON.stringify(info)}`);

  // 4-11
  await toolChecks('2.x modern', {
    listTools: () => client.listTools(undefined, { timeout: CALL_TIMEOUT_MS }),
    callTool: (params) => client.callTool(params, { timeout: CALL_TIMEOUT_MS }),
  });

  // 12: notifications/cancelled stops a running call and the session stays usable
  const name = 'a cancelled sandbox_script (sleep 60) does not hold up the next call';
  try {
    const ac = new AbortController();
    const slow = client.callTool(
      { name: 'sandbox_script', arguments: { command: 'sleep 60', egress: 'none' } },
      { signal: ac.signal, timeout: CALL_TIMEOUT_MS },
    );
    const slowOutcome = slow.then(() => 'resolved', () => 'rejected');
    setTimeout(() => ac.abort('e2e cancel'), 2000);
    await slowOutcome;
    const t0 = Date.now();
    const next = await h.within(30_000, 'tools/call after a cancel', client.callTool(
      { name: 'sandbox_script', arguments: { command: 'echo after-cancel', egress: 'none' } },
      { timeout: 30_000 },
    ));
    h.ok(next?.structuredContent?.stdout === 'after-cancel\n' && !next?.isError, name,
      `after ${Date.now() - t0} ms: ${JSON.stringify(next)}`);
  } catch (err) {
    h.fail(name, err);
  }

  await client.close().catch(() => {});
});
