/* SPDX-License-Identifier: MIT */
#ifndef DM_TESTS_INTEGRATION_COMMON_H
#define DM_TESTS_INTEGRATION_COMMON_H

/* Shared by the integration tests: a private output root and state dir per
 * test process, and a count of containers by label, read from the engine. */

#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <json-c/json.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "src/core/context.h"
#include "tests/tap.h"

static char test_root[256];
/* The roots of earlier test_env_setup calls in this program (a test that
 * starts a second server after the first stopped): removed at exit too. */
static char test_roots_before[4][256];

static int test_root_remove_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
        (void)st;
        (void)f;
        /* Best effort: what a container's root made under a normal user's
         * subordinate ids stays (podman unshare could remove it). */
        if (flag == FTW_DP)
                (void)rmdir(p);
        else
                (void)unlink(p);
        return 0;
}

/* At exit: a test that passed leaves nothing in /tmp; one that failed keeps
 * its root for a look, and says where. */
static void test_root_cleanup(void)
{
        for (int i = -1; i < 4; i++) {
                const char *root = i < 0 ? test_root : test_roots_before[i];

                if (!root[0])
                        continue;
                if (tap_failed)
                        printf("# kept %s (a test failed)\n", root);
                else
                        (void)nftw(root, test_root_remove_one, 16, FTW_DEPTH | FTW_PHYS);
        }
}

/* Points DEMESNE_OUTPUT_ROOT and DEMESNE_STATE_DIR at a fresh temp dir,
 * removed at exit when every test passed. */
static inline void test_env_setup(const char *name)
{
        char tmpl[128], v[PATH_MAX + 32];

        snprintf(tmpl, sizeof(tmpl), "/tmp/dm-%s-XXXXXX", name);
        if (!mkdtemp(tmpl)) {
                perror("mkdtemp");
                exit(1);
        }
        if (test_root[0]) { /* a second call: the first root is removed at exit too */
                for (int i = 0; i < 4; i++)
                        if (!test_roots_before[i][0]) {
                                memcpy(test_roots_before[i], test_root, sizeof(test_root));
                                break;
                        }
        } else {
                atexit(test_root_cleanup);
        }
        snprintf(test_root, sizeof(test_root), "%s", tmpl);
        snprintf(v, sizeof(v), "%s/out", test_root);
        setenv("DEMESNE_OUTPUT_ROOT", v, 1);
        snprintf(v, sizeof(v), "%s/state", test_root);
        setenv("DEMESNE_STATE_DIR", v, 1);
}

/* A shell command that holds its container until test_release() (or at
 * most tenths tenths of a second): a test waits for what it checks, not for
 * a sleep. */
#define TEST_HOLD(tenths) "i=0; while [ ! -e /out/go ] && [ $i -lt " #tenths " ]; do sleep 0.1; i=$((i+1)); done"

/* Releases every TEST_HOLD: a file named go in each run's /out (its
 * directory under test_env_setup's output root). */
static inline void test_release(void)
{
        char dir[PATH_MAX], go[PATH_MAX + 300];
        struct dirent *e;
        DIR *d;

        snprintf(dir, sizeof(dir), "%s/out", test_root);
        d = opendir(dir);
        while (d && (e = readdir(d)))
                if (e->d_name[0] != '.' && snprintf(go, sizeof(go), "%s/%s/go", dir, e->d_name) > 0) {
                        int fd = open(go, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
                        if (fd >= 0)
                                close(fd);
                }
        if (d)
                closedir(d);
}

static inline long count_label(struct dm_backend *b, const char *label)
{
        struct dm_error err = { 0 };
        char **ids = NULL;
        size_t n = 0;

        if (b->ops->list(b, label, &ids, &n, &err) < 0) {
                printf("# list failed: %s\n", err.msg);
                return -1;
        }
        for (size_t i = 0; i < n; i++)
                free(ids[i]);
        free(ids);
        return (long)n;
}

/* The value at a path of up to three keys, NULL when missing. */
static inline json_object *path(json_object *o, const char *a, const char *b, const char *c)
{
        json_object *v = o;
        if (v && a && !json_object_object_get_ex(v, a, &v))
                return NULL;
        if (v && b && !json_object_object_get_ex(v, b, &v))
                return NULL;
        if (v && c && !json_object_object_get_ex(v, c, &v))
                return NULL;
        return v;
}

/* Whether info's owner label names server pid; *ret_run: its demesne.run
 * label's value (borrowed from info), NULL when it has none. */
static inline bool owned_by(const struct dm_container_info *info, pid_t pid, const char **ret_run)
{
        char needle[32];
        bool mine = false;

        snprintf(needle, sizeof(needle), "-%d-", (int)pid);
        *ret_run = NULL;
        for (size_t k = 0; info->labels && info->labels[k]; k++) {
                if (strncmp(info->labels[k], "demesne.owner=", 14) == 0 && strstr(info->labels[k], needle))
                        mine = true;
                if (strncmp(info->labels[k], "demesne.run=", 12) == 0)
                        *ret_run = info->labels[k] + 12;
        }
        return mine;
}

/* The run ids (at most max) of server pid's warm pool entries of the
 * python image, from their labels; -1 when the engine cannot list. */
static inline int pool_runs_of(struct dm_backend *b, pid_t pid, char (*runs)[64], int max)
{
        struct dm_error err = { 0 };
        char **ids = NULL;
        size_t n = 0;
        int found = 0;

        if (b->ops->list(b, "demesne.pool=python", &ids, &n, &err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                struct dm_container_info info = { 0 };
                const char *run;

                if (b->ops->inspect(b, ids[i], &info, &err) == 0) {
                        if (owned_by(&info, pid, &run) && run && found < max)
                                snprintf(runs[found++], 64, "%s", run);
                        dm_container_info_release(&info);
                }
                free(ids[i]);
        }
        free(ids);
        return found;
}

/* Containers whose owner label names a server's pid. */
static inline long containers_of(struct dm_backend *b, pid_t pid)
{
        struct dm_error err = { 0 };
        char **ids = NULL, needle[32];
        size_t n = 0;
        long found = 0;

        snprintf(needle, sizeof(needle), "-%d-", (int)pid);
        if (b->ops->list(b, "demesne.owner", &ids, &n, &err) < 0)
                return -1;
        for (size_t i = 0; i < n; i++) {
                struct dm_container_info info = { 0 };
                if (b->ops->inspect(b, ids[i], &info, &err) == 0) {
                        for (size_t k = 0; info.labels && info.labels[k]; k++)
                                if (strncmp(info.labels[k], "demesne.owner=", 14) == 0 &&
                                    strstr(info.labels[k], needle))
                                        found++;
                        dm_container_info_release(&info);
                }
                free(ids[i]);
        }
        free(ids);
        return found;
}

#endif
