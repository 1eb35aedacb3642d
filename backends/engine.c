/* SPDX-License-Identifier: MIT */
/* Finding a container engine, and starting a private Podman service when
 * none is running. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/curl.h"
#include "backends/docker-internal.h"
#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"

#define DEFAULT_RESPONSE_MAX (16 << 20)
#define EXPLICIT_PING_MS 5000L /* a host the user named gets more patience */
#define PROBE_PING_MS 1000L    /* a well-known socket that may be stale */
#define SERVICE_START_MS 15000
#define SERVICE_STOP_MS 5000

extern char **environ;

/* ---- the private podman service ------------------------------------------
 *
 * The child is forked by a thread that lives exactly as long as the child:
 * PR_SET_PDEATHSIG fires when the *thread* that forked exits, so forking from
 * whatever thread called dm_backend_open would kill the service as soon as
 * that thread ended; a dedicated thread that sits in waitpid() has the right
 * lifetime, and the service still gets SIGTERM if the whole server dies. */

struct service {
        pthread_t thread;
        bool thread_started;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        pid_t pid; /* 0 until forked, -1 if fork failed */
        int fork_errno;
        bool exited;
        int wstatus;
        bool stopping;

        char *podman; /* absolute path of the binary */
        char *dir;    /* our temporary state dir when cfg had none */
        char *sock_path;
        char *log_path;
        char *host;    /* "unix://" + sock_path */
        char *argv[6]; /* built before fork: the child may only exec */
        char **envp;
        int log_fd;
        int null_fd;
};

/* Last non-empty line of the service's log, for error messages. */
static void log_tail(const char *path, char *out, size_t n)
{
        char buf[2048];
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
        off_t size;
        ssize_t got;
        const char *start;

        out[0] = '\0';
        if (fd < 0 || (size = lseek(fd, 0, SEEK_END)) < 0)
                return;
        got = pread(fd, buf, sizeof(buf) - 1, size > (off_t)sizeof(buf) - 1 ? size - (off_t)sizeof(buf) + 1 : 0);
        if (got <= 0)
                return;
        while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == '\r'))
                got--;
        buf[got] = '\0';
        start = strrchr(buf, '\n');
        start = start ? start + 1 : buf;
        got = (ssize_t)strlen(start);
        if ((size_t)got >= n)
                got = (ssize_t)n - 1; /* truncation is fine: it is a hint */
        memcpy(out, start, (size_t)got);
        out[got] = '\0';
}

static void child_exec(const struct service *s, pid_t parent)
{
        static const int reset[] = { SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2 };
        struct sigaction dfl = { .sa_handler = SIG_DFL };
        sigset_t none;
        int fds[3] = { s->null_fd, s->log_fd, s->log_fd };

        /* Own process group: a Ctrl-C at the terminal goes to the server,
         * which then stops the service in order, instead of to both at once. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
                _exit(1);
        /* Blocked and ignored signals survive execve; podman needs its own. */
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (size_t i = 0; i < DM_ARRAY_SIZE(reset); i++)
                sigaction(reset[i], &dfl, NULL);
        for (int i = 0; i < 3; i++) {
                if (fds[i] == i)
                        fcntl(i, F_SETFD, 0);
                else if (dup2(fds[i], i) < 0)
                        _exit(126);
        }
        /* Belt and braces: whatever a library left inheritable stays here. */
        (void)close_range(3, ~0U, 0);
        execve(s->podman, s->argv, s->envp);
        _exit(127);
}

static void *service_thread(void *userdata)
{
        struct service *s = userdata;
        pid_t parent = getpid(), pid;
        int wstatus = 0;
        bool stopping;

        pid = fork();
        if (pid == 0)
                child_exec(s, parent);
        pthread_mutex_lock(&s->lock);
        s->pid = pid < 0 ? -1 : pid;
        s->fork_errno = pid < 0 ? errno : 0;
        if (pid < 0)
                s->exited = true;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        if (pid < 0)
                return NULL;

        while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
                ;
        pthread_mutex_lock(&s->lock);
        /* stopping is set before the SIGTERM, so it is settled by now. */
        stopping = s->stopping;
        pthread_mutex_unlock(&s->lock);
        if (!stopping) {
                char tail[512];

                log_tail(s->log_path, tail, sizeof(tail));
                log_warning("private podman service (pid %d) exited unexpectedly: '%s'", (int)pid, tail);
        }
        pthread_mutex_lock(&s->lock);
        s->exited = true;
        s->wstatus = wstatus;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        return NULL;
}

/* Waits until the child has exited or ms have passed; true when it exited. */
static bool service_wait_exit(struct service *s, int64_t ms)
{
        struct timespec ts;
        bool exited;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L)
                ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&s->lock);
        while (!s->exited)
                if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) == ETIMEDOUT)
                        break;
        exited = s->exited;
        pthread_mutex_unlock(&s->lock);
        return exited;
}

