// SPDX-License-Identifier: MIT
// Model folder resolution (see model_path.h): folder, then cache, then download. The cache and
// the download are the hub module's; this file only decides which applies.
#include "io/model_path.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "hub/hub.h"
#include "io/folders.h"

static int has_config(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    struct stat st;
    return stat(p, &st) == 0;
}

// "org/name": one slash, not at either end, and not a relative path like ./x or ../x.
static bool looks_like_repo_id(const char *arg) {
    const char *slash = strchr(arg, '/');
    return slash && slash != arg && slash[1] && !strchr(slash + 1, '/') && arg[0] != '.' && arg[0] != '~';
}

int mx_model_path_resolve(const char *arg, char *out, size_t cap, mx_error *err) {
    if (!arg || !*arg) return mx_fail(err, "no model given");
    if (mx_is_dir(arg)) {
        if (!has_config(arg)) return mx_fail(err, "%s: not a model folder (no config.json)", arg);
        snprintf(out, cap, "%s", arg);
        return 0;
    }
    if (!looks_like_repo_id(arg))
        return mx_fail(err, "model '%s' not found: it is not a folder, nor an 'org/name' Hugging Face repo id", arg);
    char why[4600];
    if (mx_hub_find_cached_model(arg, NULL, out, cap, why, sizeof why) == 0) return 0;
    mx_hub_download_opts o = {.repo = arg, .progress = stderr};
    if (mx_hub_download(&o, out, cap, err) != 0)
        return mx_fail_prefix(err, "model '%s': not usable from the cache (%s), and downloading it failed: ", arg, why);
    if (!has_config(out)) return mx_fail(err, "%s: downloaded to %s, but it has no config.json: not a model", arg, out);
    return 0;
}
