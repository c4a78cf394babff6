// SPDX-License-Identifier: MIT
// Hugging Face Hub downloads: what `mlxcel download` and every `-m org/name` use.
//
// mx_hub_download brings a repo's files (at a branch, tag or commit) into the hub cache, in the
// layout huggingface_hub uses (hub_cache.h), or into a plain folder (--local-dir, with
// huggingface_hub's .cache/huggingface/download/<file>.metadata records). Files already present
// cost no content request. Settings come from the environment (hub_env.h).
#ifndef MX_HUB_HUB_H
#define MX_HUB_HUB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "core/error.h"

typedef struct mx_hub_download_opts {
    const char *repo;              // "org/name"
    const char *revision;          // branch, tag or commit; NULL: "main"
    const char *const *include;    // NULL-terminated globs (fnmatch); NULL: mx_hub_default_patterns
    const char *local_dir;         // NULL: the hub cache
    FILE *progress;                // progress and notes; NULL: silent
} mx_hub_download_opts;

// The files a model needs, as mlx-lm fetches them: weights, JSON configs, tokenizer files, chat
// templates and text files. NULL-terminated.
extern const char *const mx_hub_default_patterns[];

// Downloads what is missing and writes the folder holding the files (the snapshot, or local_dir)
// into out. With HF_HUB_OFFLINE set, only looks in the cache. When the Hub cannot be reached but
// the revision is cached, uses the cache (with a note).
int mx_hub_download(const mx_hub_download_opts *o, char *out, size_t cap, mx_error *err);

// 0 when repo is an "org/name" Hub repo id; else -1 and why (a usage error for the command line).
int mx_hub_download_check_repo(const char *repo, mx_error *err);

// Looks the repo's revision ("main" when NULL) up in the hub cache without any network: 0 and the
// snapshot folder when it is there and loadable as a model (hub_snapshot_loadable); otherwise -1
// and why (e.g. "no snapshot in /path/models--org--name").
int mx_hub_find_cached_model(const char *repo, const char *revision, char *out, size_t cap, char *why,
                             size_t why_cap);

#endif
