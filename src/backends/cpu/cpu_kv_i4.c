// SPDX-License-Identifier: MIT
// The opt-in 4-bit KV cache's row conversion (--kv-bits 4, MX_DTYPE_I4; layout in cpu_attention.c).
// Per group of MX_KV_I4_GROUP (32) values of a row (the last may be shorter) one float scale
// s = m / -8, where m is the group's value of largest magnitude (the first such), and codes
// c = x / s rounded half to even and clamped to -8..7: m itself is -8 exactly, so all sixteen codes
// are used and the step is max|x| / 8 (a symmetric -7..7 code would step by max|x| / 7); only -m,
// if present, is clamped (to 7, an error of one step). Codes are stored as c + 8, two a byte,
// element 2k in the low nibble of byte k (cpu_kv_i4_code reads one back). Scalar: a decode step
// stores one row per KV head and layer; the cost that matters is the attention's reading of the
// cache (cpu_kernels_attn.c), which unpacks 16 codes at a time.
#include <math.h>

#include "backends/cpu/cpu_kernels.h"

void cpu_kernels_kv_i4_row(uint8_t *dst, float *scales, const float *src, int hd) {
    for (int g0 = 0, g = 0; g0 < hd; g0 += MX_KV_I4_GROUP, g++) {
        const float *x = src + g0;
        int len = hd - g0 < MX_KV_I4_GROUP ? hd - g0 : MX_KV_I4_GROUP;
        float m = 0.0f;
        for (int i = 0; i < len; i++) m = fabsf(x[i]) > fabsf(m) ? x[i] : m;
        float inv = m != 0.0f ? -8.0f / m : 0.0f;
        for (int i = 0; i < len; i++) {
            float c = rintf(x[i] * inv);
            c = c < -8.0f ? -8.0f : c > 7.0f ? 7.0f : c;
            int at = g0 + i, u = (int)c + 8;
            if (at % 2 == 0) dst[at / 2] = (uint8_t)u;
            else dst[at / 2] = (uint8_t)(dst[at / 2] | (u << 4));
        }
        scales[g] = m / -8.0f;
    }
}
