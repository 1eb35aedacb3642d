#!/usr/bin/env node
// demesne serve --http with the npm clients' Streamable HTTP transports:
//   1. @modelcontextprotocol/client 2.x, legacy era (initialize, Mcp-Session-Id)
//   2. @modelcontextprotocol/client 2.x pinned to 2026-07-28 (per-request POSTs)
//   3. @modelcontextprotocol/sdk 1.x (legacy)
//   4. without the token the server made: 401; a server with --token-file of
//      two named tokens, with and without a token, and one token's client
//      unable to read or list the other's run outputs (resources)
// Every client sends the server's bearer token (Authorization: Bearer, through
// the transports' requestInit), which the server made and named in its log.
// Each runs sandbox_script with progress; a call whose request is aborted is
// cancelled (its container removed) and the next call still works.
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-http.mjs
//
// Prints TAP; exits 0 only if every test passed, 77 when node_modules is missing.

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
process.env.E2E_TIMEOUT_SECONDS ??= '300';

const { Client: Client2, StreamableHTTPClientTransport: Http2 } = await import('@modelcontextprotocol/client');
const { Client: Client1 } = await import('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport: Http1 } = await import('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { toolChecks, TOOL_CHECKS, CALL_TIMEOUT_MS } = await import('./lib/checks.mjs');
const { startHttpServer, waitContainers } = await import('./lib/http-server.mjs');

const MODERN = '2026-07-28';
const PROGRESS_CHECKS = 2;
const CANCEL_CHECKS = 3;

const REMOTE_CHECKS = 7;

h.plan(1 + (2 + TOOL_CHECKS + PROGRESS_CHECKS + CANCEL_CHECKS) + (1 + TOOL_CHECKS + PROGRESS_CHECKS + CANCEL_CHECKS + REMOTE_CHECKS) +
  (1 + TOOL_CHECKS) + 1 + 2 + 1 + 2 + 2 + 3);

/** A client with no disk in common with the server: a file's bytes go up in
 * sandbox_upload's content and come back in sandbox_download's. */
async function remoteFileChecks(label, callTool, client) {
  const bytes = Buffer.alloc(70_000);
  for (let i = 0; i < bytes.length; i += 1) bytes[i] = (i * 7 + (i >> 8)) & 255;
  const digest = crypto.createHash('sha256').update(bytes).digest('hex');
  let sb;
  try {
    const made = await callTool({ name: 'sandbox_create', arguments: { image: 'base', egress: 'none' } });
    sb = made.structuredContent?.sandbox_id;
    const up = await callTool({ name: 'sandbox_upload',
      arguments: { sandbox_id: sb, content: bytes.toString('base64'), dst: '/workspace/in/data.bin' } });
    const sum = await callTool({ name: 'sandbox_exec',
      arguments: { sandbox_id: sb, command: 'sha256sum < /workspace/in/data.bin | cut -d" " -f1; cp /workspace/in/data.bin /workspace/out.bin' } });
    h.ok(!up.isError && up.structuredContent?.bytes === bytes.length && sum.structuredContent?.stdout === `${digest}\n`,
      `${label}: sandbox_upload with content puts the bytes in the sandbox (${bytes.length} bytes, sha256 matches)`,
      JSON.stringify(up.structuredContent ?? up));
    const down = await callTool({ name: 'sandbox_download',
      arguments: { sandbox_id: sb, src: '/workspace/out.bin', return_content: true } });
    const back = Buffer.from(down.structuredContent?.content ?? '', 'base64');
    h.ok(!down.isError && down.structuredContent?.content_encoding === 'base64' && back.equals(bytes),
      `${label}: sandbox_download with return_content brings the same bytes back in the result`,
      JSON.stringify({ ...down.structuredContent, content: `${back.length} bytes` }));
    const link = down.content?.find((c) => c.type === 'resource_link');
    const read = link ? await client.readResource({ uri: link.uri }, { timeout: CALL_TIMEOUT_MS }) : null;
    h.ok(link?.uri === `demesne://output/${sb}/downloads/out.bin` && link.size === bytes.length &&
      Buffer.from(read?.contents?.[0]?.blob ?? '', 'base64').equals(bytes),
      `${label}: the download's result links the file (resource_link), and resources/read gives its bytes (blob)`,
      JSON.stringify(down.content?.filter((c) => c.type !== 'text')));
  } catch (err) {
    h.fail(`${label}: a file up and down through the call alone`, err);
    h.fail(`${label}: (download)`, err);
    h.fail(`${label}: (download link)`, err);
  }
  if (sb) await callTool({ name: 'sandbox_destroy', arguments: { sandbox_id: sb } }).catch(() => {});

  /* A run's output files: linked from its result, read as resources. */
  try {
    const run = await callTool({ name: 'sandbox_script', arguments: { egress: 'none',
      command: 'printf "report line\\n" > report.txt; mkdir -p img; printf "\\x89PNG\\x00\\x01" > img/pic.png' } });
    const links = (run.content ?? []).filter((c) => c.type === 'resource_link');
    const names = links.map((l) => l.title).sort().join(',');
    h.ok(!run.isError && names === 'img/pic.png,report.txt,stderr.log,stdout.log' &&
      links.every((l) => l.uri.startsWith(`demesne://output/${run.structuredContent.run_id}/`)),
      `${label}: sandbox_script's result links each output file (resource_link: ${names})`, JSON.stringify(links));
    const report = links.find((l) => l.title === 'report.txt');
    const pic = links.find((l) => l.title === 'img/pic.png');
    const text = await client.readResource({ uri: report.uri }, { timeout: CALL_TIMEOUT_MS });
    const blob = await client.readResource({ uri: pic.uri }, { timeout: CALL_TIMEOUT_MS });
    h.ok(text.contents[0].text === 'report line\n' && text.contents[0].mimeType === 'text/plain' &&
      Buffer.from(blob.contents[0].blob, 'base64').equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1])) &&
      blob.contents[0].mimeType === 'image/png',
      `${label}: resources/read gives a text file as text and a binary one as a base64 blob`,
      JSON.stringify({ text, blob }));
    const templates = await client.listResourceTemplates(undefined, { timeout: CALL_TIMEOUT_MS });
    const listed = await client.listResources(undefined, { timeout: CALL_TIMEOUT_MS });
    h.ok(templates.resourceTemplates?.[0]?.uriTemplate === 'demesne://output/{dir}/{+path}' &&
      listed.resources.some((r) => r.uri === report.uri),
      `${label}: resources/templates/list names the URI scheme, resources/list the files`,
      JSON.stringify({ templates, n: listed.resources.length }));
    let refused;
    try {
      await client.readResource({ uri: 'demesne://output/run-x/../../etc/passwd' }, { timeout: CALL_TIMEOUT_MS });
    } catch (err) {
      refused = err;
    }
    h.ok(refused && /not a resource of this server/.test(refused.message),
      `${label}: resources/read refuses a URI that climbs out`, String(refused?.message ?? 'no error'));
  } catch (err) {
    for (const what of ['links', 'read', 'lists', 'climb']) h.fail(`${label}: output files as resources (${what})`, err);
  }
}

