/* SPDX-License-Identifier: MIT */
/* netpolicy/nat.c against the real kernel (root), on a table of the test's
 * own name so that servers running beside it (make check runs tests in
 * parallel) keep theirs: made, made again (idempotent), the rule replaced
 * for another pool, removed, removed again. That the rule masquerades is
 * shown end to end by tests/e2e/client-egress.mjs, whose test host sees the
 * NATed source. */
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
        char table[64];

        if (geteuid() != 0) {
                printf("1..0 # SKIP needs root (nf_tables)\n");
                return 0;
        }
        snprintf(table, sizeof(table), "demesne-test-%d", (int)getpid());
        dm_cidr_parse(DM_NETLINK_POOL_DEFAULT, &pool, &err);
        dm_cidr_parse("10.214.0.0/16", &other, &err);
        ok(!dm_nat_present_in(table), "no table %s yet", table);
        is_int(dm_nat_ensure_in(table, &pool, &err), 0, "make the table, chain and rule (%s)", err.msg);
        ok(dm_nat_present_in(table), "the table is there");
        is_int(dm_nat_ensure_in(table, &pool, &err), 0, "again: idempotent (%s)", err.msg);
        is_int(dm_nat_ensure_in(table, &other, &err), 0, "another pool replaces the rule (%s)", err.msg);
        is_int(dm_nat_remove_in(table, &err), 0, "remove the table (%s)", err.msg);
        ok(!dm_nat_present_in(table), "it is gone");
        is_int(dm_nat_remove_in(table, &err), 0, "removing it again is fine (%s)", err.msg);
        return done_testing();
}
