/* SPDX-License-Identifier: MIT */
/* dm_exec_env: the one rule for a command's environment layers, the same
 * for a one-off run and a sandbox's exec (src/core/exec.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "src/core/exec.h"
#include "tests/tap.h"

static char *joined(const char **v)
{
        static char buf[512];
        size_t n = 0;

        buf[0] = '\0';
        for (size_t i = 0; v && v[i]; i++)
                n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%s%s", i ? " " : "", v[i]);
        return buf;
}

int main(void)
{
        const char *caller[] = { "A=1", "HTTP_PROXY=mine", "B=2", NULL };
        const char *egress[] = { "HTTP_PROXY=http://10.0.0.1:3128", "NO_PROXY=localhost", NULL };
        const char *agent[] = { "NO_PROXY=localhost,10.0.0.1", "ANTHROPIC_BASE_URL=http://10.0.0.1:3129", NULL };
        const char *dup[] = { "X=1", "X=2", "Y", "Y=3", NULL };
        const char **v;

        v = dm_exec_env((const char *const *const[]){ caller, egress, agent }, 3);
        is_str(joined(v),
               "A=1 HTTP_PROXY=http://10.0.0.1:3128 B=2 NO_PROXY=localhost,10.0.0.1 "
               "ANTHROPIC_BASE_URL=http://10.0.0.1:3129",
               "a later layer replaces an earlier one's entry in its place; the agent's NO_PROXY wins");
        free(v);

        v = dm_exec_env((const char *const *const[]){ NULL, egress, NULL }, 3);
        is_str(joined(v), "HTTP_PROXY=http://10.0.0.1:3128 NO_PROXY=localhost", "NULL layers are skipped");
        free(v);

        v = dm_exec_env((const char *const *const[]){ dup }, 1);
        is_str(joined(v), "X=2 Y=3", "within one layer too, the last of two wins (a bare name is a name)");
        free(v);

        v = dm_exec_env((const char *const *const[]){ (const char *const[]){ "AB=1", NULL },
                                                      (const char *const[]){ "A=2", "ABC=3", NULL } },
                        2);
        is_str(joined(v), "AB=1 A=2 ABC=3", "a name that is another's prefix is another name");
        free(v);

        v = dm_exec_env(NULL, 0);
        ok(v && !v[0], "no layers: an empty list, not NULL");
        free(v);
        return done_testing();
}
