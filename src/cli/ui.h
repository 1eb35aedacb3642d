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

#include "src/basic/error.h"

struct ui;
struct dm_context;

/* What the API reads: the state directory (journals) and output root; ctx
 * is the server it runs in (`serve --http`), whose own jobs and sandboxes
 * it acts on in-process; NULL in `demesne ui`, which asks each one's
 * server through its control socket (src/core/control.h). */
struct ui_paths {
        const char *state_dir;
        const char *output_root;
        struct dm_context *ctx;
};

/* The JSON API under /ui/api/v1/ (src/cli/ui-api.c): path is what follows
 * "/ui/api/v1/" (raw, not unescaped). Answers on c; false when the path
 * names nothing (the caller answers 404). */
bool dm_ui_api(const struct ui_paths *p, struct MHD_Connection *c, const char *method, const char *path,
               enum MHD_Result *ret);

/* POST runs/{id}/cancel and runs/{id}/destroy (src/cli/ui-act.c): the
 * run's server (its journal's pid) ends the job or the sandbox, in-process
 * when that is p->ctx's, else through its control socket. op is "cancel"
 * or "destroy"; id is valid (dm_activity_id_valid). */
enum MHD_Result dm_ui_act(const struct ui_paths *p, struct MHD_Connection *c, const char *id, const char *op);

/* Adds the headers every answer has (CSP, nosniff, no referrer, no
 * framing, no caching) and queues r with status; r is destroyed. */
enum MHD_Result dm_ui_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r);
/* A JSON answer (v taken) or {"error": msg}. */
enum MHD_Result dm_ui_json(struct MHD_Connection *c, unsigned status, json_object *v);
enum MHD_Result dm_ui_error(struct MHD_Connection *c, unsigned status, const char *msg);

/* The SSE streams at once; more get 429. */
#define DM_UI_MAX_STREAMS 16
/* How long a stream waits for a change in the journals' folder (inotify)
 * before it looks again anyway (stopping, keepalives, no inotify). */
#define DM_UI_POLL_MS 250

/* Ends every event stream at its next look (the server is stopping). */
void dm_ui_api_stop(void);

/* The page and API inside `serve --http` (src/mcp/http.c calls
 * dm_ui_handle for every request under /ui/): the HTTP server has checked
 * Host already, the Origin must be http://<Host>, and bearer_ok says
 * whether the request's Authorization carried one of serve's tokens; the
 * login code's sessions are the view's own. Made with a fresh login code,
 * whose URL dm_ui_embed_print writes to stdout once the port is known. */
int dm_ui_embed_new(const struct ui_paths *p, const char *ui_dir, struct ui **ret, struct dm_error *err);
void dm_ui_embed_print(struct ui *u, const char *host, unsigned port);
void dm_ui_free(struct ui *u);
/* One call of MHD's access handler for u; con_cls is the request's own. */
enum MHD_Result dm_ui_handle(struct ui *u, struct MHD_Connection *c, const char *url, const char *method,
                             size_t *upload_size, void **con_cls, bool bearer_ok);

int dm_cli_ui(int argc, char **argv);

#endif
