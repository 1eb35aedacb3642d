/* SPDX-License-Identifier: MIT */
/* demesne-shim: PID 1 of a demesne container. It reaps every zombie in the
 * container, passes the engine's SIGTERM/SIGINT/SIGHUP on to the commands,
 * and runs the host's commands under the seccomp filter (filter.c), one per
 * connection to the host's socket (protocol.h).
 *
 * Why one connection per command rather than one multiplexed connection: the
 * kernel's socket buffer then is each command's flow control (a command
 * whose output the host reads slowly stalls only itself, with no credit
 * scheme), closing a connection is an unambiguous cancel that needs no frame
 * to get through a full buffer, and the host needs no demultiplexing thread:
 * the thread that runs a command owns its connection. The host cannot open
 * connections into the container (it never touches a path the container
 * can write), so the shim keeps DM_SHIM_SPARE_CONNS idle connections open
 * and opens another each time one is taken.
 *
 * One thread, one poll() loop: signals arrive through a signalfd, children's
 * pipes and the connections are non-blocking. */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "src/shim/shim.h"

#define MAX_SLOTS (DM_SHIM_MAX_EXECS + DM_SHIM_SPARE_CONNS + 2)
#define MAX_DISCARD 128
#define OUT_HIGH (256 * 1024) /* stop reading a command's pipes above this much unsent output */
#define IN_HIGH (256 * 1024)  /* stop reading the host above this much unwritten stdin */
#define DRAIN_MS 250          /* after the command exits, for pipes held open by others */
#define BACKOFF_MIN_MS 20
#define BACKOFF_MAX_MS 1000

enum state { FREE, IDLE, RUNNING, DONE };

struct buf {
        uint8_t *p;
        size_t off, len, alloc;
};

struct slot {
        enum state state;
        int fd;         /* the connection; -1 once the host is gone */
        bool rd_closed; /* the host closed its sending side: a cancel */
        struct dm_shim_reader rd;
        struct buf out; /* frames not yet sent */

        uint32_t flags;
        pid_t pid; /* the command, > 0 until reaped; also its process group */
        int fd_out, fd_err, fd_in;
        struct buf in; /* stdin not yet written */
        bool in_eof;
        bool exited, timed_out, killed;
        int status;
        int64_t deadline, drain_until;
};

static struct slot slots[MAX_SLOTS];
static int discard[MAX_DISCARD];
static size_t n_discard;
static const char *sock_path = DM_SHIM_SOCK_PATH;
static bool terminating;
static int64_t next_connect;
static int backoff_ms;
static bool connect_failing;
static uint8_t iobuf[DM_SHIM_DATA_MAX];

