/* SPDX-License-Identifier: MIT */
/* What this server permits, read once at start from the functions that
 * decide behaviour, so that tools/list and the initialize instructions say
 * what a call will actually meet here. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "netpolicy/policy.h"
#include "src/core/egress.h"
#include "src/core/images.h"
#include "src/mcp/registry.h"
#include "src/tools/args.h"
#include "src/tools/tools.h"
#include "src/basic/buf.h"

static void write_instructions(const struct dm_context *ctx, const struct dm_args_facts *f, struct dm_registry *reg)
{
        struct dm_buf b;

        dm_buf_init(&b, 65536);
        dm_buf_printf(&b,
                      "demesne runs shell commands in disposable Linux containers on this machine. Tool families:\n"
                      "- Scripts: sandbox_script runs one command in a fresh container that is removed "
                      "afterwards.\n"
                      "- Persistent sandboxes and file transfer: sandbox_create makes a sandbox that lives across "
                      "calls; sandbox_exec runs commands in it, sandbox_upload / sandbox_download copy files in "
                      "and out, sandbox_destroy removes it, sandbox_list lists sandboxes and jobs.\n"
                      "- Snapshots: sandbox_snapshot keeps a sandbox's files (root and /workspace) so that "
                      "sandbox_create {snapshot_id} starts new sandboxes from them; sandbox_fork {sandbox_id, count} "
                      "snapshots a prepared sandbox once and starts count (up to 8) workers from it; sandbox_pause and "
                      "sandbox_resume freeze and thaw a sandbox's processes.\n"
                      "- Previews: sandbox_expose {sandbox_id, port} serves a port of a sandbox (a web app, a dev "
                      "server) at a host loopback URL for the person to open; it closes with the sandbox.\n"
                      "- Background jobs: pass background: true to sandbox_script, sandbox_exec, sandbox_agent or "
                      "sandbox_research for anything that may take more than a minute or two; the call answers "
                      "{job_id} at once; follow it with sandbox_status, sandbox_wait and sandbox_cancel.\n"
                      "- Images: the image parameter picks the toolchain (base, python, node, go, browser, media, "
                      "twine, webgamedev).\n"
                      "- Agents and research: sandbox_agent hands a task to a coding agent (Claude Code or Codex) "
                      "in a sandbox; sandbox_research hands it a question with open internet access.\n"
                      "Output: /out is the command's working directory and stays on the host as the run "
                      "directory <output root>/<run_id or sandbox_id> (output_dir in each result, with "
                      "stdout.log and stderr.log); this server's output root is %s. A client without that disk "
                      "reads the files as resources: results link them (resource_link, "
                      "demesne://output/<run_id>/<path>) and resources/read returns them. ",
                      ctx ? ctx->cfg.output_root : "DEMESNE_OUTPUT_ROOT");
        if (f->allowed_paths[0])
                dm_buf_printf(&b, "Host files and directories you name (inside %s) are mounted read-only under /in. ",
                              f->allowed_paths);
        else
                dm_buf_printf(&b, "This server mounts no host paths (DEMESNE_ALLOWED_PATHS is unset). ");
        dm_buf_printf(&b, "Egress defaults to %s here%s.", f->egress_default,
                      strcmp(f->egress_default, "none") ? ""
                                                        : "; this server cannot give sandboxes a network, so the agent "
                                                          "tools cannot run here");
        dm_registry_set_instructions(reg, b.data);
        dm_buf_release(&b);
}

/* Which tool images this engine's store holds, and what a call naming a
 * missing one meets: a build on first use (dm_image_require), or a refusal
 * when autobuild is off or build.sh is not there. */
static char *describe_images(struct dm_context *ctx)
{
        struct dm_backend *b;
        struct dm_error err = { 0 };
        struct dm_buf built, missing;
        const char *dir = dm_images_dir();
        char script[4096];
        char *text = NULL;

        if (!ctx || dm_context_backend(ctx, &b, &err) < 0 || !dm_backend_can(b, DM_CAP_IMAGES))
                return NULL;
        dm_buf_init(&built, 4096);
        dm_buf_init(&missing, 4096);
        for (size_t i = 0; i < dm_images_count; i++) {
                bool exists = false;

                if (!dm_images[i].tool_image)
                        continue;
                if (b->ops->image_exists(b, dm_image_ref(&dm_images[i]), &exists, &err) < 0)
                        goto out;
                dm_buf_printf(exists ? &built : &missing, "%s%s", (exists ? built.len : missing.len) ? ", " : "",
                              dm_images[i].name);
        }
        snprintf(script, sizeof(script), "%s/build.sh", dir ? dir : "");
        {
                struct dm_buf t;

                dm_buf_init(&t, 16384);
                dm_buf_printf(&t, "Built on this server: %s.", built.len ? built.data : "none");
                if (missing.len) {
                        if (!ctx->cfg.images_autobuild)
                                dm_buf_printf(&t, " Not built, and refused here (DEMESNE_IMAGES_AUTOBUILD=0): %s.",
                                              missing.data);
                        else if (!dir || access(script, X_OK) < 0)
                                dm_buf_printf(&t, " Not built, and refused here (no images/build.sh): %s.",
                                              missing.data);
                        else
                                dm_buf_printf(&t, " Not built yet, built on first use (minutes): %s.", missing.data);
                }
                text = t.data;
        }
out:
        dm_buf_release(&built);
        dm_buf_release(&missing);
        return text;
}

/* Why no agent run can reach its vendor proxy here, or NULL: locally it
 * needs the sandbox's network (a networked egress default says there is
 * one), remotely the remote listener. */
static const char *agents_why(struct dm_context *ctx, const char *egress_default)
{
        struct dm_error err = { 0 };
        struct dm_backend *b;

        if (ctx && dm_context_backend(ctx, &b, &err) == 0 && !dm_backend_can(b, DM_CAP_HOST_NETNS))
                return ctx->cfg.remote_listen ? NULL
                                              : "its sandboxes are not on this host, and reach the vendor proxy only "
                                                "through a remote listener (DEMESNE_REMOTE_LISTEN), which is not set";
        if (strcmp(egress_default, "none") == 0)
                return "it cannot set sandbox networks up, and the agent reaches its model API only over one "
                       "(`demesne doctor` says why)";
        return NULL;
}

void dm_tools_configure(struct dm_context *ctx, struct dm_registry *reg)
{
        char *images;
        struct dm_egress_offer offer = { .none = true };
        struct dm_args_facts f = {
                .egress_default = ctx ? dm_egress_default(ctx) : "none",
                .caller_egress = ctx && ctx->cfg.allow_caller_egress,
                .allowed_paths = ctx && ctx->roots.n ? ctx->cfg.allowed_paths : "",
                .login_files = { ctx ? ctx->cfg.claude_credentials : NULL, ctx ? ctx->cfg.codex_auth : NULL },
                .vendor_env = ctx ? &ctx->cfg.vendor_env : NULL,
        };

        f.agents_why = agents_why(ctx, f.egress_default);
        if (ctx) {
                dm_egress_offer(ctx, &offer);
                f.offer = &offer;
        }
        images = describe_images(ctx);
        f.images = images;
        write_instructions(ctx, &f, reg);
        dm_tools_register_all(reg, &f);
        free(images);
}
