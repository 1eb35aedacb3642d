/* SPDX-License-Identifier: MIT */
/* What a sandbox behind the egress proxy is told: the proxy variables that
 * curl, wget, Python, Node and Go read, and the settings of apt, pip, npm and
 * git, which each have their own. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netpolicy/proxy.h"
#include "src/basic/cleanup.h"

static void proxy_url(const struct sockaddr_in *addr, char *buf, size_t len)
{
        char a[INET_ADDRSTRLEN];

        inet_ntop(AF_INET, &addr->sin_addr, a, sizeof(a));
        snprintf(buf, len, "http://%s:%u", a, ntohs(addr->sin_port));
}

int dm_proxy_env(const struct sockaddr_in *addr, char ***ret)
{
        static const char *const url_vars[] = {
                "HTTP_PROXY",         "http_proxy",       "HTTPS_PROXY",
                "https_proxy",        "ALL_PROXY",        "all_proxy",
                "PIP_PROXY",          "npm_config_proxy", "npm_config_https_proxy",
                "GIT_CONFIG_VALUE_0",
        };
        static const char *const fixed[] = {
                /* Loopback inside the sandbox is the sandbox's own. */
                "NO_PROXY=localhost,127.0.0.1",
                "no_proxy=localhost,127.0.0.1",
                "GIT_CONFIG_COUNT=1",
                "GIT_CONFIG_KEY_0=http.proxy",
        };
        size_t n = DM_ARRAY_SIZE(url_vars) + DM_ARRAY_SIZE(fixed), k = 0;
        char url[64], **env = calloc(n + 1, sizeof(*env));

        if (!env)
                return -ENOMEM;
        proxy_url(addr, url, sizeof(url));
        for (size_t i = 0; i < DM_ARRAY_SIZE(url_vars); i++)
                if (asprintf(&env[k++], "%s=%s", url_vars[i], url) < 0)
                        goto oom;
        for (size_t i = 0; i < DM_ARRAY_SIZE(fixed); i++)
                if (!(env[k++] = strdup(fixed[i])))
                        goto oom;
        *ret = env;
        return 0;
oom:
        env[k - 1] = NULL; /* asprintf leaves it undefined on failure */
        dm_proxy_env_free(env);
        return -ENOMEM;
}

void dm_proxy_env_free(char **env)
{
        for (size_t i = 0; env && env[i]; i++)
                free(env[i]);
        free(env);
}

char *dm_proxy_apt_conf(const struct sockaddr_in *addr)
{
        char url[64], *conf;

        proxy_url(addr, url, sizeof(url));
        if (asprintf(&conf, "Acquire::http::Proxy \"%s\";\nAcquire::https::Proxy \"%s\";\n", url, url) < 0)
                return NULL;
        return conf;
}
