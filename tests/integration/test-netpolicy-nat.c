/* SPDX-License-Identifier: MIT */
/* netpolicy/nat.c against the real kernel (root): the `ip demesne` table is
 * made, made again (idempotent, the rule replaced), and removed; removing
 * it twice is fine. (That the rule masquerades is shown end to end by
 * tests/e2e/client-egress.mjs, whose test host sees the NATed source.)
 * A table left by a sandbox network of a running server is put back. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

#include "netpolicy/nat.h"
#include "tests/tap.h"

int main(void)
{
        struct dm_error err = { 0 };
        struct dm_cidr pool, other;
        bool had;

        if (geteuid() != 0) {
                printf("1..0 # SKIP needs root (nf_tables)\n");
                return 0;
        }
        dm_cidr_parse(DM_NETLINK_POOL_DEFAULT, &pool, &err);
        dm_cidr_parse("10.214.0.0/16", &other, &err);
        /* Another test or server may be using it right now: put it back after. */
        had = dm_nat_present();
        is_int(dm_nat_ensure(&pool, &err), 0, "make the table, chain and rule (%s)", err.msg);
        ok(dm_nat_present(), "the table is there");
        is_int(dm_nat_ensure(&pool, &err), 0, "again: idempotent (%s)", err.msg);
        is_int(dm_nat_ensure(&other, &err), 0, "another pool replaces the rule (%s)", err.msg);
        is_int(dm_nat_ensure(&pool, &err), 0, "and back (%s)", err.msg);
        if (!had) {
                is_int(dm_nat_remove(&err), 0, "remove the table (%s)", err.msg);
                ok(!dm_nat_present(), "it is gone");
                is_int(dm_nat_remove(&err), 0, "removing it again is fine (%s)", err.msg);
        } else {
                ok(dm_nat_present(), "a running server's table is left in place");
        }
        return done_testing();
}
