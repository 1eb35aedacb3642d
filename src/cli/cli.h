/* SPDX-License-Identifier: MIT */
#ifndef DM_CLI_H
#define DM_CLI_H

/* The subcommands of the demesne command line; each returns an exit code. */

int dm_cli_serve(int argc, char **argv);
int dm_cli_run(int argc, char **argv);
int dm_cli_doctor(int argc, char **argv);
int dm_cli_images(int argc, char **argv);

#endif
