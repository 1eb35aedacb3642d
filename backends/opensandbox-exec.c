/* SPDX-License-Identifier: MIT */
/* execd: commands through /command and its event stream, interrupts, and
 * one-file transfers (multipart upload: a metadata part, then a file part;
 * download). See opensandbox.c for how the stream reaches the caller. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/opensandbox-internal.h"
#include "src/basic/io.h"
#include "src/basic/log.h"
#include "src/basic/timeutil.h"
#include "src/basic/uri.h"

/* POSIX shell quoting: 'it'\''s'. */
static char *shell_join(const char *const *argv)
{
        struct dm_buf b;

        dm_buf_init(&b, 1u << 20);
        for (size_t i = 0; argv[i]; i++) {
                if (i && dm_buf_append(&b, " ", 1) < 0)
                        goto fail;
                if (dm_buf_append(&b, "'", 1) < 0)
                        goto fail;
                for (const char *p = argv[i]; *p; p++)
                        if ((*p == '\'' ? dm_buf_append(&b, "'\\''", 4) : dm_buf_append(&b, p, 1)) < 0)
                                goto fail;
                if (dm_buf_append(&b, "'", 1) < 0)
                        goto fail;
        }
        return dm_buf_steal(&b);
fail:
        dm_buf_release(&b);
        return NULL;
}

static int command_body(const struct dm_exec_spec *spec, char **ret, struct dm_error *err)
{
        _cleanup_json_ struct json_object *o = json_object_new_object();
        struct json_object *envs = json_object_new_object();
        _cleanup_free_ char *cmd = shell_join(spec->argv);
        int r = 0;

        if (!o || !envs || !cmd) {
                json_object_put(envs);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        for (const char *const *e = spec->env; e && *e; e++) {
                const char *eq = strchr(*e, '=');
                _cleanup_free_ char *k = eq && eq != *e ? strndup(*e, (size_t)(eq - *e)) : NULL;

                if (!k) {
                        json_object_put(envs);
                        return dm_error_set(err, -EINVAL, "environment variable '%s' is not KEY=VALUE", *e);
                }
                r |= json_object_object_add(envs, k, json_object_new_string(eq + 1));
        }
        r |= json_object_object_add(o, "command", json_object_new_string(cmd));
        if (spec->workdir)
                r |= json_object_object_add(o, "cwd", json_object_new_string(spec->workdir));
        r |= json_object_object_add(o, "background", json_object_new_boolean(false));
        r |= json_object_object_add(o, "envs", envs);
        *ret = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
        return r || !*ret ? dm_error_set(err, -ENOMEM, "out of memory") : 0;
}

/* ---- one exec's thread ------------------------------------------------------------ */

static void exec_started(struct osb_exec *x)
{
        pthread_mutex_lock(&x->lock);
        x->started = true;
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
}

/* stdout/stderr as one Docker frame into the socketpair. -EPIPE when the
 * reader has let go. */
static int frame(struct osb_exec *x, int stream, const char *data, size_t len)
{
        unsigned char hdr[8] = { (unsigned char)stream,
                                 0,
                                 0,
                                 0,
                                 (unsigned char)(len >> 24),
                                 (unsigned char)(len >> 16),
                                 (unsigned char)(len >> 8),
                                 (unsigned char)len };
        struct iovec iov[2] = { { hdr, 8 }, { (void *)data, len } };
        struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };

        while (iov[0].iov_len + iov[1].iov_len > 0) {
                ssize_t n = sendmsg(x->fd, &m, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                for (int i = 0; i < 2 && n > 0; i++) {
                        size_t k = (size_t)n < iov[i].iov_len ? (size_t)n : iov[i].iov_len;
                        iov[i].iov_base = (char *)iov[i].iov_base + k;
                        iov[i].iov_len -= k;
                        n -= (ssize_t)k;
                }
                if (iov[0].iov_len == 0) {
                        m.msg_iov = &iov[1];
                        m.msg_iovlen = 1;
                }
        }
        return 0;
}

/* The signal in Go's "signal: <name>" (os.Signal's String()), or 0. */
static int signal_of(struct json_object *line)
{
        static const struct {
                const char *name;
                int sig;
        } names[] = {
                { "hangup", SIGHUP },       { "interrupt", SIGINT },    { "quit", SIGQUIT },
                { "aborted", SIGABRT },     { "killed", SIGKILL },      { "segmentation fault", SIGSEGV },
                { "broken pipe", SIGPIPE }, { "alarm clock", SIGALRM }, { "terminated", SIGTERM },
        };
        const char *s = line && json_object_is_type(line, json_type_string) ? json_object_get_string(line) : NULL;

        if (!s || strncmp(s, "signal: ", 8) != 0)
                return 0;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strncmp(s + 8, names[i].name, strlen(names[i].name)) == 0)
                        return names[i].sig;
        return 0;
}

