/* SPDX-License-Identifier: MIT */
/* Writes the seed corpus of fuzz-shim-frame (tests/fuzz/corpus/shim-frame).
 * Not part of the build; run it when the protocol changes:
 *   cc -I. -include config.h tests/fuzz/make-seeds.c src/shim/protocol.c -o /tmp/make-seeds
 *   /tmp/make-seeds tests/fuzz/corpus/shim-frame */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "src/shim/protocol.h"

static uint8_t out[1 << 16];
static size_t n;

static void put(const void *p, size_t len)
{
        memcpy(out + n, p, len);
        n += len;
}

static void data_frame(uint8_t type, const char *s)
{
        uint8_t h[DM_SHIM_HDR_LEN];

        dm_shim_put_header(h, type, (uint32_t)strlen(s));
        put(h, sizeof(h));
        put(s, strlen(s));
}

static void exec_frame(const struct dm_shim_exec_msg *m, size_t skip)
{
        uint8_t *f;
        size_t len;

        if (dm_shim_exec_encode(m, &f, &len) != 0)
                exit(1);
        put(f + skip, len - skip);
        free(f);
}

static void save(const char *dir, const char *name)
{
        char path[4096];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", dir, name);
        f = fopen(path, "wb");
        if (!f || fwrite(out, 1, n, f) != n || fclose(f) != 0)
                exit(1);
        n = 0;
}

int main(int argc, char **argv)
{
        const char *echo[] = { "echo", "hi", NULL };
        const char *sh[] = { "/bin/sh", "-c", "cat; exit 3", NULL };
        const char *env[] = { "A=1", "PATH=/usr/bin:/bin", NULL };
        struct dm_shim_exec_msg simple = { .argv = echo };
        struct dm_shim_exec_msg full = {
                .flags = DM_SHIM_F_STDIN | DM_SHIM_F_STDIN_MORE | DM_SHIM_F_KEEP_GROUP,
                .timeout_ms = 3000,
                .cwd = "/tmp",
                .argv = sh,
                .env = env,
                .rlimits = { { 7, 1024, 1024 } },
                .n_rlimits = 1,
        };
        struct dm_shim_exec_msg inline_in = { .flags = DM_SHIM_F_STDIN | DM_SHIM_F_CLEARENV,
                                              .argv = sh,
                                              .stdin_data = (const uint8_t *)"abc\n",
                                              .stdin_len = 4 };
        uint8_t f[DM_SHIM_HDR_LEN + 4 + DM_SHIM_MSG_MAX], mode;
        size_t len;
        const char *dir = argc > 1 ? argv[1] : ".";

        mode = 0x00;
        put(&mode, 1);
        exec_frame(&simple, 0);
        save(dir, "exec-simple");

        mode = 0x06; /* to the shim, in chunks of 3 */
        put(&mode, 1);
        exec_frame(&full, 0);
        data_frame(DM_SHIM_STDIN, "line one\n");
        dm_shim_put_header(f, DM_SHIM_STDIN_EOF, 0);
        put(f, DM_SHIM_HDR_LEN);
        put(f, dm_shim_encode_u32(f, DM_SHIM_KILL, 15));
        save(dir, "exec-stream-chunked");

        mode = 0x00;
        put(&mode, 1);
        exec_frame(&inline_in, DM_SHIM_HDR_LEN); /* the payload alone, for the direct decoder */
        save(dir, "exec-payload");

        mode = 0x01;
        put(&mode, 1);
        put(f, dm_shim_encode_hello(f, 1, DM_SHIM_MAX_EXECS));
        put(f, dm_shim_encode_u32(f, DM_SHIM_STARTED, 42));
        data_frame(DM_SHIM_STDOUT, "out\n");
        data_frame(DM_SHIM_STDERR, "err\n");
        put(f, dm_shim_encode_exit(f, DM_SHIM_EXITED, 0, 3));
        save(dir, "host-stream");

        mode = 0x0b; /* to the host, in chunks of 5 */
        put(&mode, 1);
        put(f, dm_shim_encode_u32(f, DM_SHIM_STARTED, 7));
        data_frame(DM_SHIM_STDOUT, "partial");
        put(f, dm_shim_encode_exit(f, DM_SHIM_SIGNALED, DM_SHIM_X_TIMED_OUT | DM_SHIM_X_KILLED, 9));
        save(dir, "host-signaled-chunked");

        mode = 0x01;
        put(&mode, 1);
        put(f, dm_shim_encode_hello(f, 1, DM_SHIM_MAX_EXECS));
        put(f, dm_shim_encode_error(f, 2, "cannot change to directory '/nope': No such file or directory"));
        save(dir, "host-error");

        mode = 0x01;
        put(&mode, 1);
        put(f, dm_shim_encode_hello(f, 1, DM_SHIM_MAX_EXECS));
        len = dm_shim_encode_hello(f, 1, 1);
        f[0] = 2; /* another version */
        put(f, len);
        save(dir, "host-bad-version");

        mode = 0x01;
        put(&mode, 1);
        dm_shim_put_header(f, DM_SHIM_STDOUT, 0xffffffffu);
        put(f, DM_SHIM_HDR_LEN);
        put("xxxx", 4);
        save(dir, "host-huge-length");
        return 0;
}
