// SPDX-License-Identifier: MIT
// x86 SIMD kernels (AVX2+FMA, and AVX-512 F/BW/DQ/VL), compiled with per-function target attributes so the binary runs on
// any x86-64 and picks them only when the CPU has the features. Formats without a SIMD decoder
// fall back to the reference decoder and use the SIMD dot product.
#include <stddef.h>

#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backends/cpu/cpu_simd_reduce8.h"
#include "backends/cpu/cpu_simd_targets.h"
#include "core/avx2_target.h"

CPU_TARGET_AVX2 static float avx2_dot(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    float s = cpu_hsum8(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

// Affine 4-bit: 8 codes per u32, scale/bias per group.
CPU_TARGET_AVX2 static void avx2_dequant_affine4(const mx_matrix *w, int64_t row, float *out) {
    const uint8_t *data = (const uint8_t *)w->data + row * (w->cols / 2);
    int gs = w->q.group_size;
    int64_t groups = w->cols / gs;
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i mask = _mm256_set1_epi32(0xf);
    for (int64_t g = 0; g < groups; g++) {
        float s = mx_load_float(w->scales, w->scale_dtype, row * groups + g);
        float b = mx_load_float(w->biases, w->scale_dtype, row * groups + g);
        __m256 vs = _mm256_set1_ps(s), vb = _mm256_set1_ps(b);
        for (int k = 0; k < gs; k += 8) {
            uint32_t word;
            memcpy(&word, data + (g * gs + k) / 2, 4);
            __m256i q = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)word), shifts), mask);
            _mm256_storeu_ps(out + g * gs + k, _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), vs, vb));
        }
    }
}

// Affine 8-bit: one byte per code.
CPU_TARGET_AVX2 static void avx2_dequant_affine8(const mx_matrix *w, int64_t row, float *out) {
    const uint8_t *data = (const uint8_t *)w->data + row * w->cols;
    int gs = w->q.group_size;
    int64_t groups = w->cols / gs;
    for (int64_t g = 0; g < groups; g++) {
        __m256 vs = _mm256_set1_ps(mx_load_float(w->scales, w->scale_dtype, row * groups + g));
        __m256 vb = _mm256_set1_ps(mx_load_float(w->biases, w->scale_dtype, row * groups + g));
        for (int k = 0; k < gs; k += 8) {
            __m128i bytes = _mm_loadl_epi64((const __m128i *)(data + g * gs + k));
            __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
            _mm256_storeu_ps(out + g * gs + k, _mm256_fmadd_ps(q, vs, vb));
        }
    }
}

CPU_TARGET_AVX2 static void avx2_dequant_bf16(const mx_matrix *w, int64_t row, float *out) {
    const uint8_t *data = (const uint8_t *)w->data + row * w->cols * 2;
    int64_t j = 0;
    for (; j + 8 <= w->cols; j += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(data + 2 * j));
        __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(out + j, _mm256_castsi256_ps(u));
    }
    for (; j < w->cols; j++) out[j] = mx_load_float(data, MX_DTYPE_BF16, j);
}

CPU_TARGET_AVX2 void cpu_avx2_dequant_row(const mx_matrix *w, int64_t row, float *out) {
    if (w->q.mode == MX_QUANT_AFFINE && w->q.bits == 4) {
        avx2_dequant_affine4(w, row, out);
    } else if (w->q.mode == MX_QUANT_AFFINE && w->q.bits == 8) {
        avx2_dequant_affine8(w, row, out);
    } else if (w->q.mode == MX_QUANT_NONE && w->dtype == MX_DTYPE_BF16) {
        avx2_dequant_bf16(w, row, out);
    } else {
        mx_matrix_dequant_row(w, row, out);
    }
}

CPU_TARGET_AVX2 static float avx2_row_dot(const mx_matrix *w, int64_t row, const float *x, float *scratch) {
    cpu_avx2_dequant_row(w, row, scratch);
    return avx2_dot(scratch, x, w->cols);
}

