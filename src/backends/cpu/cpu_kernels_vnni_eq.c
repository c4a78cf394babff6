// SPDX-License-Identifier: MIT
// The one-token integer product (batch 1, AVX-512 VNNI) whose outputs are bit-equal to the VNNI
// batched product's (cpu_vnni_gemm_q_eq, cpu_kernels_vnni_gemm.c) for the same row of x: affine
// 4- and 8-bit weights in groups of 64 and 128, the formats that product takes. The CPU backend
// takes this pair instead of cpu_kernels_vnni.c's gemv and the plain batched product where the
// int8 KV cache's integer attention is on (cpu_matmul.c): that attention rounds the query and the
// P.V weights, so a last-bit difference between a decode step's product and a recomputed prompt's
// (a preempted request) would become a whole code step (cpu_int8_activations.h says what the two
// kernels share). It costs ~20% more vector instructions per weight byte than cpu_kernels_vnni.c's
// gemv (bench/RESULTS.md), which shows when the cores are shared.
//
// x = 2^e (p0 + p1 / 256 + p2 / 65536) + err per group, 2^e the smallest power of two >= max|x| /
// 127, signed byte digits; `vpdpbusd` (64 products per instruction) sums the weight codes times
// each digit, a0 for p0 and m = 256 * (p1 sum) + p2 sum (the p1 lanes shifted 8 bits left before the
// p2 products are added), exact in int32 lanes. A group's lanes are then summed exactly into one
// number per group: a 64-byte load of 4-bit codes is 128 columns (two groups of 64 in lanes 0-7 and
// 8-15, or one of 128), of 8-bit codes 64; per block of 16 groups a tree of in-lane and 128-bit
// shuffles and adds folds each row's group partials into one vector of 16 groups' a0 and one of
// their m (about 5.3 instructions per 64 weight bytes and row, against 13 for the products), and each
// group's value (cpu_int8_group_value, lanes: groups) enters lane g % 16 of the row's running sums,
// which cpu_int8_lane_sum adds at the end.
//
// Quantized row layouts (cpu_vnni_eq_qx_row_bytes bytes, 64-byte multiple).
// 4-bit: per 128-column chunk 384 bytes: p0 of the 64 even columns, p0 of the 64 odd ones, then the
// same for p1 and p2 (columns past cols are zero); then float e[pg], float e[pg] - 16 and float
// gsum[pg], pg = chunks * 128 / group size (entries past the last group are zero).
// 8-bit: per 64-column block 192 bytes: p0, p1, p2 of its 64 columns; then float e[groups],
// e[groups] - 16, gsum[groups].
#include <stdbool.h>
#include <stddef.h>

#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <string.h>

#include "backends/cpu/cpu_int8_activations.h"
#include "backends/cpu/cpu_simd_targets.h"

#include "backends/cpu/cpu_kernels_vnni_gemv.h"

// Where a quantized row keeps its per-group floats e, e - 16 and gsum (each `stride` floats apart).
static size_t digits_bytes(const mx_matrix *w) {
    return w->q.bits == 4 ? (size_t)q4_chunks(w) * 384 : (size_t)(w->cols / 64) * 192;
}
static int64_t group_floats(const mx_matrix *w) {
    return w->q.bits == 4 ? q4_padded_groups(w) : w->cols / w->q.group_size;
}

size_t cpu_vnni_eq_qx_row_bytes(const mx_matrix *w) {
    if (!cpu_int8_format_ok(w)) return 0;
    return (digits_bytes(w) + (size_t)group_floats(w) * 12 + 63) & ~(size_t)63;
}