/* One event: a JSON object, possibly in "data:" lines (SSE framing). */
static int on_event(struct osb_exec *x, char *text, size_t len)
{
        _cleanup_json_ struct json_object *o = NULL;
        const char *type, *t;
        char *p = text;

        text[len] = '\0';
        while (*p == '\r' || *p == '\n' || *p == ' ')
                p++;
        if (!*p)
                return 0;
        if (strncmp(p, "data:", 5) == 0) {
                /* Join the data lines; other SSE fields (event:, id:) add nothing. */
                char *w = p, *line = p;
                while (line && *line) {
                        char *nl = strchr(line, '\n');
                        if (strncmp(line, "data:", 5) == 0) {
                                size_t l = (nl ? (size_t)(nl - line) : strlen(line)) - 5;
                                memmove(w, line + 5, l);
                                w += l;
                        }
                        line = nl ? nl + 1 : NULL;
                }
                *w = '\0';
        }
        o = json_tokener_parse(p);
        if (!o || !(type = get_str(o, "type"))) {
                snprintf(x->err_msg, sizeof(x->err_msg), "execd sent an event that is not a JSON object with a type");
                x->err_code = -EPROTO;
                return -EPROTO;
        }
        t = get_str(o, "text");
        if (strcmp(type, "init") == 0) {
                snprintf(x->id, sizeof(x->id), "%s", t ? t : "");
                exec_started(x);
        } else if (strcmp(type, "stdout") == 0 || strcmp(type, "stderr") == 0) {
                if (t && *t && frame(x, type[3] == 'o' ? 1 : 2, t, strlen(t)) < 0)
                        return -EPIPE;
        } else if (strcmp(type, "execution_complete") == 0) {
                x->final = true;
                x->exit_code = 0;
        } else if (strcmp(type, "error") == 0) {
                struct json_object *e = get(o, "error");
                const char *ev = get_str(e, "evalue"), *en = get_str(e, "ename");
                char *end = NULL;
                long code = ev ? strtol(ev, &end, 10) : -1;

                x->final = true;
                if (ev && end != ev && *end == '\0' && code >= 0 && code <= 255) {
                        x->exit_code = (int)code;
                } else if (ev && end != ev && *end == '\0' && code == -1) {
                        /* Go's ExitCode() of a signal death: the traceback
                         * holds err.Error(), "signal: killed". */
                        int sig = signal_of(json_object_array_get_idx(get(e, "traceback"), 0));

                        x->exit_code = 128 + (sig ? sig : atomic_load(&x->interrupted) ? SIGKILL : 0);
                } else {
                        /* Not an exit status: the command did not run. */
                        x->exit_code = -1;
                        x->err_code = -EIO;
                        snprintf(x->err_msg, sizeof(x->err_msg), "execd: %s: %.300s", en ? en : "error",
                                 ev ? ev : "(no detail)");
                }
        }
        /* ping, status, result, execution_count: nothing to do. */
        return 0;
}

size_t dm_osb_exec_on_body(char *data, size_t size, size_t n, void *userdata)
{
        struct osb_exec *x = userdata;
        size_t len = size * n;

        if (x->status != 200) {
                (void)dm_buf_append(&x->errbody, data, len); /* keep what fits */
                return len;
        }
        for (size_t i = 0; i < len; i++) {
                size_t l;

                if (dm_buf_append(&x->event, &data[i], 1) < 0) {
                        snprintf(x->err_msg, sizeof(x->err_msg), "execd sent an event larger than %u bytes", EVENT_MAX);
                        x->err_code = -EPROTO;
                        return 0;
                }
                l = x->event.len;
                /* An event ends at a blank line. */
                if (l >= 2 && x->event.data[l - 1] == '\n' &&
                    (x->event.data[l - 2] == '\n' ||
                     (l >= 3 && x->event.data[l - 2] == '\r' && x->event.data[l - 3] == '\n'))) {
                        int r;

                        /* room for the NUL on_event writes */
                        if (dm_buf_append(&x->event, "", 1) < 0) {
                                x->err_code = -EPROTO;
                                return 0;
                        }
                        r = on_event(x, x->event.data, l);
                        dm_buf_reset(&x->event);
                        if (r == -EPIPE) {
                                atomic_store(&x->abandoned, true);
                                return 0;
                        }
                        if (r < 0)
                                return 0;
                        /* execd holds the stream open a graceful second
                         * after the final event: do not wait for it. */
                        if (x->final)
                                return 0;
                }
        }
        return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *userdata)
{
        struct osb_exec *x = userdata;
        int status;

        /* The status line: later bodies are read against it. */
        if (size * n > 12 && strncmp(data, "HTTP/", 5) == 0 && sscanf(data, "HTTP/%*s %d", &status) == 1)
                x->status = status;
        return size * n;
}

