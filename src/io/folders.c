// SPDX-License-Identifier: MIT
// Folder tests and mkdir -p (see folders.h): each prefix of the path made in turn, an existing
// folder accepted, anything else at the path an error naming it.
#include "io/folders.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

bool mx_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

int mx_make_dirs(const char *path, mode_t mode, mx_error *err) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return mx_fail(err, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != 0) continue;
        char saved = *p;
        *p = 0;
        if (mkdir(buf, mode) != 0 && errno != EEXIST)
            return mx_fail(err, "cannot create folder %s: %s", buf, strerror(errno));
        *p = saved;
        if (!saved) break;
    }
    if (!mx_is_dir(path)) return mx_fail(err, "%s exists and is not a folder", path);
    return 0;
}

int mx_make_parent_dirs(const char *file_path, mode_t mode, mx_error *err) {
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s", file_path) >= (int)sizeof dir) return mx_fail(err, "%s: path too long", file_path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = 0;
    return mx_make_dirs(dir, mode, err);
}
