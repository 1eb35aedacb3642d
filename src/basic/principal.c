/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/principal.h"

#include <stdio.h>
#include <string.h>

bool dm_principal_covers(const char *asker, const char *owner)
{
        size_t n;

        if (!asker || !owner || !asker[0])
                return false;
        n = strlen(asker);
        return strncmp(owner, asker, n) == 0 && (owner[n] == '\0' || owner[n] == DM_PRINCIPAL_SEP);
}

const char *dm_principal_leaf(const char *principal)
{
        const char *slash = principal ? strrchr(principal, DM_PRINCIPAL_SEP) : NULL;

        return slash && slash[1] ? slash + 1 : NULL;
}

unsigned dm_principal_depth(const char *principal)
{
        unsigned d = 0;

        for (const char *p = principal; p && *p; p++)
                d += *p == DM_PRINCIPAL_SEP;
        return d;
}

void dm_principal_root(const char *principal, char *ret, size_t len)
{
        const char *slash = principal ? strchr(principal, DM_PRINCIPAL_SEP) : NULL;
        const char *end = slash ? strchr(slash + 1, DM_PRINCIPAL_SEP) : NULL;
        size_t n = end ? (size_t)(end - principal) : principal ? strlen(principal) : 0;

        if (len)
                snprintf(ret, len, "%.*s", (int)(n < len ? n : len - 1), principal ? principal : "");
}