static const cpu_kernel_set avx2_set = {
    /* .name = */ "avx2",
    /* .dequant_row = */ cpu_avx2_dequant_row,
    /* .dot = */ avx2_dot,
    /* .row_dot = */ avx2_row_dot,
    /* .gemv = */ NULL,
    /* .gemm = */ cpu_avx2_gemm,
    /* .attn_rows = */ cpu_avx2_attn_rows,
    /* .swiglu = */ cpu_avx2_swiglu,
    /* .kv_i16_row = */ NULL,
    /* .kv_i8_row = */ cpu_avx2_kv_i8_row,
    /* .qx_row_bytes = */ cpu_avx2_qx_row_bytes,
    /* .quantize_x = */ cpu_avx2_quantize_x,
    /* .gemv_q = */ cpu_avx2_gemv_q,
    /* .qx_tiles_bytes = */ cpu_avx2_qx_tiles_bytes,
    /* .quantize_x_tiles = */ cpu_avx2_quantize_x_tiles,
    /* .gemm_q_scratch_bytes = */ cpu_avx2_gemm_q_scratch_bytes,
    // Batches take the float product (cpu_avx2_gemm: faster on AVX2) except where the bit-equal
    // pair is asked for: the integer one is the gemv's row kernel token by token.
    /* .gemm_q = */ NULL,
    /* .qx_row_bytes_eq = */ cpu_avx2_qx_row_bytes,
    /* .quantize_x_eq = */ cpu_avx2_quantize_x,
    /* .gemv_q_eq = */ cpu_avx2_gemv_q,
    /* .gemm_q_eq = */ cpu_avx2_gemm_q,
};

// ---- AVX-512 ------------------------------------------------------------------------------------
// Batch 1 (gemv): affine 4/8-bit and bf16 rows are decoded in registers and dotted at once; the
// affine bias is folded out of the inner loop as bias * sum(x over the group), so the inner loop is
// code -> float, multiply-add. For 4-bit, byte k of a 16-byte chunk holds elements 2k (low nibble)
// and 2k+1 (high nibble), so x is split once per call into even and odd halves per 32 elements.
// Batches (gemm): up to 4 weight rows are decoded to float once into scratch, then a 4 rows x 6
// tokens register-blocked FMA kernel runs over the tokens; the caller keeps the token block small
// enough to stay in L2.

static inline float load_scale(const void *p, mx_dtype dt, int64_t i) {
    if (dt == MX_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)p + 2 * i, 2);
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    return mx_load_float(p, dt, i);
}

