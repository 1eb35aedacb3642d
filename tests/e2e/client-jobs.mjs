#!/usr/bin/env node
// Background jobs, progress and the end-of-job notification, as a real MCP
// client sees them: @modelcontextprotocol/client 2.x, modern era, over stdio.
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/client-jobs.mjs

import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);

const { Client } = await import('@modelcontextprotocol/client');
const { StdioClientTransport } = await import('@modelcontextprotocol/client/stdio');
const { CALL_TIMEOUT_MS } = await import('./lib/checks.mjs');

h.plan(10);

await h.run(async () => {
  const client = new Client(
    { name: 'demesne-e2e-jobs', version: '0.0.0' },
    { versionNegotiation: { mode: { pin: '2026-07-28' }, probe: { timeoutMs: 30_000 } } },
  );
  client.onerror = (err) => h.diag(`client onerror: ${err?.message ?? err}`);
  const messages = [];
  client.setNotificationHandler('notifications/message', (n) => { messages.push(n.params); });
  const transport = new StdioClientTransport({
    command: DEMESNE, args: ['serve'], env: h.serverEnv(h.makeOutputRoot('jobs')), stderr: 'inherit',
  });
  await h.within(60_000, 'connect', client.connect(transport, { timeout: 30_000 }));
  const call = (name, args, opts = {}) => client.callTool({ name, arguments: args }, { timeout: CALL_TIMEOUT_MS, ...opts });

  // 1-2: the client validates the background answer against the tool's outputSchema.
  const started = await call('sandbox_script', { command: 'echo start; sleep 2; echo end; exit 4', background: true });
  const jobId = started.structuredContent?.job_id;
  h.ok(!started.isError && /^job-[0-9a-f]+$/.test(jobId ?? ''), 'background: true answers with a job id',
    JSON.stringify(started));
  h.equal(started.structuredContent?.status, 'running', 'and status running');

  // 3-4: sandbox_wait gives the final result of the script.
  const done = await call('sandbox_wait', { job_id: jobId, timeout_seconds: 60 });
  h.equal(done.structuredContent?.exit_code, 4, 'sandbox_wait: the final result carries exit_code 4');
  h.equal(done.structuredContent?.stdout, 'start\nend\n', 'and the whole stdout');

  // 5: the end-of-job notification reached the client's handler.
  const note = messages.find((m) => m?.data?.job_id === jobId);
  h.ok(note && note.logger === 'demesne.jobs' && note.data.status === 'failed' && note.data.exit_code === 4,
    'notifications/message announced the end (status failed, exit_code 4)', JSON.stringify(messages));

  // 6: progress reaches onprogress for a foreground call that runs a while.
  const progress = [];
  const slow = await call('sandbox_script', { command: 'sleep 2.5; echo ok' }, {
    onprogress: (p) => progress.push(p.progress), resetTimeoutOnProgress: true,
  });
  h.ok(!slow.isError && progress.length >= 1 && progress.every((p, i) => i === 0 || p > progress[i - 1]),
    `progress notifications arrive and grow (${progress.join(', ')})`, JSON.stringify(slow));

  // 7-8: cancel a running job; it ends cancelled.
  const long = await call('sandbox_script', { command: 'sleep 60', background: true });
  const longId = long.structuredContent?.job_id;
  const cancelled = await call('sandbox_cancel', { job_id: longId });
  h.equal(cancelled.structuredContent?.status, 'cancelled', 'sandbox_cancel answers cancelled');
  const after = await call('sandbox_wait', { job_id: longId, timeout_seconds: 30 });
  h.equal(after.structuredContent?.status, 'cancelled', 'the cancelled job ends cancelled');

  // 9-10: status of a finished job, and an unknown one.
  const status = await call('sandbox_status', { job_id: jobId, include_stdout_tail: true });
  h.ok(status.structuredContent?.status === 'failed' && status.structuredContent?.stdout_tail === 'start\nend\n',
    'sandbox_status of the ended job: failed, with its stdout tail', JSON.stringify(status));
  const unknown = await call('sandbox_status', { job_id: 'job-000000000000' });
  h.ok(unknown.isError && /unknown job/.test(h.firstText(unknown)), 'an unknown job id is a clear isError result',
    JSON.stringify(unknown));

  await client.close();
});
