// SPDX-License-Identifier: MIT
// Batched products (prefill) of affine 4/8-bit weights, group 64 or 128, with AVX-512 VNNI
// (`vpdpbusd`: per 32-bit lane, 4 unsigned bytes times 4 signed bytes summed into int32), for CPUs
// without the AMX tile unit. The same arithmetic as the AMX kernels (cpu_kernels_amx.c), laid out
// for vector registers: a lane is a weight row, so one register holds 4 columns of 16 rows and
// one instruction adds 64 products for one token.
//
// Precision: weight codes are exact; each activation is split per (token, group) into three signed
// bytes in base 256, with s = 2^e the smallest power of two >= max|x| / 127,
//   x = s * (p0 + p1 / 256 + p2 / 65536) + err,   |p0| <= 127, |p1|, |p2| <= 128,
//   |err| <= s / 131072 <= max|x| / 8.3e6 (x / s is exact, then rounded to 1/65536),
// each part accumulates in int32 over a weight group (at most 128 x 255 x 128, no overflow), and
// per group the sums A0, A1, A2 give the group's value (cpu_int8_group_value): 2^e * A0 + 2^(e-16)
// * (A1 * 256 + A2), the last in the integer lanes (below 2^31), the powers of two by `vscalefps`,
// times w_scale and plus w_bias * (exact float sum of x over the group), two FMAs into a register
// per token. cpu_vnni_gemm_q_eq instead takes each group's value as cpu_int8_group_value computes it
// (one multiply and one FMA) into 16 running sums per token (group g into sum g % 16, vectors of 16
// rows kept in L1), added by a fixed tree at the end: the order of cpu_kernels_vnni_eq.c's gemv,
// whose outputs for the same row of x are bit-equal to these (cpu_int8_activations.h says why that
// matters). So a token's group costs two FMAs besides its `vpdpbusd`s; shifts, conversions, adds
// and `vscalefps` issue beside `vpdpbusd`, while FMAs and multiplies compete with it for the same
// pipes (measured on Zen 4; the former epilogue in base 254 took five multiply-class instructions,
// bench/RESULTS.md CPU round 8).
//
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include "backends/cpu/cpu_int8_activations.h"
#include "backends/cpu/cpu_simd_targets.h"
#include "backends/cpu/cpu_simd_transpose.h"

#define TOKEN_BYTES (3 * 64)                        // one token's three parts of one block
#define SCALES_AT (16 * TOKEN_BYTES)                // then 16 floats e, 16 floats e - 16, 16 floats group sum
#define BLOCK_BYTES (SCALES_AT + 3 * 16 * 4)        // one (16-token tile, 64-column block)
#define W_BLOCK_BYTES 1024                          // one block of transposed codes: 16 x (16 rows x 4 bytes)

size_t cpu_vnni_qx_tiles_bytes(const mx_matrix *w, int n) {
    if (!cpu_int8_format_ok(w) || n < 1) return 0;
    size_t tiles = (size_t)(n + 15) / 16, blocks = (size_t)w->cols / 64;
    return tiles * blocks * BLOCK_BYTES;
}

