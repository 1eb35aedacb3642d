/* SPDX-License-Identifier: MIT */
/* The runner behind sandbox_script, against the real engine (Podman in
 * tests/run.sh, dockerd in tests/run-dockerd.sh). The commands need nothing
 * but bash and coreutils: DEMESNE_TEST_IMAGE picks the image (default
 * python, the server's default). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/core/images.h"
#include "src/core/server.h"
#include "src/core/runner.h"
#include "src/basic/timeutil.h"
#include "tests/integration/common.h"
#include "tests/tap.h"

static struct dm_context ctx;
static const char *image = "python";

static int run(const char *cmd, int64_t timeout, struct dm_run_result *res, struct dm_error *err)
{
        struct dm_run_request req = { .image = image, .command = cmd, .timeout_s = timeout };

        dm_error_clear(err);
        return dm_run(&ctx, &req, res, err);
}

static long vm_hwm_kb(void)
{
        char line[256];
        long kb = -1;
        FILE *f = fopen("/proc/self/status", "re");

        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
                        break;
        if (f)
                fclose(f);
        return kb;
}

static off_t file_size(const char *dir, const char *name)
{
        char p[PATH_MAX];
        struct stat st;

        snprintf(p, sizeof(p), "%s/%s", dir, name);
        return stat(p, &st) == 0 ? st.st_size : -1;
}

int main(void)
{
        struct dm_error err = { 0 };
        struct dm_run_result res;
        struct dm_backend *b;
        const struct dm_image_info *img;
        char inputs[PATH_MAX], p[PATH_MAX + 64], cmd[PATH_MAX + 256];
        int r;

        if (getenv("DEMESNE_TEST_IMAGE") && getenv("DEMESNE_TEST_IMAGE")[0])
                image = getenv("DEMESNE_TEST_IMAGE");
        test_env_setup("script");
        snprintf(inputs, sizeof(inputs), "%s/inputs", test_root);
        mkdir(inputs, 0755);
        setenv("DEMESNE_ALLOWED_PATHS", inputs, 1);
        if (dm_server_init(&ctx, &err) < 0 || dm_context_backend(&ctx, &b, &err) < 0) {
                printf("Bail out! no engine: %s\n", err.msg);
                return 1;
        }
        if (dm_image_lookup(image, &img, &err) < 0 || dm_image_require(b, img, true, NULL, &err) < 0) {
                printf("Bail out! %s (run images/build.sh base %s)\n", err.msg, image);
                return 1;
        }

        r = run("echo hi; exit 3", 60, &res, &err);
        is_int(r, 0, "echo hi; exit 3 runs: %s", err.msg);
        is_int(res.exit_code, 3, "exit code 3");
        ok(res.stdout_len == 3 && memcmp(res.stdout_text, "hi\n", 3) == 0, "stdout is 'hi\\n'");
        ok(!res.timed_out && !res.stdout_truncated, "not timed out, not truncated");
        ok(res.run_id && strncmp(res.run_id, "run-", 4) == 0, "run id: %s", res.run_id);
        is_int(file_size(res.output_dir, "stdout.log"), 3, "stdout.log on disk");
        dm_run_result_release(&res);

        r = run("echo out; echo err >&2; echo out2", 60, &res, &err);
        is_int(r, 0, "mixed streams run");
        ok(res.stdout_len == 9 && memcmp(res.stdout_text, "out\nout2\n", 9) == 0, "stdout kept apart");
        ok(res.stderr_len == 4 && memcmp(res.stderr_text, "err\n", 4) == 0, "stderr kept apart");
        is_int(res.exit_code, 0, "exit 0");
        dm_run_result_release(&res);

        r = run("head -c 100000 /dev/urandom > /out/blob; cat /out/blob; sha256sum /out/blob >&2", 60, &res, &err);
        is_int(r, 0, "binary output runs");
        is_int(res.stdout_bytes, 100000, "every binary byte arrived");
        is_int(file_size(res.output_dir, "stdout.log"), 100000, "stdout.log holds all binary bytes");
        snprintf(cmd, sizeof(cmd), "cd '%s' && cmp -s stdout.log blob", res.output_dir);
        is_int(system(cmd), 0, "stdout.log is byte-identical to what the command wrote");
        dm_run_result_release(&res);

        long hwm0 = vm_hwm_kb();
        int64_t t0 = dm_now_ms();
        r = run("head -c 52428800 /dev/zero | tr '\\0' 'x'; echo; echo done >&2", 120, &res, &err);
        long hwm1 = vm_hwm_kb();
        is_int(r, 0, "50 MB of output runs");
        is_int(res.stdout_bytes, 52428801, "all 50 MB counted");
        is_int(file_size(res.output_dir, "stdout.log"), 52428801, "whole 50 MB on disk");
        ok(res.stdout_truncated && res.stdout_len <= 65536 + 200, "result capped at 64 KiB (got %zu)", res.stdout_len);
        ok(res.stdout_text && strstr(res.stdout_text, "bytes omitted") != NULL, "marker line in the capped result");
        ok(hwm1 - hwm0 < 16 * 1024, "peak memory grew by %ld kB for 50 MB of output (< 16 MB)", hwm1 - hwm0);
        diag("50 MB through the runner in %lld ms", (long long)(dm_now_ms() - t0));
        dm_run_result_release(&res);

        t0 = dm_now_ms();
        r = run("echo started; sleep 600 & sleep 600; echo never", 4, &res, &err);
        is_int(r, 0, "timed-out run returns a result");
        ok(res.timed_out, "timed_out is true");
        /* Against a run left to its 600 s; how soon after 4 s is bench/'s. */
        ok(dm_now_ms() - t0 < slack_ms(60000), "killed, not left to run (%lld ms)", (long long)(dm_now_ms() - t0));
        ok(res.stdout_len >= 8 && memcmp(res.stdout_text, "started\n", 8) == 0, "output before the kill kept");
        ok(res.exit_code == 137 || res.exit_code > 128, "exit code says killed (%d)", res.exit_code);
        dm_run_result_release(&res);

        /* A read-only input cannot be written, and the host file is unchanged. */
        snprintf(p, sizeof(p), "%s/data.txt", inputs);
        FILE *f = fopen(p, "w");
        fputs("original\n", f);
        fclose(f);
        const char *files[] = { p, NULL };
        struct dm_run_request req = {
                .image = image,
                .command = "cat /in/data.txt; echo changed > /in/data.txt && echo WROTE; rm -f /in/data.txt && echo "
                           "REMOVED; exit 0",
                .files = files,
                .timeout_s = 60,
        };
        r = dm_run(&ctx, &req, &res, &err);
        is_int(r, 0, "read-only input run: %s", err.msg);
        ok(res.stdout_len >= 9 && memcmp(res.stdout_text, "original\n", 9) == 0, "input readable at /in/<basename>");
        ok(!memmem(res.stdout_text, res.stdout_len, "WROTE", 5), "input cannot be written");
        ok(!memmem(res.stdout_text, res.stdout_len, "REMOVED", 7), "input cannot be removed");
        ok(memmem(res.stderr_text, res.stderr_len, "Read-only file system", 21) != NULL, "error says read-only");
        f = fopen(p, "r");
        char line[64] = "";
        ok(f && fgets(line, sizeof(line), f) && strcmp(line, "original\n") == 0, "host file unchanged");
        if (f)
                fclose(f);
        dm_run_result_release(&res);

        /* Path checks stop the run before any container exists. */
        const char *bad[] = { "/etc/passwd", NULL };
        req.files = bad;
        r = dm_run(&ctx, &req, &res, &err);
        is_int(r, -EACCES, "file outside DEMESNE_ALLOWED_PATHS refused");
        ok(strstr(err.msg, "/etc/passwd") != NULL, "message names the path: %s", err.msg);
        snprintf(p, sizeof(p), "%s/sub", inputs);
        mkdir(p, 0755);
        snprintf(cmd, sizeof(cmd), "%s/data.txt", p);
        close(open(cmd, O_CREAT | O_WRONLY, 0644));
        char first[PATH_MAX + 16];
        snprintf(first, sizeof(first), "%s/data.txt", inputs);
        const char *dup[] = { first, cmd, NULL };
        req.files = dup;
        r = dm_run(&ctx, &req, &res, &err);
        is_int(r, -EEXIST, "duplicate basenames refused");
        ok(strstr(err.msg, "share the name 'data.txt'") != NULL, "message: %s", err.msg);

        struct dm_run_request badimg = { .image = "nope", .command = "true", .timeout_s = 5 };
        r = dm_run(&ctx, &badimg, &res, &err);
        is_int(r, -EINVAL, "unknown image refused");
        ok(strstr(err.msg, "valid images are base, python") != NULL, "message lists images: %s", err.msg);

        /* Cancel mid-run: no result, container removed. */
        struct dm_cancel cancel;
        dm_cancel_init(&cancel);
        struct dm_run_request creq = { .image = image, .command = "sleep 600", .timeout_s = 120, .cancel = &cancel };
        dm_cancel_fire(&cancel);
        t0 = dm_now_ms();
        r = dm_run(&ctx, &creq, &res, &err);
        is_int(r, -ECANCELED, "cancelled run says so");
        /* Not cancelled, the run would last its 120 s timeout. */
        ok(dm_now_ms() - t0 < slack_ms(20000), "cancel ends it before its timeout (%lld ms)",
           (long long)(dm_now_ms() - t0));
        dm_run_result_release(&res);
        dm_cancel_release(&cancel);

        /* Every container of this process is gone once the reaper is done. */
        dm_context_reap_flush(&ctx);
        is_int(count_label(b, ctx.owner_label), 0, "no container left behind (label %s)", ctx.owner_label);

        dm_server_release(&ctx);
        dm_remove_tree(test_root);
        return done_testing();
}
