#!/usr/bin/env node
// What the real agent CLIs do when demesne asks them (issue 34: "test with
// the real Claude Code and Codex CLIs what they declare and do"). Each CLI,
// from its demesne image, is the host's MCP client of a real
// `demesne serve --http` on loopback (the container on the host's network,
// our own test container, not a sandbox), its model the vendor fixture
// (tests/fixtures/vendor/server.mjs, a play): the model calls
// sandbox_script with egress 'open' on a server without
// DEMESNE_ALLOW_CALLER_EGRESS, so demesne asks the CLI by elicitation.
// Per CLI:
//   1. it runs to the end (exit 0) and reports the fixture's final answer;
//   2. it was asked (it declares elicitation), and with no person at it, it
//      did not allow: its answers, from demesne's log ("asked the client
//      (egress): ...: ANSWER"), are printed in the test's name;
//   3. nothing widened without "allow": unless it allowed, the tool's result
//      is the flat refusal and no run of the server had open egress.
// The answer found is printed as a diagnostic and written in
// docs/reference/elicitation.md; the test fails if a CLI stops being
// asked, or if anything widens without an allow.
//
//   DEMESNE=/abs/path/to/demesne node tests/e2e/cli-elicit.mjs
//
// Needs the claude-code and codex images (setup.sh builds them) and root
// or a user whose Podman can run them; prints TAP.

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { spawn } from 'node:child_process';
import * as h from './lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
process.env.E2E_TIMEOUT_SECONDS ??= '300';
const { startHttpServer } = await import('./lib/http-server.mjs');
const FIXTURE = path.join(h.E2E_DIR, '..', 'fixtures', 'vendor', 'server.mjs');
const MARKER = '[play:widen]';
const OPEN_REFUSAL = "egress 'open' is refused: this server does not let callers open the network";
const CLIS = ['claude', 'codex'];

h.plan(3 * CLIS.length);