CPU_TARGET_VNNI void cpu_vnni_quantize_x_tiles(const mx_matrix *w, const float *x, int n, int tile, void *qx) {
    int64_t cols = w->cols, blocks = cols / 64;
    int gs = w->q.group_size;
    bool perm4 = w->q.bits == 4;
    uint8_t *base = (uint8_t *)qx + (size_t)tile * blocks * BLOCK_BYTES;
    for (int t = 0; t < 16; t++) {
        int tok = tile * 16 + t;
        const float *xr = x + (int64_t)tok * cols;
        for (int64_t g0 = 0; g0 < cols; g0 += gs) {
            float amax = 0.0f, sum = 0.0f;
            if (tok < n) cpu_int8_group_stats(xr + g0, gs, &amax, &sum);
            int e = cpu_int8_scale_exponent(amax);
            __m512 neg_e = _mm512_set1_ps((float)-e);  // x / 2^e, exact
            for (int64_t k0 = g0; k0 < g0 + gs; k0 += 64) {
                uint8_t *blk = base + (size_t)(k0 / 64) * BLOCK_BYTES;
                float *ehi = (float *)(blk + SCALES_AT), *elo = ehi + 16, *gsum = ehi + 32;
                ehi[t] = (float)e;
                elo[t] = (float)(e - 16);
                gsum[t] = k0 == g0 ? sum : 0.0f;  // the group's sum enters once, at its first block
                uint8_t *dst = blk + t * TOKEN_BYTES;
                if (tok >= n) {
                    for (int p = 0; p < 3; p++) _mm512_storeu_si512(dst + p * 64, _mm512_setzero_si512());
                    continue;
                }
                __m512 a = _mm512_scalef_ps(_mm512_loadu_ps(xr + k0), neg_e);
                __m512 b = _mm512_scalef_ps(_mm512_loadu_ps(xr + k0 + 16), neg_e);
                __m512 c = _mm512_scalef_ps(_mm512_loadu_ps(xr + k0 + 32), neg_e);
                __m512 d = _mm512_scalef_ps(_mm512_loadu_ps(xr + k0 + 48), neg_e);
                if (perm4) cpu_int8_even_odd(&a, &b, &c, &d);
                cpu_int8_split3_base256(a, dst, 64);
                cpu_int8_split3_base256(b, dst + 16, 64);
                cpu_int8_split3_base256(c, dst + 32, 64);
                cpu_int8_split3_base256(d, dst + 48, 64);
            }
        }
    }
}

// Scratch of a task: transposed codes [blocks][16][16 rows x 4 bytes], then per group 16 scales and
// 16 biases (floats, by row); 64 bytes for alignment.
size_t cpu_vnni_gemm_scratch_bytes(const mx_matrix *w) {
    int64_t blocks = w->cols / 64, groups = w->cols / w->q.group_size;
    return (size_t)blocks * W_BLOCK_BYTES + (size_t)groups * 128 + 64;
}

// acc += wv (16 lanes x 4 unsigned bytes) . the 4 signed bytes at p, broadcast to every lane. In
// asm, with the broadcast folded into the instruction: through the intrinsic (GCC 12), the 18
// accumulators of a sweep were copied between registers and to the stack on every step.
#define DPBUSD_BCAST(acc, wv, p) \
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(wv), "m"(*(const int32_t *)(const void *)(p)))

// Zeroes a register with the zeroing idiom, which the core resolves at rename. Written as
// `= _mm512_setzero_si512()`, GCC 12 zeroed one register and copied it into the 18 accumulators of
// every group, 18 `vmovdqa64` per 288 `vpdpbusd` that took issue slots of their own (lab +1.3%
// without them, bench/RESULTS.md CPU round 10). Volatile, so that GCC does not merge the 18 into one.
#define ZERO(a) __asm__ volatile("vpxord %0, %0, %0" : "=v"(a))