CPU_TARGET_AVX512 static float avx512_dot(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

CPU_TARGET_AVX512 static float avx512_row_dot(const mx_matrix *w, int64_t row, const float *x, float *scratch) {
    cpu_avx2_dequant_row(w, row, scratch);
    return avx512_dot(scratch, x, w->cols);
}

// Group sums of x: gsum[g] = sum of x over group g (gs elements).
CPU_TARGET_AVX512 static void group_sums(const float *x, int64_t cols, int gs, float *gsum) {
    for (int64_t g = 0; g < cols / gs; g++) {
        __m512 s = _mm512_setzero_ps();
        for (int k = 0; k < gs; k += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(x + g * gs + k));
        gsum[g] = _mm512_reduce_add_ps(s);
    }
}

#ifndef GEMV_PREFETCH
#define GEMV_PREFETCH 4096  // bytes ahead in the weight stream: the hardware prefetcher alone reaches
                            // about half the streaming bandwidth here (kernel lab: 6 -> 12.6 GB/s)
#endif

CPU_TARGET_AVX512 static void gemv_affine4(const mx_matrix *w, int64_t r0, int64_t r1, const float *x, float *out,
                                           float *scratch) {
    int64_t cols = w->cols, groups = cols / w->q.group_size;
    int gs = w->q.group_size;
    float *xp = scratch, *gsum = scratch + cols;  // xp: per 32 elements, 16 even then 16 odd
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (int64_t k = 0; k < cols; k += 32) {
        __m512 a = _mm512_loadu_ps(x + k), b = _mm512_loadu_ps(x + k + 16);
        _mm512_storeu_ps(xp + k, _mm512_permutex2var_ps(a, ev, b));
        _mm512_storeu_ps(xp + k + 16, _mm512_permutex2var_ps(a, od, b));
    }
    group_sums(x, cols, gs, gsum);
    const __m512i lo4 = _mm512_set1_epi32(0xf);
    const uint8_t *base = (const uint8_t *)w->data;
    int64_t r = r0;
    // Two rows at a time: four independent FMA chains share each load of x.
    for (; r + 2 <= r1; r += 2) {
        const uint8_t *d0 = base + r * (cols / 2), *d1 = d0 + cols / 2;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        float bsum0 = 0.0f, bsum1 = 0.0f;
        for (int64_t g = 0; g < groups; g++) {
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            __m512 c0 = _mm512_setzero_ps(), c1 = _mm512_setzero_ps();
            for (int k = 0; k < gs; k += 32) {
                int64_t e = g * gs + k;
                __m512 xe = _mm512_loadu_ps(xp + e), xo = _mm512_loadu_ps(xp + e + 16);
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(d0 + e / 2)));
                __m512i u = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(d1 + e / 2)));
                if ((k & 127) == 0) {
                    _mm_prefetch((const char *)(d0 + e / 2 + GEMV_PREFETCH), _MM_HINT_T0);
                    _mm_prefetch((const char *)(d1 + e / 2 + GEMV_PREFETCH), _MM_HINT_T0);
                }
                a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, lo4)), xe, a0);
                a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), xo, a1);
                c0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(u, lo4)), xe, c0);
                c1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(u, 4)), xo, c1);
            }
            int64_t si = r * groups + g;
            bsum0 += load_scale(w->biases, w->scale_dtype, si) * gsum[g];
            bsum1 += load_scale(w->biases, w->scale_dtype, si + groups) * gsum[g];
            acc0 = _mm512_fmadd_ps(_mm512_add_ps(a0, a1), _mm512_set1_ps(load_scale(w->scales, w->scale_dtype, si)), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_add_ps(c0, c1),
                                   _mm512_set1_ps(load_scale(w->scales, w->scale_dtype, si + groups)), acc1);
        }
        out[r - r0] = _mm512_reduce_add_ps(acc0) + bsum0;
        out[r + 1 - r0] = _mm512_reduce_add_ps(acc1) + bsum1;
    }
    for (; r < r1; r++) {
        const uint8_t *data = base + r * (cols / 2);
        __m512 acc = _mm512_setzero_ps();
        float bsum = 0.0f;
        for (int64_t g = 0; g < groups; g++) {
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            for (int k = 0; k < gs; k += 32) {
                int64_t e = g * gs + k;
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(data + e / 2)));
                a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(v, lo4)), _mm512_loadu_ps(xp + e), a0);
                a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4)), _mm512_loadu_ps(xp + e + 16), a1);
            }
            float s = load_scale(w->scales, w->scale_dtype, r * groups + g);
            bsum += load_scale(w->biases, w->scale_dtype, r * groups + g) * gsum[g];
            acc = _mm512_fmadd_ps(_mm512_add_ps(a0, a1), _mm512_set1_ps(s), acc);
        }
        out[r - r0] = _mm512_reduce_add_ps(acc) + bsum;
    }
}

