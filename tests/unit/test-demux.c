/* SPDX-License-Identifier: MIT */
/* The Docker stream demultiplexer: chunking, frame edge cases, errors. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "backends/backend.h"
#include "src/basic/buf.h"
#include "tests/tap.h"

struct collect {
        struct dm_buf out[3]; /* index 1 stdout, 2 stderr */
        int calls;
        int fail_at; /* 1-based call that fails, 0 = never */
        int fail_code;
};

static int on_data(void *userdata, int stream, const char *data, size_t len)
{
        struct collect *c = userdata;

        c->calls++;
        if (c->fail_at && c->calls == c->fail_at)
                return c->fail_code;
        if (stream != 1 && stream != 2)
                return -EBADMSG;
        return dm_buf_append(&c->out[stream], data, len);
}

static void collect_init(struct collect *c)
{
        memset(c, 0, sizeof(*c));
        for (int i = 0; i < 3; i++)
                dm_buf_init(&c->out[i], 1 << 20);
}

static void collect_release(struct collect *c)
{
        for (int i = 0; i < 3; i++)
                dm_buf_release(&c->out[i]);
}

static void frame(struct dm_buf *b, int stream, const char *payload, size_t len)
{
        unsigned char h[8] = { (unsigned char)stream,
                               0,
                               0,
                               0,
                               (unsigned char)(len >> 24),
                               (unsigned char)(len >> 16),
                               (unsigned char)(len >> 8),
                               (unsigned char)len };

        dm_buf_append(b, h, sizeof(h));
        dm_buf_append(b, payload, len);
}

/* A stream with every kind of frame: both outputs, stdin's 0, empty frames,
 * a payload longer than any read chunk below. */
static void build_sample(struct dm_buf *b, char *big, size_t big_len)
{
        for (size_t i = 0; i < big_len; i++)
                big[i] = (char)('a' + i % 26);
        frame(b, 1, "hello ", 6);
        frame(b, 2, "oops\n", 5);
        frame(b, 1, "", 0);
        frame(b, 0, "zero ", 5);
        frame(b, 2, "", 0);
        frame(b, 1, big, big_len);
        frame(b, 2, "bye\n", 4);
}

static void check_sample(struct collect *c, const char *big, size_t big_len, const char *how)
{
        size_t want_out = 6 + 5 + big_len;

        is_int(c->out[1].len, want_out, "%s: stdout length", how);
        ok(c->out[1].len == want_out && memcmp(c->out[1].data, "hello zero ", 11) == 0 &&
                   memcmp(c->out[1].data + 11, big, big_len) == 0,
           "%s: stdout bytes in order, stream 0 counted as stdout", how);
        is_str(c->out[2].data, "oops\nbye\n", "%s: stderr kept apart", how);
}

/* Deterministic chunk sizes 1..97 so failures reproduce. */
static size_t next_chunk(uint32_t *seed)
{
        *seed = *seed * 1103515245u + 12345u;
        return 1 + (*seed >> 16) % 97;
}

static void test_chunkings(void)
{
        char big[3000];
        struct dm_buf in;
        struct dm_error err = { 0 };
        struct collect c;
        struct dm_stream_sink sink = { on_data, &c };
        struct dm_demux d;
        int r = 0;

        dm_buf_init(&in, 1 << 20);
        build_sample(&in, big, sizeof(big));

        collect_init(&c);
        dm_demux_init(&d);
        is_int(dm_demux_feed(&d, in.data, in.len, &sink, &err), 0, "whole buffer at once");
        check_sample(&c, big, sizeof(big), "whole");
        is_int(d.remaining + d.hdr_len, 0, "whole: ends on a frame boundary");
        collect_release(&c);

        collect_init(&c);
        dm_demux_init(&d);
        for (size_t i = 0; i < in.len && r == 0; i++)
                r = dm_demux_feed(&d, in.data + i, 1, &sink, &err);
        is_int(r, 0, "byte at a time");
        check_sample(&c, big, sizeof(big), "bytewise");
        collect_release(&c);

        for (uint32_t seed = 1; seed <= 5; seed++) {
                uint32_t s = seed;

                collect_init(&c);
                dm_demux_init(&d);
                r = 0;
                for (size_t off = 0; off < in.len && r == 0;) {
                        size_t n = next_chunk(&s);

                        if (n > in.len - off)
                                n = in.len - off;
                        r = dm_demux_feed(&d, in.data + off, n, &sink, &err);
                        off += n;
                }
                is_int(r, 0, "random chunks (seed %u)", seed);
                check_sample(&c, big, sizeof(big), "random");
                collect_release(&c);
        }

        collect_init(&c);
        dm_demux_init(&d);
        is_int(dm_demux_feed(&d, "", 0, &sink, &err), 0, "empty feed is fine");
        is_int(c.calls, 0, "empty feed calls nothing");
        collect_release(&c);
        dm_buf_release(&in);
}