async function startFixture(root, key) {
  const plays = path.join(root, 'plays.json');
  fs.writeFileSync(plays, JSON.stringify({
    plays: [{
      marker: MARKER,
      steps: [{ tool: 'sandbox_script', arguments: { command: 'echo widened', egress: 'open' } }],
      answer: 'the script said: {{0.text}}',
    }],
  }));
  const child = h.spawnGroup(process.execPath, [FIXTURE, '--port', '0', '--host', '127.0.0.1', '--expect-key', key,
    '--plays', plays, '--log', path.join(root, 'vendor.log')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const rl = readline.createInterface({ input: child.stdout });
  const port = await h.within(15_000, 'the vendor fixture listening', new Promise((resolve, reject) => {
    rl.on('line', (l) => { const m = /^listening (\d+)/.exec(l); if (m) resolve(Number(m[1])); });
    child.once('exit', (code) => reject(new Error(`the vendor fixture exited ${code}`)));
  }));
  return { port, child };
}

/** The CLI in its image on the host's network: [command args], env. */
function cliCommand(cli, server, fxPort, key) {
  const prompt = `${MARKER} Run the script, then tell me what it said.`;
  if (cli === 'claude') {
    const config = JSON.stringify({ mcpServers: { demesne: { type: 'http', url: server.url, headers: server.headers } } });
    return {
      image: 'localhost/demesne/claude-code:latest',
      env: { ANTHROPIC_BASE_URL: `http://127.0.0.1:${fxPort}`, ANTHROPIC_API_KEY: key, IS_SANDBOX: '1',
        DISABLE_AUTOUPDATER: '1', CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', ENABLE_TOOL_SEARCH: 'false',
        HOME: '/tmp/home' },
      argv: ['sh', '-c', 'mkdir -p "$HOME" && exec claude -p "$2" --output-format stream-json --verbose ' +
        '--dangerously-skip-permissions --mcp-config "$1"', 'sh', config, prompt],
    };
  }
  const token = server.headers.Authorization.replace(/^Bearer /, '');
  const toml = [
    'model_provider = "fixture"', 'model = "gpt-5"', '[features]', 'plugins = false',
    '[model_providers.fixture]', 'name = "vendor fixture"', `base_url = "http://127.0.0.1:${fxPort}/v1"`,
    'env_key = "OPENAI_API_KEY"', 'wire_api = "responses"',
    '[mcp_servers.demesne]', `url = "${server.url}"`, 'bearer_token_env_var = "DEMESNE_MCP_TOKEN"',
    'startup_timeout_sec = 30', 'tool_timeout_sec = 120', ''].join('\n');
  return {
    image: 'localhost/demesne/codex:latest',
    env: { OPENAI_API_KEY: key, DEMESNE_MCP_TOKEN: token, CODEX_HOME: '/tmp/codex', HOME: '/tmp/home' },
    argv: ['sh', '-c', 'mkdir -p "$CODEX_HOME" "$HOME" && printf "%s" "$1" > "$CODEX_HOME/config.toml" && ' +
      'exec codex exec --json --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check -C /tmp "$2"',
    'sh', toml, prompt],
  };
}

function runContainer({ image, env, argv }, name) {
  const args = ['run', '--rm', '--name', name, '--network', 'host', '--label', 'demesne.test=cli-elicit'];
  for (const [k, v] of Object.entries(env)) args.push('-e', `${k}=${v}`);
  args.push(image, ...argv);
  return new Promise((resolve) => {
    const child = spawn('podman', args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.once('exit', (code) => resolve({ code, out, err }));
  });
}

await h.run(async () => {
  const root = h.makeOutputRoot('cli-elicit');
  const key = `sk-ant-api03-demesne-e2e-${crypto.randomBytes(12).toString('hex')}`;
  const fx = await startFixture(root, key);
  for (const cli of CLIS) {
    const env = h.serverEnv(path.join(root, cli), { DEMESNE_ELICIT_TIMEOUT_MS: '20000', DEMESNE_LOG_LEVEL: 'debug' });
    fs.mkdirSync(path.join(root, cli));
    delete env.DEMESNE_ALLOW_CALLER_EGRESS;
    let server;
    try {
      server = await startHttpServer(DEMESNE, { env, logFile: path.join(root, `${cli}-server.log`) });
      const name = `demesne-e2e-cli-elicit-${cli}-${process.pid}`;
      const r = await runContainer(cliCommand(cli, server, fx.port, key), name);
      await new Promise((res) => setTimeout(res, 200));
      const log = server.log.join('\n');
      h.ok(r.code === 0 && /the script said/.test(r.out), `${cli}: runs to the end against demesne with the fixture's answer`,
        `exit ${r.code}\nstdout ${r.out.slice(-1500)}\nstderr ${r.err.slice(-1500)}`);
      // Each round of the question, in order: on 2026-07-28 the first is
      // the call's input_required result, the next what the retry answered.
      const answers = [...log.matchAll(/asked the client \(egress\): .*: ([a-z ]+)$/gm)].map((m) => m[1]);
      const final = answers.at(-1) ?? 'nothing';
      h.ok(answers.length > 0 && final !== 'allow',
        `${cli}: declares elicitation, is asked, and with no person at it does not allow (answered: ${answers.join(', then ') || 'nothing'})`,
        log.split('\n').filter((l) => /ask|elicit/.test(l)).join('\n') || log.slice(-2000));
      const allowed = final === 'allow';
      // A refused call is refused before its claim: no run is made at all.
      const ran = /sandbox_script run-/.test(log);
      h.ok(allowed ? ran : r.out.includes(OPEN_REFUSAL) && !ran,
        `${cli}: nothing widened without an allow (${allowed ? 'ran open' : 'the flat refusal, no run made'})`,
        r.out.slice(-1500));
      await server.stop();
    } catch (err) {
      h.failRemaining(`${cli}: ${err.stack ?? err}`);
      server?.stop();
    }
  }
});
