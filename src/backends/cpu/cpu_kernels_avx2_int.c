// SPDX-License-Identifier: MIT
// Integer dot-product kernels for affine 4/8-bit weights on CPUs with AVX2 but no AVX-512 (most
// laptops and many servers: AMD Zen 1-3, Intel client cores). The activation row is quantized once
// per product, in the very layout and with the very arithmetic of the VNNI gemv
// (cpu_kernels_vnni.c states them: three signed byte digits of x / sx for 4-bit weights, two int16
// parts for 8-bit), so the same ~24 bits of x per group reach the products; the affine bias is
// folded out as w_bias * (exact float sum of x over the group).
//
// 4-bit: AVX2 has no vpdpbusd; `vpmaddubsw` multiplies the unsigned codes (0..15) with one signed
// digit part, adding adjacent pairs into int16 (at most 2 * 15 * 128, so the even and odd columns'
// pair sums can be added in int16 too), and `vpmaddwd` with 1 (or 256 for the leading digit) widens
// to int32 lanes of 8 products. The three parts combine in the lanes as 65536 p0 + 256 p1 + p2 (below
// 2^30). A 32-byte load is 64 codes of one weight group (groups of 64 or 128), so each load costs one
// conversion and one FMA with the group's scale times sx.
// 8-bit: codes zero-extended to int16 times both int16 parts of x by `vpmaddwd`.
//
// The batched product (prompt tokens) runs the same row kernel for each token of a block of up to 16
// rows, whose weights stay in L1/L2 while the tokens pass: a row of x gives the same bits through
// both, so this set has the bit-equal pair (cpu_kernels.h, eq) with no second kernel.
// Prepared x for batches: 16-token tiles, each 16 quantized rows (rows past n zero).
#include <stddef.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "backends/cpu/cpu_simd_reduce8.h"
#include "backends/cpu/cpu_simd_targets.h"

#define AVX2_Q_ROWS 4         // rows per pass of the row kernels
#define AVX2_Q_PREFETCH 4096  // bytes ahead in each weight row stream

static int64_t chunks4(const mx_matrix *w) { return (w->cols + 127) / 128; }
static int64_t padded_groups4(const mx_matrix *w) { return chunks4(w) * (128 / w->q.group_size); }

size_t cpu_avx2_qx_row_bytes(const mx_matrix *w) {
    if (w->q.mode != MX_QUANT_AFFINE) return 0;
    int gs = w->q.group_size;
    bool ok = (w->q.bits == 4 && (gs == 64 || gs == 128)) || (w->q.bits == 8 && (gs == 32 || gs == 64 || gs == 128));
    if (!ok || w->cols <= 0 || w->cols % gs != 0) return 0;
    if (w->q.bits == 4) return ((size_t)chunks4(w) * 384 + (size_t)padded_groups4(w) * 8 + 63) & ~(size_t)63;
    return ((size_t)w->cols * 4 + (size_t)(w->cols / gs) * 8 + 63) & ~(size_t)63;
}

// max|x| and the float sum of one group of gs (a multiple of 16) values.
CPU_TARGET_AVX2_INLINE static void group_stats(const float *xg, int gs, float *amax, float *sum) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 mx = _mm256_setzero_ps(), sm = _mm256_setzero_ps();
    for (int k = 0; k < gs; k += 8) {
        __m256 v = _mm256_loadu_ps(xg + k);
        mx = _mm256_max_ps(mx, _mm256_and_ps(v, absmask));
        sm = _mm256_add_ps(sm, v);
    }
    *amax = cpu_hmax8(mx);
    *sum = cpu_hsum8(sm);
}

