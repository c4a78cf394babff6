// SPDX-License-Identifier: MIT
// The program's one way of writing a small text file whole (configs, the Hub cache's refs and
// metadata, marker files): created or truncated, written, closed, with an error naming the path
// when any step fails. Large binary files have their own writers (convert's st_writer.h streams
// safetensors in place, a download streams into its partial file, convert copies files), which put
// their bytes through mx_write_all: every byte written, after signals and short writes.
#ifndef MX_IO_WRITE_FILE_H
#define MX_IO_WRITE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

// Writes text (NUL-terminated) to path, replacing what is there; 0, or -1 with err set.
int mx_write_text_file(const char *path, const char *text, mx_error *err);

// Writes all len bytes of buf to the descriptor fd: at offset `at` (pwrite), or at the file
// position when at < 0; retries after signals and short writes. Returns 0, or -1 with errno set
// (ENOSPC when the file takes no more bytes).
int mx_write_all(int fd, const void *buf, size_t len, int64_t at);

#endif
