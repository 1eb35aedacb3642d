/* SPDX-License-Identifier: MIT */
/* The shim protocol's frame reader and codecs: round trips under any
 * chunking, and every way a hostile peer can get a frame wrong. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/shim/protocol.h"
#include "src/basic/buf.h"
#include "tests/tap.h"

static void u32(struct dm_buf *b, uint32_t v)
{
        uint8_t p[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
        dm_buf_append(b, p, 4);
}

static void u16(struct dm_buf *b, uint16_t v)
{
        uint8_t p[2] = { (uint8_t)(v >> 8), (uint8_t)v };
        dm_buf_append(b, p, 2);
}

static void u64(struct dm_buf *b, uint64_t v)
{
        u32(b, (uint32_t)(v >> 32));
        u32(b, (uint32_t)v);
}

static void str(struct dm_buf *b, const char *s, size_t n)
{
        u32(b, (uint32_t)n);
        dm_buf_append(b, s, n);
}

/* A hand-made EXEC payload, so malformed ones can be built field by field. */
struct exec_spec {
        uint32_t flags, timeout, nrl;
        uint16_t rl_res;
        uint64_t rl_soft, rl_hard;
        const char *cwd;
        uint32_t argc;
        const char *arg; /* every argv entry */
        size_t arg_len;
        uint32_t envc;
        const char *env;
        size_t env_len;
        const char *in;
        uint32_t in_len;
};

static struct exec_spec good(void)
{
        return (struct exec_spec){ .flags = DM_SHIM_F_STDIN,
                                   .timeout = 5000,
                                   .nrl = 1,
                                   .rl_res = 7,
                                   .rl_soft = 64,
                                   .rl_hard = 128,
                                   .cwd = "/tmp",
                                   .argc = 1,
                                   .arg = "echo",
                                   .arg_len = 4,
                                   .envc = 1,
                                   .env = "A=b",
                                   .env_len = 3,
                                   .in = "xyz",
                                   .in_len = 3 };
}

static void build(struct dm_buf *b, const struct exec_spec *s)
{
        dm_buf_reset(b);
        u32(b, s->flags);
        u32(b, s->timeout);
        u32(b, s->nrl);
        for (uint32_t i = 0; i < s->nrl && i < 32; i++) {
                u16(b, s->rl_res);
                u64(b, s->rl_soft);
                u64(b, s->rl_hard);
        }
        str(b, s->cwd, strlen(s->cwd));
        u32(b, s->argc);
        for (uint32_t i = 0; i < s->argc && i < 8; i++)
                str(b, s->arg, s->arg_len);
        u32(b, s->envc);
        for (uint32_t i = 0; i < s->envc && i < 8; i++)
                str(b, s->env, s->env_len);
        str(b, s->in, s->in_len);
}

static int decode_spec(const struct exec_spec *s)
{
        struct dm_buf b;
        struct dm_shim_exec_msg *m = NULL;
        int r;

        dm_buf_init(&b, 1 << 22);
        build(&b, s);
        r = dm_shim_exec_decode((const uint8_t *)b.data, b.len, &m);
        free(m);
        dm_buf_release(&b);
        return r;
}