/* Called by libcurl about once a second, and on every chunk: stop when the
 * reader has closed its end of the socketpair (cancel, timeout). */
static int on_progress(void *userdata, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
        struct osb_exec *x = userdata;
        struct pollfd p = { .fd = x->fd, .events = 0 };

        (void)a, (void)b, (void)c, (void)d;
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR))) {
                atomic_store(&x->abandoned, true);
                return 1;
        }
        return 0;
}

static int interrupt(struct dm_curl *execd, const char *cmd_id, struct dm_error *err)
{
        _cleanup_free_ char *esc = dm_uri_escape(cmd_id, ""), *path = NULL;
        _cleanup_buf_ struct dm_buf out = { 0 };
        long status = 0;
        int r;

        if (!esc || asprintf(&path, "/command?id=%s", esc) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_init(&out, ERRBODY_MAX);
        r = dm_curl_request(execd, "DELETE", path, NULL, CALL_TIMEOUT_MS, &status, &out, err);
        if (r >= 0 && status != 200)
                r = dm_osb_status_error(err, status, &out);
        return r;
}

static void *exec_thread(void *userdata)
{
        struct osb_exec *x = userdata;
        struct curl_slist *headers = NULL;
        char ebuf[CURL_ERROR_SIZE];
        CURL *c = dm_curl_easy(x->execd, "/command", &headers, ebuf);
        struct curl_slist *h2;
        CURLcode cc = CURLE_OUT_OF_MEMORY;

        h2 = c ? curl_slist_append(headers, "Content-Type: application/json") : NULL;
        if (h2) {
                headers = h2;
                curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
                curl_easy_setopt(c, CURLOPT_POST, 1L);
                curl_easy_setopt(c, CURLOPT_POSTFIELDS, x->body);
                curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(x->body));
                curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, dm_osb_exec_on_body);
                curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
                curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
                curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
                curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
                curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
                curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
                cc = curl_easy_perform(c);
                dm_curl_easy_performed();
        }
        pthread_mutex_lock(&x->lock);
        if (!x->err_code && x->status != 200 && x->status != 0 && cc == CURLE_OK) {
                struct dm_error e = { 0 };
                x->err_code = dm_osb_status_error(&e, x->status, &x->errbody);
                snprintf(x->err_msg, sizeof(x->err_msg), "%.500s", e.msg);
        } else if (!x->err_code && cc != CURLE_OK && !x->final && !atomic_load(&x->abandoned)) {
                struct dm_error e = { 0 };
                x->err_code = c ? dm_curl_easy_error(x->execd, c, cc, ebuf, &e) : -ENOMEM;
                snprintf(x->err_msg, sizeof(x->err_msg), "%.500s", c ? e.msg : "out of memory");
        } else if (!x->err_code && !x->final && !atomic_load(&x->abandoned)) {
                x->err_code = -EPROTO;
                snprintf(x->err_msg, sizeof(x->err_msg), "execd ended the stream before the command's final event");
        }
        if (!x->started && !x->err_code) {
                x->err_code = -EPROTO;
                snprintf(x->err_msg, sizeof(x->err_msg), "execd sent no init event");
        }
        pthread_mutex_unlock(&x->lock);
        /* The reader let go before the end: the command must not run on. */
        if (atomic_load(&x->abandoned) && !x->final && x->id[0]) {
                struct dm_error e = { 0 };
                if (interrupt(x->execd, x->id, &e) < 0)
                        log_warning("interrupt command '%s' in sandbox '%s': %s", x->id, dm_osb_name(x->o, x->sandbox),
                                    e.msg);
        }
        if (c)
                curl_easy_cleanup(c);
        curl_slist_free_all(headers);
        /* EOF for the reader. */
        close(x->fd);
        pthread_mutex_lock(&x->lock);
        x->fd = -1;
        x->started = true;
        x->done = true;
        x->done_ms = dm_now_ms();
        pthread_cond_broadcast(&x->cond);
        pthread_mutex_unlock(&x->lock);
        return NULL;
}

