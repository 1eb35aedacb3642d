/* SPDX-License-Identifier: MIT */
#ifndef DM_CLI_UI_H
#define DM_CLI_UI_H

/* `demesne ui`: the activity view (docs/reference/ui.md) over this user's
 * run journals (src/core/activity.h) and output root.
 *
 * Who may look: the holder of the one-time login code the command prints
 * (GET /ui/login?code=... sets an HttpOnly, SameSite=Strict cookie holding
 * a random session secret; the code works once), or of the bearer token
 * (made like `serve --http`'s, or DEMESNE_HTTP_TOKEN[_FILE]). Everything
 * else is 401. Host is checked (DNS rebinding); a request that carries an
 * Origin other than the page's own is refused (403), and a POST or DELETE
 * must carry the page's own. Every answer has a strict
 * Content-Security-Policy and nosniff; files from a run's output are
 * text/plain or raster images inline, everything else an attachment. */

#include <json-c/json.h>
#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>

struct ui;

/* What the API reads: the state directory (journals) and output root. */
struct ui_paths {
        const char *state_dir;
        const char *output_root;
};

/* The JSON API under /ui/api/v1/ (src/cli/ui-api.c): path is what follows
 * "/ui/api/v1/" (raw, not unescaped). Answers on c; false when the path
 * names nothing (the caller answers 404). */
bool dm_ui_api(const struct ui_paths *p, struct MHD_Connection *c, const char *method, const char *path,
               enum MHD_Result *ret);

/* Adds the headers every answer has (CSP, nosniff, no referrer, no
 * framing, no caching) and queues r with status; r is destroyed. */
enum MHD_Result dm_ui_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r);
/* A JSON answer (v taken) or {"error": msg}. */
enum MHD_Result dm_ui_json(struct MHD_Connection *c, unsigned status, json_object *v);
enum MHD_Result dm_ui_error(struct MHD_Connection *c, unsigned status, const char *msg);

/* The SSE streams at once; more get 429. */
#define DM_UI_MAX_STREAMS 16
/* How often a stream looks for new journal lines. */
#define DM_UI_POLL_MS 250

/* Ends every event stream at its next look (the server is stopping). */
void dm_ui_api_stop(void);

int dm_cli_ui(int argc, char **argv);

#endif
