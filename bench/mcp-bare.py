#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The cheapest honest MCP client for bench-script.sh and bench-exec.sh.

Speaks the --stdin protocol of mcp-timer.mjs ("ready ..." once connected,
each input line "call" answered "ms <float>", "quit" or EOF ends) to one
`demesne serve` over stdio, with the 2026-07-28 wire (every request
carries its _meta; no initialize) and nothing else: one JSON-RPC line out,
lines read until the answer with that id (notifications are skipped),
the result checked as mcp-timer.mjs checks it. What it adds to a call is
a write, a read and json.loads of the answer, so the timing is the
server's and the pipes'.

  DEMESNE=/abs/demesne python3 bench/mcp-bare.py --stdin --tool exec|script

Environment: DEMESNE (required), DEMESNE_OUTPUT_ROOT (default: a temp dir,
removed at exit), DEMESNE_SHIM_PATH (default: the build tree's shim beside
DEMESNE), BENCH_SERVE_ARGS (more arguments for `demesne serve`).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

VERSION = '2026-07-28'
META = {
    'io.modelcontextprotocol/protocolVersion': VERSION,
    'io.modelcontextprotocol/clientCapabilities': {},
    'io.modelcontextprotocol/clientInfo': {'name': 'demesne-bench-bare', 'version': '0.0.0'},
}


def out(line):
    sys.stdout.write(line + '\n')
    sys.stdout.flush()


class Session:
    def __init__(self, binary, env):
        self.p = subprocess.Popen([binary, 'serve', *os.environ.get('BENCH_SERVE_ARGS', '').split()],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, bufsize=0)
        self.next_id = 0

    def call(self, name, arguments):
        """tools/call -> (ms, result); raises on a protocol error."""
        self.next_id += 1
        msg = {'jsonrpc': '2.0', 'id': self.next_id, 'method': 'tools/call',
               'params': {'name': name, 'arguments': arguments, '_meta': META}}
        line = (json.dumps(msg) + '\n').encode()
        t0 = time.perf_counter_ns()
        self.p.stdin.write(line)
        while True:
            raw = self.p.stdout.readline()
            if not raw:
                raise RuntimeError('the server closed its stdout')
            ans = json.loads(raw)
            if ans.get('id') == self.next_id:
                break
        ms = (time.perf_counter_ns() - t0) / 1e6
        if 'error' in ans:
            raise RuntimeError(f'{name}: {json.dumps(ans["error"])[:500]}')
        return ms, ans['result']

    def close(self):
        try:
            self.p.stdin.close()
            self.p.wait(timeout=30)
        except Exception:  # noqa: BLE001 - a bench's exit path
            self.p.kill()


def main():
    args = sys.argv[1:]
    tool = args[args.index('--tool') + 1] if '--tool' in args else 'exec'
    if '--stdin' not in args or tool not in ('exec', 'script'):
        out('error usage: mcp-bare.py --stdin [--tool exec|script]')
        return 1
    binary = os.environ.get('DEMESNE', '')
    if not os.path.isabs(binary):
        out('error DEMESNE must be the absolute path of the demesne binary')
        return 1
    env = dict(os.environ)
    own_root = None
    if not env.get('DEMESNE_OUTPUT_ROOT'):
        own_root = tempfile.mkdtemp(prefix='demesne-bench-')
        env['DEMESNE_OUTPUT_ROOT'] = own_root
    shim = os.path.join(os.path.dirname(binary), 'shim', 'demesne-shim')
    if not env.get('DEMESNE_SHIM_PATH') and os.path.exists(shim):
        env['DEMESNE_SHIM_PATH'] = shim
    s = Session(binary, env)
    sandbox = None
    try:
        if tool == 'exec':
            _, r = s.call('sandbox_create', {'image': 'python', 'egress': 'none'})
            sandbox = (r.get('structuredContent') or {}).get('sandbox_id')
            if r.get('isError') or not sandbox:
                raise RuntimeError(f'sandbox_create failed: {json.dumps(r)[:500]}')
        # As mcp-timer.mjs: the timed calls start once the warm pool is full.
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            _, r = s.call('sandbox_list', {})
            pool = (r.get('structuredContent') or {}).get('pool')
            if not pool or pool['ready'] >= pool['size']:
                break
            time.sleep(0.2)
        if tool == 'exec':
            req, expect = ('sandbox_exec', {'sandbox_id': sandbox, 'command': 'true'}), None
        else:
            req, expect = ('sandbox_script', {'command': 'echo hi', 'image': 'python', 'egress': 'none'}), 'hi\n'
        out(f'ready modern {VERSION} (client: python3 mcp-bare.py)')
        for line in sys.stdin:
            cmd = line.strip()
            if cmd == 'quit':
                break
            if cmd != 'call':
                out(f'error unknown input {cmd!r}')
                return 1
            ms, r = s.call(*req)
            sc = r.get('structuredContent') or {}
            if r.get('isError') or sc.get('exit_code') != 0 or (expect is not None and sc.get('stdout') != expect):
                raise RuntimeError(f'unexpected result: {json.dumps(r)[:500]}')
            out(f'ms {ms:.3f}')
        return 0
    except Exception as e:  # noqa: BLE001 - reported on the protocol's line
        out(f'error {e}')
        return 1
    finally:
        if sandbox:
            try:
                s.call('sandbox_destroy', {'sandbox_id': sandbox})
            except Exception:  # noqa: BLE001 - the TTL reaper gets it
                pass
        s.close()
        if own_root:
            shutil.rmtree(own_root, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
