// SPDX-License-Identifier: MIT
// The tests' own dequantizer, written from the format description (docs FORMAT.md: "Affine
// quantization", "Floating-point modes") and not from the library's code, so that a format misread
// by the library and by its kernels alike still shows up as a difference. It reads the same
// mx_matrix layout the kernels read: [n_experts, rows, cols] row-major; quantized rows are
// little-endian LSB-first bit streams (element j occupies stream bits [j*bits, j*bits + bits),
// stream bit k is bit k % 32 of u32 word k / 32), one scale (and for affine one bias) per group of
// group_size elements along the row. Header-only (static functions), slow and literal on purpose.
//
// Besides each value it gives a magnitude for error bounds: the largest intermediate that a
// float32 evaluation of the value may round (|value| for exact decodes; for affine
// |scale| * 2^(bits+1) + |bias|, which covers w = scale * q + bias and the rearranged forms
// kernels use, such as scale * 2^bits * (1 + q / 2^bits) + (bias - scale * 2^bits)).
#ifndef MX_TESTS_FORMAT_REF_H
#define MX_TESTS_FORMAT_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/quant.h"

// Little-endian unsigned integers at any alignment.
static inline uint32_t fref_le16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static inline uint32_t fref_le32(const uint8_t *p) { return fref_le16(p) | fref_le16(p + 2) << 16; }

// bfloat16: the upper half of a float32.
static inline double fref_bf16(uint32_t h) {
    uint32_t u = h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// IEEE binary16: sign, 5 exponent bits (bias 15), 10 mantissa bits; exponent 0 is subnormal.
static inline double fref_f16(uint32_t h) {
    int e = (int)(h >> 10) & 31, m = (int)(h & 1023);
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000u) ? -v : v;
}

static inline double fref_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// Element i of a float array stored as BF16, F16 or F32.
static inline double fref_float_at(const void *base, mx_dtype t, int64_t i) {
    const uint8_t *p = (const uint8_t *)base;
    if (t == MX_DTYPE_F32) return fref_f32(fref_le32(p + 4 * i));
    uint32_t h = fref_le16(p + 2 * i);
    return t == MX_DTYPE_BF16 ? fref_bf16(h) : fref_f16(h);
}

// E2M1 nibble: bit 3 sign; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6.
static inline double fref_e2m1(uint32_t c) {
    static const double mag[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    return (c & 8u) ? -mag[c & 7u] : mag[c & 7u];
}

// E4M3 byte: sign bit 7, exponent bits 6-3 (bias 7), mantissa bits 2-0; exponent 0 is (m/8)*2^-6;
// no NaN (0x7F decodes as 480).
static inline double fref_e4m3(uint32_t c) {
    int e = (int)(c >> 3) & 15, m = (int)(c & 7u);
    double v = e == 0 ? ldexp(m, -9) : ldexp(8 + m, e - 10);
    return (c & 0x80u) ? -v : v;
}

// E8M0 byte s: 2^(s - 127); 255 is +inf.
static inline double fref_e8m0(uint32_t s) { return s == 255 ? INFINITY : ldexp(1.0, (int)s - 127); }

// Element j (`bits` wide) of a packed row, read bit by bit from the u32 words.
static inline uint32_t fref_code(const uint8_t *row, int bits, int64_t j) {
    uint32_t v = 0;
    for (int b = 0; b < bits; b++) {
        int64_t k = j * bits + b;
        v |= ((fref_le32(row + 4 * (k / 32)) >> (k % 32)) & 1u) << b;
    }
    return v;
}

// Row `row` (counting across experts) of w into out[cols], rounded once to float32 from the exact
// value; mag[cols] (may be NULL) gets each element's evaluation magnitude (see the top).
static inline void fref_dequant_row(const mx_matrix *w, int64_t row, float *out, double *mag) {
    const int64_t cols = w->cols;
    if (w->q.mode == MX_QUANT_NONE) {
        int64_t es = w->dtype == MX_DTYPE_F32 ? 4 : 2;
        const uint8_t *r = (const uint8_t *)w->data + row * cols * es;
        for (int64_t j = 0; j < cols; j++) {
            out[j] = (float)fref_float_at(r, w->dtype, j);
            if (mag) mag[j] = fabs(out[j]);
        }
        return;
    }
    const int bits = w->q.bits, gs = w->q.group_size;
    const uint8_t *r = (const uint8_t *)w->data + row * (cols * bits / 8);
    const int64_t g0 = row * (cols / gs);  // first scale of the row
    for (int64_t j = 0; j < cols; j++) {
        uint32_t c = fref_code(r, bits, j);
        int64_t g = g0 + j / gs;
        double v, m;
        if (w->q.mode == MX_QUANT_AFFINE) {
            double s = fref_float_at(w->scales, w->scale_dtype, g), b = fref_float_at(w->biases, w->scale_dtype, g);
            v = s * c + b;
            m = fabs(s) * ldexp(1.0, bits + 1) + fabs(b);
        } else {
            uint32_t sb = ((const uint8_t *)w->scales)[g];
            double scale = w->q.mode == MX_QUANT_NVFP4 ? fref_e4m3(sb) : fref_e8m0(sb);
            v = scale * (bits == 4 ? fref_e2m1(c) : fref_e4m3(c));
            m = fabs(v);
        }
        out[j] = (float)v;
        if (mag) mag[j] = m;
    }
}

#endif