static void test_exec_roundtrip(void)
{
        const char *argv[] = { "sh", "-c", "echo \"$A\"", "", NULL };
        const char *env[] = { "A=1", "B=two=2", "A=3", NULL };
        struct dm_shim_exec_msg m = {
                .flags = DM_SHIM_F_STDIN | DM_SHIM_F_KEEP_GROUP,
                .timeout_ms = 1234,
                .cwd = "/work",
                .argv = argv,
                .env = env,
                .stdin_data = (const uint8_t *)"in\0put",
                .stdin_len = 6,
                .rlimits = { { 7, 100, 200 }, { 3, UINT64_MAX, UINT64_MAX } },
                .n_rlimits = 2,
        };
        struct dm_shim_exec_msg *d = NULL;
        struct dm_shim_reader rd;
        struct dm_shim_frame f = { 0 };
        uint8_t *frame;
        size_t len, used, off = 0;
        int r = 0;

        is_int(dm_shim_exec_encode(&m, &frame, &len), 0, "encode a full exec request");
        /* One byte at a time: the reader must cope with any chunking. */
        dm_shim_reader_init(&rd, DM_SHIM_TO_SHIM);
        while (off < len && (r = dm_shim_reader_feed(&rd, frame + off, 1, &used, &f)) == 0)
                off += used;
        is_int(r, 1, "byte-by-byte feeding yields the frame");
        is_int(off + 1, len, "at the last byte");
        is_int(f.type, DM_SHIM_EXEC, "type EXEC");
        is_int(dm_shim_exec_decode(f.data, f.len, &d), 0, "decode");
        if (d) {
                is_int(d->argc, 4, "argc");
                is_str(d->argv[2], "echo \"$A\"", "argv[2]");
                is_str(d->argv[3], "", "an empty argument survives");
                ok(d->argv[4] == NULL, "argv NULL-terminated");
                is_int(d->envc, 3, "envc");
                is_str(d->env[1], "B=two=2", "env value with '='");
                ok(d->env[3] == NULL, "env NULL-terminated");
                is_str(d->cwd, "/work", "cwd");
                is_int(d->timeout_ms, 1234, "timeout");
                is_int(d->flags, DM_SHIM_F_STDIN | DM_SHIM_F_KEEP_GROUP, "flags");
                ok(d->stdin_len == 6 && memcmp(d->stdin_data, "in\0put", 6) == 0, "stdin bytes, NUL included");
                ok(d->n_rlimits == 2 && d->rlimits[0].resource == 7 && d->rlimits[0].soft == 100 &&
                           d->rlimits[1].hard == UINT64_MAX,
                   "rlimits");
        }
        free(d);
        dm_shim_reader_release(&rd);
        free(frame);
}

static void test_chunking(void)
{
        uint8_t buf[64];
        size_t n = 0, used;
        struct dm_shim_reader rd;
        struct dm_shim_frame f;

        n += dm_shim_encode_hello(buf + n, 1, 64);
        dm_shim_put_header(buf + n, DM_SHIM_STDOUT, 3);
        memcpy(buf + n + DM_SHIM_HDR_LEN, "abc", 3);
        n += DM_SHIM_HDR_LEN + 3;
        n += dm_shim_encode_exit(buf + n, DM_SHIM_EXITED, 0, 7);

        dm_shim_reader_init(&rd, DM_SHIM_TO_HOST);
        is_int(dm_shim_reader_feed(&rd, buf, n, &used, &f), 1, "three frames in one buffer: the first");
        is_int(used, DM_SHIM_HDR_LEN + 12, "stops right after it");
        is_int(dm_shim_reader_feed(&rd, buf + 20, n - 20, &used, &f), 1, "the second");
        ok(f.type == DM_SHIM_STDOUT && f.len == 3 && memcmp(f.data, "abc", 3) == 0, "stdout 'abc'");
        is_int(dm_shim_reader_feed(&rd, buf + 31, n - 31, &used, &f), 1, "the third");
        is_int(used, n - 31, "uses the rest");
        is_int(dm_shim_reader_feed(&rd, buf, 0, &used, &f), 0, "nothing more");
        ok(!dm_shim_reader_partial(&rd), "not inside a frame");
        dm_shim_reader_release(&rd);

        /* A zero-length frame ends with its header. */
        dm_shim_reader_init(&rd, DM_SHIM_TO_SHIM);
        dm_shim_put_header(buf, DM_SHIM_STDIN_EOF, 0);
        is_int(dm_shim_reader_feed(&rd, buf, DM_SHIM_HDR_LEN, &used, &f), 1, "STDIN_EOF: complete at the header");
        is_int(f.len, 0, "empty payload");
        dm_shim_reader_release(&rd);
}

