/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_HTTP_TOKEN_H
#define DM_MCP_HTTP_TOKEN_H

/* The HTTP transport's bearer token: every `serve --http` has one, loopback
 * too (anything that reaches 127.0.0.1 would otherwise control the server).
 * The operator gives it (--token-file, DEMESNE_HTTP_TOKEN_FILE,
 * DEMESNE_HTTP_TOKEN) or the server makes one and writes it, mode 0600, to
 * a file in its state directory for local clients to read. */

#include <stdbool.h>
#include <sys/stat.h>

#include "src/util/error.h"

#define DM_HTTP_TOKEN_MIN 16

/* Whether a token is acceptable: at least DM_HTTP_TOKEN_MIN printable
 * characters, no blanks. what names its source in the message. */
int dm_http_token_check(const char *token, const char *what, struct dm_error *err);

/* 64 hex digits from getrandom(): 256 bits. */
int dm_http_token_generate(char ret[65]);

/* Writes token (and a newline) to DIR/NAME, mode 0600, through a new
 * O_EXCL file renamed into place: a symlink or file planted at DIR/NAME is
 * replaced, never followed or written through. DIR must belong to this
 * user and not be writable by others (-EPERM otherwise: another user could
 * swap the file under the clients). *ret_path is malloc'd; ret_st says
 * which file it is, for dm_http_token_remove. */
int dm_http_token_write(const char *dir, const char *name, const char *token, char **ret_path, struct stat *ret_st,
                        struct dm_error *err);

/* Removes path if it is still the file st describes (another server may
 * have replaced it since). */
void dm_http_token_remove(const char *path, const struct stat *st);

#endif