// The accumulators are named variables (a<token><part>), so that each can stay in a register.
#define ACC_DECL(t)                \
    __m512i a##t##0, a##t##1, a##t##2; \
    ZERO(a##t##0);                     \
    ZERO(a##t##1);                     \
    ZERO(a##t##2)
#define ACC_STEP(t)                                                                        \
    if (T > t) {                                                                           \
        const uint8_t *xp = xb + t * TOKEN_BYTES + k4 * 4;                                 \
        DPBUSD_BCAST(a##t##0, wv, xp);                                                     \
        DPBUSD_BCAST(a##t##1, wv, xp + 64);                                                \
        DPBUSD_BCAST(a##t##2, wv, xp + 128);                                               \
    }
// A group's end for token t: EQ (cpu_vnni_gemm_q_eq), its value (cpu_int8_group_value, lanes: rows)
// added into the token's running lane g % 16, the order of cpu_kernels_vnni_eq.c's gemv; else
// res_t += d * w_scale, then += w_bias * gsum, two FMAs on a register per token.
#define ACC_END(t)                                                                                      \
    if (T > t) {                                                                                        \
        __m512i m = _mm512_add_epi32(_mm512_slli_epi32(a##t##1, 8), a##t##2);                           \
        if (EQ) {                                                                                       \
            __m512 v = cpu_int8_group_value(a##t##0, m, _mm512_set1_ps(ehi[t]), _mm512_set1_ps(elo[t]), ws, \
                                            wbias, _mm512_set1_ps(gsum[t]));                             \
            lanes[t][g & 15] = _mm512_add_ps(g < 16 ? _mm512_setzero_ps() : lanes[t][g & 15], v);       \
        } else {                                                                                        \
            __m512 d = _mm512_add_ps(_mm512_scalef_ps(_mm512_cvtepi32_ps(a##t##0), _mm512_set1_ps(ehi[t])), \
                                     _mm512_scalef_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(elo[t])));   \
            res##t = _mm512_fmadd_ps(d, ws, res##t);                                                    \
            res##t = _mm512_fmadd_ps(wbias, _mm512_set1_ps(gsum[t]), res##t);                           \
        }                                                                                               \
    }
#define RES_STORE(t) \
    if (T > t) _mm512_mask_storeu_ps(out + (int64_t)(t0 + t) * ldo, rmask, res##t)

// The 16 running lanes of each token summed by cpu_int8_lane_sum's tree (here each a vector of 16
// rows), stored to out[t * ldo + i] for the rows i in rmask.
CPU_TARGET_VNNI_INLINE static void lanes_store(__m512 l[16], float *out, __mmask16 rmask) {
    for (int k = 0; k < 8; k++) l[k] = _mm512_add_ps(l[k], l[k + 8]);
    for (int k = 0; k < 4; k++) l[k] = _mm512_add_ps(l[k], l[k + 4]);
    for (int k = 0; k < 2; k++) l[k] = _mm512_add_ps(l[k], l[k + 2]);
    _mm512_mask_storeu_ps(out, rmask, _mm512_add_ps(l[0], l[1]));
}

// T tokens (1..6, a compile-time constant at each call) from token t0 of the 16-token tile at xt:
// all groups of the row block, results stored to out[t * ldo + i] for the rows i in rmask. EQ (a
// constant): the bit-equal order (ACC_END).
CPU_TARGET_VNNI_INLINE static void sweep(const uint8_t *W, const float *sb, const uint8_t *xt, int t0, int T,
                                         int64_t groups, int bpg, float *out, int64_t ldo, __mmask16 rmask, bool EQ) {
    __m512 res0 = _mm512_setzero_ps(), res1 = res0, res2 = res0, res3 = res0, res4 = res0, res5 = res0;
    // EQ: each token's 16 running sums (the gemv's lanes), by row, in L1: the first 16 groups write
    // theirs as +0 + v, so only the lanes of a row of fewer groups start as stored zeros (zeroing
    // all 96 first, and loading them in the first 16 groups, cost +6% of this kernel's time in the
    // lab; as it is, +5-8% against the register chain).
    __m512 lanes[6][16];
    if (EQ)
        for (int t = 0; t < T; t++)
            for (int64_t k = groups; k < 16; k++) lanes[t][k] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++) {
        ACC_DECL(0);
        ACC_DECL(1);
        ACC_DECL(2);
        ACC_DECL(3);
        ACC_DECL(4);
        ACC_DECL(5);
        for (int k = 0; k < bpg; k++) {
            int64_t b = g * bpg + k;
            const uint8_t *wb = W + b * W_BLOCK_BYTES, *xb = xt + b * BLOCK_BYTES + t0 * TOKEN_BYTES;
            for (int k4 = 0; k4 < 16; k4++) {
                __m512i wv = _mm512_load_si512(wb + k4 * 64);
                ACC_STEP(0)
                ACC_STEP(1)
                ACC_STEP(2)
                ACC_STEP(3)
                ACC_STEP(4)
                ACC_STEP(5)
            }
        }
        const float *ehi = (const float *)(xt + g * bpg * BLOCK_BYTES + SCALES_AT) + t0, *elo = ehi + 16, *gsum = ehi + 32;
        __m512 ws = _mm512_load_ps(sb + g * 32), wbias = _mm512_load_ps(sb + g * 32 + 16);
        ACC_END(0)
        ACC_END(1)
        ACC_END(2)
        ACC_END(3)
        ACC_END(4)
        ACC_END(5)
    }
    if (EQ) {
        for (int t = 0; t < T; t++) lanes_store(lanes[t], out + (int64_t)(t0 + t) * ldo, rmask);
        return;
    }
    RES_STORE(0);
    RES_STORE(1);
    RES_STORE(2);
    RES_STORE(3);
    RES_STORE(4);
    RES_STORE(5);
}

CPU_TARGET_VNNI_INLINE static void gemm_q(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out,
                                          int64_t ldo, void *scratch, bool EQ) {
    int64_t cols = w->cols, blocks = cols / 64;
    int gs = w->q.group_size, bpg = gs / 64;
    int64_t groups = cols / gs, row_bytes = cols * w->q.bits / 8;
    uint8_t *W = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    float *sb = (float *)(W + (size_t)blocks * W_BLOCK_BYTES);  // [groups][16 scales, 16 biases]
    // Codes of the rows, block by block: unpack each row's 64 codes (in x's column order), transpose.
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < blocks; b++) {
        __m512i r[16];
        for (int m = 0; m < 16; m++) {
            const uint8_t *src = (const uint8_t *)w->data + (r0 + (m < nr ? m : 0)) * row_bytes;
            if (m >= nr) {
                r[m] = _mm512_setzero_si512();
            } else if (w->q.bits == 4) {
                __m256i v = _mm256_loadu_si256((const __m256i *)(src + b * 32));
                __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                r[m] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            } else {
                r[m] = _mm512_loadu_si512(src + b * 64);
            }
        }
        cpu_transpose16x16(r);
        for (int k4 = 0; k4 < 16; k4++) _mm512_store_si512(W + b * W_BLOCK_BYTES + k4 * 64, r[k4]);
    }
    // Scales, then biases, 16 groups at a time: row m's values in r[m], transposed to one vector per group.
    for (int half = 0; half < 2; half++) {
        const void *src = half ? w->biases : w->scales;
        for (int64_t g0 = 0; g0 < groups; g0 += 16) {
            int nb = groups - g0 < 16 ? (int)(groups - g0) : 16;
            __mmask16 gm = (__mmask16)((1u << nb) - 1);
            __m512i r[16];
            for (int m = 0; m < 16; m++)
                r[m] = m < nr ? _mm512_castps_si512(cpu_int8_load16(src, w->scale_dtype, (r0 + m) * groups + g0, gm))
                              : _mm512_setzero_si512();
            cpu_transpose16x16(r);
            for (int k = 0; k < nb; k++) _mm512_store_si512(sb + (g0 + k) * 32 + half * 16, r[k]);
        }
    }
    __mmask16 rmask = (__mmask16)((1u << nr) - 1);
    int tiles = (n + 15) / 16;
    for (int tt = 0; tt < tiles; tt++) {
        const uint8_t *xt = (const uint8_t *)qx + (size_t)tt * blocks * BLOCK_BYTES;
        float *o = out + (int64_t)tt * 16 * ldo + r0;
        int nt = n - tt * 16 < 16 ? n - tt * 16 : 16, t = 0;
        // 6 tokens per sweep: 18 accumulators and the constants fit in 32 registers.
        for (; t + 6 <= nt; t += 6) sweep(W, sb, xt, t, 6, groups, bpg, o, ldo, rmask, EQ);
        if (t + 4 <= nt) sweep(W, sb, xt, t, 4, groups, bpg, o, ldo, rmask, EQ), t += 4;
        if (t + 2 <= nt) sweep(W, sb, xt, t, 2, groups, bpg, o, ldo, rmask, EQ), t += 2;
        if (t < nt) sweep(W, sb, xt, t, 1, groups, bpg, o, ldo, rmask, EQ);
    }
}

CPU_TARGET_VNNI void cpu_vnni_gemm_q(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out,
                                     int64_t ldo, void *scratch) {
    gemm_q(w, r0, nr, qx, n, out, ldo, scratch, false);
}

CPU_TARGET_VNNI void cpu_vnni_gemm_q_eq(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out,
                                        int64_t ldo, void *scratch) {
    gemm_q(w, r0, nr, qx, n, out, ldo, scratch, true);
}

#else

// Not x86-64: never called, but cpu_kernels.c tells the kernel sets apart by its address.
void cpu_vnni_gemm_q_eq(const mx_matrix *w, int64_t r0, int nr, const void *qx, int n, float *out, int64_t ldo,
                        void *scratch) {
    (void)w, (void)r0, (void)nr, (void)qx, (void)n, (void)out, (void)ldo, (void)scratch;
}

#endif