static void test_zero_length(void)
{
        struct dm_buf in;
        struct dm_error err = { 0 };
        struct collect c;
        struct dm_stream_sink sink = { on_data, &c };
        struct dm_demux d;

        dm_buf_init(&in, 1024);
        for (int i = 0; i < 10; i++)
                frame(&in, 1 + i % 2, "", 0);
        collect_init(&c);
        dm_demux_init(&d);
        is_int(dm_demux_feed(&d, in.data, in.len, &sink, &err), 0, "ten zero-length frames");
        is_int(c.calls, 0, "zero-length frames reach no sink");
        is_int(d.hdr_len + d.remaining, 0, "and leave no state behind");
        collect_release(&c);
        dm_buf_release(&in);
}

static void test_bad_headers(void)
{
        static const unsigned char bad[][8] = {
                { 3, 0, 0, 0, 0, 0, 0, 1 }, /* unknown stream */
                { 1, 1, 0, 0, 0, 0, 0, 1 }, /* padding */
                { 2, 0, 0, 9, 0, 0, 0, 1 },
                { 'H', 'T', 'T', 'P', '/', '1', '.', '1' }, /* an HTTP answer where frames belong */
        };
        struct dm_error err;
        struct collect c;
        struct dm_stream_sink sink = { on_data, &c };
        struct dm_demux d;
        struct dm_buf in;

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                dm_error_clear(&err);
                collect_init(&c);
                dm_demux_init(&d);
                is_int(dm_demux_feed(&d, (const char *)bad[i], 8, &sink, &err), -EPROTO, "bad header %zu: -EPROTO", i);
                ok(err.code == -EPROTO && strstr(err.msg, "malformed"), "bad header %zu: says why ('%s')", i, err.msg);
                collect_release(&c);
        }

        /* A good frame, then garbage split across feeds: the good payload
         * arrives, the error comes on the feed that completes the header. */
        dm_buf_init(&in, 1024);
        frame(&in, 1, "fine", 4);
        dm_buf_append(&in, "\x07\0\0\0\0\0\0\x01", 8);
        collect_init(&c);
        dm_demux_init(&d);
        dm_error_clear(&err);
        is_int(dm_demux_feed(&d, in.data, 14, &sink, &err), 0, "good frame + half a bad header: no error yet");
        is_int(dm_demux_feed(&d, in.data + 14, in.len - 14, &sink, &err), -EPROTO, "rest of the bad header: -EPROTO");
        is_str(c.out[1].data, "fine", "payload before the bad header was delivered");
        collect_release(&c);
        dm_buf_release(&in);
}

static void test_sink_error(void)
{
        struct dm_buf in;
        struct dm_error err = { 0 };
        struct collect c;
        struct dm_stream_sink sink = { on_data, &c };
        struct dm_demux d;

        dm_buf_init(&in, 1024);
        frame(&in, 1, "one", 3);
        frame(&in, 2, "two", 3);
        frame(&in, 1, "three", 5);
        collect_init(&c);
        c.fail_at = 2;
        c.fail_code = -ENOSPC;
        dm_demux_init(&d);
        is_int(dm_demux_feed(&d, in.data, in.len, &sink, &err), -ENOSPC, "sink's error comes back unchanged");
        is_int(err.code, -ENOSPC, "and is in err");
        is_int(c.calls, 2, "no call after the failing one");
        is_str(c.out[1].data, "one", "data before the failure was delivered");
        collect_release(&c);
        dm_buf_release(&in);
}

static void test_huge_length(void)
{
        static const unsigned char hdr[8] = { 2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff };
        char chunk[4096];
        struct dm_error err = { 0 };
        struct collect c;
        struct dm_stream_sink sink = { on_data, &c };
        struct dm_demux d;
        int r = 0;

        memset(chunk, 'x', sizeof(chunk));
        collect_init(&c);
        dm_demux_init(&d);
        is_int(dm_demux_feed(&d, (const char *)hdr, 8, &sink, &err), 0, "4 GiB frame declared: accepted");
        for (int i = 0; i < 64 && r == 0; i++)
                r = dm_demux_feed(&d, chunk, sizeof(chunk), &sink, &err);
        is_int(r, 0, "256 KiB of it streamed through");
        is_int(c.out[2].len, 64 * sizeof(chunk), "all of it reached the sink as stderr");
        is_int(d.remaining, 0xffffffffu - 64 * sizeof(chunk), "the rest is still expected (no buffering)");
        collect_release(&c);
}

int main(void)
{
        test_chunkings();
        test_zero_length();
        test_bad_headers();
        test_sink_error();
        test_huge_length();
        return done_testing();
}
