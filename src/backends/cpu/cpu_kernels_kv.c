// SPDX-License-Identifier: MIT
// SIMD conversions of a KV row to the integer cache layouts. I16 (cpu_kernels_kv_i16_row, AVX-512): per block of
// CPU_KV_SCALE_BLOCK values, max|x| by a vector max, then x * (32767 / max|x|) rounded half to even
// by the conversion to int32 (the default rounding mode, as the scalar reference's add-and-subtract
// of 1.5 * 2^23 rounds) and narrowed to int16. The multiply is the only float operation and the
// scale and its inverse are the reference's scalar expressions, so the rows and scales are
// bit-identical to the scalar version's (test_cpu_kernels compares every bit). A prefill's KV store
// converted its rows one value at a time (0.8% of a pp512, bench/RESULTS.md CPU round 9).
// I8 (cpu_kernels_kv_i8_row, the opt-in 8-bit cache; AVX-512 and AVX2): the same with 127 for 32767
// and a saturating narrowing to int8 (never reached: |x * inv| rounds to 127 at most), equally
// bit-identical to the scalar reference.
#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>

#include "backends/cpu/cpu_simd_targets.h"

// The largest magnitude of one scale block's len (<= CPU_KV_SCALE_BLOCK) values: the block's scale.
CPU_TARGET_AVX512 static inline float avx512_block_amax(const float *x, int len) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    float amax = 0.0f;
    for (int i = 0; i < len; i += 16) {
        __mmask16 m = len - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - i)) - 1);
        float v = _mm512_reduce_max_ps(_mm512_and_ps(_mm512_maskz_loadu_ps(m, x + i), absmask));
        amax = v > amax ? v : amax;
    }
    return amax;
}

// One row to codes of `bits` (16: int16_t dst; 8: int8_t dst, saturating narrowing), per block with
// the scale amax / qmax. Inlined with bits a constant: each caller keeps only its own store.
CPU_TARGET_AVX512_INLINE static void avx512_kv_row(void *dst, float *scales, const float *src, int hd, int bits) {
    const float qmax = bits == 16 ? 32767.0f : 127.0f;
    for (int b0 = 0, b = 0; b0 < hd; b0 += CPU_KV_SCALE_BLOCK, b++) {
        int len = hd - b0 < CPU_KV_SCALE_BLOCK ? hd - b0 : CPU_KV_SCALE_BLOCK;
        float amax = avx512_block_amax(src + b0, len);
        float inv = amax > 0.0f ? qmax / amax : 0.0f;
        __m512 vinv = _mm512_set1_ps(inv);
        for (int i = 0; i < len; i += 16) {
            __mmask16 m = len - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - i)) - 1);
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + b0 + i), vinv));
            if (bits == 16) _mm512_mask_cvtsepi32_storeu_epi16((int16_t *)dst + b0 + i, m, q);
            else _mm512_mask_cvtsepi32_storeu_epi8((int8_t *)dst + b0 + i, m, q);
        }
        scales[b] = amax / qmax;
    }
}

CPU_TARGET_AVX512 void cpu_avx512_kv_i16_row(int16_t *dst, float *scales, const float *src, int hd) {
    avx512_kv_row(dst, scales, src, hd, 16);
}

CPU_TARGET_AVX512 void cpu_avx512_kv_i8_row(int8_t *dst, float *scales, const float *src, int hd) {
    avx512_kv_row(dst, scales, src, hd, 8);
}

// AVX2: 8 values at a time; a block's last len % 8 values by the scalar expression (the same
// rounding: x * inv, then half to even).
CPU_TARGET_AVX2 void cpu_avx2_kv_i8_row(int8_t *dst, float *scales, const float *src, int hd) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    for (int b0 = 0, b = 0; b0 < hd; b0 += CPU_KV_SCALE_BLOCK, b++) {
        const float *x = src + b0;
        int8_t *d = dst + b0;
        int len = hd - b0 < CPU_KV_SCALE_BLOCK ? hd - b0 : CPU_KV_SCALE_BLOCK, full = len / 8 * 8;
        __m256 vmax = _mm256_setzero_ps();
        for (int i = 0; i < full; i += 8) vmax = _mm256_max_ps(vmax, _mm256_and_ps(_mm256_loadu_ps(x + i), absmask));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        float amax = _mm_cvtss_f32(m4);
        for (int i = full; i < len; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        __m256 vinv = _mm256_set1_ps(inv);
        for (int i = 0; i < full; i += 8) {
            __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv));
            __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
            _mm_storel_epi64((__m128i *)(d + i), _mm_packs_epi16(w, w));
        }
        for (int i = full; i < len; i++) d[i] = (int8_t)((x[i] * inv + 12582912.0f) - 12582912.0f);
        scales[b] = amax / 127.0f;
    }
}

#endif
