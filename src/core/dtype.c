// SPDX-License-Identifier: MIT
// dtype names, sizes and the scalar float conversions declared in dtype.h.
#include "core/dtype.h"

#include <math.h>

static const struct {
    const char *name;
    size_t size;
} dtype_table[MX_DTYPE_COUNT] = {
    [MX_DTYPE_BOOL] = {"BOOL", 1},       [MX_DTYPE_U8] = {"U8", 1},
    [MX_DTYPE_I8] = {"I8", 1},           [MX_DTYPE_I16] = {"I16", 2},
    [MX_DTYPE_U16] = {"U16", 2},         [MX_DTYPE_F16] = {"F16", 2},
    [MX_DTYPE_BF16] = {"BF16", 2},       [MX_DTYPE_I32] = {"I32", 4},
    [MX_DTYPE_U32] = {"U32", 4},         [MX_DTYPE_F32] = {"F32", 4},
    [MX_DTYPE_F64] = {"F64", 8},         [MX_DTYPE_I64] = {"I64", 8},
    [MX_DTYPE_U64] = {"U64", 8},         [MX_DTYPE_F8_E4M3] = {"F8_E4M3", 1},
    [MX_DTYPE_F8_E5M2] = {"F8_E5M2", 1}, [MX_DTYPE_F8_E8M0] = {"F8_E8M0", 1},
    [MX_DTYPE_I4] = {"I4", 0},
};

size_t mx_dtype_size(mx_dtype t) { return t < MX_DTYPE_COUNT ? dtype_table[t].size : 0; }

const char *mx_dtype_name(mx_dtype t) { return t < MX_DTYPE_COUNT ? dtype_table[t].name : "?"; }

int mx_dtype_parse(const char *s, mx_dtype *out) {
    for (int i = 0; i < MX_DTYPE_COUNT; i++) {
        if (dtype_table[i].size && strcmp(s, dtype_table[i].name) == 0) {
            *out = (mx_dtype)i;
            return 0;
        }
    }
    return -1;
}

float mx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  // subnormal: value = man * 2^-24
            float f = ldexpf((float)man, -24);
            memcpy(&u, &f, 4);
            u |= sign;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t mx_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00;             // NaN
    if (a >= 0x477ff000u) return sign | 0x7c00;            // overflow (after rounding) -> inf
    if (a < 0x38800000u) {                                 // subnormal or zero in f16
        float v;
        memcpy(&v, &a, 4);
        float q = rintf(v * 16777216.0f);                  // units of 2^-24, ties to even
        return sign | (uint16_t)q;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);            // round mantissa to 10 bits, ties even
    return sign | (uint16_t)(((r >> 13) - (112u << 10)) & 0x7fff);
}

float mx_e2m1_to_f32(unsigned code) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[code & 7];
    return (code & 8) ? -v : v;
}

float mx_e4m3_to_f32(uint8_t b) {
    int e = (b >> 3) & 0xf;
    int m = b & 7;
    float v = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return (b & 0x80) ? -v : v;
}

float mx_e8m0_to_f32(uint8_t s) {
    if (s == 255) return INFINITY;
    return ldexpf(1.0f, (int)s - 127);
}
