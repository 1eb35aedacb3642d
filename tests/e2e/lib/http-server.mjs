// Starting `demesne serve --http 127.0.0.1:0` for the HTTP e2e scripts: the
// server picks a free port and says which in its log, read from stderr here,
// with the file of the bearer token it made (every request needs it).
// The process is spawned through the harness, so it is killed (by PID) when
// the script ends. Only loopback addresses are used.

import fs from 'node:fs';
import http from 'node:http';
import { diag, spawnGroup } from './harness.mjs';

/**
 * @returns {Promise<{child, url: string, port: number, log: string[], token?: string, tokenFile?: string,
 *   headers: Record<string, string>, stop: () => Promise<number|null>}>}
 * token and headers ({Authorization: 'Bearer TOKEN'}) come from the token
 * file the log names; a server given its token (--token-file) has none.
 */
export function startHttpServer(bin, { args = [], env = process.env, timeoutMs = 30_000, logFile } = {}) {
  const child = spawnGroup(bin, ['serve', '--http', '127.0.0.1:0', ...args], {
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const log = [];
  // The whole log also goes to logFile (in the output root, which is kept
  // when a test fails).
  if (logFile) child.stderr.pipe(fs.createWriteStream(logFile));
  let pending = '';
  let tokenFile;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`demesne serve --http did not start within ${timeoutMs} ms:\n${log.join('\n')}`)), timeoutMs);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`demesne serve --http exited (${code}) before listening:\n${log.join('\n')}`));
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (chunk) => {
      pending += chunk;
      const lines = pending.split('\n');
      pending = lines.pop();
      for (const line of lines) {
        log.push(line);
        const t = /bearer token in '([^']+)'/.exec(line);
        if (t) tokenFile = t[1];
        const m = /serving MCP on (http:\/\/127\.0\.0\.1:(\d+)\/mcp)/.exec(line);
        if (m) {
          clearTimeout(timer);
          child.removeAllListeners('exit');
          const token = tokenFile ? fs.readFileSync(tokenFile, 'utf8').trim() : undefined;
          resolve({
            child,
            url: m[1],
            port: Number(m[2]),
            log,
            token,
            tokenFile,
            headers: token ? { Authorization: `Bearer ${token}` } : {},
            stop: () => stopServer(child),
          });
        }
      }
    });
  });
}

/** SIGTERM to the server; resolves with its exit code (null after SIGKILL). */
export function stopServer(child, graceMs = 15_000) {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    const t = setTimeout(() => { try { process.kill(-child.pid, 'SIGKILL'); } catch { /* gone */ } }, graceMs);
    child.once('exit', (code) => { clearTimeout(t); resolve(code); });
    try { process.kill(child.pid, 'SIGTERM'); } catch { resolve(null); }
  });
}

/** The engine socket the server uses (DOCKER_HOST=unix://... or Podman's). */
export function engineSocket() {
  const h = process.env.DEMESNE_ENGINE_HOST ?? process.env.DOCKER_HOST ?? process.env.CONTAINER_HOST;
  if (h?.startsWith('unix://')) return h.slice('unix://'.length);
  return '/run/podman/podman.sock';
}

/** Containers the server with this pid owns (its owner label holds "-PID-"), or -1 when the engine does not answer. */
export function containersOf(pid) {
  const socketPath = engineSocket();
  if (!fs.existsSync(socketPath)) return Promise.resolve(-1);
  const filters = encodeURIComponent(JSON.stringify({ label: ['demesne.owner'] }));
  return new Promise((resolve) => {
    const req = http.get({ socketPath, path: `/containers/json?all=true&filters=${filters}`, timeout: 10_000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { body += c; });
      res.on('end', () => {
        try {
          const list = JSON.parse(body);
          resolve(list.filter((c) => String(c.Labels?.['demesne.owner'] ?? '').includes(`-${pid}-`)).length);
        } catch (err) {
          diag(`engine answer not understood: ${err.message}`);
          resolve(-1);
        }
      });
    });
    req.on('error', () => resolve(-1));
    req.on('timeout', () => { req.destroy(); resolve(-1); });
  });
}

/** Polls containersOf(pid) until it equals want or timeoutMs passes; returns the last count. */
export async function waitContainers(pid, want, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  let n = await containersOf(pid);
  while (n !== want && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    n = await containersOf(pid);
  }
  return n;
}