/* Waits for the rest of the service's process group to end after its
 * leader has, and kills what is left after SERVICE_STOP_MS. The group is
 * ours: the leader made it with setpgid and its pid is not reused while
 * any member lives. */
static void service_wait_group(pid_t pgid)
{
        int64_t give_up = dm_now_ms() + SERVICE_STOP_MS;

        while (kill(-pgid, 0) == 0) {
                if (dm_now_ms() >= give_up) {
                        log_warning("private podman service's processes (group %d) outlived it; killing them",
                                    (int)pgid);
                        kill(-pgid, SIGKILL);
                        return;
                }
                usleep(20000);
        }
}

static void service_stop(void *userdata)
{
        struct service *s = userdata;
        pid_t pid;

        if (!s)
                return;
        if (s->thread_started) {
                pthread_mutex_lock(&s->lock);
                s->stopping = true;
                while (s->pid == 0)
                        pthread_cond_wait(&s->cond, &s->lock);
                pid = s->exited ? -1 : s->pid;
                pthread_mutex_unlock(&s->lock);
                /* The whole process group: a rootless podman that had to
                 * make its user namespace (no pause process yet: the first
                 * podman since boot) runs the service in a child, which
                 * outlived a SIGTERM to the parent alone. */
                if (pid > 0) {
                        kill(-pid, SIGTERM);
                        if (!service_wait_exit(s, SERVICE_STOP_MS)) {
                                log_warning("private podman service (pid %d) ignored SIGTERM for %d ms; killing it",
                                            (int)pid, SERVICE_STOP_MS);
                                kill(-pid, SIGKILL);
                        }
                }
                pthread_join(s->thread, NULL);
                if (pid > 0)
                        service_wait_group(pid);
                log_debug("private podman service (pid %d) stopped", (int)s->pid);
        }
        if (s->log_fd >= 0)
                close(s->log_fd);
        if (s->null_fd >= 0)
                close(s->null_fd);
        if (s->sock_path)
                unlink(s->sock_path);
        if (s->log_path)
                unlink(s->log_path);
        if (s->dir)
                rmdir(s->dir);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s->podman);
        free(s->dir);
        free(s->sock_path);
        free(s->log_path);
        free(s->host);
        free(s->argv[4]);
        free(s->envp);
        free(s);
}

static char *find_in_path(const char *path, const char *name)
{
        _cleanup_free_ char *copy = strdup(path && path[0] ? path : "/usr/local/bin:/usr/bin:/bin");
        char *save = NULL;

        for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir; dir = strtok_r(NULL, ":", &save)) {
                char *full = NULL;
                struct stat st;

                if (dir[0] != '/' || asprintf(&full, "%s/%s", dir, name) < 0)
                        continue;
                if (stat(full, &st) == 0 && S_ISREG(st.st_mode) && access(full, X_OK) == 0)
                        return full;
                free(full);
        }
        return NULL;
}

/* The server's environment minus what belongs to the server alone: systemd's
 * notify socket (podman would report *its* readiness as ours) and socket
 * activation. The strings stay borrowed from environ. */
static char **service_env(void)
{
        static const char *const drop[] = { "NOTIFY_SOCKET=", "LISTEN_FDS=", "LISTEN_PID=", "LISTEN_FDNAMES=" };
        size_t n = 0, k = 0;
        char **envp;

        while (environ && environ[n])
                n++;
        envp = calloc(n + 1, sizeof(char *));
        for (size_t i = 0; envp && i < n; i++) {
                bool keep = true;

                for (size_t j = 0; j < DM_ARRAY_SIZE(drop); j++)
                        keep = keep && strncmp(environ[i], drop[j], strlen(drop[j])) != 0;
                if (keep)
                        envp[k++] = environ[i];
        }
        return envp;
}

static int ping_host(const char *host, const struct dm_engine_env *env, long timeout_ms, struct dm_error *err)
{
        struct dm_curl *h = NULL;
        struct dm_buf out;
        long status = 0;
        int r;

        dm_buf_init(&out, 4096);
        r = dm_curl_new(host, 4096, env, &h, err);
        if (r >= 0)
                r = dm_curl_request(h, "GET", "/_ping", NULL, timeout_ms, &status, &out, err);
        if (r >= 0 && status != 200)
                r = dm_curl_status_error(err, status, out.data, out.len);
        dm_buf_release(&out);
        dm_curl_free(h);
        return r;
}

static atomic_uint service_counter;

