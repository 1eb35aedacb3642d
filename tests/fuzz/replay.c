/* SPDX-License-Identifier: MIT */
/* Runs a fuzz target without libFuzzer, as a TAP test under `make check`:
 * every file of its seed corpus, then deterministic mutations of each (bit
 * flips, truncations, length bytes set to extremes), so the target's checks
 * run on every build, under ASan and valgrind too. tests/fuzz/run.sh does
 * the real fuzzing with clang's libFuzzer.
 *
 * The program tests/fuzz/test-fuzz-<name> replays the corpus
 * $top_srcdir/tests/fuzz/corpus/<name>, or the directory given as argument:
 * a crash input committed there keeps failing `make check`. */
#include "config.h"

#include <dirent.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"

#define MUTATIONS 200
#define INPUT_MAX (2 * 1024 * 1024)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t rng = 0x9e3779b97f4a7c15u;

static uint64_t next(void)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

static void mutate_and_run(const uint8_t *seed, size_t len)
{
        uint8_t *buf = malloc(len + 1);

        if (!buf)
                return;
        for (int i = 0; i < MUTATIONS; i++) {
                size_t n = len;

                memcpy(buf, seed, len);
                switch (next() % 4) {
                case 0:
                        if (n)
                                buf[next() % n] ^= (uint8_t)(1u << (next() % 8));
                        break;
                case 1: n = n ? next() % n : 0; break;
                case 2:
                        if (n)
                                buf[next() % n] = (next() & 1) ? 0xff : 0x00;
                        break;
                default:
                        if (n > 1)
                                buf[1 + next() % (n - 1)] = (uint8_t)next();
                        break;
                }
                LLVMFuzzerTestOneInput(buf, n);
        }
        free(buf);
}

static int run_file(const char *path)
{
        FILE *f = fopen(path, "rb");
        uint8_t *buf = malloc(INPUT_MAX);
        size_t n;

        if (!f || !buf) {
                if (f)
                        fclose(f);
                free(buf);
                return -1;
        }
        n = fread(buf, 1, INPUT_MAX, f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, n);
        mutate_and_run(buf, n);
        free(buf);
        return 0;
}

int main(int argc, char **argv)
{
        const char *top = getenv("top_srcdir");
        char dir[4096], path[8192];
        struct dirent *de;
        DIR *d;
        int files = 0;

        if (argc > 1) {
                snprintf(dir, sizeof(dir), "%s", argv[1]);
        } else {
                const char *name = basename(argv[0]);

                if (strncmp(name, "test-fuzz-", 10) == 0)
                        name += 10;
                snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s", top ? top : ".", name);
        }
        d = opendir(dir);
        if (!d) {
                ok(0, "open the corpus '%s'", dir);
                return done_testing();
        }
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
                ok(run_file(path) == 0, "%s and %d mutations", de->d_name, MUTATIONS);
                files++;
        }
        closedir(d);
        ok(files > 0, "the corpus has seeds (%d)", files);
        return done_testing();
}
