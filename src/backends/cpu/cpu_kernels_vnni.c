// SPDX-License-Identifier: MIT
// Integer dot-product kernels for affine 4/8-bit weights on CPUs with AVX-512 VNNI (batch 1: the
// decode products). The activation row x is quantized once per matmul call with one float scale per
// weight group, to parts whose sum keeps float32-level precision (~1e-7 relative to the group's
// largest value; the parts' leading term alone, ~16 bits, measured 4-6e-4 relative logit error on
// the parity fixtures, too close to the 1e-3 bound). The affine bias is folded out as
// w_bias * sum(x over the group), with the exact float group sums. Codes never leave registers.
//
// 4-bit weights (the decode hot path): x ~= sx[g] * (p0 + p1 / 256 + p2 / 65536) with signed bytes
// p0 in [-127, 127] and p1, p2 in [-128, 127] (x / sx rounded to 1/65536, then split). One 64-byte
// load is 128 codes; its low nibbles (the even columns) and high nibbles (the odd ones) are
// multiplied with each byte part by `vpdpbusd` (64 products per instruction, four summed into each
// int32 lane), and the three parts are combined in the integer lanes by shifting the running sum 8
// bits left between parts: a lane sums 8 products of at most 15 * 128 per part, so the combined value
// stays below 2^30. Lanes 0-7 of a 128-column chunk hold one 64-wide group and lanes 8-15 the next
// (or all 16 one 128-wide group), so a chunk costs one int-to-float conversion and one FMA with a
// vector of the two groups' scales per row: about 13 vector instructions per 128 weights and row,
// against 22 for int16 parts.
// 8-bit weights: x ~= sx[g] * (q + r / 32768) in two int16 parts, |q| <= 32767, |r| <= 16384; codes
// zero-extended to u16 are multiplied with both by `vpdpwssd`, and per row and group the two int32
// sums are converted once and scaled by w_scale * sx.
//
// Quantized row layouts (cpu_vnni_qx_row_bytes bytes, 64-byte multiple).
// 4-bit: per 128-column chunk 384 bytes: p0 of the 64 even columns, p0 of the 64 odd ones, then the
// same for p1 and p2 (columns past cols are zero); then float sx[pg] (already divided by 65536) and
// float gsum[pg], pg = chunks * 128 / group size (entries past the last group are zero).
// 8-bit: int16 q[cols], int16 r[cols], then float sx[groups], then float gsum[groups].
#include <stdbool.h>
#include <stddef.h>

#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cpu_int8_activations.h"
#include "backends/cpu/cpu_simd_targets.h"

#include "backends/cpu/cpu_kernels_vnni_gemv.h"
#include "core/cpu_features.h"

size_t cpu_vnni_qx_row_bytes(const mx_matrix *w) {
    if (w->q.mode != MX_QUANT_AFFINE) return 0;
    int gs = w->q.group_size;
    bool ok = (w->q.bits == 4 && (gs == 64 || gs == 128)) || (w->q.bits == 8 && (gs == 32 || gs == 64 || gs == 128));
    if (!ok || w->cols % gs != 0 || w->cols <= 0) return 0;
    if (w->q.bits == 4) return ((size_t)q4_chunks(w) * 384 + (size_t)q4_padded_groups(w) * 8 + 63) & ~(size_t)63;
    size_t groups = (size_t)(w->cols / gs);
    return ((size_t)w->cols * 4 + groups * 8 + 63) & ~(size_t)63;
}

// Quantizes 16 floats with multiplier inv: q (rounded) at dst, the residual * 32768 at dst + cols.
CPU_TARGET_VNNI_INLINE static void put16(int16_t *dst, int64_t cols, __m512 v, __m512 inv) {
    __m512 t = _mm512_mul_ps(v, inv);
    __m512 q = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_mul_ps(_mm512_sub_ps(t, q), _mm512_set1_ps(32768.0f));
    _mm256_storeu_si256((__m256i *)dst, _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(q)));
    _mm256_storeu_si256((__m256i *)(dst + cols), _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(r)));
}

// One row of x for 4-bit weights (layout in the file comment).
CPU_TARGET_VNNI_INLINE static void quantize_row4(const mx_matrix *w, const float *xr, uint8_t *dst) {
    int64_t cols = w->cols, chunks = q4_chunks(w), pg = q4_padded_groups(w);
    int gs = w->q.group_size;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    float *sx = (float *)(dst + chunks * 384), *gsum = sx + pg;
    memset(dst, 0, (size_t)(chunks * 384 + pg * 8));
    for (int64_t g = 0; g < cols / gs; g++) {
        const float *xg = xr + g * gs;
        float amax;
        cpu_int8_group_stats(xg, gs, &amax, &gsum[g]);
        sx[g] = amax / 127.0f / 65536.0f;
        __m512 inv = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        for (int k = 0; k < gs; k += 32) {
            int64_t e = g * gs + k;  // 32 columns: 16 even ones at byte e % 128 / 2 of the chunk's even block
            uint8_t *c = dst + e / 128 * 384 + e % 128 / 2;
            __m512 lo = _mm512_loadu_ps(xg + k), hi = _mm512_loadu_ps(xg + k + 16);
            cpu_int8_split3_base256(_mm512_mul_ps(_mm512_permutex2var_ps(lo, ev, hi), inv), c, 128);
            cpu_int8_split3_base256(_mm512_mul_ps(_mm512_permutex2var_ps(lo, od, hi), inv), c + 64, 128);
        }
    }
}

