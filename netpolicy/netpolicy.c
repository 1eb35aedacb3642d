/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "netpolicy/netpolicy.h"

#include <errno.h>
#include <string.h>

const char *const dm_egress_names[] = { "none", "package-managers", "open", NULL };

int dm_netpolicy_parse(const char *mode, const char *const *allow, enum dm_egress *ret, struct dm_error *err)
{
        if (!mode || strcmp(mode, "none") == 0) {
                if (allow && allow[0])
                        return dm_error_set(err, -ENOTSUP,
                                            "'allow' entries need an egress mode with network access, which this "
                                            "version of demesne does not offer yet: drop 'allow' (egress is 'none')");
                *ret = DM_EGRESS_NONE;
                return 0;
        }
        if (strcmp(mode, "package-managers") == 0 || strcmp(mode, "open") == 0)
                return dm_error_set(err, -ENOTSUP,
                                    "egress '%s' is not available yet: this version of demesne runs sandboxes with "
                                    "egress 'none' only (no network but loopback)",
                                    mode);
        return dm_error_set(err, -EINVAL, "unknown egress '%s': use none, package-managers or open", mode);
}

const char *dm_netpolicy_network_mode(enum dm_egress e)
{
        (void)e;
        return "none";
}
