/* SPDX-License-Identifier: MIT */
/* The seccomp filter every process of a container runs under: the shim
 * installs it on itself first thing and its commands inherit it. For a
 * run it is the only one (the engine is asked for no profile of its own,
 * which would cost each start about 20 ms and add nothing); a persistent
 * sandbox keeps the engine's under it. It denies everything
 * Docker's default profile denies to a root without capabilities, calls
 * newer than it knows included, and closes what that profile leaves open:
 * user namespaces (`unshare -r` works under Podman's default profile, and
 * inside one a process holds every capability again), ptrace of its
 * siblings, setuid and setgid modes, and every ABI but the native one.
 * docs/explanation/seccomp.md compares the two. */
#include "config.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "src/shim/shim.h"

/* Denied with EPERM, as if the capability they need were missing, which is
 * the answer programs already handle. Every call Docker's default profile
 * denies to a container without CAP_SYS_ADMIN and friends is here (see
 * docs/explanation/seccomp.md for the comparison), and a few it allows. */
static const char *const denied[] = {
        /* namespaces and mounts */
        "unshare",
        "setns",
        "mount",
        "umount",
        "umount2",
        "pivot_root",
        "chroot",
        "fsopen",
        "fsconfig",
        "fsmount",
        "fspick",
        "move_mount",
        "open_tree",
        "mount_setattr",
        /* other processes' memory and files (Docker allows ptrace on 4.8+) */
        "ptrace",
        "process_vm_readv",
        "process_vm_writev",
        "process_madvise",
        "kcmp",
        "pidfd_getfd",
        /* pages of its memory spliced into a pipe (Podman's profile denies
         * it, Docker's allows it; programs fall back to write) */
        "vmsplice",
        /* kernel keyring, BPF, perf, userfaultfd, io_uring (its own syscall
         * surface, reached without any of the calls above) */
        "keyctl",
        "add_key",
        "request_key",
        "bpf",
        "perf_event_open",
        "userfaultfd",
        "fanotify_init",
        "lookup_dcookie",
        "io_uring_setup",
        "io_uring_enter",
        "io_uring_register",
        /* file handles: open_by_handle_at is the "shocker" escape */
        "open_by_handle_at",
        /* the machine itself */
        "kexec_load",
        "kexec_file_load",
        "init_module",
        "finit_module",
        "delete_module",
        "create_module",
        "get_kernel_syms",
        "query_module",
        "reboot",
        "swapon",
        "swapoff",
        "acct",
        "syslog",
        "vhangup",
        "quotactl",
        "quotactl_fd",
        "sethostname",
        "setdomainname",
        "settimeofday",
        "clock_settime",
        "iopl",
        "ioperm",
        "_sysctl",
        "sysfs",
        "ustat",
        "uselib",
        "nfsservctl",
        "vm86",
        "vm86old",
        /* NUMA placement (Docker wants CAP_SYS_NICE) */
        "get_mempolicy",
        "set_mempolicy",
        "set_mempolicy_home_node",
        "mbind",
        "migrate_pages",
        "move_pages",
        /* never implemented */
        "afs_syscall",
        "tuxcall",
        "security",
        "vserver",
        "getpmsg",
        "putpmsg",
};

/* Calls newer than libseccomp 2.5 knows by name. From 5.1 on, a new call
 * has one number on every architecture but alpha (x86_64 and arm64 alike). */
static const int denied_nr[] = {
        459, 460, 461, /* lsm_get_self_attr, lsm_set_self_attr, lsm_list_modules: CAP_SYS_ADMIN in Docker */
        467,           /* open_tree_attr: the mount API */
};

/* Every call from this number on is newer than this filter (468 and 469
 * are file_getattr and file_setattr, Linux 6.17). Docker's allowlist denies
 * what it does not know; so does this, with ENOSYS, what a kernel without
 * the call answers, so that a program takes its fallback. The first
 * instructions of the pre-filter below. */