// One row of x in base-256 digits (groups of 64 and 128; layouts in the file comment), as the
// batched product's quantizer (cpu_vnni_quantize_x_tiles) computes them: the same group statistics,
// exponent, scaling and split, only laid out for one row.
CPU_TARGET_VNNI_INLINE static void quantize_row_digits(const mx_matrix *w, const float *xr, uint8_t *dst) {
    int64_t cols = w->cols, pg = group_floats(w);
    int gs = w->q.group_size;
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    size_t db = digits_bytes(w);
    float *ehi = (float *)(dst + db), *elo = ehi + pg, *gsum = elo + pg;
    memset(dst, 0, db + (size_t)pg * 12);
    for (int64_t g = 0; g < cols / gs; g++) {
        const float *xg = xr + g * gs;
        float amax;
        cpu_int8_group_stats(xg, gs, &amax, &gsum[g]);
        int e = cpu_int8_scale_exponent(amax);
        ehi[g] = (float)e;
        elo[g] = (float)(e - 16);
        __m512 neg_e = _mm512_set1_ps((float)-e);  // x / 2^e, exact
        for (int k = 0; k < gs; k += 32) {
            int64_t c = g * gs + k;
            __m512 lo = _mm512_scalef_ps(_mm512_loadu_ps(xg + k), neg_e);
            __m512 hi = _mm512_scalef_ps(_mm512_loadu_ps(xg + k + 16), neg_e);
            if (w->q.bits == 4) {  // 32 columns: 16 even ones at byte c % 128 / 2 of the chunk's even block
                uint8_t *p = dst + c / 128 * 384 + c % 128 / 2;
                cpu_int8_split3_base256(_mm512_permutex2var_ps(lo, ev, hi), p, 128);
                cpu_int8_split3_base256(_mm512_permutex2var_ps(lo, od, hi), p + 64, 128);
            } else {
                uint8_t *p = dst + c / 64 * 192 + c % 64;
                cpu_int8_split3_base256(lo, p, 64);
                cpu_int8_split3_base256(hi, p + 16, 64);
            }
        }
    }
}

CPU_TARGET_VNNI void cpu_vnni_eq_quantize_x(const mx_matrix *w, const float *x, int n, void *qx) {
    size_t row_bytes = cpu_vnni_eq_qx_row_bytes(w);
    for (int t = 0; t < n; t++) quantize_row_digits(w, x + (int64_t)t * w->cols, (uint8_t *)qx + (size_t)t * row_bytes);
}

// Folds of int32 partial sums: each output lane is the sum of two input lanes of one group. fold16:
// a and b one group each (16 lanes) -> [a: 8 lanes | b: 8]; fold8: two groups of 8 lanes each ->
// 128-bit lanes [a's 1st, a's 2nd, b's 1st, b's 2nd] of 4 lanes; fold4: groups of 4 lanes (128-bit
// lanes) -> in each 128-bit lane [a's: 2 lanes, b's: 2]; fold2: groups of 2 lanes -> in each 128-bit
// lane [a's 1st, a's 2nd, b's 1st, b's 2nd], one lane each.
CPU_TARGET_VNNI_INLINE static __m512i fold16(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x44), _mm512_shuffle_i32x4(a, b, 0xee));
}
CPU_TARGET_VNNI_INLINE static __m512i fold8(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
}
CPU_TARGET_VNNI_INLINE static __m512i fold4(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
CPU_TARGET_VNNI_INLINE static __m512i fold2(__m512i a, __m512i b) {
    __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                            _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xdd)));
}

// a0 and m lane partials of 64 weight bytes v against the digits at xc (p0, p1, p2 vectors; 4-bit:
// p0 even, p0 odd, p1 even, ...): 4-bit, the 128 columns of a chunk (lanes 0-7 its first 64
// columns); 8-bit, the 64 columns of a block.
// Zeroes a register with the zeroing idiom, which the core resolves at rename (as
// `_mm512_setzero_si512()`, GCC 12 copies one zero register into each chain's start, an ALU op each;
// see cpu_kernels_vnni_gemm.c). Volatile, so that GCC does not merge them.
#define ZERO(a) __asm__ volatile("vpxord %0, %0, %0" : "=v"(a))

CPU_TARGET_VNNI_INLINE static void parts4(__m512i v, const __m512i *xc, __m512i *a0, __m512i *m) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4), z0, z1;
    ZERO(z0);
    ZERO(z1);
    *a0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z0, lo, xc[0]), hi, xc[1]);
    __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z1, lo, xc[2]), hi, xc[3]);
    *m = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(s, 8), lo, xc[4]), hi, xc[5]);
}

// The loads and prefetches of one row's 64 weight bytes at p (half: only the first 32 exist).
CPU_TARGET_VNNI_INLINE static __m512i load_codes(const uint8_t *p, bool half, int64_t next_pass) {
    _mm_prefetch((const char *)(p + VNNI_PREFETCH), _MM_HINT_T1);
    _mm_prefetch((const char *)(p + next_pass), _MM_HINT_T0);  // this row of the next pass
    return half ? _mm512_maskz_loadu_epi8(0xffffffffull, p) : _mm512_loadu_si512(p);
}

