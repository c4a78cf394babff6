// SPDX-License-Identifier: MIT
// Read-only memory mapping of a whole file. The mapping owns nothing else; closing unmaps it.
#ifndef MX_IO_MAPPED_FILE_H
#define MX_IO_MAPPED_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"

typedef struct mx_mapped_file {
    const uint8_t *data;  // NULL for an empty file
    size_t size;
    char *path;
} mx_mapped_file;

int mx_mapped_file_open(mx_mapped_file *f, const char *path, mx_error *err);
void mx_mapped_file_close(mx_mapped_file *f);

// Fails naming the path when it exists but is not a regular file (a FIFO, device or directory):
// opening one of those for reading can block forever or read endless data. A path that does not
// exist passes, so the caller's own open reports that.
int mx_file_check_regular(const char *path, mx_error *err);

// Reads a whole (small) regular file into a malloc'ed NUL-terminated buffer; NULL with a message on failure.
char *mx_read_text_file(const char *path, size_t *len_out, mx_error *err);
// Reads fp to its end (standard input, or an opened file) the same way; name is for messages.
char *mx_read_stream(FILE *fp, const char *name, size_t *len_out, mx_error *err);
#endif