void shim_log(const char *fmt, ...)
{
        va_list ap;

        fputs("demesne-shim: ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
}

static int64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int buf_append(struct buf *b, const void *p, size_t n)
{
        if (b->off && b->off == b->len)
                b->off = b->len = 0;
        if (b->len + n > b->alloc) {
                size_t a = b->alloc ? b->alloc : 4096;
                uint8_t *q;

                /* Reclaim what was sent before growing. */
                if (b->off) {
                        memmove(b->p, b->p + b->off, b->len - b->off);
                        b->len -= b->off;
                        b->off = 0;
                }
                while (a < b->len + n)
                        a *= 2;
                if (a > b->alloc) {
                        q = realloc(b->p, a);
                        if (!q)
                                return -ENOMEM;
                        b->p = q;
                        b->alloc = a;
                }
        }
        memcpy(b->p + b->len, p, n);
        b->len += n;
        return 0;
}

static size_t buf_pending(const struct buf *b)
{
        return b->len - b->off;
}

static void buf_free(struct buf *b)
{
        free(b->p);
        memset(b, 0, sizeof(*b));
}

static void close_fd(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

/* A pipe still held by processes the command left behind: read and drop
 * their output so they never block or get SIGPIPE for it. */
static void discard_fd(int *fd)
{
        if (*fd < 0)
                return;
        if (n_discard < MAX_DISCARD)
                discard[n_discard++] = *fd;
        else
                close(*fd);
        *fd = -1;
}

static void slot_free(struct slot *s)
{
        close_fd(&s->fd);
        close_fd(&s->fd_in);
        close_fd(&s->fd_out);
        close_fd(&s->fd_err);
        dm_shim_reader_release(&s->rd);
        buf_free(&s->out);
        buf_free(&s->in);
        memset(s, 0, sizeof(*s));
        s->fd = s->fd_in = s->fd_out = s->fd_err = -1;
        s->state = FREE;
}

static void kill_group(struct slot *s, int sig)
{
        /* Only while the leader is unreaped: its zombie keeps the group id
         * from being reused by a later command. */
        if (s->pid <= 0)
                return;
        /* A group that forks as it dies (a bomb) is stopped first: see
         * pids_check(). */
        for (int pass = 0; sig == SIGKILL && pass < 4; pass++)
                if (kill(-s->pid, SIGSTOP) < 0)
                        break;
        kill(-s->pid, sig);
}

/* The host closed the connection or broke the protocol: nobody will read
 * the output, so the command goes; the slot lives until it is reaped. */
static void host_gone(struct slot *s)
{
        if (s->state != RUNNING) {
                slot_free(s);
                return;
        }
        s->killed = true;
        kill_group(s, SIGKILL);
        close_fd(&s->fd);
        buf_free(&s->out);
        buf_free(&s->in);
        close_fd(&s->fd_in);
}

/* The host closed its sending side (it does so to cancel when a half-sent
 * stdin frame would hold a KILL up): the command goes, but its output and
 * exit status still reach the host. */
static void host_eof(struct slot *s)
{
        if (s->state != RUNNING) {
                host_gone(s);
                return;
        }
        s->rd_closed = true;
        s->killed = true;
        kill_group(s, SIGKILL);
        buf_free(&s->in);
        close_fd(&s->fd_in);
}

static void flush(struct slot *s)
{
        while (s->fd >= 0 && buf_pending(&s->out)) {
                ssize_t n = send(s->fd, s->out.p + s->out.off, buf_pending(&s->out), MSG_NOSIGNAL | MSG_DONTWAIT);

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                host_gone(s);
                        return;
                }
                s->out.off += (size_t)n;
        }
}

static void queue(struct slot *s, const uint8_t *frame, size_t len)
{
        if (s->fd >= 0 && buf_append(&s->out, frame, len) < 0) {
                shim_log("out of memory queueing output");
                host_gone(s);
        }
}

static void queue_data(struct slot *s, uint8_t type, const uint8_t *data, size_t len)
{
        uint8_t hdr[DM_SHIM_HDR_LEN];

        dm_shim_put_header(hdr, type, (uint32_t)len);
        queue(s, hdr, sizeof(hdr));
        queue(s, data, len);
}

static void send_error(struct slot *s, int err, const char *msg)
{
        uint8_t f[DM_SHIM_HDR_LEN + 4 + DM_SHIM_MSG_MAX];

        queue(s, f, dm_shim_encode_error(f, (uint32_t)err, msg));
        s->state = DONE;
        flush(s);
}

static size_t count(enum state st)
{
        size_t n = 0;

        for (size_t i = 0; i < MAX_SLOTS; i++)
                n += slots[i].state == st;
        return n;
}

static void start_exec(struct slot *s, const struct dm_shim_frame *f)
{
        struct dm_shim_exec_msg *m = NULL;
        struct shim_child child;
        uint8_t started[DM_SHIM_HDR_LEN + 4];
        char msg[DM_SHIM_MSG_MAX];
        int r;

        backoff_ms = 0;
        r = dm_shim_exec_decode(f->data, f->len, &m);
        if (r < 0) {
                send_error(s, -r, "malformed exec request");
                return;
        }
        if (terminating) {
                free(m);
                send_error(s, ESHUTDOWN, "the container is stopping");
                return;
        }
        if (count(RUNNING) >= DM_SHIM_MAX_EXECS) {
                free(m);
                snprintf(msg, sizeof(msg), "too many commands running at once (%d)", DM_SHIM_MAX_EXECS);
                send_error(s, EBUSY, msg);
                return;
        }
        r = shim_warm_take(m, &child) ? 0 : shim_spawn(m, &child, msg, sizeof(msg));
        if (r < 0) {
                free(shim_warm_adopt(m));
                send_error(s, -r, msg);
                return;
        }
        s->state = RUNNING;
        s->flags = m->flags;
        s->pid = child.pid;
        s->fd_out = child.out_fd;
        s->fd_err = child.err_fd;
        s->fd_in = child.in_fd;
        s->deadline = m->timeout_ms ? now_ms() + m->timeout_ms : 0;
        s->in_eof = !(m->flags & DM_SHIM_F_STDIN_MORE);
        queue(s, started, dm_shim_encode_u32(started, DM_SHIM_STARTED, (uint32_t)child.pid));
        if (m->stdin_len && buf_append(&s->in, m->stdin_data, m->stdin_len) < 0)
                host_gone(s);
        /* What the next warm shell is made for may be this request. */
        free(shim_warm_adopt(m));
        flush(s);
}

static void on_frame(struct slot *s, const struct dm_shim_frame *f)
{
        uint32_t sig;

        if (s->state == IDLE) {
                if (f->type == DM_SHIM_EXEC)
                        start_exec(s, f);
                else
                        host_gone(s);
                return;
        }
        if (s->state != RUNNING)
                return;
        switch (f->type) {
        case DM_SHIM_STDIN:
                if (s->in_eof) {
                        host_gone(s);
                        return;
                }
                /* The command may have closed its stdin already: drop. */
                if (s->fd_in >= 0 && buf_append(&s->in, f->data, f->len) < 0)
                        host_gone(s);
                return;
        case DM_SHIM_STDIN_EOF:
                if (s->in_eof)
                        host_gone(s);
                s->in_eof = true;
                return;
        case DM_SHIM_KILL:
                if (dm_shim_decode_u32(f, &sig) < 0) {
                        host_gone(s);
                        return;
                }
                s->killed = true;
                kill_group(s, (int)sig);
                return;
        default: host_gone(s); return;
        }
}

static void read_conn(struct slot *s)
{
        while (s->fd >= 0 && !s->rd_closed && (s->state == IDLE || s->state == RUNNING)) {
                ssize_t n;
                size_t off = 0;

                if (s->state == RUNNING && buf_pending(&s->in) >= IN_HIGH)
                        return;
                n = recv(s->fd, iobuf, sizeof(iobuf), MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        if (s->state == IDLE) {
                                /* The host dropped a spare (it went away,
                                 * or refused us): reconnect, not at once. */
                                backoff_ms = backoff_ms ? backoff_ms : BACKOFF_MIN_MS;
                                next_connect = now_ms() + backoff_ms;
                        }
                        if (n == 0)
                                host_eof(s);
                        else
                                host_gone(s);
                        return;
                }
                while (off < (size_t)n && s->fd >= 0 && (s->state == IDLE || s->state == RUNNING)) {
                        struct dm_shim_frame f;
                        size_t used;
                        int r = dm_shim_reader_feed(&s->rd, iobuf + off, (size_t)n - off, &used, &f);

                        off += used;
                        if (r < 0) {
                                shim_log("protocol error from the host: %s", strerror(-r));
                                host_gone(s);
                                return;
                        }
                        if (r == 1)
                                on_frame(s, &f);
                }
        }
}

static void write_stdin(struct slot *s)
{
        while (s->fd_in >= 0 && buf_pending(&s->in)) {
                ssize_t n = write(s->fd_in, s->in.p + s->in.off, buf_pending(&s->in));

                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        /* EPIPE: the command closed its stdin; the rest is dropped. */
                        close_fd(&s->fd_in);
                        buf_free(&s->in);
                        return;
                }
                s->in.off += (size_t)n;
        }
        if (s->in_eof && s->fd_in >= 0 && !buf_pending(&s->in))
                close_fd(&s->fd_in);
}

