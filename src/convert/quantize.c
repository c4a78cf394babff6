// SPDX-License-Identifier: MIT
// Quantizer math (see quantize.h). Every step is written in the order MLX evaluates it, in float32,
// because bit-exactness depends on it: scale = max((max - min) / n, 1e-7) with the sign trick,
// q0 = rint(edge / scale), scale = edge / q0, q = clamp(rint((w - bias) / scale), 0, n).
#include "convert/quantize.h"

#include <math.h>
#include <string.h>

// Appends `bits` bits of v to an LSB-first byte stream.
typedef struct bit_sink {
    uint8_t *out;
    uint64_t acc;
    int nacc;
} bit_sink;

static inline void sink_put(bit_sink *s, uint32_t v, int bits) {
    s->acc |= (uint64_t)v << s->nacc;
    s->nacc += bits;
    while (s->nacc >= 8) {
        *s->out++ = (uint8_t)(s->acc & 0xffu);
        s->acc >>= 8;
        s->nacc -= 8;
    }
}

void cv_quantize_affine_row(const float *w, int64_t n, int bits, int group_size, uint8_t *packed,
                            float *scales, float *biases) {
    const float n_bins = (float)((1 << bits) - 1);
    const float eps = 1e-7f;
    bit_sink sink = {packed, 0, 0};
    for (int64_t g = 0; g < n / group_size; g++) {
        const float *x = w + g * group_size;
        float w_min = INFINITY, w_max = -INFINITY;
        for (int j = 0; j < group_size; j++) {
            w_max = fmaxf(w_max, x[j]);
            w_min = fminf(w_min, x[j]);
        }
        // The edge with the larger magnitude is represented exactly; the scale's sign follows it.
        int min_side = fabsf(w_min) > fabsf(w_max);
        float scale = fmaxf((w_max - w_min) / n_bins, eps);
        scale = min_side ? scale : -scale;
        float edge = min_side ? w_min : w_max;
        float q0 = rintf(edge / scale);
        float bias = 0.0f;
        if (q0 != 0.0f) {
            scale = edge / q0;
            bias = edge;
        }
        for (int j = 0; j < group_size; j++) {
            float q = rintf((x[j] - bias) / scale);
            q = fminf(fmaxf(q, 0.0f), n_bins);
            sink_put(&sink, (uint32_t)q, bits);
        }
        scales[g] = scale;
        biases[g] = bias;
    }
}

uint8_t cv_f32_to_e2m1(float x) {
    if (isnan(x)) return 0x7;
    float a = fabsf(x);
    uint8_t code;
    // Thresholds are the midpoints between the codes 0, .5, 1, 1.5, 2, 3, 4, 6; a tie goes to the
    // even code (which is the code whose mantissa bit is 0).
    if (a > 5.0f) code = 7;
    else if (a >= 3.5f) code = 6;
    else if (a > 2.5f) code = 5;
    else if (a >= 1.75f) code = 4;
    else if (a > 1.25f) code = 3;
    else if (a >= 0.75f) code = 2;
    else if (a > 0.25f) code = 1;
    else code = 0;
    if (code != 0 && signbit(x)) code |= 0x8;
    return code;
}

uint8_t cv_f32_to_e4m3(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    u &= 0x7fffffffu;
    uint8_t code;
    if (u > 0x7f800000u || u >= 0x43e80000u) {
        code = 0x7e;  // NaN and everything from 464 up saturate to 448
    } else if (u < 0x3c800000u) {
        // Below 2^-6: subnormal steps of 2^-9; adding 2^-9 * 2^23 ... aligns the mantissa so the
        // float adder rounds to nearest even for us.
        float f;
        memcpy(&f, &u, 4);
        float magic = 16384.0f;  // 2^14: its ulp is 2^-9
        float r = f + magic;
        uint32_t ru;
        memcpy(&ru, &r, 4);
        code = (uint8_t)(ru - 0x46800000u);
    } else {
        uint32_t odd = (u >> 20) & 1u;
        u += ((uint32_t)(7 - 127) << 23) + 0x7ffffu + odd;
        code = (uint8_t)(u >> 20);
    }
    if (code == 0) return 0;  // zero magnitude is always +0, as in MLX's output
    return code | sign;
}

uint8_t cv_e8m0_from_absmax(float absmax, int bits) {
    float s = absmax / (bits == 4 ? 6.0f : 448.0f);
    if (s == 0.0f) return 127;  // MLX stores exponent 0 for an all-zero group
    if (!isfinite(s)) return 0xff;
    int e = (int)rintf(log2f(s));
    if (e < -127) e = -127;
    if (e > 127) e = 127;
    return (uint8_t)(e + 127);
}

void cv_quantize_mx_row(const float *w, int64_t n, int bits, uint8_t *packed, uint8_t *scales) {
    bit_sink sink = {packed, 0, 0};
    for (int64_t g = 0; g < n / 32; g++) {
        const float *x = w + g * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        uint8_t sb = cv_e8m0_from_absmax(amax, bits);
        scales[g] = sb;
        // Dividing by a power of two is exact (ldexpf keeps subnormals right).
        int e = (int)sb - 127;
        for (int j = 0; j < 32; j++) {
            float v = ldexpf(x[j], -e);
            if (bits == 4) sink_put(&sink, cv_f32_to_e2m1(v), 4);
            else sink_put(&sink, cv_f32_to_e4m3(v), 8);
        }
    }
}