#define FIRST_UNKNOWN_NR 468
#define NR_FCHMODAT2 452

/* clone() may fork and make threads, but not enter new namespaces. (The
 * low byte is the exit signal, so CLONE_NEWTIME cannot be asked for here;
 * unshare and clone3 are closed as a whole.) */
static const unsigned long clone_new[] = {
        CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
};

static int deny_name(scmp_filter_ctx ctx, const char *name, int err)
{
        int nr = seccomp_syscall_resolve_name(name), r;

        if (nr == __NR_SCMP_ERROR)
                return 0; /* not a system call of this architecture: nothing to close */
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 0);
        if (r < 0)
                shim_log("seccomp rule for %s: %s", name, strerror(-r));
        return r;
}

/* chmod and friends may not set the setuid or setgid bit: a file the
 * sandbox writes to /out must give no host user a privilege. (The host
 * strips such bits too; this is the layer inside.) */
static int deny_setid_modes(scmp_filter_ctx ctx)
{
        static const struct {
                const char *name;
                int nr;
                unsigned arg;
        } calls[] = {
                { "chmod", -1, 1 },
                { "fchmod", -1, 1 },
                { "fchmodat", -1, 2 },
                { NULL, NR_FCHMODAT2, 2 },
        };
        static const unsigned long bits[] = { S_ISUID, S_ISGID };
        int r;

        for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
                int nr = calls[i].name ? seccomp_syscall_resolve_name(calls[i].name) : calls[i].nr;

                if (nr == __NR_SCMP_ERROR)
                        continue;
                for (size_t j = 0; j < 2; j++) {
                        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 1,
                                             SCMP_CMP(calls[i].arg, SCMP_CMP_MASKED_EQ, bits[j], bits[j]));
                        if (r < 0) {
                                shim_log("seccomp rule for the mode of %s: %s",
                                         calls[i].name ? calls[i].name : "fchmodat2", strerror(-r));
                                return r;
                        }
                }
        }
        return 0;
}

static int add_rules(scmp_filter_ctx ctx)
{
        int r;

        for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++)
                if ((r = deny_name(ctx, denied[i], EPERM)) < 0)
                        return r;
        /* name_to_handle_at hands out the handles open_by_handle_at takes
         * (and inode numbers of the host's files). EOPNOTSUPP is what a
         * file system without handles answers: callers fall back. */
        if ((r = deny_name(ctx, "name_to_handle_at", EOPNOTSUPP)) < 0)
                return r;
        for (size_t i = 0; i < sizeof(denied_nr) / sizeof(denied_nr[0]); i++) {
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), denied_nr[i], 0);
                if (r < 0) {
                        shim_log("seccomp rule for system call %d: %s", denied_nr[i], strerror(-r));
                        return r;
                }
        }
        for (size_t i = 0; i < sizeof(clone_new) / sizeof(clone_new[0]); i++) {
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                     SCMP_A0(SCMP_CMP_MASKED_EQ, clone_new[i], clone_new[i]));
                if (r < 0) {
                        shim_log("seccomp rule for clone: %s", strerror(-r));
                        return r;
                }
        }
        /* AF_KCM (38) and AF_VSOCK (40), as Docker. */
        for (unsigned long fam = 38; fam <= 40; fam += 2) {
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_EQ, fam, 0));
                if (r < 0) {
                        shim_log("seccomp rule for socket: %s", strerror(-r));
                        return r;
                }
        }
        if ((r = deny_setid_modes(ctx)) < 0)
                return r;
        /* clone3 passes its flags in memory a filter cannot read. ENOSYS
         * (not EPERM) makes glibc fall back to clone, which the rules above
         * can judge; threads and posix_spawn keep working. */
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
        if (r < 0)
                shim_log("seccomp rule for clone3: %s", strerror(-r));
        return r;
}