static void read_child(struct slot *s, int *fd, uint8_t type)
{
        ssize_t n = read(*fd, iobuf, sizeof(iobuf));

        if (n > 0) {
                queue_data(s, type, iobuf, (size_t)n);
                flush(s);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                close_fd(fd);
        }
}

static void finish(struct slot *s)
{
        uint8_t f[DM_SHIM_HDR_LEN + 8];
        uint8_t flags = (s->timed_out ? DM_SHIM_X_TIMED_OUT : 0) | (s->killed ? DM_SHIM_X_KILLED : 0);

        discard_fd(&s->fd_out);
        discard_fd(&s->fd_err);
        close_fd(&s->fd_in);
        buf_free(&s->in);
        if (s->fd < 0) {
                slot_free(s);
                shim_warm_done();
                return;
        }
        if (WIFSIGNALED(s->status))
                queue(s, f, dm_shim_encode_exit(f, DM_SHIM_SIGNALED, flags, WTERMSIG(s->status)));
        else
                queue(s, f, dm_shim_encode_exit(f, DM_SHIM_EXITED, flags, WEXITSTATUS(s->status)));
        s->state = DONE;
        flush(s);
        /* Its exit frame is out: the next warm shell starts behind it. */
        shim_warm_done();
}

static void reap(void)
{
        for (;;) {
                siginfo_t si;
                struct slot *s = NULL;
                int status;

                /* Peek first: a command's group must be killed while its
                 * leader is still a zombie holding the group id. */
                memset(&si, 0, sizeof(si));
                if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
                        return;
                /* The idle warm shell, killed by someone's kill -1. */
                if (shim_warm_reaped(si.si_pid))
                        continue;
                for (size_t i = 0; i < MAX_SLOTS; i++)
                        if (slots[i].state == RUNNING && slots[i].pid == si.si_pid)
                                s = &slots[i];
                /* The group goes with its leader (a fork bomb, forgotten
                 * background jobs) unless the host asked to keep it. */
                if (s && !(s->flags & DM_SHIM_F_KEEP_GROUP))
                        kill(-s->pid, SIGKILL);
                if (waitpid(si.si_pid, &status, 0) < 0)
                        continue;
                if (s) {
                        s->pid = 0;
                        s->exited = true;
                        s->status = status;
                        s->drain_until = now_ms() + DRAIN_MS;
                }
        }
}

