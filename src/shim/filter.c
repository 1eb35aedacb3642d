/* SPDX-License-Identifier: MIT */
/* The seccomp filter every command runs under. It stacks on the engine's
 * own profile (filters combine: the strictest answer wins) and closes what
 * that profile leaves open to a root process without capabilities: user
 * namespaces (`unshare -r` works under Podman's default profile, and inside
 * one a process holds every capability again), ptrace of its siblings, the
 * kernel keyring, BPF, and the mount APIs. */
#include "config.h"

#include <errno.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/shim/shim.h"

/* Denied with EPERM, as if the capability they need were missing, which is
 * the answer programs already handle. */
static const char *const denied[] = {
        "unshare", "setns",
        "mount", "umount", "umount2", "pivot_root",
        "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
        "ptrace", "process_vm_readv", "process_vm_writev",
        "keyctl", "add_key", "request_key",
        "bpf", "perf_event_open", "userfaultfd", "open_by_handle_at",
        "kexec_load", "kexec_file_load",
        "init_module", "finit_module", "delete_module",
};

/* clone() may fork and make threads, but not enter new namespaces. (The
 * low byte is the exit signal, so CLONE_NEWTIME cannot be asked for here;
 * unshare and clone3 are closed as a whole.) */
static const unsigned long clone_new[] = {
        CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
};

static int add_arches(scmp_filter_ctx ctx)
{
        /* A 64-bit x86 process can make 32-bit (int 0x80) and x32 system
         * calls: the same rules must hold there, or a static i386 binary
         * would walk around them. */
        if (seccomp_arch_native() == SCMP_ARCH_X86_64) {
                int r = seccomp_arch_add(ctx, SCMP_ARCH_X86);

                if (r < 0 && r != -EEXIST)
                        return r;
                r = seccomp_arch_add(ctx, SCMP_ARCH_X32);
                if (r < 0 && r != -EEXIST)
                        return r;
        }
        return 0;
}

static int add_rules(scmp_filter_ctx ctx)
{
        int r, nr;

        for (size_t i = 0; i < sizeof(denied) / sizeof(denied[0]); i++) {
                nr = seccomp_syscall_resolve_name(denied[i]);
                if (nr == __NR_SCMP_ERROR)
                        continue; /* not a system call this libseccomp knows: nothing to close */
                r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
                if (r < 0) {
                        shim_log("seccomp rule for %s: %s", denied[i], strerror(-r));
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
        /* clone3 passes its flags in memory a filter cannot read. ENOSYS
         * (not EPERM) makes glibc fall back to clone, which the rules above
         * can judge; threads and posix_spawn keep working. */
        r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
        if (r < 0)
                shim_log("seccomp rule for clone3: %s", strerror(-r));
        return r;
}

int shim_filter_build(struct sock_fprog *ret)
{
        scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
        struct sock_filter *insns = NULL;
        struct stat st;
        int fd = -1, r;

        if (!ctx)
                return -ENOMEM;
        /* The child sets no_new_privs itself right before loading. */
        r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
        if (r >= 0)
                r = add_arches(ctx);
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
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog) < 0)
                return -errno;
        return 0;
}