CPU_TARGET_AVX512 static void gemv_affine8(const mx_matrix *w, int64_t r0, int64_t r1, const float *x, float *out,
                                           float *scratch) {
    int64_t cols = w->cols, groups = cols / w->q.group_size;
    int gs = w->q.group_size;
    float *gsum = scratch;
    group_sums(x, cols, gs, gsum);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *data = (const uint8_t *)w->data + r * cols;
        __m512 acc = _mm512_setzero_ps();
        float bsum = 0.0f;
        for (int64_t g = 0; g < groups; g++) {
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
            for (int k = 0; k < gs; k += 32) {
                int64_t e = g * gs + k;
                if ((k & 63) == 0) _mm_prefetch((const char *)(data + e + GEMV_PREFETCH), _MM_HINT_T0);
                __m512 q0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(data + e))));
                __m512 q1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(data + e + 16))));
                a0 = _mm512_fmadd_ps(q0, _mm512_loadu_ps(x + e), a0);
                a1 = _mm512_fmadd_ps(q1, _mm512_loadu_ps(x + e + 16), a1);
            }
            float s = load_scale(w->scales, w->scale_dtype, r * groups + g);
            bsum += load_scale(w->biases, w->scale_dtype, r * groups + g) * gsum[g];
            acc = _mm512_fmadd_ps(_mm512_add_ps(a0, a1), _mm512_set1_ps(s), acc);
        }
        out[r - r0] = _mm512_reduce_add_ps(acc) + bsum;
    }
}

CPU_TARGET_AVX512 static void gemv_bf16(const mx_matrix *w, int64_t r0, int64_t r1, const float *x, float *out) {
    int64_t cols = w->cols;
    for (int64_t r = r0; r < r1; r++) {
        const uint16_t *data = (const uint16_t *)((const uint8_t *)w->data + r * cols * 2);
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t j = 0;
        for (; j + 16 <= cols; j += 16) {
            __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(data + j))), 16);
            a0 = _mm512_fmadd_ps(_mm512_castsi512_ps(u), _mm512_loadu_ps(x + j), a0);
        }
        if (j < cols) {
            __mmask16 m = (__mmask16)((1u << (cols - j)) - 1);
            __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, data + j)), 16);
            a1 = _mm512_fmadd_ps(_mm512_castsi512_ps(u), _mm512_maskz_loadu_ps(m, x + j), a1);
        }
        out[r - r0] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
}

CPU_TARGET_AVX512 static void avx512_gemv(const mx_matrix *w, int64_t r0, int64_t r1, const float *x, float *out,
                                          float *scratch) {
    bool affine = w->q.mode == MX_QUANT_AFFINE && w->q.group_size % 32 == 0;
    if (affine && w->q.bits == 4) {
        gemv_affine4(w, r0, r1, x, out, scratch);
    } else if (affine && w->q.bits == 8) {
        gemv_affine8(w, r0, r1, x, out, scratch);
    } else if (w->q.mode == MX_QUANT_NONE && w->dtype == MX_DTYPE_BF16) {
        gemv_bf16(w, r0, r1, x, out);
    } else {
        for (int64_t r = r0; r < r1; r++) out[r - r0] = avx512_row_dot(w, r, x, scratch);
    }
}

// 4 decoded rows W (stride ldw) times nt <= 6 token rows of x; accumulators stay in registers
// because nt is a constant at every call site (the switch below) and the loops unroll fully.
CPU_TARGET_AVX512_INLINE static void micro_4xn(const float *W, int64_t ldw, const float *x, int64_t cols, int nt,
                                               float *out, int64_t ldo, int nr) {
    __m512 acc[4][6];
    for (int r = 0; r < 4; r++)
        for (int t = 0; t < nt; t++) acc[r][t] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m512 w0 = _mm512_load_ps(W + k), w1 = _mm512_load_ps(W + ldw + k);
        __m512 w2 = _mm512_load_ps(W + 2 * ldw + k), w3 = _mm512_load_ps(W + 3 * ldw + k);
        for (int t = 0; t < nt; t++) {
            __m512 xv = _mm512_loadu_ps(x + t * cols + k);
            acc[0][t] = _mm512_fmadd_ps(w0, xv, acc[0][t]);
            acc[1][t] = _mm512_fmadd_ps(w1, xv, acc[1][t]);
            acc[2][t] = _mm512_fmadd_ps(w2, xv, acc[2][t]);
            acc[3][t] = _mm512_fmadd_ps(w3, xv, acc[3][t]);
        }
    }
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        __m512 w0 = _mm512_maskz_load_ps(m, W + k), w1 = _mm512_maskz_load_ps(m, W + ldw + k);
        __m512 w2 = _mm512_maskz_load_ps(m, W + 2 * ldw + k), w3 = _mm512_maskz_load_ps(m, W + 3 * ldw + k);
        for (int t = 0; t < nt; t++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + t * cols + k);
            acc[0][t] = _mm512_fmadd_ps(w0, xv, acc[0][t]);
            acc[1][t] = _mm512_fmadd_ps(w1, xv, acc[1][t]);
            acc[2][t] = _mm512_fmadd_ps(w2, xv, acc[2][t]);
            acc[3][t] = _mm512_fmadd_ps(w3, xv, acc[3][t]);
        }
    }
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) out[t * ldo + r] = _mm512_reduce_add_ps(acc[r][t]);
}

