#!/usr/bin/env node
// SPDX-License-Identifier: MIT
// The security battery's resource limits, as an MCP client meets them
// (docs/explanation/limits.md):
//   - CPU: a busy loop x500 and a fork bomb, each in its own sandbox, stay
//     inside the CPU quota (the containers' cgroup CPU use over a window,
//     and cpu.cfs_quota_us / cpu.max read back), the pids limit holds, and a
//     sandbox_script echo in a third sandbox is still served in seconds;
//   - disk: fallocate -l 500G /out/f, a flood of small files in /out, in the
//     root file system, /etc/hosts and /etc/hostname (host files the
//     container can write) and a persistent sandbox's /workspace all end with
//     the cap's error, fast, and the host holds no more than the cap (plus
//     what one watch interval lets through); a full sandbox can still free
//     space; quick execs (done before the watch's first walk) that add up
//     past the cap, one after the other or six at once, get the cap's error;
//   - spending: with DEMESNE_AGENT_MAX_USD below one reply's price, the real
//     Claude Code CLI's run (vendor fixture upstream) ends with the cap's
//     error and no further model request reaches the vendor;
//   - nothing is left behind: no container, no server process, no scratch.
//
// Needs root (cgroup files, the agent's veth) and the base and claude-code
// images.   DEMESNE=/abs/src/demesne node tests/security/test-limits.mjs

import cp from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';

import * as h from '../e2e/lib/harness.mjs';

h.requireNodeModules();
const DEMESNE = h.demesneBinary();
h.trackSpawnsOf(DEMESNE);
if (process.getuid() !== 0) {
  process.stdout.write('1..0 # SKIP needs root: reads the containers\' cgroup files and makes veth pairs\n');
  process.exit(77);
}
process.env.E2E_TIMEOUT_SECONDS ??= '900';
const TOP = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const FIXTURE = path.join(TOP, 'tests', 'fixtures', 'vendor', 'server.mjs');
const ENGINE = process.env.DEMESNE_ENGINE ?? 'podman';
const CAP = 64 << 20;               // DEMESNE_DISK_MAX=64m
const CPUS = 0.5;                   // DEMESNE_CPUS
const CAP_RE = /disk cap of 64 MiB reached \(DEMESNE_DISK_MAX\)/;

// The e2e tests' npm packages (this directory has none of its own).
const SDK = path.join(h.E2E_DIR, 'node_modules', '@modelcontextprotocol', 'sdk', 'dist', 'esm');
const { Client } = await import(pathToFileURL(path.join(SDK, 'client', 'index.js')).href);
const { StdioClientTransport } = await import(pathToFileURL(path.join(SDK, 'client', 'stdio.js')).href);

const engine = (...args) => cp.spawnSync(ENGINE, args, { encoding: 'utf8' });
const call = (client, name, args, timeout = 300_000) => client.callTool({ name, arguments: args }, undefined,
  { timeout });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function connect(env) {
  const client = new Client({ name: 'demesne-security-limits', version: '0.0.0' });
  const transport = new StdioClientTransport({ command: DEMESNE, args: ['serve'], env, stderr: 'inherit' });
  await h.within(60_000, 'connect', client.connect(transport));
  client.serverPid = transport.pid;
  return client;
}

/** Containers (any state) whose owner label names the server with this pid. */
function containersOf(pid) {
  const ids = engine('ps', '-aq', '--filter', 'label=demesne.owner').stdout.trim().split('\n').filter(Boolean);
  return ids.filter((id) => new RegExp(`-${pid}-`).test(
    engine('inspect', '--format', '{{index .Config.Labels "demesne.owner"}}', id).stdout));
}
/** Containers made for the output root: persistent sandboxes carry no owner, but their output dir. */
function sandboxContainer(id) {
  return engine('ps', '-aq', '--filter', `label=demesne.sandbox=${id}`).stdout.trim();
}

