/* SPDX-License-Identifier: MIT */
/* The warm shell: most of a `sandbox_exec` of a short command was bash's
 * own exec and start-up (in a guest where every page-table change is a
 * hypercall, 5-8 ms of a 13 ms call), so the shim starts the next bash
 * ahead of time, after a command's exit frame went out, and a request
 * that fits what it was made for runs in it: the command reaches it
 * through a memfd (fd 4) and a one-byte token on a pipe (fd 3), and bash
 * runs it with its own parser (`eval`) in the same process.
 *
 * It is made exactly as shim_spawn makes a command (environment, working
 * directory, limits, nice value, signal dispositions, process group, stdio
 * pipes, stdin /dev/null, the inherited filter): only the argv differs, a
 * bootstrap that reads the command, closes 3 and 4, leaves `$_` as bash
 * -c would, stores the command in BASH_EXECUTION_STRING (where bash -c
 * keeps it) and evals it. A request that differs in anything (its own
 * environment, rlimits, flags, a working directory that is another
 * directory, stdin, another argv than `/bin/bash -c CMD`, a longer command
 * than WARM_CMD_MAX, an environment that sets `_`) takes the cold path and
 * the warm shell stays; two such requests in a row with the same shape
 * make the next warm shell theirs. One warm shell at a time: a request
 * that arrives while the warm shell runs a command goes cold. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/shim/shim.h"

#define WARM_CMD_MAX (64 * 1024)
/* Below this pids cap the warm shell's process is too large a share. */
#define WARM_MIN_PIDS 16

/* Read the token (EOF: the shim dropped us; "1": see in_place()), then the
 * command; close both descriptors; leave `$_` at $0 as bash -c starts; run
 * it. */
static const char boot[] = "read -r -u 3 BASH_EXECUTION_STRING || exit 125; "
                           "[ -z \"$BASH_EXECUTION_STRING\" ] || SHLVL=$((SHLVL - 1)); "
                           "IFS= read -r -d '' -u 4 BASH_EXECUTION_STRING; "
                           "exec 3<&- 4<&-; : \"$0\"; eval \"$BASH_EXECUTION_STRING\"";

static struct {
        bool off;
        bool due;                                          /* start one when the loop is next idle */
        char **base_env;                                   /* the shim's, for in_place() */
        pid_t pid;                                         /* the idle warm shell; 0: none */
        int tok_w, cmd_fd;                                 /* its fd 3's write end; its fd 4 (a memfd) */
        int out_fd, err_fd;                                /* its stdout and stderr, read ends */
        dev_t dev;                                         /* its working directory */
        ino_t ino;                                         /* " */
        struct dm_shim_exec_msg *spec;                     /* what it is made for; NULL: the defaults */
        struct dm_shim_exec_msg *miss;                     /* the last request that missed on its shape */
        enum { ADOPT_NONE, ADOPT_SPEC, ADOPT_MISS } adopt; /* what shim_warm_adopt keeps m as */
} W = { .tok_w = -1, .cmd_fd = -1, .out_fd = -1, .err_fd = -1 };

/* What bash runs itself rather than from PATH (`compgen -b -k`, bash 5.2). */
static const char *const bash_own[] = {
        ":",       ".",       "alias",    "bg",      "bind",     "break",     "builtin",  "caller", "cd",
        "command", "compgen", "complete", "compopt", "continue", "declare",   "dirs",     "disown", "echo",
        "enable",  "eval",    "exec",     "exit",    "export",   "false",     "fc",       "fg",     "getopts",
        "hash",    "help",    "history",  "jobs",    "kill",     "let",       "local",    "logout", "mapfile",
        "popd",    "printf",  "pushd",    "pwd",     "read",     "readarray", "readonly", "return", "set",
        "shift",   "shopt",   "source",   "suspend", "test",     "times",     "trap",     "true",   "type",
        "typeset", "ulimit",  "umask",    "unalias", "unset",    "wait",      "if",       "then",   "else",
        "elif",    "fi",      "case",     "esac",    "for",      "select",    "while",    "until",  "do",
        "done",    "in",      "function", "time",    "coproc",
};

