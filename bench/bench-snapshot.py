#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two of issue 32's benchmarks, each against the same work with the CLI.

Through one `demesne serve` session and the bare client of mcp-bare.py (one
JSON-RPC line out, the answer's line in: the server's time and the pipes'),
alternating with the CLI, the order swapping every round, N timed rounds
(default 10) after one untimed:

  create  `sandbox_create {snapshot_id}` of a snapshot of a `base` sandbox
          whose root file system gained SIZE_MB (default 200, as the fork
          bench), against `podman run -d --network none --entrypoint sleep
          IMAGE infinity` of the same snapshot image (its entrypoint is
          demesne's shim). Target: 0.5.
  pause   `sandbox_pause` then `sandbox_resume` of a running sandbox, against
          `podman pause` then `podman unpause` of a container of the same
          image. Target: 0.2.

Between rounds (not timed) the sandbox or container made goes; at the end
the source, the snapshot and the CLI's container go. Prints each round, the
medians in ms and the ratios demesne/CLI.

  DEMESNE=/abs/path/to/demesne python3 bench/bench-snapshot.py

Environment: DEMESNE (required), N, SIZE_MB, IMAGE (default
localhost/demesne/base:latest), PODMAN (default podman), DEMESNE_SHIM_PATH
(default: the build tree's shim beside DEMESNE).
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module  # noqa: E402

bare = import_module('mcp-bare')

N = int(os.environ.get('N', '10'))
SIZE_MB = int(os.environ.get('SIZE_MB', '200'))
IMAGE = os.environ.get('IMAGE', 'localhost/demesne/base:latest')
PODMAN = os.environ.get('PODMAN', 'podman')


def podman(*args):
    subprocess.run([PODMAN, *args], check=True, stdout=subprocess.DEVNULL)


def timed(fn):
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / 1e6


def ok(s, name, arguments):
    _, r = s.call(name, arguments)
    if r.get('isError'):
        raise RuntimeError(f'{name}: {str(r)[:500]}')
    return r.get('structuredContent') or {}


def bench(name, ours, cli, target):
    d, c = [], []
    for r in range(N + 1):
        if r % 2:
            dt, ct = ours(), cli()
        else:
            ct, dt = cli(), ours()
        if r == 0:
            continue  # untimed
        d.append(dt)
        c.append(ct)
        print(f'{name} round {r:2d}  demesne {dt:9.1f} ms  cli {ct:9.1f} ms', flush=True)
    md, mc = statistics.median(d), statistics.median(c)
    print(f'{name}: demesne median {md:.1f} ms, cli median {mc:.1f} ms (N={N}): ratio {md / mc:.3f} '
          f'(target {target})', flush=True)


def main():
    binary = os.environ.get('DEMESNE', '')
    if not os.path.isabs(binary):
        print('bench-snapshot: DEMESNE must be the absolute path of the demesne binary', file=sys.stderr)
        return 1
    env = dict(os.environ, DEMESNE_POOL='0')
    root = tempfile.mkdtemp(prefix='bench-snapshot-')
    env['DEMESNE_OUTPUT_ROOT'] = root
    shim = os.path.join(os.path.dirname(binary), 'shim', 'demesne-shim')
    if not env.get('DEMESNE_SHIM_PATH') and os.path.exists(shim):
        env['DEMESNE_SHIM_PATH'] = shim
    tag = f'bench-snapshot-{os.getpid()}'
    s = bare.Session(binary, env)
    src = snap = None
    print(f'load average: {" ".join(open("/proc/loadavg").read().split()[:3])}, {os.cpu_count()} cores', flush=True)
    try:
        src = ok(s, 'sandbox_create', {'image': 'base', 'egress': 'none', 'ttl_seconds': 3600})['sandbox_id']
        ok(s, 'sandbox_exec', {'sandbox_id': src,
                               'command': f'head -c {SIZE_MB}M /dev/urandom > /opt/big && sync'})
        snap = ok(s, 'sandbox_snapshot', {'sandbox_id': src})['snapshot_id']
        image = f'localhost/demesne-snapshot:{snap}'
        podman('run', '-d', '--name', f'{tag}-p', '--network', 'none', IMAGE, 'sleep', 'infinity')

        def our_create():
            t0 = time.perf_counter_ns()
            sc = ok(s, 'sandbox_create', {'snapshot_id': snap, 'egress': 'none', 'ttl_seconds': 600})
            ms = (time.perf_counter_ns() - t0) / 1e6
            ok(s, 'sandbox_destroy', {'sandbox_id': sc['sandbox_id']})
            return ms

        def cli_create():
            ms = timed(lambda: podman('run', '-d', '--name', f'{tag}-run', '--network', 'none', '--entrypoint',
                                      'sleep', image, 'infinity'))
            podman('rm', '-f', '-t', '0', f'{tag}-run')
            return ms

        def our_pause():
            return timed(lambda: (ok(s, 'sandbox_pause', {'sandbox_id': src}),
                                  ok(s, 'sandbox_resume', {'sandbox_id': src})))

        def cli_pause():
            return timed(lambda: (podman('pause', f'{tag}-p'), podman('unpause', f'{tag}-p')))

        bench('create', our_create, cli_create, 0.5)
        bench('pause', our_pause, cli_pause, 0.2)
        return 0
    finally:
        # One name a call: Podman 4.3.1's `rm -f A B` with B unknown exits 0
        # and leaves A (measured).
        for c in (f'{tag}-run', f'{tag}-p'):
            subprocess.run([PODMAN, 'rm', '-f', '-t', '0', c], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for name, a in (('sandbox_destroy', {'sandbox_id': src}), ('sandbox_destroy', {'snapshot_id': snap})):
            if list(a.values())[0]:
                try:
                    s.call(name, a)
                except Exception:  # noqa: BLE001 - a bench's exit path
                    pass
        s.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
