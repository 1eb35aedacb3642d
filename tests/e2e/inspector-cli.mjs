#!/usr/bin/env node
// demesne driven by the MCP Inspector's CLI mode:
//
//   npx mcp-inspector --cli --format json $DEMESNE serve -e DEMESNE_OUTPUT_ROOT=... \
//       --method tools/list
//   npx mcp-inspector --cli --format json $DEMESNE serve -e ... \
//       --method tools/call --tool-name sandbox_script --tool-args-json '{...}'
//
// once in the inspector's default (legacy, initialize) era and once with
// --protocol-era modern (server/discover, then per-request _meta, on the SAME
// server process). Run as:
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/inspector-cli.mjs
//
// Notes: run npx exactly as `npx mcp-inspector --cli ...` (an npx flag such as
// `--no` before the package name makes npm swallow `--cli`/`--format` and start
// the web UI instead). The inspector passes the server only
// HOME/LOGNAME/PATH/SHELL/TERM/USER plus its `-e` pairs, so every variable the
// server needs is forwarded with -e. It coerces string values of
// integer-typed arguments ("x" becomes null), so the bad-argument case here
// uses an unknown property instead.
//
// Prints TAP; exits 0 only if every test passed, 77 when node_modules is missing.

import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();

const RUN_TIMEOUT_MS = Number(process.env.E2E_CALL_TIMEOUT_SECONDS ?? 100) * 1000;
const FORWARDED = ['XDG_RUNTIME_DIR', 'CONTAINER_HOST', 'DOCKER_HOST', 'TMPDIR'];

h.plan(7);

/** Run one inspector CLI invocation; resolves {code, stdout, stderr, json}. */
function inspector(outputRoot, extraArgs) {
  const env = [`DEMESNE_OUTPUT_ROOT=${outputRoot}`];
  for (const [k, v] of Object.entries(process.env)) {
    if ((k.startsWith('DEMESNE_') && k !== 'DEMESNE_OUTPUT_ROOT') || FORWARDED.includes(k)) env.push(`${k}=${v}`);
  }
  const args = ['mcp-inspector', '--cli', '--format', 'json', DEMESNE, 'serve',
    ...env.flatMap((kv) => ['-e', kv]), ...extraArgs];
  return new Promise((resolve) => {
    const child = h.spawnGroup('npx', args, {
      cwd: h.E2E_DIR,
      env: { ...process.env, MCP_INSPECTOR_SECRET_STORE: 'memory' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    const timer = setTimeout(() => {
      stderr += `\n[e2e] inspector still running after ${RUN_TIMEOUT_MS} ms: killing process group ${child.pid}`;
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ }
    }, RUN_TIMEOUT_MS);
    child.on('error', (err) => { stderr += `\n[e2e] spawn error: ${err.message}`; });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      let json;
      try { json = JSON.parse(stdout.trim()); } catch {
        const last = stdout.trim().split('\n').pop();
        try { json = JSON.parse(last); } catch { json = undefined; }
      }
      resolve({ code: code ?? `signal ${signal}`, stdout, stderr, json, argv: `npx ${args.join(' ')}` });
    });
  });
}

function explain(r) {
  return `command: ${r.argv}\nexit: ${r.code}\nstdout: ${r.stdout.slice(0, 4000)}\nstderr: ${r.stderr.slice(-4000)}`;
}

function checkListed(r, era) {
  const tools = r.json?.result?.tools ?? [];
  const tool = tools.find((t) => t?.name === 'sandbox_script');
  return h.ok(tool && tool.inputSchema?.type === 'object' && tool.inputSchema?.additionalProperties === false,
    `${era}: tools/list output has sandbox_script with inputSchema.additionalProperties false`, explain(r));
}

function checkEcho(r, era) {
  const res = r.json?.result;
  const sc = res?.structuredContent;
  return h.ok(r.code === 0 && !res?.isError && sc?.exit_code === 3 && sc?.stdout === 'hi\n',
    `${era}: tools/call sandbox_script "echo hi; exit 3" exits 0 with exit_code 3, stdout "hi\\n", isError false`,
    explain(r));
}

const ECHO_ARGS = JSON.stringify({ command: 'echo hi; exit 3', egress: 'none' });

await h.run(async () => {
  const outputRoot = h.makeOutputRoot('inspector');

  // legacy (the inspector's default era for an ad-hoc stdio target)
  const list = await inspector(outputRoot, ['--method', 'tools/list']);
  h.ok(list.code === 0 && list.json?.result, 'legacy: tools/list exits 0 and prints a JSON result', explain(list));
  checkListed(list, 'legacy');

  const call = await inspector(outputRoot, ['--method', 'tools/call', '--tool-name', 'sandbox_script', '--tool-args-json', ECHO_ARGS]);
  h.ok(call.code === 0 && call.json?.result, 'legacy: tools/call exits 0 and prints a JSON result', explain(call));
  checkEcho(call, 'legacy');

  const bad = await inspector(outputRoot, ['--method', 'tools/call', '--tool-name', 'sandbox_script',
    '--tool-args-json', JSON.stringify({ command: 'echo hi', no_such_argument: 1 })]);
  h.ok(bad.code === 5 && bad.json?.result?.isError === true &&
      typeof bad.json.result.content?.[0]?.text === 'string' && bad.json.result.content[0].text.length > 0,
    'legacy: an unknown argument gives isError true with a message (inspector exit 5, tool_is_error)', explain(bad));

  // modern: server/discover probe in place, then per-request _meta on the same process
  const mlist = await inspector(outputRoot, ['--protocol-era', 'modern', '--method', 'tools/list']);
  h.ok(mlist.code === 0 && (mlist.json?.result?.tools ?? []).some((t) => t?.name === 'sandbox_script'),
    'modern: tools/list (--protocol-era modern) exits 0 and lists sandbox_script', explain(mlist));

  const mcall = await inspector(outputRoot, ['--protocol-era', 'modern', '--method', 'tools/call',
    '--tool-name', 'sandbox_script', '--tool-args-json', ECHO_ARGS]);
  checkEcho(mcall, 'modern');
});
