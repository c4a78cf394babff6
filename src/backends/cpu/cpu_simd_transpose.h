// SPDX-License-Identifier: MIT
// A 16 x 16 transpose of 32-bit elements in AVX-512 registers, shared by the integer batch kernels
// (cpu_kernels_vnni_gemm.c: weight codes; cpu_kernels_amx.c: activation tiles). Private to
// src/backends/cpu/; include it only from files whose functions carry the AVX-512 target attributes.
#ifndef MX_BACKENDS_CPU_SIMD_TRANSPOSE_H
#define MX_BACKENDS_CPU_SIMD_TRANSPOSE_H

#if defined(__x86_64__)
#include <immintrin.h>

// r[k] = dword k of every input row r[0..15] (lane m: row m), in place.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c"), always_inline)) static inline void
cpu_transpose16x16(__m512i r[16]) {
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
#endif

#endif