// Group gg's a0 and m partials of the NR rows from `base` (rows row_bytes apart), folded into one
// vector each (fold16: a0 in lanes 0-7, m in 8-15): 4-bit g128, one chunk; 8-bit, GS / 64 blocks of
// 64 columns. Zero past the row's groups.
CPU_TARGET_VNNI_INLINE static void group_parts(const uint8_t *base, int64_t row_bytes, int NR, int BITS, int GS,
                                               const uint8_t *qx, int64_t groups, int64_t gg, int64_t next_pass,
                                               __m512i *u) {
    for (int i = 0; i < NR; i++) u[i] = _mm512_setzero_si512();
    if (gg >= groups) return;
    if (BITS == 4) {
        const __m512i *xc = (const __m512i *)(qx + gg * 384);
        __m512i x[6];
        for (int k = 0; k < 6; k++) x[k] = _mm512_load_si512(xc + k);
        const uint8_t *p = base + gg * 64;
        for (int i = 0; i < NR; i++, p += row_bytes) {
            __m512i a0, m;
            parts4(load_codes(p, false, next_pass), x, &a0, &m);
            u[i] = fold16(a0, m);
        }
        return;
    }
    const __m512i *xb = (const __m512i *)(qx + gg * GS / 64 * 192);
    const uint8_t *p = base + gg * GS;
    for (int i = 0; i < NR; i++, p += row_bytes) {
        __m512i a0, s, t;  // p0, p1 and p2 sums
        ZERO(a0);
        ZERO(s);
        ZERO(t);
        for (int b = 0; b < GS / 64; b++) {
            __m512i v = load_codes(p + b * 64, false, next_pass);
            a0 = _mm512_dpbusd_epi32(a0, v, _mm512_load_si512(xb + 3 * b));
            s = _mm512_dpbusd_epi32(s, v, _mm512_load_si512(xb + 3 * b + 1));
            t = _mm512_dpbusd_epi32(t, v, _mm512_load_si512(xb + 3 * b + 2));
        }
        u[i] = fold16(a0, _mm512_add_epi32(_mm512_slli_epi32(s, 8), t));
    }
}

