/* SPDX-License-Identifier: MIT */
/* Starting one command: a child that shares the shim's memory until it has
 * called execve (clone with CLONE_VM | CLONE_VFORK, as posix_spawn does),
 * and in it everything that must happen between the two. A fork would copy
 * the shim's page tables and then fault on every page either side writes
 * before the exec: in a guest where each page-table change is a hypercall
 * that was most of what the shim adds to a command (fork, 0.4 ms in the
 * parent and a millisecond in the child, against 0.1 ms).
 * The shim is suspended until the child has exec'd or exited, and is
 * single-threaded, so the child may still call ordinary libc; it allocates
 * nothing all the same, and writes no memory of the shim's but its own
 * stack and errno (which the shim does not read across the clone):
 * everything it needs is prepared before it. It has its own
 * signal handlers, files, working directory and limits (none of
 * CLONE_SIGHAND, CLONE_FILES, CLONE_FS), so what it changes there is its
 * own. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/shim/shim.h"

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

static char **base_env;

static int command_nice;

void shim_spawn_set_nice(int nice)
{
        command_nice = nice;
}

void shim_spawn_set_base_env(char **environ_copy)
{
        base_env = environ_copy;
}

enum stage { STAGE_RLIMIT = 1, STAGE_CHDIR, STAGE_STDIO, STAGE_CWD_CHECK };

struct child_report {
        int stage;
        int err;
        int detail; /* the rlimit resource */
};

static size_t key_len(const char *kv)
{
        const char *eq = strchr(kv, '=');
        return eq ? (size_t)(eq - kv) : strlen(kv);
}

static bool same_key(const char *a, const char *b)
{
        size_t n = key_len(a);
        return n == key_len(b) && memcmp(a, b, n) == 0;
}

static bool overridden(const char *kv, const char *const *env, size_t from)
{
        for (size_t j = from; env && env[j]; j++)
                if (same_key(kv, env[j]))
                        return true;
        return false;
}

/* The base environment with the request's entries on top (the last of
 * several entries with one name wins), and a PATH if neither had one. */
static char **merge_env(const struct dm_shim_exec_msg *m, const char **ret_path)
{
        size_t nb = 0, n = 0;
        char **out;
        bool clear = m->flags & DM_SHIM_F_CLEARENV;

        for (; !clear && base_env && base_env[nb]; nb++)
                ;
        out = malloc((nb + m->envc + 2) * sizeof(*out));
        if (!out)
                return NULL;
        for (size_t i = 0; i < nb; i++)
                if (!overridden(base_env[i], m->env, 0))
                        out[n++] = base_env[i];
        for (size_t i = 0; i < m->envc; i++)
                if (!overridden(m->env[i], m->env, i + 1))
                        out[n++] = (char *)m->env[i];
        *ret_path = NULL;
        for (size_t i = 0; i < n; i++)
                if (strncmp(out[i], "PATH=", 5) == 0)
                        *ret_path = out[i] + 5;
        if (!*ret_path) {
                out[n++] = (char *)"PATH=" DEFAULT_PATH;
                *ret_path = DEFAULT_PATH;
        }
        out[n] = NULL;
        return out;
}

/* execvp's search, but over the command's PATH rather than the shim's. */
static int exec_search(const char *file, char *const argv[], char *const envp[], const char *path)
{
        char buf[PATH_MAX];
        bool eacces = false;
        int last = ENOENT;

        if (strchr(file, '/')) {
                execve(file, argv, envp);
                return errno;
        }
        for (const char *p = path;; p++) {
                const char *end = strchr(p, ':');
                size_t dl = end ? (size_t)(end - p) : strlen(p);

                /* An empty entry means the current directory (POSIX). */
                if (dl + 1 + strlen(file) + 1 <= sizeof(buf)) {
                        if (dl == 0)
                                snprintf(buf, sizeof(buf), "%s", file);
                        else
                                snprintf(buf, sizeof(buf), "%.*s/%s", (int)dl, p, file);
                        execve(buf, argv, envp);
                        switch (errno) {
                        case EACCES:
                                eacces = true;
                                /* fall through */
                        case ENOENT:
                        case ENOTDIR:
                        case ESTALE:
                        case ENODEV:
                        case ETIMEDOUT: break;
                        default: return errno;
                        }
                } else {
                        last = ENAMETOOLONG;
                }
                if (!end)
                        break;
                p = end;
        }
        return eacces ? EACCES : last;
}

static void report(int fd, enum stage stage, int err, int detail)
{
        struct child_report r = { stage, err, detail };

        if (write(fd, &r, sizeof(r)) < 0) {
                /* The parent sees EOF and then the exit status 125. */
        }
        _exit(125);
}

