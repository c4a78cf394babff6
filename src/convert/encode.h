// SPDX-License-Identifier: MIT
// Turning one planned item into its output tensors: a float tensor cast to its dtype, or the
// packed weight plus scales (and biases for affine) of a quantized one. Rows are read from the
// mapped source (converted to float32 through the target dtype, as MLX casts before quantizing),
// processed in blocks of rows split across threads, and stored in place in the shard file.
#ifndef MX_CONVERT_ENCODE_H
#define MX_CONVERT_ENCODE_H

#include <stdint.h>

#include "convert/plan.h"
#include "convert/st_writer.h"

// Output tensors of one item: [0] the weight (or the float tensor), [1] scales, [2] biases.
typedef struct cv_parts {
    int n;
    int index[3];  // tensor indices in the shard writer
} cv_parts;

// Bytes the item will occupy in its shard.
int64_t cv_encode_bytes(const cv_item *it);

// Declares the item's output tensors on the writer.
int cv_encode_declare(const cv_item *it, cv_st_writer *w, cv_parts *parts, mx_error *err);

typedef void (*cv_bytes_done_fn)(void *user, int64_t bytes);

// Computes the item and writes it; calls done(user, bytes) after each block of rows.
int cv_encode_item(const cv_item *it, cv_st_writer *w, const cv_parts *parts, int threads,
                   cv_bytes_done_fn done, void *user, mx_error *err);

#endif