static int feed_header(enum dm_shim_dir dir, uint8_t version, uint8_t type, uint16_t reserved, uint32_t len,
                       size_t *ret_alloc)
{
        uint8_t h[8] = { version,
                         type,
                         (uint8_t)(reserved >> 8),
                         (uint8_t)reserved,
                         (uint8_t)(len >> 24),
                         (uint8_t)(len >> 16),
                         (uint8_t)(len >> 8),
                         (uint8_t)len };
        uint8_t body[8] = { 0 };
        struct dm_shim_reader rd;
        struct dm_shim_frame f;
        size_t used;
        int r;

        dm_shim_reader_init(&rd, dir);
        r = dm_shim_reader_feed(&rd, h, sizeof(h), &used, &f);
        if (r == 0)
                r = dm_shim_reader_feed(&rd, body, sizeof(body), &used, &f);
        if (ret_alloc)
                *ret_alloc = rd.alloc;
        dm_shim_reader_release(&rd);
        return r;
}

static void test_hostile_headers(void)
{
        size_t alloc = 0;

        is_int(feed_header(DM_SHIM_TO_HOST, 2, DM_SHIM_STDOUT, 0, 1, NULL), -EPROTO, "version 2: refused");
        is_int(feed_header(DM_SHIM_TO_HOST, 0, DM_SHIM_STDOUT, 0, 1, NULL), -EPROTO, "version 0: refused");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, DM_SHIM_STDOUT, 1, 1, NULL), -EPROTO, "reserved bits: refused");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, 99, 0, 1, NULL), -EBADMSG, "unknown type");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, 0, 0, 0, NULL), -EBADMSG, "type 0");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, DM_SHIM_EXEC, 0, 8, NULL), -EBADMSG,
               "EXEC sent to the host: wrong direction");
        is_int(feed_header(DM_SHIM_TO_SHIM, 1, DM_SHIM_STDOUT, 0, 8, NULL), -EBADMSG,
               "STDOUT sent to the shim: wrong direction");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, DM_SHIM_STDOUT, 0, UINT32_MAX, &alloc), -EMSGSIZE,
               "4 GiB stdout frame: refused at the header");
        is_int(alloc, 0, "... before allocating anything");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, DM_SHIM_STDOUT, 0, DM_SHIM_DATA_MAX + 1, NULL), -EMSGSIZE,
               "stdout one byte over the cap");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, DM_SHIM_STDOUT, 0, DM_SHIM_DATA_MAX, NULL), 0,
               "stdout at the cap: accepted (and waiting for the payload)");
        is_int(feed_header(DM_SHIM_TO_SHIM, 1, DM_SHIM_EXEC, 0, DM_SHIM_EXEC_MAX + 1, NULL), -EMSGSIZE,
               "exec one byte over the cap");
        is_int(feed_header(DM_SHIM_TO_SHIM, 1, DM_SHIM_EXEC, 0, DM_SHIM_EXEC_MAX, &alloc), 0,
               "exec at the cap: accepted");
        ok(alloc <= 4096, "a 1 MiB announcement with 8 bytes sent costs a small buffer (%zu)", alloc);
        is_int(feed_header(DM_SHIM_TO_SHIM, 1, DM_SHIM_KILL, 0, 3, NULL), -EPROTO, "KILL with 3 bytes");
        is_int(feed_header(DM_SHIM_TO_SHIM, 1, DM_SHIM_KILL, 0, 5, NULL), -EMSGSIZE, "KILL with 5 bytes");
        is_int(feed_header(DM_SHIM_TO_SHIM, 1, DM_SHIM_STDIN_EOF, 0, 1, NULL), -EMSGSIZE, "STDIN_EOF with a payload");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, DM_SHIM_HELLO, 0, 11, NULL), -EPROTO, "short HELLO");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, DM_SHIM_EXIT, 0, 9, NULL), -EMSGSIZE, "long EXIT");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, DM_SHIM_ERROR, 0, 3, NULL), -EPROTO, "ERROR without errno");
        is_int(feed_header(DM_SHIM_TO_HOST, 1, DM_SHIM_ERROR, 0, 4 + DM_SHIM_MSG_MAX + 1, NULL), -EMSGSIZE,
               "ERROR text over the cap");
}

