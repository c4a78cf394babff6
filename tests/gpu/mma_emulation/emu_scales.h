// SPDX-License-Identifier: MIT
// Scale words of an affine-quantized matrix in the mma emulation tests: one scale (or bias) at
// index i of a byte buffer in f32, f16 or bf16, written and read back, and the type's short name.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/dtype.h"

static inline void put_scale(std::vector<uint8_t> &buf, mx_dtype st, size_t i, float v) {
    if (st == MX_DTYPE_F32) memcpy(&buf[i * 4], &v, 4);
    else {
        uint16_t h = st == MX_DTYPE_BF16 ? mx_f32_to_bf16(v) : mx_f32_to_f16(v);
        memcpy(&buf[i * 2], &h, 2);
    }
}
static inline float get_scale(const std::vector<uint8_t> &buf, mx_dtype st, size_t i) {
    if (st == MX_DTYPE_F32) { float v; memcpy(&v, &buf[i * 4], 4); return v; }
    uint16_t h; memcpy(&h, &buf[i * 2], 2);
    return st == MX_DTYPE_BF16 ? mx_bf16_to_f32(h) : mx_f16_to_f32(h);
}
static inline const char *st_name(mx_dtype st) { return st == MX_DTYPE_F32 ? "f32" : st == MX_DTYPE_F16 ? "f16" : "bf16"; }
