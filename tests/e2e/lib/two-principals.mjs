// `demesne serve --http` with a token file of two names, alice and bob, and
// a real npm client connected as each: what the tests of ownership between
// principals start from (client-snapshot.mjs, client-expose.mjs).

import fs from 'node:fs';
import path from 'node:path';
import * as h from './harness.mjs';

/** The server (its log in the output root) and both clients; stop() ends all three. */
export async function serveTwoPrincipals(demesne, tag, env = {}) {
  const { Client, StreamableHTTPClientTransport } = await import('@modelcontextprotocol/client');
  const { startHttpServer } = await import('./http-server.mjs');
  const outputRoot = h.makeOutputRoot(tag);
  const tokenFile = path.join(outputRoot, 'tokens');
  const tokens = { alice: 'e2e-alice-0123456789abcdef', bob: 'e2e-bob-0123456789abcdef' };
  fs.writeFileSync(tokenFile, `alice ${tokens.alice}\nbob ${tokens.bob}\n`, { mode: 0o600 });
  const server = await startHttpServer(demesne, {
    args: ['--token-file', tokenFile], env: h.serverEnv(outputRoot, { DEMESNE_POOL: '0', ...env }),
    logFile: path.join(outputRoot, 'server.log'),
  });
  const url = new URL(server.url);
  const connect = async (who) => {
    const c = new Client({ name: who, version: '0.0.0' });
    await h.within(30_000, `connect as ${who}`, c.connect(
      new StreamableHTTPClientTransport(url, { requestInit: { headers: { Authorization: `Bearer ${tokens[who]}` } } }),
      { timeout: 20_000 }));
    return c;
  };
  const alice = await connect('alice');
  const bob = await connect('bob');
  return {
    outputRoot, server, alice, bob,
    stop: async () => {
      await alice.close().catch(() => {});
      await bob.close().catch(() => {});
      await server.stop();
    },
  };
}
