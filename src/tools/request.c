/* SPDX-License-Identifier: MIT */
/* A call's egress policy, parsed once where the call comes in: its nested
 * rules, its run and its background job all use that one parse, and
 * nothing below the tools layer reads the egress and allow arguments. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/policy.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/principal.h"

const char *dm_tools_call_egress(struct dm_call *call, const struct dm_args_table *t, json_object *args)
{
        if (json_object_object_get_ex(args, "egress", NULL))
                return dm_args_str(t->specs, t->n, args, "egress");
        return dm_tools_nested_egress_default(call);
}

/* The question for a refused egress: the tool, what it asks for, who asks. */
static char *egress_question(struct dm_call *call, const char *mode, const char *const *allow)
{
        struct dm_buf b;
        const struct dm_tool *tool = dm_call_tool(call);
        bool open = mode && strcmp(mode, "open") == 0;
        size_t n = 0;
        char root[DM_PRINCIPAL_MAX];

        dm_buf_init(&b, 8192);
        dm_principal_root(dm_call_principal(call), root, sizeof(root));
        dm_buf_printf(&b, "A call of '%s' (caller '%s'", tool ? tool->name : "?", dm_call_principal(call));
        if (dm_principal_depth(dm_call_principal(call)))
                dm_buf_printf(&b, ", inside the nested sandbox tree '%s'", root);
        dm_buf_printf(&b, ") asks for ");
        if (open)
                dm_buf_printf(&b, "open internet (egress 'open')");
        if (allow[0]) {
                dm_buf_printf(&b, "%sthese egress entries:", open ? " and " : "");
                for (; allow[n] && n < 20; n++)
                        dm_buf_printf(&b, " '%.100s'", allow[n]);
                if (allow[n])
                        dm_buf_printf(&b, " and more");
        }
        dm_buf_printf(&b, ", which this server's operator does not allow callers (DEMESNE_ALLOW_CALLER_EGRESS). "
                          "Allow it for this one call?");
        if (!b.data) {
                dm_buf_release(&b);
                return NULL;
        }
        return dm_buf_steal(&b);
}

int dm_tools_call_policy(struct dm_call *call, json_object *args, const char *mode, bool server_chosen,
                         struct dm_policy **ret_policy, struct dm_error *err)
{
        _cleanup_free_ const char **allow = dm_args_strv(args, "allow");
        unsigned flags = server_chosen ? DM_POLICY_CALLER_ALLOWED : dm_tools_caller_flags(call);
        struct dm_error wide = { 0 };
        _cleanup_free_ char *question = NULL;
        int r;

        if (!allow)
                return dm_error_set(err, -ENOMEM, "out of memory");
        r = dm_policy_parse(mode, allow, flags, ret_policy, err);
        /* Refused only for want of the operator's permission: the person at
         * the client may give it for this call (server-ask.c). Any other fault, or
         * no answer, is the refusal word for word. */
        if (r != -EPERM || (flags & DM_POLICY_CALLER_ALLOWED) ||
            dm_policy_parse(mode, allow, DM_POLICY_CALLER_ALLOWED, ret_policy, &wide) < 0)
                return r;
        question = egress_question(call, mode, allow);
        /* A sandbox never answers for the person: a nested caller's
         * question goes to the host's client that made its tree. */
        if (question && (dm_principal_depth(dm_call_principal(call))
                                 ? dm_call_ask_host(call, dm_tools_nested_host_session(call), "egress", question)
                                 : dm_call_ask(call, "egress", question)) == DM_ASK_ALLOW)
                return 0;
        dm_policy_free(*ret_policy);
        *ret_policy = NULL;
        return r;
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
