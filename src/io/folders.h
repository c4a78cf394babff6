// SPDX-License-Identifier: MIT
// Folders on disk, one helper each for the whole program: whether a path is a folder, and creating
// a folder with its parents (mkdir -p) or the parents of a file about to be written. The mode is
// the caller's (the Hub cache uses 0777 less the umask, as huggingface_hub does; convert and bench
// use 0755). Errors name the folder that could not be made.
#ifndef MX_IO_FOLDERS_H
#define MX_IO_FOLDERS_H

#include <stdbool.h>
#include <sys/types.h>

#include "core/error.h"

// True when path exists and is a folder (or a symlink to one).
bool mx_is_dir(const char *path);
// Creates path and every missing parent; 0 when it exists already as a folder.
int mx_make_dirs(const char *path, mode_t mode, mx_error *err);
// Creates the folders above file_path (its dirname and parents); a bare name needs none.
int mx_make_parent_dirs(const char *file_path, mode_t mode, mx_error *err);

#endif
