/* SPDX-License-Identifier: MIT */
#ifndef DM_MCP_HTTP_TOKEN_H
#define DM_MCP_HTTP_TOKEN_H

/* The HTTP transport's bearer tokens: every `serve --http` has at least one,
 * loopback too (anything that reaches 127.0.0.1 would otherwise control the
 * server). The operator gives them (--token-file, DEMESNE_HTTP_TOKEN_FILE,
 * DEMESNE_HTTP_TOKEN) or the server makes one and writes it, mode 0600, to
 * a file in its state directory for local clients to read.
 *
 * Each token names a principal: the sessions its requests make act for
 * that name, and read back only what calls of the same name made. A lone
 * token (made, DEMESNE_HTTP_TOKEN, a file with one bare token) is named
 * "token". */

#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "src/basic/error.h"

#define DM_MCPHTTP_TOKEN_MIN 16
#define DM_MCPHTTP_TOKENS_MAX 64
#define DM_MCPHTTP_TOKEN_NAME_MAX 40

struct dm_mcphttp_token {
        char name[DM_MCPHTTP_TOKEN_NAME_MAX + 1]; /* [A-Za-z0-9._-], 1..40: logged, never the secret */
        char *secret;                             /* malloc'd; wiped by dm_mcphttp_tokens_release */
        size_t len;
        unsigned line; /* in its token file, for messages; 0 if it came from elsewhere */
};

/* Embedded (no allocation but the secrets); zero-initialised is empty. */
struct dm_mcphttp_tokens {
        struct dm_mcphttp_token v[DM_MCPHTTP_TOKENS_MAX];
        size_t n;
};

/* Adds secret under name (both copied). what names the source in messages
 * ("token file 'F'"), line its line there (0: none). -EINVAL for a bad
 * token (dm_mcphttp_token_check) or name, a name or a secret already in t
 * (the message names the line that has it, never the secret), or a full
 * table; -ENOMEM. */
int dm_mcphttp_tokens_add(struct dm_mcphttp_tokens *t, const char *name, const char *secret, const char *what,
                          unsigned line, struct dm_error *err);

/* Parses a token file's text, a NUL-terminated string that is split in
 * place (the caller wipes it): one token per line, "NAME TOKEN" or just
 * "TOKEN" (named token1, token2... by its place among the tokens, or
 * "token" if it is the file's only one); blank lines and lines starting
 * with '#' are skipped. -EINVAL with a message naming the line for a bad
 * line, a duplicate name or token, more than DM_MCPHTTP_TOKENS_MAX tokens, or
 * no token at all; t is then released. t must be empty. */
int dm_mcphttp_tokens_parse(struct dm_mcphttp_tokens *t, char *text, const char *what, struct dm_error *err);

/* Wipes the secrets and frees them; t is empty again. */
void dm_mcphttp_tokens_release(struct dm_mcphttp_tokens *t);
/* Logs which principals may connect: their names, never a token. */
void dm_mcphttp_tokens_log(const struct dm_mcphttp_tokens *t);

/* Whether a token is acceptable: at least DM_MCPHTTP_TOKEN_MIN printable
 * characters, no blanks. what names its source in the message. */
int dm_mcphttp_token_check(const char *token, const char *what, struct dm_error *err);

/* 64 hex digits from getrandom(): 256 bits. */
int dm_mcphttp_token_generate(char ret[65]);

/* Writes token (and a newline) to DIR/NAME, mode 0600, through a new
 * O_EXCL file renamed into place: a symlink or file planted at DIR/NAME is
 * replaced, never followed or written through. DIR must belong to this
 * user and not be writable by others (-EPERM otherwise: another user could
 * swap the file under the clients). *ret_path is malloc'd; ret_st says
 * which file it is, for dm_mcphttp_token_remove. */
int dm_mcphttp_token_write(const char *dir, const char *name, const char *token, char **ret_path, struct stat *ret_st,
                           struct dm_error *err);

/* Removes path if it is still the file st describes (another server may
 * have replaced it since). */
void dm_mcphttp_token_remove(const char *path, const struct stat *st);

#endif
