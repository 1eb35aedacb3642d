/* SPDX-License-Identifier: MIT */
/* A call's egress policy, parsed once where the call comes in: its nested
 * rules, its run and its background job all use that one parse, and
 * nothing below the tools layer reads the egress and allow arguments. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "netpolicy/policy.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "src/basic/buf.h"
#include "src/basic/cleanup.h"
#include "src/basic/principal.h"
#include "src/core/agent.h"
#include "src/core/claim.h"
#include "src/core/inputs.h"

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
        dm_args_strv_free(a->granted);
        free(a);
}

/* The question for host paths outside the operator's roots. */
static char *paths_question(struct dm_call *call, const char *what, const char *const *given, char *const *resolved)
{
        struct dm_buf b;
        const struct dm_tool *tool = dm_call_tool(call);
        struct stat st;
        size_t n = 0;

        dm_buf_init(&b, 16384);
        dm_buf_printf(&b,
                      "A call of '%s' (caller '%s') asks to %s, outside the folders this server's operator "
                      "allows (DEMESNE_ALLOWED_PATHS):",
                      tool ? tool->name : "?", dm_call_principal(call), what);
        for (; resolved[n] && n < 20; n++) {
                dm_buf_printf(&b, " '%.300s'", resolved[n]);
                if (strcmp(given[n], resolved[n]) != 0)
                        dm_buf_printf(&b, " (given as '%.300s'%s)", given[n],
                                      lstat(given[n], &st) == 0 && S_ISLNK(st.st_mode) ? ", a symbolic link" : "");
        }
        if (resolved[n])
                dm_buf_printf(&b, " and more");
        dm_buf_printf(&b, ". Allow them for this one call?");
        if (!b.data) {
                dm_buf_release(&b);
                return NULL;
        }
        return dm_buf_steal(&b);
}

/* Appends to given/resolved the paths of one argument that only the roots
 * refuse; given are borrowed from args. */
static void collect_outside(struct dm_call *call, json_object *args, const char *name, enum dm_path_kind kind,
                            const char **given, char **resolved, size_t *n)
{
        _cleanup_free_ const char **paths = dm_args_strv(args, name);

        for (size_t i = 0; paths && paths[i] && *n < DM_INPUTS_MAX; i++)
                if (dm_path_outside_only(&dm_call_context(call)->roots, paths[i], kind, &resolved[*n]) == 1)
                        given[(*n)++] = paths[i];
}

/* Asks about the n paths collected (given, resolved: taken), as what. */
static int ask_outside(struct dm_call *call, const char *what, const char **given, char **resolved, size_t n,
                       char ***ret_granted, struct dm_error *err)
{
        _cleanup_free_ char *question = NULL;
        char *check = NULL;
        int r;

        if (n == 0) {
                free(resolved);
                return 0;
        }
        question = paths_question(call, what, given, resolved);
        if (question && dm_call_ask(call, "paths", question) == DM_ASK_ALLOW) {
                *ret_granted = resolved;
                return 0;
        }
        /* The refusal the claim would give, now. */
        dm_args_strv_free(resolved);
        r = dm_path_check(&dm_call_context(call)->roots, given[0], DM_PATH_FILE, &check, err);
        free(check);
        return r < 0 ? r : dm_error_set(err, -EACCES, "path '%s' is outside DEMESNE_ALLOWED_PATHS", given[0]);
}

int dm_tools_call_paths(struct dm_call *call, json_object *args, char ***ret_granted, struct dm_error *err)
{
        const char *given[DM_INPUTS_MAX + 1] = { 0 };
        char **resolved = calloc(DM_INPUTS_MAX + 1, sizeof(*resolved));
        size_t n = 0;

        *ret_granted = NULL;
        if (!resolved)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (!dm_principal_depth(dm_call_principal(call))) {
                collect_outside(call, args, "files", DM_PATH_FILE, given, resolved, &n);
                collect_outside(call, args, "directories", DM_PATH_DIR, given, resolved, &n);
        }
        return ask_outside(call, "mount these host paths read-only at /in/<name>", given, resolved, n, ret_granted,
                           err);
}

