/* SPDX-License-Identifier: MIT */
/* libFuzzer target for what the backends read from the engine: the docker
 * backend's JSON answers (container inspect, exec inspect, /version,
 * container list), the _ping headers that name the engine, error bodies,
 * the multiplexed stream of a container's or exec's output
 * (backends/demux.c), and the OpenSandbox backend's reader of execd's
 * event stream (execd runs inside the sandbox: its events are untrusted).
 *
 * Input: byte 0 picks the reader (its value mod 8), byte 1 a parameter
 * (HTTP status for error bodies, chunk size for the streams); the rest is
 * what the engine sent. */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backends/curl.h"
#include "backends/docker-internal.h"
#include "backends/opensandbox-internal.h"
#include "tests/fuzz/fuzz.h"

enum {
        R_INSPECT,
        R_EXEC_INSPECT,
        R_VERSION,
        R_LIST,
        R_PING_HEADERS,
        R_ERROR_BODY,
        R_STREAM,
        R_EXECD_EVENTS,
        N_READERS
};

static void inspect(const char *body, size_t len)
{
        struct dm_error err = { 0 };
        struct dm_container_info info;
        json_object *o = NULL;

        if (dm_docker_parse_json(body, len, &o, &err) < 0) {
                FUZZ_CHECK(err.code == -EPROTO && err.msg[0]);
                return;
        }
        if (dm_docker_fill_info(o, &info, &err) == 0) {
                size_t n = 0;

                FUZZ_CHECK(info.id && info.image && info.status && info.labels);
                FUZZ_CHECK(info.running || info.pid == 0);
                for (; info.labels[n]; n++)
                        FUZZ_CHECK(strchr(info.labels[n], '='));
                dm_container_info_release(&info);
        }
        json_object_put(o);
}

static void exec_inspect(const char *body, size_t len)
{
        json_object *o = NULL;
        int code = 12345;

        if (dm_docker_parse_json(body, len, &o, NULL) < 0)
                return;
        if (!dm_docker_exec_exited(o, &code))
                FUZZ_CHECK(code == 12345);
        json_object_put(o);
}

static void version(const char *body, size_t len)
{
        json_object *o = NULL;
        char *desc = NULL;

        if (dm_docker_parse_json(body, len, &o, NULL) < 0)
                return;
        FUZZ_CHECK(dm_docker_describe_version(o, "unix:///fuzz.sock", &desc) == 0);
        FUZZ_CHECK(strstr(desc, " at unix:///fuzz.sock"));
        free(desc);
        json_object_put(o);
}

static void list(const char *body, size_t len)
{
        struct dm_error err = { 0 };
        json_object *o = NULL;
        char **ids = NULL;
        size_t n = 0;

        if (dm_docker_parse_json(body, len, &o, NULL) < 0)
                return;
        if (dm_docker_list_ids(o, &ids, &n, &err) == 0) {
                FUZZ_CHECK(ids[n] == NULL);
                for (size_t i = 0; i < n; i++) {
                        FUZZ_CHECK(ids[i]);
                        free(ids[i]);
                }
                free(ids);
        } else {
                FUZZ_CHECK(err.code == -EPROTO);
        }
        json_object_put(o);
}

/* "Server\nApi-Version": the two header values, each cut to the size the
 * HTTP client keeps (struct dm_curl_header). */
static void ping_headers(const char *body)
{
        struct dm_curl_header h[2] = { { .name = "Server" }, { .name = "Api-Version" } };
        const char *nl = strchr(body, '\n');
        size_t n = nl ? (size_t)(nl - body) : strlen(body);
        char *desc = NULL;

        snprintf(h[0].value, sizeof(h[0].value), "%.*s", (int)n, body);
        snprintf(h[1].value, sizeof(h[1].value), "%s", nl ? nl + 1 : "");
        if (dm_docker_describe_from_server(h[0].value, h[1].value, "unix:///fuzz.sock", &desc)) {
                FUZZ_CHECK(desc && strstr(desc, " at unix:///fuzz.sock"));
                free(desc);
        }
}

static void error_body(long status, const char *body, size_t len)
{
        struct dm_error err = { 0 };
        int r = dm_curl_status_error(&err, status, body, len);

        FUZZ_CHECK(r < 0 && r == err.code);
        FUZZ_CHECK(strncmp(err.msg, "engine answered ", 16) == 0);
}

/* --- the stream: any chunking gives the same bytes on the same streams --- */

struct collected {
        char *data;
        size_t len;
        int streams; /* bit 1: stdout seen, bit 2: stderr */
        unsigned char *tags;
};