static void on_signals(int sfd)
{
        struct signalfd_siginfo si;

        while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGCHLD)
                        continue;
                /* As PID 1, a sender inside the container has a pid here and
                 * one outside (the engine) has 0: a command cannot stop us. */
                if (getpid() == 1 && si.ssi_pid != 0)
                        continue;
                for (size_t i = 0; i < MAX_SLOTS; i++)
                        if (slots[i].state == RUNNING)
                                kill_group(&slots[i], (int)si.ssi_signo);
                if (si.ssi_signo != SIGHUP && !terminating) {
                        terminating = true;
                        shim_warm_stop();
                        for (size_t i = 0; i < MAX_SLOTS; i++)
                                if (slots[i].state == IDLE)
                                        slot_free(&slots[i]);
                }
        }
        reap();
}

static int conn_open(void)
{
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int fd;

        if (strlen(sock_path) >= sizeof(a.sun_path))
                return -ENAMETOOLONG;
        memcpy(a.sun_path, sock_path, strlen(sock_path) + 1);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        /* A unix connect completes at once, or fails (EAGAIN: backlog full). */
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
                int e = errno;
                close(fd);
                return -e;
        }
        return fd;
}

static void maybe_connect(int64_t now)
{
        while (!terminating && count(IDLE) < DM_SHIM_SPARE_CONNS && now >= next_connect) {
                uint8_t hello[DM_SHIM_HDR_LEN + 12];
                struct slot *s = NULL;
                int fd;

                for (size_t i = 0; i < MAX_SLOTS && !s; i++)
                        if (slots[i].state == FREE)
                                s = &slots[i];
                if (!s)
                        return;
                fd = conn_open();
                if (fd < 0) {
                        if (!connect_failing)
                                shim_log("cannot connect to '%s': %s; retrying", sock_path, strerror(-fd));
                        connect_failing = true;
                        backoff_ms = backoff_ms ? backoff_ms * 2 : BACKOFF_MIN_MS;
                        if (backoff_ms > BACKOFF_MAX_MS)
                                backoff_ms = BACKOFF_MAX_MS;
                        next_connect = now + backoff_ms;
                        return;
                }
                connect_failing = false;
                slot_free(s);
                s->fd = fd;
                s->state = IDLE;
                dm_shim_reader_init(&s->rd, DM_SHIM_TO_SHIM);
                queue(s, hello, dm_shim_encode_hello(hello, (uint32_t)getpid(), DM_SHIM_MAX_EXECS));
                flush(s);
        }
}

