// SPDX-License-Identifier: MIT
// Element types of safetensors files and the scalar conversions every backend shares
// (bf16/f16 <-> f32, the FP8/FP4 element codes of the microscaling formats).
#ifndef MX_CORE_DTYPE_H
#define MX_CORE_DTYPE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

typedef enum mx_dtype {
    MX_DTYPE_BOOL,
    MX_DTYPE_U8,
    MX_DTYPE_I8,
    MX_DTYPE_I16,
    MX_DTYPE_U16,
    MX_DTYPE_F16,
    MX_DTYPE_BF16,
    MX_DTYPE_I32,
    MX_DTYPE_U32,
    MX_DTYPE_F32,
    MX_DTYPE_F64,
    MX_DTYPE_I64,
    MX_DTYPE_U64,
    MX_DTYPE_F8_E4M3,
    MX_DTYPE_F8_E5M2,
    MX_DTYPE_F8_E8M0,
    MX_DTYPE_I4,  // the CPU KV cache's 4-bit codes (two a byte; size 0 here, no safetensors type)
    MX_DTYPE_COUNT
} mx_dtype;

// Size of one element in bytes (0 for I4, whose elements are half a byte: backend.h, mx_kv_elem_bytes).
size_t mx_dtype_size(mx_dtype t);
// The safetensors spelling ("BF16").
const char *mx_dtype_name(mx_dtype t);
// Parses a safetensors dtype string; returns 0 and sets *out, or -1 if unknown (I4 included: no
// safetensors type).
int mx_dtype_parse(const char *s, mx_dtype *out);
// BF16, F16 or F32: the float types of unquantized weights (and what mx_load_float reads).
static inline bool mx_dtype_is_float(mx_dtype t) { return t == MX_DTYPE_BF16 || t == MX_DTYPE_F16 || t == MX_DTYPE_F32; }

static inline float mx_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Round to nearest even, NaN kept quiet (as MLX and PyTorch do).
static inline uint16_t mx_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float mx_f16_to_f32(uint16_t h);
uint16_t mx_f32_to_f16(float f);

// Reads element i of a float array of dtype F32, BF16 or F16 (any alignment).
static inline float mx_load_float(const void *base, mx_dtype t, int64_t i) {
    const uint8_t *p = (const uint8_t *)base;
    if (t == MX_DTYPE_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return t == MX_DTYPE_BF16 ? mx_bf16_to_f32(h) : mx_f16_to_f32(h);
}

// E2M1 (fp4) code 0..15 -> value; E4M3 byte -> value (0x7f/0xff decode as +-480, no NaN, like MLX);
// E8M0 byte -> 2^(s-127) (s = 0 gives 2^-127, s = 255 gives +inf).
float mx_e2m1_to_f32(unsigned code);
float mx_e4m3_to_f32(uint8_t b);
float mx_e8m0_to_f32(uint8_t s);

#endif