static void exec_free(struct osb_exec *x)
{
        if (!x)
                return;
        pthread_join(x->thread, NULL);
        pthread_mutex_destroy(&x->lock);
        pthread_cond_destroy(&x->cond);
        dm_buf_release(&x->event);
        dm_buf_release(&x->errbody);
        free(x->sandbox);
        free(x->body);
        free(x);
}

/* Unlinks and frees finished execs nobody will ask about (their reader
 * let go, or nobody asked for ten minutes), so a long-lived server does not
 * collect them. */
static void execs_prune(struct osb *o)
{
        struct osb_exec *dead = NULL;

        pthread_mutex_lock(&o->lock);
        for (struct osb_exec **p = &o->execs; *p;) {
                struct osb_exec *x = *p;
                bool gone;

                pthread_mutex_lock(&x->lock);
                gone = x->done && (atomic_load(&x->abandoned) || dm_now_ms() - x->done_ms > 600000);
                pthread_mutex_unlock(&x->lock);
                if (gone) {
                        *p = x->next;
                        x->next = dead;
                        dead = x;
                } else {
                        p = &x->next;
                }
        }
        pthread_mutex_unlock(&o->lock);
        while (dead) {
                struct osb_exec *next = dead->next;
                exec_free(dead);
                dead = next;
        }
}

int dm_osb_exec(struct dm_backend *b, const char *id, const struct dm_exec_spec *spec, struct dm_stream **ret_stream,
                char **ret_exec_id, struct dm_error *err)
{
        struct osb *o = to_osb(b);
        struct osb_exec *x;
        struct dm_curl *execd;
        sigset_t all, old;
        char name[160];
        int sv[2], r;

        if (!spec->argv || !spec->argv[0])
                return dm_error_set(err, -EINVAL, "exec in sandbox '%s': no command given", dm_osb_name(o, id));
        r = dm_osb_execd(o, id, &execd, err);
        if (r < 0)
                return dm_error_wrap(err, "exec in sandbox '%s'", dm_osb_name(to_osb(b), id));
        execs_prune(o);
        x = calloc(1, sizeof(*x));
        if (!x)
                return dm_error_set(err, -ENOMEM, "out of memory");
        pthread_mutex_init(&x->lock, NULL);
        pthread_cond_init(&x->cond, NULL);
        dm_buf_init(&x->event, EVENT_MAX);
        dm_buf_init(&x->errbody, ERRBODY_MAX);
        x->o = o;
        x->execd = execd;
        x->fd = -1;
        r = command_body(spec, &x->body, err);
        if (r >= 0 && !(x->sandbox = strdup(id)))
                r = dm_error_set(err, -ENOMEM, "out of memory");
        if (r >= 0 && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                r = dm_error_set(err, -errno, "socketpair: %s", strerror(errno));
        if (r < 0) {
                free(x->sandbox);
                free(x->body);
                dm_buf_release(&x->event);
                dm_buf_release(&x->errbody);
                free(x);
                return r;
        }
        x->fd = sv[1];
        /* The thread takes none of the server's signals. */
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&x->thread, NULL, exec_thread, x);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0) {
                close(sv[0]);
                close(sv[1]);
                free(x->sandbox);
                free(x->body);
                dm_buf_release(&x->event);
                dm_buf_release(&x->errbody);
                free(x);
                return dm_error_set(err, r, "start a thread: %s", strerror(-r));
        }
        /* The command id comes with the first event. */
        /* The name before x->lock: dm_osb_name takes the backend's lock. */
        snprintf(name, sizeof(name), "%s", dm_osb_name(o, id));
        pthread_mutex_lock(&x->lock);
        while (!x->started)
                pthread_cond_wait(&x->cond, &x->lock);
        r = x->id[0] ? 0 : x->err_code ? x->err_code : -EPROTO;
        if (r < 0)
                dm_error_set(err, r, "exec in sandbox '%s': %s", name, x->err_msg[0] ? x->err_msg : "no command id");
        pthread_mutex_unlock(&x->lock);
        if (r < 0) {
                close(sv[0]);
                exec_free(x);
                return r;
        }
        pthread_mutex_lock(&o->lock);
        x->next = o->execs;
        o->execs = x;
        pthread_mutex_unlock(&o->lock);
        if (!(*ret_exec_id = strdup(x->id))) {
                close(sv[0]); /* the thread sees the reader gone and interrupts */
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        return dm_stream_from_fd(sv[0], ret_stream, err);
}

