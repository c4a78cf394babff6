// SPDX-License-Identifier: MIT
// The parts of hub.h that need no network: the default file set, the repo id check and the
// cache lookup behind `-m org/name`. Built into every configuration, with or without libcurl.
#include "hub/hub.h"

#include <stdio.h>

#include "hub/hub_cache.h"
#include "hub/hub_env.h"

const char *const mx_hub_default_patterns[] = {
    "*.safetensors", "*.json", "*.jinja", "*.txt", "tokenizer.model", "*.tiktoken", "tiktoken.model", NULL,
};

int mx_hub_download_check_repo(const char *repo, mx_error *err) { return hub_check_repo_id(repo, err); }

int mx_hub_find_cached_model(const char *repo, const char *revision, char *out, size_t cap, char *why,
                             size_t why_cap) {
    mx_hub_env env;
    mx_hub_env_load(&env);
    char repo_dir[4600], snap[4800], reason[200];
    hub_repo_folder(env.cache_dir, repo, repo_dir, sizeof repo_dir);
    if (!revision) revision = "main";
    if (hub_cached_snapshot(env.cache_dir, repo, revision, snap, sizeof snap) != 0) {
        snprintf(why, why_cap, "no snapshot of revision '%s' in %s", revision, repo_dir);
        return -1;
    }
    if (!hub_snapshot_loadable(snap, reason, sizeof reason)) {
        snprintf(why, why_cap, "the snapshot %s is incomplete (%s)", snap, reason);
        return -1;
    }
    snprintf(out, cap, "%s", snap);
    return 0;
}
