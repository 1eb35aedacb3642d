/* SPDX-License-Identifier: MIT */
/* libFuzzer target for the shim protocol's frame reader and decoders: the
 * code that reads what a sandbox (or a hostile process inside it) sends.
 *
 * Input: byte 0 picks the direction (bit 0: 0 = frames to the shim, 1 = to
 * the host) and the chunk size the stream is fed in (bits 1-7; 0 = all at
 * once); the rest is the byte stream. Every complete frame is decoded as its
 * type says; a decoded EXEC is encoded again and must decode to the same. */
#include "config.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/shim/protocol.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exec_roundtrip(const struct dm_shim_exec_msg *m)
{
        struct dm_shim_exec_msg *again = NULL;
        uint8_t *frame = NULL;
        size_t len;

        if (dm_shim_exec_encode(m, &frame, &len) != 0)
                abort(); /* whatever decodes must encode */
        if (dm_shim_exec_decode(frame + DM_SHIM_HDR_LEN, len - DM_SHIM_HDR_LEN, &again) != 0)
                abort();
        assert(again->argc == m->argc && again->envc == m->envc && again->flags == m->flags &&
               again->timeout_ms == m->timeout_ms && again->stdin_len == m->stdin_len &&
               again->n_rlimits == m->n_rlimits && strcmp(again->cwd, m->cwd) == 0);
        for (size_t i = 0; i < m->argc; i++)
                assert(strcmp(again->argv[i], m->argv[i]) == 0);
        for (size_t i = 0; i < m->envc; i++)
                assert(strcmp(again->env[i], m->env[i]) == 0);
        assert(m->stdin_len == 0 || memcmp(again->stdin_data, m->stdin_data, m->stdin_len) == 0);
        free(again);
        free(frame);
}

static void decode(const struct dm_shim_frame *f)
{
        struct dm_shim_exec_msg *m = NULL;
        struct dm_shim_exit x;
        struct dm_shim_hello h;
        char msg[DM_SHIM_MSG_MAX + 1];
        uint32_t v;

        assert(f->len <= dm_shim_type_max(f->type));
        switch (f->type) {
        case DM_SHIM_EXEC:
                if (dm_shim_exec_decode(f->data, f->len, &m) == 0) {
                        assert(m->argv[m->argc] == NULL && m->env[m->envc] == NULL);
                        exec_roundtrip(m);
                        free(m);
                }
                break;
        case DM_SHIM_KILL:
        case DM_SHIM_STARTED: (void)dm_shim_decode_u32(f, &v); break;
        case DM_SHIM_HELLO: (void)dm_shim_decode_hello(f, &h); break;
        case DM_SHIM_EXIT:
                if (dm_shim_decode_exit(f, &x) == 0)
                        assert(x.how == DM_SHIM_EXITED || x.how == DM_SHIM_SIGNALED);
                break;
        case DM_SHIM_ERROR:
                if (dm_shim_decode_error(f, &v, msg) == 0)
                        assert(strlen(msg) == f->len - 4);
                break;
        default: break;
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct dm_shim_reader rd;
        struct dm_shim_exec_msg *m = NULL;
        size_t chunk, off = 1;

        if (size < 1)
                return 0;
        chunk = data[0] >> 1;
        dm_shim_reader_init(&rd, (data[0] & 1) ? DM_SHIM_TO_HOST : DM_SHIM_TO_SHIM);
        while (off < size) {
                size_t n = chunk && size - off > chunk ? chunk : size - off, used = 0;
                struct dm_shim_frame f;
                int r = dm_shim_reader_feed(&rd, data + off, n, &used, &f);

                assert(used <= n);
                off += used;
                if (r < 0)
                        break;
                if (r == 1)
                        decode(&f);
                else
                        assert(used == n);
        }
        dm_shim_reader_release(&rd);

        /* The payload decoder on its own, so the fuzzer need not find a valid
         * header first. */
        if (dm_shim_exec_decode(data + 1, size - 1, &m) == 0) {
                /* Past the frame cap it could never have come in a frame. */
                if (size - 1 <= DM_SHIM_EXEC_MAX)
                        exec_roundtrip(m);
                free(m);
        }
        return 0;
}
