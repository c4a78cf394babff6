// SPDX-License-Identifier: MIT
// safetensors reader over mmap: one file or all shards of a model folder (`model*.safetensors`,
// merged as mlx-lm does; the index file is informative). Every header is fully validated (length,
// JSON, dtypes, shapes, offsets inside the buffer, sizes matching shapes, no overlaps) before any
// tensor is handed out. Tensor data pointers point into the mapping and may be unaligned (MLX
// writes unpadded headers): read them with memcpy or copy them, never cast to a wider type.
#ifndef MX_IO_SAFETENSORS_H
#define MX_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/error.h"

#define MX_ST_MAX_DIMS 8

typedef struct mx_st_tensor {
    const char *name;
    mx_dtype dtype;
    int ndim;
    int64_t shape[MX_ST_MAX_DIMS];
    int64_t numel;
    const uint8_t *data;  // inside the mapping; alignment not guaranteed
    size_t nbytes;
    int file_index;       // which shard
} mx_st_tensor;

typedef struct mx_safetensors mx_safetensors;

// Opens one file.
mx_safetensors *mx_st_open_file(const char *path, mx_error *err);
// Opens every model*.safetensors of a folder (sorted by name). A name present in two shards is an error.
mx_safetensors *mx_st_open_dir(const char *dir, mx_error *err);
void mx_st_close(mx_safetensors *st);

size_t mx_st_count(const mx_safetensors *st);
const mx_st_tensor *mx_st_at(const mx_safetensors *st, size_t i);   // sorted by name
const mx_st_tensor *mx_st_find(const mx_safetensors *st, const char *name);  // NULL if absent
const char *mx_st_file_path(const mx_safetensors *st, int file_index);

// Parses and validates a header held in memory (used by the opener and the fuzz target).
// file_size is the size of the whole file; tensors get pointers into `file`.
int mx_st_parse(const uint8_t *file, size_t file_size, const char *label, mx_st_tensor **tensors,
                size_t *count, char ***meta_kv, size_t *meta_count, mx_error *err);

#endif
