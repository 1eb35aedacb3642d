/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_INTEGRATION_ENGINE_ENV_H
#define DM_TESTS_INTEGRATION_ENGINE_ENV_H

/* The engine environment (DOCKER_HOST, which tests/run.sh sets, and the
 * rest backends/backend.h names) read as the server's settings read it,
 * for the backends a test opens itself: nothing below src/core reads the
 * environment. Read once; a test that changes a variable reads its own. */

#include <stdbool.h>

#include "backends/backend.h"
#include "src/core/settings.h"

static inline const struct dm_engine_env *test_engine_env(void)
{
        static struct dm_engine_env env;
        static bool done;

        if (!done && dm_engine_env_read(&env) == 0)
                done = true;
        return &env;
}

#endif
