// SPDX-License-Identifier: MIT
// AVX-512 attention for a few queries that share one KV head (the query heads of a GQA group, times a
// few consecutive tokens). Keys go 16 at a time: for calls of more than two queries the block of K
// and V rows is first copied (and converted from the cache's element type) into contiguous float32
// scratch that stays in L1, then every query reads it from there; a decode step's one or two queries
// read the rows from the cache directly, each chunk converted once for both (the same float
// operations). So the cache is read once per block for all the queries, and a cache whose key rows
// sit 4 KB apart (one row per position holding all KV heads) no longer thrashes L1 with aliasing
// addresses. Per query and block, the 16 scores come out of one
// transpose-and-add reduction (no horizontal sum per key), their exponentials from one vector exp,
// the running max and sum of the online softmax are updated once, and each 16-float chunk of the
// output is loaded and stored once per block. Before, each key cost its own dot product with a
// horizontal sum, a scalar expf and a load/store of the whole output row; attention was ~40% of a
// 512-token prefill.
#include "backends/cpu/cpu_kernels_table.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "backends/cpu/cpu_simd_exp.h"
#include "backends/cpu/cpu_simd_targets.h"
#include "backends/cpu/cpu_simd_transpose.h"

#define MAX_CHUNKS 32  // 16-float chunks of a row: head_dim up to 512 (cpu_attention.c)

// Chunk c (16 elements, lanes past cm zero) of the key or value row at element `at` of src as
// float32; I16 and I8 elements times their block's scale sc[sat + c * 16 / CPU_KV_SCALE_BLOCK], I4
// elements (8 bytes of codes, low nibble first, cpu_kv_i4_code) times sc[sat + c * 16 / MX_KV_I4_GROUP]
// (looked up in the group's 16 products code x scale: the same values, 12% less CPU for a decoded
// token's attention at 2k than converting each code, attn_decode_lab).
CPU_TARGET_AVX512_INLINE static __m512 load_chunk(mx_dtype dt, const void *src, const float *sc, int64_t at,
                                                  int64_t sat, int c, __mmask16 cm) {
    if (dt == MX_DTYPE_I4) {  // the 16 values code x scale, c = -8..7, then each lane's by its nibble
        __mmask16 bm = (__mmask16)((1u << ((__builtin_popcount(cm) + 1) / 2)) - 1);  // bytes of the cm lanes
        __m128i b = _mm_maskz_loadu_epi8(bm, (const uint8_t *)src + (at + c * 16) / 2), nib = _mm_set1_epi8(15);
        __m128i u = _mm_unpacklo_epi8(_mm_and_si128(b, nib), _mm_and_si128(_mm_srli_epi16(b, 4), nib));
        const __m512 codes = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
        __m512 table = _mm512_mul_ps(codes, _mm512_set1_ps(sc[sat + c * 16 / MX_KV_I4_GROUP]));
        return _mm512_maskz_permutexvar_ps(cm, _mm512_cvtepu8_epi32(u), table);
    }
    if (dt == MX_DTYPE_I8)
        return _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(cm, (const int8_t *)src + at + c * 16))),
            _mm512_set1_ps(sc[sat + c * 16 / CPU_KV_SCALE_BLOCK]));
    if (dt == MX_DTYPE_I16)
        return _mm512_mul_ps(
            _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_maskz_loadu_epi16(cm, (const int16_t *)src + at + c * 16))),
            _mm512_set1_ps(sc[sat + c * 16 / CPU_KV_SCALE_BLOCK]));
    if (dt == MX_DTYPE_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(cm, (const uint16_t *)src + at + c * 16));
    if (dt == MX_DTYPE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(cm, (const uint16_t *)src + at + c * 16)), 16));
    return _mm512_maskz_loadu_ps(cm, (const float *)src + at + c * 16);
}

// Where a block's rows are: p0 is a multiple of 16, so the block's keys are one cache block's rows,
// key p0 + i at at0 + i * stride, its scales at sat0 + i * scale_stride, and the next block's (for
// the prefetches: pf_rows of its rows, positions up to pf_last) likewise from nat0 and nsat0. Per
// key, the table look-up and index arithmetic cost more than the row's loads (bench/RESULTS.md).
typedef struct block_at {
    int64_t at0, sat0, nat0, nsat0;
    int pf_rows;
} block_at;