/** A call that runs 2.5 s and reports progress on the way. */
async function progressChecks(label, callTool) {
  const seen = [];
  try {
    const result = await h.within(CALL_TIMEOUT_MS, `${label} tools/call with progress`, callTool(
      { name: 'sandbox_script', arguments: { command: 'echo a; sleep 2.5; echo b; exit 3', egress: 'none' } },
      (p) => seen.push(p),
    ));
    h.ok(seen.length >= 1 && seen.every((p, i) => i === 0 || p.progress > seen[i - 1].progress),
      `${label}: progress notifications arrive on the call's stream, growing (${seen.length})`,
      `progress: ${JSON.stringify(seen)}`);
    h.ok(result?.structuredContent?.exit_code === 3 && result?.structuredContent?.stdout === 'a\nb\n',
      `${label}: then the result (exit 3, stdout a b)`, `result: ${JSON.stringify(result)}`);
  } catch (err) {
    h.fail(`${label}: progress notifications arrive on the call's stream`, err);
    h.fail(`${label}: then the result`, err);
  }
}

/** Aborts a running call: over HTTP its stream closes, which cancels it. */
async function cancelChecks(label, serverPid, callTool) {
  const ac = new AbortController();
  const slow = callTool({ name: 'sandbox_script', arguments: { command: 'sleep 60', egress: 'none' } }, ac.signal);
  const outcome = slow.then(() => 'resolved', () => 'rejected');
  const running = await waitContainers(serverPid, 1, 60_000);
  ac.abort('e2e cancel');
  h.equal(await outcome, 'rejected', `${label}: an aborted call rejects (its container was running: ${running})`);
  const t0 = Date.now();
  const left = await waitContainers(serverPid, 0, 15_000);
  h.equal(left, 0, `${label}: the aborted call's container is removed (${Date.now() - t0} ms)`);
  try {
    const next = await h.within(CALL_TIMEOUT_MS, `${label} tools/call after a cancel`,
      callTool({ name: 'sandbox_script', arguments: { command: 'echo after-cancel', egress: 'none' } }));
    h.ok(next?.structuredContent?.stdout === 'after-cancel\n', `${label}: the next call works`, JSON.stringify(next));
  } catch (err) {
    h.fail(`${label}: the next call works`, err);
  }
}

