/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "src/cli/cli.h"
#include "src/cli/ui.h"

#if defined(__SANITIZE_THREAD__)
/* ThreadSanitizer builds only: the one benign report, explained in
 * tests/tsan.supp. Compiled in because MCP clients start the server with
 * an environment of their own choosing, where TSAN_OPTIONS would not reach. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
        return "race:dm_curl_mark_pairs_cloexec\n";
}
#endif

static const char usage[] = "Usage: demesne COMMAND [OPTIONS]\n"
                            "\n"
                            "Runs risky work in disposable Linux containers for AI agents (an MCP server).\n"
                            "\n"
                            "Commands:\n"
                            "  serve [--http [ADDR:]PORT]  speak MCP over stdio (what an MCP client starts), or HTTP\n"
                            "  run [OPTIONS] -- CMD  run one command in a fresh sandbox; exit with its code\n"
                            "  doctor                check the container engine, images and privileges\n"
                            "  images build [NAME...|--all] [--force]   build images from Debian packages\n"
                            "  images list           show each image and whether it is built\n"
                            "  ui [--listen [ADDR:]PORT]  the activity view in a browser (loopback)\n"
                            "\n"
                            "Options:\n"
                            "  -h, --help            this text (COMMAND --help for a command's options)\n"
                            "  -V, --version         the version\n"
                            "\n"
                            "Environment: DEMESNE_OUTPUT_ROOT, DEMESNE_ALLOWED_PATHS, DEMESNE_ENGINE_HOST,\n"
                            "DOCKER_HOST, CONTAINER_HOST and more; see demesne(1).\n";

int main(int argc, char **argv)
{
        /* A client that goes away must not kill us mid-cleanup: writes to a
         * closed pipe fail with EPIPE instead. */
        signal(SIGPIPE, SIG_IGN);

        if (argc < 2) {
                fputs(usage, stderr);
                return 2;
        }
        if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
                fputs(usage, stdout);
                return 0;
        }
        if (strcmp(argv[1], "-V") == 0 || strcmp(argv[1], "--version") == 0) {
                printf("demesne %s\n", PACKAGE_VERSION);
                return 0;
        }
        if (strcmp(argv[1], "serve") == 0)
                return dm_cli_serve(argc - 1, argv + 1);
        if (strcmp(argv[1], "run") == 0)
                return dm_cli_run(argc - 1, argv + 1);
        if (strcmp(argv[1], "doctor") == 0)
                return dm_cli_doctor(argc - 1, argv + 1);
        if (strcmp(argv[1], "images") == 0)
                return dm_cli_images(argc - 1, argv + 1);
        if (strcmp(argv[1], "ui") == 0)
                return dm_cli_ui(argc - 1, argv + 1);
        fprintf(stderr, "demesne: unknown command '%s'\n\n%s", argv[1], usage);
        return 2;
}