static inline block_at block_offsets(const cpu_attn_args *a, int p0, int pf_last, bool scaled) {
    block_at o = {.at0 = cpu_attn_key(a, p0), .sat0 = scaled ? cpu_attn_scale(a, p0) : 0,
                  .pf_rows = pf_last - (p0 + 16) + 1};
    o.nat0 = o.pf_rows > 0 ? cpu_attn_key(a, p0 + 16) : 0;
    o.nsat0 = o.pf_rows > 0 && scaled ? cpu_attn_scale(a, p0 + 16) : 0;
    return o;
}

// Prefetches into L2 row i of the next block (and its scales) where that row is wanted: a block's
// rows and scales are four short runs (K, V, and their scales) a block apart in the paged cache, and
// the hardware prefetcher starts over at each. Spread over the rows, the prefetches keep a steady
// number of misses in flight; issued all at once at the block's start they gained about half as
// much (lab, bench/RESULTS.md round 6).
CPU_TARGET_AVX512_INLINE static void prefetch_next_row(const cpu_attn_args *a, const block_at *o, const void *src,
                                                       const float *sc, int i, int hd) {
    if (i >= o->pf_rows) return;
    mx_dtype dt = a->kv_dtype;
    int64_t next = o->nat0 + i * a->stride, row = (int64_t)mx_kv_elem_bytes(dt, (size_t)hd);
    for (int64_t b = 0; b < row; b += 64) _mm_prefetch((const char *)src + mx_kv_elem_bytes(dt, (size_t)next) + b, _MM_HINT_T1);
    if (mx_kv_scaled(dt)) _mm_prefetch((const char *)(sc + o->nsat0 + i * a->scale_stride), _MM_HINT_T1);
}

// One block of up to 16 keys from p0 as float32 rows of hd in dst (keys past nb zeroed); I16, I8 and
// I4 elements are multiplied by their block's scale sc[cpu_attn_scale(a, p) + d / mx_kv_scale_block].
// With each row it prefetches the same row of the next block (positions up to pf_last).
CPU_TARGET_AVX512_INLINE static void load_block(float *dst, const cpu_attn_args *a, const void *src, const float *sc,
                                                int p0, int nb, int hd, int pf_last) {
    mx_dtype dt = a->kv_dtype;
    int chunks = (hd + 15) / 16;
    __mmask16 tail = (__mmask16)(hd % 16 ? (1u << (hd % 16)) - 1 : 0xffff);
    block_at o = block_offsets(a, p0, pf_last, mx_kv_scaled(dt));
    for (int i = 0; i < 16; i++) {
        float *d = dst + i * chunks * 16;
        if (i >= nb) {
            for (int c = 0; c < chunks; c++) _mm512_store_ps(d + c * 16, _mm512_setzero_ps());
            continue;
        }
        int64_t at = o.at0 + i * a->stride, sat = o.sat0 + i * a->scale_stride;
        prefetch_next_row(a, &o, src, sc, i, hd);
        for (int c = 0; c < chunks; c++)
            _mm512_store_ps(d + c * 16, load_chunk(dt, src, sc, at, sat, c, c == chunks - 1 ? tail : 0xffff));
    }
}

// Scores of one query against the 16 keys of a block (rows of `chunks` x 16 floats, zero padded).
CPU_TARGET_AVX512_INLINE static __m512 block_scores(const float *q, const float *Kb, int chunks, __mmask16 tail) {
    __m512 dots[16];
    for (int i = 0; i < 16; i++) dots[i] = _mm512_setzero_ps();
    for (int c = 0; c < chunks; c++) {
        __m512 qv = _mm512_maskz_loadu_ps(c == chunks - 1 ? tail : 0xffff, q + c * 16);
        for (int i = 0; i < 16; i++) dots[i] = _mm512_fmadd_ps(qv, _mm512_load_ps(Kb + (i * chunks + c) * 16), dots[i]);
    }
    return cpu_reduce16_ps(dots);
}

// Calls of at most this many queries (a decode step's GQA group) read K and V straight from the cache:
// each 16-value chunk of a row is converted once and used for every query, where the block copy
// stored it to L1 scratch and loaded it back once per query (bench/RESULTS.md, "one pass from the
// cache"). The float operations of each query are the ones the block copy's path does, in the same
// order, so a query's output bits do not depend on which path its call took.
#define DIRECT_ROWS 2