static void test_truncated(void)
{
        uint8_t buf[32];
        struct dm_shim_reader rd;
        struct dm_shim_frame f;
        size_t used;

        dm_shim_put_header(buf, DM_SHIM_STDERR, 10);
        memcpy(buf + 8, "12345", 5);
        dm_shim_reader_init(&rd, DM_SHIM_TO_HOST);
        is_int(dm_shim_reader_feed(&rd, buf, 4, &used, &f), 0, "half a header: waits");
        ok(dm_shim_reader_partial(&rd), "partial after half a header");
        is_int(dm_shim_reader_feed(&rd, buf + 4, 9, &used, &f), 0, "header and half the payload: waits");
        is_int(used, 9, "all used");
        ok(dm_shim_reader_partial(&rd), "EOF now would be a truncated frame");
        dm_shim_reader_release(&rd);
}

static void test_exec_decode_hostile(void)
{
        struct exec_spec s;
        struct dm_buf b;
        struct dm_shim_exec_msg *m = NULL;
        char big[DM_SHIM_MAX_STR + 2];
        bool all_refused = true;
        size_t full;

        s = good();
        is_int(decode_spec(&s), 0, "the base request decodes");

        /* Every proper prefix is truncated somewhere: all must fail cleanly. */
        dm_buf_init(&b, 1 << 20);
        s = good();
        build(&b, &s);
        full = b.len;
        for (size_t n = 0; n < full; n++) {
                if (dm_shim_exec_decode((const uint8_t *)b.data, n, &m) != -EBADMSG)
                        all_refused = false;
                free(m);
                m = NULL;
        }
        ok(all_refused, "each of the %zu truncations is -EBADMSG", full);
        dm_buf_append(&b, "x", 1);
        is_int(dm_shim_exec_decode((const uint8_t *)b.data, b.len, &m), -EBADMSG, "a trailing byte");
        dm_buf_release(&b);

        s = good(), s.argc = 0;
        is_int(decode_spec(&s), -EBADMSG, "no argv");
        s = good(), s.argc = DM_SHIM_MAX_ARGS + 1;
        is_int(decode_spec(&s), -E2BIG, "argc over the cap (before reading them)");
        s = good(), s.argc = UINT32_MAX;
        is_int(decode_spec(&s), -E2BIG, "argc 2^32-1");
        s = good(), s.envc = DM_SHIM_MAX_ENV + 1;
        is_int(decode_spec(&s), -E2BIG, "envc over the cap");
        s = good(), s.arg = "", s.arg_len = 0;
        is_int(decode_spec(&s), -EBADMSG, "empty argv[0]");
        s = good(), s.arg = "a\0b", s.arg_len = 3;
        is_int(decode_spec(&s), -EBADMSG, "NUL inside an argument");
        memset(big, 'a', sizeof(big));
        s = good(), s.arg = big, s.arg_len = DM_SHIM_MAX_STR + 1;
        is_int(decode_spec(&s), -E2BIG, "an argument over 128 KiB");
        s = good(), s.arg = big, s.arg_len = DM_SHIM_MAX_STR;
        is_int(decode_spec(&s), 0, "an argument of exactly 128 KiB");
        s = good(), s.env = "NOEQUALS", s.env_len = 8;
        is_int(decode_spec(&s), -EBADMSG, "env entry without '='");
        s = good(), s.env = "=x", s.env_len = 2;
        is_int(decode_spec(&s), -EBADMSG, "env entry with an empty name");
        s = good(), s.cwd = "relative/dir";
        is_int(decode_spec(&s), -EBADMSG, "relative cwd");
        s = good(), s.cwd = "";
        is_int(decode_spec(&s), 0, "empty cwd (the shim's own)");
        s = good(), s.flags = 1u << 9;
        is_int(decode_spec(&s), -EBADMSG, "unknown flag");
        s = good(), s.flags = DM_SHIM_F_STDIN_MORE;
        is_int(decode_spec(&s), -EBADMSG, "STDIN_MORE without STDIN");
        s = good(), s.flags = 0;
        is_int(decode_spec(&s), -EBADMSG, "stdin bytes without F_STDIN");
        s = good(), s.rl_res = 16;
        is_int(decode_spec(&s), -EBADMSG, "rlimit resource 16");
        s = good(), s.rl_soft = 200;
        is_int(decode_spec(&s), -EBADMSG, "rlimit soft above hard");
        s = good(), s.nrl = DM_SHIM_MAX_RLIMITS + 1;
        is_int(decode_spec(&s), -E2BIG, "too many rlimits");
        s = good(), s.in_len = UINT32_MAX;
        is_int(decode_spec(&s), -EBADMSG, "stdin length past the payload");

        /* A string length far past the payload, in the cwd. */
        dm_buf_init(&b, 1024);
        u32(&b, 0);
        u32(&b, 0);
        u32(&b, 0);
        u32(&b, DM_SHIM_MAX_STR);
        is_int(dm_shim_exec_decode((const uint8_t *)b.data, b.len, &m), -EBADMSG, "cwd length beyond the payload");
        dm_buf_release(&b);
}