// NR (1..4) rows from row r of 4- or 8-bit weights in groups of GS (64 or 128); all constants at
// each call site so the loops unroll. Per block of 16 groups and row, 8 steps k, each of 4 groups'
// partials folded into one vector t_k (4-bit g64: one chunk, its a0 and m by fold8; else two
// groups, each's a0 and m by fold16, then fold8), pairs of steps by fold4, pairs of those by fold2:
// two vectors holding the 16 groups' whole a0 and m sums (as each step is folded at once, a row
// keeps at most four vectors of partials), then the groups' values, lane g % 16 of the row's running
// sums.
CPU_TARGET_VNNI_INLINE static void digit_rows(const mx_matrix *w, int64_t r, int NR, int BITS, int GS,
                                              const uint8_t *qx, float *out) {
    int64_t cols = w->cols, groups = cols / GS, row_bytes = cols * BITS / 8, pg = group_floats(w);
    int64_t next_pass = NR * row_bytes;
    const float *ehi = (const float *)(qx + digits_bytes(w)), *elo = ehi + pg, *gsum = elo + pg;
    const uint8_t *base = (const uint8_t *)w->data + r * row_bytes;
    const bool chunks = BITS == 4 && GS == 64;
    // Where the tree leaves group g's a0 and m (lanes of the two vectors S[0], S[1]; 16 + lane: S[1]).
    const __m512i idx_a = chunks ? _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 16, 20, 17, 21, 18, 22, 19, 23)
                                 : _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27);
    const __m512i idx_m = chunks ? _mm512_setr_epi32(8, 12, 9, 13, 10, 14, 11, 15, 24, 28, 25, 29, 26, 30, 27, 31)
                                 : _mm512_setr_epi32(4, 12, 5, 13, 6, 14, 7, 15, 20, 28, 21, 29, 22, 30, 23, 31);
    __m512 acc[4];
    for (int i = 0; i < NR; i++) acc[i] = _mm512_setzero_ps();
    prefetch_scales(w, r, NR, row_bytes, groups);
    for (int64_t g0 = 0; g0 < groups; g0 += 16) {
        int nb = groups - g0 < 16 ? (int)(groups - g0) : 16;
        __mmask16 mk = (__mmask16)((1u << nb) - 1);
        __m512i T[4] = {0}, R[4] = {0}, S[2][4];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i t[4];
            if (chunks) {  // chunk g0 / 2 + k: groups g0 + 2k, g0 + 2k + 1
                int64_t g = g0 + 2 * k, c = g / 2;
                for (int i = 0; i < NR; i++) t[i] = _mm512_setzero_si512();
                if (g < groups) {
                    const __m512i *xc = (const __m512i *)(qx + c * 384);
                    __m512i x[6];
                    for (int q = 0; q < 6; q++) x[q] = _mm512_load_si512(xc + q);
                    __mmask64 lm = g + 1 < groups ? ~(__mmask64)0 : 0xffffffffull;  // a last half chunk: 32 bytes
                    const uint8_t *p = base + c * 64;
                    for (int i = 0; i < NR; i++, p += row_bytes) {
                        _mm_prefetch((const char *)(p + VNNI_PREFETCH), _MM_HINT_T1);
                        _mm_prefetch((const char *)(p + next_pass), _MM_HINT_T0);  // this row of the next pass
                        __m512i a0, m;
                        parts4(_mm512_maskz_loadu_epi8(lm, p), x, &a0, &m);
                        t[i] = fold8(a0, m);
                    }
                }
            } else {  // groups g0 + 2k and g0 + 2k + 1
                __m512i u[4], v[4];
                group_parts(base, row_bytes, NR, BITS, GS, qx, groups, g0 + 2 * k, next_pass, u);
                group_parts(base, row_bytes, NR, BITS, GS, qx, groups, g0 + 2 * k + 1, next_pass, v);
                for (int i = 0; i < NR; i++) t[i] = fold8(u[i], v[i]);
            }
            for (int i = 0; i < NR; i++) {
                if (k % 2 == 0) {
                    T[i] = t[i];
                } else if (k % 4 == 1) {
                    R[i] = fold4(T[i], t[i]);
                } else {
                    S[k / 4][i] = fold2(R[i], fold4(T[i], t[i]));
                }
            }
        }
        __m512 veh = _mm512_maskz_loadu_ps(mk, ehi + g0), vel = _mm512_maskz_loadu_ps(mk, elo + g0);
        __m512 vgs = _mm512_maskz_loadu_ps(mk, gsum + g0);
        for (int i = 0; i < NR; i++) {
            int64_t si = (r + i) * groups + g0;
            __m512i a0 = _mm512_permutex2var_epi32(S[0][i], idx_a, S[1][i]);
            __m512i m = _mm512_permutex2var_epi32(S[0][i], idx_m, S[1][i]);
            __m512 v = cpu_int8_group_value(a0, m, veh, vel, cpu_int8_load16(w->scales, w->scale_dtype, si, mk),
                                            cpu_int8_load16(w->biases, w->scale_dtype, si, mk), vgs);
            acc[i] = _mm512_mask_add_ps(acc[i], mk, acc[i], v);
        }
    }
    for (int i = 0; i < NR; i++) out[i] = cpu_int8_lane_sum(acc[i]);
}

CPU_TARGET_VNNI_INLINE static void q_range(const mx_matrix *w, int64_t r0, int64_t r1, int BITS, int GS,
                                           const uint8_t *qx, float *out) {
    int64_t r = r0;
    for (; r + QNR <= r1; r += QNR) digit_rows(w, r, QNR, BITS, GS, qx, out + (r - r0));
    for (; r < r1; r++) digit_rows(w, r, 1, BITS, GS, qx, out + (r - r0));
}

CPU_TARGET_VNNI void cpu_vnni_eq_gemv_q(const mx_matrix *w, int64_t r0, int64_t r1, const void *qx, float *out) {
    const uint8_t *q = qx;
    if (w->q.bits == 4) {
        if (w->q.group_size == 64) q_range(w, r0, r1, 4, 64, q, out);
        else q_range(w, r0, r1, 4, 128, q, out);
    } else {
        if (w->q.group_size == 64) q_range(w, r0, r1, 8, 64, q, out);
        else q_range(w, r0, r1, 8, 128, q, out);
    }
}

#endif
