/* SPDX-License-Identifier: MIT */
#ifndef DM_BASIC_PRINCIPAL_H
#define DM_BASIC_PRINCIPAL_H

/* Principals: who made a sandbox, a job or a run. Over stdio the caller is
 * "local"; over HTTP, the bearer token's name ([A-Za-z0-9._-]). A sandbox
 * made with nested: true gets an MCP endpoint of its own, whose calls act
 * for the principal "<its maker's principal>/<sandbox id>": a path, so that
 * a principal covers everything made below it. The host's caller sees and
 * controls the whole tree; a nested sandbox's token only its own subtree;
 * siblings and ancestors are unknown to it. */

#include <stdbool.h>
#include <stddef.h>

/* A principal's length with its NUL: the name of a token (40) and three
 * levels of nesting with room to spare. */
#define DM_PRINCIPAL_MAX 160
#define DM_PRINCIPAL_SEP '/'

/* Whether asker may see and control what owner made: owner is asker, or
 * below it (asker followed by '/'). NULLs cover nothing. */
bool dm_principal_covers(const char *asker, const char *owner);

/* The sandbox a nested principal belongs to (its last component), or
 * NULL for the host's callers. */
const char *dm_principal_leaf(const char *principal);

/* How deep a principal is: 0 for the host's callers ("local", a token's
 * name), one more for each nested level. */
unsigned dm_principal_depth(const char *principal);

/* The top nested sandbox (or run) of principal's tree: its first two
 * components ("local/sbx-..."), or the whole of a host caller's, in ret
 * (truncated to len). */
void dm_principal_root(const char *principal, char *ret, size_t len);

#endif