CPU_TARGET_AVX512 static void avx512_gemm(const mx_matrix *w, int64_t r0, int nr, const float *x, int n, float *out,
                                          int64_t ldo, float *scratch) {
    int64_t cols = w->cols, ldw = (cols + 15) & ~(int64_t)15;
    float *W = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);  // 4 * ldw + 16 <= cols * 4 + 1024
    for (int i = 0; i < 4; i++) {
        if (i < nr)
            cpu_avx2_dequant_row(w, r0 + i, W + i * ldw);
        else
            memset(W + i * ldw, 0, sizeof(float) * cols);
    }
    int t = 0;
    for (; t + 6 <= n; t += 6) micro_4xn(W, ldw, x + (int64_t)t * cols, cols, 6, out + (int64_t)t * ldo, ldo, nr);
    switch (n - t) {
    case 5: micro_4xn(W, ldw, x + (int64_t)t * cols, cols, 5, out + (int64_t)t * ldo, ldo, nr); break;
    case 4: micro_4xn(W, ldw, x + (int64_t)t * cols, cols, 4, out + (int64_t)t * ldo, ldo, nr); break;
    case 3: micro_4xn(W, ldw, x + (int64_t)t * cols, cols, 3, out + (int64_t)t * ldo, ldo, nr); break;
    case 2: micro_4xn(W, ldw, x + (int64_t)t * cols, cols, 2, out + (int64_t)t * ldo, ldo, nr); break;
    case 1: micro_4xn(W, ldw, x + (int64_t)t * cols, cols, 1, out + (int64_t)t * ldo, ldo, nr); break;
    default: break;
    }
}

static const cpu_kernel_set avx512_set = {
    /* .name = */ "avx512",
    /* .dequant_row = */ cpu_avx2_dequant_row,
    /* .dot = */ avx512_dot,
    /* .row_dot = */ avx512_row_dot,
    /* .gemv = */ avx512_gemv,
    /* .gemm = */ avx512_gemm,
    /* .attn_rows = */ cpu_avx512_attn_rows,
    /* .swiglu = */ cpu_avx512_swiglu,
    /* .kv_i16_row = */ cpu_avx512_kv_i16_row,
    /* .kv_i8_row = */ cpu_avx512_kv_i8_row,
    /* .qx_row_bytes = */ NULL,
    /* .quantize_x = */ NULL,
    /* .gemv_q = */ NULL,
    /* .qx_tiles_bytes = */ NULL,
    /* .quantize_x_tiles = */ NULL,
    /* .gemm_q_scratch_bytes = */ NULL,
    /* .gemm_q = */ NULL,
    /* .qx_row_bytes_eq = */ NULL,
    /* .quantize_x_eq = */ NULL,
    /* .gemv_q_eq = */ NULL,
    /* .gemm_q_eq = */ NULL,
};

