#!/usr/bin/env node
// demesne over stdio in the legacy (initialize handshake) era, with two clients:
//   1. @modelcontextprotocol/client 2.x, default mode: initialize 2025-11-25
//   2. @modelcontextprotocol/sdk 1.x: initialize 2025-06-18 (1.x always offers
//      2025-11-25, so the test rewrites the offered version on the way out,
//      which is exactly what a 2025-06-18 client sends)
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-legacy.mjs
//
// Prints TAP; exits 0 only if every test passed, 77 when node_modules is missing.

import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);

const { Client: Client2 } = await import('@modelcontextprotocol/client');
const { StdioClientTransport: Stdio2 } = await import('@modelcontextprotocol/client/stdio');
const { Client: Client1 } = await import('@modelcontextprotocol/sdk/client/index.js');
const { StdioClientTransport: Stdio1 } = await import('@modelcontextprotocol/sdk/client/stdio.js');
const { toolChecks, TOOL_CHECKS, CALL_TIMEOUT_MS } = await import('./lib/checks.mjs');

h.plan(2 * (1 + TOOL_CHECKS));

/** Observe (and optionally rewrite) the traffic of a transport before a Client connects it. */
function instrument(transport, { rewriteInitializeTo } = {}) {
  const seen = { initializeRequest: undefined, initializeResult: undefined };
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (message?.method === 'initialize') {
      if (rewriteInitializeTo) {
        message = { ...message, params: { ...message.params, protocolVersion: rewriteInitializeTo } };
      }
      seen.initializeRequest = message;
    }
    return send(message, options);
  };
  // Protocol.connect() chains a pre-set onmessage (both SDK majors).
  transport.onmessage = (message) => {
    if (seen.initializeRequest && message?.id === seen.initializeRequest.id) seen.initializeResult = message.result ?? message;
  };
  return seen;
}

await h.run(async () => {
  /* ---------- 2.x, legacy mode (the default), initialize 2025-11-25 ---------- */
  {
    const label = '2.x legacy';
    const outputRoot = h.makeOutputRoot('legacy2');
    const client = new Client2({ name: 'demesne-e2e-legacy-2x', version: '0.0.0' });
    client.onerror = (err) => h.diag(`${label} client onerror: ${err?.message ?? err}`);
    const transport = new Stdio2({ command: DEMESNE, args: ['serve'], env: h.serverEnv(outputRoot), stderr: 'inherit' });
    const seen = instrument(transport);
    let connected = false;
    try {
      await h.within(60_000, `${label} connect (initialize)`, client.connect(transport, { timeout: 30_000 }));
      connected = true;
      h.ok(client.getNegotiatedProtocolVersion() === '2025-11-25' && client.getProtocolEra() === 'legacy' &&
          typeof client.getServerVersion()?.name === 'string' && client.getServerCapabilities()?.tools,
        `${label}: initialize 2025-11-25 is answered with 2025-11-25, serverInfo and capabilities.tools`,
        `initialize request: ${JSON.stringify(seen.initializeRequest)}\ninitialize result: ${JSON.stringify(seen.initializeResult)}`);
    } catch (err) {
      h.fail(`${label}: initialize 2025-11-25 is answered with 2025-11-25, serverInfo and capabilities.tools`, err);
    }
    if (connected) {
      await toolChecks(label, {
        listTools: () => client.listTools(undefined, { timeout: CALL_TIMEOUT_MS }),
        callTool: (params) => client.callTool(params, { timeout: CALL_TIMEOUT_MS }),
      });
    } else {
      for (let i = 0; i < TOOL_CHECKS; i += 1) h.fail(`${label}: not reached (connect failed)`, 'connect failed');
    }
    await client.close().catch(() => {});
  }

  /* ---------- 1.x, initialize 2025-06-18 ---------- */
  {
    const label = '1.x 2025-06-18';
    const outputRoot = h.makeOutputRoot('legacy1');
    const client = new Client1({ name: 'demesne-e2e-legacy-1x', version: '0.0.0' });
    client.onerror = (err) => h.diag(`${label} client onerror: ${err?.message ?? err}`);
    const transport = new Stdio1({ command: DEMESNE, args: ['serve'], env: h.serverEnv(outputRoot), stderr: 'inherit' });
    const seen = instrument(transport, { rewriteInitializeTo: '2025-06-18' });
    let connected = false;
    try {
      await h.within(60_000, `${label} connect (initialize)`, client.connect(transport, { timeout: 30_000 }));
      connected = true;
      h.ok(seen.initializeResult?.protocolVersion === '2025-06-18' &&
          typeof client.getServerVersion()?.name === 'string' && client.getServerCapabilities()?.tools,
        `${label}: initialize 2025-06-18 is answered with 2025-06-18, serverInfo and capabilities.tools`,
        `initialize request: ${JSON.stringify(seen.initializeRequest)}\ninitialize result: ${JSON.stringify(seen.initializeResult)}`);
    } catch (err) {
      h.fail(`${label}: initialize 2025-06-18 is answered with 2025-06-18, serverInfo and capabilities.tools`, err);
    }
    if (connected) {
      await toolChecks(label, {
        listTools: () => client.listTools(undefined, { timeout: CALL_TIMEOUT_MS }),
        // 1.x: callTool(params, resultSchema, options)
        callTool: (params) => client.callTool(params, undefined, { timeout: CALL_TIMEOUT_MS }),
      });
    } else {
      for (let i = 0; i < TOOL_CHECKS; i += 1) h.fail(`${label}: not reached (connect failed)`, 'connect failed');
    }
    await client.close().catch(() => {});
  }
});