/* Limits the engine could not apply (rootless Podman without cgroup
 * delegation), passed by the server on the command line: memory as
 * RLIMIT_DATA on the shim, which every command inherits (per process, not
 * per sandbox), and a cap on the sandbox's processes, counted here in /proc
 * (this pid namespace: the sandbox's processes only) while a command runs.
 * Past the cap every process but the shim is killed: a fork bomb ends with
 * nothing left behind, and the command's result says signal 9. */
static unsigned long pids_max;
static int64_t next_pids_check;
#define PIDS_CHECK_MS 10
#define COMMAND_NICE 10

/* The sandbox's processes, counted up to at most max: a walk of /proc with
 * thousands of entries, among thousands of busy processes, took the shim
 * 28 s of its fair share of the CPU. */
static unsigned long count_pids(unsigned long max)
{
        DIR *d = opendir("/proc");
        struct dirent *e;
        unsigned long n = 0;

        if (!d)
                return 0;
        while (n < max && (e = readdir(d)))
                if (isdigit((unsigned char)e->d_name[0]))
                        n++;
        closedir(d);
        return n;
}

static void pids_check(int64_t now)
{
        unsigned long n;

        if (!pids_max || now < next_pids_check || !count(RUNNING))
                return;
        next_pids_check = now + PIDS_CHECK_MS;
        /* Counted one past the most allowed: with an idle warm shell that
         * is pids_max + 3 (a count stopped at pids_max + 2 never passed it,
         * and the cap held nothing while a warm shell waited). */
        n = count_pids(pids_max + 3);
        if (n <= pids_max + 1 + (shim_warm_pid() > 0)) /* + the shim, + an idle warm shell */
                return;
        shim_log("pids limit of %lu reached: killing every process of the sandbox", pids_max);
        /* kill(-1) from PID 1 reaches every other process of the namespace.
         * SIGSTOP first, passes back to back: a stopped process forks no
         * more, while each one SIGKILL ends frees a slot of RLIMIT_NPROC
         * that a running one fills at once (a Python bomb catching EAGAIN
         * outran 50 passes of SIGKILL). Then SIGKILL for all, stopped ones
         * included, repeated for any a late pass missed. */
        for (int pass = 0; pass < 8; pass++)
                if (kill(-1, SIGSTOP) < 0 && errno == ESRCH)
                        break;
        for (int pass = 0; pass < 50; pass++) {
                if (kill(-1, SIGKILL) < 0 && errno == ESRCH)
                        break;
                usleep(2000);
        }
}

static void housekeeping(int64_t now)
{
        pids_check(now);
        for (size_t i = 0; i < MAX_SLOTS; i++) {
                struct slot *s = &slots[i];

                if (s->state == DONE && (s->fd < 0 || !buf_pending(&s->out)))
                        slot_free(s);
                if (s->state != RUNNING)
                        continue;
                if (s->pid > 0 && s->deadline && now >= s->deadline) {
                        s->timed_out = true;
                        s->deadline = 0;
                        kill_group(s, SIGKILL);
                }
                if (s->exited && ((s->fd_out < 0 && s->fd_err < 0) || now >= s->drain_until))
                        finish(s);
        }
}

static int64_t next_wakeup(int64_t now)
{
        int64_t t = -1;

#define AT(x) (t = (t < 0 || (x) < t) ? (x) : t)
        for (size_t i = 0; i < MAX_SLOTS; i++) {
                if (slots[i].state != RUNNING)
                        continue;
                if (slots[i].pid > 0 && slots[i].deadline)
                        AT(slots[i].deadline);
                if (slots[i].exited)
                        AT(slots[i].drain_until);
        }
        if (!terminating && count(IDLE) < DM_SHIM_SPARE_CONNS)
                AT(next_connect);
        if (pids_max && count(RUNNING))
                AT(next_pids_check);
#undef AT
        return t < 0 ? -1 : (t <= now ? 0 : t - now);
}

