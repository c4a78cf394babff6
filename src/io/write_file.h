// SPDX-License-Identifier: MIT
// The program's one way of writing a small text file whole (configs, the Hub cache's refs and
// metadata, marker files): created or truncated, written, closed, with an error naming the path
// when any step fails. Large binary files have their own writers (convert's st_writer.h streams
// safetensors in place).
#ifndef MX_IO_WRITE_FILE_H
#define MX_IO_WRITE_FILE_H

#include "core/error.h"

// Writes text (NUL-terminated) to path, replacing what is there; 0, or -1 with err set.
int mx_write_text_file(const char *path, const char *text, mx_error *err);

#endif
