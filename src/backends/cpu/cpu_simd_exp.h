// SPDX-License-Identifier: MIT
// exp(x) on 16 float lanes with AVX-512 and on 8 with AVX2, shared by the CPU kernels that need a
// vector exponential (attention's online softmax, SwiGLU). Private to src/backends/cpu/; include it
// only from files whose functions carry the AVX2 or AVX-512 target attributes.
#ifndef MX_BACKENDS_CPU_SIMD_EXP_H
#define MX_BACKENDS_CPU_SIMD_EXP_H

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/cpu_simd_targets.h"

// About 1 ulp for x in [-88, 88]; below -104 the result is 0 (softmax's range is x in [-88, 0]).
// x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial, times 2^n by scalef (which goes
// to 0 smoothly for very negative n). Callers keep x <= 88 (e^88 is finite in float32).
CPU_TARGET_AVX512_INLINE static __m512 cpu_exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

// The same on 8 lanes with AVX2 (the same reduction and polynomial), for x in [-87, 88]: AVX2 has no
// scalef, so 2^n is built in the exponent bits, which needs n >= -126; below -87 the result is
// e^-87 (~1.6e-38) instead of going on to 0, which a softmax's sum does not see.
CPU_TARGET_AVX2_INLINE static __m256 cpu_exp8(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

#endif
