/* SPDX-License-Identifier: MIT */
/* Principals as paths: who covers whom (src/basic/principal.h), and the
 * consumers that decide visibility by it: jobs and the run ledger. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/basic/principal.h"
#include "src/core/jobs.h"
#include "src/core/ledger.h"
#include "tests/tap.h"

static json_object *job_fn(struct dm_job *job, void *userdata, enum dm_job_status *ret_status, char *error,
                           size_t error_len)
{
        (void)job;
        (void)userdata;
        (void)error;
        (void)error_len;
        *ret_status = DM_JOB_SUCCEEDED;
        return json_object_new_object();
}

static int count_runs(const char *root, const char *principal)
{
        struct dm_ledger_scope scope = { .has_since = true, .since = 0 };
        struct dm_error err = { 0 };
        json_object *rep = dm_ledger_report(root, "test-owner", principal, &scope, &err), *runs;
        int n = -1;

        if (rep && json_object_object_get_ex(rep, "runs", &runs))
                n = (int)json_object_array_length(runs);
        json_object_put(rep);
        return n;
}

int main(void)
{
        static const struct {
                const char *asker, *owner;
                bool covers;
        } cases[] = {
                { "local", "local", true },
                { "local", "local/sbx-0123456789ab", true },
                { "local", "local/sbx-0123456789ab/sbx-ba9876543210", true },
                { "local/sbx-0123456789ab", "local/sbx-0123456789ab/sbx-ba9876543210", true },
                { "local/sbx-0123456789ab", "local", false },
                { "local/sbx-0123456789ab", "local/sbx-0123456789ac", false },
                { "local/sbx-0123456789ab", "local/sbx-0123456789abc", false },
                { "loc", "local", false },
                { "alice", "bob", false },
                { "alice", "alice/sbx-0123456789ab", true },
                { "bob", "alice/sbx-0123456789ab", false },
                { "", "local", false },
                { NULL, "local", false },
                { "local", NULL, false },
        };
        char root[] = "/tmp/dm-test-principal-XXXXXX", cmd[128], id[32];
        struct dm_jobs *jobs;
        struct dm_error err = { 0 };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                ok(dm_principal_covers(cases[i].asker, cases[i].owner) == cases[i].covers, "'%s' %s '%s'",
                   cases[i].asker ? cases[i].asker : "(null)", cases[i].covers ? "covers" : "does not cover",
                   cases[i].owner ? cases[i].owner : "(null)");
        is_int(dm_principal_depth("local"), 0, "depth of the host's caller");
        is_int(dm_principal_depth("alice/sbx-0123456789ab/sbx-ba9876543210"), 2, "depth two levels down");

        /* Jobs: a nested sandbox's job is its maker's too, not a sibling's. */
        jobs = dm_jobs_new();
        if (!ok(jobs && dm_jobs_start_owned(jobs, "local/sbx-0123456789ab", "sandbox_script", NULL, job_fn, NULL, NULL,
                                            NULL, id) == 0,
                "a job of a nested principal starts"))
                return done_testing();
        ok(dm_jobs_owned(jobs, id, "local/sbx-0123456789ab"), "its own principal owns it");
        ok(dm_jobs_owned(jobs, id, "local"), "so does the principal above it");
        ok(!dm_jobs_owned(jobs, id, "local/sbx-0123456789ac"), "a sibling does not");
        ok(!dm_jobs_owned(jobs, id, "alice"), "nor another token");
        dm_jobs_shutdown(jobs);
        dm_jobs_free(jobs);

        /* The ledger: a report covers the runs of the principals below. */
        if (!mkdtemp(root))
                return done_testing();
        struct dm_ledger_run a = { .run_id = "run-a", .principal = "local" },
                             b = { .run_id = "run-b", .principal = "local/sbx-0123456789ab" },
                             c = { .run_id = "run-c", .principal = "local/sbx-0123456789ab/sbx-ba9876543210" },
                             d = { .run_id = "run-d", .principal = "local/sbx-0123456789ac" };
        ok(dm_ledger_begin(root, "test-owner", &a, &err) == 0 && dm_ledger_begin(root, "test-owner", &b, &err) == 0 &&
                   dm_ledger_begin(root, "test-owner", &c, &err) == 0 &&
                   dm_ledger_begin(root, "test-owner", &d, &err) == 0,
           "four runs in the ledger");
        is_int(count_runs(root, "local"), 4, "the host's caller sees every run of its tree");
        is_int(count_runs(root, "local/sbx-0123456789ab"), 2, "a nested sandbox sees its own and its child's");
        is_int(count_runs(root, "local/sbx-0123456789ab/sbx-ba9876543210"), 1, "the child sees its own");
        is_int(count_runs(root, "local/sbx-0123456789ac"), 1, "a sibling sees only its own");
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
        if (system(cmd) != 0)
                diag("could not remove %s", root);
        return done_testing();
}
