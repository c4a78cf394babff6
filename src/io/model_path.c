// SPDX-License-Identifier: MIT
// Model folder resolution (see model_path.h). In the hub cache a repo lives in
// models--ORG--NAME/snapshots/<commit>/; refs/main names the commit to prefer, else the most
// recently modified snapshot that has a config.json is used.
#include "io/model_path.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_config(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    struct stat st;
    return stat(p, &st) == 0;
}

static void hub_dir(char *out, size_t cap) {
    const char *v;
    if ((v = getenv("HF_HUB_CACHE")) && *v) {
        snprintf(out, cap, "%s", v);
    } else if ((v = getenv("HF_HOME")) && *v) {
        snprintf(out, cap, "%s/hub", v);
    } else {
        const char *home = getenv("HOME");
        snprintf(out, cap, "%s/.cache/huggingface/hub", home ? home : "");
    }
}

// Finds a snapshot of repo_dir with a config.json; returns 0 and writes its path.
static int pick_snapshot(const char *repo_dir, char *out, size_t cap) {
    char ref_path[4200], snap[4400];
    snprintf(ref_path, sizeof ref_path, "%s/refs/main", repo_dir);
    FILE *f = fopen(ref_path, "r");
    if (f) {
        char commit[128] = "";
        if (fgets(commit, sizeof commit, f)) commit[strcspn(commit, "\r\n")] = 0;
        fclose(f);
        snprintf(snap, sizeof snap, "%s/snapshots/%s", repo_dir, commit);
        if (commit[0] && has_config(snap)) {
            snprintf(out, cap, "%s", snap);
            return 0;
        }
    }
    snprintf(snap, sizeof snap, "%s/snapshots", repo_dir);
    DIR *d = opendir(snap);
    if (!d) return -1;
    struct dirent *e;
    long best = -1;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[4700];
        snprintf(p, sizeof p, "%s/%s", snap, e->d_name);
        struct stat st;
        if (!has_config(p) || stat(p, &st) != 0) continue;
        if (st.st_mtime > best) {
            best = st.st_mtime;
            snprintf(out, cap, "%s", p);
        }
    }
    closedir(d);
    return best >= 0 ? 0 : -1;
}

int mx_model_path_resolve(const char *arg, char *out, size_t cap, mx_error *err) {
    if (!arg || !*arg) return mx_fail(err, "no model given");
    if (is_dir(arg)) {
        if (!has_config(arg)) return mx_fail(err, "%s: not a model folder (no config.json)", arg);
        snprintf(out, cap, "%s", arg);
        return 0;
    }
    const char *slash = strchr(arg, '/');
    char hub[4096];
    hub_dir(hub, sizeof hub);
    if (slash && slash != arg && !strchr(slash + 1, '/') && slash[1] && arg[0] != '.') {
        char repo[4400];
        snprintf(repo, sizeof repo, "%s/models--%.*s--%s", hub, (int)(slash - arg), arg, slash + 1);
        if (pick_snapshot(repo, out, cap) == 0) return 0;
        return mx_fail(err, "model '%s' not found: no folder of that name, and no snapshot with a config.json in %s "
                       "(the Hugging Face cache; set HF_HOME or HF_HUB_CACHE to look elsewhere; nothing is downloaded)",
                       arg, repo);
    }
    return mx_fail(err, "model '%s' not found: it is not a folder, nor an 'org/name' repo id to look up in %s", arg, hub);
}