// The raw scores (before the scale) of the block's 16 keys for queries 0..nqc-1 into sp, as
// block_scores computes them from a converted block (keys past nb score +0). o: the block's
// block_offsets, which direct_pv takes too. dt: a->kv_dtype, a constant where the caller can make it one.
CPU_TARGET_AVX512_INLINE static void direct_scores(const cpu_attn_args *a, mx_dtype dt, const block_at *o, int nb,
                                                   float (*sp)[16], int nqc, int chunks, __mmask16 tail) {
    const void *K = a->K;
    const float *ks = a->K_scale;
    int64_t stride = a->stride, sstride = a->scale_stride;
    __m512 qv[DIRECT_ROWS][MAX_CHUNKS], dots[DIRECT_ROWS][16];
    for (int j = 0; j < nqc; j++)
        for (int c = 0; c < chunks; c++)
            qv[j][c] = _mm512_maskz_loadu_ps(c == chunks - 1 ? tail : 0xffff, a->q[j] + c * 16);
    for (int i = 0; i < nb; i++) {
        int64_t at = o->at0 + i * stride, sat = o->sat0 + i * sstride;
        prefetch_next_row(a, o, K, ks, i, a->hd);
        __m512 acc[DIRECT_ROWS];
        for (int j = 0; j < nqc; j++) acc[j] = _mm512_setzero_ps();
        for (int c = 0; c < chunks; c++) {
            __m512 k = load_chunk(dt, K, ks, at, sat, c, c == chunks - 1 ? tail : 0xffff);
            for (int j = 0; j < nqc; j++) acc[j] = _mm512_fmadd_ps(qv[j][c], k, acc[j]);
        }
        for (int j = 0; j < nqc; j++) dots[j][i] = acc[j];
    }
    for (int i = nb; i < 16; i++)
        for (int j = 0; j < nqc; j++) dots[j][i] = _mm512_setzero_ps();
    for (int j = 0; j < nqc; j++) _mm512_store_ps(sp[j], cpu_reduce16_ps(dots[j]));
}

// The P.V update of queries 0..nqc-1 from the cache's value rows, the operations of the one-query
// loop in attn_rows_body (out = out * corr, then key by key p[i] x value row i, keys past nb as zero
// rows) in the same order per element; in passes of `per` chunks so nqc x per sums stay in registers.
// Rows the block does not reach (live[j] == 0) are not stored. o: the block's block_offsets.
CPU_TARGET_AVX512_INLINE static void direct_pv(const cpu_attn_args *a, mx_dtype dt, const block_at *o, int nb,
                                               const __mmask16 *live, const float (*sp)[16], const float *corr,
                                               int nqc, int chunks, __mmask16 tail) {
    const void *V = a->V;
    const float *vs = a->V_scale;
    int64_t stride = a->stride, sstride = a->scale_stride;
    int per = nqc == 1 ? 16 : 8;
    for (int c0 = 0; c0 < chunks; c0 += per) {
        int cn = chunks - c0 < per ? chunks - c0 : per;
        __m512 acc[DIRECT_ROWS][16];
        for (int j = 0; j < nqc; j++) {
            __m512 vc = _mm512_set1_ps(corr[j]);
            for (int c = 0; c < cn; c++)
                acc[j][c] = _mm512_mul_ps(
                    _mm512_maskz_loadu_ps(c0 + c == chunks - 1 ? tail : 0xffff, a->out[j] + (c0 + c) * 16), vc);
        }
        for (int i = 0; i < nb; i++) {
            int64_t at = o->at0 + i * stride, sat = o->sat0 + i * sstride;
            if (c0 == 0) prefetch_next_row(a, o, V, vs, i, a->hd);
            __m512 pi[DIRECT_ROWS];
            for (int j = 0; j < nqc; j++) pi[j] = _mm512_set1_ps(sp[j][i]);
            for (int c = 0; c < cn; c++) {
                __m512 v = load_chunk(dt, V, vs, at, sat, c0 + c, c0 + c == chunks - 1 ? tail : 0xffff);
                for (int j = 0; j < nqc; j++) acc[j][c] = _mm512_fmadd_ps(pi[j], v, acc[j][c]);
            }
        }
        for (int i = nb; i < 16; i++) {  // the block copy's zero rows: p x 0 added (-0 + +0 is +0)
            __m512 pi[DIRECT_ROWS];
            for (int j = 0; j < nqc; j++) pi[j] = _mm512_set1_ps(sp[j][i]);
            for (int c = 0; c < cn; c++)
                for (int j = 0; j < nqc; j++) acc[j][c] = _mm512_fmadd_ps(pi[j], _mm512_setzero_ps(), acc[j][c]);
        }
        for (int j = 0; j < nqc; j++) {
            if (!live[j]) continue;
            for (int c = 0; c < cn; c++)
                _mm512_mask_storeu_ps(a->out[j] + (c0 + c) * 16, c0 + c == chunks - 1 ? tail : 0xffff, acc[j][c]);
        }
    }
}

