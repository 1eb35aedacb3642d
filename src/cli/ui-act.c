/* SPDX-License-Identifier: MIT */
/* The activity view's actions (docs/reference/activity-api.md): cancel a
 * background job, destroy a persistent sandbox. The view does neither
 * itself: the server that owns the job or sandbox (the pid its journal is
 * named by) does, through the same functions as sandbox_cancel and
 * sandbox_destroy, so its admission slots, records and nested cascade stay
 * right. In `serve --http` that server is this process. */
#include "config.h"
#include "src/cli/ui.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "src/core/activity.h"
#include "src/core/control.h"
#include "src/basic/log.h"

static const char *str_of(json_object *o, const char *k)
{
        json_object *v;

        return json_object_object_get_ex(o, k, &v) && json_object_is_type(v, json_type_string)
                       ? json_object_get_string(v)
                       : NULL;
}

/* The pid a journal's name begins with (<pid>-<start ms>.jsonl); 0 if none. */
static pid_t journal_pid(const char *journal)
{
        char *end;
        long pid = journal ? strtol(journal, &end, 10) : 0;

        return journal && pid > 0 && pid < (1l << 22) && *end == '-' ? (pid_t)pid : 0;
}

/* The run's line as the journals say it (a new copy), or NULL. */
static json_object *find_run(const struct ui_paths *p, const char *id, struct dm_error *err)
{
        json_object *all = dm_activity_read(p->state_dir, NULL, err), *run = NULL;

        for (size_t i = 0; all && i < json_object_array_length(all) && !run; i++) {
                const char *rid = str_of(json_object_array_get_idx(all, i), "id");
                if (rid && strcmp(rid, id) == 0)
                        run = json_object_get(json_object_array_get_idx(all, i));
        }
        json_object_put(all);
        return run;
}

/* What op acts on in the run's server: its job, or the sandbox itself;
 * NULL and *why when the run is not such a thing. Whether it still runs is
 * the server's to say, not the journal's: a cancel of a job that ended
 * answers its final status (as sandbox_cancel), a destroyed sandbox is
 * unknown (404), as sandbox_destroy says. */
static const char *target_of(json_object *run, const char *op, const char **why)
{
        const char *kind = str_of(run, "kind");

        if (strcmp(op, "cancel") == 0 && !str_of(run, "job_id"))
                return *why = "only a background job can be cancelled: this run is not one", NULL;
        if (strcmp(op, "destroy") == 0 && (!kind || strcmp(kind, "sandbox") != 0))
                return *why = "only a persistent sandbox can be destroyed: this run is not one", NULL;
        return strcmp(op, "cancel") == 0 ? str_of(run, "job_id") : str_of(run, "id");
}

static enum MHD_Result answered(struct MHD_Connection *c, const char *id, const char *op, const char *target,
                                json_object *answer)
{
        const char *msg = str_of(answer, "error"), *status = str_of(answer, "status");
        json_object *v, *o;
        int code;

        if (msg) {
                code = json_object_object_get_ex(answer, "code", &v) ? json_object_get_int(v) : 500;
                if (code < 400 || code > 599)
                        code = 500;
                o = json_object_new_object();
                json_object_object_add(o, "error", json_object_new_string(msg));
                json_object_put(answer);
                return dm_ui_json(c, (unsigned)code, o);
        }
        o = json_object_new_object();
        json_object_object_add(o, "api_version", json_object_new_int(1));
        json_object_object_add(o, "id", json_object_new_string(id));
        if (strcmp(op, "cancel") == 0)
                json_object_object_add(o, "job_id", json_object_new_string(target));
        json_object_object_add(o, "status", json_object_new_string(status ? status : "unknown"));
        json_object_put(answer);
        return dm_ui_json(c, MHD_HTTP_OK, o);
}

enum MHD_Result dm_ui_act(const struct ui_paths *p, struct MHD_Connection *c, const char *id, const char *op)
{
        struct dm_error err = { 0 };
        json_object *run = find_run(p, id, &err), *answer = NULL;
        const char *target, *why = NULL;
        char buf[DM_ACTIVITY_ID_MAX + 1];
        pid_t pid;
        int r;

        if (!run)
                return err.msg[0] ? dm_ui_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, err.msg)
                                  : dm_ui_error(c, MHD_HTTP_NOT_FOUND, "no such run");
        target = target_of(run, op, &why);
        pid = journal_pid(str_of(run, "journal"));
        if (target)
                snprintf(buf, sizeof(buf), "%s", target);
        json_object_put(run);
        if (!target)
                return dm_ui_error(c, MHD_HTTP_CONFLICT, why);
        if (!pid)
                return dm_ui_error(c, MHD_HTTP_CONFLICT, "the run's journal does not name its server");
        log_info("ui: %s '%s' asked of the server of pid %d", op, buf, (int)pid);
        if (p->ctx && pid == getpid()) {
                dm_control_act(p->ctx, op, buf, &answer);
        } else if ((r = dm_control_request(p->state_dir, pid, op, buf, &answer, &err)) < 0) {
                if (r == -EIO)
                        return dm_ui_error(c, MHD_HTTP_BAD_GATEWAY, err.msg);
                return dm_ui_error(c, MHD_HTTP_CONFLICT, err.msg);
        }
        return answered(c, id, op, buf, answer);
}
