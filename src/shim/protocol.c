/* SPDX-License-Identifier: MIT */
/* Frame reader and message codecs of the shim protocol (protocol.h). Built
 * twice: into the static shim and into the server; libc only. */
#include "config.h"
#include "src/shim/protocol.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct type_info {
        uint8_t type;
        enum dm_shim_dir dir; /* who may receive it */
        uint32_t min, max;    /* payload size bounds */
};

static const struct type_info types[] = {
        { DM_SHIM_EXEC, DM_SHIM_TO_SHIM, 0, DM_SHIM_EXEC_MAX },
        { DM_SHIM_STDIN, DM_SHIM_TO_SHIM, 0, DM_SHIM_DATA_MAX },
        { DM_SHIM_STDIN_EOF, DM_SHIM_TO_SHIM, 0, 0 },
        { DM_SHIM_KILL, DM_SHIM_TO_SHIM, 4, 4 },
        { DM_SHIM_HELLO, DM_SHIM_TO_HOST, 12, 12 },
        { DM_SHIM_STARTED, DM_SHIM_TO_HOST, 4, 4 },
        { DM_SHIM_STDOUT, DM_SHIM_TO_HOST, 0, DM_SHIM_DATA_MAX },
        { DM_SHIM_STDERR, DM_SHIM_TO_HOST, 0, DM_SHIM_DATA_MAX },
        { DM_SHIM_EXIT, DM_SHIM_TO_HOST, 8, 8 },
        { DM_SHIM_ERROR, DM_SHIM_TO_HOST, 4, 4 + DM_SHIM_MSG_MAX },
};

static const struct type_info *type_find(uint8_t type)
{
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
                if (types[i].type == type)
                        return &types[i];
        return NULL;
}

uint32_t dm_shim_type_max(uint8_t type)
{
        const struct type_info *t = type_find(type);
        return t ? t->max : 0;
}