static void test_exec_encode_caps(void)
{
        const char *argv_empty[] = { "", NULL };
        const char *argv_ok[] = { "true", NULL };
        const char *env_bad[] = { "NOEQ", NULL };
        const char **many = calloc(DM_SHIM_MAX_ARGS + 2, sizeof(*many));
        char *huge = malloc(DM_SHIM_MAX_STR);
        const char **wide = calloc(12, sizeof(*wide));
        struct dm_shim_exec_msg m = { .argv = argv_ok };
        uint8_t *frame = NULL;
        size_t len;

        is_int(dm_shim_exec_encode(&m, &frame, &len), 0, "minimal request");
        free(frame);
        m.argv = argv_empty;
        is_int(dm_shim_exec_encode(&m, &frame, &len), -EINVAL, "empty argv[0]");
        m.argv = argv_ok;
        m.env = env_bad;
        is_int(dm_shim_exec_encode(&m, &frame, &len), -EINVAL, "env entry without '='");
        m.env = NULL;
        m.cwd = "rel";
        is_int(dm_shim_exec_encode(&m, &frame, &len), -EINVAL, "relative cwd");
        m.cwd = NULL;
        for (size_t i = 0; i <= DM_SHIM_MAX_ARGS; i++)
                many[i] = "x";
        m.argv = many;
        is_int(dm_shim_exec_encode(&m, &frame, &len), -E2BIG, "4097 arguments");
        /* Nine arguments of 128 KiB: each fits, together they pass 1 MiB. */
        memset(huge, 'y', DM_SHIM_MAX_STR - 1);
        huge[DM_SHIM_MAX_STR - 1] = '\0';
        for (size_t i = 0; i < 9; i++)
                wide[i] = huge;
        m.argv = wide;
        is_int(dm_shim_exec_encode(&m, &frame, &len), -E2BIG, "more than 1 MiB in all");
        m.argv = argv_ok;
        m.stdin_len = 3;
        m.stdin_data = (const uint8_t *)"abc";
        is_int(dm_shim_exec_encode(&m, &frame, &len), -EINVAL, "stdin bytes without F_STDIN");
        free(many);
        free(huge);
        free(wide);
}

