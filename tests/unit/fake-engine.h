/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_FAKE_ENGINE_H
#define DM_TESTS_FAKE_ENGINE_H

/* A backend that fails at the step a case picks (fk.fail), for the unit
 * tests of what launches containers (test-launch, test-claim): each step
 * it is asked for goes into fk.calls, in order ("userns create root attach
 * start destroy:c-1 "), its only container is "c-1", and fk.destroyed
 * counts the removals. Include it after tests/tap.h and
 * src/core/context.h. */

#include <errno.h>
#include <stdio.h>
#include <string.h>

enum step { NONE, USERNS, CREATE, ROOT, ATTACH, START };

static struct fake {
        enum step fail;
        enum dm_userns_kind kind;
        char calls[256]; /* "userns create root attach start destroy:c-1 " */
        int destroyed;
} fk;

static void called(const char *what)
{
        strncat(fk.calls, what, sizeof(fk.calls) - strlen(fk.calls) - 2);
        strcat(fk.calls, " ");
}

static int failed(enum step s, const char *what, struct dm_error *err)
{
        called(what);
        return fk.fail == s ? dm_error_set(err, -EIO, "the engine refused %s", what) : 0;
}

static int f_userns(struct dm_backend *b, struct dm_userns *ret, struct dm_error *err)
{
        (void)b;
        memset(ret, 0, sizeof(*ret));
        ret->kind = fk.kind;
        ret->uid = ret->gid = 100000;
        snprintf(ret->detail, sizeof(ret->detail), "the fake engine");
        return failed(USERNS, "userns", err);
}

static int f_create(struct dm_backend *b, const struct dm_container_spec *spec, char **ret_id, struct dm_error *err)
{
        (void)b;
        (void)spec;
        if (failed(CREATE, "create", err) < 0)
                return -EIO;
        *ret_id = strdup("c-1");
        return 0;
}

static int f_root(struct dm_backend *b, const char *id, unsigned *uid, unsigned *gid, struct dm_error *err)
{
        (void)b;
        (void)id;
        *uid = *gid = 200000;
        return failed(ROOT, "root", err);
}

static int f_attach(struct dm_backend *b, const char *id, struct dm_stream **ret, struct dm_error *err)
{
        (void)b;
        (void)id;
        *ret = NULL;
        return failed(ATTACH, "attach", err);
}

static int f_start(struct dm_backend *b, const char *id, struct dm_error *err)
{
        (void)b;
        (void)id;
        return failed(START, "start", err);
}

static int f_destroy(struct dm_backend *b, const char *id, struct dm_error *err)
{
        char what[64];

        (void)b;
        (void)err;
        snprintf(what, sizeof(what), "destroy:%s", id);
        called(what);
        fk.destroyed++;
        return 0;
}

static const struct dm_backend_ops ops = {
        .name = "fake",
        .caps = DM_CAP_ATTACH,
        .userns = f_userns,
        .create = f_create,
        .container_root = f_root,
        .attach = f_attach,
        .start = f_start,
        .destroy = f_destroy,
};

#endif
