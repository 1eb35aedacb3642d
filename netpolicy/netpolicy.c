/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "netpolicy/netpolicy.h"

#include <errno.h>
#include <string.h>

#include "netpolicy/policy.h"

const char *const dm_egress_names[] = { "none", "package-managers", "open", NULL };

int dm_netpolicy_parse(const char *mode, const char *const *allow, enum dm_egress *ret, struct dm_error *err)
{
        struct dm_policy *p = NULL;
        unsigned flags = dm_policy_caller_egress_allowed() ? DM_POLICY_CALLER_ALLOWED : 0;
        int r;

        r = dm_policy_parse(mode, allow, flags, &p, err);
        if (r < 0)
                return r;
        *ret = p->mode;
        dm_policy_free(p);
        return 0;
}

const char *dm_netpolicy_network_mode(enum dm_egress e)
{
        (void)e;
        return "none";
}