// 8 values t (x / sx, |t| <= 127) as three signed byte digits of T = round(t * 65536) = p0 * 65536 +
// p1 * 256 + p2 (digits in [-128, 127]): p0 at dst, p1 at dst + stride, p2 at dst + 2 * stride.
// T + 0x808080 has every digit plus 128 in its three low bytes; flipping their top bits gives the
// signed digits, which one in-lane byte shuffle and one dword permute put in order.
CPU_TARGET_AVX2_INLINE static void split3(__m256 t, uint8_t *dst, size_t stride) {
    const __m256i bias = _mm256_set1_epi32(0x808080);
    __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(t, _mm256_set1_ps(65536.0f)));
    __m256i d = _mm256_xor_si256(_mm256_add_epi32(v, bias), bias);
    const __m256i gather = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, -1, -1, -1, -1, 0, 4, 8, 12, 1, 5,
                                            9, 13, 2, 6, 10, 14, -1, -1, -1, -1);
    __m256i r = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(d, gather), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
    _mm_storel_epi64((__m128i *)(dst + 2 * stride), lo);                     // p2
    _mm_storel_epi64((__m128i *)(dst + stride), _mm_unpackhi_epi64(lo, lo));  // p1
    _mm_storel_epi64((__m128i *)dst, hi);                                     // p0
}

// The even (e) and odd (o) columns of 16 consecutive ones a (0-7) and b (8-15), in order.
CPU_TARGET_AVX2_INLINE static void even_odd(__m256 a, __m256 b, __m256 *e, __m256 *o) {
    __m256 ev = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), od = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    *e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), _MM_SHUFFLE(3, 1, 2, 0)));
    *o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), _MM_SHUFFLE(3, 1, 2, 0)));
}

// One row of x for 4-bit weights: per 128-column chunk 384 bytes (p0 of the 64 even columns, p0 of
// the 64 odd ones, then p1 and p2 alike), then float sx[pg] (max|x| / 127 / 65536) and gsum[pg].
CPU_TARGET_AVX2_INLINE static void quantize_row4(const mx_matrix *w, const float *xr, uint8_t *dst) {
    int64_t cols = w->cols, chunks = chunks4(w), pg = padded_groups4(w);
    int gs = w->q.group_size;
    float *sx = (float *)(dst + chunks * 384), *gsum = sx + pg;
    memset(dst, 0, (size_t)(chunks * 384 + pg * 8));
    for (int64_t g = 0; g < cols / gs; g++) {
        const float *xg = xr + g * gs;
        float amax;
        group_stats(xg, gs, &amax, &gsum[g]);
        sx[g] = amax / 127.0f / 65536.0f;
        __m256 inv = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        for (int k = 0; k < gs; k += 16) {
            int64_t e = g * gs + k;  // 16 columns: 8 even ones at byte e % 128 / 2 of the chunk's even block
            uint8_t *c = dst + e / 128 * 384 + e % 128 / 2;
            __m256 ev, od;
            even_odd(_mm256_loadu_ps(xg + k), _mm256_loadu_ps(xg + k + 8), &ev, &od);
            split3(_mm256_mul_ps(ev, inv), c, 128);
            split3(_mm256_mul_ps(od, inv), c + 64, 128);
        }
    }
}

