// SPDX-License-Identifier: MIT
// What the two integer batch kernels (cpu_kernels_amx.c on tiles, cpu_kernels_vnni_gemm.c on
// vector registers) share in preparing activations: which weight formats they take, each
// group's max|x| and exact sum, the 4-bit column order (even columns, then odd, as the packed
// nibbles unpack), and the split of values already divided by s = max|x| / 127 into three signed
// bytes q0 + q1 / 254 + q2 / 254^2; and, for them and the VNNI gemv (cpu_kernels_vnni.c), 16 of a
// row's weight scales (or biases) loaded as floats.
// The bit-equal pair (cpu_kernels_vnni_eq.c's gemv and cpu_vnni_gemm_q_eq) also shares the whole
// arithmetic that makes one row of x give bit-equal outputs in both (a decode step's product and a recomputed prompt's, e.g. after a
// preemption, must agree to the last bit: the integer attention modes round the query and the P.V
// weights, which turns any last-bit difference near a rounding step into a whole code step): the
// power-of-two group scale 2^e (cpu_int8_scale_exponent), the base-256 digits of x / 2^e
// (cpu_int8_split3_base256), each group's value from its exact integer digit sums
// (cpu_int8_group_value), and the order in which a row's group values are added: group g into
// lane g % 16 of 16 running sums started at +0, in group order, then the 16 lanes by one fixed tree
// (cpu_int8_lane_sum). Integer sums inside a group are exact in any order; the float steps are the
// same operations in the same order in both kernels (explicit FMAs; ISO C mode, so no contraction).
// Private to src/backends/cpu/; include it only from files whose functions carry the AVX-512 target
// attributes.
#ifndef MX_BACKENDS_CPU_INT8_ACTIVATIONS_H
#define MX_BACKENDS_CPU_INT8_ACTIVATIONS_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "backends/cpu/cpu_simd_targets.h"
#include "core/quant.h"

#define CPU_INT8_Q_STEP 254.0f

// Affine 4- or 8-bit weights in groups of 64 or 128 whole columns.
static inline bool cpu_int8_format_ok(const mx_matrix *w) {
    if (w->q.mode != MX_QUANT_AFFINE || (w->q.bits != 4 && w->q.bits != 8)) return false;
    if (w->q.group_size != 64 && w->q.group_size != 128) return false;
    return w->cols > 0 && w->cols % w->q.group_size == 0;
}

// max|x| and the float sum of one group of gs (a multiple of 16) values.
CPU_TARGET_AVX512_INLINE static void cpu_int8_group_stats(const float *xg, int gs, float *amax, float *sum) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 mx = _mm512_setzero_ps(), sm = _mm512_setzero_ps();
    for (int k = 0; k < gs; k += 16) {
        __m512 v = _mm512_loadu_ps(xg + k);
        mx = _mm512_max_ps(mx, _mm512_and_ps(v, absmask));
        sm = _mm512_add_ps(sm, v);
    }
    *amax = _mm512_reduce_max_ps(mx);
    *sum = _mm512_reduce_add_ps(sm);
}

// 64 columns a..d (16 each) reordered as the 4-bit codes unpack: the 32 even columns, then the 32 odd.
CPU_TARGET_AVX512_INLINE static void cpu_int8_even_odd(__m512 *a, __m512 *b, __m512 *c, __m512 *d) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512 e0 = _mm512_permutex2var_ps(*a, ev, *b), e1 = _mm512_permutex2var_ps(*c, ev, *d);
    __m512 o0 = _mm512_permutex2var_ps(*a, od, *b), o1 = _mm512_permutex2var_ps(*c, od, *d);
    *a = e0, *b = e1, *c = o0, *d = o1;
}

// Rounds to nearest and narrows 16 floats (|v| <= 127.5) to 16 signed bytes.
CPU_TARGET_AVX512_INLINE static __m128i cpu_int8_narrow(__m512 v) {
    return _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
}

