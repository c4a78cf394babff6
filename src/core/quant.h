// SPDX-License-Identifier: MIT
// The one table of weight formats (dense float, affine 2-8 bit, mxfp4, mxfp8, nvfp4) and the weight
// matrix descriptor every backend consumes. A matrix keeps its file layout: quantized weights stay
// packed, scales keep their stored dtype; backends dequantize on the fly. The reference dequantizer
// here is the ground truth that every backend kernel and every test compares against.
#ifndef MX_CORE_QUANT_H
#define MX_CORE_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"

typedef enum mx_quant_mode {
    MX_QUANT_NONE,    // dense float weight (BF16, F16 or F32)
    MX_QUANT_AFFINE,  // w = scale * q + bias, q unsigned `bits` wide, LSB-first bit stream
    MX_QUANT_MXFP4,   // E2M1 elements, E8M0 scale per 32
    MX_QUANT_MXFP8,   // E4M3 elements, E8M0 scale per 32
    MX_QUANT_NVFP4,   // E2M1 elements, E4M3 scale per 16
} mx_quant_mode;

typedef struct mx_quant {
    mx_quant_mode mode;
    int bits;        // element width (affine 2,3,4,5,6,8; fp4 4; fp8 8); 0 for NONE
    int group_size;  // elements per scale; 0 for NONE
} mx_quant;

// "affine", "mxfp4", ... ; returns -1 for an unknown name.
int mx_quant_mode_parse(const char *s, mx_quant_mode *out);
const char *mx_quant_mode_name(mx_quant_mode m);
// Checks bits/group_size against what the mode allows; writes the reason into why[] on failure.
bool mx_quant_valid(mx_quant q, char *why, int why_len);

// A weight matrix [n_experts, rows, cols] (n_experts == 1 for a plain Linear), row-major, in the
// memory of the backend that owns it. rows = output features, cols = input features.
typedef struct mx_matrix {
    mx_quant q;
    mx_dtype dtype;        // dense: BF16/F16/F32 element type; quantized: U32 words
    mx_dtype scale_dtype;  // affine: BF16/F16/F32 (biases share it); mx/nv formats: U8
    int64_t n_experts;
    int64_t rows;
    int64_t cols;
    const void *data;      // dense [E, rows, cols]; quantized [E, rows, cols*bits/32] u32
    const void *scales;    // [E, rows, cols/group_size] (NULL when dense)
    const void *biases;    // [E, rows, cols/group_size] (affine only)
} mx_matrix;

// Bytes of one packed row of data (cols * bits / 8, or cols * elem size when dense).
int64_t mx_matrix_row_bytes(const mx_matrix *m);
// Bytes of data/scales for the whole matrix (all experts).
int64_t mx_matrix_data_bytes(const mx_matrix *m);
int64_t mx_matrix_scale_bytes(const mx_matrix *m);

// Reference dequantization of one row (row index counts across experts: expert e row r is
// e * rows + r) into out[cols], in float32. Host memory only.
void mx_matrix_dequant_row(const mx_matrix *m, int64_t row, float *out);

// Element j of a packed row (unsigned code, `bits` wide), host memory, any alignment.
static inline uint32_t mx_quant_code(const uint8_t *row, int bits, int64_t j) {
    int64_t bit = j * bits;
    const uint8_t *p = row + (bit >> 3);
    int shift = (int)(bit & 7);
    uint32_t v = p[0] | ((uint32_t)(shift + bits > 8 ? p[1] : 0) << 8);
    if (shift + bits > 16) v |= (uint32_t)p[2] << 16;
    return (v >> shift) & ((1u << bits) - 1u);
}

#endif