int dm_tools_call_upload_src(struct dm_call *call, const char *src, const char *dst, char ***ret_granted,
                             struct dm_error *err)
{
        const char *given[2] = { src, NULL };
        char **resolved = calloc(2, sizeof(*resolved));
        _cleanup_free_ char *what = NULL;
        size_t n = 0;

        *ret_granted = NULL;
        if (!resolved)
                return dm_error_set(err, -ENOMEM, "out of memory");
        if (!dm_principal_depth(dm_call_principal(call)) &&
            dm_path_outside_only(&dm_call_context(call)->roots, src, DM_PATH_FILE, &resolved[0]) == 1)
                n = 1;
        if (n && asprintf(&what, "copy this host file into its sandbox at '%.300s'", dst) < 0) {
                dm_args_strv_free(resolved);
                return dm_error_set(err, -ENOMEM, "out of memory");
        }
        return ask_outside(call, what, given, resolved, n, ret_granted, err);
}

/* The question for a run's max_usd above the server's cap on one run. */
static char *spend_question(struct dm_call *call, double max_usd, bool tree)
{
        struct dm_buf b;
        const struct dm_tool *tool = dm_call_tool(call);
        const struct dm_config *cfg = &dm_call_context(call)->cfg;
        char root[DM_PRINCIPAL_MAX];
        bool nested = dm_principal_depth(dm_call_principal(call)) > 0;

        dm_buf_init(&b, 4096);
        dm_principal_root(dm_call_principal(call), root, sizeof(root));
        dm_buf_printf(&b, "A call of '%s' (caller '%s'", tool ? tool->name : "?", dm_call_principal(call));
        if (nested)
                dm_buf_printf(&b, ", inside the nested sandbox tree '%s'", root);
        dm_buf_printf(&b,
                      ") asks to let its agent run spend up to $%g on model use, above this server's cap on one "
                      "run (DEMESNE_AGENT_MAX_USD=%g).",
                      max_usd, cfg->agent_max_usd);
        if ((nested || tree) && cfg->tree_max_usd > 0)
                dm_buf_printf(&b, " The tree's own limit (DEMESNE_TREE_MAX_USD=%g) still holds.", cfg->tree_max_usd);
        dm_buf_printf(&b, " Allow it for this one run?");
        if (!b.data) {
                dm_buf_release(&b);
                return NULL;
        }
        return dm_buf_steal(&b);
}

int dm_tools_call_spend(struct dm_call *call, double max_usd, bool tree, bool *ret_allowed, struct dm_error *err)
{
        struct dm_context *ctx = dm_call_context(call);
        const char *principal = dm_call_principal(call);
        bool nested = dm_principal_depth(principal) > 0;
        _cleanup_free_ char *question = NULL;
        int r;

        *ret_allowed = false;
        if (max_usd <= 0)
                return 0;
        /* The tree's cap is the ceiling, never asked: a nested caller's
         * max_usd past what its tree has left is refused before anyone
         * could be asked to raise the run's cap. */
        if (nested && (r = dm_claim_spend_left(ctx, principal, max_usd, err)) < 0)
                return r;
        r = dm_agent_cap_check(&ctx->cfg, max_usd, err);
        if (r != -EPERM)
                return r;
        question = spend_question(call, max_usd, tree);
        /* A sandbox never answers for the person: a nested caller's
         * question goes to the host's client that made its tree. */
        if (question && (nested ? dm_call_ask_host(call, dm_tools_nested_host_session(call), "spend", question)
                                : dm_call_ask(call, "spend", question)) == DM_ASK_ALLOW) {
                *ret_allowed = true;
                *err = (struct dm_error){ 0 };
                return 0;
        }
        return r;
}
