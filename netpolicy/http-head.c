/* SPDX-License-Identifier: MIT */
/* See http-head.h. */
#include "config.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "netpolicy/http-head.h"

bool dm_httphead_is_tchar(char c)
{
        return isalnum((unsigned char)c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

bool dm_httphead_token_ok(const char *s, size_t max)
{
        size_t n = 0;
        for (; *s; s++, n++)
                if (!dm_httphead_is_tchar(*s))
                        return false;
        return n > 0 && n <= max;
}

char *dm_httphead_trim(char *s)
{
        char *e;

        while (*s == ' ' || *s == '\t')
                s++;
        e = s + strlen(s);
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
                *--e = '\0';
        return s;
}

bool dm_httphead_list_has(const char *list, const char *token)
{
        size_t n = strlen(token);

        while (list && *list) {
                size_t len;
                while (*list == ' ' || *list == '\t' || *list == ',')
                        list++;
                len = strcspn(list, ", \t");
                if (len == n && strncasecmp(list, token, n) == 0)
                        return true;
                list += len;
        }
        return false;
}

char *dm_httphead_next_line(char **s)
{
        char *line = *s, *nl;

        if (!line || !*line)
                return NULL;
        nl = strchr(line, '\n');
        *s = nl ? nl + 1 : NULL;
        if (nl) {
                *nl = '\0';
                if (nl > line && nl[-1] == '\r')
                        nl[-1] = '\0';
        }
        return *line ? line : NULL;
}

int dm_httphead_request_line(char *line, char **ret_method, char **ret_target, char **ret_version)
{
        char *target, *sp;

        if (!(sp = strchr(line, ' ')))
                return -1;
        *sp = '\0';
        target = sp + 1;
        if (!(sp = strchr(target, ' ')))
                return -1;
        *sp = '\0';
        *ret_method = line;
        *ret_target = target;
        *ret_version = sp + 1;
        return 0;
}

bool dm_httphead_target_chars_ok(const char *target)
{
        for (const char *c = target; *c; c++)
                if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
                        return false;
        return true;
}

enum dm_httphead_field_error dm_httphead_field(char *line, size_t max_name, const char **ret_name,
                                               const char **ret_value)
{
        char *colon;

        if (line[0] == ' ' || line[0] == '\t')
                return DM_HTTPHEAD_FIELD_FOLDED;
        if (!(colon = strchr(line, ':')))
                return DM_HTTPHEAD_FIELD_NO_COLON;
        *colon = '\0';
        if (!*line)
                return DM_HTTPHEAD_FIELD_EMPTY_NAME;
        if (!dm_httphead_token_ok(line, max_name))
                return DM_HTTPHEAD_FIELD_BAD_NAME;
        *ret_name = line;
        for (const char *c = colon + 1; *c; c++)
                if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
                        return DM_HTTPHEAD_FIELD_CONTROL;
        *ret_value = dm_httphead_trim(colon + 1);
        return DM_HTTPHEAD_FIELD_OK;
}
