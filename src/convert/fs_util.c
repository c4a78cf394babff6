// SPDX-License-Identifier: MIT
// Filesystem helpers for convert (see fs_util.h): whether a path exists (without following a final
// symlink), copying a file into the output folder, and removing a folder tree convert made.
#include "convert/fs_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/write_file.h"

bool cv_path_exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

int cv_copy_file(const char *src, const char *dst, mx_error *err) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return mx_fail(err, "%s: cannot open: %s", src, strerror(errno));
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        close(in);
        return mx_fail(err, "%s: cannot create: %s", dst, strerror(errno));
    }
    char buf[1 << 16];
    int rc = 0;
    for (;;) {
        ssize_t k = read(in, buf, sizeof buf);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) {
            rc = mx_fail(err, "%s: read failed: %s", src, strerror(errno));
            break;
        }
        if (k == 0) break;
        if (mx_write_all(out, buf, (size_t)k, -1) != 0) {
            rc = mx_fail(err, "%s: write failed: %s", dst, strerror(errno));
            break;
        }
    }
    close(in);
    if (close(out) != 0 && rc == 0) rc = mx_fail(err, "%s: write failed: %s", dst, strerror(errno));
    return rc;
}

int cv_remove_tree(const char *path, mx_error *err) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : mx_fail(err, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        if (unlink(path) != 0) return mx_fail(err, "%s: cannot remove: %s", path, strerror(errno));
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return mx_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        size_t len = strlen(path) + strlen(de->d_name) + 2;
        char *child = malloc(len);
        if (!child) {
            rc = mx_fail(err, "out of memory");
            break;
        }
        snprintf(child, len, "%s/%s", path, de->d_name);
        rc = cv_remove_tree(child, err);
        free(child);
    }
    closedir(d);
    if (rc == 0 && rmdir(path) != 0) rc = mx_fail(err, "%s: cannot remove: %s", path, strerror(errno));
    return rc;
}
