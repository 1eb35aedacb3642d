/* SPDX-License-Identifier: MIT */
/* Skills over MCP: loading, frontmatter rules, digests, what is skipped. */
#include "config.h"

#include <errno.h>
#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/mcp/skills.h"
#include "tests/tap.h"

static char root[] = "/tmp/dm-skills-XXXXXX";

static void put(const char *rel, const char *text)
{
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", root, rel);
        f = fopen(path, "w");
        if (!f || fputs(text, f) < 0) {
                printf("Bail out! write %s\n", path);
                exit(1);
        }
        fclose(f);
}

static void dir(const char *rel)
{
        char path[512];

        snprintf(path, sizeof(path), "%s/%s", root, rel);
        mkdir(path, 0755);
}

static const char *str(json_object *o, const char *key)
{
        json_object *v;

        return o && json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

int main(void)
{
        static const char good[] = "---\nname: good-one\ndescription: Does a thing, well\n---\n\n# Good\n";
        struct dm_skills *s = NULL;
        struct dm_error err = { 0 };
        json_object *list, *e, *files, *c;
        char want[8 + 64 + 1], path[512];

        if (!mkdtemp(root)) {
                printf("Bail out! mkdtemp\n");
                return 1;
        }
        dir("good-one");
        dir("good-one/refs");
        put("good-one/SKILL.md", good);
        put("README.md", "a file beside the skills is not one\n");
        put("good-one/refs/NOTES.txt", "notes\n");
        put("good-one/.hidden", "not part of it\n");
        snprintf(path, sizeof(path), "%s/good-one/link.md", root);
        symlink("/etc/passwd", path);
        dir("Bad_Name");
        put("Bad_Name/SKILL.md", "---\nname: Bad_Name\ndescription: x\n---\n");
        dir("mismatch");
        put("mismatch/SKILL.md", "---\nname: other\ndescription: x\n---\n");
        dir("no-manifest");
        put("no-manifest/README.md", "hello\n");
        dir("quoted");
        put("quoted/SKILL.md", "---\nname: quoted\ndescription: \"a quoted value\"\n---\n");
        dir("no-description");
        put("no-description/SKILL.md", "---\nname: no-description\n---\n");
        dir("unclosed");
        put("unclosed/SKILL.md", "---\nname: unclosed\ndescription: x\n");

        is_int(dm_skills_load(root, &s, &err), 0, "load a folder of skills (%s)", err.msg);
        is_int((int)dm_skills_count(s), 1, "only the good one is served; the others are skipped with a warning");
        list = dm_skills_list(s);
        e = json_object_array_get_idx(list, 0);
        is_str(str(e, "uri"), "skill://good-one/SKILL.md", "its uri is skill://<name>/SKILL.md");
        is_str(str(json_object_object_get(e, "frontmatter"), "description"), "Does a thing, well",
               "its frontmatter is the file's");
        files = json_object_object_get(e, "resources");
        is_int((int)json_object_array_length(files), 2, "two files: no hidden file, no symlink");
        is_str(str(json_object_array_get_idx(files, 0), "uri"), "skill://good-one/SKILL.md", "SKILL.md first");
        is_str(str(json_object_array_get_idx(files, 1), "uri"), "skill://good-one/refs/NOTES.txt",
               "then the other files by path");
        {
                struct sha256_ctx sha;
                uint8_t d[SHA256_DIGEST_SIZE];

                sha256_init(&sha);
                sha256_update(&sha, strlen(good), (const uint8_t *)good);
                sha256_digest(&sha, sizeof(d), d);
                memcpy(want, "sha256:", 7);
                for (size_t i = 0; i < sizeof(d); i++)
                        snprintf(want + 7 + 2 * i, 3, "%02x", d[i]);
        }
        is_str(str(json_object_array_get_idx(files, 0), "digest"), want, "the digest is sha256:<hex> of the bytes");
        is_int(json_object_get_int(json_object_object_get(json_object_array_get_idx(files, 0), "size")),
               (int)strlen(good), "and the size their count");
        json_object_put(list);

        /* The file is served from memory: what was digested. */
        put("good-one/SKILL.md", "changed on disk\n");
        c = dm_skills_read(s, "skill://good-one/SKILL.md");
        e = json_object_array_get_idx(c, 0);
        ok(strcmp(str(e, "text"), good) == 0 && strcmp(str(e, "mimeType"), "text/markdown") == 0,
           "resources/read gives the bytes read at start, as text/markdown");
        json_object_put(c);
        c = dm_skills_read(s, "skill://good-one/refs/NOTES.txt");
        is_str(str(json_object_array_get_idx(c, 0), "mimeType"), "text/plain", "another file has its own type");
        json_object_put(c);
        ok(dm_skills_read(s, "skill://good-one/link.md") == NULL, "a symlink is not served");
        ok(dm_skills_read(s, "skill://good-one/../mismatch/SKILL.md") == NULL, "nor a path that climbs");

        e = dm_skills_get(s, "skill://good-one/SKILL.md");
        is_str(str(e, "uri"), "skill://good-one/SKILL.md", "skills/get finds the entry by its uri");
        json_object_put(e);
        ok(dm_skills_get(s, "skill://mismatch/SKILL.md") == NULL, "a skipped skill is unknown");
        list = dm_skills_resources(s);
        e = json_object_array_get_idx(list, 0);
        ok(strcmp(str(e, "name"), "good-one") == 0 && strcmp(str(e, "description"), "Does a thing, well") == 0 &&
                   strcmp(str(e, "mimeType"), "text/markdown") == 0,
           "resources/list names the manifest with the frontmatter's name and description");
        json_object_put(list);
        dm_skills_free(s);

        s = NULL;
        is_int(dm_skills_load("/nonexistent/skills", &s, &err), 0, "a missing folder is no error");
        is_int((int)dm_skills_count(s), 0, "and serves no skill");
        dm_skills_free(s);

        {
                char cmd[600];
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
                if (system(cmd) != 0)
                        diag("could not remove %s", root);
        }
        return done_testing();
}
