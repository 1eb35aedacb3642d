/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "src/core/context.h"
#include "tests/tap.h"

/* The owner label value for a pid, as a server with that pid would write it. */
static void owner_of(pid_t pid, const char *boot, char *buf, size_t len)
{
        char path[64], stat[1024];
        unsigned long long start = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        f = fopen(path, "re");
        if (f && fgets(stat, sizeof(stat), f)) {
                char *p = strrchr(stat, ')');
                int field = 2;
                for (; p && *p && field < 22; p++)
                        if (*p == ' ')
                                field++;
                start = p ? strtoull(p, NULL, 10) : 0;
        }
        if (f)
                fclose(f);
        snprintf(buf, len, "%s-%d-%llu", boot, (int)pid, start);
}

int main(void)
{
        char me[96], child_owner[96], boot[9] = "", line[64];
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

        if (!f || !fgets(line, sizeof(line), f))
                return skip_all("no /proc/sys/kernel/random/boot_id");
        fclose(f);
        memcpy(boot, line, 8);
        owner_of(getpid(), boot, me, sizeof(me));

        ok(dm_owner_alive(me, me), "this process is alive");

        pid_t child = fork();
        if (child == 0) {
                pause();
                _exit(0);
        }
        owner_of(child, boot, child_owner, sizeof(child_owner));
        ok(dm_owner_alive(child_owner, me), "a running child is alive");
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        ok(!dm_owner_alive(child_owner, me), "a killed child is dead");

        char reused[128];
        snprintf(reused, sizeof(reused), "%s-%d-1", boot, (int)getpid());
        ok(!dm_owner_alive(reused, me), "same pid, other start time: dead (pid reuse)");
        char rebooted[128];
        snprintf(rebooted, sizeof(rebooted), "%s-%d-%s", boot[0] == 'a' ? "bbbbbbbb" : "aaaaaaaa", (int)getpid(),
                 strrchr(me, '-') + 1);
        ok(!dm_owner_alive(rebooted, me), "another boot id: dead (made before a reboot)");
        ok(dm_owner_alive("not-an-owner", me), "a label it cannot parse is left alone");
        return done_testing();
}
