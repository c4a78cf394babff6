// SPDX-License-Identifier: MIT
// mx_hub_download for a build configured with -DMLXCEL_HUB=OFF (no libcurl, e.g. a GPU machine
// image without it): nothing can be downloaded, so only the cache serves, and anything else is an
// error that says why. The default build has MLXCEL_HUB=ON and uses hub_download.c instead.
#include "hub/hub.h"

#include "hub/hub_cache.h"
#include "hub/hub_env.h"

int mx_hub_download(const mx_hub_download_opts *o, char *out, size_t cap, mx_error *err) {
    if (hub_check_repo_id(o->repo, err) != 0) return -1;
    mx_hub_env env;
    mx_hub_env_load(&env);
    const char *revision = o->revision && *o->revision ? o->revision : "main";
    if (!o->local_dir && hub_cached_snapshot(env.cache_dir, o->repo, revision, out, cap) == 0) return 0;
    return mx_fail(err,
                   "%s is not in the cache (%s), and this mlxcel was built without Hugging Face Hub downloads "
                   "(configured with -DMLXCEL_HUB=OFF); rebuild with libcurl4-openssl-dev installed",
                   o->repo, env.cache_dir);
}
