/* SPDX-License-Identifier: MIT */
#ifndef DM_NETPOLICY_HTTP_HEAD_H
#define DM_NETPOLICY_HTTP_HEAD_H

/* HTTP/1 head parsing shared by the egress proxy (proxy-request.c) and the
 * vendor proxy (vendor-http.c): the pieces both take apart the same way.
 * Each caller keeps its own rules on top (limits, targets, messages). All
 * work in place on a NUL-terminated copy of the head. */

#include <stdbool.h>
#include <stddef.h>

/* Whether c is an RFC 9110 tchar. */
bool dm_httphead_is_tchar(char c);
/* Whether s is a token of 1..max tchars. */
bool dm_httphead_token_ok(const char *s, size_t max);
/* Cuts leading and trailing blanks (space, tab); trailing ones in place. */
char *dm_httphead_trim(char *s);
/* Whether a comma-separated list (e.g. a Connection value; NULL is empty)
 * names token, case-insensitively. */
bool dm_httphead_list_has(const char *list, const char *token);

/* The next line of a head, cut in place (CRLF or bare LF ends); *s moves past
 * it. NULL at the blank line that ends the head or at the end of the string
 * (*s then says nothing useful: stop). */
char *dm_httphead_next_line(char **s);

/* Splits "method SP target SP version" in place. 0, or -1 when a space is
 * missing. */
int dm_httphead_request_line(char *line, char **ret_method, char **ret_target, char **ret_version);
/* Whether every byte of a request target is visible ASCII (0x21..0x7e). */
bool dm_httphead_target_chars_ok(const char *target);

enum dm_httphead_field_error {
        DM_HTTPHEAD_FIELD_OK,
        DM_HTTPHEAD_FIELD_FOLDED, /* starts with a blank (obsolete line folding) */
        DM_HTTPHEAD_FIELD_NO_COLON,
        DM_HTTPHEAD_FIELD_EMPTY_NAME,
        DM_HTTPHEAD_FIELD_BAD_NAME, /* not a token, or longer than max_name */
        DM_HTTPHEAD_FIELD_CONTROL,  /* control character in the value (*ret_name set) */
};

/* Takes one header line apart in place: *ret_name, and *ret_value with its
 * blanks trimmed. Checks in the order of the enum. */
enum dm_httphead_field_error dm_httphead_field(char *line, size_t max_name, const char **ret_name,
                                               const char **ret_value);

#endif
