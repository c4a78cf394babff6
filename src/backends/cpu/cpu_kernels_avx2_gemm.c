// SPDX-License-Identifier: MIT
// The float product for batches (prompt tokens) on CPUs with AVX2 but no AVX-512. Up to 4 weight
// rows are decoded to float once into scratch (cpu_avx2_dequant_row), then swept by blocks of 3
// tokens: 4 x 3 accumulators of 8 lanes, one weight load feeding 3 FMAs and one x load feeding 4,
// which fills the 16 vector registers and keeps both FMA pipes busy. The integer kernels
// (cpu_kernels_avx2_int.c) spend ~17 instructions on 64 products (vpmaddubsw takes the gemv's 24-bit
// x in three byte passes); this spends 12 FMAs on 96, and decodes a row once per block of tokens. The integer
// batched product stays for the bit-equal pair (cpu_kernels.h, eq), which this one is not: its x is
// the float row itself, not the gemv's quantized one.
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cpu_simd_reduce8.h"
#include "backends/cpu/cpu_simd_targets.h"

// 4 decoded rows W (stride ldw, zero past cols) times NT <= 3 token rows of x (stride cols); NT is a
// constant at every call site, so the accumulators stay in registers. The avx512 set's micro_4xn
// (cpu_kernels_x86.c) is the same loop at 16 lanes and 6 tokens, with masked loads at its tail.
CPU_TARGET_AVX2_INLINE static void micro_4xn(const float *W, int64_t ldw, const float *x, int64_t cols, int NT,
                                             float *out, int64_t ldo, int nr) {
    __m256 acc[4][3];
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= cols; k += 8) {
        __m256 w0 = _mm256_load_ps(W + k), w1 = _mm256_load_ps(W + ldw + k);
        __m256 w2 = _mm256_load_ps(W + 2 * ldw + k), w3 = _mm256_load_ps(W + 3 * ldw + k);
        for (int t = 0; t < NT; t++) {
            __m256 xv = _mm256_loadu_ps(x + t * cols + k);
            acc[0][t] = _mm256_fmadd_ps(w0, xv, acc[0][t]);
            acc[1][t] = _mm256_fmadd_ps(w1, xv, acc[1][t]);
            acc[2][t] = _mm256_fmadd_ps(w2, xv, acc[2][t]);
            acc[3][t] = _mm256_fmadd_ps(w3, xv, acc[3][t]);
        }
    }
    if (k < cols) {  // the last cols % 8 columns: masked loads of x (W is zero there)
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(cols - k)), lane);
        __m256 w0 = _mm256_load_ps(W + k), w1 = _mm256_load_ps(W + ldw + k);
        __m256 w2 = _mm256_load_ps(W + 2 * ldw + k), w3 = _mm256_load_ps(W + 3 * ldw + k);
        for (int t = 0; t < NT; t++) {
            __m256 xv = _mm256_maskload_ps(x + t * cols + k, m);
            acc[0][t] = _mm256_fmadd_ps(w0, xv, acc[0][t]);
            acc[1][t] = _mm256_fmadd_ps(w1, xv, acc[1][t]);
            acc[2][t] = _mm256_fmadd_ps(w2, xv, acc[2][t]);
            acc[3][t] = _mm256_fmadd_ps(w3, xv, acc[3][t]);
        }
    }
    for (int t = 0; t < NT; t++)
        for (int r = 0; r < nr; r++) out[t * ldo + r] = cpu_hsum8(acc[r][t]);
}

CPU_TARGET_AVX2 void cpu_avx2_gemm(const mx_matrix *w, int64_t r0, int nr, const float *x, int n, float *out,
                                   int64_t ldo, float *scratch) {
    int64_t cols = w->cols, ldw = (cols + 7) & ~(int64_t)7;
    float *W = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);  // 4 * ldw + 16 <= cols * 4 + 1024
    for (int i = 0; i < 4; i++) {
        int64_t decoded = i < nr ? cols : 0;  // rows past nr are zero, and every row past cols
        if (decoded) cpu_avx2_dequant_row(w, r0 + i, W + i * ldw);
        memset(W + i * ldw + decoded, 0, sizeof(float) * (size_t)(ldw - decoded));
    }
    int t = 0;
    for (; t + 3 <= n; t += 3) micro_4xn(W, ldw, x + (int64_t)t * cols, cols, 3, out + (int64_t)t * ldo, ldo, nr);
    if (n - t == 2) micro_4xn(W, ldw, x + (int64_t)t * cols, cols, 2, out + (int64_t)t * ldo, ldo, nr);
    else if (n - t == 1) micro_4xn(W, ldw, x + (int64_t)t * cols, cols, 1, out + (int64_t)t * ldo, ldo, nr);
}

#endif
