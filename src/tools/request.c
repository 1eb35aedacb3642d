/* SPDX-License-Identifier: MIT */
/* A call's egress policy, parsed once where the call comes in: its nested
 * rules, its run and its background job all use that one parse, and
 * nothing below the tools layer reads the egress and allow arguments. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "netpolicy/policy.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "src/basic/cleanup.h"

const char *dm_tools_call_egress(struct dm_call *call, const struct dm_args_table *t, json_object *args)
{
        if (json_object_object_get_ex(args, "egress", NULL))
                return dm_args_str(t->specs, t->n, args, "egress");
        return dm_tools_nested_egress_default(call);
}

int dm_tools_call_policy(struct dm_call *call, json_object *args, const char *mode, bool server_chosen,
                         struct dm_policy **ret_policy, struct dm_error *err)
{
        _cleanup_free_ const char **allow = dm_args_strv(args, "allow");
        unsigned flags = server_chosen ? DM_POLICY_CALLER_ALLOWED : dm_tools_caller_flags(call);

        if (!allow)
                return dm_error_set(err, -ENOMEM, "out of memory");
        return dm_policy_parse(mode, allow, flags, ret_policy, err);
}

struct dm_tools_run_arg *dm_tools_run_arg_new(const struct dm_args_table *t, struct dm_policy *policy)
{
        struct dm_tools_run_arg *a = calloc(1, sizeof(*a));

        if (!a) {
                dm_policy_free(policy);
                return NULL;
        }
        a->t = t;
        a->policy = policy;
        return a;
}

void dm_tools_run_arg_free(void *arg)
{
        struct dm_tools_run_arg *a = arg;

        if (!a)
                return;
        dm_policy_free(a->policy);
        free(a);
}