/** The cgroup v1 directory (or v2) of a running container, for controller ctl. */
function cgroupDir(id, ctl) {
  const pid = engine('inspect', '--format', '{{.State.Pid}}', id).stdout.trim();
  const lines = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n');
  const v1 = lines.map((l) => l.split(':')).find(([, c]) => c.split(',').includes(ctl));
  if (v1) return path.join('/sys/fs/cgroup', v1[1], v1[2]);
  const v2 = lines.find((l) => l.startsWith('0::')).slice(3);
  const base = fs.existsSync('/sys/fs/cgroup/cgroup.controllers') ? '/sys/fs/cgroup' : '/sys/fs/cgroup/unified';
  return path.join(base, v2);
}
/** CPU seconds the container's cgroup has used. */
function cpuSeconds(id) {
  const v1 = path.join(cgroupDir(id, 'cpuacct'), 'cpuacct.usage');
  if (fs.existsSync(v1)) return Number(fs.readFileSync(v1, 'utf8')) / 1e9;
  const stat = fs.readFileSync(path.join(cgroupDir(id, 'cpu'), 'cpu.stat'), 'utf8');
  return Number(/usage_usec (\d+)/.exec(stat)[1]) / 1e6;
}
/** The CPU quota as a fraction of one CPU. */
function cpuQuota(id) {
  const dir = cgroupDir(id, 'cpu');
  if (fs.existsSync(path.join(dir, 'cpu.cfs_quota_us'))) {
    return Number(fs.readFileSync(path.join(dir, 'cpu.cfs_quota_us'), 'utf8'))
      / Number(fs.readFileSync(path.join(dir, 'cpu.cfs_period_us'), 'utf8'));
  }
  const [q, p] = fs.readFileSync(path.join(dir, 'cpu.max'), 'utf8').trim().split(' ');
  return q === 'max' ? Infinity : Number(q) / Number(p);
}
const readNum = (f) => { try { return fs.readFileSync(f, 'utf8').trim(); } catch { return 'missing'; } };

/** Bytes the tree holds (allocated blocks), not following symlinks. */
function treeBytes(dir) {
  let sum = 0;
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      const st = fs.lstatSync(p);
      sum += st.blocks * 512;
      if (e.isDirectory()) walk(p);
    }
  };
  if (fs.existsSync(dir)) walk(dir);
  return sum;
}
/** The run directory named in an error text ('... output in <dir>' is not promised: found by newest). */
function newestRun(root) {
  const runs = fs.readdirSync(root).filter((n) => n.startsWith('run-')).map((n) => path.join(root, n));
  return runs.sort((a, b) => fs.statSync(b).mtimeMs - fs.statSync(a).mtimeMs)[0];
}

async function startFixture(root, key) {
  const log = path.join(root, 'anthropic.log');
  const child = h.spawnGroup(process.execPath, [FIXTURE, '--port', '0', '--host', '127.0.0.1',
    '--expect-key', key, '--log', log], { stdio: ['ignore', 'pipe', 'inherit'] });
  const rl = readline.createInterface({ input: child.stdout });
  const port = await h.within(15_000, 'fixture listening', new Promise((resolve, reject) => {
    rl.on('line', (l) => { const m = /^listening (\d+)/.exec(l); if (m) resolve(Number(m[1])); });
    child.once('exit', (c) => reject(new Error(`fixture exited ${c}`)));
  }));
  return { port, log, child };
}

h.plan(31);

