/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/principal.h"

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