static void put16(uint8_t *p, uint16_t v)
{
        p[0] = (uint8_t)(v >> 8);
        p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

static void put64(uint8_t *p, uint64_t v)
{
        put32(p, (uint32_t)(v >> 32));
        put32(p + 4, (uint32_t)v);
}

static uint16_t get16(const uint8_t *p)
{
        return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
        return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t get64(const uint8_t *p)
{
        return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

void dm_shim_put_header(uint8_t out[DM_SHIM_HDR_LEN], uint8_t type, uint32_t len)
{
        out[0] = DM_SHIM_PROTO_VERSION;
        out[1] = type;
        put16(out + 2, 0);
        put32(out + 4, len);
}

void dm_shim_reader_init(struct dm_shim_reader *r, enum dm_shim_dir dir)
{
        memset(r, 0, sizeof(*r));
        r->dir = dir;
}

void dm_shim_reader_release(struct dm_shim_reader *r)
{
        free(r->buf);
        r->buf = NULL;
        r->alloc = 0;
}

bool dm_shim_reader_partial(const struct dm_shim_reader *r)
{
        return r->hdr_len > 0;
}

static int header_check(struct dm_shim_reader *r)
{
        const struct type_info *t;

        if (r->hdr[0] != DM_SHIM_PROTO_VERSION || get16(r->hdr + 2) != 0)
                return -EPROTO;
        t = type_find(r->hdr[1]);
        if (!t || t->dir != r->dir)
                return -EBADMSG;
        r->type = r->hdr[1];
        r->len = get32(r->hdr + 4);
        if (r->len > t->max)
                return -EMSGSIZE;
        if (r->len < t->min)
                return -EPROTO;
        r->got = 0;
        return 0;
}

/* The buffer grows with the bytes that actually arrive, not with the length
 * a header claims: a peer that announces 1 MiB and sends 8 bytes costs 8. */
static int reserve(struct dm_shim_reader *r, size_t need)
{
        size_t n;
        uint8_t *p;

        if (need <= r->alloc)
                return 0;
        n = r->alloc ? r->alloc * 2 : 4096;
        if (n < need)
                n = need;
        if (n > r->len)
                n = r->len;
        p = realloc(r->buf, n);
        if (!p)
                return -ENOMEM;
        r->buf = p;
        r->alloc = n;
        return 0;
}

int dm_shim_reader_feed(struct dm_shim_reader *r, const uint8_t *data, size_t len, size_t *ret_used,
                        struct dm_shim_frame *ret)
{
        size_t i = 0;
        int rc;

        for (;;) {
                if (r->hdr_len < DM_SHIM_HDR_LEN) {
                        size_t take = DM_SHIM_HDR_LEN - r->hdr_len;

                        if (i == len)
                                break;
                        if (take > len - i)
                                take = len - i;
                        memcpy(r->hdr + r->hdr_len, data + i, take);
                        r->hdr_len += take;
                        i += take;
                        if (r->hdr_len < DM_SHIM_HDR_LEN)
                                break;
                        rc = header_check(r);
                        if (rc < 0) {
                                *ret_used = i;
                                return rc;
                        }
                }
                if (r->got < r->len) {
                        size_t take = r->len - r->got;

                        if (i == len)
                                break;
                        if (take > len - i)
                                take = len - i;
                        rc = reserve(r, r->got + take);
                        if (rc < 0) {
                                *ret_used = i;
                                return rc;
                        }
                        memcpy(r->buf + r->got, data + i, take);
                        r->got += (uint32_t)take;
                        i += take;
                        if (r->got < r->len)
                                break;
                }
                ret->type = r->type;
                ret->data = r->buf;
                ret->len = r->len;
                r->hdr_len = 0;
                *ret_used = i;
                return 1;
        }
        *ret_used = i;
        return 0;
}

/* --- EXEC ------------------------------------------------------------------ */

struct cursor {
        const uint8_t *p;
        size_t len, off;
};

static const uint8_t *take(struct cursor *c, size_t n)
{
        const uint8_t *q;

        if (c->len - c->off < n)
                return NULL;
        q = c->p + c->off;
        c->off += n;
        return q;
}

static int take32(struct cursor *c, uint32_t *v)
{
        const uint8_t *q = take(c, 4);

        if (!q)
                return -EBADMSG;
        *v = get32(q);
        return 0;
}

enum str_kind { STR_ARG0, STR_ARG, STR_ENV, STR_CWD };

/* One length-prefixed string, checked for its kind. */
static int take_str(struct cursor *c, enum str_kind kind, const uint8_t **ret, uint32_t *ret_len)
{
        const uint8_t *q, *eq;
        uint32_t n;

        if (take32(c, &n) < 0)
                return -EBADMSG;
        if (n > DM_SHIM_MAX_STR)
                return -E2BIG;
        if (!(q = take(c, n)))
                return -EBADMSG;
        if (memchr(q, 0, n))
                return -EBADMSG;
        switch (kind) {
        case STR_ARG0:
                if (n == 0)
                        return -EBADMSG;
                break;
        case STR_ENV:
                eq = memchr(q, '=', n);
                if (!eq || eq == q)
                        return -EBADMSG;
                break;
        case STR_CWD:
                if (n > 0 && q[0] != '/')
                        return -EBADMSG;
                break;
        case STR_ARG: break;
        }
        *ret = q;
        *ret_len = n;
        return 0;
}

static bool rlimit_ok(const struct dm_shim_rlimit *rl)
{
        return rl->resource < 16 && rl->soft <= rl->hard;
}

static bool flags_ok(uint32_t flags, size_t stdin_len)
{
        if (flags & ~DM_SHIM_F_ALL)
                return false;
        if ((flags & DM_SHIM_F_STDIN_MORE) && !(flags & DM_SHIM_F_STDIN))
                return false;
        return stdin_len == 0 || (flags & DM_SHIM_F_STDIN);
}

int dm_shim_exec_decode(const uint8_t *p, size_t len, struct dm_shim_exec_msg **ret)
{
        struct cursor c = { .p = p, .len = len };
        struct dm_shim_exec_msg head = { 0 }, *m;
        const uint8_t *s, *stdin_p;
        uint32_t n, argc, envc, nrl, stdin_len;
        size_t strings = 0, argv_off, env_off, cwd_len;
        const char *cwd_p;
        char **argv, **env, *w;
        int r;

        if (take32(&c, &head.flags) < 0 || take32(&c, &head.timeout_ms) < 0 || take32(&c, &nrl) < 0)
                return -EBADMSG;
        if (nrl > DM_SHIM_MAX_RLIMITS)
                return -E2BIG;
        for (uint32_t i = 0; i < nrl; i++) {
                const uint8_t *q = take(&c, 2 + 8 + 8);

                if (!q)
                        return -EBADMSG;
                head.rlimits[i] = (struct dm_shim_rlimit){ get16(q), get64(q + 2), get64(q + 10) };
                if (!rlimit_ok(&head.rlimits[i]))
                        return -EBADMSG;
        }
        head.n_rlimits = nrl;
        if ((r = take_str(&c, STR_CWD, &s, &n)) < 0)
                return r;
        cwd_p = (const char *)s;
        cwd_len = n;

        /* First pass: check everything and size the block. */
        if (take32(&c, &argc) < 0)
                return -EBADMSG;
        if (argc < 1)
                return -EBADMSG;
        if (argc > DM_SHIM_MAX_ARGS)
                return -E2BIG;
        argv_off = c.off;
        for (uint32_t i = 0; i < argc; i++) {
                if ((r = take_str(&c, i == 0 ? STR_ARG0 : STR_ARG, &s, &n)) < 0)
                        return r;
                strings += n + 1;
        }
        if (take32(&c, &envc) < 0)
                return -EBADMSG;
        if (envc > DM_SHIM_MAX_ENV)
                return -E2BIG;
        env_off = c.off;
        for (uint32_t i = 0; i < envc; i++) {
                if ((r = take_str(&c, STR_ENV, &s, &n)) < 0)
                        return r;
                strings += n + 1;
        }
        if (take32(&c, &stdin_len) < 0 || !(stdin_p = take(&c, stdin_len)))
                return -EBADMSG;
        if (c.off != c.len || !flags_ok(head.flags, stdin_len))
                return -EBADMSG;

        /* Second pass: copy into one block the caller frees at once. */
        m = malloc(sizeof(*m) + (argc + 1 + envc + 1) * sizeof(char *) + strings + cwd_len + 1 + stdin_len);
        if (!m)
                return -ENOMEM;
        *m = head;
        argv = (char **)(m + 1);
        env = argv + argc + 1;
        w = (char *)(env + envc + 1);
        c.off = argv_off;
        for (uint32_t i = 0; i <= argc + envc; i++) {
                if (i == argc) {
                        argv[argc] = NULL;
                        c.off = env_off;
                        continue;
                }
                n = get32(take(&c, 4));
                s = take(&c, n);
                memcpy(w, s, n);
                w[n] = '\0';
                if (i < argc)
                        argv[i] = w;
                else
                        env[i - argc - 1] = w;
                w += n + 1;
        }
        env[envc] = NULL;
        memcpy(w, cwd_p, cwd_len);
        w[cwd_len] = '\0';
        m->cwd = w;
        w += cwd_len + 1;
        memcpy(w, stdin_p, stdin_len);
        m->stdin_data = (const uint8_t *)w;
        m->stdin_len = stdin_len;
        m->argv = (const char *const *)argv;
        m->argc = argc;
        m->env = (const char *const *)env;
        m->envc = envc;
        *ret = m;
        return 0;
}

static int str_size(const char *s, enum str_kind kind, size_t *total)
{
        size_t n = strlen(s);
        const char *eq;

        if (n > DM_SHIM_MAX_STR)
                return -E2BIG;
        if (kind == STR_ARG0 && n == 0)
                return -EINVAL;
        if (kind == STR_ENV && (!(eq = strchr(s, '=')) || eq == s))
                return -EINVAL;
        if (kind == STR_CWD && n > 0 && s[0] != '/')
                return -EINVAL;
        *total += 4 + n;
        return 0;
}

static uint8_t *put_str(uint8_t *w, const char *s)
{
        size_t n = strlen(s);

        put32(w, (uint32_t)n);
        memcpy(w + 4, s, n);
        return w + 4 + n;
}

int dm_shim_exec_encode(const struct dm_shim_exec_msg *m, uint8_t **ret, size_t *ret_len)
{
        size_t total = 4 + 4 + 4 + 4 + 4 + 4, argc = 0, envc = 0;
        const char *cwd = m->cwd ? m->cwd : "";
        uint8_t *buf, *w;
        int r;

        if (!m->argv || !m->argv[0])
                return -EINVAL;
        if (m->n_rlimits > DM_SHIM_MAX_RLIMITS)
                return -E2BIG;
        for (size_t i = 0; i < m->n_rlimits; i++)
                if (!rlimit_ok(&m->rlimits[i]))
                        return -EINVAL;
        total += m->n_rlimits * 18;
        if ((r = str_size(cwd, STR_CWD, &total)) < 0)
                return r;
        for (; m->argv[argc]; argc++)
                if ((r = str_size(m->argv[argc], argc == 0 ? STR_ARG0 : STR_ARG, &total)) < 0)
                        return r;
        for (; m->env && m->env[envc]; envc++)
                if ((r = str_size(m->env[envc], STR_ENV, &total)) < 0)
                        return r;
        if (argc > DM_SHIM_MAX_ARGS || envc > DM_SHIM_MAX_ENV)
                return -E2BIG;
        if (!flags_ok(m->flags, m->stdin_len))
                return -EINVAL;
        total += m->stdin_len;
        if (total > DM_SHIM_EXEC_MAX || m->stdin_len > DM_SHIM_EXEC_MAX)
                return -E2BIG;

        buf = malloc(DM_SHIM_HDR_LEN + total);
        if (!buf)
                return -ENOMEM;
        dm_shim_put_header(buf, DM_SHIM_EXEC, (uint32_t)total);
        w = buf + DM_SHIM_HDR_LEN;
        put32(w, m->flags);
        put32(w + 4, m->timeout_ms);
        put32(w + 8, (uint32_t)m->n_rlimits);
        w += 12;
        for (size_t i = 0; i < m->n_rlimits; i++, w += 18) {
                put16(w, m->rlimits[i].resource);
                put64(w + 2, m->rlimits[i].soft);
                put64(w + 10, m->rlimits[i].hard);
        }
        w = put_str(w, cwd);
        put32(w, (uint32_t)argc);
        w += 4;
        for (size_t i = 0; i < argc; i++)
                w = put_str(w, m->argv[i]);
        put32(w, (uint32_t)envc);
        w += 4;
        for (size_t i = 0; i < envc; i++)
                w = put_str(w, m->env[i]);
        put32(w, (uint32_t)m->stdin_len);
        if (m->stdin_len)
                memcpy(w + 4, m->stdin_data, m->stdin_len);
        *ret = buf;
        *ret_len = DM_SHIM_HDR_LEN + total;
        return 0;
}

/* --- fixed frames ------------------------------------------------------------ */

size_t dm_shim_encode_u32(uint8_t *out, uint8_t type, uint32_t v)
{
        dm_shim_put_header(out, type, 4);
        put32(out + DM_SHIM_HDR_LEN, v);
        return DM_SHIM_HDR_LEN + 4;
}

size_t dm_shim_encode_hello(uint8_t out[DM_SHIM_HDR_LEN + 12], uint32_t pid, uint32_t max_execs)
{
        dm_shim_put_header(out, DM_SHIM_HELLO, 12);
        put32(out + DM_SHIM_HDR_LEN, pid);
        put32(out + DM_SHIM_HDR_LEN + 4, max_execs);
        put32(out + DM_SHIM_HDR_LEN + 8, 0);
        return DM_SHIM_HDR_LEN + 12;
}

size_t dm_shim_encode_exit(uint8_t out[DM_SHIM_HDR_LEN + 8], uint8_t how, uint8_t flags, int32_t value)
{
        uint8_t *p = out + DM_SHIM_HDR_LEN;

        dm_shim_put_header(out, DM_SHIM_EXIT, 8);
        p[0] = how;
        p[1] = flags;
        put16(p + 2, 0);
        put32(p + 4, (uint32_t)value);
        return DM_SHIM_HDR_LEN + 8;
}

size_t dm_shim_encode_error(uint8_t out[DM_SHIM_HDR_LEN + 4 + DM_SHIM_MSG_MAX], uint32_t errnum, const char *msg)
{
        size_t n = strlen(msg);

        if (n > DM_SHIM_MSG_MAX)
                n = DM_SHIM_MSG_MAX;
        dm_shim_put_header(out, DM_SHIM_ERROR, (uint32_t)(4 + n));
        put32(out + DM_SHIM_HDR_LEN, errnum);
        memcpy(out + DM_SHIM_HDR_LEN + 4, msg, n);
        return DM_SHIM_HDR_LEN + 4 + n;
}

int dm_shim_decode_u32(const struct dm_shim_frame *f, uint32_t *ret)
{
        if (f->len != 4)
                return -EBADMSG;
        *ret = get32(f->data);
        if (f->type == DM_SHIM_KILL && (*ret == 0 || *ret > 64))
                return -EBADMSG;
        return 0;
}

int dm_shim_decode_hello(const struct dm_shim_frame *f, struct dm_shim_hello *ret)
{
        if (f->type != DM_SHIM_HELLO || f->len != 12 || get32(f->data + 8) != 0)
                return -EBADMSG;
        ret->pid = get32(f->data);
        ret->max_execs = get32(f->data + 4);
        return 0;
}

int dm_shim_decode_exit(const struct dm_shim_frame *f, struct dm_shim_exit *ret)
{
        if (f->type != DM_SHIM_EXIT || f->len != 8 || get16(f->data + 2) != 0)
                return -EBADMSG;
        ret->how = f->data[0];
        ret->flags = f->data[1];
        ret->value = (int32_t)get32(f->data + 4);
        if (ret->flags & ~(DM_SHIM_X_TIMED_OUT | DM_SHIM_X_KILLED))
                return -EBADMSG;
        if (ret->how == DM_SHIM_EXITED && ret->value >= 0 && ret->value <= 255)
                return 0;
        if (ret->how == DM_SHIM_SIGNALED && ret->value >= 1 && ret->value <= 64)
                return 0;
        return -EBADMSG;
}

int dm_shim_decode_error(const struct dm_shim_frame *f, uint32_t *ret_errno, char msg[DM_SHIM_MSG_MAX + 1])
{
        size_t n;

        if (f->type != DM_SHIM_ERROR || f->len < 4 || f->len > 4 + DM_SHIM_MSG_MAX)
                return -EBADMSG;
        *ret_errno = get32(f->data);
        if (*ret_errno == 0 || *ret_errno > 4095)
                return -EBADMSG;
        n = f->len - 4;
        /* The text ends up in logs and tool results: keep it to one line of
         * printable ASCII whatever the container sent. */
        for (size_t i = 0; i < n; i++) {
                uint8_t ch = f->data[4 + i];
                msg[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
        }
        msg[n] = '\0';
        return 0;
}

bool dm_shim_path_under_proc(const char *path)
{
        /* Walks the path as text: "." and empty parts are skipped, ".."
         * drops the part before it (at most to the root). Only the first
         * surviving part decides, so no buffer is needed: track it. */
        const char *first = NULL;
        size_t first_len = 0, depth = 0;

        for (const char *p = path; p && *p;) {
                size_t len;

                while (*p == '/')
                        p++;
                len = strcspn(p, "/");
                if (len == 0 || (len == 1 && p[0] == '.')) {
                        /* nothing */
                } else if (len == 2 && p[0] == '.' && p[1] == '.') {
                        if (depth > 0 && --depth == 0)
                                first = NULL;
                } else {
                        if (depth++ == 0) {
                                first = p;
                                first_len = len;
                        }
                }
                p += len;
        }
        return first && first_len == 4 && memcmp(first, "proc", 4) == 0;
}