// direct_scores and direct_pv with the query count and the common cache types as constants, so the
// per-chunk loops unroll without a type test per chunk.
#define DIRECT_CALL(F, ...)                                                                  \
    do {                                                                                     \
        mx_dtype dt_ = a->kv_dtype;                                                          \
        if (nq == 1 && dt_ == MX_DTYPE_I16) F(a, MX_DTYPE_I16, __VA_ARGS__, 1, chunks, tail); \
        else if (nq == 1 && dt_ == MX_DTYPE_I8) F(a, MX_DTYPE_I8, __VA_ARGS__, 1, chunks, tail); \
        else if (nq == 1 && dt_ == MX_DTYPE_I4) F(a, MX_DTYPE_I4, __VA_ARGS__, 1, chunks, tail); \
        else if (nq == 1) F(a, dt_, __VA_ARGS__, 1, chunks, tail);                           \
        else if (dt_ == MX_DTYPE_I16) F(a, MX_DTYPE_I16, __VA_ARGS__, 2, chunks, tail);      \
        else if (dt_ == MX_DTYPE_I8) F(a, MX_DTYPE_I8, __VA_ARGS__, 2, chunks, tail);        \
        else if (dt_ == MX_DTYPE_I4) F(a, MX_DTYPE_I4, __VA_ARGS__, 2, chunks, tail);        \
        else F(a, dt_, __VA_ARGS__, 2, chunks, tail);                                        \
    } while (0)

// The P.V update of eight queries (rows the block does not reach, live[k] == 0, are left as they
// are: their p and corr, stale or unset, go into sums that are never stored):
// out[k] = out[k] * corr[k] + sum over the block's keys i of p[k][i] * V row i, with the same
// operations in the same order per element as the one-query loop in attn_rows_body, but two
// 16-float chunks of all eight rows at a time, so each chunk of V is loaded once for the eight
// queries instead of once per query.
CPU_TARGET_AVX512_INLINE static void pv_update8(float *const out[8], const float (*p)[16], const float corr[8],
                                                const __mmask16 live[8], const float *Vb, int chunks, __mmask16 tail) {
    for (int c = 0; c < chunks; c += 2) {
        bool two = c + 1 < chunks;
        __mmask16 m0 = c == chunks - 1 ? tail : 0xffff, m1 = !two ? 0 : c + 1 == chunks - 1 ? tail : 0xffff;
        __m512 acc0[8], acc1[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512 vc = _mm512_set1_ps(corr[k]);
            acc0[k] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m0, out[k] + c * 16), vc);
            acc1[k] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m1, out[k] + c * 16 + 16), vc);
        }
        for (int i = 0; i < 16; i++) {
            __m512 v0 = _mm512_load_ps(Vb + (i * chunks + c) * 16);
            __m512 v1 = two ? _mm512_load_ps(Vb + (i * chunks + c + 1) * 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m512 pk = _mm512_set1_ps(p[k][i]);
                acc0[k] = _mm512_fmadd_ps(pk, v0, acc0[k]);
                acc1[k] = _mm512_fmadd_ps(pk, v1, acc1[k]);
            }
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            if (!live[k]) continue;
            _mm512_mask_storeu_ps(out[k] + c * 16, m0, acc0[k]);
            _mm512_mask_storeu_ps(out[k] + c * 16 + 16, m1, acc1[k]);
        }
    }
}

