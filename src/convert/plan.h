// SPDX-License-Identifier: MIT
// What convert writes: the list of output tensors computed from the source checkpoint, config and
// options, before any data is touched. It applies mlx-lm's rules, per family from the family table
// (models/family.h): drop rotary_emb.inv_freq and a tied lm_head, stack MoE experts into switch_mlp
// tensors, quantize Linear/Embedding weights whose input dimension the group size divides (the
// family's router at 8 bits group 64, or the mixed recipe),
// cast every other float tensor to the target dtype. The plan also owns the `quantization` object
// for config.json. Source tensors are borrowed from the open safetensors reader.
#ifndef MX_CONVERT_PLAN_H
#define MX_CONVERT_PLAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/quant.h"
#include "io/safetensors.h"

// A strided view of one source tensor, for outputs that re-arrange it (mlx-lm's sanitize splits and
// transposes): element c of output row r, with r = e * rows_per_block + rr, is source element
// e * block_stride + rr * row_stride + c * col_stride + offset (counted in elements).
typedef struct cv_view {
    bool active;
    int64_t rows_per_block;
    int64_t block_stride, row_stride, col_stride, offset;
} cv_view;

typedef struct cv_item {
    char *name;                // output tensor name (".weight" kept; quantized parts derive from it)
    const mx_st_tensor **src;  // [n_src]; n_src > 1 stacks them along a new first axis
    int n_src;
    cv_view view;              // when active: n_src is 1 and rows come from the view
    int ndim;
    int64_t shape[4];          // logical float shape of the output, e.g. [E, out, in]
    int64_t rows, cols;        // cols = last dim, rows = numel / cols
    mx_quant q;                // mode NONE: written as a float tensor
    mx_dtype dtype;            // float dtype: the tensor's (NONE) or its scales/biases' (affine)
} cv_item;

typedef struct cv_plan {
    cv_item *items;
    size_t n;
    json_t *quantization;  // config "quantization" object; NULL when not quantizing
    int64_t total_parameters;
} cv_plan;

typedef struct cv_plan_opts {
    bool quantize;
    mx_quant q;            // global quantization (valid when quantize)
    int dtype;             // target float dtype (mx_dtype) or -1 to keep each tensor's own
    const char *recipe;    // mixed recipe name or NULL
    mx_quant experts_q;    // stacked experts' quantization (mode NONE: q, like the rest)
} cv_plan_opts;

int cv_plan_build(const mx_safetensors *st, const json_t *config, const cv_plan_opts *o,
                  cv_plan *plan, mx_error *err);
void cv_plan_free(cv_plan *plan);

#endif