static void test_fixed_frames(void)
{
        uint8_t buf[DM_SHIM_HDR_LEN + 4 + DM_SHIM_MSG_MAX];
        struct dm_shim_frame f;
        struct dm_shim_exit x;
        struct dm_shim_hello hello;
        char msg[DM_SHIM_MSG_MAX + 1];
        uint32_t v;
        char text[600];

        dm_shim_encode_exit(buf, DM_SHIM_SIGNALED, DM_SHIM_X_TIMED_OUT, 9);
        f = (struct dm_shim_frame){ DM_SHIM_EXIT, buf + DM_SHIM_HDR_LEN, 8 };
        ok(dm_shim_decode_exit(&f, &x) == 0 && x.how == DM_SHIM_SIGNALED && x.value == 9 &&
                   x.flags == DM_SHIM_X_TIMED_OUT,
           "exit: signal 9, timed out");
        dm_shim_encode_exit(buf, 3, 0, 0);
        is_int(dm_shim_decode_exit(&f, &x), -EBADMSG, "exit: how 3");
        dm_shim_encode_exit(buf, DM_SHIM_EXITED, 0, 256);
        is_int(dm_shim_decode_exit(&f, &x), -EBADMSG, "exit: status 256");
        dm_shim_encode_exit(buf, DM_SHIM_EXITED, 0, -1);
        is_int(dm_shim_decode_exit(&f, &x), -EBADMSG, "exit: status -1");
        dm_shim_encode_exit(buf, DM_SHIM_SIGNALED, 0, 0);
        is_int(dm_shim_decode_exit(&f, &x), -EBADMSG, "exit: signal 0");
        dm_shim_encode_exit(buf, DM_SHIM_EXITED, 0x80, 0);
        is_int(dm_shim_decode_exit(&f, &x), -EBADMSG, "exit: unknown flag");

        dm_shim_encode_hello(buf, 1, 64);
        f = (struct dm_shim_frame){ DM_SHIM_HELLO, buf + DM_SHIM_HDR_LEN, 12 };
        ok(dm_shim_decode_hello(&f, &hello) == 0 && hello.pid == 1 && hello.max_execs == 64, "hello");

        dm_shim_encode_u32(buf, DM_SHIM_KILL, 0);
        f = (struct dm_shim_frame){ DM_SHIM_KILL, buf + DM_SHIM_HDR_LEN, 4 };
        is_int(dm_shim_decode_u32(&f, &v), -EBADMSG, "kill: signal 0");
        dm_shim_encode_u32(buf, DM_SHIM_KILL, 65);
        is_int(dm_shim_decode_u32(&f, &v), -EBADMSG, "kill: signal 65");
        dm_shim_encode_u32(buf, DM_SHIM_KILL, 15);
        ok(dm_shim_decode_u32(&f, &v) == 0 && v == 15, "kill: SIGTERM");

        f.type = DM_SHIM_ERROR;
        f.data = buf + DM_SHIM_HDR_LEN;
        f.len = (uint32_t)(dm_shim_encode_error(buf, 2, "no such\ndir\x1b[31m") - DM_SHIM_HDR_LEN);
        ok(dm_shim_decode_error(&f, &v, msg) == 0 && v == 2, "error: errno 2");
        is_str(msg, "no such?dir?[31m", "error: control characters neutralised");
        dm_shim_encode_error(buf, 0, "x");
        is_int(dm_shim_decode_error(&f, &v, msg), -EBADMSG, "error: errno 0");
        memset(text, 'm', sizeof(text) - 1);
        text[sizeof(text) - 1] = '\0';
        is_int(dm_shim_encode_error(buf, 5, text), DM_SHIM_HDR_LEN + 4 + DM_SHIM_MSG_MAX, "error: text cut at the cap");
}

static void test_path_under_proc(void)
{
        static const char *const yes[] = { "/proc",           "/proc/",
                                           "/proc/self/fd/3", "//proc",
                                           "/./proc/1",       "/out/../proc/self/cwd",
                                           "/../proc",        "/a/b/../../proc/x",
                                           "/proc/." };
        static const char *const no[] = { "/",        "/out",         "/procs",  "/xproc", "/out/proc",
                                          "/proc/..", "/proc/../out", "/a/proc", "" };

        for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
                ok(dm_shim_path_under_proc(yes[i]), "'%s' is under /proc", yes[i]);
        for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
                ok(!dm_shim_path_under_proc(no[i]), "'%s' is not under /proc", no[i]);
}

int main(void)
{
        test_exec_roundtrip();
        test_chunking();
        test_hostile_headers();
        test_truncated();
        test_exec_decode_hostile();
        test_exec_encode_caps();
        test_fixed_frames();
        test_path_under_proc();
        return done_testing();
}
