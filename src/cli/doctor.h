/* SPDX-License-Identifier: MIT */
#ifndef DM_DOCTOR_H
#define DM_DOCTOR_H

/* The parts of `demesne doctor` that speak to a person setting demesne up:
 * who runs it, which engine mode, which features work and why not, and the
 * client configuration to paste. Each decision is the server's own
 * (dm_egress_default, dm_vendor_unavailable, the backend's userns). */

#include <stdbool.h>

#include "src/core/context.h"

/* What the check lines report back to cli.c's counters. */
struct dm_doctor_tally {
        int problems;    /* PROBLEM lines */
        int unavailable; /* features the schema advertises that cannot work here */
};

/* "account: root (uid 0)" / "account: alice (uid 1000, not root)". */
void dm_doctor_account(void);
/* "engine mode: rootful Podman" ...; b may be NULL (no engine). */
void dm_doctor_engine_mode(struct dm_backend *b);
/* One line per buildable image: ok when in this engine's store, a note
 * when build.sh and its tools are there to build it (and autobuild is on),
 * else a PROBLEM. */
void dm_doctor_images(struct dm_backend *b, const struct dm_config *cfg, struct dm_doctor_tally *t);
/* Egress, agent tools, user namespaces, seccomp: available or why not. */
void dm_doctor_features(struct dm_context *ctx, struct dm_backend *b, struct dm_doctor_tally *t);
/* Whether the engine pauses and commits (a probe container of the base
 * image, removed after) and whether CRIU works (src/cli/doctor-snapshot.c). */
void dm_doctor_snapshots(struct dm_context *ctx, struct dm_backend *b, struct dm_doctor_tally *t);
/* Claude Code, .mcp.json and Codex configuration for this binary. */
void dm_doctor_client_config(const struct dm_context *ctx);

#endif
