// SPDX-License-Identifier: MIT
// The sum and the maximum of an AVX2 vector's 8 float lanes, in one fixed order (lanes l and l + 4,
// then l and l + 2, then the last pair), for the avx2 set's kernels. Private to src/backends/cpu/;
// include it only from files whose functions carry the AVX2 (or a wider) target attribute.
#ifndef MX_BACKENDS_CPU_SIMD_REDUCE8_H
#define MX_BACKENDS_CPU_SIMD_REDUCE8_H

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/cpu_simd_targets.h"

CPU_TARGET_AVX2_INLINE static float cpu_hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

CPU_TARGET_AVX2_INLINE static float cpu_hmax8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_shuffle_ps(m, m, 1)));
}
#endif

#endif
