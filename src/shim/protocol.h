/* SPDX-License-Identifier: MIT */
#ifndef DM_SHIM_PROTOCOL_H
#define DM_SHIM_PROTOCOL_H

/* The wire protocol between the server (host) and demesne-shim (PID 1 inside
 * a container), used by both sides; docs/reference/shim-protocol.md explains
 * it. This header and protocol.c depend on libc only: the shim is a static
 * binary that includes nothing of the server.
 *
 * Shape: the host listens on a unix socket it owns; the shim connects to it,
 * one connection per command (plus a couple of idle spares), so the kernel's
 * socket buffers give each command its own flow control and closing a
 * connection is an unambiguous cancel. Every frame is
 *
 *     u8 version | u8 type | u16 reserved (0) | u32 payload length | payload
 *
 * with integers big-endian. The first frame on every connection is HELLO
 * (shim -> host). The host sends one EXEC, then STDIN... STDIN_EOF when the
 * command reads stdin, and KILL at any time; the shim answers STARTED (or
 * ERROR), STDOUT/STDERR as output arrives, and EXIT last, then closes.
 * Everything read from the other side is hostile until checked: lengths are
 * checked against the type's cap before anything is allocated. */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DM_SHIM_PROTO_VERSION 1
#define DM_SHIM_HDR_LEN 8

/* Where the container sees things. The socket's directory (not the socket
 * file) is bind-mounted read-only, so a later server can bind a fresh socket
 * in the same host directory and the running shim reconnects to it. */
#define DM_SHIM_SOCK_DIR "/run/demesne"
#define DM_SHIM_SOCK_NAME "shim.sock"
#define DM_SHIM_SOCK_PATH DM_SHIM_SOCK_DIR "/" DM_SHIM_SOCK_NAME
#define DM_SHIM_BIN_PATH "/run/demesne-shim"

/* Hard caps. Sizes are payload bytes. */
#define DM_SHIM_EXEC_MAX (1024 * 1024) /* one EXEC frame: argv + env + cwd + inline stdin */
#define DM_SHIM_DATA_MAX (64 * 1024)   /* one STDIN/STDOUT/STDERR frame */
#define DM_SHIM_MSG_MAX 512            /* the text of an ERROR frame */
#define DM_SHIM_MAX_ARGS 4096          /* argv entries */
#define DM_SHIM_MAX_ENV 4096           /* env entries */
#define DM_SHIM_MAX_STR (128 * 1024)   /* one argv/env/cwd string: the kernel's MAX_ARG_STRLEN */
#define DM_SHIM_MAX_RLIMITS 16
#define DM_SHIM_MAX_EXECS 64  /* commands running at once in one container */
#define DM_SHIM_SPARE_CONNS 2 /* idle connections the shim keeps open */

enum dm_shim_type {
        /* host -> shim */
        DM_SHIM_EXEC = 1,      /* struct dm_shim_exec_msg, see dm_shim_exec_encode */
        DM_SHIM_STDIN = 2,     /* bytes for the command's stdin */
        DM_SHIM_STDIN_EOF = 3, /* empty: close the command's stdin */
        DM_SHIM_KILL = 4,      /* u32 signal: sent to the command's process group */
        /* shim -> host */
        DM_SHIM_HELLO = 16,   /* u32 pid, u32 max execs, u32 reserved */
        DM_SHIM_STARTED = 17, /* u32 pid of the command (container's PID namespace) */
        DM_SHIM_STDOUT = 18,  /* bytes */
        DM_SHIM_STDERR = 19,  /* bytes */
        DM_SHIM_EXIT = 20,    /* u8 how, u8 flags, u16 0, i32 value */
        DM_SHIM_ERROR = 21,   /* u32 errno, then up to DM_SHIM_MSG_MAX bytes of text */
};

/* Which side reads: frames of the other direction are protocol errors. */
enum dm_shim_dir {
        DM_SHIM_TO_SHIM,
        DM_SHIM_TO_HOST,
};

/* EXEC flags. */
#define DM_SHIM_F_STDIN \
        (1u << 0)                      /* the command gets a pipe: the inline bytes, then
                                           STDIN frames if F_STDIN_MORE, else EOF after them;
                                           without it, /dev/null */
#define DM_SHIM_F_STDIN_MORE (1u << 1) /* STDIN frames and a STDIN_EOF follow */
#define DM_SHIM_F_CLEARENV (1u << 2)   /* do not start from the container's environment */
#define DM_SHIM_F_KEEP_GROUP \
        (1u << 3) /* leave the process group running when the command
                                           exits (default: it is killed with the command) */
#define DM_SHIM_F_ALL 0xfu

/* EXIT how / flags. */
#define DM_SHIM_EXITED 1              /* value: exit status 0..255 */
#define DM_SHIM_SIGNALED 2            /* value: signal number */
#define DM_SHIM_X_TIMED_OUT (1u << 0) /* the shim killed it at timeout_ms */
#define DM_SHIM_X_KILLED (1u << 1)    /* a KILL frame or the host's close ended it */

struct dm_shim_rlimit {
        uint16_t resource;   /* RLIMIT_* number, < 16 */
        uint64_t soft, hard; /* UINT64_MAX = unlimited */
};