static struct osb_exec *exec_find(struct osb *o, const char *exec_id, bool unlink)
{
        struct osb_exec *found = NULL;

        pthread_mutex_lock(&o->lock);
        for (struct osb_exec **p = &o->execs; *p; p = &(*p)->next)
                if (strcmp((*p)->id, exec_id) == 0) {
                        found = *p;
                        if (unlink)
                                *p = found->next;
                        break;
                }
        pthread_mutex_unlock(&o->lock);
        return found;
}

int dm_osb_exec_exit_code(struct dm_backend *b, const char *exec_id, int *ret_exit_code, struct dm_error *err)
{
        struct osb_exec *x = exec_find(to_osb(b), exec_id, true);
        int r;

        if (!x)
                return dm_error_set(err, -ENOENT, "no command '%s' (its exit code was asked for already?)", exec_id);
        pthread_mutex_lock(&x->lock);
        while (!x->done)
                pthread_cond_wait(&x->cond, &x->lock);
        pthread_mutex_unlock(&x->lock);
        r = x->err_code;
        if (r < 0)
                dm_error_set(err, r, "command '%s' in sandbox '%s': %s", exec_id, dm_osb_name(x->o, x->sandbox),
                             x->err_msg);
        else if (!x->final)
                r = dm_error_set(err, -EPROTO, "command '%s' was interrupted before its exit code came", exec_id);
        else
                *ret_exit_code = x->exit_code;
        exec_free(x);
        return r;
}

int dm_osb_exec_interrupt(struct dm_backend *b, const char *exec_id, struct dm_error *err)
{
        struct osb_exec *x = exec_find(to_osb(b), exec_id, false);
        bool done;

        if (!x)
                return 0;
        pthread_mutex_lock(&x->lock);
        done = x->done;
        pthread_mutex_unlock(&x->lock);
        /* x stays linked until exit_code or prune, both after done. */
        if (!done)
                atomic_store(&x->interrupted, true);
        return done ? 0 : interrupt(x->execd, exec_id, err);
}

int dm_osb_kill(struct dm_backend *b, const char *id, int signo, struct dm_error *err)
{
        struct osb *o = to_osb(b);
        char ids[32][128];
        size_t n = 0;
        struct dm_curl *execd = NULL;
        int r = 0;

        (void)signo; /* execd has one way to stop a command */
        pthread_mutex_lock(&o->lock);
        for (struct osb_exec *x = o->execs; x && n < 32; x = x->next) {
                pthread_mutex_lock(&x->lock);
                if (!x->done && strcmp(x->sandbox, id) == 0) {
                        atomic_store(&x->interrupted, true);
                        snprintf(ids[n++], sizeof(ids[0]), "%s", x->id);
                        execd = x->execd;
                }
                pthread_mutex_unlock(&x->lock);
        }
        pthread_mutex_unlock(&o->lock);
        for (size_t i = 0; i < n && r >= 0; i++)
                r = interrupt(execd, ids[i], err);
        return r < 0 ? dm_error_wrap(err, "stop the commands in sandbox '%s'", dm_osb_name(to_osb(b), id)) : 0;
}

void dm_osb_execs_release(struct osb *o)
{
        struct osb_exec *x;

        pthread_mutex_lock(&o->lock);
        x = o->execs;
        o->execs = NULL;
        pthread_mutex_unlock(&o->lock);
        while (x) {
                struct osb_exec *next = x->next;
                exec_free(x);
                x = next;
        }
}

/* ---- files -------------------------------------------------------------------------- */

struct upload_src {
        int fd;
        bool failed;
};

static size_t on_upload_read(char *p, size_t size, size_t n, void *userdata)
{
        struct upload_src *s = userdata;
        ssize_t r;

        do
                r = read(s->fd, p, size * n);
        while (r < 0 && errno == EINTR);
        if (r < 0) {
                s->failed = true;
                return CURL_READFUNC_ABORT;
        }
        return (size_t)r;
}

/* An answer's body, kept as far as it fits (only errors carry one). */
static size_t on_answer(char *p, size_t size, size_t n, void *userdata)
{
        (void)dm_buf_append(userdata, p, size * n);
        return size * n;
}