static bool has_prefix(const char *const *env, size_t n, const char *prefix)
{
        for (size_t i = 0; env && (n ? i < n : env[i] != NULL); i++)
                if (strncmp(env[i], prefix, strlen(prefix)) == 0)
                        return true;
        return false;
}

/* Whether `bash -c cmd` would exec cmd in place of itself (its one-shot:
 * a single simple command that is a program), told conservatively: plain
 * words only (nothing bash expands, quotes or redirects), the first no
 * assignment, builtin or reserved word, and no exported function in the
 * environment. bash then decrements SHLVL before the exec; the warm shell,
 * which forks the program instead, does so before it runs the command, so
 * the program's environment is the same. */
static bool in_place(const char *cmd, const struct dm_shim_exec_msg *m)
{
        static const char plain[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:,+@%=-";
        const char *p = cmd + strspn(cmd, " \t");
        size_t first = strspn(p, plain);
        char word[256];

        if (!first || first >= sizeof(word) || memchr(p, '=', first))
                return false;
        for (const char *q = p; *q; q++)
                if (!strchr(plain, *q) && *q != ' ' && *q != '\t' && !(*q == '\n' && q[1] == '\0'))
                        return false;
        memcpy(word, p, first);
        word[first] = '\0';
        for (size_t i = 0; i < sizeof(bash_own) / sizeof(*bash_own); i++)
                if (strcmp(word, bash_own[i]) == 0)
                        return false;
        return !has_prefix((const char *const *)W.base_env, 0, "BASH_FUNC_") &&
               !has_prefix(m->env, m->envc, "BASH_FUNC_");
}

static void close_fd(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

static void forget(void)
{
        W.pid = 0;
        close_fd(&W.tok_w);
        close_fd(&W.cmd_fd);
        close_fd(&W.out_fd);
        close_fd(&W.err_fd);
}

static void stop(bool again)
{
        if (W.pid) {
                kill(-W.pid, SIGKILL);
                waitpid(W.pid, NULL, 0);
        }
        forget();
        W.due = again && !W.off;
}

/* The pids cap the engine put on the container's cgroup, or 0 for none. */
static unsigned long cgroup_pids_max(void)
{
        static const char *const files[] = { "/sys/fs/cgroup/pids.max", "/sys/fs/cgroup/pids/pids.max" };

        for (size_t i = 0; i < sizeof(files) / sizeof(*files); i++) {
                FILE *f = fopen(files[i], "re");
                unsigned long n = 0;
                int got;

                if (!f)
                        continue;
                got = fscanf(f, "%lu", &n);
                fclose(f);
                return got == 1 ? n : 0;
        }
        return 0;
}

void shim_warm_init(char **base_env, unsigned long pids_max, bool off)
{
        const char *v = getenv("DEMESNE_SHIM_WARM");
        unsigned long cg = cgroup_pids_max();
        size_t j = 0;

        W.off = off || (v && (strcmp(v, "0") == 0 || strcmp(v, "off") == 0 || strcmp(v, "no") == 0));
        W.off |= (pids_max && pids_max < WARM_MIN_PIDS) || (cg && cg < WARM_MIN_PIDS);
        /* The switch is the shim's, not the commands'; and an environment
         * that sets `_` would show it where the bootstrap cannot. */
        for (size_t i = 0; base_env && base_env[i]; i++) {
                if (strncmp(base_env[i], "DEMESNE_SHIM_WARM=", 18) == 0)
                        continue;
                W.off |= strncmp(base_env[i], "_=", 2) == 0;
                base_env[j++] = base_env[i];
        }
        if (base_env)
                base_env[j] = NULL;
        W.base_env = base_env;
        W.due = !W.off;
}

static int cwd_of(pid_t pid, dev_t *ret_dev, ino_t *ret_ino)
{
        char p[64];
        struct stat st;

        snprintf(p, sizeof(p), "/proc/%d/cwd", (int)pid);
        if (stat(p, &st) < 0)
                return -errno;
        *ret_dev = st.st_dev;
        *ret_ino = st.st_ino;
        return 0;
}

void shim_warm_start(void)
{
        static const char *const argv[] = { "/bin/bash", "-c", boot, NULL };
        struct dm_shim_exec_msg m = { .cwd = "" };
        struct shim_child c;
        char msg[DM_SHIM_MSG_MAX];
        int tok[2] = { -1, -1 };

        if (W.off || !W.due || W.pid)
                return;
        W.due = false;
        if (W.spec)
                m = *W.spec;
        m.argv = argv;
        m.argc = 3;
        m.flags &= ~(DM_SHIM_F_STDIN | DM_SHIM_F_STDIN_MORE);
        m.stdin_data = NULL;
        m.stdin_len = 0;
        m.timeout_ms = 0;
        W.cmd_fd = memfd_create("demesne-shim-command", MFD_CLOEXEC);
        /* The token's write end does not block: a command of the sandbox
         * can reach the warm shell's fd 3 through /proc and fill the pipe,
         * which must not stop the shim (the take then fails: cold). */
        if (W.cmd_fd < 0 || pipe2(tok, O_CLOEXEC) < 0 || fcntl(tok[1], F_SETFL, O_NONBLOCK) < 0)
                goto fail;
        /* A failure (the process cap, a working directory gone) leaves no
         * warm shell until the next command ends: the cold path says why. */
        if (shim_spawn_warm(&m, tok[0], W.cmd_fd, &c, msg, sizeof(msg)) < 0)
                goto fail;
        close_fd(&tok[0]);
        W.pid = c.pid;
        W.tok_w = tok[1];
        W.out_fd = c.out_fd;
        W.err_fd = c.err_fd;
        if (cwd_of(W.pid, &W.dev, &W.ino) < 0)
                stop(false);
        return;
fail:
        close_fd(&tok[0]);
        close_fd(&tok[1]);
        close_fd(&W.cmd_fd);
}

static bool same_strings(const char *const *a, size_t na, const char *const *b, size_t nb)
{
        if (na != nb)
                return false;
        for (size_t i = 0; i < na; i++)
                if (strcmp(a[i], b[i]) != 0)
                        return false;
        return true;
}

/* Whether m is a `bash -c CMD` request the warm shell could run at all. */
static bool shaped(const struct dm_shim_exec_msg *m)
{
        if (m->flags & (DM_SHIM_F_STDIN | DM_SHIM_F_STDIN_MORE))
                return false;
        if (m->argc != 3 || strcmp(m->argv[0], "/bin/bash") != 0 || strcmp(m->argv[1], "-c") != 0 ||
            strlen(m->argv[2]) > WARM_CMD_MAX)
                return false;
        for (size_t i = 0; i < m->envc; i++)
                if (strncmp(m->env[i], "_=", 2) == 0)
                        return false;
        /* The cold path refuses it, with its sentence. */
        return !(m->cwd[0] && dm_shim_path_under_proc(m->cwd));
}

/* Whether a shaped m asks for what spec (NULL: the defaults) was made for,
 * the working directory aside. */
static bool same_spec(const struct dm_shim_exec_msg *m, const struct dm_shim_exec_msg *spec)
{
        static const struct dm_shim_exec_msg none = { .cwd = "" };

        if (!spec)
                spec = &none;
        return (m->flags & ~DM_SHIM_F_STDIN_MORE) == (spec->flags & ~(DM_SHIM_F_STDIN | DM_SHIM_F_STDIN_MORE)) &&
               same_strings(m->env, m->envc, spec->env, spec->envc) && m->n_rlimits == spec->n_rlimits &&
               memcmp(m->rlimits, spec->rlimits, m->n_rlimits * sizeof(*m->rlimits)) == 0;
}

/* The directory m would run in is the one the warm shell is in: the same
 * path names another directory once it was removed and made again. */
static bool same_dir(const struct dm_shim_exec_msg *m)
{
        struct stat st;

        return stat(m->cwd[0] ? m->cwd : ".", &st) == 0 && st.st_dev == W.dev && st.st_ino == W.ino;
}

static int write_all_at(int fd, const char *p, size_t n)
{
        off_t off = 0;

        if (ftruncate(fd, 0) < 0)
                return -errno;
        while (n) {
                ssize_t w = pwrite(fd, p, n, off);

                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return w < 0 ? -errno : -EIO;
                p += w;
                off += w;
                n -= (size_t)w;
        }
        return 0;
}

/* Whether the idle warm shell is dead or dying: a zombie the reaper has
 * not seen yet, or a SIGKILL pending (another command's `kill -9 -1`
 * returned, but the shell has not run its exit yet). The token would
 * still go into its pipe, and the command would end killed without
 * having run. */
static bool doomed(pid_t pid)
{
        char path[64], buf[4096], *p;
        int fd;
        ssize_t n;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return true;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return true;
        buf[n] = '\0';
        if ((p = strstr(buf, "\nState:"))) {
                p += strlen("\nState:");
                p += strspn(p, " \t");
                if (*p == 'Z' || *p == 'X')
                        return true;
        }
        static const char *const pending[] = { "\nSigPnd:", "\nShdPnd:" };
        for (size_t i = 0; i < 2; i++)
                if ((p = strstr(buf, pending[i])) &&
                    (strtoull(p + strlen(pending[i]), NULL, 16) & (1ull << (SIGKILL - 1))))
                        return true;
        return false;
}

int shim_warm_take(const struct dm_shim_exec_msg *m, struct shim_child *ret)
{
        const char *cmd = m->argv[2], *tok;
        ssize_t n;

        W.adopt = ADOPT_NONE;
        if (W.off || !shaped(m))
                return 0;
        if (!same_spec(m, W.spec)) {
                /* Two in a row of one other shape: the next warm shell is
                 * theirs; the first is kept to compare with. */
                if (W.miss && same_spec(m, W.miss) && strcmp(m->cwd, W.miss->cwd) == 0) {
                        W.adopt = ADOPT_SPEC;
                        stop(true);
                } else {
                        W.adopt = ADOPT_MISS;
                }
                return 0;
        }
        free(W.miss);
        W.miss = NULL;
        if (!W.pid)
                return 0;
        if (!same_dir(m)) {
                /* Made in a directory since replaced: the next one is made
                 * where this request runs. */
                W.adopt = ADOPT_SPEC;
                stop(true);
                return 0;
        }
        if (doomed(W.pid)) {
                stop(false);
                return 0;
        }
        if (write_all_at(W.cmd_fd, cmd, strlen(cmd)) < 0)
                return 0;
        /* A command may have stopped it (kill -STOP -1): the request would
         * wait for its timeout where a cold bash would run. */
        kill(W.pid, SIGCONT);
        tok = in_place(cmd, m) ? "1\n" : "\n";
        do
                n = write(W.tok_w, tok, strlen(tok));
        while (n < 0 && errno == EINTR);
        if (n != (ssize_t)strlen(tok)) {
                /* Gone (EPIPE) before the reaper saw it: cold. */
                stop(false);
                return 0;
        }
        ret->pid = W.pid;
        ret->out_fd = W.out_fd;
        ret->err_fd = W.err_fd;
        ret->in_fd = -1;
        W.out_fd = W.err_fd = -1;
        forget();
        return 1;
}

struct dm_shim_exec_msg *shim_warm_adopt(struct dm_shim_exec_msg *m)
{
        struct dm_shim_exec_msg **to = W.adopt == ADOPT_SPEC ? &W.spec : W.adopt == ADOPT_MISS ? &W.miss : NULL;

        W.adopt = ADOPT_NONE;
        if (!to)
                return m;
        free(*to);
        *to = m;
        return NULL;
}

bool shim_warm_reaped(pid_t pid)
{
        if (!W.pid || pid != W.pid)
                return false;
        waitpid(pid, NULL, 0);
        forget();
        return true;
}

void shim_warm_done(void)
{
        if (!W.off && !W.pid)
                W.due = true;
}

pid_t shim_warm_pid(void)
{
        return W.pid;
}

void shim_warm_stop(void)
{
        stop(false);
}
