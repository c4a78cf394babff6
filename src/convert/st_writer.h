// SPDX-License-Identifier: MIT
// A safetensors file written in place: every tensor (name, dtype, shape, size) is declared first,
// then the file is created with its final header and size, and tensor bytes are stored with pwrite
// at their offsets in any order and in pieces, from any thread. This is what lets convert stream a
// model tensor by tensor (and row block by row block) without holding it in memory. The header
// carries `{"format": "mlx"}` metadata and is padded with spaces to a multiple of 8 so that every
// tensor is 8-byte aligned (readers accept both padded and unpadded headers).
#ifndef MX_CONVERT_ST_WRITER_H
#define MX_CONVERT_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

typedef struct cv_st_writer cv_st_writer;

cv_st_writer *cv_st_writer_new(void);
void cv_st_writer_free(cv_st_writer *w);

// Declares a tensor; returns its index (>= 0) or -1 with a message (duplicate name, bad shape).
int cv_st_writer_declare(cv_st_writer *w, const char *name, mx_dtype dtype, int ndim,
                         const int64_t *shape, mx_error *err);
size_t cv_st_writer_count(const cv_st_writer *w);
const char *cv_st_writer_name(const cv_st_writer *w, size_t i);
int64_t cv_st_writer_nbytes(const cv_st_writer *w, size_t i);
// Sum of all declared tensor sizes.
int64_t cv_st_writer_data_bytes(const cv_st_writer *w);

// Creates path (O_EXCL), writes the header and sizes the file. After this, no more declarations.
int cv_st_writer_open(cv_st_writer *w, const char *path, mx_error *err);
// Stores len bytes at byte offset `at` inside tensor i.
int cv_st_writer_put(cv_st_writer *w, size_t i, int64_t at, const void *buf, size_t len,
                     mx_error *err);
// Flushes and closes the file.
int cv_st_writer_close(cv_st_writer *w, mx_error *err);

#endif
