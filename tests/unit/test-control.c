/* SPDX-License-Identifier: MIT */
/* The control socket on its own (src/core/control.h): where it is made and
 * with what modes, a cancel through it, what it answers to a bad, long or
 * unknown request, a dead server's socket removed, a state directory
 * others can write refused, and the socket gone at stop. A peer of another
 * uid is tests/e2e/ui-activity.mjs's (it needs root). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/core/context.h"
#include "src/core/control.h"
#include "src/core/jobs.h"
#include "tests/tap.h"

/* Runs until cancelled. */
static json_object *work(struct dm_job *job, void *userdata, enum dm_job_status *ret_status, char *error, size_t len)
{
        struct pollfd p = { .fd = dm_job_cancel_signal(job)->fd, .events = POLLIN };

        (void)userdata, (void)error, (void)len;
        poll(&p, 1, 30000);
        *ret_status = DM_JOB_CANCELLED;
        return NULL;
}

static void done(struct dm_job *job, enum dm_job_status status, bool has_exit, int exit_code, void *userdata)
{
        (void)job, (void)status, (void)has_exit, (void)exit_code, (void)userdata;
}

/* Sends raw bytes to sock and reads the answer line into buf. */
static void raw(const char *sock, const char *bytes, size_t n, char *buf, size_t max)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ssize_t got = 0, r;

        buf[0] = '\0';
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                goto out;
        (void)!write(fd, bytes, n);
        shutdown(fd, SHUT_WR);
        while ((size_t)got + 1 < max && (r = read(fd, buf + got, max - 1 - (size_t)got)) > 0)
                got += r;
        buf[got] = '\0';
out:
        if (fd >= 0)
                close(fd);
}

static const char *str(json_object *o, const char *k)
{
        json_object *v;

        return o && json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : "";
}

int main(void)
{
        char tmp[] = "/tmp/dm-control-XXXXXX", sock[256], stale[256], open_dir[300], buf[4096], id[32];
        struct dm_context ctx = { 0 };
        struct dm_control *c = NULL;
        struct dm_error err = { 0 };
        json_object *answer = NULL;
        struct stat st;
        char *longline;
        pid_t dead;

        signal(SIGPIPE, SIG_IGN);
        if (!mkdtemp(tmp))
                return skip_all("mkdtemp failed");
        ctx.jobs = dm_jobs_new();

        /* A socket of a pid that is gone: a killed server's. */
        mkdir(strcat(strcpy(open_dir, tmp), "/control"), 0700);
        dead = fork();
        if (dead == 0)
                _exit(0);
        waitpid(dead, NULL, 0);
        snprintf(stale, sizeof(stale), "%s/control/%d.sock", tmp, (int)dead);
        close(open(stale, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));

        is_int(dm_control_start(&ctx, tmp, &c, &err), 0, "the control socket starts (%s)", err.msg);
        snprintf(sock, sizeof(sock), "%s/control/%d.sock", tmp, (int)getpid());
        ok(stat(sock, &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 0777) == 0600,
           "<state>/control/<pid>.sock, 0600");
        snprintf(buf, sizeof(buf), "%s/control", tmp);
        ok(stat(buf, &st) == 0 && (st.st_mode & 0777) == 0700, "in a 0700 directory");
        ok(access(stale, F_OK) < 0 && errno == ENOENT, "a dead server's socket is removed");

        is_int(dm_jobs_start(ctx.jobs, "t", NULL, work, done, NULL, NULL, id), 0, "a job runs");
        is_int(dm_control_request(tmp, getpid(), "cancel", id, &answer, &err), 0, "a cancel is asked (%s)", err.msg);
        is_str(str(answer, "status"), "cancelled", "and answered: cancelled");
        json_object_put(answer);
        answer = NULL;
        is_int(dm_control_request(tmp, getpid(), "cancel", id, &answer, &err), 0, "again");
        is_str(str(answer, "status"), "cancelled", "a second cancel answers the job's status");
        json_object_put(answer);
        answer = NULL;
        dm_control_request(tmp, getpid(), "cancel", "job-unknown", &answer, &err);
        is_str(str(answer, "code"), "404", "an unknown job: 404");
        json_object_put(answer);
        answer = NULL;
        dm_control_request(tmp, getpid(), "reboot", "x", &answer, &err);
        is_str(str(answer, "code"), "400", "an unknown op: 400");
        json_object_put(answer);

        raw(sock, "garbage\n", 8, buf, sizeof(buf));
        ok(strstr(buf, "\"code\":400") != NULL, "a line that is not JSON: 400 (%s)", buf);
        raw(sock, "{\"op\":\"cancel\",\"id\":7}\n", 23, buf, sizeof(buf));
        ok(strstr(buf, "\"code\":400") != NULL, "an id that is not a string: 400");
        longline = malloc(8192);
        memset(longline, 'a', 8192);
        raw(sock, longline, 8192, buf, sizeof(buf));
        ok(strstr(buf, "\"code\":400") != NULL, "8 KiB without a newline: 400, not read past 1 KiB");
        free(longline);
        raw(sock, "", 0, buf, sizeof(buf));
        ok(strstr(buf, "\"code\":400") != NULL, "a peer that closes at once: 400, and the server goes on");

        is_int(dm_control_request(tmp, 1, "cancel", id, &answer, &err), -ENOENT, "a pid without a socket: -ENOENT");
        ok(strstr(err.msg, "not running") != NULL, "saying so (%s)", err.msg);

        dm_control_stop(c);
        ok(access(sock, F_OK) < 0, "the socket is removed at stop");

        /* A state directory others can write: nothing made there. */
        snprintf(open_dir, sizeof(open_dir), "%s/open", tmp);
        mkdir(open_dir, 0700);
        chmod(open_dir, 0777);
        c = NULL;
        ok(dm_control_start(&ctx, open_dir, &c, &err) == -EPERM && !c, "a state directory others can write: refused");
        snprintf(buf, sizeof(buf), "%s/open/control", tmp);
        ok(access(buf, F_OK) < 0, "and nothing is made in it");

        dm_jobs_shutdown(ctx.jobs);
        dm_jobs_free(ctx.jobs);
        rmdir(buf);
        rmdir(open_dir);
        snprintf(buf, sizeof(buf), "%s/control", tmp);
        rmdir(buf);
        rmdir(tmp);
        return done_testing();
}