enum kind { K_SIG, K_CONN, K_OUT, K_ERR, K_IN, K_DISCARD };

static void loop(int sfd)
{
        static struct pollfd pfd[1 + MAX_SLOTS * 4 + MAX_DISCARD];
        static struct {
                enum kind k;
                size_t i;
        } who[1 + MAX_SLOTS * 4 + MAX_DISCARD];

        for (;;) {
                int64_t now = now_ms(), wake;
                size_t n = 0;
                int r;

                housekeeping(now);
                maybe_connect(now);
                if (terminating && !count(RUNNING) && !count(DONE))
                        return;   /* the warm shell went when terminating was set */
                if (!terminating) /* after the exit frames went out (finish flushed them) */
                        shim_warm_start();
#define ADD(fd_, ev, k_, i_) \
        (pfd[n] = (struct pollfd){ .fd = (fd_), .events = (ev) }, who[n].k = (k_), who[n++].i = (i_))
                ADD(sfd, POLLIN, K_SIG, 0);
                for (size_t i = 0; i < MAX_SLOTS; i++) {
                        struct slot *s = &slots[i];
                        short ev = 0;

                        if (s->state == FREE)
                                continue;
                        if (s->fd >= 0) {
                                /* POLLRDHUP even while not reading: a cancel
                                 * must get through a full stdin buffer. */
                                if (!s->rd_closed)
                                        ev |= POLLRDHUP;
                                if (!s->rd_closed && (s->state == IDLE || s->state == RUNNING) &&
                                    buf_pending(&s->in) < IN_HIGH)
                                        ev |= POLLIN;
                                if (buf_pending(&s->out))
                                        ev |= POLLOUT;
                                ADD(s->fd, ev, K_CONN, i);
                        }
                        if (s->state != RUNNING)
                                continue;
                        /* Output waits in the pipe (and the command blocks)
                         * while the host is behind. */
                        if (buf_pending(&s->out) < OUT_HIGH) {
                                if (s->fd_out >= 0)
                                        ADD(s->fd_out, POLLIN, K_OUT, i);
                                if (s->fd_err >= 0)
                                        ADD(s->fd_err, POLLIN, K_ERR, i);
                        }
                        if (s->fd_in >= 0 && buf_pending(&s->in))
                                ADD(s->fd_in, POLLOUT, K_IN, i);
                }
                for (size_t i = 0; i < n_discard; i++)
                        ADD(discard[i], POLLIN, K_DISCARD, i);
#undef ADD
                wake = next_wakeup(now);
                r = poll(pfd, n, wake < 0 ? -1 : (int)(wake > 60000 ? 60000 : wake));
                if (r < 0 && errno != EINTR) {
                        shim_log("poll: %s", strerror(errno));
                        return;
                }
                for (size_t j = 0; r > 0 && j < n; j++) {
                        struct slot *s = &slots[who[j].i];
                        short re = pfd[j].revents;

                        if (!re)
                                continue;
                        switch (who[j].k) {
                        case K_SIG: on_signals(sfd); break;
                        case K_CONN:
                                if (s->fd != pfd[j].fd)
                                        break; /* closed earlier in this round */
                                if (re & POLLOUT)
                                        flush(s);
                                if (re & POLLIN)
                                        read_conn(s);
                                /* Seen without reading (we were not): closed
                                 * altogether, or only the host's sending side. */
                                if (s->fd == pfd[j].fd && (re & (POLLHUP | POLLERR)))
                                        host_gone(s);
                                else if (s->fd == pfd[j].fd && (re & POLLRDHUP) && !(re & POLLIN))
                                        host_eof(s);
                                break;
                        case K_OUT:
                                if (s->fd_out == pfd[j].fd)
                                        read_child(s, &s->fd_out, DM_SHIM_STDOUT);
                                break;
                        case K_ERR:
                                if (s->fd_err == pfd[j].fd)
                                        read_child(s, &s->fd_err, DM_SHIM_STDERR);
                                break;
                        case K_IN:
                                if (s->fd_in == pfd[j].fd)
                                        write_stdin(s);
                                break;
                        case K_DISCARD:
                                if (read(discard[who[j].i], iobuf, sizeof(iobuf)) <= 0) {
                                        close(discard[who[j].i]);
                                        discard[who[j].i] = -1;
                                }
                                break;
                        }
                }
                /* Drop closed discard slots after the round (indices above
                 * were taken before it). */
                for (size_t i = 0; i < n_discard;)
                        if (discard[i] < 0)
                                discard[i] = discard[--n_discard];
                        else
                                i++;
                /* Stdin that arrived this round goes out now, and a
                 * finished stdin is closed, without waiting for POLLOUT. */
                for (size_t i = 0; i < MAX_SLOTS; i++)
                        if (slots[i].state == RUNNING)
                                write_stdin(&slots[i]);
        }
}

