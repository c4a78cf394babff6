// SPDX-License-Identifier: MIT
// A 16 x 16 transpose of 32-bit elements in AVX-512 registers, shared by the integer batch kernels
// (cpu_kernels_vnni_gemm.c: weight codes; cpu_kernels_amx.c: activation tiles), and the
// transpose-and-add that turns 16 vectors into their 16 sums (the attention kernels' scores of 16
// keys: cpu_kernels_attn.c, cpu_kernels_attn_vnni.c). Private to
// src/backends/cpu/; include it only from files whose functions carry the AVX-512 target attributes.
#ifndef MX_BACKENDS_CPU_SIMD_TRANSPOSE_H
#define MX_BACKENDS_CPU_SIMD_TRANSPOSE_H

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/cpu_simd_targets.h"

// r[k] = dword k of every input row r[0..15] (lane m: row m), in place.
CPU_TARGET_AVX512_INLINE static void cpu_transpose16x16(__m512i r[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    // u[4q + e], per 128-bit lane L: element 4L + e of rows 4q..4q+3.
    for (int q = 0; q < 4; q++) {
        u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
        u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
        u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
        u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
    }
    for (int e = 0; e < 4; e++) {
        __m512i v0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x88), w0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xdd);
        __m512i v1 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x88), w1 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xdd);
        r[e] = _mm512_shuffle_i32x4(v0, v1, 0x88);
        r[e + 8] = _mm512_shuffle_i32x4(v0, v1, 0xdd);
        r[e + 4] = _mm512_shuffle_i32x4(w0, w1, 0x88);
        r[e + 12] = _mm512_shuffle_i32x4(w0, w1, 0xdd);
    }
}

// Lane i of the result = the sum of the 16 lanes of v[i].
CPU_TARGET_AVX512_INLINE static __m512 cpu_reduce16_ps(const __m512 v[16]) {
    __m512 t[8], u[4];
    for (int i = 0; i < 8; i++)  // per 128-bit block: [a0+a2, b0+b2, a1+a3, b1+b3]
        t[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
    for (int i = 0; i < 4; i++) {  // per 128-bit block: the block sums of 4 keys, in key order
        __m512d a = _mm512_castps_pd(t[2 * i]), b = _mm512_castps_pd(t[2 * i + 1]);
        u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
    }
    // Add the four 128-bit blocks of each u[i]: u[i] ends up in block i of the result.
    __m512 x0 = _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xdd));
    __m512 x1 = _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(x0, x1, 0x88), _mm512_shuffle_f32x4(x0, x1, 0xdd));
}
#endif

#endif