// AVX-512 plus the VNNI integer kernels for affine 4/8-bit: gemv (cpu_kernels_vnni.c) and batches
// (cpu_kernels_vnni_gemm.c).
static const cpu_kernel_set avx512vnni_set = {
    /* .name = */ "avx512vnni",
    /* .dequant_row = */ cpu_avx2_dequant_row,
    /* .dot = */ avx512_dot,
    /* .row_dot = */ avx512_row_dot,
    /* .gemv = */ avx512_gemv,
    /* .gemm = */ avx512_gemm,
    /* .attn_rows = */ cpu_avx512vnni_attn_rows,
    /* .swiglu = */ cpu_avx512_swiglu,
    /* .kv_i16_row = */ cpu_avx512_kv_i16_row,
    /* .kv_i8_row = */ cpu_avx512_kv_i8_row,
    /* .qx_row_bytes = */ cpu_vnni_qx_row_bytes,
    /* .quantize_x = */ cpu_vnni_quantize_x,
    /* .gemv_q = */ cpu_vnni_gemv_q,
    /* .qx_tiles_bytes = */ cpu_vnni_qx_tiles_bytes,
    /* .quantize_x_tiles = */ cpu_vnni_quantize_x_tiles,
    /* .gemm_q_scratch_bytes = */ cpu_vnni_gemm_scratch_bytes,
    /* .gemm_q = */ cpu_vnni_gemm_q,
    /* .qx_row_bytes_eq = */ cpu_vnni_eq_qx_row_bytes,
    /* .quantize_x_eq = */ cpu_vnni_eq_quantize_x,
    /* .gemv_q_eq = */ cpu_vnni_eq_gemv_q,
    /* .gemm_q_eq = */ cpu_vnni_gemm_q_eq,
};

// avx512vnni plus the AMX tile kernels for batches of tokens (cpu_kernels_amx.c).
static const cpu_kernel_set amx_set = {
    /* .name = */ "amx",
    /* .dequant_row = */ cpu_avx2_dequant_row,
    /* .dot = */ avx512_dot,
    /* .row_dot = */ avx512_row_dot,
    /* .gemv = */ avx512_gemv,
    /* .gemm = */ avx512_gemm,
    /* .attn_rows = */ cpu_avx512vnni_attn_rows,
    /* .swiglu = */ cpu_avx512_swiglu,
    /* .kv_i16_row = */ cpu_avx512_kv_i16_row,
    /* .kv_i8_row = */ cpu_avx512_kv_i8_row,
    /* .qx_row_bytes = */ cpu_vnni_qx_row_bytes,
    /* .quantize_x = */ cpu_vnni_quantize_x,
    /* .gemv_q = */ cpu_vnni_gemv_q,
    /* .qx_tiles_bytes = */ cpu_amx_qx_tiles_bytes,
    /* .quantize_x_tiles = */ cpu_amx_quantize_x_tiles,
    /* .gemm_q_scratch_bytes = */ cpu_amx_scratch_bytes,
    /* .gemm_q = */ cpu_amx_gemm_q,
    /* .qx_row_bytes_eq = */ NULL,
    /* .quantize_x_eq = */ NULL,
    /* .gemv_q_eq = */ NULL,
    /* .gemm_q_eq = */ NULL,
};

static int have_avx512(void) {
    return mx_cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
}

const cpu_kernel_set *cpu_kernels_x86_best(void) {
    if (have_avx512() && cpu_vnni_supported() && cpu_amx_supported()) return &amx_set;
    if (have_avx512() && cpu_vnni_supported()) return &avx512vnni_set;
    if (have_avx512()) return &avx512_set;
    return mx_cpu_has_avx2() ? &avx2_set : NULL;
}

const cpu_kernel_set *cpu_kernels_x86_named(const char *name) {
    if (strcmp(name, "avx2") == 0 && mx_cpu_has_avx2()) return &avx2_set;
    if (strcmp(name, "avx512") == 0 && have_avx512()) return &avx512_set;
    if (strcmp(name, "avx512vnni") == 0 && have_avx512() && cpu_vnni_supported()) return &avx512vnni_set;
    if (strcmp(name, "amx") == 0 && have_avx512() && cpu_vnni_supported() && cpu_amx_supported()) return &amx_set;
    return NULL;
}

#else

const cpu_kernel_set *cpu_kernels_x86_best(void) { return NULL; }
const cpu_kernel_set *cpu_kernels_x86_named(const char *name) {
    (void)name;
    return NULL;
}

#endif