// The body of attn_rows for `chunks` 16-float chunks per row; inlined with chunks a constant for the
// common head sizes, so the per-chunk loops unroll and their pointers stay in registers.
// intq (a constant): integer scores on the I8 or I4 cache (cpu_kernels_attn_vnni.c) instead of float
// keys; intpv (a constant): integer P.V on the I8 or I4 cache (cpu_kernels_attn_vnni_pv.c) instead of
// float values, the outputs in its permuted order until the end of the call.
CPU_TARGET_AVX512_INLINE static void attn_rows_body(const cpu_attn_args *a, float *scratch, int chunks, bool intq,
                                                    bool intpv) {
    int hd = a->hd, nq = a->nq;
    bool direct = nq <= DIRECT_ROWS;  // K and V read from the cache, no block copy (with intq, intpv: the other half)
    __mmask16 tail = (__mmask16)(hd % 16 ? (1u << (hd % 16)) - 1 : 0xffff);
    float *Kb = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63), *Vb = Kb + 16 * chunks * 16;
    float m[CPU_ATTN_MAX_ROWS], l[CPU_ATTN_MAX_ROWS], corr[CPU_ATTN_MAX_ROWS];
    float sp[CPU_ATTN_MAX_ROWS][16] __attribute__((aligned(64)));  // a block's scores, then exponentials
    int lo = a->first[0], hi = a->last[0];
    for (int j = 0; j < nq; j++) {
        m[j] = -INFINITY, l[j] = 0.0f;
        for (int d = 0; d < hd; d++) a->out[j][d] = 0.0f;
        lo = a->first[j] < lo ? a->first[j] : lo;
        hi = a->last[j] > hi ? a->last[j] : hi;
    }
    uint8_t *kbuf = (uint8_t *)Kb, *qprep = (uint8_t *)(Vb + 16 * chunks * 16);  // intq: keys, queries
    if (intq) cpu_vnni_attn_int_prepare(a, qprep);
    // Blocks start at multiples of 16 (a cache block's first position), whatever the call's smallest
    // first: a query's blocks, and so its output's bits, do not depend on which other queries share
    // the call (a decode step's query alone, the same query among a prompt's after a preemption).
    for (int p0 = lo - lo % 16; p0 <= hi; p0 += 16) {
        int nb = hi - p0 + 1 < 16 ? hi - p0 + 1 : 16;
        if (!intq && !direct) load_block(Kb, a, a->K, a->K_scale, p0, nb, hd, hi);
        if (!intpv && !direct) load_block(Vb, a, a->V, a->V_scale, p0, nb, hd, hi);
        // Where the block's rows are, once for both direct passes (K and V rows share their offsets).
        block_at o = direct ? block_offsets(a, p0, hi, mx_kv_scaled(a->kv_dtype)) : (block_at){0};
        // Three passes over the queries, each query's work in a pass independent of the others'
        // (so their latency chains overlap): the block's scores, the online-softmax update, and
        // the P.V update. One query at a time, its scores -> max -> exp -> sum chain stalled the
        // next query's work. The arithmetic of each query is the same as in one pass.
        __mmask16 live[CPU_ATTN_MAX_ROWS];
        for (int j = 0; j < nq; j++) {  // keys of this block inside [first_j, last_j]
            int from = a->first[j] - p0, to = a->last[j] - p0;
            live[j] = 0;
            if (to < 0 || from > 15) continue;
            from = from < 0 ? 0 : from;
            to = to > 15 ? 15 : to;
            live[j] = (__mmask16)(((1u << (to + 1)) - 1) & ~((1u << from) - 1));
        }
        if (intq) {
            cpu_vnni_attn_int_scores(a, qprep, p0, nb, hi, live, sp, kbuf);
        } else if (direct) {
            DIRECT_CALL(direct_scores, &o, nb, sp);
        }
        for (int j = 0; j < nq; j++) {
            if (!live[j]) continue;
            __m512 raw = intq || direct ? _mm512_load_ps(sp[j]) : block_scores(a->q[j], Kb, chunks, tail);
            _mm512_store_ps(sp[j], _mm512_mask_blend_ps(live[j], _mm512_set1_ps(-INFINITY),
                                                        _mm512_mul_ps(raw, _mm512_set1_ps(a->scale))));
        }
        for (int j = 0; j < nq; j++) {
            if (!live[j]) continue;
            __m512 s = _mm512_load_ps(sp[j]);
            float bm = _mm512_reduce_max_ps(s);
            corr[j] = 1.0f;
            if (bm > m[j]) {
                corr[j] = m[j] == -INFINITY ? 0.0f : expf(m[j] - bm);
                m[j] = bm;
            }
            __m512 e = _mm512_maskz_mov_ps(live[j], cpu_exp16(_mm512_sub_ps(s, _mm512_set1_ps(m[j]))));
            l[j] = l[j] * corr[j] + _mm512_reduce_add_ps(e);
            _mm512_store_ps(sp[j], e);
        }
        if (intpv) {  // the block's values as integer tiles in the V scratch, then every live query
            cpu_vnni_attn_int_pv(a, p0, nb, hi, live, sp, corr, (uint8_t *)Vb);
            continue;
        }
        if (direct) {
            DIRECT_CALL(direct_pv, &o, nb, live, (const float(*)[16])sp, corr);
            continue;
        }
        // Eight queries at a time where there are eight (a prefill's), each V chunk loaded once for
        // them (pv_update8); the rest one at a time. Same arithmetic either way, so a query's output
        // does not depend on which queries share its call (test_engine_padding: a step of 64 prompt
        // tokens gives the tokens of steps of 16).
        int j = 0;
        for (; j + 8 <= nq; j += 8) {
            bool any = false;
            for (int k = 0; k < 8; k++) any = any || live[j + k];
            if (any) pv_update8(a->out + j, sp + j, corr + j, live + j, Vb, chunks, tail);
        }
        for (; j < nq; j++) {
            if (!live[j]) continue;
            const float *p = sp[j];
            float *out = a->out[j];
            // Keys outer, chunks inner: each chunk's sum is its own chain (the same order of
            // additions as one chunk at a time), so `chunks` FMAs are independent at every step;
            // one chunk at a time was a chain of 16 dependent FMAs each.
            __m512 vc = _mm512_set1_ps(corr[j]), acc[MAX_CHUNKS];
            for (int c = 0; c < chunks; c++)
                acc[c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(c == chunks - 1 ? tail : 0xffff, out + c * 16), vc);
            for (int i = 0; i < 16; i++) {
                __m512 pi = _mm512_set1_ps(p[i]);
                for (int c = 0; c < chunks; c++)
                    acc[c] = _mm512_fmadd_ps(pi, _mm512_load_ps(Vb + (i * chunks + c) * 16), acc[c]);
            }
            for (int c = 0; c < chunks; c++) _mm512_mask_storeu_ps(out + c * 16, c == chunks - 1 ? tail : 0xffff, acc[c]);
        }
    }
    for (int j = 0; j < nq; j++) {
        float inv = cpu_attn_inv_denominator(m[j], l[j], a->sink ? a->sink[j] : -INFINITY), *out = a->out[j];
        if (intpv) cpu_vnni_attn_int_pv_order(out, hd, a->kv_dtype);
        for (int d = 0; d < hd; d++) out[d] *= inv;
    }
}