struct dm_shim_exec_msg {
        uint32_t flags;
        uint32_t timeout_ms;     /* 0 = none */
        const char *cwd;         /* "" = the shim's own (the container's WorkingDir) */
        const char *const *argv; /* NULL-terminated, argc >= 1, argv[0] non-empty;
                                           looked up in PATH unless it holds a '/' */
        size_t argc;
        const char *const *env; /* "KEY=VALUE", NULL-terminated; override the base */
        size_t envc;
        const uint8_t *stdin_data; /* inline stdin (F_STDIN) */
        size_t stdin_len;
        struct dm_shim_rlimit rlimits[DM_SHIM_MAX_RLIMITS];
        size_t n_rlimits;
};

struct dm_shim_frame {
        uint8_t type;
        const uint8_t *data; /* the payload, inside the reader; valid until the next feed */
        uint32_t len;
};

/* An incremental frame reader for non-blocking sockets: any chunking. */
struct dm_shim_reader {
        enum dm_shim_dir dir;
        uint8_t hdr[DM_SHIM_HDR_LEN];
        size_t hdr_len;
        uint8_t type;
        uint32_t len; /* payload length of the frame being read */
        uint32_t got;
        uint8_t *buf; /* owned; grows to the largest frame seen */
        size_t alloc;
};

void dm_shim_reader_init(struct dm_shim_reader *r, enum dm_shim_dir dir);
/* Consumes bytes until one frame is complete: returns 1 with *ret filled
 * (after *ret_used bytes), 0 when all len bytes were used and no frame is
 * complete yet, or a negative errno: -EPROTO (version other than ours, or
 * reserved bits set; payload size wrong for a fixed-size type), -EBADMSG
 * (unknown type, or one the other side must not send), -EMSGSIZE (length
 * over the type's cap), -ENOMEM. After an error the reader is unusable:
 * drop the connection. */
int dm_shim_reader_feed(struct dm_shim_reader *r, const uint8_t *data, size_t len, size_t *ret_used,
                        struct dm_shim_frame *ret);
/* True when part of a frame has been read: EOF now means a truncated frame. */
bool dm_shim_reader_partial(const struct dm_shim_reader *r);
void dm_shim_reader_release(struct dm_shim_reader *r);

/* The largest payload a frame of this type may carry (0 for unknown types). */
uint32_t dm_shim_type_max(uint8_t type);
/* Writes the 8-byte header. */
void dm_shim_put_header(uint8_t out[DM_SHIM_HDR_LEN], uint8_t type, uint32_t len);

/* Encodes a whole EXEC frame (header included) into a malloc'd buffer.
 * -EINVAL for a message that breaks a rule the decoder checks, -E2BIG past
 * a cap, -ENOMEM. */
int dm_shim_exec_encode(const struct dm_shim_exec_msg *m, uint8_t **ret, size_t *ret_len);
/* Decodes and checks an EXEC payload into one malloc'd block (free() it):
 * strings NUL-terminated, argv and env NULL-terminated. -EBADMSG for
 * anything malformed: truncation, trailing bytes, NUL inside a string, an
 * env entry without '=' or with an empty name, a relative cwd, unknown
 * flags, a bad rlimit (resource >= 16 or soft > hard), inline stdin without
 * F_STDIN; -E2BIG past a count or string cap; -ENOMEM. */
int dm_shim_exec_decode(const uint8_t *p, size_t len, struct dm_shim_exec_msg **ret);

/* Fixed frames: each writes header + payload into out and returns its size. */
size_t dm_shim_encode_u32(uint8_t *out, uint8_t type, uint32_t v); /* KILL, STARTED */
size_t dm_shim_encode_hello(uint8_t out[DM_SHIM_HDR_LEN + 12], uint32_t pid, uint32_t max_execs);
size_t dm_shim_encode_exit(uint8_t out[DM_SHIM_HDR_LEN + 8], uint8_t how, uint8_t flags, int32_t value);
/* ERROR: errno and text (cut to DM_SHIM_MSG_MAX). */
size_t dm_shim_encode_error(uint8_t out[DM_SHIM_HDR_LEN + 4 + DM_SHIM_MSG_MAX], uint32_t errnum, const char *msg);

struct dm_shim_exit {
        uint8_t how, flags;
        int32_t value;
};
struct dm_shim_hello {
        uint32_t pid, max_execs;
};
/* Decoders for payloads the reader delivered: -EBADMSG when a value is out
 * of range (exit how not 1/2, status > 255, signal 0 or > 64, errno 0). */
int dm_shim_decode_u32(const struct dm_shim_frame *f, uint32_t *ret);
int dm_shim_decode_hello(const struct dm_shim_frame *f, struct dm_shim_hello *ret);
int dm_shim_decode_exit(const struct dm_shim_frame *f, struct dm_shim_exit *ret);
/* msg gets the text with anything but printable ASCII replaced by '?'. */
int dm_shim_decode_error(const struct dm_shim_frame *f, uint32_t *ret_errno, char msg[DM_SHIM_MSG_MAX + 1]);

/* Whether an absolute path lies under /proc once ".", ".." and repeated
 * slashes are resolved as text ("/proc/self/fd/3", "//proc", "/x/../proc").
 * Symlinks are not followed: the shim also checks where it lands. */
bool dm_shim_path_under_proc(const char *path);

#endif