/* The environment commands start from: ours, as the engine gave it. */
static char **copy_environ(void)
{
        extern char **environ;
        size_t n = 0;
        char **v;

        while (environ && environ[n])
                n++;
        v = calloc(n + 1, sizeof(*v));
        if (!v)
                return NULL;
        for (size_t i = 0; i < n; i++)
                v[i] = environ[i];
        return v;
}

static int setup_fds(void)
{
        /* Runtimes may leave fds open for PID 1; none may reach a command. */
        syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
        /* 0-2 must exist so pipes never land there. */
        for (int fd = 0; fd < 3; fd++)
                if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
                        return -EBADF;
        return 0;
}

/* `demesne-shim --exec -- ARGV...`: the filter, then execvp. For commands
 * the host starts through the engine's exec API (when another server holds
 * the shim's socket), so that they too run under the filter. */
static int exec_filtered(char **argv)
{
        struct sock_fprog filter;
        int r;

        /* The engine's runtime resolved the working directory; see where
         * it landed before anything runs there. */
        r = shim_check_cwd();
        if (r < 0) {
                fprintf(stderr, "demesne-shim: the working directory is refused: %s\n",
                        r == -EPERM   ? "it is on /proc, which can lead outside the sandbox"
                        : r == -EXDEV ? "it lies outside the sandbox's file system"
                                      : strerror(-r));
                return 126;
        }
        /* Whatever the runtime left open stays behind. */
        shim_close_inherited(-1);
        r = shim_filter_build(&filter);
        if (r >= 0)
                r = shim_filter_install(&filter);
        if (r < 0) {
                fprintf(stderr, "demesne-shim: cannot install the seccomp filter: %s\n", strerror(-r));
                return 126;
        }
        execvp(argv[0], argv);
        r = errno;
        fprintf(stderr, "demesne-shim: cannot run '%s': %s\n", argv[0], strerror(r));
        return r == ENOENT ? 127 : 126;
}

/* Sets resource res to the decimal value arg, soft and hard, or to the
 * current hard limit if that is lower: only ever lowered, so an engine
 * that set less keeps it. */
static int lower_rlimit(int res, const char *arg)
{
        struct rlimit rl, now;
        char *end;

        errno = 0;
        rl.rlim_cur = rl.rlim_max = strtoull(arg, &end, 10);
        if (errno || *end || !rl.rlim_cur || getrlimit(res, &now) < 0)
                return -1;
        if (rl.rlim_max > now.rlim_max)
                rl.rlim_cur = rl.rlim_max = now.rlim_max;
        return setrlimit(res, &rl);
}

