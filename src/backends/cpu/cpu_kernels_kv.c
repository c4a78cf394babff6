// SPDX-License-Identifier: MIT
// AVX-512 conversion of a KV row to the I16 cache layout (cpu_kernels_kv_i16_row): per block of
// CPU_KV_SCALE_BLOCK values, max|x| by a vector max, then x * (32767 / max|x|) rounded half to even
// by the conversion to int32 (the default rounding mode, as the scalar reference's add-and-subtract
// of 1.5 * 2^23 rounds) and narrowed to int16. The multiply is the only float operation and the
// scale and its inverse are the reference's scalar expressions, so the rows and scales are
// bit-identical to the scalar version's (test_cpu_kernels compares every bit). A prefill's KV store
// converted its rows one value at a time (0.8% of a pp512, bench/RESULTS.md CPU round 9).
#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define KV_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c")))

KV_AVX512 void cpu_avx512_kv_i16_row(int16_t *dst, float *scales, const float *src, int hd) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    for (int b0 = 0, b = 0; b0 < hd; b0 += CPU_KV_SCALE_BLOCK, b++) {
        int len = hd - b0 < CPU_KV_SCALE_BLOCK ? hd - b0 : CPU_KV_SCALE_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < len; i += 16) {
            __mmask16 m = len - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - i)) - 1);
            float v = _mm512_reduce_max_ps(_mm512_and_ps(_mm512_maskz_loadu_ps(m, src + b0 + i), absmask));
            amax = v > amax ? v : amax;
        }
        float inv = amax > 0.0f ? 32767.0f / amax : 0.0f;
        __m512 vinv = _mm512_set1_ps(inv);
        for (int i = 0; i < len; i += 16) {
            __mmask16 m = len - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (len - i)) - 1);
            __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, src + b0 + i), vinv));
            _mm512_mask_cvtsepi32_storeu_epi16(dst + b0 + i, m, q);
        }
        scales[b] = amax / 32767.0f;
    }
}

#else

void cpu_avx512_kv_i16_row(int16_t *dst, float *scales, const float *src, int hd) {
    (void)dst, (void)scales, (void)src, (void)hd;
}

#endif