static int service_start(const struct dm_engine_config *cfg, const char *podman, struct service **ret,
                         struct dm_error *err)
{
        struct service *s = calloc(1, sizeof(*s));
        const char *dir = cfg->state_dir;
        unsigned n = atomic_fetch_add(&service_counter, 1);
        char suffix[32], tail[512];
        sigset_t all, old;
        int64_t give_up;
        int r;

        if (!s)
                return dm_error_set(err, -ENOMEM, "out of memory");
        s->log_fd = s->null_fd = -1;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        s->podman = strdup(podman);
        if (!s->podman) {
                service_stop(s);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        if (!dir || !dir[0]) {
                const char *tmp = cfg->env ? cfg->env->tmpdir : NULL;

                if (asprintf(&s->dir, "%s/demesne-podman-XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp") < 0) {
                        s->dir = NULL;
                        service_stop(s);
                        return dm_error_set(err, -ENOMEM, "out of memory");
                }
                if (!mkdtemp(s->dir)) {
                        r = -errno;
                        free(s->dir);
                        s->dir = NULL;
                        service_stop(s);
                        return dm_error_set(err, r, "make a directory for the podman socket: %s", strerror(-r));
                }
                dir = s->dir;
        }
        /* A second service in the same process (tests) gets its own name. */
        if (n == 0)
                snprintf(suffix, sizeof(suffix), "%d", (int)getpid());
        else
                snprintf(suffix, sizeof(suffix), "%d-%u", (int)getpid(), n);
        if (asprintf(&s->sock_path, "%s/podman-%s.sock", dir, suffix) < 0 ||
            asprintf(&s->log_path, "%s/podman-%s.log", dir, suffix) < 0 ||
            asprintf(&s->host, "unix://%s", s->sock_path) < 0 || !(s->argv[4] = strdup(s->host)) ||
            !(s->envp = service_env())) {
                service_stop(s);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        if (strlen(s->sock_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
                r = dm_error_set(err, -ENAMETOOLONG, "socket path '%s' is too long for a unix socket", s->sock_path);
                service_stop(s);
                return r;
        }
        s->argv[0] = (char *)"podman";
        s->argv[1] = (char *)"system";
        s->argv[2] = (char *)"service";
        s->argv[3] = (char *)"--time=0";
        /* Same pid as a dead predecessor: its socket is stale. */
        (void)unlink(s->sock_path);
        s->log_fd = open(s->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
        s->null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (s->log_fd < 0 || s->null_fd < 0) {
                r = dm_error_set(err, -errno, "open '%s': %s", s->log_fd < 0 ? s->log_path : "/dev/null",
                                 strerror(errno));
                service_stop(s);
                return r;
        }

        /* The thread must not take the server's signals (it only waits). */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&s->thread, NULL, service_thread, s);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0) {
                service_stop(s);
                return dm_error_set(err, r, "start a thread: %s", strerror(-r));
        }
        s->thread_started = true;

        give_up = dm_now_ms() + SERVICE_START_MS;
        for (;;) {
                struct dm_error perr = { 0 };
                bool exited;

                pthread_mutex_lock(&s->lock);
                while (s->pid == 0)
                        pthread_cond_wait(&s->cond, &s->lock);
                exited = s->exited;
                pthread_mutex_unlock(&s->lock);
                if (exited) {
                        if (s->pid < 0)
                                r = dm_error_set(err, -s->fork_errno, "fork: %s", strerror(s->fork_errno));
                        else {
                                log_tail(s->log_path, tail, sizeof(tail));
                                r = dm_error_set(err, -EHOSTDOWN, "'%s system service' exited at once: '%s'", podman,
                                                 tail);
                        }
                        service_stop(s);
                        return r;
                }
                if (access(s->sock_path, F_OK) == 0 && ping_host(s->host, NULL, PROBE_PING_MS, &perr) == 0)
                        break;
                if (dm_now_ms() >= give_up) {
                        log_tail(s->log_path, tail, sizeof(tail));
                        r = dm_error_set(err, -EHOSTDOWN,
                                         "'%s system service' did not answer on '%s' within %d ms (log: '%s')", podman,
                                         s->sock_path, SERVICE_START_MS, tail);
                        service_stop(s);
                        return r;
                }
                usleep(10000);
        }
        log_info("started a private podman service (pid %d) at '%s'", (int)s->pid, s->host);
        *ret = s;
        return 0;
}

/* ---- discovery ------------------------------------------------------------ */

static int open_on(const char *host, const struct dm_engine_env *env, int64_t response_max, long ping_ms,
                   struct dm_backend **ret, struct dm_error *err)
{
        int r = ping_host(host, env, ping_ms, err);

        if (r < 0)
                return r;
        return dm_docker_backend_new(host, response_max, env, ret, err);
}

/* Appends "; what (why)" to the list of places tried. */
static void tried(struct dm_buf *t, const char *what, const char *why)
{
        (void)dm_buf_printf(t, "%s%s (%s)", t->len ? "; " : "", what, why);
}

bool dm_backend_is_opensandbox(const char *which, const struct dm_engine_env *env)
{
        const char *domain = env ? env->osb_domain : NULL;

        return (which && strcmp(which, "opensandbox") == 0) || ((!which || !which[0]) && domain && domain[0]);
}

int dm_backend_open(const struct dm_engine_config *cfg, struct dm_backend **ret, struct dm_error *err)
{
        int64_t response_max = cfg->response_max > 0 ? cfg->response_max : DEFAULT_RESPONSE_MAX;
        const struct dm_engine_env *env = cfg->env;
        struct {
                const char *origin, *host;
        } explicit[] = {
                { "configured host", cfg->host },
                { "DOCKER_HOST", env ? env->docker_host : NULL },
                { "CONTAINER_HOST", env ? env->container_host : NULL },
        };
        const char *xdg = env ? env->xdg_runtime_dir : NULL;
        _cleanup_free_ char *xdg_sock = NULL, *podman = NULL, *why = NULL;
        struct dm_buf t;
        struct service *svc = NULL;
        int r;

        const char *which = cfg->backend;

        if (which && which[0] && strcmp(which, "docker") != 0 && strcmp(which, "opensandbox") != 0)
                return dm_error_set(err, -EINVAL,
                                    "DEMESNE_BACKEND '%s': expected 'docker' (Docker or Podman) or "
                                    "'opensandbox'",
                                    which);
        if (dm_backend_is_opensandbox(which, env))
                return dm_opensandbox_backend_new(response_max, cfg->opensandbox_egress, env, ret, err);

        /* A host named by the configuration or the environment is the user's
         * choice, as with the docker CLI: use it or fail, never guess past it. */
        for (size_t i = 0; !cfg->private_only && i < DM_ARRAY_SIZE(explicit); i++) {
                if (!explicit[i].host || !explicit[i].host[0])
                        continue;
                r = open_on(explicit[i].host, env, response_max, EXPLICIT_PING_MS, ret, err);
                if (r < 0)
                        return dm_error_wrap(err, "container engine from %s", explicit[i].origin);
                log_debug("container engine at '%s' (from %s)", explicit[i].host, explicit[i].origin);
                return 0;
        }

        dm_buf_init(&t, 2048);
        if (cfg->private_only)
                tried(&t, "the configured host, the environment and the well-known sockets",
                      "skipped: private engine only");
        else
                tried(&t, "DOCKER_HOST and CONTAINER_HOST", "unset");
        if (xdg && xdg[0] == '/' && asprintf(&xdg_sock, "unix://%s/podman/podman.sock", xdg) < 0)
                xdg_sock = NULL;
        const char *wellknown[] = { "unix:///run/podman/podman.sock", xdg_sock, "unix:///var/run/docker.sock" };

        for (size_t i = 0; !cfg->private_only && i < DM_ARRAY_SIZE(wellknown); i++) {
                struct dm_error perr = { 0 };
                const char *path;

                if (!wellknown[i])
                        continue;
                path = wellknown[i] + strlen("unix://");
                if (access(path, F_OK) < 0) {
                        tried(&t, path, strerror(errno));
                        continue;
                }
                if (open_on(wellknown[i], env, response_max, PROBE_PING_MS, ret, &perr) == 0) {
                        log_debug("container engine at '%s'", wellknown[i]);
                        dm_buf_release(&t);
                        return 0;
                }
                log_debug("skipping '%s': %s", path, perr.msg);
                tried(&t, path, perr.msg);
        }

        if (!cfg->may_start_podman) {
                tried(&t, "a private podman service", "not allowed by the configuration");
        } else if (!(podman = find_in_path(env ? env->path : NULL, "podman"))) {
                tried(&t, "a private podman service", "podman is not on PATH");
        } else {
                struct dm_error serr = { 0 };

                r = service_start(cfg, podman, &svc, &serr);
                if (r >= 0) {
                        r = dm_docker_backend_new_owning(svc->host, response_max, env, service_stop, svc, ret, &serr);
                        if (r < 0)
                                service_stop(svc);
                }
                if (r >= 0) {
                        dm_buf_release(&t);
                        return 0;
                }
                tried(&t, "a private podman service", serr.msg);
        }

        why = dm_buf_steal(&t);
        return dm_error_set(err, -EHOSTDOWN,
                            "no container engine found; tried %s; "
                            "install podman (apt-get install podman) or set DOCKER_HOST",
                            why ? why : "nothing");
}

void dm_backend_free(struct dm_backend *b)
{
        if (b)
                b->ops->free(b);
}