// One row of x for 8-bit weights: int16 q[cols], int16 r[cols] (x / sx ~= q + r / 32768, sx = max|x|
// / 32767), float sx[groups], float gsum[groups].
CPU_TARGET_AVX2_INLINE static void quantize_row8(const mx_matrix *w, const float *xr, uint8_t *dst) {
    int64_t cols = w->cols, groups = cols / w->q.group_size;
    int gs = w->q.group_size;
    int16_t *q = (int16_t *)dst;
    float *sx = (float *)(dst + cols * 4), *gsum = sx + groups;
    for (int64_t g = 0; g < groups; g++) {
        const float *xg = xr + g * gs;
        float amax;
        group_stats(xg, gs, &amax, &gsum[g]);
        sx[g] = amax / 32767.0f;
        __m256 inv = _mm256_set1_ps(amax > 0.0f ? 32767.0f / amax : 0.0f);
        for (int k = 0; k < gs; k += 16) {
            __m256 t0 = _mm256_mul_ps(_mm256_loadu_ps(xg + k), inv), t1 = _mm256_mul_ps(_mm256_loadu_ps(xg + k + 8), inv);
            __m256 q0 = _mm256_round_ps(t0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256 q1 = _mm256_round_ps(t1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256 r0 = _mm256_mul_ps(_mm256_sub_ps(t0, q0), _mm256_set1_ps(32768.0f));
            __m256 r1 = _mm256_mul_ps(_mm256_sub_ps(t1, q1), _mm256_set1_ps(32768.0f));
            // packs interleaves the 128-bit lanes (0-3, 8-11, 4-7, 12-15); the qword permute undoes it.
            __m256i qq = _mm256_packs_epi32(_mm256_cvtps_epi32(q0), _mm256_cvtps_epi32(q1));
            __m256i rr = _mm256_packs_epi32(_mm256_cvtps_epi32(r0), _mm256_cvtps_epi32(r1));
            _mm256_storeu_si256((__m256i *)(q + g * gs + k), _mm256_permute4x64_epi64(qq, _MM_SHUFFLE(3, 1, 2, 0)));
            _mm256_storeu_si256((__m256i *)(q + cols + g * gs + k), _mm256_permute4x64_epi64(rr, _MM_SHUFFLE(3, 1, 2, 0)));
        }
    }
}

CPU_TARGET_AVX2 void cpu_avx2_quantize_x(const mx_matrix *w, const float *x, int n, void *qx) {
    size_t row_bytes = cpu_avx2_qx_row_bytes(w);
    for (int t = 0; t < n; t++) {
        uint8_t *dst = (uint8_t *)qx + (size_t)t * row_bytes;
        if (w->q.bits == 4) quantize_row4(w, x + (int64_t)t * w->cols, dst);
        else quantize_row8(w, x + (int64_t)t * w->cols, dst);
    }
}

// 8 scales (or biases) of one row from index i as floats; entries past `count` are zero.
CPU_TARGET_AVX2_INLINE static __m256 load8(const void *p, mx_dtype dt, int64_t i, int count) {
    if (count == 8) {
        if (dt == MX_DTYPE_BF16)
            return _mm256_castsi256_ps(
                _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i))), 16));
        if (dt == MX_DTYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
        if (dt == MX_DTYPE_F32) return _mm256_loadu_ps((const float *)p + i);
    }
    float tmp[8] = {0};
    for (int k = 0; k < count; k++) tmp[k] = mx_load_float(p, dt, i + k);
    return _mm256_loadu_ps(tmp);
}

// Up to 8 groups from g0 for NR rows from r: each row's scales times sx into sc[i][], its biases
// times gsum added to bacc[i]. Returns the block's group count.
CPU_TARGET_AVX2_INLINE static int scale_block(const mx_matrix *w, int64_t r, int NR, int64_t groups, int64_t g0,
                                              const float *sx, const float *gsum, float (*sc)[8], __m256 *bacc) {
    int nb = groups - g0 < 8 ? (int)(groups - g0) : 8;
    __m256 vsx = load8(sx, MX_DTYPE_F32, g0, nb), vgs = load8(gsum, MX_DTYPE_F32, g0, nb);
    for (int i = 0; i < NR; i++) {
        int64_t si = (r + i) * groups + g0;
        _mm256_storeu_ps(sc[i], _mm256_mul_ps(load8(w->scales, w->scale_dtype, si, nb), vsx));
        bacc[i] = _mm256_fmadd_ps(load8(w->biases, w->scale_dtype, si, nb), vgs, bacc[i]);
    }
    return nb;
}

