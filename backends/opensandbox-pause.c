/* SPDX-License-Identifier: MIT */
/* OpenSandbox's pause and resume (sandbox-lifecycle.yml: POST
 * /sandboxes/{id}/pause and /resume, 202, then the state moves through
 * Pausing to Paused, or Resuming to Running). Its Docker runtime does the
 * engine's pause underneath. Snapshots it does not offer: the backend has
 * no commit, and the core says so. */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backends/opensandbox-internal.h"
#include "src/basic/timeutil.h"

/* How long the state may take to settle: the runtime's pause is a cgroup
 * freeze, well under a second; this only turns a stuck server into an
 * error. */
#define SETTLE_MS 60000

static const char *state_now(struct osb *o, const char *path, struct json_object **hold)
{
        struct json_object *st = NULL, *v = NULL;

        if (dm_osb_api(o, "GET", path, NULL, 200, hold, NULL) < 0)
                return "";
        if (json_object_object_get_ex(*hold, "status", &st) && json_object_object_get_ex(st, "state", &v))
                return json_object_get_string(v);
        return "";
}

static int pause_resume(struct dm_backend *b, const char *id, bool pause, struct dm_error *err)
{
        struct osb *o = to_osb(b);
        const char *want = pause ? "Paused" : "Running", *verb = pause ? "pause" : "resume";
        char path[320], action[340];
        int64_t deadline = dm_now_ms() + SETTLE_MS;
        int r = dm_osb_check_id(id, err);

        if (r < 0)
                return r;
        snprintf(path, sizeof(path), "/sandboxes/%s", id);
        snprintf(action, sizeof(action), "%s/%s", path, verb);
        r = dm_osb_api(o, "POST", action, NULL, 202, NULL, err);
        /* 409: already in the state asked for (or on its way there). */
        if (r < 0 && r != -EBUSY)
                return dm_error_wrap(err, "%s sandbox '%s'", verb, id);
        dm_error_clear(err);
        for (useconds_t delay = 20000;; delay = delay < 500000 ? delay * 2 : delay) {
                struct json_object *hold = NULL;
                bool done = strcmp(state_now(o, path, &hold), want) == 0;

                json_object_put(hold);
                if (done)
                        return 0;
                if (dm_now_ms() > deadline)
                        return dm_error_set(err, -ETIMEDOUT, "%s sandbox '%s': the OpenSandbox server did not reach %s",
                                            verb, id, want);
                usleep(delay);
        }
}

int dm_osb_pause(struct dm_backend *b, const char *id, struct dm_error *err)
{
        return pause_resume(b, id, true, err);
}

int dm_osb_resume(struct dm_backend *b, const char *id, struct dm_error *err)
{
        return pause_resume(b, id, false, err);
}