CPU_TARGET_VNNI void cpu_vnni_quantize_x(const mx_matrix *w, const float *x, int n, void *qx) {
    int64_t cols = w->cols;
    int gs = w->q.group_size;
    int64_t groups = cols / gs;
    size_t row_bytes = cpu_vnni_qx_row_bytes(w);
    if (w->q.bits == 4) {
        for (int t = 0; t < n; t++) quantize_row4(w, x + (int64_t)t * cols, (uint8_t *)qx + (size_t)t * row_bytes);
        return;
    }
    for (int t = 0; t < n; t++) {
        const float *xr = x + (int64_t)t * cols;
        uint8_t *dst = (uint8_t *)qx + (size_t)t * row_bytes;
        int16_t *q = (int16_t *)dst;
        float *sx = (float *)(dst + cols * 4), *gsum = sx + groups;
        for (int64_t g = 0; g < groups; g++) {
            const float *xg = xr + g * gs;
            float amax;
            cpu_int8_group_stats(xg, gs, &amax, &gsum[g]);
            sx[g] = amax / 32767.0f;
            __m512 inv = _mm512_set1_ps(amax > 0.0f ? 32767.0f / amax : 0.0f);
            for (int k = 0; k < gs; k += 16) put16(q + g * gs + k, cols, _mm512_loadu_ps(xg + k), inv);
        }
    }
}

// One block of up to 16 groups from g0 for NR rows from r: each row's 16 scales times sx into sc[i]
// (lanes: groups), and its biases times gsum added to bacc[i]. Returns the block's group count.
CPU_TARGET_VNNI_INLINE static int scale_block(const mx_matrix *w, int64_t r, int NR, int64_t groups, int64_t g0,
                                              const float *sx, const float *gsum, __m512 *sc, __m512 *bacc) {
    int nb = groups - g0 < 16 ? (int)(groups - g0) : 16;
    __mmask16 m = (__mmask16)((1u << nb) - 1);
    __m512 vsx = _mm512_maskz_loadu_ps(m, sx + g0), vgs = _mm512_maskz_loadu_ps(m, gsum + g0);
    for (int i = 0; i < NR; i++) {
        int64_t si = (r + i) * groups + g0;
        sc[i] = _mm512_mul_ps(cpu_int8_load16(w->scales, w->scale_dtype, si, m), vsx);
        bacc[i] = _mm512_fmadd_ps(cpu_int8_load16(w->biases, w->scale_dtype, si, m), vgs, bacc[i]);
    }
    return nb;
}

// NR (1..4) rows of 4-bit weights from row r, group size GS (64 or 128); both are constants at each
// call site so the loops unroll. Groups go in blocks of 16: the block's scales (times sx) and biases
// are loaded as vectors, the bias term accumulates as a vector, and each 128-column chunk takes its
// groups' scales from the block vector with one permute (lanes 0-7 group 2j, 8-15 group 2j + 1 for
// GS 64; all lanes group j for GS 128).
CPU_TARGET_VNNI_INLINE static void q4_rows(const mx_matrix *w, int64_t r, int NR, int GS, const uint8_t *qx,
                                           float *out) {
    int64_t cols = w->cols, groups = cols / GS, row_bytes = cols / 2, pg = q4_padded_groups(w);
    const float *sx = (const float *)(qx + q4_chunks(w) * 384), *gsum = sx + pg;
    const uint8_t *d[4];
    for (int i = 0; i < NR; i++) d[i] = (const uint8_t *)w->data + (r + i) * row_bytes;
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const int per_chunk = 128 / GS;  // groups per chunk
    const __m512i idx0 = per_chunk == 2 ? _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
                                        : _mm512_setzero_si512();
    const __m512i idx_step = _mm512_set1_epi32(per_chunk);
    __m512 acc[4], bacc[4], sc[4];  // chunk sums, bias term, the block's scales * sx
    for (int i = 0; i < NR; i++) acc[i] = bacc[i] = _mm512_setzero_ps();
    prefetch_scales(w, r, NR, row_bytes, groups);
    for (int64_t g0 = 0; g0 < groups; g0 += 16) {
        int nb = scale_block(w, r, NR, groups, g0, sx, gsum, sc, bacc);
        __m512i idx = idx0;
        int64_t c0 = g0 / per_chunk, c1 = (g0 + nb + per_chunk - 1) / per_chunk;
        for (int64_t c = c0; c < c1; c++, idx = _mm512_add_epi32(idx, idx_step)) {
            const __m512i *xc = (const __m512i *)(qx + c * 384);
            __m512i x0e = _mm512_load_si512(xc), x0o = _mm512_load_si512(xc + 1);
            __m512i x1e = _mm512_load_si512(xc + 2), x1o = _mm512_load_si512(xc + 3);
            __m512i x2e = _mm512_load_si512(xc + 4), x2o = _mm512_load_si512(xc + 5);
            bool whole = (c + 1) * 128 <= cols;  // else a last half chunk: 32 bytes of codes
            for (int i = 0; i < NR; i++) {
                const uint8_t *p = d[i] + c * 64;
                _mm_prefetch((const char *)(p + VNNI_PREFETCH), _MM_HINT_T1);
                _mm_prefetch((const char *)(p + NR * row_bytes), _MM_HINT_T0);  // this row of the next pass
                __m512i v = whole ? _mm512_loadu_si512(p) : _mm512_maskz_loadu_epi8(0xffffffffull, p);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, x0e);
                s = _mm512_dpbusd_epi32(s, hi, x0o);
                s = _mm512_slli_epi32(s, 8);
                s = _mm512_dpbusd_epi32(s, lo, x1e);
                s = _mm512_dpbusd_epi32(s, hi, x1o);
                s = _mm512_slli_epi32(s, 8);
                s = _mm512_dpbusd_epi32(s, lo, x2e);
                s = _mm512_dpbusd_epi32(s, hi, x2o);
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(idx, sc[i]), acc[i]);
            }
        }
    }
    for (int i = 0; i < NR; i++) out[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], bacc[i]));
}