int dm_osb_put_file(struct dm_backend *b, const char *id, const char *path, int in_fd, int64_t len, unsigned mode,
                    struct dm_error *err)
{
        struct dm_curl *execd;
        _cleanup_json_ struct json_object *meta = json_object_new_object();
        _cleanup_buf_ struct dm_buf out = { 0 };
        struct curl_slist *headers = NULL;
        struct upload_src src = { .fd = in_fd };
        char ebuf[CURL_ERROR_SIZE], octal[16];
        curl_mime *mime = NULL;
        curl_mimepart *part;
        CURLcode cc;
        long status = 0;
        CURL *c;
        int r;

        r = dm_osb_execd(to_osb(b), id, &execd, err);
        if (r < 0)
                return dm_error_wrap(err, "upload to sandbox '%s'", dm_osb_name(to_osb(b), id));
        /* FileMetadata.mode is the octal digits written as a number (755). */
        snprintf(octal, sizeof(octal), "%o", mode & 07777);
        if (!meta || json_object_object_add(meta, "path", json_object_new_string(path)) < 0 ||
            json_object_object_add(meta, "mode", json_object_new_int(atoi(octal))) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        c = dm_curl_easy(execd, "/files/upload", &headers, ebuf);
        if (!c)
                return dm_error_set(err, -ENOMEM, "out of memory");
        dm_buf_init(&out, ERRBODY_MAX);
        mime = curl_mime_init(c);
        /* Order matters to execd: the metadata part, then the file part. */
        if (!mime || !(part = curl_mime_addpart(mime)) || curl_mime_name(part, "metadata") != CURLE_OK ||
            /* execd reads form.File["metadata"]: without a filename, Go's
             * multipart reader files the part among the values. */
            curl_mime_filename(part, "metadata") != CURLE_OK ||
            curl_mime_data(part, json_object_to_json_string_ext(meta, JSON_C_TO_STRING_PLAIN), CURL_ZERO_TERMINATED) !=
                    CURLE_OK ||
            curl_mime_type(part, "application/json") != CURLE_OK || !(part = curl_mime_addpart(mime)) ||
            curl_mime_name(part, "file") != CURLE_OK || curl_mime_filename(part, strrchr(path, '/') + 1) != CURLE_OK ||
            curl_mime_type(part, "application/octet-stream") != CURLE_OK ||
            curl_mime_data_cb(part, (curl_off_t)len, on_upload_read, NULL, NULL, &src) != CURLE_OK) {
                r = dm_error_set(err, -ENOMEM, "out of memory");
                goto out;
        }
        curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_answer);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30L * 60 * 1000);
        cc = curl_easy_perform(c);
        dm_curl_easy_performed();
        if (cc != CURLE_OK)
                r = src.failed ? dm_error_set(err, -EIO, "reading the file to upload: %s", strerror(errno))
                               : dm_curl_easy_error(execd, c, cc, ebuf, err);
        else if (curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status), status != 200)
                r = dm_osb_status_error(err, status, &out);
out:
        curl_mime_free(mime);
        curl_easy_cleanup(c);
        curl_slist_free_all(headers);
        return r < 0 ? dm_error_wrap(err, "upload '%s' to sandbox '%s'", path, dm_osb_name(to_osb(b), id)) : 0;
}

int dm_osb_get_file(struct dm_backend *b, const char *id, const char *path, int out_fd, int64_t max,
                    struct dm_error *err)
{
        struct dm_curl *execd;
        _cleanup_free_ char *esc = dm_uri_escape(path, ""), *url = NULL;
        struct dm_buf errbody;
        long status = 0;
        int r;

        if (!esc || asprintf(&url, "/files/download?path=%s", esc) < 0)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_osb_execd(to_osb(b), id, &execd, err);
        if (r < 0)
                return dm_error_wrap(err, "download from sandbox '%s'", dm_osb_name(to_osb(b), id));
        dm_buf_init(&errbody, ERRBODY_MAX);
        r = dm_curl_transfer(execd, "GET", url, NULL, -1, 0, out_fd, max, 30L * 60 * 1000, &status, &errbody, err);
        if (r >= 0 && status != 200) {
                r = dm_osb_status_error(err, status, &errbody);
                /* execd says 400 for a directory. */
                if (status == 400)
                        r = -EISDIR;
        }
        dm_buf_release(&errbody);
        return r < 0 && r != -EFBIG
                       ? dm_error_wrap(err, "download '%s' from sandbox '%s'", path, dm_osb_name(to_osb(b), id))
                       : r;
}
