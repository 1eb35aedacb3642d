/* SPDX-License-Identifier: MIT */
#include "config.h"
#include "src/basic/timeutil.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

static int64_t clock_ms(clockid_t id)
{
        struct timespec ts;

        clock_gettime(id, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t dm_now_ms(void)
{
        return clock_ms(CLOCK_MONOTONIC);
}
int64_t dm_wall_ms(void)
{
        return clock_ms(CLOCK_REALTIME);
}

void dm_monotonic_after(int64_t ms, struct timespec *ret)
{
        clock_gettime(CLOCK_MONOTONIC, ret);
        if (ms < 0)
                ms = 0;
        ret->tv_sec += ms / 1000;
        ret->tv_nsec += (ms % 1000) * 1000000;
        if (ret->tv_nsec >= 1000000000) {
                ret->tv_sec++;
                ret->tv_nsec -= 1000000000;
        }
}

void dm_time_format(int64_t seconds, char *buf, size_t len)
{
        time_t tt = (time_t)seconds;
        struct tm tm;

        if (!gmtime_r(&tt, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
                if (len)
                        buf[0] = '\0';
        }
}

static bool two_digits(const char *p, int *ret)
{
        if (p[0] < '0' || p[0] > '9' || p[1] < '0' || p[1] > '9')
                return false;
        *ret = (p[0] - '0') * 10 + (p[1] - '0');
        return true;
}

int dm_time_parse(const char *s, int64_t *ret)
{
        struct tm tm = { 0 };
        const char *p;
        int oh, om;
        int64_t t;

        if (!s || s[0] < '0' || s[0] > '9' || s[4] != '-' || !(p = strptime(s, "%Y-%m-%d", &tm)) || p - s != 10 ||
            s[7] != '-')
                return -EINVAL;
        if (*p == '\0')
                goto done;
        if (*p != 'T' && *p != 't')
                return -EINVAL;
        /* strptime skips blanks before a number: the digits must be there. */
        if (!two_digits(p + 1, &oh) || p[3] != ':' || !two_digits(p + 4, &om) || p[6] != ':' ||
            !two_digits(p + 7, &oh) || !(p = strptime(p + 1, "%H:%M:%S", &tm)))
                return -EINVAL;
        if (*p == '.') {
                const char *f = ++p;

                while (*p >= '0' && *p <= '9')
                        p++;
                if (p == f)
                        return -EINVAL;
        }
        t = (int64_t)timegm(&tm);
        if (*p == '\0' || ((*p == 'Z' || *p == 'z') && p[1] == '\0')) {
                *ret = t;
                return 0;
        }
        if ((*p != '+' && *p != '-') || !two_digits(p + 1, &oh) || p[3] != ':' || !two_digits(p + 4, &om) ||
            p[6] != '\0' || oh > 23 || om > 59)
                return -EINVAL;
        t += (*p == '+' ? -1 : 1) * ((int64_t)oh * 3600 + om * 60);
        *ret = t;
        return 0;
done:
        *ret = (int64_t)timegm(&tm);
        return 0;
}