static int collect(void *userdata, int stream, const char *data, size_t len)
{
        struct collected *c = userdata;

        FUZZ_CHECK(stream == 1 || stream == 2);
        FUZZ_CHECK(len > 0);
        c->data = realloc(c->data, c->len + len);
        c->tags = realloc(c->tags, c->len + len);
        FUZZ_CHECK(c->data && c->tags);
        memcpy(c->data + c->len, data, len);
        memset(c->tags + c->len, stream, len);
        c->len += len;
        return 0;
}

static int demux(const char *data, size_t len, size_t chunk, struct collected *c)
{
        struct dm_stream_sink sink = { .on_data = collect, .userdata = c };
        struct dm_error err = { 0 };
        struct dm_demux d;
        int r = 0;

        dm_demux_init(&d);
        for (size_t off = 0; off < len && r == 0; off += chunk) {
                size_t n = len - off < chunk ? len - off : chunk;
                r = dm_demux_feed(&d, data + off, n, &sink, &err);
        }
        FUZZ_CHECK(r == 0 || (r == -EPROTO && err.msg[0]));
        return r;
}

static void stream(const char *data, size_t len, size_t chunk)
{
        struct collected whole = { 0 }, pieces = { 0 };
        int r1 = demux(data, len, len ? len : 1, &whole), r2 = demux(data, len, chunk, &pieces);

        /* The first bad header stops both at the same place. */
        FUZZ_CHECK(r1 == r2);
        FUZZ_CHECK(whole.len == pieces.len && whole.len <= len);
        FUZZ_CHECK(whole.len == 0 || (memcmp(whole.data, pieces.data, whole.len) == 0 &&
                                      memcmp(whole.tags, pieces.tags, whole.len) == 0));
        free(whole.data);
        free(whole.tags);
        free(pieces.data);
        free(pieces.tags);
}

/* --- execd's events: what reaches the reader is well-framed output ------ */

static void execd_events(const char *data, size_t len, size_t chunk)
{
        struct osb_exec x = { .status = 200 };
        struct collected got = { 0 };
        char *copy = fuzz_strndup((const uint8_t *)data, len), buf[4096];
        int sv[2];
        ssize_t n;

        FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        x.fd = sv[0];
        pthread_mutex_init(&x.lock, NULL);
        pthread_cond_init(&x.cond, NULL);
        dm_buf_init(&x.event, EVENT_MAX);
        dm_buf_init(&x.errbody, 4096);
        for (size_t off = 0; off < len; off += chunk) {
                size_t k = len - off < chunk ? len - off : chunk;
                if (dm_osb_exec_on_body(copy + off, 1, k, &x) != k) {
                        /* The reader stops at the command's final event
                         * (execd closes a second later), or on an error
                         * that says what. */
                        FUZZ_CHECK(x.final || atomic_load(&x.abandoned) || (x.err_code < 0 && x.err_msg[0]));
                        break;
                }
        }
        close(sv[0]);
        /* Decoded JSON strings are never longer than their text. */
        struct dm_demux d;
        struct dm_stream_sink sink = { .on_data = collect, .userdata = &got };
        dm_demux_init(&d);
        while ((n = read(sv[1], buf, sizeof(buf))) > 0)
                FUZZ_CHECK(dm_demux_feed(&d, buf, (size_t)n, &sink, NULL) == 0);
        FUZZ_CHECK(got.len <= len && d.remaining == 0 && d.hdr_len == 0);
        FUZZ_CHECK(memchr(x.id, '\0', sizeof(x.id)) && memchr(x.err_msg, '\0', sizeof(x.err_msg)));
        FUZZ_CHECK(!x.final || (x.exit_code >= -1 && x.exit_code <= 255));
        close(sv[1]);
        dm_buf_release(&x.event);
        dm_buf_release(&x.errbody);
        pthread_mutex_destroy(&x.lock);
        pthread_cond_destroy(&x.cond);
        free(got.data);
        free(got.tags);
        free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *body;
        size_t len;

        if (size < 2)
                return 0;
        len = size - 2;
        body = fuzz_strndup(data + 2, len);
        switch (data[0] % N_READERS) {
        case R_INSPECT: inspect(body, len); break;
        case R_EXEC_INSPECT: exec_inspect(body, len); break;
        case R_VERSION: version(body, len); break;
        case R_LIST: list(body, len); break;
        case R_PING_HEADERS: ping_headers(body); break;
        case R_ERROR_BODY: error_body(100 + data[1] * 2, body, len); break;
        case R_STREAM: stream(body, len, 1 + data[1] % 64); break;
        default: execd_events(body, len, 1 + data[1] % 64); break;
        }
        free(body);
        return 0;
}