/* The warm shell's two descriptors at 3 and 4, as `bash -c` gets them
 * (not close-on-exec); rep_w is moved out of the way first. */
static int place_warm_fds(int tok_r, int cmd_fd, int *rep_w)
{
        int t, c;

        if (*rep_w < 5 && (*rep_w = fcntl(*rep_w, F_DUPFD_CLOEXEC, 5)) < 0)
                return -1;
        t = fcntl(tok_r, F_DUPFD_CLOEXEC, 5);
        c = fcntl(cmd_fd, F_DUPFD_CLOEXEC, 5);
        if (t < 0 || c < 0 || dup2(t, 3) < 0 || dup2(c, 4) < 0)
                return -1;
        return 0;
}

static void child(const struct dm_shim_exec_msg *m, int in_r, int out_w, int err_w, int rep_w, int tok_r, int cmd_fd,
                  char *const envp[], const char *path)
{
        struct sigaction dfl = { .sa_handler = SIG_DFL };
        sigset_t none;
        int fd, e;

        /* The shim blocks and ignores signals for itself; a command must
         * start with the defaults (an ignored SIGPIPE would survive execve). */
        for (int sig = 1; sig < NSIG; sig++)
                sigaction(sig, &dfl, NULL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        /* Its own group, so a cancel reaches everything it starts. */
        setpgid(0, 0);
        /* Best effort: a higher nice value is always allowed. */
        if (command_nice)
                (void)setpriority(PRIO_PROCESS, 0, command_nice);

        fd = in_r >= 0 ? in_r : open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || dup2(fd, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
                report(rep_w, STAGE_STDIO, errno, 0);
        if (tok_r >= 0 && place_warm_fds(tok_r, cmd_fd, &rep_w) < 0)
                report(rep_w, STAGE_STDIO, errno, 0);
        for (size_t i = 0; i < m->n_rlimits; i++) {
                struct rlimit rl = {
                        m->rlimits[i].soft == UINT64_MAX ? RLIM_INFINITY : (rlim_t)m->rlimits[i].soft,
                        m->rlimits[i].hard == UINT64_MAX ? RLIM_INFINITY : (rlim_t)m->rlimits[i].hard,
                };

                if (setrlimit(m->rlimits[i].resource, &rl) < 0)
                        report(rep_w, STAGE_RLIMIT, errno, m->rlimits[i].resource);
        }
        if (m->cwd[0] && chdir(m->cwd) < 0)
                report(rep_w, STAGE_CHDIR, errno, 0);
        e = shim_check_cwd();
        if (e < 0)
                report(rep_w, STAGE_CWD_CHECK, -e, 0);
        /* Only 0-2 (3-4 for a warm shell) and the report pipe
         * (close-on-exec) reach execve. The filter is in force already:
         * inherited from the shim. */
        shim_close_from(tok_r >= 0 ? 5 : 3, rep_w);

        e = exec_search(m->argv[0], (char *const *)m->argv, envp, path);
        dprintf(2, "demesne-shim: cannot run '%s': %s\n", m->argv[0], strerror(e));
        _exit(e == ENOENT ? 127 : 126);
}

struct child_args {
        const struct dm_shim_exec_msg *m;
        int in_r, out_w, err_w, rep_w, tok_r, cmd_fd;
        char *const *envp;
        const char *path;
};

static int child_main(void *arg)
{
        const struct child_args *a = arg;

        child(a->m, a->in_r, a->out_w, a->err_w, a->rep_w, a->tok_r, a->cmd_fd, a->envp, a->path);
        return 127; /* not reached: child() execs or exits */
}

/* The child's stack: one spawn at a time, and the shim waits meanwhile. */
static char child_stack[256 * 1024] __attribute__((aligned(64)));

static int set_nonblock(int fd)
{
        int fl = fcntl(fd, F_GETFL);
        return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

static void close_all(int *fds, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (fds[i] >= 0) {
                        close(fds[i]);
                        fds[i] = -1;
                }
}

static void cwd_refused(const char *cwd, int e, char *msg, size_t msg_len)
{
        const char *dir = cwd[0] ? cwd : "(the container's working directory)";

        if (e == EPERM)
                snprintf(msg, msg_len,
                         "the working directory '%s' is on /proc, which is refused: it can lead "
                         "outside the sandbox",
                         dir);
        else if (e == EXDEV)
                snprintf(msg, msg_len,
                         "the working directory '%s' lies outside the sandbox's file system, which "
                         "is refused",
                         dir);
        else
                snprintf(msg, msg_len, "cannot examine the working directory '%s': %s", dir, strerror(e));
}

int shim_spawn_warm(const struct dm_shim_exec_msg *m, int tok_r, int cmd_fd, struct shim_child *ret, char *msg,
                    size_t msg_len)
{
        /* in[2], out[2], err[2], rep[2] */
        int fds[8] = { -1, -1, -1, -1, -1, -1, -1, -1 };
        bool want_in = m->flags & DM_SHIM_F_STDIN;
        struct child_report rep;
        const char *path;
        char **envp;
        ssize_t n;
        pid_t pid;
        int r = 0;

        /* Up front, before anything resolves it: /proc/self/fd/N and the like. */
        if (m->cwd[0] && dm_shim_path_under_proc(m->cwd)) {
                cwd_refused(m->cwd, EPERM, msg, msg_len);
                return -EPERM;
        }
        envp = merge_env(m, &path);
        if (!envp) {
                snprintf(msg, msg_len, "out of memory");
                return -ENOMEM;
        }
        if ((want_in && pipe2(fds, O_CLOEXEC) < 0) || pipe2(fds + 2, O_CLOEXEC) < 0 || pipe2(fds + 4, O_CLOEXEC) < 0 ||
            pipe2(fds + 6, O_CLOEXEC) < 0) {
                r = -errno;
                snprintf(msg, msg_len, "cannot make pipes: %s", strerror(errno));
                goto fail;
        }
        {
                struct child_args a = { m, fds[0], fds[3], fds[5], fds[7], tok_r, cmd_fd, envp, path };

                /* Returns once the child has exec'd or exited. */
                pid = clone(child_main, child_stack + sizeof(child_stack), CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
        }
        if (pid < 0) {
                r = -errno;
                if (errno == EAGAIN)
                        /* RLIMIT_NPROC, which counts every sandbox of a
                         * rootless user together (see src/core/launch.c). */
                        snprintf(msg, msg_len,
                                 "cannot fork: the process limit is reached (DEMESNE_NPROC; rootless without a pids "
                                 "cgroup, all of this user's sandboxes count together, and a fork bomb in one holds "
                                 "the limit until demesne-shim stops it): try again");
                else
                        snprintf(msg, msg_len, "cannot fork: %s", strerror(errno));
                goto fail;
        }
        /* The child ran setpgid before it exec'd: a KILL finds the group. */
        close(fds[0]);
        close(fds[3]);
        close(fds[5]);
        close(fds[7]);
        fds[0] = fds[3] = fds[5] = fds[7] = -1;
        free(envp);
        envp = NULL;

        /* EOF when execve closed the close-on-exec pipe (done by now), a
         * report when the child failed before it. */
        do
                n = read(fds[6], &rep, sizeof(rep));
        while (n < 0 && errno == EINTR);
        close(fds[6]);
        fds[6] = -1;
        if (n == (ssize_t)sizeof(rep)) {
                waitpid(pid, NULL, 0);
                r = -rep.err;
                switch (rep.stage) {
                case STAGE_CHDIR:
                        snprintf(msg, msg_len, "cannot change to directory '%s': %s", m->cwd, strerror(rep.err));
                        break;
                case STAGE_RLIMIT:
                        snprintf(msg, msg_len, "cannot set resource limit %d: %s", rep.detail, strerror(rep.err));
                        break;
                case STAGE_CWD_CHECK: cwd_refused(m->cwd, rep.err, msg, msg_len); break;
                default: snprintf(msg, msg_len, "cannot set up the command's stdio: %s", strerror(rep.err)); break;
                }
                goto fail;
        }
        if ((want_in && set_nonblock(fds[1]) < 0) || set_nonblock(fds[2]) < 0 || set_nonblock(fds[4]) < 0) {
                /* Cannot happen on a pipe; do not leave a half-managed child. */
                kill(-pid, SIGKILL);
                waitpid(pid, NULL, 0);
                r = -EIO;
                snprintf(msg, msg_len, "cannot set up pipes");
                goto fail;
        }
        ret->pid = pid;
        ret->in_fd = want_in ? fds[1] : -1;
        ret->out_fd = fds[2];
        ret->err_fd = fds[4];
        return 0;

fail:
        free(envp);
        close_all(fds, 8);
        return r < 0 ? r : -EIO;
}

int shim_spawn(const struct dm_shim_exec_msg *m, struct shim_child *ret, char *msg, size_t msg_len)
{
        return shim_spawn_warm(m, -1, -1, ret, msg, msg_len);
}
