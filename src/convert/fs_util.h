// SPDX-License-Identifier: MIT
// Small filesystem helpers for convert: copying a file, removing a folder tree that convert itself
// created (a failed or replaced output), testing for existence. Errors go to mx_error.
#ifndef MX_CONVERT_FS_UTIL_H
#define MX_CONVERT_FS_UTIL_H

#include <stdbool.h>

#include "core/error.h"

bool cv_path_exists(const char *path);
// Copies src to dst (created exclusively).
int cv_copy_file(const char *src, const char *dst, mx_error *err);
// Removes a folder and everything in it (no symlink following). Missing path is not an error.
int cv_remove_tree(const char *path, mx_error *err);

#endif