// NR (1..4) rows of 4-bit weights from row r, group size GS (64 or 128); both are constants at each
// call site so the loops unroll. A row's result does not depend on NR (its own lanes, in order).
CPU_TARGET_AVX2_INLINE static void q4_rows(const mx_matrix *w, int64_t r, int NR, int GS, const uint8_t *qx,
                                           float *out) {
    int64_t cols = w->cols, groups = cols / GS, row_bytes = cols / 2, pg = padded_groups4(w);
    const float *sx = (const float *)(qx + chunks4(w) * 384), *gsum = sx + pg;
    const uint8_t *d[AVX2_Q_ROWS];
    for (int i = 0; i < NR; i++) d[i] = (const uint8_t *)w->data + (r + i) * row_bytes;
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1), c256 = _mm256_set1_epi16(256);
    __m256 acc[AVX2_Q_ROWS], bacc[AVX2_Q_ROWS];
    float sc[AVX2_Q_ROWS][8];
    for (int i = 0; i < NR; i++) acc[i] = bacc[i] = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < groups; g0 += 8) {
        int nb = scale_block(w, r, NR, groups, g0, sx, gsum, sc, bacc);
        // 64-column halves of the block's groups: half h is bytes 32 h of each row, group h * 64 / GS.
        for (int64_t h = g0 * GS / 64; h < (g0 + nb) * GS / 64; h++) {
            const uint8_t *xb = qx + h / 2 * 384 + h % 2 * 32;
            const __m256i x0e = _mm256_load_si256((const __m256i *)xb), x0o = _mm256_load_si256((const __m256i *)(xb + 64));
            const __m256i x1e = _mm256_load_si256((const __m256i *)(xb + 128));
            const __m256i x1o = _mm256_load_si256((const __m256i *)(xb + 192));
            const __m256i x2e = _mm256_load_si256((const __m256i *)(xb + 256));
            const __m256i x2o = _mm256_load_si256((const __m256i *)(xb + 320));
            int gi = (int)(h * 64 / GS - g0);
            for (int i = 0; i < NR; i++) {
                const uint8_t *p = d[i] + h * 32;
                if (h % 2 == 0) _mm_prefetch((const char *)(p + AVX2_Q_PREFETCH), _MM_HINT_T0);
                __m256i v = _mm256_loadu_si256((const __m256i *)p);
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                __m256i s0 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x0e), _mm256_maddubs_epi16(hi, x0o));
                __m256i s1 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x1e), _mm256_maddubs_epi16(hi, x1o));
                __m256i s2 = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x2e), _mm256_maddubs_epi16(hi, x2o));
                __m256i s = _mm256_add_epi32(_mm256_madd_epi16(s0, c256), _mm256_madd_epi16(s1, ones));
                s = _mm256_add_epi32(_mm256_slli_epi32(s, 8), _mm256_madd_epi16(s2, ones));
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(sc[i][gi]), acc[i]);
            }
        }
    }
    for (int i = 0; i < NR; i++) out[i] = cpu_hsum8(acc[i]) + cpu_hsum8(bacc[i]);
}

// NR (1..4) rows of 8-bit weights from row r, group size GS (32, 64 or 128).
CPU_TARGET_AVX2_INLINE static void q8_rows(const mx_matrix *w, int64_t r, int NR, int GS, const uint8_t *qx,
                                           float *out) {
    int64_t cols = w->cols, groups = cols / GS, row_bytes = cols;
    const int16_t *xq = (const int16_t *)qx;
    const float *sx = (const float *)(qx + cols * 4), *gsum = sx + groups;
    const uint8_t *d[AVX2_Q_ROWS];
    for (int i = 0; i < NR; i++) d[i] = (const uint8_t *)w->data + (r + i) * row_bytes;
    __m256 acc[AVX2_Q_ROWS], lacc[AVX2_Q_ROWS], bacc[AVX2_Q_ROWS];  // q part, residual part, bias term
    float sc[AVX2_Q_ROWS][8];
    for (int i = 0; i < NR; i++) acc[i] = lacc[i] = bacc[i] = _mm256_setzero_ps();
    for (int64_t g0 = 0; g0 < groups; g0 += 8) {
        int nb = scale_block(w, r, NR, groups, g0, sx, gsum, sc, bacc);
        for (int gi = 0; gi < nb; gi++) {
            int64_t g = g0 + gi;
            __m256i ia[AVX2_Q_ROWS], il[AVX2_Q_ROWS];
            for (int i = 0; i < NR; i++) ia[i] = il[i] = _mm256_setzero_si256();
            for (int k = 0; k < GS; k += 16) {
                int64_t e = g * GS + k;
                __m256i xv = _mm256_loadu_si256((const __m256i *)(xq + e));
                __m256i lv = _mm256_loadu_si256((const __m256i *)(xq + cols + e));
                for (int i = 0; i < NR; i++) {
                    if ((e & 63) == 0) _mm_prefetch((const char *)(d[i] + e + AVX2_Q_PREFETCH), _MM_HINT_T0);
                    __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(d[i] + e)));
                    ia[i] = _mm256_add_epi32(ia[i], _mm256_madd_epi16(v, xv));
                    il[i] = _mm256_add_epi32(il[i], _mm256_madd_epi16(v, lv));
                }
            }
            for (int i = 0; i < NR; i++) {
                __m256 vs = _mm256_set1_ps(sc[i][gi]);
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i]), vs, acc[i]);
                lacc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(il[i]), vs, lacc[i]);
            }
        }
    }
    const __m256 inv32k = _mm256_set1_ps(1.0f / 32768.0f);
    for (int i = 0; i < NR; i++) out[i] = cpu_hsum8(_mm256_fmadd_ps(lacc[i], inv32k, acc[i])) + cpu_hsum8(bacc[i]);
}