/* The pre-filter, hand-written classic BPF loaded just before the main
 * one (the kernel runs both and takes the stricter answer), for what
 * libseccomp cannot say under an ALLOW default:
 * - calls numbered FIRST_UNKNOWN_NR and up fail with ENOSYS (a range; an
 *   x32 number, with __X32_SYSCALL_BIT, falls here too, as in the main
 *   filter);
 * - personality() only with the values Docker allows: PER_LINUX (0),
 *   PER_LINUX32 (8), either with UNAME26 (0x20000), and the query
 *   0xffffffff. The others turn address randomisation off
 *   (ADDR_NO_RANDOMIZE), map page zero (MMAP_PAGE_ZERO) or make every
 *   readable mapping executable (READ_IMPLIES_EXEC). The kernel reads the
 *   argument as an unsigned int: so does this. */
#if defined(__x86_64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define ARG0_LO offsetof(struct seccomp_data, args[0])
#else
#define ARG0_LO (offsetof(struct seccomp_data, args[0]) + 4)
#endif

#ifdef NATIVE_AUDIT_ARCH
static struct sock_filter pre_insns[] = {
        /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        /* Other ABIs: the main filter refuses them altogether. */
        /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 0, 9),
        /* 2 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        /* 3 */ BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, FIRST_UNKNOWN_NR, 9, 0),
        /* 4 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_personality, 0, 6),
        /* 5 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG0_LO),
        /* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0, 4, 0),
        /* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x8, 3, 0),
        /* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x20000, 2, 0),
        /* 9 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x20008, 1, 0),
        /* 10 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffff, 0, 1),
        /* 11 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        /* 12 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        /* 13 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
};
#endif

int shim_filter_build(struct sock_fprog *ret)
{
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        struct sock_filter *insns = NULL;
        struct stat st;
        int fd = -1, r;

        if (!ctx)
                return -ENOMEM;
        /* shim_filter_install sets no_new_privs itself right before loading. */
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
        /* Only the native ABI. A 64-bit x86 process can also make 32-bit
         * (int 0x80) and x32 system calls, whose compat code is a surface
         * of its own and whose numbers differ: rather than repeat every
         * rule there, such calls fail with ENOSYS, as on a kernel built
         * without them (libseccomp also sends x32 numbers here). */
        if (r >= 0)
                r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS));
        if (r >= 0)
                r = add_rules(ctx);
        if (r < 0)
                goto out;
        /* libseccomp 2.5 exports only to a file descriptor. */
        fd = memfd_create("demesne-shim-filter", MFD_CLOEXEC);
        if (fd < 0) {
                r = -errno;
                goto out;
        }
        r = seccomp_export_bpf(ctx, fd);
        if (r < 0)
                goto out;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                goto out;
        }
        if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) ||
            st.st_size / sizeof(struct sock_filter) > BPF_MAXINSNS) {
                r = -EINVAL;
                goto out;
        }
        insns = malloc((size_t)st.st_size);
        if (!insns) {
                r = -ENOMEM;
                goto out;
        }
        if (pread(fd, insns, (size_t)st.st_size, 0) != st.st_size) {
                r = -EIO;
                goto out;
        }
        ret->len = (unsigned short)(st.st_size / sizeof(struct sock_filter));
        ret->filter = insns;
        insns = NULL;
        r = 0;
out:
        free(insns);
        if (fd >= 0)
                close(fd);
        seccomp_release(ctx);
        return r;
}

int shim_filter_install(const struct sock_fprog *prog)
{
        /* Without CAP_SYS_ADMIN the kernel accepts a filter only under
         * no_new_privs; the container has it already, this makes sure. */
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
                return -errno;
#ifdef NATIVE_AUDIT_ARCH
        {
                struct sock_fprog pre = {
                        .len = sizeof(pre_insns) / sizeof(pre_insns[0]),
                        .filter = pre_insns,
                };

                if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &pre) < 0)
                        return -errno;
        }
#endif
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog) < 0)
                return -errno;
        return 0;
}