// Splits 16 values (already divided by s) into three byte parts, stored at dst, dst + part_stride
// and dst + 2 * part_stride.
CPU_TARGET_AVX512_INLINE static void cpu_int8_split3(__m512 v, uint8_t *dst, size_t part_stride) {
    __m512 q0 = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r1 = _mm512_mul_ps(_mm512_sub_ps(v, q0), _mm512_set1_ps(CPU_INT8_Q_STEP));
    __m512 q1 = _mm512_roundscale_ps(r1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r2 = _mm512_mul_ps(_mm512_sub_ps(r1, q1), _mm512_set1_ps(CPU_INT8_Q_STEP));
    _mm_storeu_si128((__m128i *)dst, cpu_int8_narrow(q0));
    _mm_storeu_si128((__m128i *)(dst + part_stride), cpu_int8_narrow(q1));
    _mm_storeu_si128((__m128i *)(dst + 2 * part_stride), cpu_int8_narrow(r2));
}

// 16 values already divided by s (|t| <= 127) as three signed byte parts at dst, dst + part_stride
// and dst + 2 * part_stride: T = round(t * 65536) (exact in float: |T| < 2^23) written in base 256
// with digits in [-128, 127], T = p0 * 65536 + p1 * 256 + p2; |p0| <= 127 because |T| <= 127 *
// 65536. Splitting the rounded integer (rather than rounding each float residual) keeps every digit
// in its byte. Power-of-two digit weights let a kernel combine the parts' sums with shifts and
// exponent adds instead of multiplications.
CPU_TARGET_AVX512_INLINE static void cpu_int8_split3_base256(__m512 t, uint8_t *dst, size_t part_stride) {
    __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(t, _mm512_set1_ps(65536.0f)));
    // T + 0x808080 = (p0 + 128) * 65536 + (p1 + 128) * 256 + (p2 + 128), every digit plus 128 in
    // [0, 255]: its three low bytes with the top bit flipped are p2, p1, p0 as signed bytes. One
    // in-lane byte gather and one dword permute put the 16 p2, p1 and p0 in 128-bit lanes 0, 1, 2
    // (before: a shift-and-subtract chain per digit and three two-uop narrowing moves; -19% time
    // for the batch quantizer, the same bytes, bench/RESULTS.md CPU round 10).
    const __m512i bias = _mm512_set1_epi32(0x808080);
    __m512i w = _mm512_xor_si512(_mm512_add_epi32(v, bias), bias);
    const __m512i gather = _mm512_set4_epi32((int)0x80808080u, 0x0e0a0602, 0x0d090501, 0x0c080400);
    const __m512i lanes = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i r = _mm512_permutexvar_epi32(lanes, _mm512_shuffle_epi8(w, gather));
    _mm_storeu_si128((__m128i *)(dst + 2 * part_stride), _mm512_castsi512_si128(r));
    _mm_storeu_si128((__m128i *)(dst + part_stride), _mm512_extracti32x4_epi32(r, 1));
    _mm_storeu_si128((__m128i *)dst, _mm512_extracti32x4_epi32(r, 2));
}

// The exponent e of the smallest power of two >= amax / 127 (0 when amax is 0). If the float
// quotient rounded down onto a power of two, |x| / 2^e may exceed 127 by one part in 2^23, which
// still leaves |p0| <= 127.
static inline int cpu_int8_scale_exponent(float amax) {
    float r = amax / 127.0f;
    if (!(r > 0.0f)) return 0;
    uint32_t bits;
    memcpy(&bits, &r, sizeof bits);
    int biased = (int)(bits >> 23 & 0xff);
    if (biased == 0) {  // subnormal quotient
        int e;
        float m = frexpf(r, &e);  // r = m * 2^e, m in [0.5, 1)
        return m == 0.5f ? e - 1 : e;
    }
    return biased - 127 + ((bits & 0x7fffff) != 0);  // 2^(biased - 127) <= r, equal iff no mantissa bits
}

// One weight group's contribution to 16 outputs (lanes: rows in the batched product, groups in the
// gemv) from the exact integer sums over the group of the weight codes times the digits of x: a0
// (p0) and m = 256 * (p1 sum) + (p2 sum), with x ~= 2^ehi * p0 + 2^elo * (256 p1 + p2), elo = ehi -
// 16: d = 2^ehi a0 + 2^elo m (both scalings exact, one rounding in the add), then
// d * w_scale + w_bias * (float sum of x over the group), the product of the bias term rounded
// first, then one FMA.
CPU_TARGET_AVX512_INLINE static __m512 cpu_int8_group_value(__m512i a0, __m512i m, __m512 ehi, __m512 elo, __m512 ws,
                                                            __m512 wb, __m512 gsum) {
    __m512 d = _mm512_add_ps(_mm512_scalef_ps(_mm512_cvtepi32_ps(a0), ehi), _mm512_scalef_ps(_mm512_cvtepi32_ps(m), elo));
    return _mm512_fmadd_ps(d, ws, _mm512_mul_ps(wb, gsum));
}

// The sum of a row's 16 running lanes by a fixed tree: lane l plus lane l + 8 (l < 8), then of those
// l plus l + 4, then l plus l + 2, then lane 0 plus lane 1. The batched product adds its 16 vectors
// (lanes: rows) in the same tree.
CPU_TARGET_AVX512_INLINE static float cpu_int8_lane_sum(__m512 acc) {
    __m256 t8 = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
    __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
    return _mm_cvtss_f32(_mm_add_ss(t2, _mm_shuffle_ps(t2, t2, 1)));
}

// 16 scales (or biases) of one row from index i, as floats; lanes past `m` are zero.
CPU_TARGET_AVX512_INLINE static __m512 cpu_int8_load16(const void *p, mx_dtype dt, int64_t i, __mmask16 m) {
    if (dt == MX_DTYPE_BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i)), 16));
    if (dt == MX_DTYPE_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    if (dt == MX_DTYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    float tmp[16] = {0};
    for (int k = 0; k < 16; k++)
        if (m >> k & 1) tmp[k] = mx_load_float(p, dt, i + k);
    return _mm512_loadu_ps(tmp);
}

#endif
#endif