CPU_TARGET_AVX2_INLINE static void q_range(const mx_matrix *w, int64_t r0, int64_t r1, int BITS, int GS,
                                           const uint8_t *qx, float *out) {
    int64_t r = r0;
    if (BITS == 4) {
        for (; r + AVX2_Q_ROWS <= r1; r += AVX2_Q_ROWS) q4_rows(w, r, AVX2_Q_ROWS, GS, qx, out + (r - r0));
        for (; r < r1; r++) q4_rows(w, r, 1, GS, qx, out + (r - r0));
    } else {
        for (; r + AVX2_Q_ROWS <= r1; r += AVX2_Q_ROWS) q8_rows(w, r, AVX2_Q_ROWS, GS, qx, out + (r - r0));
        for (; r < r1; r++) q8_rows(w, r, 1, GS, qx, out + (r - r0));
    }
}

CPU_TARGET_AVX2 void cpu_avx2_gemv_q(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out) {
    const uint8_t *q = qx;
    int gs = w->q.group_size;
    if (w->q.bits == 4) {
        if (gs == 64) q_range(w, r0, r1, 4, 64, q, out);
        else q_range(w, r0, r1, 4, 128, q, out);
    } else {
        if (gs == 32) q_range(w, r0, r1, 8, 32, q, out);
        else if (gs == 64) q_range(w, r0, r1, 8, 64, q, out);
        else q_range(w, r0, r1, 8, 128, q, out);
    }
}

size_t cpu_avx2_qx_tiles_bytes(const mx_matrix *w, int n) {
    return cpu_avx2_qx_row_bytes(w) * 16 * (size_t)((n + 15) / 16);
}

void cpu_avx2_quantize_x_tiles(const mx_matrix *w, const float *x, int n, int tile, void *qx) {
    size_t row_bytes = cpu_avx2_qx_row_bytes(w);
    int t0 = 16 * tile, live = n - t0 < 16 ? n - t0 : 16;
    uint8_t *dst = (uint8_t *)qx + (size_t)t0 * row_bytes;
    cpu_avx2_quantize_x(w, x + (int64_t)t0 * w->cols, live, dst);
    memset(dst + (size_t)live * row_bytes, 0, (size_t)(16 - live) * row_bytes);
}

size_t cpu_avx2_gemm_q_scratch_bytes(const mx_matrix *w) {
    (void)w;
    return 0;
}

void cpu_avx2_gemm_q(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                     void *scratch) {
    (void)scratch;
    size_t row_bytes = cpu_avx2_qx_row_bytes(w);
    for (int t = 0; t < n; t++)
        cpu_avx2_gemv_q(w, r0, r0 + nr, (const uint8_t *)qx + (size_t)t * row_bytes, out + (int64_t)t * ldo + r0);
}

#endif
