/* SPDX-License-Identifier: MIT */
/* The Docker stream multiplexing format (containers and execs without a TTY):
 * each frame is an 8-byte header [stream, 0, 0, 0, len (big endian, 32 bit)]
 * followed by len payload bytes. The demuxer keeps no payload of its own: it
 * passes each piece to the sink as it arrives, so a frame that declares 4 GiB
 * costs no memory and any chunking of the input (down to single bytes) works. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "backends/backend.h"

void dm_demux_init(struct dm_demux *d)
{
        memset(d, 0, sizeof(*d));
        d->stream = 1;
}

int dm_demux_feed(struct dm_demux *d, const char *data, size_t len, const struct dm_stream_sink *sink,
                  struct dm_error *err)
{
        while (len > 0) {
                if (d->remaining == 0) {
                        size_t n = sizeof(d->hdr) - d->hdr_len;

                        if (n > len)
                                n = len;
                        memcpy(d->hdr + d->hdr_len, data, n);
                        d->hdr_len += n;
                        data += n;
                        len -= n;
                        if (d->hdr_len < sizeof(d->hdr))
                                return 0;
                        d->hdr_len = 0;
                        if (d->hdr[0] > 2 || d->hdr[1] || d->hdr[2] || d->hdr[3])
                                return dm_error_set(err, -EPROTO, "malformed stream frame header %02x %02x %02x %02x",
                                                    d->hdr[0], d->hdr[1], d->hdr[2], d->hdr[3]);
                        /* 0 is stdin: engines never send it for output, but
                         * the format allows it; stdout is the natural home. */
                        d->stream = d->hdr[0] == 0 ? 1 : d->hdr[0];
                        d->remaining = (uint32_t)d->hdr[4] << 24 | (uint32_t)d->hdr[5] << 16 |
                                       (uint32_t)d->hdr[6] << 8 | (uint32_t)d->hdr[7];
                        continue; /* a zero-length frame is simply skipped */
                }

                size_t n = len < d->remaining ? len : d->remaining;
                int r = sink->on_data(sink->userdata, d->stream, data, n);

                if (r < 0)
                        return dm_error_set(err, r, "output sink failed: %s", strerror(-r));
                d->remaining -= (uint32_t)n;
                data += n;
                len -= n;
        }
        return 0;
}