/** A client that sends no token must not get in. */
async function refusedWithoutToken(url, name) {
  const anon = new Client2({ name: 'no-token', version: '0.0.0' });
  try {
    await h.within(30_000, `${name}: connect`, anon.connect(new Http2(url), { timeout: 20_000 }));
    h.fail(name, 'it connected');
  } catch (err) {
    h.ok(/401|nauthori/i.test(String(err?.message ?? err)) || err?.status === 401 || err?.name === 'UnauthorizedError',
      name, String(err?.stack ?? err));
  }
  await anon.close().catch(() => {});
}

await h.run(async () => {
  const outputRoot = h.makeOutputRoot('http');
  let server;
  try {
    server = await startHttpServer(DEMESNE, { env: h.serverEnv(outputRoot), logFile: path.join(outputRoot, 'server.log') });
    h.pass(`demesne serve --http 127.0.0.1:0 listens (${server.url})`);
  } catch (err) {
    h.fail('demesne serve --http 127.0.0.1:0 listens', err);
    h.failRemaining('no server');
    return;
  }
  const url = new URL(server.url);
  const pid = server.child.pid;
  const auth = { requestInit: { headers: server.headers } };
  h.diag(`token file ${server.tokenFile}`);

  /* ---------- no token: the server that made one refuses ---------- */
  await refusedWithoutToken(url, 'loopback without the token the server made: connect fails (401)');

  /* ---------- 2.x, legacy era ---------- */
  {
    const label = '2.x legacy over HTTP';
    const client = new Client2({ name: 'demesne-e2e-http-legacy', version: '0.0.0' });
    client.onerror = (err) => h.diag(`${label} client onerror: ${err?.message ?? err}`);
    const records = [];
    client.setNotificationHandler('notifications/message', (n) => { if (n.params?.logger === 'demesne') records.push(n.params); });
    const transport = new Http2(url, auth);
    try {
      await h.within(60_000, `${label} connect`, client.connect(transport, { timeout: 30_000 }));
      await client.setLoggingLevel('debug', { timeout: CALL_TIMEOUT_MS });
      h.ok(client.getProtocolEra() === 'legacy' && client.getNegotiatedProtocolVersion() === '2025-11-25',
        `${label}: initialize negotiates 2025-11-25`, `era ${client.getProtocolEra()}`);
      h.ok(/^[0-9a-f]{32}$/.test(transport.sessionId ?? ''), `${label}: the server issued an Mcp-Session-Id`,
        `sessionId: ${transport.sessionId}`);
      await toolChecks(label, {
        listTools: () => client.listTools(undefined, { timeout: CALL_TIMEOUT_MS }),
        callTool: (params) => client.callTool(params, { timeout: CALL_TIMEOUT_MS }),
      });
      await progressChecks(label, (params, onprogress) => client.callTool(params, { timeout: CALL_TIMEOUT_MS, onprogress }));
      await cancelChecks(label, pid, (params, signal) => client.callTool(params, { timeout: CALL_TIMEOUT_MS, signal }));
      h.ok(records.length > 0, `${label}: after logging/setLevel debug, the server's log records arrive (${records.length}; one token)`);
    } catch (err) {
      h.fail(`${label}: connect`, err);
      h.fail(`${label}: log records`, err);
    }
    await transport.terminateSession?.().catch((err) => h.diag(`terminateSession: ${err?.message ?? err}`));
    await client.close().catch(() => {});
  }

  /* ---------- 2.x, pinned to 2026-07-28 ---------- */
  {
    const label = '2.x 2026-07-28 over HTTP';
    const client = new Client2(
      { name: 'demesne-e2e-http-modern', version: '0.0.0' },
      { versionNegotiation: { mode: { pin: MODERN }, probe: { timeoutMs: 30_000 } } },
    );
    client.onerror = (err) => h.diag(`${label} client onerror: ${err?.message ?? err}`);
    const transport = new Http2(url, auth);
    try {
      await h.within(60_000, `${label} connect`, client.connect(transport, { timeout: 30_000 }));
      h.ok(client.getProtocolEra() === 'modern' && client.getNegotiatedProtocolVersion() === MODERN && !transport.sessionId,
        `${label}: server/discover over HTTP gives the modern era, no session`,
        `era ${client.getProtocolEra()} session ${transport.sessionId}`);
      await toolChecks(label, {
        listTools: () => client.listTools(undefined, { timeout: CALL_TIMEOUT_MS }),
        callTool: (params) => client.callTool(params, { timeout: CALL_TIMEOUT_MS }),
      });
      await progressChecks(label, (params, onprogress) => client.callTool(params, { timeout: CALL_TIMEOUT_MS, onprogress }));
      await cancelChecks(label, pid, (params, signal) => client.callTool(params, { timeout: CALL_TIMEOUT_MS, signal }));
      await remoteFileChecks(label, (params) => client.callTool(params, { timeout: CALL_TIMEOUT_MS }), client);
    } catch (err) {
      h.fail(`${label}: connect`, err);
    }
    await client.close().catch(() => {});
  }

  /* ---------- 1.x ---------- */
  {
    const label = '1.x over HTTP';
    const client = new Client1({ name: 'demesne-e2e-http-1x', version: '0.0.0' });
    client.onerror = (err) => h.diag(`${label} client onerror: ${err?.message ?? err}`);
    const transport = new Http1(url, auth);
    try {
      await h.within(60_000, `${label} connect`, client.connect(transport, { timeout: 30_000 }));
      h.ok(typeof transport.sessionId === 'string' && client.getServerCapabilities()?.tools,
        `${label}: initialize gives a session and capabilities.tools`);
      await toolChecks(label, {
        listTools: () => client.listTools(undefined, { timeout: CALL_TIMEOUT_MS }),
        callTool: (params) => client.callTool(params, undefined, { timeout: CALL_TIMEOUT_MS }),
      });
    } catch (err) {
      h.fail(`${label}: connect`, err);
    }
    await transport.terminateSession?.().catch(() => {});
    await client.close().catch(() => {});
  }

  h.equal(await server.stop(), 0, 'SIGTERM: the server exits 0');

  /* ---------- bearer tokens, two principals ---------- */
  {
    const tokenFile = path.join(outputRoot, 'token');
    const token = 'e2e-token-0123456789abcdef';
    const otherToken = 'e2e-other-0123456789abcdef';
    fs.writeFileSync(tokenFile, `alice ${token}\nbob ${otherToken}\n`, { mode: 0o600 });
    let tokenServer;
    try {
      tokenServer = await startHttpServer(DEMESNE, {
        args: ['--token-file', tokenFile], env: h.serverEnv(outputRoot), logFile: path.join(outputRoot, 'token-server.log'),
      });
    } catch (err) {
      for (let i = 0; i < 4; i += 1) h.fail('token server starts', err);
      return;
    }
    const tokenUrl = new URL(tokenServer.url);
    await refusedWithoutToken(tokenUrl, 'without the token, connect fails (401)');
    const withToken = new Client2({ name: 'token', version: '0.0.0' });
    const other = new Client2({ name: 'other-token', version: '0.0.0' });
    const aliceRecords = [];
    withToken.setNotificationHandler('notifications/message', (n) => { if (n.params?.logger === 'demesne') aliceRecords.push(n.params); });
    try {
      await h.within(30_000, 'connect with the token', withToken.connect(
        new Http2(tokenUrl, { requestInit: { headers: { Authorization: `Bearer ${token}` } } }), { timeout: 20_000 }));
      const listed = await withToken.listTools(undefined, { timeout: CALL_TIMEOUT_MS });
      h.ok(listed.tools.some((t) => t.name === 'sandbox_script'), 'with Authorization: Bearer TOKEN, tools/list works');
      await withToken.setLoggingLevel('debug', { timeout: CALL_TIMEOUT_MS });
      /* One client's outputs are not another's: bob cannot read or list
       * what alice's run wrote. */
      await h.within(30_000, 'connect with the other token', other.connect(
        new Http2(tokenUrl, { requestInit: { headers: { Authorization: `Bearer ${otherToken}` } } }), { timeout: 20_000 }));
      const run = await withToken.callTool({ name: 'sandbox_script', arguments: { egress: 'none', command: 'echo alice-only > secret.txt' } },
        { timeout: CALL_TIMEOUT_MS });
      const link = run.content.find((c) => c.type === 'resource_link' && c.title === 'secret.txt');
      const mine = await withToken.readResource({ uri: link.uri }, { timeout: CALL_TIMEOUT_MS });
      let refused;
      try {
        await other.readResource({ uri: link.uri }, { timeout: CALL_TIMEOUT_MS });
      } catch (err) {
        refused = err;
      }
      /* The server answers -32002 on the legacy eras and -32602 on
       * 2026-07-28 (SEP-2164); this SDK turns a received -32002 into
       * -32602 either way (test-schemas checks the raw code). */
      h.ok(mine.contents[0].text === 'alice-only\n' && refused?.code === -32602 && /not found/.test(refused?.message),
        'another token\'s client gets "not found" for a run\'s file its owner reads',
        `owner: ${JSON.stringify(mine)} other (${other.getProtocolEra()}): ${refused?.code} ${refused?.message}`);
      const theirs = await other.listResources(undefined, { timeout: CALL_TIMEOUT_MS });
      const alices = await withToken.listResources(undefined, { timeout: CALL_TIMEOUT_MS });
      h.ok(alices.resources.some((r) => r.uri === link.uri) && !theirs.resources.some((r) => r.uri === link.uri),
        'and resources/list shows the file to its owner only', `owner ${alices.resources.length}, other ${theirs.resources.length}`);
      /* Nor her sandboxes and jobs: not listed, and used by id they answer
       * as unknown ones do. */
      const call = (client, name, args) => client.callTool({ name, arguments: args }, { timeout: CALL_TIMEOUT_MS });
      const box = (await call(withToken, 'sandbox_create', { image: 'base', egress: 'none' })).structuredContent?.sandbox_id;
      const job = (await call(withToken, 'sandbox_script', { command: 'sleep 1', egress: 'none', background: true }))
        .structuredContent?.job_id;
      const bobList = (await call(other, 'sandbox_list', {})).structuredContent;
      const aliceList = (await call(withToken, 'sandbox_list', {})).structuredContent;
      h.ok(aliceList.sandboxes.some((b) => b.sandbox_id === box) && aliceList.jobs.some((j) => j.job_id === job) &&
        !bobList.sandboxes.some((b) => b.sandbox_id === box) && !bobList.jobs.some((j) => j.job_id === job),
        'sandbox_list shows a sandbox and a job to their owner only', JSON.stringify({ aliceList, bobList }));
      const tries = [
        await call(other, 'sandbox_exec', { sandbox_id: box, command: 'cat /etc/hostname' }),
        await call(other, 'sandbox_download', { sandbox_id: box, src: '/etc/hostname' }),
        await call(other, 'sandbox_destroy', { sandbox_id: box }),
        await call(other, 'sandbox_wait', { job_id: job, timeout_seconds: 5 }),
        await call(other, 'sandbox_cancel', { job_id: job }),
      ];
      const texts = tries.map((t) => `${t.isError ? 'error' : 'ok'}: ${t.content?.[0]?.text}`);
      h.ok(tries.every((t) => t.isError && /unknown (sandbox|job)/.test(t.content?.[0]?.text ?? '')),
        'another token\'s exec, download, destroy, wait and cancel are refused as for unknown ids', texts.join(' | '));
      const still = await call(withToken, 'sandbox_exec', { sandbox_id: box, command: 'echo mine' });
      h.equal(still.structuredContent?.stdout, 'mine\n', 'and the owner\'s sandbox is untouched');
      await call(withToken, 'sandbox_destroy', { sandbox_id: box });
      await other.callTool({ name: 'sandbox_script', arguments: { egress: 'none', command: 'echo bob-was-here' } }, { timeout: CALL_TIMEOUT_MS });
      await new Promise((resolve) => { setTimeout(resolve, 500); });
      h.equal(aliceRecords.length, 0, 'with two principals no session gets the server\'s log records (they tell of every client\'s work)');
    } catch (err) {
      h.fail('with Authorization: Bearer TOKEN, tools/list works', err);
      h.fail('another token cannot read or list the run\'s files', err);
      h.fail('(list)', err);
      h.fail('(log records)', err);
      h.fail('(sandbox_list)', err);
      h.fail('(other ids)', err);
      h.fail('(owner untouched)', err);
    }
    await withToken.close().catch(() => {});
    await other.close().catch(() => {});
    await tokenServer.stop();
  }
});
