/* SPDX-License-Identifier: MIT */
/* Run outputs as resources: URIs, ownership, links, reads, hostile paths. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "src/core/resources.h"
#include "src/basic/base64.h"
#include "src/basic/uri.h"
#include "tests/tap.h"

static char root[] = "/tmp/dm-res-XXXXXX";

static void put(const char *rel, const void *data, size_t len)
{
        char path[512];
        FILE *f;

        snprintf(path, sizeof(path), "%s/%s", root, rel);
        f = fopen(path, "w");
        if (!f || fwrite(data, 1, len, f) != len) {
                printf("Bail out! write %s\n", path);
                exit(1);
        }
        fclose(f);
}

static const char *field(json_object *o, const char *key)
{
        json_object *v;

        return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

/* Reads uri as principal: the content object's key ("text"/"blob"), or
 * the error's errno. */
static int read_as(struct dm_resources *res, const char *principal, const char *uri, json_object **ret)
{
        struct dm_error err = { 0 };
        json_object *contents = NULL;
        int r = dm_resources_read(res, root, principal, uri, &contents, &err);

        *ret = r == 0 ? json_object_get(json_object_array_get_idx(contents, 0)) : NULL;
        json_object_put(contents);
        return r;
}

int main(void)
{
        struct dm_resources *res = dm_resources_new();
        json_object *links, *o, *list;
        size_t omitted;
        char path[512], *uri;
        int r;

        if (!mkdtemp(root)) {
                printf("Bail out! mkdtemp\n");
                return 1;
        }
        snprintf(path, sizeof(path), "%s/run-a", root);
        mkdir(path, 0700);
        snprintf(path, sizeof(path), "%s/run-a/sub dir", root);
        mkdir(path, 0700);
        snprintf(path, sizeof(path), "%s/run-b", root);
        mkdir(path, 0700);
        put("run-a/hello.txt", "hello\n", 6);
        put("run-a/sub dir/100%.csv", "a,b\n", 4);
        put("run-a/bin.png", "\x89PNG\0\x01\x02", 7);
        put("secret.txt", "not yours\n", 10);
        put("run-b/other.txt", "theirs\n", 7);
        snprintf(path, sizeof(path), "%s/run-a/link", root);
        symlink("../secret.txt", path);
        snprintf(path, sizeof(path), "%s/run-a/fifo", root);
        mkfifo(path, 0600);

        /* URIs: each segment percent-encoded, the slashes kept. */
        uri = dm_uri_make(DM_RESOURCE_SCHEME, "run-a", "sub dir/100%.csv");
        is_str(uri, "demesne://output/run-a/sub%20dir/100%25.csv", "a URI encodes blanks and %% per segment");
        free(uri);
        /* The engine paths' escape (backends): '/' and ':' kept on request only. */
        uri = dm_uri_escape("localhost/demesne/base:latest", "/:");
        is_str(uri, "localhost/demesne/base:latest", "an image reference keeps its slashes and colon");
        free(uri);
        uri = dm_uri_escape("{\"label\":[\"a=b c/d\"]}", "");
        is_str(uri, "%7B%22label%22%3A%5B%22a%3Db%20c%2Fd%22%5D%7D", "a filter: every reserved byte encoded");
        free(uri);
        uri = dm_uri_escape("", "");
        is_str(uri, "", "the empty string: an empty string, not NULL");
        free(uri);
        is_str(dm_mime_type("x/report.JSON"), "application/json", "a MIME type from the extension, any case");
        is_str(dm_mime_type("Makefile"), "application/octet-stream", "no extension: octet-stream");

        /* Links: regular files only, sorted by path. */
        links = dm_resources_links(root, "run-a", DM_RESOURCE_LINKS_MAX, &omitted);
        is_int((int)json_object_array_length(links), 3, "links name the three regular files (no link, no FIFO)");
        o = json_object_array_get_idx(links, 0);
        is_str(field(o, "type"), "resource_link", "each is a resource_link");
        is_str(field(o, "uri"), "demesne://output/run-a/bin.png", "sorted by path: bin.png first");
        is_str(field(o, "mimeType"), "image/png", "with its MIME type");
        is_str(field(o, "size"), "7", "and its size");
        is_str(field(json_object_array_get_idx(links, 2), "name"), "100%.csv", "the name is the base name");
        is_int((int)omitted, 0, "nothing omitted");
        json_object_put(links);
        links = dm_resources_links(root, "run-a", 1, &omitted);
        ok(json_object_array_length(links) == 1 && omitted == 2, "a cap keeps max links and counts the rest");
        json_object_put(links);
        links = dm_resources_links(root, "../", 5, &omitted);
        is_int((int)json_object_array_length(links), 0, "no links for a directory name that climbs");
        json_object_put(links);

        /* Reads: only the principal that claimed the directory. */
        r = read_as(res, "alice", "demesne://output/run-a/hello.txt", &o);
        is_int(r, -ENOENT, "an unclaimed directory is not served");
        dm_resources_claim(res, "run-a", "alice");
        dm_resources_claim(res, "run-b", "bob");
        r = read_as(res, "alice", "demesne://output/run-a/hello.txt", &o);
        ok(r == 0 && strcmp(field(o, "text"), "hello\n") == 0 && strcmp(field(o, "mimeType"), "text/plain") == 0,
           "its owner reads a text file as text");
        json_object_put(o);
        r = read_as(res, "alice", "demesne://output/run-a/sub%20dir/100%25.csv", &o);
        ok(r == 0 && strcmp(field(o, "text"), "a,b\n") == 0 && strcmp(field(o, "mimeType"), "text/csv") == 0,
           "an encoded path reads back");
        json_object_put(o);
        r = read_as(res, "alice", "demesne://output/run-a/bin.png", &o);
        {
                size_t n = 0;
                char *bytes = NULL;
                if (r == 0 && field(o, "blob"))
                        dm_base64_decode(field(o, "blob"), strlen(field(o, "blob")), &bytes, &n);
                ok(bytes && n == 7 && memcmp(bytes, "\x89PNG\0\x01\x02", 7) == 0 && !field(o, "text"),
                   "binary bytes come back as a base64 blob");
                free(bytes);
        }
        json_object_put(o);
        is_int(read_as(res, "bob", "demesne://output/run-a/hello.txt", &o), -ENOENT,
               "another principal gets not found, as for a missing file");
        is_int(read_as(res, "alice", "demesne://output/run-b/other.txt", &o), -ENOENT,
               "and the owner of one directory cannot read another's");
        is_int(read_as(res, "bob", "demesne://output/run-b/other.txt", &o), 0, "bob reads his own");
        json_object_put(o);

        /* Hostile URIs. */
        static const char *const bad[] = {
                "file:///etc/passwd",
                "demesne://output/run-a",
                "demesne://output/run-a/",
                "demesne://output/../secret.txt",
                "demesne://output/run-a/../secret.txt",
                "demesne://output/run-a/%2E%2E/secret.txt",
                "demesne://output/run-a/sub%2F..%2F..%2Fsecret.txt",
                "demesne://output/run-a/hello.txt%00.png",
                "demesne://output/run-a/hello.txt?x=1",
                "demesne://output/run-a//hello.txt",
                "demesne://output/run-a/%zz",
                "demesne://output/%2E%2E/secret.txt",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
                is_int(read_as(res, "alice", bad[i], &o), -EINVAL, "refused as malformed: %s", bad[i]);
        is_int(read_as(res, "alice", "demesne://output/run-a/link", &o), -ENOENT, "a symlink is not followed");
        is_int(read_as(res, "alice", "demesne://output/run-a/fifo", &o), -ENOENT, "a FIFO is not opened");
        is_int(read_as(res, "alice", "demesne://output/run-a/nope.txt", &o), -ENOENT, "a missing file: not found");
        {
                char *big = calloc(1, DM_RESOURCE_READ_MAX + 1);
                memset(big, 'x', DM_RESOURCE_READ_MAX + 1);
                put("run-a/big.txt", big, DM_RESOURCE_READ_MAX + 1);
                free(big);
        }
        is_int(read_as(res, "alice", "demesne://output/run-a/big.txt", &o), -EFBIG, "over the cap: -EFBIG");

        /* The list: the principal's own files only. */
        list = dm_resources_list(res, root, "bob");
        ok(json_object_array_length(list) == 1 &&
                   strcmp(field(json_object_array_get_idx(list, 0), "uri"), "demesne://output/run-b/other.txt") == 0 &&
                   !field(json_object_array_get_idx(list, 0), "type"),
           "resources/list gives bob his one file");
        json_object_put(list);
        list = dm_resources_list(res, root, "carol");
        is_int((int)json_object_array_length(list), 0, "and carol nothing");
        json_object_put(list);

        /* Claims are bounded: the oldest go first. */
        for (int i = 0; i < DM_RESOURCE_CLAIMS_MAX; i++) {
                char name[32];
                snprintf(name, sizeof(name), "run-x%d", i);
                dm_resources_claim(res, name, "alice");
        }
        ok(!dm_resources_owned(res, "run-a", "alice") && dm_resources_owned(res, "run-x0", "alice"),
           "past %d claims the oldest is forgotten", DM_RESOURCE_CLAIMS_MAX);
        dm_resources_claim(res, "a/b", "alice");
        ok(!dm_resources_owned(res, "a/b", "alice"), "a name with a slash is never claimed");

        dm_resources_free(res);
        {
                char cmd[600];
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
                if (system(cmd) != 0)
                        diag("could not remove %s", root);
        }
        return done_testing();
}
