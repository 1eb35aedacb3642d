/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_INTEGRATION_SHIM_PROBES_H
#define DM_TESTS_INTEGRATION_SHIM_PROBES_H

/* Python programs test-shim runs inside the container (the python image has
 * no strace, gdb or keyctl; ctypes reaches every system call directly). */

/* Prints "<name> <errno>" per system call (0 = it succeeded), x86_64
 * numbers; "arch <machine>" alone elsewhere. The arguments are harmless:
 * where the filter does not stop a call, the kernel refuses it for its
 * arguments or for a missing capability, with an errno other than EPERM
 * for most; the test checks that every one is EPERM (ENOSYS for clone3). */
static const char probe_syscalls[] =
        "import ctypes, os, platform, time\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.syscall.restype = ctypes.c_long\n"
        "if platform.machine() != 'x86_64':\n"
        "    print('arch', platform.machine()); raise SystemExit(0)\n"
        "def sc(name, nr, *a):\n"
        "    ctypes.set_errno(0)\n"
        "    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) for x in a])\n"
        "    if r == 0 and name.startswith('clone'): os._exit(0)\n"
        "    if r > 0 and name.startswith('clone'): os.waitpid(r, 0)\n"
        "    print(name, ctypes.get_errno() if r < 0 else 0, flush=True)\n"
        "sc('unshare', 272, 0x10000000)\n"
        "sc('setns', 308, -1, 0)\n"
        "sc('mount', 165, 0, 0, 0, 0, 0)\n"
        "sc('umount2', 166, 0, 0)\n"
        "sc('pivot_root', 155, 0, 0)\n"
        "sc('fsopen', 430, 0, 0)\n"
        "sc('fsconfig', 431, -1, 0, 0, 0, 0)\n"
        "sc('fsmount', 432, -1, 0, 0)\n"
        "sc('fspick', 433, -1, 0, 0)\n"
        "sc('move_mount', 429, -1, 0, -1, 0, 0)\n"
        "sc('open_tree', 428, -1, 0, 0)\n"
        "sc('mount_setattr', 442, -1, 0, 0, 0, 0)\n"
        "sc('process_vm_readv', 310, os.getppid(), 0, 0, 0, 0, 0)\n"
        "sc('process_vm_writev', 311, os.getppid(), 0, 0, 0, 0, 0)\n"
        "sc('keyctl', 250, 0, -3, 1)\n"
        "sc('add_key', 248, 0, 0, 0, 0, 0)\n"
        "sc('request_key', 249, 0, 0, 0, 0)\n"
        "sc('bpf', 321, 0, 0, 0)\n"
        "sc('perf_event_open', 298, 0, 0, -1, -1, 0)\n"
        "sc('userfaultfd', 323, 0)\n"
        "sc('open_by_handle_at', 304, -1, 0, 0)\n"
        "sc('kexec_load', 246, 0, 0, 0, 0)\n"
        "sc('kexec_file_load', 320, -1, -1, 0, 0, 0)\n"
        "sc('init_module', 175, 0, 0, 0)\n"
        "sc('finit_module', 313, -1, 0, 0)\n"
        "sc('delete_module', 176, 0, 0)\n"
        "for n, f in (('newns', 0x20000), ('newcgroup', 0x02000000), ('newuts', 0x04000000),\n"
        "             ('newipc', 0x08000000), ('newuser', 0x10000000), ('newpid', 0x20000000),\n"
        "             ('newnet', 0x40000000)):\n"
        "    sc('clone-' + n, 56, f | 17, 0, 0, 0, 0)\n"
        "sc('clone3', 435, 0, 0)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    time.sleep(5); os._exit(0)\n"
        "ctypes.set_errno(0)\n"
        "r = libc.ptrace(ctypes.c_long(16), ctypes.c_long(pid), None, None)\n"
        "print('ptrace-attach', ctypes.get_errno() if r < 0 else 0, flush=True)\n"
        "os.kill(pid, 9); os.waitpid(pid, 0)\n";

/* What must still work: fork (clone without namespace flags), threads
 * (clone3 falls back to clone), subprocess. Prints "ok". */
static const char probe_ordinary[] = "import threading, subprocess, os\n"
                                     "out = []\n"
                                     "t = threading.Thread(target=lambda: out.append('thread')); t.start(); t.join()\n"
                                     "pid = os.fork()\n"
                                     "if pid == 0: os._exit(5)\n"
                                     "st = os.waitpid(pid, 0)[1]\n"
                                     "assert os.waitstatus_to_exitcode(st) == 5\n"
                                     "assert subprocess.run(['true']).returncode == 0\n"
                                     "assert out == ['thread']\n"
                                     "print('ok')\n";

/* Counts processes (other than itself, its parent shell and the shim's
 * idle warm shell, the bash that holds its memfd at fd 4) whose command is
 * sys.argv[1], and zombies: "procs=N zombies=M". */
static const char probe_procs[] = "import os, sys\n"
                                  "me = {os.getpid(), os.getppid()}\n"
                                  "procs = zombies = 0\n"
                                  "def warm(p):\n"
                                  "    try: return 'demesne-shim-command' in os.readlink('/proc/%s/fd/4' % p)\n"
                                  "    except OSError: return False\n"
                                  "for p in os.listdir('/proc'):\n"
                                  "    if not p.isdigit() or int(p) in me or warm(p): continue\n"
                                  "    try:\n"
                                  "        s = open('/proc/%s/stat' % p).read()\n"
                                  "    except OSError: continue\n"
                                  "    comm = s[s.index('(') + 1:s.rindex(')')]\n"
                                  "    state = s[s.rindex(')') + 2]\n"
                                  "    if state == 'Z': zombies += 1\n"
                                  "    elif comm == sys.argv[1]: procs += 1\n"
                                  "print('procs=%d zombies=%d' % (procs, zombies))\n";

/* Kills every process named sys.argv[1]. */
static const char probe_kill[] =
        "import os, sys, signal\n"
        "for p in os.listdir('/proc'):\n"
        "    if not p.isdigit(): continue\n"
        "    try:\n"
        "        s = open('/proc/%s/stat' % p).read()\n"
        "    except OSError: continue\n"
        "    if s[s.index('(') + 1:s.rindex(')')] == sys.argv[1]: os.kill(int(p), signal.SIGKILL)\n";

/* Plays a command inside the sandbox that pretends to be the shim: connects
 * to the socket, says a valid HELLO, and reports what the host does with
 * it within 8 s: "closed" (refused), "got" (it was sent a command), or
 * "waited". */
static const char probe_impostor[] = "import socket, struct, select, time\n"
                                     "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
                                     "s.connect('/run/demesne/shim.sock')\n"
                                     "s.sendall(struct.pack('>BBHI', 1, 16, 0, 12) + struct.pack('>III', 1, 64, 0))\n"
                                     "print('connected', flush=True)\n"
                                     "r, _, _ = select.select([s], [], [], 8)\n"
                                     "if not r: print('waited')\n"
                                     "else:\n"
                                     "    try: print('closed' if s.recv(65536) == b'' else 'got')\n"
                                     "    except ConnectionError: print('closed')\n";

/* A fork bomb that keeps its leader alive, so only the pids limit stops
 * it until the timeout ends the group. */
static const char probe_forkbomb[] = "import os\n"
                                     "while True:\n"
                                     "    try: os.fork()\n"
                                     "    except OSError: pass\n";

#endif
