/* SPDX-License-Identifier: MIT */
#ifndef DM_SKILLS_H
#define DM_SKILLS_H

/* Agent Skills served over MCP (the io.modelcontextprotocol/skills
 * extension, SEP-2640): skills/list, skills/get, and each skill's files as
 * skill://<name>/<path> resources.
 *
 * A skill is a folder holding SKILL.md, whose frontmatter (between "---"
 * lines, "key: value" lines of plain strings) names it and says what it is
 * for; its name must be the folder's name (lowercase letters, digits and
 * single hyphens). The folders are read once, at start: every file is kept
 * in memory with its SHA-256 digest, so what resources/read returns is
 * exactly what skills/list described. Symlinks and other non-regular files
 * are skipped; a folder that breaks a rule is skipped with a warning. */

#include <json-c/json.h>
#include <stddef.h>

#include "src/basic/error.h"

#define DM_SKILLS_EXTENSION "io.modelcontextprotocol/skills"
#define DM_SKILL_FILES_MAX 512        /* per skill (the extension's limit) */
#define DM_SKILL_BYTES_MAX (16 << 20) /* per skill (the extension's limit) */

struct dm_skills;

/* Loads every skill below dir. A missing dir gives an empty set (0). */
int dm_skills_load(const char *dir, struct dm_skills **ret, struct dm_error *err);
void dm_skills_free(struct dm_skills *s);
size_t dm_skills_count(const struct dm_skills *s);

/* skills/list's entries: [{uri, frontmatter, resources: [{uri, digest, size}]}]. */
json_object *dm_skills_list(const struct dm_skills *s);
/* One entry, by its SKILL.md URI; NULL when no skill has it. */
json_object *dm_skills_get(const struct dm_skills *s, const char *uri);
/* resources/list entries for the SKILL.md files: uri, name and description
 * from the frontmatter, mimeType text/markdown. */
json_object *dm_skills_resources(const struct dm_skills *s);
/* resources/read contents for a skill file; NULL when no skill has it. */
json_object *dm_skills_read(const struct dm_skills *s, const char *uri);

/* Where the skills are: $DEMESNE_SKILLS_DIR (given as dir_setting), else
 * the installed pkgdatadir/skills, else the source tree's examples/skills. */
const char *dm_skills_dir(const char *dir_setting);

#endif