// NR (1..4) rows of 8-bit weights from row r, group size GS; both are constants at each call site
// so the loops unroll. Groups go in blocks of 16: the block's scales (times sx) and biases are
// loaded as vectors, the bias term accumulates as a vector too.
CPU_TARGET_VNNI_INLINE static void q8_rows(const mx_matrix *w, int64_t r, int NR, int GS, const uint8_t *qx,
                                           float *out) {
    int64_t cols = w->cols, groups = cols / GS, row_bytes = cols;
    const int16_t *xq = (const int16_t *)qx;
    const float *sx = (const float *)(qx + cols * 4), *gsum = sx + groups;
    const uint8_t *d[4];
    for (int i = 0; i < NR; i++) d[i] = (const uint8_t *)w->data + (r + i) * row_bytes;
    __m512 acc[4], lacc[4], bacc[4];  // q part, residual part, bias term
    for (int i = 0; i < NR; i++) acc[i] = lacc[i] = bacc[i] = _mm512_setzero_ps();
    prefetch_scales(w, r, NR, row_bytes, groups);
    float sc[4][16];  // the block's scales * sx, read one group at a time
    for (int64_t g0 = 0; g0 < groups; g0 += 16) {
        __m512 vsc[4];
        int nb = scale_block(w, r, NR, groups, g0, sx, gsum, vsc, bacc);
        for (int i = 0; i < NR; i++) _mm512_storeu_ps(sc[i], vsc[i]);
        for (int gi = 0; gi < nb; gi++) {
            int64_t g = g0 + gi;
            __m512i ia[4], il[4];
            for (int i = 0; i < NR; i++) ia[i] = il[i] = _mm512_setzero_si512();
            for (int k = 0; k < GS; k += 32) {
                int64_t e = g * GS + k;
                __m512i xv = _mm512_load_si512(xq + e), lv = _mm512_load_si512(xq + cols + e);
                for (int i = 0; i < NR; i++) {
                    if ((e & 63) == 0) _mm_prefetch((const char *)(d[i] + e + VNNI_PREFETCH), _MM_HINT_T1);
                    __m512i v = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(d[i] + e)));
                    ia[i] = _mm512_dpwssd_epi32(ia[i], v, xv);
                    il[i] = _mm512_dpwssd_epi32(il[i], v, lv);
                }
            }
            for (int i = 0; i < NR; i++) {
                __m512 vs = _mm512_set1_ps(sc[i][gi]);
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ia[i]), vs, acc[i]);
                lacc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(il[i]), vs, lacc[i]);
            }
        }
    }
    const __m512 inv32k = _mm512_set1_ps(1.0f / 32768.0f);
    for (int i = 0; i < NR; i++)
        out[i] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_fmadd_ps(lacc[i], inv32k, acc[i]), bacc[i]));
}

CPU_TARGET_VNNI_INLINE static void q_range(const mx_matrix *w, int64_t r0, int64_t r1, int BITS, int GS,
                                           const uint8_t *qx, float *out) {
    int64_t r = r0;
    if (BITS == 4) {
        for (; r + QNR <= r1; r += QNR) q4_rows(w, r, QNR, GS, qx, out + (r - r0));
        for (; r < r1; r++) q4_rows(w, r, 1, GS, qx, out + (r - r0));
    } else {
        for (; r + QNR <= r1; r += QNR) q8_rows(w, r, QNR, GS, qx, out + (r - r0));
        for (; r < r1; r++) q8_rows(w, r, 1, GS, qx, out + (r - r0));
    }
}

CPU_TARGET_VNNI void cpu_vnni_gemv_q(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out) {
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

int cpu_vnni_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && mx_cpu_has_avx512vnni() &&
           mx_cpu_has_avx2();
}

#endif
