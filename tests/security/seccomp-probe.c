/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/* Run inside a sandbox by test-seccomp.sh and test-seccomp-sandbox.c (static):
 * each probe prints "NAME RESULT" where RESULT is "ok" when the attack
 * failed as it must, or what went wrong. Exit 0 when all held. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static int bad;

/* what: the value that shows how it went wrong. */
static void report(const char *name, int held, const char *what, long v)
{
        if (held) {
                printf("%s ok\n", name);
                return;
        }
        printf("%s FAIL (%s %ld, errno %d)\n", name, what, v, errno);
        bad++;
}

#if defined(__x86_64__)
/* The x32 ABI: the native syscall instruction with __X32_SYSCALL_BIT. */
static long x32_syscall1(long nr, long a0)
{
        long ret;
        __asm__ volatile("syscall" : "=a"(ret) : "a"(nr | 0x40000000L), "D"(a0) : "rcx", "r11", "memory");
        return ret;
}

/* The i386 ABI from a 64-bit process: int 0x80. */
static long i386_syscall1(long nr, long a0)
{
        long ret;
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a0) : "memory");
        return ret;
}
#endif

static int in_own_userns(void)
{
        char a[64] = "", b[64] = "";

        if (readlink("/proc/self/ns/user", a, sizeof(a) - 1) < 0 || readlink("/proc/1/ns/user", b, sizeof(b) - 1) < 0)
                return 0;
        return strcmp(a, b) != 0;
}

int main(void)
{
        long r;
        char buf[64];
        int fd;

        /* A line at a time: what was printed survives a probe that crashes. */
        setvbuf(stdout, NULL, _IOLBF, 0);
        r = syscall(SYS_unshare, CLONE_NEWUSER);
        report("unshare-newuser", r < 0 && errno == EPERM, "ret", r);
#if defined(__x86_64__)
        r = x32_syscall1(272 /* unshare, x32 */, CLONE_NEWUSER);
        report("x32-unshare", r < 0 && !in_own_userns(), "ret", r);
        {
                /* In a child: a kernel without the i386 entry (IA32
                 * emulation off, or a guest that does not route int 0x80)
                 * answers with SIGSEGV, which would end every later probe.
                 * No entry at all is the attack failing too; so is the
                 * filter killing the caller (SIGSYS). */
                pid_t pid = fork();
                int st = 0;

                if (pid == 0) {
                        r = i386_syscall1(310 /* unshare, i386 */, CLONE_NEWUSER);
                        _exit(r < 0 && !in_own_userns() ? 0 : 1);
                }
                r = pid < 0 ? -1 : waitpid(pid, &st, 0);
                report("i386-unshare",
                       r > 0 && ((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
                                 (WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGSYS))),
                       "wait status", (long)st);
        }
#endif
        {
                uint64_t args[11] = { 0 };

                r = syscall(435 /* clone3 */, args, sizeof(args));
                report("clone3-enosys", r < 0 && errno == ENOSYS, "errno", (long)errno);
        }
        {
                uint32_t params[30] = { 0 };

                r = syscall(425 /* io_uring_setup */, 4, params);
                report("io_uring_setup", r < 0, "ret", r);
        }
        /* Calls newer than the filter (468 file_getattr and 469
         * file_setattr exist from Linux 6.17; the kernel here runs them):
         * ENOSYS, as Docker's allowlist refuses what it does not know. */
        {
                struct {
                        uint64_t a, b, c, d, e;
                } attr = { 0 };

                r = syscall(468 /* file_getattr */, AT_FDCWD, "/", &attr, sizeof(attr), 0);
                report("newer-468-enosys", r < 0 && errno == ENOSYS, "errno", (long)errno);
                r = syscall(469 /* file_setattr */, AT_FDCWD, "/tmp", &attr, sizeof(attr), 0);
                report("newer-469-enosys", r < 0 && errno == ENOSYS, "errno", (long)errno);
                r = syscall(1000);
                report("newer-1000-enosys", r < 0 && errno == ENOSYS, "errno", (long)errno);
        }
        {
                int p[2];
                char byte = 'x';
                struct iovec iov = { .iov_base = &byte, .iov_len = 1 };

                if (pipe(p) < 0) {
                        report("vmsplice-setup", 0, "errno", errno);
                } else {
                        r = syscall(SYS_vmsplice, p[1], &iov, 1, 0);
                        report("vmsplice", r < 0 && errno == EPERM, "ret", r);
                        close(p[0]);
                        close(p[1]);
                }
        }
        r = syscall(467 /* open_tree_attr */, AT_FDCWD, "/", 0, NULL, 0);
        report("open_tree_attr", r < 0 && (errno == EPERM || errno == ENOSYS), "errno", (long)errno);
        r = syscall(SYS_personality, 0x0400000L /* READ_IMPLIES_EXEC */);
        report("personality-read-implies-exec", r < 0 && errno == EPERM, "ret", r);
        r = syscall(SYS_personality, 0xffffffffL);
        report("personality-query-allowed", r >= 0, "ret", r);
        fd = open("/proc/1/mem", O_RDONLY | O_CLOEXEC);
        report("proc1-mem", fd < 0, "fd", fd);
        r = readlink("/proc/1/fd/0", buf, sizeof(buf));
        report("proc1-fd-readlink", r < 0, "ret", r);
        fd = open("/proc/1/fd/0", O_RDONLY | O_CLOEXEC);
        report("proc1-fd-open", fd < 0, "fd", fd);
        fd = open("/proc/1/environ", O_RDONLY | O_CLOEXEC);
        report("proc1-environ", fd < 0, "fd", fd);
        {
                int open_fds = 0;

                for (int i = 3; i < 1024; i++)
                        open_fds += fcntl(i, F_GETFD) >= 0;
                report("no-inherited-fds", open_fds == 0, "fds above 2:", open_fds);
        }
        fd = open("/tmp/probe-setid", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
                struct stat st;

                r = chmod("/tmp/probe-setid", 04755);
                report("chmod-4755", r < 0 && errno == EPERM, "ret", r);
                r = chmod("/tmp/probe-setid", 02755);
                report("chmod-2755", r < 0 && errno == EPERM, "ret", r);
                r = fchmod(fd, 06755);
                report("fchmod-6755", r < 0 && errno == EPERM, "ret", r);
                r = fchmodat(AT_FDCWD, "/tmp/probe-setid", 04755, 0);
                report("fchmodat-4755", r < 0 && errno == EPERM, "ret", r);
                r = syscall(452 /* fchmodat2 */, AT_FDCWD, "/tmp/probe-setid", 02755, 0);
                report("fchmodat2-2755", r < 0 && (errno == EPERM || errno == ENOSYS), "ret", r);
                r = chmod("/tmp/probe-setid", 0755);
                report("chmod-0755-allowed", r == 0, "ret", r);
                report("no-setid-bit", stat("/tmp/probe-setid", &st) == 0 && !(st.st_mode & 06000), "mode %lo",
                       (long)st.st_mode);
                close(fd);
                unlink("/tmp/probe-setid");
        } else {
                report("chmod-setup", 0, "errno", errno);
        }
        return bad ? 1 : 0;
}
