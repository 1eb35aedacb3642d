/* SPDX-License-Identifier: MIT */
/* libFuzzer target for backends/http1.c, the client that reads every answer
 * of a local engine: the input is all the engine sends back (status line,
 * headers, a body by Content-Length, chunked or up to the close), read
 * however the socket hands it over. Properties: a success has a final
 * status (200-999) and at most as many body bytes as were sent; a failure
 * is one of the errors the caller maps (never a hang: the engine's end is
 * closed after the input, and nothing waits without a deadline); a
 * connection is kept only when the answer was read to its end. */
#include "config.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/curl.h"
#include "backends/http1.h"
#include "src/basic/buf.h"
#include "src/basic/timeutil.h"
#include "tests/fuzz/fuzz.h"

static int to_buf(void *userdata, long status, const char *data, size_t len)
{
        return dm_buf_append(userdata, data, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *lines[] = { "Content-Type: application/json", "Expect:", NULL };
        struct dm_curl_header want[1] = { { .name = "Server" } };
        struct dm_http1_request req = {
                .method = size && (data[0] & 1) ? "HEAD" : "GET",
                .target = "/v1.41/_ping",
                .host = "localhost",
                .lines = lines,
                .in_fd = -1,
                .want = want,
                .n_want = 1,
        };
        struct dm_buf body;
        bool reusable = true, started = false;
        long status = 0;
        int sv[2], r;

        if (size > 60000 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                return 0;
        /* The whole answer is in the socket before the request is sent,
         * then the engine's side is closed: reads end at the input's end. */
        FUZZ_CHECK(write(sv[1], data, size) == (ssize_t)size);
        shutdown(sv[1], SHUT_WR);
        req.deadline_ms = dm_now_ms() + 10000;
        dm_buf_init(&body, 4096);
        r = dm_http1_exchange(sv[0], &req, to_buf, &body, &status, &reusable, &started);
        if (r == 0) {
                FUZZ_CHECK(status >= 200 && status <= 999);
                FUZZ_CHECK(body.len <= size);
                FUZZ_CHECK(strlen(want[0].value) < sizeof(want[0].value));
                if (strcmp(req.method, "HEAD") == 0)
                        FUZZ_CHECK(body.len == 0);
        } else {
                FUZZ_CHECK(r == -EPROTO || r == -ECONNRESET || r == -E2BIG || r == -ENOMEM);
                FUZZ_CHECK(!reusable);
        }
        FUZZ_CHECK(!started || size > 0);
        dm_buf_release(&body);
        close(sv[0]);
        close(sv[1]);
        return 0;
}