int main(int argc, char **argv)
{
        struct sock_fprog filter;
        sigset_t mask;
        char **env;
        int sfd, r;
        bool no_warm = false;

        if (argc >= 4 && strcmp(argv[1], "--exec") == 0 && strcmp(argv[2], "--") == 0)
                return exec_filtered(argv + 3);
        for (int i = 1; i < argc; i++) {
                if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
                        sock_path = argv[++i];
                } else if (strcmp(argv[i], "--rlimit-data") == 0 && i + 1 < argc) {
                        struct rlimit rl;
                        char *end;

                        errno = 0;
                        rl.rlim_cur = rl.rlim_max = strtoull(argv[++i], &end, 10);
                        if (errno || *end || !rl.rlim_cur || setrlimit(RLIMIT_DATA, &rl) < 0) {
                                fprintf(stderr, "demesne-shim: cannot set RLIMIT_DATA to '%s'\n", argv[i]);
                                return 1;
                        }
                } else if ((strcmp(argv[i], "--rlimit-nofile") == 0 || strcmp(argv[i], "--rlimit-fsize") == 0 ||
                            strcmp(argv[i], "--rlimit-nproc") == 0) &&
                           i + 1 < argc) {
                        static const struct {
                                char letter;
                                int res;
                                const char *name;
                        } lim[] = { { 'o', RLIMIT_NOFILE, "RLIMIT_NOFILE" },
                                    { 's', RLIMIT_FSIZE, "RLIMIT_FSIZE" },
                                    { 'r', RLIMIT_NPROC, "RLIMIT_NPROC" } };
                        /* --rlimit-n(o)file, --rlimit-f(s)ize, --rlimit-n(r)oc */
                        size_t k = argv[i][10] == 'o' ? 0 : argv[i][10] == 's' ? 1 : 2;

                        if (lower_rlimit(lim[k].res, argv[++i]) < 0) {
                                fprintf(stderr, "demesne-shim: cannot lower %s to '%s'\n", lim[k].name, argv[i]);
                                return 1;
                        }
                } else if (strcmp(argv[i], "--pids-max") == 0 && i + 1 < argc) {
                        char *end;

                        errno = 0;
                        pids_max = strtoul(argv[++i], &end, 10);
                        if (errno || *end || !pids_max) {
                                fprintf(stderr, "demesne-shim: bad --pids-max '%s'\n", argv[i]);
                                return 1;
                        }
                } else if (strcmp(argv[i], "--no-warm") == 0) {
                        no_warm = true;
                } else if (strcmp(argv[i], "--version") == 0) {
                        printf("demesne-shim %s (protocol %d)\n", PACKAGE_VERSION, DM_SHIM_PROTO_VERSION);
                        return 0;
                } else {
                        fprintf(stderr, "usage: demesne-shim [--socket PATH] [--rlimit-data BYTES] [--rlimit-nofile N] "
                                        "[--rlimit-fsize BYTES] "
                                        "[--pids-max N] [--no-warm] [--version]\n"
                                        "       demesne-shim --exec -- COMMAND [ARG...]\n");
                        return 2;
                }
        }
        /* The shim holds the pids limit only where no cgroup holds the
         * CPU either. Its count must run while a fork bomb's thousands of
         * processes compete for the CPU (at nice 0 beside them it waited
         * 10 to 40 s): commands start at nice 10, so the shim, and the
         * host, come first when a sandbox is busy. */
        if (pids_max)
                shim_spawn_set_nice(COMMAND_NICE);
        if (setup_fds() < 0) {
                shim_log("cannot open /dev/null for stdio");
                return 1;
        }
        /* Not dumpable: /proc/1/mem and friends then need CAP_SYS_PTRACE,
         * which no command has, so nothing in the container can reach into
         * the one process that serves the host. */
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        /* Outside a container (tests), orphans still come to us. */
        prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

        /* No command may run unfiltered: no filter, no shim. Loaded on
         * the shim itself, once, so every command inherits it through
         * fork (a load per command cost 0.2 ms of each exec, the kernel
         * compiling the same program again) and no process of the
         * container runs without it; the shim needs none of what it
         * denies. */
        r = shim_filter_build(&filter);
        if (r >= 0)
                r = shim_filter_install(&filter);
        if (r < 0) {
                shim_log("cannot set up the seccomp filter: %s", strerror(-r));
                return 1;
        }
        free(filter.filter);
        env = copy_environ();
        if (!env) {
                shim_log("out of memory");
                return 1;
        }
        shim_spawn_set_base_env(env);
        shim_warm_init(env, pids_max, no_warm);

        signal(SIGPIPE, SIG_IGN);
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0 || (sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK)) < 0) {
                shim_log("signalfd: %s", strerror(errno));
                return 1;
        }
        for (size_t i = 0; i < MAX_SLOTS; i++) {
                slots[i].state = FREE;
                slots[i].fd = slots[i].fd_in = slots[i].fd_out = slots[i].fd_err = -1;
        }
        loop(sfd);
        return 0;
}
