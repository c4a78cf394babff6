// SPDX-License-Identifier: MIT
// x86 SIMD kernels (AVX2+FMA), compiled with per-function target attributes so the binary runs on
// any x86-64 and picks them only when the CPU has the features. Formats without a SIMD decoder
// fall back to the reference decoder and use the SIMD dot product.
#include <stddef.h>

#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

AVX2 static float hsum256(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
    return _mm_cvtss_f32(lo);
}

AVX2 static float avx2_dot(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    float s = hsum256(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

// Affine 4-bit: 8 codes per u32, scale/bias per group.
AVX2 static void avx2_dequant_affine4(const mx_matrix *w, int64_t row, float *out) {
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
AVX2 static void avx2_dequant_affine8(const mx_matrix *w, int64_t row, float *out) {
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

AVX2 static void avx2_dequant_bf16(const mx_matrix *w, int64_t row, float *out) {
    const uint8_t *data = (const uint8_t *)w->data + row * w->cols * 2;
    int64_t j = 0;
    for (; j + 8 <= w->cols; j += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(data + 2 * j));
        __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
        _mm256_storeu_ps(out + j, _mm256_castsi256_ps(u));
    }
    for (; j < w->cols; j++) out[j] = mx_load_float(data, MX_DTYPE_BF16, j);
}

AVX2 static void avx2_dequant_row(const mx_matrix *w, int64_t row, float *out) {
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

AVX2 static float avx2_row_dot(const mx_matrix *w, int64_t row, const float *x, float *scratch) {
    avx2_dequant_row(w, row, scratch);
    return avx2_dot(scratch, x, w->cols);
}

static const cpu_kernel_set avx2_set = {"avx2", avx2_dequant_row, avx2_dot, avx2_row_dot};

static int have_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

const cpu_kernel_set *cpu_kernels_x86_best(void) { return have_avx2() ? &avx2_set : NULL; }

const cpu_kernel_set *cpu_kernels_x86_named(const char *name) {
    if (strcmp(name, "avx2") == 0 && have_avx2()) return &avx2_set;
    return NULL;
}

#else

const cpu_kernel_set *cpu_kernels_x86_best(void) { return NULL; }
const cpu_kernel_set *cpu_kernels_x86_named(const char *name) {
    (void)name;
    return NULL;
}

#endif