CPU_TARGET_AVX512 void cpu_avx512_attn_rows(const cpu_attn_args *a, float *scratch) {
    switch ((a->hd + 15) / 16) {
    case 4: attn_rows_body(a, scratch, 4, false, false); break;    // head_dim 64
    case 8: attn_rows_body(a, scratch, 8, false, false); break;    // head_dim 128
    case 16: attn_rows_body(a, scratch, 16, false, false); break;  // head_dim 256
    default: attn_rows_body(a, scratch, (a->hd + 15) / 16, false, false); break;
    }
}

// The I8 and I4 caches' integer modes (cpu_kernels_attn_i8_mode) for head sizes that allow them.
#define ATTN_INT_BODY(Q, PV)                                                         \
    switch (a->hd / 16) {                                                           \
    case 2: attn_rows_body(a, scratch, 2, Q, PV); break;        /* head_dim 32 */  \
    case 4: attn_rows_body(a, scratch, 4, Q, PV); break;        /* head_dim 64 */  \
    case 8: attn_rows_body(a, scratch, 8, Q, PV); break;        /* head_dim 128 */ \
    case 16: attn_rows_body(a, scratch, 16, Q, PV); break;      /* head_dim 256 */ \
    default: attn_rows_body(a, scratch, a->hd / 16, Q, PV); break;                 \
    }

CPU_TARGET_AVX512 void cpu_avx512vnni_attn_rows(const cpu_attn_args *a, float *scratch) {
    int mode = cpu_kernels_attn_i8_mode();
    bool q = (mode & CPU_ATTN_I8_SCORES) && cpu_attn_int_ok(a), pv = (mode & CPU_ATTN_I8_PV) && cpu_attn_int_ok(a);
    if (q && pv) {
        ATTN_INT_BODY(true, true);
    } else if (q) {
        ATTN_INT_BODY(true, false);
    } else if (pv) {
        ATTN_INT_BODY(false, true);
    } else {
        cpu_avx512_attn_rows(a, scratch);
    }
}

#else

// Not x86-64: never called, but cpu_kernels.c tells the kernel sets apart by these addresses.
void cpu_avx512_attn_rows(const cpu_attn_args *a, float *scratch) {
    (void)a, (void)scratch;
}
void cpu_avx512vnni_attn_rows(const cpu_attn_args *a, float *scratch) {
    (void)a, (void)scratch;
}

#endif
