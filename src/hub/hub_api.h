// SPDX-License-Identifier: MIT
// The Hub's HTTP protocol, as huggingface_hub speaks it:
//   GET  {endpoint}/api/models/{repo}/revision/{revision}   -> {"sha": commit, "siblings": [{"rfilename"}]}
//   HEAD {endpoint}/{repo}/resolve/{commit}/{file}          -> X-Repo-Commit, ETag or X-Linked-Etag
//        (LFS: the sha256), X-Linked-Size or Content-Length, and for LFS files a redirect (Location)
//        to a storage host, which is where the content is fetched from, without the token.
// Relative redirects (a renamed repo) are followed. HTTP errors become messages naming the cause.
#ifndef MX_HUB_API_H
#define MX_HUB_API_H

#include <stdint.h>

#include "core/error.h"
#include "hub/hub_env.h"

typedef struct hub_revision {
    char commit[41];
    char **files;  // repo-relative paths, as the Hub lists them
    int n_files;
} hub_revision;

typedef struct hub_file_meta {
    char commit[41];
    char etag[256];       // blob name in the cache; a 64-hex etag is the content's sha256 (LFS)
    int64_t size;
    char url[4096];       // where to GET the content
} hub_file_meta;

// Which request failed, for messages.
typedef struct hub_what {
    const char *repo, *revision, *file;  // file NULL for the revision request
} hub_what;

int hub_api_revision(const mx_hub_env *env, const char *repo, const char *revision, hub_revision *out,
                     mx_error *err);
void hub_revision_free(hub_revision *rev);
int hub_api_file_meta(const mx_hub_env *env, const char *repo, const char *commit, const char *file,
                      hub_file_meta *out, mx_error *err);

// Percent-encodes s for a URL path; keeps '/' when keep_slash.
void hub_url_escape(const char *s, int keep_slash, char *out, size_t cap);

#endif