await h.run(async () => {
  const root = h.makeOutputRoot('limits');
  const state = path.join(root, '.state');
  const env = h.serverEnv(root, {
    DEMESNE_STATE_DIR: state,
    DEMESNE_DISK_MAX: '64m',
    DEMESNE_CPUS: String(CPUS),
  });
  const client = await connect(env);
  const pid = client.serverPid;

  // 1-7: CPU and pids. Two hostile sandboxes at once, measured from the host.
  {
    const busy = await call(client, 'sandbox_script', {
      image: 'base', egress: 'none', background: true, timeout_seconds: 120,
      command: 'for i in $(seq 500); do (while :; do :; done) & done; wait',
    });
    const bomb = await call(client, 'sandbox_script', {
      image: 'base', egress: 'none', background: true, timeout_seconds: 120,
      command: 'bomb() { bomb | bomb & }; bomb; sleep 100',
    });
    const jobs = [busy.structuredContent?.job_id, bomb.structuredContent?.job_id];
    let ids = [];
    for (let i = 0; i < 80 && ids.length < 2; i++) {
      await sleep(250);
      ids = containersOf(pid).filter((id) => engine('inspect', '--format', '{{.State.Running}}', id).stdout.trim() === 'true');
    }
    h.equal(ids.length, 2, 'both hostile sandboxes run');
    await sleep(3000); // let them spin up
    const quotas = ids.map(cpuQuota);
    h.ok(quotas.every((q) => Math.abs(q - CPUS) < 1e-6), `the CFS quota is ${CPUS} CPU in each`, JSON.stringify(quotas));
    const pidsMax = ids.map((id) => readNum(path.join(cgroupDir(id, 'pids'), 'pids.max')));
    const pidsNow = ids.map((id) => Number(readNum(path.join(cgroupDir(id, 'pids'), 'pids.current'))));
    h.ok(pidsMax.every((m) => m === '512') && pidsNow.every((n) => n <= 512),
      'the pids limit (512) holds in each cgroup', JSON.stringify({ pidsMax, pidsNow }));
    const t0 = ids.map(cpuSeconds);
    const w0 = Date.now();
    await sleep(4000);
    const used = ids.map((id, i) => (cpuSeconds(id) - t0[i]) / ((Date.now() - w0) / 1000));
    h.ok(used.every((u) => u <= CPUS * 1.15 + 0.02), `each uses at most ${CPUS} CPU (+15%)`, JSON.stringify(used));
    const e0 = Date.now();
    const echo = await call(client, 'sandbox_script', { image: 'base', egress: 'none', command: 'echo still-served' });
    const took = Date.now() - e0;
    // Starved, it would not be served until the hogs are cancelled below; the bound is
    // against that, with room for a machine busy with more than these two.
    h.ok(!echo.isError && echo.structuredContent?.stdout === 'still-served\n' && took < 60_000,
      `a third sandbox's echo is served meanwhile (${took} ms)`, h.firstText(echo));
    for (const j of jobs) await call(client, 'sandbox_cancel', { job_id: j });
    let left = [];
    for (let i = 0; i < 80; i++) {
      left = containersOf(pid);
      if (left.length === 0) break;
      await sleep(250);
    }
    h.equal(left.length, 0, 'cancelling removes both hostile containers');
    const st = await call(client, 'sandbox_status', { job_id: jobs[1] });
    h.equal(st.structuredContent?.status, 'cancelled', 'the fork bomb\'s job says cancelled');
  }

  // 8-10: fallocate far past the cap. Only with RLIMIT_FSIZE in place:
  // without it this would fill the host's disk.
  const fsize = await call(client, 'sandbox_script', { image: 'base', egress: 'none', command: 'ulimit -f' });
  if (fsize.structuredContent?.stdout !== `${CAP / 1024}\n`) {
    h.failRemaining(`RLIMIT_FSIZE is not the cap in a sandbox (ulimit -f says ${JSON.stringify(fsize.structuredContent?.stdout)}): not filling the host's disk`);
    return;
  }
  {
    const t0 = Date.now();
    const res = await call(client, 'sandbox_script', { image: 'base', egress: 'none', command: 'fallocate -l 500G /out/f' });
    const took = Date.now() - t0;
    h.ok(res.isError && CAP_RE.test(h.firstText(res)), 'fallocate -l 500G: the cap\'s error', h.firstText(res));
    // The cap's error is the check: an uncapped fallocate is as quick, so no time is asserted.
    h.diag(`fallocate -l 500G answered in ${took} ms`);
    const run = newestRun(root);
    h.ok(treeBytes(run) < 1 << 20, 'no block of it reached the host', `${treeBytes(run)} bytes in ${run}`);
    h.ok(fs.existsSync(path.join(run, 'stderr.log')), 'the run\'s logs stay in its output directory');
  }

  // 11-14: 3 GiB of small files in /out, and in the root file system.
  for (const [where, dir] of [['/out', '/out/many'], ['the root file system', '/var/tmp/many']]) {
    const t0 = Date.now();
    const res = await call(client, 'sandbox_script', {
      image: 'base', egress: 'none',
      command: `mkdir -p ${dir} && i=0; while [ $i -lt 786432 ]; do printf '%4096s' > ${dir}/$i; i=$((i+1)); done`,
    });
    const took = Date.now() - t0;
    h.ok(res.isError && CAP_RE.test(h.firstText(res)), `3 GiB of 4 KiB files in ${where}: the cap's error (${took} ms)`,
      h.firstText(res).slice(0, 400));
    if (where === '/out') {
      const held = treeBytes(newestRun(root));
      h.ok(held < CAP + (64 << 20), `... and /out holds ${held} bytes, near the cap, not 3 GiB`);
    } else {
      let left = [];
      for (let i = 0; i < 40 && (left = containersOf(pid)).length; i++) await sleep(250);
      h.equal(left.length, 0, '... and the container with its root file system is removed');
    }
  }

  // /etc/hosts and /etc/hostname are host files container root can write:
  // each stays under the cap, together they pass it.
  {
    const res = await call(client, 'sandbox_script', {
      image: 'base', egress: 'none',
      command: 'head -c 40m /dev/zero > /etc/hosts; head -c 40m /dev/zero > /etc/hostname; echo written',
    });
    h.ok(res.isError && CAP_RE.test(h.firstText(res)), '40 MiB each into /etc/hosts and /etc/hostname: the cap\'s error',
      h.firstText(res).slice(0, 400));
  }

  // Files unlinked while held open are in no tree: they count all the same.
  {
    const res = await call(client, 'sandbox_script', {
      image: 'base', egress: 'none', timeout_seconds: 60,
      command: 'exec 3>/out/x 4>/workspace/y; rm /out/x /workspace/y; '
        + 'head -c 40m /dev/zero >&3; head -c 40m /dev/zero >&4; sleep 30; echo survived',
    });
    h.ok(res.isError && CAP_RE.test(h.firstText(res)), '80 MiB in two unlinked files held open: the cap\'s error',
      h.firstText(res).slice(0, 400));
  }

  // 17-25: a persistent sandbox: the cap covers all it holds, one command at a
  // time or several at once.
  {
    const made = await call(client, 'sandbox_create', { image: 'base', egress: 'none' });
    const sid = made.structuredContent?.sandbox_id;
    h.ok(!made.isError && sid, 'sandbox_create', h.firstText(made));
    const fa = await call(client, 'sandbox_exec', { sandbox_id: sid, command: 'fallocate -l 500G /workspace/f' });
    h.ok(fa.isError && CAP_RE.test(h.firstText(fa)), 'sandbox_exec fallocate -l 500G /workspace/f: the cap\'s error',
      h.firstText(fa));
    const dd = await call(client, 'sandbox_exec', {
      sandbox_id: sid, command: 'head -c 50m /dev/zero > /workspace/a; head -c 50m /dev/zero > /out/b; echo not-reached',
    });
    h.ok(dd.isError && CAP_RE.test(h.firstText(dd)), '100 MiB over /workspace and /out: the cap\'s error',
      h.firstText(dd));
    const more = await call(client, 'sandbox_exec', { sandbox_id: sid, command: 'head -c 1m /dev/zero > /tmp/c' });
    h.ok(more.isError && CAP_RE.test(h.firstText(more)), 'a full sandbox cannot grow further', h.firstText(more));
    const rm = await call(client, 'sandbox_exec', { sandbox_id: sid, command: 'rm -f /workspace/a /out/b /tmp/c && echo freed' });
    h.ok(!rm.isError && rm.structuredContent?.stdout === 'freed\n', 'but it can free space', h.firstText(rm));
    // Commands quicker than the watch's first walk (no walker thread runs
    // for them): the measure at each one's end is what holds the cap. Three
    // of 20 MiB fit under 64 MiB; the fourth crosses it and gets the error.
    const quick = [];
    for (let i = 0; i < 4; i += 1) {
      quick.push(await call(client, 'sandbox_exec', { sandbox_id: sid, command: `fallocate -l 20m /workspace/q${i}` }));
    }
    h.ok(quick.slice(0, 3).every((r) => !r.isError && r.structuredContent?.exit_code === 0)
      && quick[3].isError && CAP_RE.test(h.firstText(quick[3])),
    'quick execs of 20 MiB each: the one that crosses the cap gets its error',
    quick.map((r) => h.firstText(r).slice(0, 120)).join(' | '));
    // Six at once, 15 MiB each, into an emptied sandbox: 90 MiB together.
    const emptied = await call(client, 'sandbox_exec', { sandbox_id: sid, command: 'rm -f /workspace/q* && echo freed' });
    const burst = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => call(client, 'sandbox_exec',
      { sandbox_id: sid, command: `fallocate -l 15m /workspace/p${i}` })));
    const capped = burst.filter((r) => r.isError && CAP_RE.test(h.firstText(r))).length;
    h.ok(!emptied.isError && capped >= 1 && burst.every((r) => !r.isError || CAP_RE.test(h.firstText(r))),
      `six quick execs at once past the cap: ${capped} get the cap's error, none another`,
      burst.map((r) => h.firstText(r).slice(0, 120)).join(' | '));
    const after = await call(client, 'sandbox_exec', { sandbox_id: sid, command: 'head -c 1m /dev/zero > /tmp/d' });
    h.ok(after.isError && CAP_RE.test(h.firstText(after)), 'and the sandbox they filled cannot grow further',
      h.firstText(after));
    const gone = await call(client, 'sandbox_destroy', { sandbox_id: sid });
    h.ok(!gone.isError && sandboxContainer(sid) === '', 'sandbox_destroy removes it', h.firstText(gone));
  }

  await client.close();
  await h.killAll();

  // 26-29: the spending cap, with the real Claude Code CLI.
  {
    const key = `sk-ant-api03-demesne-limits-${crypto.randomBytes(12).toString('hex')}`;
    const fx = await startFixture(root, key);
    const home = path.join(root, 'home');
    fs.mkdirSync(home);
    const aroot = path.join(root, 'agents');
    fs.mkdirSync(aroot);
    const aenv = h.serverEnv(aroot, {
      HOME: home,
      DEMESNE_STATE_DIR: path.join(root, '.state-agents'),
      ANTHROPIC_API_KEY: key,
      DEMESNE_VENDOR_UPSTREAM_ANTHROPIC: `http://127.0.0.1:${fx.port}`,
      // One fixture reply costs about $0.005 at sonnet's prices.
      DEMESNE_AGENT_MAX_USD: '0.001',
    });
    delete aenv.CLAUDE_CODE_OAUTH_TOKEN;
    delete aenv.OPENAI_API_KEY;
    const agent = await connect(aenv);
    const res = await call(agent, 'sandbox_agent', {
      prompt: 'Write the answer to /out/answer.txt, then tell me the answer.', model: 'sonnet',
    });
    const text = h.firstText(res);
    h.ok(res.isError && /spending cap of \$0\.001 reached \(DEMESNE_AGENT_MAX_USD\)/.test(text),
      'the agent run ends with the spending cap\'s error', text);
    // The fixture logs a request when its response closes, in its own
    // process: under load that line can land after demesne has answered.
    const readMsgs = () => fs.readFileSync(fx.log, 'utf8').trim().split('\n').filter(Boolean).map((l) => JSON.parse(l))
      .filter((e) => /\/v1\/messages$/.test((e.path ?? e.url ?? '').split('?')[0]));
    let msgs = readMsgs();
    for (let i = 0; i < 100 && !msgs.some((e) => e.kind === 'tool_call'); i += 1) {
      await sleep(100);
      msgs = readMsgs();
    }
    h.ok(msgs.some((e) => e.kind === 'tool_call') && !msgs.some((e) => e.kind === 'final'),
      'the vendor answered the first turn and got no request for the next', JSON.stringify(msgs));
    const usagePath = /usage in '([^']+)'/.exec(text)?.[1];
    const usage = usagePath && fs.existsSync(usagePath) ? JSON.parse(fs.readFileSync(usagePath, 'utf8')) : {};
    h.ok(usage.cost_usd >= 0.001, `usage.json records what was spent ($${usage.cost_usd})`, JSON.stringify(usage));
    await sleep(1000);
    const agentFiles = fs.existsSync(path.join(aroot, '.agents')) ? fs.readdirSync(path.join(aroot, '.agents')) : [];
    h.ok(containersOf(agent.serverPid).length === 0 && agentFiles.length === 0,
      'the agent\'s container and its run files (instructions, launcher) are gone', JSON.stringify(agentFiles));
    await agent.close();
    await h.killAll();
  }

  // 30-31: nothing left behind.
  {
    const stray = [pid].filter((p) => { try { process.kill(p, 0); return true; } catch { return false; } });
    h.equal(stray.length, 0, 'the server is gone');
    const work = path.join(state, 'work');
    const scratch = fs.existsSync(work) ? fs.readdirSync(work) : [];
    h.equal(scratch.length, 0, 'no run scratch directory is left', JSON.stringify(scratch));
  }
});
